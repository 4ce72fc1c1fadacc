"""Moves across slots whose proxy dies between the source's write and the destination's:
the journal entry written with the source settles them (``proxy/routing/journal.py``).

The proxy killed is a real ``python -m slotgate.proxy`` process started with
``SLOTGATE_FAULT=kill-after-move-source``: it kills itself (SIGKILL) right after a move's
source write, exactly where a ``kill -9`` would lose the element. A fresh proxy then
settles what it left. The other cases build the state a dead proxy leaves (entries whose
step 3 ran, whose step 2 moved nothing, whose destination refuses the element now, whose
lease is live) on a real cluster and let ``journal.settle`` meet it.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis
import trio

from slotgate.protocol.resp import ReplyFramer, encode_command
from slotgate.protocol.slots import key_slot
from slotgate.proxy.front.server import Proxy
from slotgate.proxy.ops.metrics import ProxyMetrics
from slotgate.proxy.ops.settings import ProxySettings
from slotgate.proxy.routing import crossslot, journal, msetnxjournal, poppark
from slotgate.proxy.routing.crossslot import Value
from tests.proxy.test_crossslot_faults import (
    connect,
    lose_destination_reply,
    master_of,
    two_keys_on_two_masters,
)
from tests.support import ManagedProcess, child_env, slotgate_proxy, start_all, wait_until

# A short lease (retry deadline + 2 command timeouts = 2 s): a killed proxy's entries are
# settled soon after it dies.
CONFIG = 'retry:\n  deadline: "1s"\nbackend:\n  command_timeout: "500ms"\n'


def raw_call(port: int, payload: bytes, n: int = 1) -> list[bytes]:
    """``payload`` sent to 127.0.0.1:``port``; its ``n`` reply frames."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(payload)
        framer = ReplyFramer()
        frames: list[bytes] = []
        while len(frames) < n:
            data = sock.recv(65536)
            assert data, "connection closed"
            framer.feed(data)
            frames += [f for _, f in framer.frames()]
        return frames


def closed_without_reply(port: int, payload: bytes) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(payload)
        return sock.recv(65536) == b""


def entries(cluster: list[ManagedProcess]) -> list[object]:
    out: list[object] = []
    for n in cluster:
        if n.alive() and n.client(socket_timeout=5).info("replication")["role"] == "master":
            out += n.client(socket_timeout=5).keys("*slotgate-j*")
    return out


def setup(cluster: list[ManagedProcess], command: str) -> tuple[str, str, list[str]]:
    """Two keys on two masters, filled for ``command``; the command."""
    src, dst = two_keys_on_two_masters(cluster, f"j{command}{uuid.uuid4().hex[:6]}")
    s, d = master_of(cluster, src).client(), master_of(cluster, dst).client()
    if command in ("LMOVE", "RPOPLPUSH", "BLMOVE"):
        s.rpush(src, "a", "b", "c")
        d.rpush(dst, "d")
        args = [src, dst] if command == "RPOPLPUSH" else [src, dst, "LEFT", "RIGHT"]
        args += ["1"] if command == "BLMOVE" else []
    elif command == "SMOVE":
        s.sadd(src, "a", "b")
        d.sadd(dst, "d")
        args = [src, dst, "a"]
    else:
        s.set(src, "v", px=600_000)
        args = [src, dst]
    return src, dst, [command, *args]


def contents(cluster: list[ManagedProcess], key: str) -> list[object]:
    r = master_of(cluster, key).client()
    kind = r.type(key)
    if kind == b"list":
        return list(r.lrange(key, 0, -1))
    if kind == b"set":
        return sorted(r.smembers(key), key=str)
    return [] if kind == b"none" else [r.get(key)]


# What each move leaves in (source, destination) once done.
DONE: dict[str, tuple[list[object], list[object]]] = {
    "LMOVE": ([b"b", b"c"], [b"d", b"a"]),
    "RPOPLPUSH": ([b"a", b"b"], [b"c", b"d"]),
    "SMOVE": ([b"b"], [b"a", b"d"]),
    "RENAME": ([], [b"v"]),
    "BLMOVE": ([b"b", b"c"], [b"d", b"a"]),
}
# ... and after the source's write only: the element in neither key.
HALF: dict[str, tuple[list[object], list[object]]] = {
    "LMOVE": ([b"b", b"c"], [b"d"]),
    "RPOPLPUSH": ([b"a", b"b"], [b"d"]),
    "SMOVE": ([b"b"], [b"d"]),
    "RENAME": ([], []),
    "BLMOVE": ([b"b", b"c"], [b"d"]),
}


