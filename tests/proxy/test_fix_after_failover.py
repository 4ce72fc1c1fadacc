"""`slotgate cluster fix` after the target of an unfinished slot move was failed over: the source
still has the slot MIGRATING to a node that is now a replica (or is gone), the promoted replica
holds the keys already moved but no IMPORTING state, and some keys may be on both sides. The
fix must carry the slot to the node that took the target's place, with every key kept (the
source's copy winning where both have one), on bundled nodes and on a real redis-server 7.0."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from slotgate.protocol.slots import SLOT_COUNT, key_slot
from tests.support import (
    ManagedProcess,
    redis_server,
    replica_in_sync,
    slotgate_node,
    start_all,
    wait_until,
)

CLI = [sys.executable, "-m", "slotgate.proxy.ops.cli", "cluster"]
TAG = "{b}"
SLOT = key_slot(TAG.encode())  # 3300: in the source's half
KEYS = 40
MOVED = 20


def node_id(c: redis.Redis) -> str:
    return str(c.execute_command("CLUSTER", "MYID").decode())


def myself_line(c: redis.Redis) -> list[str]:
    lines = c.execute_command("CLUSTER", "NODES").decode().splitlines()
    return next(ln.split() for ln in lines if "myself" in ln)


def owner_of(c: redis.Redis, slot: int) -> str | None:
    for line in c.execute_command("CLUSTER", "NODES").decode().splitlines():
        f = line.split()
        for tok in f[8:]:
            if tok.startswith("["):
                continue
            lo, _, hi = tok.partition("-")
            if int(lo) <= slot <= int(hi or lo):
                return f[0]
    return None


@pytest.fixture
def trio_nodes(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[list[ManagedProcess]]:
    """A source master (slots 0-8191), a target master (the rest) and a replica of the target
    (``request.param`` "bundled" or "real"), or of the source ("bundled-source", ...)."""
    kind, _, of = str(request.param).partition("-")
    make = slotgate_node if kind == "bundled" else redis_server
    nodes = start_all([make(tmp_path, cluster=True) for _ in range(3)])
    try:
        s, t, r = (n.client(socket_timeout=10) for n in nodes)
        # distinct config epochs from the start (as redis-cli's create gives them): a takeover
        # then always wins over the master it replaces, with no epoch collision to settle first
        for epoch, c in enumerate((s, t, r), 1):
            c.execute_command("CLUSTER", "SET-CONFIG-EPOCH", epoch)
        s.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, SLOT_COUNT // 2 - 1)
        t.execute_command("CLUSTER", "ADDSLOTSRANGE", SLOT_COUNT // 2, SLOT_COUNT - 1)
        for n in nodes[1:]:
            s.execute_command("CLUSTER", "MEET", "127.0.0.1", n.port)
        wait_until(lambda: all(len(c.execute_command("CLUSTER", "NODES").splitlines()) == 3
                               for c in (s, t, r)), 30, "the nodes meeting")
        followed = nodes[0] if of == "source" else nodes[1]
        m_id = node_id(followed.client(socket_timeout=10))
        wait_until(lambda: r.execute_command("CLUSTER", "REPLICATE", m_id), 30,
                   "the replica following its master")
        wait_until(lambda: replica_in_sync(followed.port, nodes[2].port), 30, "replica in sync")
        wait_until(lambda: all(b"cluster_state:ok" in c.execute_command("CLUSTER", "INFO")
                               for c in (s, t, r)), 30, "cluster ok")
        yield nodes
    finally:
        for n in nodes:
            n.stop()


def half_moved(nodes: list[ManagedProcess]) -> dict[str, str]:
    """The slot half moved from source to target, one key on both sides (a MIGRATE whose reply
    was lost: the source kept its copy and took a write after). Returns every key's last
    acknowledged value."""
    src, tgt, _ = nodes
    s, t = src.client(socket_timeout=10), tgt.client(socket_timeout=10)
    values = {f"{TAG}:{i}": f"v{i}" for i in range(KEYS)}
    for k, v in values.items():
        s.set(k, v)
    s_id, t_id = node_id(s), node_id(t)
    t.execute_command("CLUSTER", "SETSLOT", SLOT, "IMPORTING", s_id)
    s.execute_command("CLUSTER", "SETSLOT", SLOT, "MIGRATING", t_id)
    moved = [f"{TAG}:{i}" for i in range(MOVED)]
    s.execute_command("MIGRATE", "127.0.0.1", tgt.port, "", 0, 5000, "KEYS", *moved)
    both = f"{TAG}:{KEYS - 1}"
    s.execute_command("MIGRATE", "127.0.0.1", tgt.port, "", 0, 5000, "COPY", "KEYS", both)
    s.set(both, "newer")
    values[both] = "newer"
    return values


def half_moved_then_target_failed_over(nodes: list[ManagedProcess], keep_old_target: bool) -> dict[str, str]:
    """``half_moved``, then the target's replica takes its place."""
    _, tgt, _ = nodes
    s, t, r = (n.client(socket_timeout=10) for n in nodes)
    values = half_moved(nodes)
    assert t.execute_command("WAIT", 1, 5000) == 1
    if keep_old_target:
        r.execute_command("CLUSTER", "FAILOVER", "TAKEOVER")
        wait_until(lambda: "slave" in myself_line(t)[2], 30, "the old target a replica")
    else:
        tgt.stop()
        r.execute_command("CLUSTER", "FAILOVER", "TAKEOVER")
    wait_until(lambda: "master" in myself_line(r)[2], 30, "the replica promoted")
    wait_until(lambda: owner_of(s, SLOT_COUNT - 1) == node_id(r), 30,
               lambda: "the source knowing the new master: " + "; ".join(
                   c.execute_command("CLUSTER", "NODES").decode() for c in (s, r)))
    # the state the fix meets: MIGRATING on the source towards a node that is no master
    assert any(tok.startswith(f"[{SLOT}->-") for tok in myself_line(s)[8:])
    assert not any(tok.startswith("[") for tok in myself_line(r)[8:])
    assert r.execute_command("CLUSTER", "COUNTKEYSINSLOT", SLOT) == MOVED + 1
    return values


