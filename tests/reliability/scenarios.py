"""Fault scenarios on a cluster in network namespaces (netcluster.py), under a recorded
workload, judged by the history checker (tests/history.py). One run = one scenario against one
kind of node ("ours", "real") through one kind of client ("proxy": plain redis-py through the
slotgate proxy; "cluster": redis-py's cluster client talking to the nodes), giving a
:class:`Outcome`, one row of docs/RELIABILITY.md.

The workload: four client threads in the ``client`` namespace, each the only writer of its
own registers (SET of unique values, GET) and counters (INCR, GET), keys spread over every
shard. The clients never retry on their own (a retried INCR could count twice): every error
is in the history. The prober (``ctl`` namespace) writes every 100 ms to each node directly, in a slot of
that node's original shard, without following redirects: who accepted writes, and when, is what
the dual-master check reads. After the fault heals and the cluster is healthy again (same three
masters, every replica in sync, every node agreeing), every key is read once more: the final
state the lost writes are judged on.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from slotgate.protocol.slots import key_slot
from tests.history import Op, Recorder, Report, Status, check
from tests.netns import Network
from tests.reliability.netcluster import (
    BUS_PORT,
    NODE_PORT,
    NODES,
    PROXY_PORT,
    SLOW_DELAY_MS,
    NetCluster,
)
from tests.support import wait_until

REGISTERS = [f"r:{i}" for i in range(16)]
COUNTERS = [f"c:{i}" for i in range(6)]
WORKERS = 4
OP_PAUSE_S = 0.01
PROBE_EVERY_S = 0.1
WAIT_MS = 1000
LOSS_PERCENT = 30
# the proxy's errors for a write in flight, and for a durable write its replicas did not
# acknowledge (it ran on the master)
UNKNOWN_FATE = ("may or may not have been applied", "slotgate: write applied on")
MODES = ("proxy", "cluster")
PROXY_YAML = 'backend:\n  command_timeout: "2s"\nretry:\n  deadline: "3s"\n'
PROXY_DURABLE_YAML = f'writes:\n  durable_writes: 1\n  durable_timeout: "{WAIT_MS}ms"\n'


class NotReplicated(Exception):
    """A durable write's WAIT counted no replica: applied on the master, maybe not kept."""


def judge(exc: BaseException) -> Status:
    """A refusal (an error reply) means the command did not run; a timeout or a lost
    connection, the proxy's own unknown-fate error and a durable write no replica
    acknowledged mean it may have."""
    if isinstance(exc, redis.ResponseError) and not any(s in str(exc) for s in UNKNOWN_FATE):
        return "fail"
    return "info"


@dataclass
class Outcome:
    scenario: str
    kind: str
    mode: str
    lost: int = 0
    stale: int = 0
    never_written: int = 0
    dual_windows: int = 0
    dual_after_heal: int = 0
    dual_s: float = 0.0
    refused_after_s: float | None = None  # the cut-off master's first refused write after the cut
    refusal: str = ""  # that refusal's error (its first word: CLUSTERDOWN, NOREPLICAS, MISCONF ...)
    accepted_until_s: float | None = None  # the victim's last acknowledged probe write, from the cut
    probe_timeouts: int = 0  # probe writes to the victim of unknown outcome between cut and heal
    failover: bool = False  # the cut-off master is a replica once healed
    recovery_s: float = 0.0  # longest time a key went without an acknowledged operation
    healthy_after_heal_s: float = 0.0
    acknowledged: int = 0
    errors: int = 0  # refused + unknown fate
    not_linearizable: int = 0
    slow_p50_ms: float | None = None  # acknowledged operations on the victim's keys, during the fault
    others_p50_ms: float | None = None  # ... on the other shards' keys
    others_p99_ms: float | None = None
    notes: list[str] = field(default_factory=list)

    def row(self) -> dict[str, Any]:
        return asdict(self)