def test_a_proxy_killed_between_a_moves_two_writes_loses_nothing(
    real_cluster: list[ManagedProcess], tmp_path: Path,
) -> None:
    """Each move (BLMOVE too) and an MSETNX are sent to a proxy that kills itself (SIGKILL)
    right after writing the source (MSETNX: its first key's slot): the element is then in
    neither key (one key of three set). A proxy started next settles each journal entry:
    the element in the destination, once (all three keys set); no entry left."""
    cluster = real_cluster
    config = tmp_path / "proxy.yaml"
    config.write_text(CONFIG)
    seeds = [n.port for n in cluster[:3]]
    moves = {command: setup(cluster, command) for command in DONE}
    dying = [slotgate_proxy(tmp_path / command, seeds, ["--config", str(config)])
             for command in [*moves, "msetnx"]]
    fresh = slotgate_proxy(tmp_path / "fresh", seeds, ["--config", str(config)])
    keys = keys_on_three_masters(cluster)
    try:
        with child_env(SLOTGATE_FAULT=journal.KILL_AFTER_SOURCE):
            start_all(dying[:-1])
        with child_env(SLOTGATE_FAULT=journal.KILL_AFTER_FIRST_SLOT):
            start_all(dying[-1:])
        for proc, (src, dst, argv) in zip(dying, moves.values(), strict=False):
            assert closed_without_reply(proc.port, encode_command(*argv)), argv
            assert proc.proc is not None and proc.proc.wait(10) == -9
            assert (contents(cluster, src), contents(cluster, dst)) == HALF[argv[0]], argv
        # MSETNX: its first key's slot written, the others not yet
        msetnx = ["MSETNX", *[x for k in keys for x in (k, f"v-{k}")]]
        assert closed_without_reply(dying[-1].port, encode_command(*msetnx))
        assert dying[-1].proc is not None and dying[-1].proc.wait(10) == -9
        assert [contents(cluster, k) for k in keys] == [[f"v-{keys[0]}".encode()], [], []]
        # (each entry and its lease; another dying proxy's start-up sweep, if it came late,
        # may have settled an entry whose lease ended already)
        assert entries(cluster)
        fresh.start()
        wait_until(lambda: not entries(cluster), 30, "journal entries settled")
        for src, dst, argv in moves.values():
            assert (contents(cluster, src), contents(cluster, dst)) == DONE[argv[0]], argv
            master_of(cluster, src).client().delete(src)
            master_of(cluster, dst).client().delete(dst)
        assert [contents(cluster, k) for k in keys] == [[f"v-{k}".encode()] for k in keys]
        for k in keys:
            master_of(cluster, k).client().delete(k)
        assert "settled" in "".join(p.log_text() for p in [fresh, *dying])
    finally:
        for proc in [*dying, fresh]:
            proc.stop()


def keys_on_three_masters(cluster: list[ManagedProcess]) -> list[str]:
    prefix = f"jm{uuid.uuid4().hex[:6]}"
    by_master: dict[int, str] = {}
    i = 0
    while len(by_master) < 3:
        key = f"{prefix}:{i}"
        by_master.setdefault(master_of(cluster, key).port, key)
        i += 1
    return list(by_master.values())


@pytest.fixture
async def proxy(real_cluster: list[ManagedProcess]) -> AsyncIterator[Proxy]:
    p = Proxy(ProxySettings(listen_port=0, seeds=[("127.0.0.1", n.port)
                                                  for n in real_cluster[:3]]))
    async with trio.open_nursery() as nursery:
        await nursery.start(p.run)
        yield p
        nursery.cancel_scope.cancel()


@pytest.fixture
def links() -> Iterator[journal.Links]:
    yield journal.Links(ProxySettings(), ProxyMetrics())


def leave_entry(cluster: list[ManagedProcess], argv: list[str], src: Value,
                dst: Value) -> journal.Entry:
    """The entry (without its lease: its owner died long ago; in its slot's index) of a move
    whose source write ran with ``src`` and ``dst`` as step 1 read them."""
    bargv = [a.encode() for a in argv]
    e = journal.new_entry(key_slot(bargv[1]), key_slot(bargv[2]))
    smark = crossslot.marker(key_slot(bargv[1]))
    hset, _, sadd = journal.open_commands(e, bargv, src, dst, smark, 1000)
    got = raw_call(master_of(cluster, argv[1]).port, hset + sadd, 2)
    assert [f[:1] for f in got] == [b":", b":"], got
    return e


