"""Automatic failover with real processes on loopback: kill -9 a master of a 3+3 cluster under
write load, ours and real redis-server side by side; the old master comes back as a replica of
the new one and syncs; every node agrees; ``redis-cli --cluster check`` is clean.

The helpers here are shared by the other tests/node/test_failover_*.py files.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Self

import pytest
import redis
from redis.cluster import RedisCluster

from slotgate.protocol.slots import key_slot
from tests.support import (
    ManagedProcess,
    during,
    redis_cli,
    redis_server,
    start_all,
    start_nodes,
    wait_cluster_ok,
    wait_until,
)

NODE_TIMEOUT_MS = 1500
# The kill -9 test's node timeout. Detection (about node_timeout after the link drops, then
# gossip of the reports) plus the election delay (500 + rand(0..499) ms) end about 1.1-1.6 s
# after node_timeout, so node_timeout + 2 s leaves 0.4 s for a loaded machine; with 1500 ms
# the tail of that sum reached 3.50 s once in a full suite run.
KILL9_TIMEOUT_MS = 1000
KINDS = ("ours", "real")


# -- helpers -------------------------------------------------------------------------------------
def wait_for(pred: Callable[[], object], timeout_s: float, what: str,
             interval_s: float = 0.05) -> object:
    """Poll ``pred`` until truthy (a node that does not answer counts as not yet)."""
    return wait_until(pred, timeout_s, what, interval_s, ignore=(redis.RedisError, OSError))


def start_cluster_nodes(kind: str, workdir: Path, count: int, timeout_ms: int = NODE_TIMEOUT_MS,
                        extra: Sequence[str] = ()) -> list[ManagedProcess]:
    """``count`` started cluster-enabled nodes of ``kind`` (stopped again if one fails)."""
    args = ["--cluster-node-timeout", str(timeout_ms), *extra]
    if kind == "ours":
        return start_nodes(workdir, count, extra=args)
    return start_all([redis_server(workdir, cluster=True, extra=args) for _ in range(count)])


def create(nodes: Sequence[ManagedProcess], replicas: int = 1) -> None:
    out = redis_cli("--cluster", "create", *[f"127.0.0.1:{n.port}" for n in nodes],
                    "--cluster-replicas", str(replicas), "--cluster-yes", timeout_s=120)
    assert "[OK] All 16384 slots covered." in out.stdout, out.stdout + out.stderr
    wait_cluster_ok(nodes)


def formed_cluster(kind: str, workdir: Path, procs: list[ManagedProcess],
                   timeout_ms: int = NODE_TIMEOUT_MS,
                   extra: Sequence[str] = ()) -> list[ManagedProcess]:
    """Six nodes of ``kind`` (added to ``procs``, to be stopped) as 3 masters with one replica
    each, every replica in sync and every node agreeing on the configuration."""
    nodes = start_cluster_nodes(kind, workdir, 6, timeout_ms, extra)
    procs.extend(nodes)
    create(nodes)
    wait_for(lambda: replicas_synced(nodes), 30, "replicas in sync")
    wait_agree(nodes)
    return nodes


def nodes_lines(n: ManagedProcess) -> list[list[str]]:
    text = n.client(socket_timeout=3).execute_command("CLUSTER", "NODES").decode()
    return [line.split() for line in text.splitlines()]


def myid(n: ManagedProcess) -> str:
    return n.client(socket_timeout=3).execute_command("CLUSTER", "MYID").decode()


def role_of(n: ManagedProcess) -> tuple[str, str]:
    """(master|slave, master id or '-') as ``n`` sees itself."""
    for f in nodes_lines(n):
        if "myself" in f[2].split(","):
            return ("slave" if "slave" in f[2].split(",") else "master", f[3])
    raise AssertionError("no myself line")


def view(n: ManagedProcess) -> list[tuple[str, ...]]:
    """What must agree across nodes: id, role, master, epoch, slots (not myself/fail flags)."""
    out = []
    for f in nodes_lines(n):
        flags = f[2].split(",")
        role = "slave" if "slave" in flags else "master"
        out.append((f[0], role, f[3], f[6], *sorted(t for t in f[8:] if not t.startswith("["))))
    return sorted(out)


def wait_agree(nodes: Sequence[ManagedProcess], timeout_s: float = 30.0) -> None:
    def same() -> bool:
        return len({tuple(view(n)) for n in nodes}) == 1

    wait_for(same, timeout_s, "all nodes to agree in CLUSTER NODES", 0.2)


def replicas_synced(nodes: Sequence[ManagedProcess]) -> bool:
    for n in nodes:
        info = n.client(socket_timeout=3).info("replication")
        if info["role"] == "slave" and (info.get("master_link_status") != "up"
                                        or info.get("master_sync_in_progress")):
            return False
    return True


def shard_of(nodes: Sequence[ManagedProcess], master: ManagedProcess) -> list[ManagedProcess]:
    """The replicas of ``master`` (by node id, as ``master`` sees them)."""
    mid = myid(master)
    ids = {f[0] for f in nodes_lines(master) if f[3] == mid}
    return [n for n in nodes if n is not master and myid(n) in ids]


def first_slot(n: ManagedProcess) -> int:
    for f in nodes_lines(n):
        if "myself" in f[2].split(",") and len(f) > 8:
            return int(f[8].split("-")[0])
    raise AssertionError("node has no slots")


def key_in_slot(slot: int, prefix: str = "k") -> str:
    i = 0
    while True:
        k = f"{prefix}{i}"
        if key_slot(k.encode()) == slot:
            return k
        i += 1


def check_clean(entry: ManagedProcess) -> str:
    out = redis_cli("--cluster", "check", f"127.0.0.1:{entry.port}", check=False)
    text = out.stdout + out.stderr
    assert "[OK] All nodes agree about slots configuration." in text, text
    assert "[OK] All 16384 slots covered." in text, text
    assert "[ERR]" not in text and "[WARNING]" not in text, text
    return text


def stop_all(nodes: Sequence[ManagedProcess]) -> None:
    for n in nodes:
        n.stop()


class BackgroundWriter:
    """Bounded background writes through redis-py's RedisCluster: ``write(rc, i)`` for i = 0,
    1, ... until told to stop or ``max_s`` passes. ``write`` records its own results and never
    raises."""

    socket_timeout_s = 1.0

    def __init__(self, port: int, max_s: float) -> None:
        self.port = port
        self.max_s = max_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def write(self, rc: RedisCluster, i: int) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        rc = RedisCluster(host="127.0.0.1", port=self.port, socket_timeout=self.socket_timeout_s,
                          socket_connect_timeout=1)
        try:
            for i, _ in enumerate(during(self.max_s, interval_s=0)):
                if self._stop.is_set():
                    break
                self.write(rc, i)
        finally:
            rc.close()


class Writer(BackgroundWriter):
    """Overwrites 500 keys in turn; counts acknowledged writes (last value per key) and
    errors."""

    def __init__(self, port: int, max_s: float = 120.0) -> None:
        super().__init__(port, max_s)
        self.acked: dict[str, int] = {}
        self.errors = 0

    def write(self, rc: RedisCluster, i: int) -> None:
        key = f"load:{i % 500}"
        try:
            rc.set(key, i)
            self.acked[key] = i
        except (redis.RedisError, OSError):
            self.errors += 1
            time.sleep(0.05)  # load pacing: back off from a node that is down
        time.sleep(0.002)  # load pacing: a steady write rate, not synchronisation


# -- the scenario ------------------------------------------------------------------------------
def kill9_scenario(kind: str, workdir: Path, procs: list[ManagedProcess]) -> float:
    """Returns the failover time: kill -9 of a master -> its replica acknowledges a write."""
    nodes = formed_cluster(kind, workdir, procs, timeout_ms=KILL9_TIMEOUT_MS)
    victim = nodes[0]
    replica = shard_of(nodes, victim)[0]
    victim_id, replica_id = myid(victim), myid(replica)
    key = key_in_slot(first_slot(victim), "fo")
    assert victim.client().set(key, "before")
    # replicas gossip their offsets: once it is non-zero, CLUSTER SLOTS lists the replica
    wait_for(lambda: replica_id in slots_replicas(nodes[2], victim_id), 20,
             "CLUSTER SLOTS to list the replica")
    with Writer(nodes[1].port) as writer:
        wait_for(lambda: len(writer.acked) > 50, 20, "write load to start")
        direct = replica.client(socket_timeout=1)
        t0 = time.monotonic()
        victim.kill()

        def replica_writes() -> bool:
            try:
                return bool(direct.set(key, "after"))
            except redis.ResponseError:
                return False  # MOVED until promoted

        wait_for(replica_writes, KILL9_TIMEOUT_MS / 1000 + 10, "the replica to accept writes",
                 0.02)
        elapsed = time.monotonic() - t0
    assert role_of(replica) == ("master", "-")
    live = [n for n in nodes if n is not victim]
    wait_for(lambda: all(any(f[0] == victim_id and "fail" in f[2].split(",")
                             for f in nodes_lines(n)) for n in live), 20, "victim FAIL everywhere")
    health = shards_health(nodes[2])
    assert health[victim_id] == "fail" and health[replica_id] == "online"
    # The old master comes back on its data dir, becomes a replica of the new one, and syncs.
    victim.start()
    wait_for(lambda: role_of(victim) == ("slave", replica_id), 30,
             "old master to become a replica of the new master")
    wait_for(lambda: replicas_synced([victim]), 30, "old master to sync")
    wait_for(lambda: _readonly_get(victim, key) == b"after", 30,
             "old master to hold the write made after the failover")
    wait_agree(nodes)
    check_clean(nodes[1])
    assert writer.acked, "the write load acknowledged nothing"
    return elapsed


def slots_replicas(n: ManagedProcess, master_id: str) -> set[str]:
    """Ids of the replicas CLUSTER SLOTS shows with ``master_id``'s ranges."""
    out: set[str] = set()
    for entry in n.client(socket_timeout=3).execute_command("CLUSTER", "SLOTS"):
        if entry[2][2].decode() == master_id:
            out.update(r[2].decode() for r in entry[3:])
    return out


