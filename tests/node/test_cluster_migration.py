"""A slot in migration: ASK, TRYAGAIN, ASKING, RESTORE-ASKING, MIGRATE and its errors, then
SETSLOT NODE — the same scenario on two of our nodes and on two real redis-server 7.0 nodes,
with identical replies (ports and ids replaced by placeholders)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from slotgate.protocol.slots import key_slot
from tests.node.diff import norm_stream_times
from tests.support import (
    ManagedProcess,
    RawClient,
    free_port,
    redis_server,
    start_all,
    start_nodes,
    wait_blocked,
    wait_cluster_ok,
    wait_until,
)

SLOT = key_slot(b"{t}")  # 15891: owned by the second node below
# DUMP of the string "r" as redis-server 7.0 makes it (RDB version 10, CRC64)
PAYLOAD_R = b"\x00\x01r\n\x00\xd4_vbK\x16(c"


def _two_masters(nodes: list[ManagedProcess]) -> None:
    a, b = nodes
    a.client().execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 8191)
    b.client().execute_command("CLUSTER", "ADDSLOTSRANGE", 8192, 16383)
    a.client().execute_command("CLUSTER", "SET-CONFIG-EPOCH", 1)
    b.client().execute_command("CLUSTER", "SET-CONFIG-EPOCH", 2)
    b.client().execute_command("CLUSTER", "MEET", "127.0.0.1", a.port)
    wait_cluster_ok(nodes)

    def agree() -> bool:
        views = [n.client().execute_command("CLUSTER", "NODES").decode() for n in nodes]
        return all(v.count("8192-16383") == 1 and v.count("0-8191") == 1 for v in views)

    wait_until(agree, 20, "the two masters to agree", interval_s=0.1)


@contextmanager
def two_masters(kind: str, workdir: Path) -> Iterator[list[ManagedProcess]]:
    """Two masters of ``kind`` ("ours" or "real") sharing the slots; stopped at the end."""
    if kind == "ours":
        nodes = start_nodes(workdir, 2)
    else:
        nodes = start_all([redis_server(workdir, cluster=True) for _ in range(2)])
    try:
        _two_masters(nodes)
        yield nodes
    finally:
        for n in nodes:
            n.stop()


@pytest.fixture
def real_pair(tmp_path: Path) -> Iterator[list[ManagedProcess]]:
    with two_masters("real", tmp_path) as nodes:
        yield nodes


@pytest.fixture
def our_pair(tmp_path: Path) -> Iterator[list[ManagedProcess]]:
    with two_masters("ours", tmp_path) as nodes:
        yield nodes


def scenario(nodes: list[ManagedProcess]) -> list[tuple[str, bytes]]:
    """Slot SLOT moves from b (owner) to a, key by key; every reply on the way."""
    a, b = nodes
    ida = a.client().execute_command("CLUSTER", "MYID")
    idb = b.client().execute_command("CLUSTER", "MYID")
    ca, cb = RawClient(a.port), RawClient(b.port)
    dead_port = free_port()
    out: list[tuple[str, bytes]] = []

    def step(name: str, conn: RawClient, *args: bytes | str | int) -> None:
        out.append((name, conn.call(*args)))

    step("set present", cb, "SET", "{t}present", "1")
    step("set moving", cb, "SET", "{t}moving", "2")
    step("rpush list", cb, "RPUSH", "{t}list", "x", "y")
    step("set dup", cb, "SET", "{t}dup", "d")
    step("set x", cb, "SET", "{t}x", "1")
    step("a importing", ca, "CLUSTER", "SETSLOT", SLOT, "IMPORTING", idb)
    step("b migrating", cb, "CLUSTER", "SETSLOT", SLOT, "MIGRATING", ida)
    step("b get present", cb, "GET", "{t}present")
    step("b get missing", cb, "GET", "{t}missing")
    step("b set missing", cb, "SET", "{t}missing", "v")
    step("b mget mixed", cb, "MGET", "{t}present", "{t}missing")
    step("b mget missing", cb, "MGET", "{t}nope", "{t}missing")
    step("b countkeys", cb, "CLUSTER", "COUNTKEYSINSLOT", SLOT)
    step("b getkeys", cb, "CLUSTER", "GETKEYSINSLOT", SLOT, 10)
    step("b migrate nokey", cb, "MIGRATE", "127.0.0.1", a.port, "{t}nope", 0, 5000)
    step("b migrate one", cb, "MIGRATE", "127.0.0.1", a.port, "{t}moving", 0, 5000)
    step("b get moved key", cb, "GET", "{t}moving")
    step("a get no asking", ca, "GET", "{t}moving")
    step("a asking", ca, "ASKING")
    step("a get asking", ca, "GET", "{t}moving")
    step("a get after asking", ca, "GET", "{t}moving")
    step("a asking 2", ca, "ASKING")
    step("a mget asking missing", ca, "MGET", "{t}moving", "{t}present")
    step("a asking 3", ca, "ASKING")
    step("a mget asking same", ca, "MGET", "{t}moving", "{t}moving")
    step("b set missing again", cb, "SET", "{t}other", "d")
    step("a asking 4", ca, "ASKING")
    step("a set dup", ca, "SET", "{t}dup", "other")
    step("b migrate busykey", cb, "MIGRATE", "127.0.0.1", a.port, "{t}dup", 0, 5000)
    step("b migrate replace keys copy", cb, "MIGRATE", "127.0.0.1", a.port, "", 0, 5000,
         "COPY", "REPLACE", "KEYS", "{t}dup", "{t}list")
    step("b get dup after copy", cb, "GET", "{t}dup")
    step("b migrate keys", cb, "MIGRATE", "127.0.0.1", a.port, "", 0, 5000, "REPLACE",
         "KEYS", "{t}dup", "{t}list", "{t}present")
    step("b migrate keys nonempty", cb, "MIGRATE", "127.0.0.1", a.port, "x", 0, 5000, "KEYS",
         "{t}dup")
    step("b migrate syntax", cb, "MIGRATE", "127.0.0.1", a.port, "x", 0, 5000, "FOO")
    step("b migrate ioerr", cb, "MIGRATE", "127.0.0.1", dead_port, "{t}x", 0, 500)
    step("b migrate x", cb, "MIGRATE", "127.0.0.1", a.port, "{t}x", 0, 5000)
    step("b countkeys empty", cb, "CLUSTER", "COUNTKEYSINSLOT", SLOT)
    step("a restore-asking", ca, "RESTORE-ASKING", "{t}r", 0, PAYLOAD_R)
    step("a asking 5", ca, "ASKING")
    step("a get restored", ca, "GET", "{t}r")
    step("a node", ca, "CLUSTER", "SETSLOT", SLOT, "NODE", ida)
    step("b node", cb, "CLUSTER", "SETSLOT", SLOT, "NODE", ida)
    step("b get after node", cb, "GET", "{t}moving")
    step("a get after node", ca, "GET", "{t}moving")
    step("a lrange", ca, "LRANGE", "{t}list", 0, -1)
    step("a nodes open slots", ca, "CLUSTER", "COUNTKEYSINSLOT", SLOT)
    ca.close()
    cb.close()
    return [(name, _norm(reply, a.port, b.port, dead_port, ida, idb)) for name, reply in out]


def _norm(reply: bytes, pa: int, pb: int, dead: int, ida: bytes, idb: bytes) -> bytes:
    return (reply.replace(str(pa).encode(), b"<A>").replace(str(pb).encode(), b"<B>")
            .replace(b":%d" % dead, b":<DEAD>").replace(ida, b"<IDA>")
            .replace(idb, b"<IDB>"))


def test_migration_scenario_matches_real(real_pair: list[ManagedProcess],
                                         our_pair: list[ManagedProcess]) -> None:
    want = scenario(real_pair)
    got = scenario(our_pair)
    for (name, g), (_, w) in zip(got, want, strict=True):
        if name == "b getkeys":  # the order of keys in a slot is Redis' hash order
            assert sorted(g.split(b"\r\n")) == sorted(w.split(b"\r\n")), name
            continue
        assert g == w, name
    # and the checks that matter, spelled out
    d = dict(got)
    assert d["b get missing"] == b"-ASK %d 127.0.0.1:<A>\r\n" % SLOT
    assert d["b mget mixed"] == b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n"
    assert d["a get no asking"] == b"-MOVED %d 127.0.0.1:<B>\r\n" % SLOT
    assert d["a get asking"] == b"$1\r\n2\r\n"
    assert d["b get dup after copy"] == b"$1\r\nd\r\n"
    assert d["b migrate busykey"].startswith(b"-ERR Target instance replied with error: BUSYKEY")
    assert d["b migrate ioerr"].startswith(b"-IOERR")
    assert d["a restore-asking"] == b"+OK\r\n" and d["a get restored"] == b"$1\r\nr\r\n"
    assert d["b get after node"] == b"-MOVED %d 127.0.0.1:<A>\r\n" % SLOT


def blocked_scenario(nodes: list[ManagedProcess]) -> list[bytes]:
    """A client blocked in BLPOP on a slot that is reassigned, then one blocked while the
    cluster goes down."""
    a, b = nodes
    ida = a.client().execute_command("CLUSTER", "MYID")
    blocked = RawClient(b.port)
    blocked.send("BLPOP", "{t}q", 0)
    wait_blocked(b.port, 1)
    b.client().execute_command("CLUSTER", "SETSLOT", SLOT, "NODE", ida)
    moved = blocked.call("PING")  # the BLPOP reply arrives first
    blocked.close()
    # slot now served by a; a client blocked there when a loses the slot to nobody
    blocked = RawClient(a.port)
    a.client().execute_command("CLUSTER", "SETSLOT", SLOT, "NODE", ida)
    blocked.send("BLPOP", "{t}q", 0)
    wait_blocked(a.port, 1)
    a.client().execute_command("CLUSTER", "DELSLOTS", SLOT)
    down = blocked.call("PING")
    blocked.close()
    idb = b.client().execute_command("CLUSTER", "MYID")
    return [_norm(r, a.port, b.port, 1, ida, idb) for r in (moved, down)]


def test_blocked_client_redirected_like_real(real_pair: list[ManagedProcess],
                                             our_pair: list[ManagedProcess]) -> None:
    want = blocked_scenario(real_pair)
    got = blocked_scenario(our_pair)
    assert got == want
    assert got[0] == b"-MOVED %d 127.0.0.1:<A>\r\n" % SLOT
    assert got[1].startswith(b"-CLUSTERDOWN ")


def stream_blocked_scenario(nodes: list[ManagedProcess]) -> list[bytes]:
    """A stream with a group and a pending entry MIGRATEs away while readers block on its
    slot: the XREADGROUP reader learns its key left, the XREAD reader is redirected when the
    slot is reassigned; the stream arrives whole; then a reader blocked while its node loses
    the slot to nobody."""
    a, b = nodes
    ida = a.client().execute_command("CLUSTER", "MYID")
    idb = b.client().execute_command("CLUSTER", "MYID")
    cb, ca = RawClient(b.port), RawClient(a.port)
    cb.call("XADD", "{t}s", "1-1", "f", "v")
    cb.call("XGROUP", "CREATE", "{t}s", "g", "0")
    cb.call("XREADGROUP", "GROUP", "g", "c", "STREAMS", "{t}s", ">")
    reader = RawClient(b.port)
    reader.send("XREAD", "BLOCK", "0", "STREAMS", "{t}q", "$")
    group_reader = RawClient(b.port)
    group_reader.send("XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS", "{t}s", ">")
    wait_blocked(b.port, 2)
    replies = [ca.call("CLUSTER", "SETSLOT", SLOT, "IMPORTING", idb),
               cb.call("CLUSTER", "SETSLOT", SLOT, "MIGRATING", ida),
               cb.call("MIGRATE", "127.0.0.1", a.port, "{t}s", 0, 5000),
               group_reader.call("PING"),
               cb.call("CLUSTER", "SETSLOT", SLOT, "NODE", ida),
               ca.call("CLUSTER", "SETSLOT", SLOT, "NODE", ida),
               reader.call("PING"),
               norm_stream_times(ca.call("XINFO", "STREAM", "{t}s", "FULL"))]
    for conn in (reader, group_reader, cb):
        conn.close()
    ca.call("DEL", "{t}s")
    ca.close()
    blocked = RawClient(a.port)
    blocked.send("XREAD", "BLOCK", "0", "STREAMS", "{t}s", "0")
    wait_blocked(a.port, 1)
    a.client().execute_command("CLUSTER", "DELSLOTS", SLOT)
    replies.append(blocked.call("PING"))
    blocked.close()
    return [_norm(r, a.port, b.port, 1, ida, idb) for r in replies]


def test_blocked_stream_readers_redirected_like_real(real_pair: list[ManagedProcess],
                                                     our_pair: list[ManagedProcess]) -> None:
    want = stream_blocked_scenario(real_pair)
    got = stream_blocked_scenario(our_pair)
    assert got == want
    assert got[3] == b"-UNBLOCKED the stream key no longer exists\r\n"
    assert got[6] == b"-MOVED %d 127.0.0.1:<A>\r\n" % SLOT
    assert b"pel-count', 1" in got[7]
    assert got[8].startswith(b"-CLUSTERDOWN ")
