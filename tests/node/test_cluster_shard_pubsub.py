"""Shard pub/sub in cluster mode, on two of our nodes and on two real redis-server 7.0 nodes
with the same scenario and identical raw replies: SSUBSCRIBE to another node's slot answers
MOVED, channels of several slots CROSSSLOT, and a slot that moves away (SETSLOT NODE after a
migration, SETSLOT NODE to another node, DELSLOTS) sends ``sunsubscribe`` to its subscribers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from slotgate.protocol.slots import key_slot
from tests.node.test_cluster_migration import _norm, two_masters
from tests.node.test_cluster_replica import shard  # noqa: F401 - the fixture
from tests.support import (
    ManagedProcess,
    RawClient,
    wait_until,
)

SLOT = key_slot(b"{t}")  # served by b
OTHER = key_slot(b"foo")  # served by b too
A_SLOT = key_slot(b"bar")  # served by a
KINDS = ("real", "ours")  # real first: ours is compared with its replies


@pytest.fixture(params=KINDS)
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[list[ManagedProcess]]:
    with two_masters(request.param, tmp_path) as nodes:
        yield nodes


def shard_scenario(nodes: list[ManagedProcess]) -> list[tuple[str, bytes]]:
    a, b = nodes
    ida = a.client().execute_command("CLUSTER", "MYID")
    idb = b.client().execute_command("CLUSTER", "MYID")
    out: list[tuple[str, bytes]] = []
    sub = RawClient(b.port)
    sub3 = RawClient(b.port)
    ctl_a, ctl_b = RawClient(a.port), RawClient(b.port)

    def step(name: str, conn: RawClient, *args: bytes | str | int, frames: int = 1) -> None:
        out.append((name, b"".join(conn.call_frames(*args, frames=frames))))

    def push(name: str, conn: RawClient) -> None:
        out.append((name, conn.read(timeout_s=5)))

    step("moved", sub, "SSUBSCRIBE", "{bar}x")
    step("crossslot", sub, "SSUBSCRIBE", "{t}a", "foo")
    step("moved first of several", sub, "SSUBSCRIBE", "{bar}x", "{bar}y")
    step("ssubscribe two", sub, "SSUBSCRIBE", "{t}a", "{t}b", frames=2)
    step("ssubscribe other slot", sub, "SSUBSCRIBE", "foo")
    sub3.call("HELLO", "3")
    step("resp3 ssubscribe", sub3, "SSUBSCRIBE", "{t}a")
    step("resp3 ssubscribe foo", sub3, "SSUBSCRIBE", "foo")
    step("resp3 subscribe", sub3, "SUBSCRIBE", "plain")
    step("spublish", ctl_b, "SPUBLISH", "{t}a", "m1")
    push("message", sub)
    push("message resp3", sub3)
    # the slot migrates to a: subscribers hear of it when b gives it up
    step("a importing", ctl_a, "CLUSTER", "SETSLOT", SLOT, "IMPORTING", idb)
    step("b migrating", ctl_b, "CLUSTER", "SETSLOT", SLOT, "MIGRATING", ida)
    out.append(("nothing pending", b"%d" % sub.nothing_pending(0.2)))
    step("ssubscribe while migrating", RawClient(b.port), "SSUBSCRIBE", "{t}c")
    step("a node", ctl_a, "CLUSTER", "SETSLOT", SLOT, "NODE", ida)
    step("b node", ctl_b, "CLUSTER", "SETSLOT", SLOT, "NODE", ida)
    push("sunsubscribe 1", sub)
    push("sunsubscribe 2", sub)
    push("sunsubscribe resp3", sub3)
    step("ping in pubsub", sub, "PING")
    step("spublish after move", ctl_b, "SPUBLISH", "{t}a", "m2")
    step("ssubscribe after move", sub, "SSUBSCRIBE", "{t}a")
    # the other slot given to a with no migration (b has no keys there)
    step("b node other", ctl_b, "CLUSTER", "SETSLOT", OTHER, "NODE", ida)
    push("sunsubscribe other", sub)
    push("sunsubscribe other resp3", sub3)
    step("ping after last", sub, "PING")
    step("ping resp3", sub3, "PING")
    # DELSLOTS on a: its subscribers of that slot are told too
    suba = RawClient(a.port)
    step("a ssubscribe", suba, "SSUBSCRIBE", "{t}z")
    step("a delslots", ctl_a, "CLUSTER", "DELSLOTS", SLOT)
    push("sunsubscribe delslots", suba)
    step("a ssubscribe unbound", suba, "SSUBSCRIBE", "{t}z")
    for conn in (sub, sub3, ctl_a, ctl_b, suba):
        conn.close()
    return [(name, _norm(reply, a.port, b.port, 99999, ida, idb)) for name, reply in out]


_RESULTS: dict[str, list[tuple[str, bytes]]] = {}


def test_shard_pubsub_moved_and_sunsubscribe(pair: list[ManagedProcess],
                                             request: pytest.FixtureRequest) -> None:
    kind = request.node.callspec.params["pair"]
    got = _RESULTS[kind] = shard_scenario(pair)
    d = dict(got)
    assert d["moved"] == b"-MOVED %d 127.0.0.1:<A>\r\n" % A_SLOT
    assert d["crossslot"] == b"-CROSSSLOT Keys in request don't hash to the same slot\r\n"
    assert d["sunsubscribe 1"] == b"*3\r\n$12\r\nsunsubscribe\r\n$4\r\n{t}a\r\n:2\r\n"
    assert d["sunsubscribe delslots"].startswith(b"*3\r\n$12\r\nsunsubscribe\r\n$4\r\n{t}z")
    other = _RESULTS.get("real" if kind == "ours" else "ours")
    if other is not None:  # both ran: every reply identical
        for (name, g), (_, w) in zip(got, other, strict=True):
            assert g == w, name


def failover_scenario(nodes: list[ManagedProcess]) -> list[tuple[str, bytes]]:
    """b has a replica r; shard subscribers on both; r takes over by CLUSTER FAILOVER: the
    demoted b sends its subscribers ``sunsubscribe``, as does each node that loses the slot."""
    _a, b, r = nodes
    out: list[tuple[str, bytes]] = []
    on_b, on_r = RawClient(b.port), RawClient(r.port)
    out.append(("b ssubscribe", on_b.call("SSUBSCRIBE", "{t}a")))
    out.append(("r ssubscribe", on_r.call("SSUBSCRIBE", "{t}a")))
    out.append(("r failover", r.client().execute_command("CLUSTER", "FAILOVER")))
    wait_until(lambda: b"master" in r.client().execute_command("ROLE")[0]
               and b"slave" in b.client().execute_command("ROLE")[0], 30, "the failover")
    out.append(("b sunsubscribe", on_b.read(timeout_s=10)))
    out.append(("r nothing pending", b"%d" % on_r.nothing_pending(1.0)))
    on_b.close()
    on_r.close()
    return out


def test_failover_demotion_sunsubscribes(
        shard: tuple[str, list[ManagedProcess]]) -> None:  # noqa: F811
    kind, nodes = shard
    got = _RESULTS["failover-" + kind] = failover_scenario(nodes)
    d = dict(got)
    assert d["b sunsubscribe"] == b"*3\r\n$12\r\nsunsubscribe\r\n$4\r\n{t}a\r\n:0\r\n"
    if kind == "ours" and "failover-real" in _RESULTS:
        assert got == _RESULTS["failover-real"]
