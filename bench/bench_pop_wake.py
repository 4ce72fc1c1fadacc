"""Blocking pops over keys on two masters, through the proxy, while they wait and as they
wake (proxy/routing/keywake.py).

Starts a 3-master cluster (real redis-servers, or our nodes with ``--nodes bundled``; no
replicas) and the proxy on free loopback ports; with ``--before DIR`` also the proxy of
another source tree (``git archive REV | tar -x -C DIR``), measured in the same run, one
proxy at a time. For each pop (``bzpopmin``, ``blpop``) and proxy:

- ``wake``: one client's pop over two empty keys on two masters, given time to wait
  (``--settle-s``), then an element pushed straight to the second key's master; the time
  from that push to the pop's reply (median and 90th percentile over ``--wakes``).
- ``idle``: ``--waiters`` clients each popping over two keys of their own on two masters,
  nothing arriving for ``--idle-s``: the masters' and the proxy's CPU time per second
  meanwhile, the masters' connections and blocked clients; then every pop is answered.
- ``crowd``: ``--crowd`` clients popping in a loop over the same two keys, ``--elements``
  elements pushed one at a time straight to the second key's master, each once the one
  before is taken: the masters' and the proxy's CPU time per element.

    .venv/bin/python bench/bench_pop_wake.py [--nodes real] [--before DIR] [--wakes 30]
        [--waiters 50] [--idle-s 5]

Everything started is stopped by PID.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_crossslot import spread_keys  # noqa: E402
from bench.bench_proxy import cpu_ns, start_proxy  # noqa: E402
from slotgate.protocol.slots import key_slot  # noqa: E402
from tests.support import (  # noqa: E402
    ManagedProcess,
    RawClient,
    create_cluster,
    redis_server,
    slotgate_node,
)

POPS = {"bzpopmin": ("BZPOPMIN", ["ZADD", "1", "x"]), "blpop": ("BLPOP", ["RPUSH", "x"])}


def push(owner: dict[str, RawClient], pop: str, key: str) -> None:
    cmd, args = POPS[pop]
    owner[key].call(args[0], key, *args[1:])


def wake(proxy: ManagedProcess, owner: dict[str, RawClient], pop: str, a: str, b: str,
         rounds: int, settle_s: float) -> list[float]:
    out = []
    with RawClient(proxy.port) as c:
        for _ in range(rounds):
            c.send(POPS[pop][0], a, b, "10")
            time.sleep(settle_s)
            t0 = time.perf_counter()
            push(owner, pop, b)
            reply = c.read(15)
            out.append((time.perf_counter() - t0) * 1e3)
            assert reply[:1] == b"*", reply
    return out


def info_int(c: RawClient, section: str, field: str) -> int:
    for line in c.call("INFO", section).split(b"\r\n"):
        if line.startswith(field.encode() + b":"):
            return int(line.split(b":")[1])
    return -1


def idle(proxy: ManagedProcess, owner: dict[str, RawClient], masters: list[RawClient],
         node_pids: list[int], pop: str, pairs: list[tuple[str, str]], idle_s: float,
         settle_s: float) -> dict[str, float]:
    clients = [RawClient(proxy.port) for _ in pairs]
    try:
        for c, (a, b) in zip(clients, pairs, strict=True):
            c.send(POPS[pop][0], a, b, "0")
        time.sleep(settle_s + 1.0)
        n0, p0, t0 = sum(cpu_ns(p) for p in node_pids), cpu_ns(proxy.pid), time.monotonic()
        time.sleep(idle_s)
        n1, p1, t1 = sum(cpu_ns(p) for p in node_pids), cpu_ns(proxy.pid), time.monotonic()
        got = {"masters_cpu_ms_per_s": (n1 - n0) / 1e6 / (t1 - t0),
               "proxy_cpu_ms_per_s": (p1 - p0) / 1e6 / (t1 - t0),
               "connections": sum(info_int(m, "clients", "connected_clients") for m in masters),
               "blocked": sum(info_int(m, "clients", "blocked_clients") for m in masters)}
        for _, b in pairs:
            push(owner, pop, b)
        for c in clients:
            assert c.read(15)[:1] == b"*"
        return got
    finally:
        for c in clients:
            c.close()


def crowd(proxy: ManagedProcess, owner: dict[str, RawClient], node_pids: list[int], pop: str,
          a: str, b: str, waiters: int, elements: int) -> tuple[float, float]:
    """Masters' and proxy's CPU µs per element taken by a crowd waiting on (a, b)."""
    taken = threading.Semaphore(0)
    stop = threading.Event()

    def consumer() -> None:
        with RawClient(proxy.port) as c:
            while not stop.is_set():
                if c.call(POPS[pop][0], a, b, "0.5")[:2] not in (b"*-", b"_\r"):
                    taken.release()

    threads = [threading.Thread(target=consumer) for _ in range(waiters)]
    for th in threads:
        th.start()
    time.sleep(1.0)
    n0, p0 = sum(cpu_ns(p) for p in node_pids), cpu_ns(proxy.pid)
    for _ in range(elements):
        push(owner, pop, b)
        assert taken.acquire(timeout=15)
    n1, p1 = sum(cpu_ns(p) for p in node_pids), cpu_ns(proxy.pid)
    stop.set()
    for th in threads:
        th.join(5)
    return (n1 - n0) / elements / 1e3, (p1 - p0) / elements / 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", choices=("real", "bundled"), default="real")
    ap.add_argument("--before", default="", help="another revision's source tree")
    ap.add_argument("--wakes", type=int, default=30)
    ap.add_argument("--waiters", type=int, default=50)
    ap.add_argument("--idle-s", type=float, default=5.0)
    ap.add_argument("--settle-s", type=float, default=0.3)
    ap.add_argument("--pops", default="bzpopmin,blpop")
    ap.add_argument("--crowd", type=int, default=20)
    ap.add_argument("--elements", type=int, default=200)
    args = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-popwake-"))
    make = redis_server if args.nodes == "real" else slotgate_node
    nodes = [make(workdir, cluster=True) for _ in range(3)]
    proxies: dict[str, ManagedProcess] = {}
    masters: list[RawClient] = []
    try:
        for node in nodes:
            node.start()
        create_cluster(nodes, replicas=0)
        proxies["after"] = start_proxy(workdir, nodes[0].port, [])
        if args.before:
            proxies["before"] = start_proxy(workdir, nodes[0].port, [], args.before)
        owner_of: dict[int, int] = {}
        for lo, hi, master, *_ in nodes[0].client().execute_command("CLUSTER", "SLOTS"):
            for s in range(lo, hi + 1):
                owner_of[s] = int(master[1])
        keys = spread_keys(3 * (args.waiters + 1), owner_of)
        by_port = {n.port: RawClient(n.port) for n in nodes}
        masters = list(by_port.values())
        owner = {k: by_port[owner_of[key_slot(k.encode())]] for k in keys}
        pairs = [(keys[3 * i], keys[3 * i + 1]) for i in range(args.waiters + 1)]
        node_pids = [n.pid for n in nodes]
        print(f"nodes: {args.nodes}; wake: {args.wakes} pops, ms from the push to the reply; "
              f"idle: {args.waiters} pops waiting {args.idle_s} s")
        for pop in args.pops.split(","):
            for name, proxy in proxies.items():
                ms = sorted(wake(proxy, owner, pop, *pairs[0], args.wakes, args.settle_s))
                got = idle(proxy, owner, masters, node_pids, pop, pairs[1:], args.idle_s,
                           args.settle_s)
                print(f"{pop:<9} {name:<7} wake median {statistics.median(ms):6.2f} ms, "
                      f"p90 {ms[int(len(ms) * 0.9)]:6.2f} ms | idle: masters "
                      f"{got['masters_cpu_ms_per_s']:6.1f} ms CPU/s, proxy "
                      f"{got['proxy_cpu_ms_per_s']:6.1f} ms CPU/s, connections "
                      f"{got['connections']:.0f}, blocked {got['blocked']:.0f}", flush=True)
                if args.crowd:
                    ncpu, pcpu = crowd(proxy, owner, node_pids, pop, *pairs[0], args.crowd,
                                       args.elements)
                    print(f"{pop:<9} {name:<7} crowd of {args.crowd}: masters {ncpu:7.1f} µs "
                          f"CPU, proxy {pcpu:7.1f} µs CPU per element", flush=True)
    finally:
        for c in masters:
            c.close()
        for proxy in proxies.values():
            proxy.stop()
        for node in nodes:
            node.stop()


if __name__ == "__main__":
    main()
