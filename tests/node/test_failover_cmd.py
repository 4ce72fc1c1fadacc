"""FAILOVER (standalone coordinated switchover): a master and its replica of ours, and the same
scenario on a pair of real redis-server 7.0 in the same test, with the raw replies compared:
the errors, waiting-for-sync with writes held, ABORT, TIMEOUT, then a real switchover (roles
swapped, data intact, the held write answered -READONLY) and a forced one back (TO ... FORCE
with the target stopped: failover-in-progress once the timeout passes)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from tests.support import (
    ManagedProcess,
    RawClient,
    node_and_redis,
    redis_server,
    slotgate_node,
    wait_until,
)

Starter = Callable[[str], ManagedProcess]

_LONE_MASTER = [
    ["FAILOVER"], ["FAILOVER", "ABORT"], ["FAILOVER", "FORCE"], ["FAILOVER", "TIMEOUT", "0"],
    ["FAILOVER", "TIMEOUT", "-5"], ["FAILOVER", "TIMEOUT", "x"], ["FAILOVER", "TO", "h", "x"],
    ["FAILOVER", "TO", "h"], ["FAILOVER", "BOGUS"], ["FAILOVER", "TIMEOUT", "5", "TIMEOUT", "5"],
    ["FAILOVER", "FORCE", "FORCE"], ["FAILOVER", "ABORT", "x"], ["FAILOVER", "TIMEOUT"],
    ["FAILOVER", "TO", "127.0.0.1", "1", "TO", "127.0.0.1", "2"],
    ["FAILOVER", "TO", "127.0.0.1", "1"],
]
_WITH_REPLICA = [
    ["FAILOVER", "FORCE"], ["FAILOVER", "TO", "127.0.0.1", "1"],
    ["FAILOVER", "TO", "127.0.0.1", "1", "FORCE"], ["FAILOVER", "TIMEOUT", "100", "FORCE"],
    ["FAILOVER", "ABORT"],
]


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Starter]:
    started: list[ManagedProcess] = []

    def make(kind: str) -> ManagedProcess:
        extra = ["--repl-ping-replica-period", "1"]
        p = (slotgate_node(tmp_path, extra=extra) if kind == "ours"
             else redis_server(tmp_path, extra=extra)).start()
        started.append(p)
        return p

    try:
        yield make
    finally:
        for p in started:
            _resume(p)
            p.stop()


def _resume(p: ManagedProcess) -> None:
    if p.proc is not None and p.proc.poll() is None:
        os.kill(p.proc.pid, signal.SIGCONT)


def _repl(p: ManagedProcess) -> dict[str, str]:
    return {k: str(v) for k, v in p.client(socket_timeout=5).info("replication").items()}


def _synced(m: ManagedProcess, r: ManagedProcess) -> bool:
    """r is m's replica, its link up, and m has its ACK of m's whole stream."""
    mi = m.client(socket_timeout=5).info("replication")
    ri = r.client(socket_timeout=5).info("replication")
    offset = mi["master_repl_offset"]
    return (ri.get("master_link_status") == "up" and ri.get("slave_repl_offset") == offset
            and (mi.get("slave0") or {}).get("offset") == offset)


def _pair(start: Starter, kind: str) -> tuple[ManagedProcess, ManagedProcess]:
    m, r = start(kind), start(kind)
    r.client().execute_command("REPLICAOF", "127.0.0.1", m.port)
    wait_until(lambda: _synced(m, r), 20, f"{kind} replica in sync",
               ignore=(redis.RedisError,))
    return m, r


def _state(p: ManagedProcess) -> str:
    return _repl(p)["master_failover_state"]


def _scenario(start: Starter, kind: str) -> list[tuple[str, bytes]]:
    """Everything observable, as (label, raw reply) in order."""
    out: list[tuple[str, bytes]] = []
    lone = start(kind)
    for proto in (2, 3):
        with RawClient(lone.port) as c:
            if proto == 3:
                c.call("HELLO", "3")
            out += [(f"lone RESP{proto} {' '.join(cmd)}", c.call(*cmd)) for cmd in _LONE_MASTER]
    m, r = _pair(start, kind)
    mc, rc = RawClient(m.port), RawClient(r.port)
    with mc, rc:
        out += [(" ".join(cmd), mc.call(*cmd)) for cmd in _WITH_REPLICA]
        out.append(("replica FAILOVER", rc.call("FAILOVER")))
        out.append(("replica PSYNC other replid", rc.call("PSYNC", "0" * 40, "1", "FAILOVER")))
        assert r.proc is not None
        # The replica cannot ack while stopped: the master waits for it.
        os.kill(r.proc.pid, signal.SIGSTOP)
        out.append(("write", mc.call("SET", "k1", "v1")))
        out.append(("FAILOVER TO replica TIMEOUT", mc.call(
            "FAILOVER", "TO", "127.0.0.1", str(r.port), "TIMEOUT", "60000")))
        out.append(("state", _state(m).encode()))
        with RawClient(m.port) as writer:
            writer.send("SET", "held", "1")
            assert writer.nothing_pending(0.3), "a write ran during the failover"
            out.append(("read while held", mc.call("GET", "k1")))
            out.append(("FAILOVER again", mc.call("FAILOVER")))
            out.append(("REPLICAOF while failing over", mc.call("REPLICAOF", "NO", "ONE")))
            with RawClient(m.port) as syncer:
                out.append(("PSYNC while failing over", syncer.call("PSYNC", "?", "-1")))
            out.append(("CLIENT UNPAUSE", mc.call("CLIENT", "UNPAUSE")))
            assert writer.nothing_pending(0.2), "CLIENT UNPAUSE released the failover's hold"
            out.append(("ABORT", mc.call("FAILOVER", "ABORT")))
            out.append(("held write after ABORT", writer.read(5)))
        out.append(("state after abort", _state(m).encode()))
        out.append(("ABORT again", mc.call("FAILOVER", "ABORT")))
        # TIMEOUT without FORCE: back to no-failover, still a master.
        out.append(("FAILOVER TIMEOUT 300", mc.call("FAILOVER", "TIMEOUT", "300")))
        out.append(("state", _state(m).encode()))
        wait_until(lambda: _state(m) == "no-failover", 10, "the timeout to end the failover")
        out.append(("role after timeout", _repl(m)["role"].encode()))
        # The switchover: the held write is answered once the old master is a replica.
        with RawClient(m.port) as writer:
            out.append(("FAILOVER", mc.call("FAILOVER")))
            writer.send("SET", "during", "1")
            assert writer.nothing_pending(0.3), "a write ran during the failover"
            os.kill(r.proc.pid, signal.SIGCONT)
            wait_until(lambda: _repl(m)["role"] == "slave" and _repl(r)["role"] == "master",
                       20, "roles swapped", ignore=(redis.RedisError,))
            out.append(("held write after the switchover", writer.read(10)))
        wait_until(lambda: _state(m) == "no-failover" and _synced(r, m), 20, "old master synced",
                   ignore=(redis.RedisError,))
        for name, p in (("old master", m), ("new master", r)):
            info = _repl(p)
            out.append((f"{name} role", info["role"].encode()))
            out.append((f"{name} state", info["master_failover_state"].encode()))
            with RawClient(p.port) as c:
                out.append((f"{name} k1", c.call("GET", "k1")))
                out.append((f"{name} held", c.call("GET", "held")))
        out.append(("write on the new master", rc.call("SET", "k2", "v2")))
        wait_until(lambda: m.client().get("k2") == b"v2", 10, "the old master to replicate")
        out.append(("write on the old master", mc.call("SET", "k3", "v3")))
        # Back with FORCE: the target (stopped) never acks, the timeout hands over anyway.
        assert m.proc is not None
        wait_until(lambda: _synced(r, m), 20, "old master synced", ignore=(redis.RedisError,))
        os.kill(m.proc.pid, signal.SIGSTOP)
        out.append(("write before FORCE", rc.call("SET", "k4", "v4")))
        out.append(("FAILOVER FORCE", rc.call(
            "FAILOVER", "TO", "127.0.0.1", str(m.port), "TIMEOUT", "200", "FORCE")))
        wait_until(lambda: _state(r) == "failover-in-progress", 10, "the forced handover")
        out.append(("role in progress", _repl(r)["role"].encode()))
        os.kill(m.proc.pid, signal.SIGCONT)
        wait_until(lambda: _repl(m)["role"] == "master" and _state(r) == "no-failover", 20,
                   "roles swapped back", ignore=(redis.RedisError,))
        out.append(("forced: k1 on the target", m.client().get("k1") or b""))
        out.append(("forced: role of the old master", _repl(r)["role"].encode()))
    return out


def test_failover_matches_redis(start: Starter) -> None:
    real = _scenario(start, "real")
    ours = _scenario(start, "ours")
    assert [label for label, _ in ours] == [label for label, _ in real]
    diffs = [f"{label}: ours={o!r} real={r!r}" for (label, o), (_, r) in zip(ours, real, strict=True)
             if o != r]
    assert diffs == []
    assert dict(ours)["new master role"] == b"master"
    assert dict(ours)["held write after the switchover"].startswith(b"-READONLY")


def test_failover_refused_in_cluster_mode(tmp_path: Path) -> None:
    lines = [["FAILOVER"], ["FAILOVER", "ABORT"], ["FAILOVER", "BOGUS"]]
    with node_and_redis(tmp_path, cluster=True) as procs:
        replies = {}
        for kind, p in procs.items():
            with RawClient(p.port) as c:
                replies[kind] = [c.call(*line) for line in lines]
        assert replies["ours"] == replies["real"]
        assert replies["ours"][0].startswith(b"-ERR FAILOVER not allowed in cluster mode.")