@pytest.mark.parametrize(("trio_nodes", "keep_old_target"), [
    pytest.param("real", True, id="real-old-target-replica"),
    pytest.param("bundled", False, id="bundled-old-target-down"),
    # the other two cases with --run-slow (CI time)
    pytest.param("bundled", True, id="bundled-old-target-replica", marks=pytest.mark.slow),
    pytest.param("real", False, id="real-old-target-down", marks=pytest.mark.slow),
], indirect=["trio_nodes"])
def test_fix_carries_the_slot_to_the_promoted_replica(trio_nodes: list[ManagedProcess],
                                                      keep_old_target: bool) -> None:
    values = half_moved_then_target_failed_over(trio_nodes, keep_old_target)
    src, _, rep = trio_nodes
    fixed_into(rep, src, values)


def fixed_into(owner: ManagedProcess, other: ManagedProcess, values: dict[str, str]) -> None:
    """`slotgate cluster fix` (entered at ``other``) exits 0, the slot is open nowhere, both
    masters agree that ``owner`` has it, and every key reads back its last value there."""
    out = subprocess.run([*CLI, "fix", f"127.0.0.1:{other.port}"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, (out.stdout, out.stderr)
    o, x = owner.client(socket_timeout=10), other.client(socket_timeout=10)
    for c in (o, x):
        assert not any(tok.startswith("[") for tok in myself_line(c)[8:])
    o_id = node_id(o)
    wait_until(lambda: owner_of(o, SLOT) == o_id and owner_of(x, SLOT) == o_id, 30,
               "both masters agreeing on the slot's new owner")
    assert x.execute_command("CLUSTER", "COUNTKEYSINSLOT", SLOT) == 0
    got = {k: o.get(k) for k in values}
    assert got == {k: v.encode() for k, v in values.items()}


@pytest.mark.parametrize("trio_nodes", [
    pytest.param("real-source", id="real"),
    pytest.param("bundled-source", id="bundled", marks=pytest.mark.slow),
], indirect=True)
def test_fix_carries_the_slot_from_the_promoted_replica(trio_nodes: list[ManagedProcess]) -> None:
    """The source failed over instead: the target has the slot IMPORTING from a node that is
    now a replica, the promoted replica owns the slot (no MIGRATING state) with the keys not
    yet moved, and the newer copy of the key both sides hold."""
    _, tgt, rep = trio_nodes
    s, t, r = (n.client(socket_timeout=10) for n in trio_nodes)
    values = half_moved(trio_nodes)
    assert s.execute_command("WAIT", 1, 5000) == 1
    r.execute_command("CLUSTER", "FAILOVER", "TAKEOVER")
    wait_until(lambda: "slave" in myself_line(s)[2], 30, "the old source a replica")
    r_id = node_id(r)
    # (the target keeps the old source as the owner of the slot it imports, as Redis does)
    wait_until(lambda: owner_of(t, 0) == r_id, 30, "the target knowing the new master")
    assert any(tok.startswith(f"[{SLOT}-<-") for tok in myself_line(t)[8:])
    fixed_into(tgt, rep, values)