def dumped(cluster: list[ManagedProcess], key: str) -> Value:
    return Value(master_of(cluster, key).client().dump(key), 0)


def begin(cluster: list[ManagedProcess], command: str) -> tuple[
        str, str, list[str], tuple[Value, Value], redis.Redis, redis.Redis]:
    """``setup``'s keys, their values as step 1 reads them, a client of each master."""
    src, dst, argv = setup(cluster, command)
    before = dumped(cluster, src), dumped(cluster, dst)
    return (src, dst, argv, before, master_of(cluster, src).client(),
            master_of(cluster, dst).client())


def finish(e: journal.Entry, r_src: redis.Redis, r_dst: redis.Redis, src: str,
           dst: str) -> None:
    """Nothing of the entry left (its lease, step 3's marker and copy); the keys deleted."""
    assert not r_src.exists(e.name, e.lease) and not r_dst.exists(e.mark, journal.left_of(e))
    r_src.delete(src)
    r_dst.delete(dst)


async def settle(p: Proxy, links: journal.Links, cluster: list[ManagedProcess],
                 e: journal.Entry) -> float | None:
    node = f"127.0.0.1:{master_of(cluster, e.name.decode()).port}"
    try:
        return await journal.settle(links, p.topology, node, e.name, 5000)
    finally:
        await links.aclose()


async def test_an_entry_whose_destination_write_ran_is_only_deleted(
    proxy: Proxy, real_cluster: list[ManagedProcess], links: journal.Links,
) -> None:
    """The proxy died after step 3 ran, before deleting the entry: nothing moves again."""
    src, dst, argv, before, r_src, r_dst = begin(real_cluster, "LMOVE")
    assert r_src.lpop(src) == b"a"  # step 2's effect
    e = leave_entry(real_cluster, argv, *before)
    r_dst.rpush(dst, "a")  # step 3's effect, with its marker and what it kept
    r_dst.set(e.mark, crossslot.MARK_DONE)
    r_dst.restore(journal.left_of(e), 0, r_src.dump(src) or b"")
    assert await settle(proxy, links, real_cluster, e) is None
    assert (contents(real_cluster, src), contents(real_cluster, dst)) == DONE["LMOVE"]
    finish(e, r_src, r_dst, src, dst)


async def test_an_entry_whose_source_write_moved_nothing_moves_nothing(
    proxy: Proxy, real_cluster: list[ManagedProcess], links: journal.Links,
) -> None:
    """RENAMENX onto an existing key (step 2 answered 0); the destination was deleted since:
    settling must not rename now (the value would be in both keys)."""
    src, dst = two_keys_on_two_masters(real_cluster, f"jnx{uuid.uuid4().hex[:6]}")
    r_src, r_dst = master_of(real_cluster, src).client(), master_of(real_cluster, dst).client()
    r_src.set(src, "v")
    r_dst.set(dst, "w")
    e = leave_entry(real_cluster, ["RENAMENX", src, dst], dumped(real_cluster, src),
                    dumped(real_cluster, dst))
    r_dst.delete(dst)
    assert await settle(proxy, links, real_cluster, e) is None
    assert r_src.get(src) == b"v" and not r_dst.exists(dst)
    assert not r_src.exists(e.name)
    r_src.delete(src)


@pytest.mark.parametrize("step3_ran", [False, True], ids=["before-step-3", "step-3-ran"])
async def test_an_entry_whose_destination_refuses_puts_the_element_back(
    proxy: Proxy, real_cluster: list[ManagedProcess], links: journal.Links, step3_ran: bool,
) -> None:
    """LMOVE's source written, then the destination became a string: before step 3 ran, or
    when it ran (its marker says so; it kept its copy of the source whole) and the proxy
    died before putting the element back. The element goes back to the end it left."""
    src, dst, argv, before, r_src, r_dst = begin(real_cluster, "LMOVE")
    assert r_src.lpop(src) == b"a"
    e = leave_entry(real_cluster, argv, *before)
    r_dst.delete(dst)
    r_dst.set(dst, "a string")
    if step3_ran:
        r_dst.restore(journal.left_of(e), 0, bytes(before[0].payload or b""))
        r_dst.set(e.mark, crossslot.MARK_DONE)
    assert await settle(proxy, links, real_cluster, e) is None
    assert r_src.lrange(src, 0, -1) == [b"a", b"b", b"c"]
    assert r_dst.get(dst) == b"a string"
    finish(e, r_src, r_dst, src, dst)