def shards_health(n: ManagedProcess) -> dict[str, str]:
    """node id -> health, from CLUSTER SHARDS (RESP2: flat key/value lists)."""
    def as_dict(x: object) -> dict[str, object]:
        if isinstance(x, dict):  # redis-py's CLUSTER SHARDS callback builds dicts
            return {_text(k): v for k, v in x.items()}
        assert isinstance(x, list)
        return {_text(k): v for k, v in zip(x[::2], x[1::2], strict=True)}

    health: dict[str, str] = {}
    for shard in n.client(socket_timeout=3).execute_command("CLUSTER", "SHARDS"):
        nodes = as_dict(shard)["nodes"]
        assert isinstance(nodes, list)
        for node in nodes:
            nf = as_dict(node)
            health[_text(nf["id"])] = _text(nf["health"])
    return health


def _text(v: object) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _readonly_get(n: ManagedProcess, key: str) -> bytes | None:
    r = n.client(socket_timeout=3)
    r.execute_command("READONLY")
    value = r.get(key)
    r.close()
    return value if isinstance(value, bytes) else None


TIMES: dict[str, float] = {}


@pytest.mark.parametrize("kind", KINDS)
def test_kill9_master_replica_takes_over(kind: str, tmp_path: Path,
                                         cleanup: list[ManagedProcess]) -> None:
    elapsed = kill9_scenario(kind, tmp_path, cleanup)
    TIMES[kind] = elapsed
    budget_s = KILL9_TIMEOUT_MS / 1000 + 2
    print(f"\nfailover {kind}: {elapsed:.2f}s (node_timeout {KILL9_TIMEOUT_MS} ms)")
    if len(TIMES) == 2:
        print(f"failover ratio ours/real: {TIMES['ours'] / TIMES['real']:.2f}")
    # The real cluster is the reference measured beside ours (bench/RESULTS.md, "Failover");
    # only our node is held to the node_timeout + 2 s promise. Redis itself drifts past it
    # on a loaded 2-core machine (its election delay is random, up to 1 s plus rank).
    if kind == "ours":
        assert elapsed <= budget_s, f"{kind}: failover took {elapsed:.2f}s > {budget_s}s"
    else:
        assert elapsed < 10 * budget_s, f"real cluster never failed over ({elapsed:.2f}s)"