class Workload:
    """The client threads and the prober, recording into one history."""

    def __init__(self, cluster: NetCluster, mode: str, seed: int = 1,
                 durable: bool = False) -> None:
        self.cluster = cluster
        self.mode = mode
        self.durable = durable
        self.rec = Recorder()
        self.stop = threading.Event()
        self.seed = seed
        self.threads: list[threading.Thread] = []
        self.probe_keys = self._probe_keys()

    def _probe_keys(self) -> dict[str, str]:
        """node -> a key in a slot of the node's shard (as the cluster is at the start)."""
        out = {}
        for master, replicas in self.cluster.masters().items():
            slots = self.cluster.nodes_view(master)
            mine = next(f for f in slots if "myself" in f[2])
            first = int(mine[8].split("-")[0])
            key = next(k for k in (f"probe:{i}" for i in range(100_000)) if key_slot(k.encode()) == first)
            for node in (master, *replicas):
                out[node] = f"{{{key}}}:{node}"
        return out

    def client(self) -> Any:
        net = self.cluster.net
        if self.mode == "proxy":
            return redis.Redis(host=net.address("proxy"), port=PROXY_PORT, socket_timeout=5,
                               socket_connect_timeout=2, retry=Retry(NoBackoff(), 0))
        return redis.RedisCluster(host=net.address("n1"), port=NODE_PORT, socket_timeout=1,
                                  socket_connect_timeout=1, retry=Retry(NoBackoff(), 0),
                                  require_full_coverage=False)

    def start(self) -> None:
        net = self.cluster.net
        for p in range(WORKERS):
            self.threads.append(net.thread_in("client", partial(self._work, p), f"w{p}"))
        self.threads.append(net.thread_in("ctl", self._probe, "prober"))
        for t in self.threads:
            t.start()

    def finish(self) -> list[Op]:
        self.stop.set()
        for t in self.threads:
            t.join(30)
        return self.rec.snapshot()

    def _work(self, p: int) -> None:
        rng = random.Random(self.seed * 100 + p)
        registers = REGISTERS[p::WORKERS]
        counters = COUNTERS[p::WORKERS]
        c = self.client()
        seq = 0
        while not self.stop.is_set():
            roll = rng.random()
            if roll < 0.5:
                key = rng.choice(registers)
                seq += 1
                value = f"{p}-{seq}"
                self.rec.run(p, "write", key, value, self._write(c, "SET", key, value), judge)
            elif roll < 0.8 or not counters:
                key = rng.choice(registers + counters)
                self.rec.run(p, "read", key, None, partial(c.get, key), judge)
            else:
                key = rng.choice(counters)
                self.rec.run(p, "incr", key, None, self._write(c, "INCR", key), judge)
            time.sleep(OP_PAUSE_S)
        c.close()

    def _write(self, c: Any, *command: str) -> Callable[[], object]:
        """The write; when durable, followed by WAIT 1 on the key's master (cluster client),
        and acknowledged only if a replica has it (the proxy does so itself: durable_writes)."""
        if not self.durable or self.mode == "proxy":
            return partial(c.execute_command, *command)

        def durable() -> object:
            reply = c.execute_command(*command)
            node = c.get_node_from_key(command[1])
            if c.execute_command("WAIT", 1, WAIT_MS, target_nodes=node) < 1:
                raise NotReplicated(command[1])
            return reply
        return durable

    def _probe(self) -> None:
        net = self.cluster.net
        conns = {n: redis.Redis(host=net.address(n), port=NODE_PORT, socket_timeout=0.5,
                                socket_connect_timeout=0.5) for n in NODES}
        while not self.stop.is_set():
            for node, key in self.probe_keys.items():
                slot = str(key_slot(key.encode()))
                self.rec.run(99, "probe", slot, node, partial(conns[node].set, key, "1"), judge,
                             node=node)
            time.sleep(PROBE_EVERY_S)
        for c in conns.values():
            c.close()


def final_state(cluster: NetCluster) -> dict[str, object]:
    """Every key, read on the healed cluster (retried while a node still catches up)."""
    def read() -> dict[str, object]:
        c = redis.RedisCluster(host=cluster.net.address("n1"), port=NODE_PORT, socket_timeout=5)
        try:
            return {k: c.get(k) for k in REGISTERS + COUNTERS}
        finally:
            c.close()
    return wait_until(lambda: cluster.in_ctl(read), 60, "the final read",
                      ignore=(redis.RedisError,), interval_s=0.5)