async def test_an_entry_under_a_live_lease_waits_for_it(
    proxy: Proxy, real_cluster: list[ManagedProcess], links: journal.Links,
) -> None:
    """Another proxy (or sweeper) holds the entry's lease: it is left alone until the lease
    ends; then it is settled (the element reaches the destination once)."""
    src, dst, argv, before, r_src, r_dst = begin(real_cluster, "SMOVE")
    assert r_src.srem(src, "a") == 1
    e = leave_entry(real_cluster, argv, *before)
    r_src.set(e.lease, "someone else", px=60_000)
    left_s = await settle(proxy, links, real_cluster, e)
    assert left_s is not None and 50 < left_s <= 60
    assert r_src.exists(e.name) and sorted(r_dst.smembers(dst)) == [b"d"]
    r_src.delete(e.lease)
    assert await settle(proxy, links, real_cluster, e) is None
    assert (contents(real_cluster, src), contents(real_cluster, dst)) == DONE["SMOVE"]
    finish(e, r_src, r_dst, src, dst)


async def test_two_sweepers_at_once_settle_an_entry_once(
    proxy: Proxy, real_cluster: list[ManagedProcess],
) -> None:
    """Two proxies (or a proxy's sweep and another's) meet one entry at the same instant:
    one takes its lease and settles it, the other leaves it; the element moves once."""
    src, dst, argv, before, r_src, r_dst = begin(real_cluster, "LMOVE")
    assert r_src.lpop(src) == b"a"
    e = leave_entry(real_cluster, argv, *before)
    node = f"127.0.0.1:{master_of(real_cluster, src).port}"
    got: list[float | None] = []

    async def sweeper() -> None:
        links = journal.Links(ProxySettings(), ProxyMetrics())
        try:
            got.append(await journal.settle(links, proxy.topology, node, e.name, 5000))
        finally:
            await links.aclose()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sweeper)
        nursery.start_soon(sweeper)
    # One settled it (None); the other met its lease (seconds to wait), or came after the
    # settling and found no entry (None).
    assert len(got) == 2 and None in got
    assert (contents(real_cluster, src), contents(real_cluster, dst)) == DONE["LMOVE"]
    finish(e, r_src, r_dst, src, dst)


