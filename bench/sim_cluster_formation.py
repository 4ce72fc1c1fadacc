"""Cluster formation by gossip on the node's own engine, with no CPU cost: a discrete-event run.

The same 10-node formation as bench_cluster_formation.py (1/N of the slots and its own config
epoch each, N-1 CLUSTER MEETs to the first node), but the nodes are node/cluster/gossip.py
engines in one process: a message arrives ``--latency-ms`` after it is sent, a connection is up
two latencies after the cron asks for it (then the connect handler runs), each node's 100 ms
cron has its own random phase, and nothing costs time. What it measures is the schedule alone:
how long the protocol needs when CPU and the event loop play no part.

``--phases`` sets where each node's once-a-second random ping (every 10th cron run) falls:
``independent`` (every node its own random phase, as for nodes started at unrelated times) or
``clustered`` (all within 0.2 s, at a random phase relative to the MEET, as for redis-server
nodes started one after another in a few ms each).

    .venv/bin/python bench/sim_cluster_formation.py [--trials 300] [--phases independent]
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import random
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from slotgate.node.cluster import bus  # noqa: E402
from slotgate.node.cluster.gossip import Engine, FixedSettings, Hooks, Link  # noqa: E402
from slotgate.node.cluster.state import ClusterState, Node, random_name  # noqa: E402

CLOCK_BASE_MS = 1_700_000_000_000  # unix ms at simulated time 0 (gossip carries seconds)
CRON_S = 0.1


class Sim:
    """One formation: engines, an event queue, links that deliver after a latency."""

    def __init__(self, seed: int, count: int, latency_s: float, phases: str) -> None:
        self.rng = random.Random(seed)
        self.now_s = 0.0
        self.latency_s = latency_s
        self.events: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self.seq = itertools.count()
        self.by_cport: dict[int, Engine] = {}
        self.peer: dict[Link, tuple[Engine, Link]] = {}
        self.engines = [self._add(20000 + i) for i in range(count)]
        base_iteration = self.rng.randrange(10)
        step = 16384 // count
        for i, e in enumerate(self.engines):
            last = 16383 if i == count - 1 else (i + 1) * step - 1
            for slot in range(i * step, last + 1):
                e.st.add_slot(e.st.myself, slot)
            e.st.myself.config_epoch = e.st.current_epoch = i + 1
            e.iteration = (base_iteration + (2 * i) // count if phases == "clustered"
                           else self.rng.randrange(10))
            self.at(self.rng.random() * CRON_S, self._cron, e)
        first = self.engines[0].st.myself
        for e in self.engines[1:]:
            e.start_handshake("127.0.0.1", first.port, first.cport)

    def clock_ms(self) -> int:
        return CLOCK_BASE_MS + int(self.now_s * 1000)

    def at(self, t: float, fn: Callable[..., None], *args: Any) -> None:
        heapq.heappush(self.events, (t, next(self.seq), fn, args))

    def _add(self, port: int) -> Engine:
        me = Node(random_name(), bus.F_MYSELF | bus.F_MASTER, self.clock_ms())
        me.ip, me.port, me.cport = "127.0.0.1", port, port + 10000
        hooks = Hooks()
        e = Engine(ClusterState(me, self.clock_ms), FixedSettings(2000, port, port + 10000), hooks,
                   self.clock_ms, random.Random(self.rng.random()))
        hooks.connect = lambda link: self.at(self.now_s + 2 * self.latency_s, self._up, e, link)
        hooks.close = self._close
        self.by_cport[me.cport] = e
        return e

    def _wake(self, link: Link) -> Callable[[], None]:
        def wake() -> None:
            dst = self.peer.get(link)
            while link.out and dst is not None:
                self.at(self.now_s + self.latency_s, self._deliver, dst[0], dst[1],
                        link.out.pop(0))
        return wake

    def _up(self, src: Engine, link: Link) -> None:
        if link.closed or link.node is None:
            return
        dst = self.by_cport[link.node.cport]
        inbound = dst.accept("127.0.0.1", "127.0.0.1")
        link.local_ip = "127.0.0.1"
        self.peer[link], self.peer[inbound] = (dst, inbound), (src, link)
        link.wake, inbound.wake = self._wake(link), self._wake(inbound)
        link.wake()
        src.on_link_connected(link)

    def _close(self, link: Link) -> None:
        other = self.peer.pop(link, None)
        if other is not None:
            self.peer.pop(other[1], None)
            other[0].on_link_closed(other[1])

    def _deliver(self, e: Engine, link: Link, data: bytes) -> None:
        if not link.closed:
            e.on_message(link, data)
            e.before_sleep()

    def _cron(self, e: Engine) -> None:
        e.cron()
        e.before_sleep()
        self.at(self.now_s + CRON_S, self._cron, e)

    def converged(self) -> bool:
        """Every node knows all nodes (none in handshake) with the same slot owners."""
        views = set()
        for e in self.engines:
            nodes = e.st.nodes.values()
            if len(nodes) != len(self.engines) or any(n.in_handshake for n in nodes):
                return False
            views.add(tuple(sorted((n.name, tuple(n.slot_tokens())) for n in nodes
                                   if n.numslots)))
        return len(views) == 1

    def run(self, limit_s: float = 30.0, check_every_s: float = 0.005) -> float | None:
        checked = -1.0
        while self.events:
            t, _, fn, args = heapq.heappop(self.events)
            self.now_s = t
            fn(*args)
            if t - checked >= check_every_s:
                checked = t
                if self.converged():
                    return t
            if t > limit_s:
                return None
        return None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=10)
    ap.add_argument("--trials", type=int, default=300)
    ap.add_argument("--latency-ms", type=float, default=0.5)
    ap.add_argument("--phases", choices=("independent", "clustered"), default="independent")
    args = ap.parse_args()
    times = [Sim(seed, args.nodes, args.latency_ms / 1000, args.phases).run()
             for seed in range(args.trials)]
    done = sorted(t for t in times if t is not None)
    print(f"{args.nodes} nodes, {args.phases} phases, latency {args.latency_ms} ms, "
          f"{len(done)}/{args.trials} converged: median {statistics.median(done):.2f} s, "
          f"p10 {done[len(done) // 10]:.2f}, p90 {done[len(done) * 9 // 10]:.2f}, "
          f"min {done[0]:.2f}, max {done[-1]:.2f}")


if __name__ == "__main__":
    main()