def percentile_ms(latencies_s: list[float], pct: int) -> float | None:
    if not latencies_s:
        return None
    ordered = sorted(latencies_s)
    return round(ordered[min(len(ordered) - 1, len(ordered) * pct // 100)] * 1000, 1)


def longest_gap_s(ops: list[Op]) -> float:
    """The longest time one key went without an acknowledged operation while it was tried."""
    by_key: dict[str, list[float]] = {}
    for op in ops:
        if op.kind != "probe" and op.status == "ok":
            by_key.setdefault(op.key, []).append(op.end_s)
    gaps = [b - a for times in map(sorted, by_key.values())
            for a, b in zip(times, times[1:], strict=False)]
    return max(gaps, default=0.0)


# -- the faults ---------------------------------------------------------------------------------
@dataclass
class Fault:
    name: str
    describe: str
    apply: Callable[[NetCluster, str], None]  # (cluster, victim master)
    hold_s: float  # how long the fault stays
    extra: tuple[str, ...] = ()  # node directives
    expect_failover: bool | None = True  # None: either may happen (Redis' own outcome varies)
    slow: bool = False  # the victim is made slow: started behind a relay if netem is missing
    modes: tuple[str, ...] = ("proxy", "cluster")  # the clients it means something for
    durable: bool = False  # every write followed by WAIT 1 (acknowledged once a replica has it)
    small_disk: bool = False  # the victim's directory is a small tmpfs
    after_heal: Callable[[NetCluster], None] | None = None  # once healed, before the wait


def _isolate(cluster: NetCluster, victim: str) -> None:
    cluster.net.cut([victim], [n for n in NODES if n != victim])


def _proxy_minority(cluster: NetCluster, victim: str) -> None:
    cluster.net.cut([victim, "proxy"], [n for n in NODES if n != victim])


def _two_masters(cluster: NetCluster, victim: str) -> None:
    other = sorted(cluster.masters())[1]
    for v in (victim, other):
        cluster.net.cut([v], [n for n in NODES if n != v])


def _cascade(cluster: NetCluster, victim: str) -> None:
    for node in NODES:
        cluster.restart(node)
        cluster.wait_healthy(120)


RESHARD_SLOTS = 1000
RESHARD_RATE = 100  # slots a second at most: the move takes 10 s or more, the cut comes 1 s in


def _reshard_then_cut(which: str) -> Callable[[NetCluster, str], None]:
    """A reshard from the victim to the next master, then the source (or the target) cut off
    from every other node and from the reshard's own namespace while it runs: its replica is
    elected, the reshard fails (or is stopped, see NetCluster.finish_reshard)."""
    def apply(cluster: NetCluster, victim: str) -> None:
        target = sorted(cluster.masters())[1]
        cluster.start_reshard(victim, target, RESHARD_SLOTS, RESHARD_RATE)
        time.sleep(1.0)  # slots are moving now (the scenario)
        cut = victim if which == "source" else target
        cluster.net.cut([cut], [*(n for n in NODES if n != cut), "ctl"])
    return apply


def _fix_slots(cluster: NetCluster) -> None:
    cluster.finish_reshard()


def _fill_disk(cluster: NetCluster, victim: str) -> None:
    cluster.fill_disk(victim)


def _restart_proxy(cluster: NetCluster, victim: str) -> None:
    cluster.restart_proxy()


def _slow(cluster: NetCluster, victim: str) -> None:
    cluster.slow(victim, True)


def _lossy(cluster: NetCluster, victim: str) -> None:
    for n in NODES:
        if n != victim:
            cluster.net.lose(victim, n, LOSS_PERCENT)
            cluster.net.lose(n, victim, LOSS_PERCENT)


def _bus_one_way(cluster: NetCluster, victim: str) -> None:
    for n in NODES:
        if n != victim:
            cluster.net.cut_link(victim, n, BUS_PORT)


MIN_REPLICAS = ("--min-replicas-to-write", "1", "--min-replicas-max-lag", "1")
FAULTS = {
    f.name: f for f in (
        Fault("minority-master", "a master cut off from every other node (clients still "
              "reach it) for 8 s, then healed", _isolate, 8.0),
        Fault("minority-master-minrep", "the same with min-replicas-to-write 1 "
              "(min-replicas-max-lag 1)", _isolate, 8.0, MIN_REPLICAS),
        Fault("minority-master-wait", "the same with min-replicas-to-write 1 and durable "
              "writes: acknowledged only once the replica has it (the cluster client follows "
              f"every write with WAIT 1 {WAIT_MS} on its master; the proxy runs with "
              "writes.durable_writes: 1)", _isolate, 8.0, MIN_REPLICAS, durable=True),
        Fault("short-cut", "a master cut off for half of node_timeout (no failover due), "
              "then healed", _isolate, 1.0, (), False),
        Fault("bus-one-way", "a master's own links to every other node's bus cut (theirs to "
              "it work) for 8 s", _bus_one_way, 8.0, (), False),
        Fault("lossy-links", f"{LOSS_PERCENT}% of the packets between a master and every "
              "other node dropped (both ways; clients unaffected) for 8 s", _lossy, 8.0, (),
              None),
        Fault("slow-node", f"a master answering {SLOW_DELAY_MS} ms late (its replies and bus "
              "messages; netem, or a relay in front of it where the kernel has no netem) "
              "for 8 s", _slow, 8.0, (), False, slow=True),
        Fault("two-masters", "two of the three masters each cut off from every other node "
              "for 8 s (no majority of masters is left to elect replacements while it lasts)",
              _two_masters, 8.0, (), None),
        Fault("cascading-restarts", "every node in turn stopped (SIGTERM) and started again "
              "under load, the next once the cluster is healthy again (appendonly yes, "
              "appendfsync everysec)", _cascade, 0.0, ("--appendonly", "yes"), None),
        Fault("disk-full", "a master's data directory (appendonly yes, on a 4 MB tmpfs of "
              "its own) filled up for 6 s, then space freed", _fill_disk, 6.0,
              ("--appendonly", "yes"), False, small_disk=True),
        Fault("proxy-minority", "the proxy cut off together with a master from every other "
              "node (the clients still reach the proxy) for 8 s, then healed",
              _proxy_minority, 8.0, modes=("proxy",)),
        Fault("reshard-source-failover", f"{RESHARD_SLOTS} slots moving from a master to "
              f"another (at most {RESHARD_RATE} a second, `slotgate cluster reshard`), the "
              "source cut off from every other node and from the reshard 1 s into the move, "
              "for 8 s (its replica is elected, "
              "the move fails); once healed, `slotgate cluster fix` closes the open slots "
              "(durable writes)", _reshard_then_cut("source"), 8.0, (), None, durable=True,
              after_heal=_fix_slots),
        Fault("reshard-target-failover", "the same with the target cut off",
              _reshard_then_cut("target"), 8.0, (), None, durable=True, after_heal=_fix_slots),
        Fault("proxy-restart", "the proxy stopped (SIGTERM: it drains) and started again "
              "under load; its clients reconnect", _restart_proxy, 2.0, (), False,
              modes=("proxy",)),
    )
}



def _durable(base: str) -> Fault:
    f = FAULTS[base]
    return replace(f, name=f"{base}-durable", extra=(*f.extra, *MIN_REPLICAS), durable=True,
                   describe=f"`{base}` with min-replicas-to-write 1 and durable writes (as "
                   "`minority-master-wait`)")


# every partition scenario again with the defences on: nothing acknowledged may be lost
FAULTS.update((f.name, f) for f in map(_durable, (
    "short-cut", "bus-one-way", "lossy-links", "two-masters", "proxy-minority")))


def refusal_name(error: str) -> str:
    """An error's code (NOREPLICAS, MISCONF ...), or redis-py's exception class where it took
    the code off the text (ClusterDownError: "The cluster is down")."""
    cls, _, text = error.partition(": ")
    word = text.split(" ", 1)[0]
    return word if word.isupper() else cls


def judge_refusal(out: Outcome, probes: list[Op], cut_s: float) -> None:
    """From the prober's writes to the victim between the cut and the heal: the first one it
    refused (and with which error), the last one it acknowledged (its completion: the victim
    accepted it by then), and how many timed out (a refusal hidden behind a timeout shows
    only at the next probe that gets an answer)."""
    refused = [op for op in probes if op.status == "fail"]
    if refused:
        first = min(refused, key=lambda op: op.end_s)
        out.refused_after_s = round(first.end_s - cut_s, 2)
        out.refusal = refusal_name(first.error)
    accepted = [op.end_s for op in probes if op.status == "ok"]
    out.accepted_until_s = round(max(accepted) - cut_s, 2) if accepted else None
    out.probe_timeouts = sum(op.status == "info" for op in probes)


def run_scenario(net: Network, workdir: Path, fault: Fault, kind: str, mode: str,
                 node_timeout_ms: int = 2000, settle_s: float = 3.0,
                 hold_s: float | None = None) -> tuple[Outcome, Report]:
    """One run: the cluster started, the workload ``settle_s``, the fault for ``hold_s``
    (the fault's own by default), healed, the workload ``settle_s`` more, the verdict."""
    out = Outcome(fault.name, kind, mode)
    relayed = ("n1",) if fault.slow and not net.netem_available() else ()
    cluster = NetCluster(net, kind, workdir, node_timeout_ms=node_timeout_ms,
                         extra=fault.extra, relayed=relayed,
                         small_disk=("n1",) if fault.small_disk else ())
    try:
        cluster.start()
        if mode == "proxy":
            cluster.start_proxy(PROXY_YAML + (PROXY_DURABLE_YAML if fault.durable else ""))
        victim = sorted(cluster.masters())[0]
        assert victim == "n1" or not (relayed or fault.small_disk), cluster.masters()
        victim_slots = cluster.slots_of(victim)
        load = Workload(cluster, mode, durable=fault.durable)
        load.start()
        try:
            time.sleep(settle_s)  # the workload runs undisturbed first (part of the scenario)
            cut_s = time.monotonic()
            with net.batch():  # every rule of the fault at once
                fault.apply(cluster, victim)
            time.sleep(hold_s or fault.hold_s)  # the fault lasts this long (the scenario)
            cluster.heal()
            heal_s = time.monotonic()
            if fault.after_heal is not None:
                fault.after_heal(cluster)
            out.healthy_after_heal_s = round(cluster.wait_healthy(90), 2)
            time.sleep(settle_s)  # the workload runs on the healed cluster (the scenario)
        finally:
            ops = load.finish()
        final = final_state(cluster)
        role_after = cluster.role(victim)
    finally:
        cluster.close()
    rep = check(ops, final, COUNTERS)
    out.lost, out.stale = len(rep.lost), len(rep.stale)
    out.never_written = len(rep.never_written)
    out.dual_windows = len(rep.dual)
    out.dual_after_heal = sum(w.end_s > heal_s for w in rep.dual)
    out.dual_s = round(sum(w.duration_s for w in rep.dual), 2)
    judge_refusal(out, [op for op in ops if op.kind == "probe" and op.node == victim
                        and cut_s <= op.start_s < heal_s], cut_s)
    out.failover = role_after == "slave"
    out.recovery_s = round(longest_gap_s(ops), 2)
    out.acknowledged = rep.acknowledged
    out.errors = rep.failed + rep.unknown
    out.not_linearizable = len(rep.not_linearizable)
    during = [op for op in ops if op.kind != "probe" and op.status == "ok"
              and cut_s <= op.start_s and op.end_s < heal_s]
    slow = [op.end_s - op.start_s for op in during if key_slot(op.key.encode()) in victim_slots]
    others = [op.end_s - op.start_s for op in during
              if key_slot(op.key.encode()) not in victim_slots]
    out.slow_p50_ms = percentile_ms(slow, 50)
    out.others_p50_ms = percentile_ms(others, 50)
    out.others_p99_ms = percentile_ms(others, 99)
    if rep.unknown_linearizable:
        out.notes.append(f"linearizability not settled for {len(rep.unknown_linearizable)} keys")
    return out, rep