async def test_a_lost_destination_write_that_was_refused_puts_the_element_back(
    proxy: Proxy, real_cluster: list[ManagedProcess], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Step 3 runs while the destination has just become a string (refused), and its reply
    is lost: its marker says it ran; what it kept of its copy of the source says it moved
    nothing. The element goes back, the client is told the move was not done."""
    src, dst, argv, _, r_src, r_dst = begin(real_cluster, "LMOVE")
    calls = lose_destination_reply(monkeypatch, dst, before=lambda: (
        r_dst.delete(dst), r_dst.set(dst, "a string")))
    c = await connect(proxy)
    got = await c.call(*argv)
    monkeypatch.undo()
    assert calls
    assert got.startswith(b"-ERR slotgate: 'lmove' across slots not done"), got
    assert r_src.lrange(src, 0, -1) == [b"a", b"b", b"c"]
    assert r_dst.get(dst) == b"a string"
    assert entries(real_cluster) == []
    assert await c.call("KEYS", "*slotgate-[mt][am][rp]*") == b"*0\r\n"
    r_src.delete(src)
    r_dst.delete(dst)


async def test_an_msetnx_entry_whose_key_was_created_meanwhile_is_rolled_back(
    proxy: Proxy, real_cluster: list[ManagedProcess], links: journal.Links,
) -> None:
    """MSETNX wrote its first key's slot (with its entry), its proxy died, then another
    client created one of its other keys: it cannot end with all its keys set, so the one
    it wrote is deleted; the other client's key keeps its value."""
    first, other = keys_on_three_masters(real_cluster)[:2]
    r_first, r_other = (master_of(real_cluster, first).client(),
                        master_of(real_cluster, other).client())
    e = journal.new_entry(key_slot(first.encode()), key_slot(first.encode()))
    argv = [b"MSETNX", first.encode(), b"ours", other.encode(), b"ours too"]
    groups = [(crossslot.marker(key_slot(other.encode())), [other.encode()])]
    r_first.set(first, "ours")
    r_first.set(e.name, msetnxjournal.encode(argv, groups))
    r_other.set(other, "theirs")
    assert await settle(proxy, links, real_cluster, e) is None
    assert not r_first.exists(first, e.name) and r_other.get(other) == b"theirs"
    r_other.delete(other)


async def test_an_unreadable_entry_is_left_alone(
    real_cluster: list[ManagedProcess], caplog: pytest.LogCaptureFixture,
) -> None:
    """A key named as an entry but holding what no proxy wrote (an unknown command) is
    logged and left as it is: the proxy that meets it at start goes on serving."""
    key = f"bogus{uuid.uuid4().hex[:6]}"
    e = journal.new_entry(key_slot(key.encode()), key_slot(key.encode()))
    r = master_of(real_cluster, key).client()
    r.hset(e.name, mapping={"argc": "2", "a0": "NOSUCH", "a1": key})
    r.sadd(journal.index_of(e.name), e.name)
    try:
        p = Proxy(ProxySettings(listen_port=0, seeds=[("127.0.0.1", n.port)
                                                      for n in real_cluster[:3]]))
        async with trio.open_nursery() as nursery:
            await nursery.start(p.run)
            for _ in range(400):  # the sweep runs once the masters are known
                if "unreadable" in caplog.text:
                    break
                await trio.sleep(0.05)
            assert "unreadable" in caplog.text
            c = await connect(p)
            assert await c.call("PING") == b"+PONG\r\n"
            nursery.cancel_scope.cancel()
        assert r.exists(e.name)
    finally:
        r.delete(e.name, e.lease, journal.index_of(e.name))


def calls(r: redis.Redis, command: str) -> int:
    stat = r.info("commandstats").get(f"cmdstat_{command}")
    return int(stat["calls"]) if stat else 0


async def test_the_periodic_sweep_reads_the_slots_indexes_not_the_keyspace(
    real_cluster: list[ManagedProcess], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every sweep (at start, then each ``SWEEP_PERIOD_S``, shortened here) reads each
    slot's index, never ``SCAN``s a master: an entry left after the start-up sweep is
    settled by a later one, and an index member whose entry is gone is removed."""
    monkeypatch.setattr(journal, "SWEEP_PERIOD_S", 0.3)

    async def no_park_sweep(*_: object) -> None:  # (it SCANs, once, at start)
        return None

    monkeypatch.setattr(poppark, "sweep_at_start", no_park_sweep)
    masters = [n.client(socket_timeout=5) for n in real_cluster
               if n.alive() and n.client(socket_timeout=5).info("replication")["role"]
               == "master"]
    scans = [calls(r, "scan") for r in masters]
    src, dst, argv, before, r_src, r_dst = begin(real_cluster, "LMOVE")
    read = calls(r_src, "smembers")
    p = Proxy(ProxySettings(listen_port=0, seeds=[("127.0.0.1", n.port)
                                                  for n in real_cluster[:3]]))
    async with trio.open_nursery() as nursery:
        await nursery.start(p.run)
        for _ in range(400):  # the start-up sweep
            if calls(r_src, "smembers") > read:
                break
            await trio.sleep(0.05)
        assert r_src.lpop(src) == b"a"
        e = leave_entry(real_cluster, argv, *before)
        gone = journal.new_entry(key_slot(src.encode()), key_slot(dst.encode())).name
        r_src.sadd(journal.index_of(gone), gone)  # an entry settled, its index member left
        for _ in range(400):
            if not r_src.exists(journal.index_of(e.name)):
                break
            await trio.sleep(0.05)
        nursery.cancel_scope.cancel()
    assert (contents(real_cluster, src), contents(real_cluster, dst)) == DONE["LMOVE"]
    finish(e, r_src, r_dst, src, dst)
    assert not r_src.exists(journal.index_of(e.name))
    assert [calls(r, "scan") for r in masters] == scans


def test_entry_names_keep_the_sources_slot() -> None:
    e = journal.new_entry(key_slot(b"some:src"), key_slot(b"other:dst"))
    assert key_slot(e.name) == key_slot(e.lease) == key_slot(b"some:src")
    assert key_slot(e.mark) == key_slot(b"other:dst")
    assert journal.lease_of(e.name) == e.lease
    assert key_slot(journal.index_of(e.name)) == key_slot(b"some:src")
    assert [journal._period_s(t) for t in ("0.3", "", "soon", "0", "1e9")] == [0.3] + [60.0] * 4
    assert journal.index_of(e.name) == journal.slot_index(key_slot(b"some:src"))
    assert journal.is_entry(e.name)
    assert not journal.is_entry(b"app:slotgate-journal:1234abcd:1")
    assert not journal.is_entry(e.lease)
