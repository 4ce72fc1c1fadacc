"""Pops across slots when a connection is cut or a master dies: no element lost, none
duplicated (``proxy/routing/poppark.py``).

The real ``Proxy`` runs in this test's trio run in front of a real redis-server cluster of
this module's own (``test_crossslot_faults.py``'s fixtures: 3 masters, 2 replicas each; a
master is killed here). Every element pushed is
counted at the end: answered to exactly one client, or still in a key, never both, never
neither.
"""

from __future__ import annotations

import random
import uuid
from pathlib import Path

import pytest
import trio

from slotgate.protocol.resp import ReplyFramer
from slotgate.protocol.slots import key_slot
from slotgate.proxy import errors
from slotgate.proxy.backend.connections import BackendError, DirectConnection
from slotgate.proxy.front.server import Proxy
from slotgate.proxy.ops.settings import ProxySettings
from slotgate.proxy.routing import blockmulti, poppark
from slotgate.proxy.routing.redirect import error_frame
from tests.conftest import start_cluster
from tests.proxy import test_crossslot_faults as faults
from tests.proxy.test_crossslot_faults import (
    Client,
    connect,
    master_of,
    replicated_masters,
    two_keys_on_two_masters,
)
from tests.support import ManagedProcess

# The cluster (this module's own: module-scoped) and the proxy in front of it.
cluster = faults.cluster
proxy = faults.proxy
LISTS = ["BLPOP", "BRPOP", "BLMPOP"]
ZSETS = ["BZPOPMIN", "BZPOPMAX", "BZMPOP"]
_CUT = "element-cut-off"  # no key name of these tests holds it


def pop_args(command: str, keys: list[str], timeout: str) -> list[str]:
    if command in ("BLMPOP", "BZMPOP"):
        where = "LEFT" if command == "BLMPOP" else "MIN"
        return [command, timeout, str(len(keys)), *keys, where, "COUNT", "2"]
    return [command, *keys, timeout]


def strings(raw: bytes) -> list[bytes]:
    """Every bulk string of a reply, nested arrays included (scores too)."""
    framer = ReplyFramer()
    framer.feed(raw)
    out: list[bytes] = []
    todo = [f for _, f in framer.frames()]
    while todo:
        f = todo.pop(0)
        if f[:1] == b"$" and not f.startswith(b"$-1"):
            out.append(f[f.index(b"\r\n") + 2:-2])
        elif f[:1] == b"*" and not f.startswith(b"*-1"):
            inner = ReplyFramer()
            inner.feed(f[f.index(b"\r\n") + 2:])
            todo[:0] = [g for _, g in inner.frames()]
    return out


async def push(c: Client, command: str, key: str, elem: str, score: int) -> bytes:
    if command in LISTS:
        return await c.call("RPUSH", key, elem)
    return await c.call("ZADD", key, str(score), elem)


async def held(c: Client, command: str, key: str) -> list[bytes]:
    if command in LISTS:
        return strings(await c.call("LRANGE", key, "0", "-1"))
    return strings(await c.call("ZRANGE", key, "0", "-1"))


def parks(cluster: list[ManagedProcess]) -> list[object]:
    """Every park on a live master."""
    out: list[object] = []
    for n in cluster:
        if n.alive() and n.client(socket_timeout=5).info("replication")["role"] == "master":
            out += n.client(socket_timeout=5).keys("*" + poppark.PARK_PREFIX.decode() + "*")
    return out


@pytest.mark.parametrize("command", LISTS + ZSETS)
async def test_a_pop_whose_reply_is_cut_loses_nothing(
    proxy: Proxy, cluster: list[ManagedProcess], monkeypatch: pytest.MonkeyPatch,
    command: str,
) -> None:
    """A pop over two keys on two masters waits; an element arrives in the second key and
    the connection that popped it is cut as its reply comes back. The element is then
    either the client's reply or back in its key, once."""
    first, second = two_keys_on_two_masters(cluster, f"cut{command}{uuid.uuid4().hex[:6]}")
    cut: list[bytes] = []

    def cuts(payload: bytes, reply: bytes) -> bool:
        if not cut and _CUT.encode() in reply and _CUT.encode() not in payload:
            cut.append(payload)
            return True
        return False

    class Cutting:
        """A waiter's connection whose reply carrying the element is lost."""

        def __init__(self, conn: DirectConnection) -> None:
            self.conn = conn
            self.address, self.proto = conn.address, conn.proto

        @property
        def closed(self) -> bool:
            return self.conn.closed

        async def roundtrip(self, payload: bytes, replies: int) -> list[tuple[int, bytes]]:
            frames = await self.conn.roundtrip(payload, replies)
            if cuts(payload, frames[-1][1]):
                await self.conn.aclose()
                raise BackendError(f"connection to {self.address} lost: cut by the test")
            return frames

        async def aclose(self) -> None:
            await self.conn.aclose()

    real_open, real_on_owner = blockmulti.open_waiter, blockmulti.on_owner_at

    async def open_cutting(s: object, w: blockmulti.Waiter) -> None:
        await real_open(s, w)  # type: ignore[arg-type]
        w.conn = Cutting(w.conn)  # type: ignore[arg-type, assignment]

    async def on_owner_cutting(s: object, slot: int, payload: bytes,
                               *args: object) -> tuple[bytes, str]:
        raw, node = await real_on_owner(s, slot, payload, *args)  # type: ignore[arg-type]
        if cuts(payload, raw):  # ran, its reply lost with its connection
            return error_frame(errors.UNKNOWN_FATE_WRITE.format(node=node)), node
        return raw, node

    monkeypatch.setattr(blockmulti, "open_waiter", open_cutting)
    monkeypatch.setattr(blockmulti, "on_owner_at", on_owner_cutting)
    c, producer = await connect(proxy), await connect(proxy)
    got: list[bytes] = []
    async with trio.open_nursery() as nursery:
        async def pop() -> None:
            got.append(await c.call(*pop_args(command, [first, second], "3")))

        nursery.start_soon(pop)
        await trio.sleep(0.3)  # the waits are in place
        assert (await push(producer, command, second, _CUT, 7))[:1] == b":"
    monkeypatch.undo()
    assert cut, "no reply carried the element"
    answered = strings(got[0]).count(_CUT.encode())
    left = (await held(producer, command, second)).count(_CUT.encode())
    assert answered + left == 1, (got, left)
    assert parks(cluster) == []
    await producer.call("DEL", first, second)


async def pops_while_a_master_dies(p: Proxy, cluster: list[ManagedProcess], family: list[str],
                                   n_keys: int, n_elems: int, n_consumers: int) -> dict[str, int]:
    """Consumers pop (the commands of ``family``, over three random keys) while a producer
    pushes ``n_elems`` distinct elements into ``n_keys`` keys on every master; a third of
    the way, a master with replicas is killed (its writes held and replicated first: the
    pops cut off by the kill are what is tested) and fails over. Then every element is
    counted."""
    victim = next(n for n in cluster if n.alive() and n.port in replicated_masters(cluster))
    prefix = f"pk{uuid.uuid4().hex[:6]}:"
    keys = [f"{prefix}{i}" for i in range(n_keys)]
    on_victim = [k for k in keys if master_of(cluster, k).port == victim.port]
    assert on_victim
    answered: list[bytes] = []
    replies: dict[str, int] = {}
    stop = trio.Event()

    async def consumer(seed: int) -> None:
        rng = random.Random(seed)
        me = await connect(p)
        while not stop.is_set():
            command = rng.choice(family)
            reply = await me.call(*pop_args(command, rng.sample(keys, 3), "0.2"))
            kind = reply[:1].decode() if reply[:1] != b"-" else reply[:60].decode()
            replies[kind] = replies.get(kind, 0) + 1
            answered.extend(e for e in strings(reply) if e.startswith(b"e"))
        await me.stream.aclose()

    producer = await connect(p)
    async with trio.open_nursery() as nursery:
        for seed in range(n_consumers):
            nursery.start_soon(consumer, seed)
        rng = random.Random(99)
        for i in range(n_elems):
            if i == n_elems // 3:
                victim.client().execute_command("CLIENT", "PAUSE", "10000", "WRITE")
                await trio.sleep(0.5)  # what it ran is on its replicas
                victim.kill()
            key = on_victim[0] if i == n_elems // 3 else rng.choice(keys)
            for _ in range(200):  # refused while its master fails over: sent again
                if (await push(producer, family[0], key, f"e{i}", i))[:1] == b":":
                    break
                await trio.sleep(0.1)
            else:
                raise AssertionError(f"e{i} never pushed")
        await trio.sleep(1)
        stop.set()
    left: list[bytes] = []
    for key in keys:
        left += await held(producer, family[0], key)
    await producer.call("DEL", *keys)
    counts: dict[bytes, int] = {}
    for e in answered + left:
        counts[e] = counts.get(e, 0) + 1
    want = {b"e%d" % i for i in range(n_elems)}
    return {"answered": len(answered), "left": len(left), "lost": len(want - counts.keys()),
            "duplicated": sum(n - 1 for n in counts.values()),
            "unknown": sum(1 for e in counts if e not in want), "parks": len(parks(cluster)),
            **replies}


@pytest.mark.parametrize("family", [LISTS, ZSETS], ids=["lists", "zsets"])
async def test_pops_while_a_master_is_killed_lose_nothing(
    proxy: Proxy, cluster: list[ManagedProcess], family: list[str],
) -> None:
    got = await pops_while_a_master_dies(proxy, cluster, family, n_keys=12, n_elems=150,
                                         n_consumers=4)
    print("pops:", got)
    assert got["lost"] == got["duplicated"] == got["unknown"] == got["parks"] == 0, got


@pytest.mark.slow
@pytest.mark.parametrize("family", [LISTS, ZSETS], ids=["lists", "zsets"])
async def test_soak_pops_200_keys_a_master_killed(tmp_path: Path, family: list[str]) -> None:
    nodes = start_cluster("real", tmp_path)
    try:
        p = Proxy(ProxySettings(listen_port=0, seeds=[("127.0.0.1", n.port) for n in nodes[:3]]))
        async with trio.open_nursery() as nursery:
            await nursery.start(p.run)
            got = await pops_while_a_master_dies(p, nodes, family, n_keys=200, n_elems=3000,
                                                 n_consumers=12)
            nursery.cancel_scope.cancel()
    finally:
        for n in nodes:
            n.stop()
    print("pops:", got)
    assert got["lost"] == got["duplicated"] == got["unknown"] == got["parks"] == 0, got


def test_park_names_carry_their_key() -> None:
    name = poppark.park(b"some:key{x}", b"L")
    assert key_slot(name) == key_slot(b"some:key{x}")
    assert poppark.parsed(name) == (b"L", b"some:key{x}")
    assert poppark.parsed(b"other") is None


async def test_a_proxy_starting_pushes_back_what_a_dead_one_left_parked(
    cluster: list[ManagedProcess],
) -> None:
    """Parks as a proxy killed mid-pop leaves them (a list's, popped from its left; a sorted
    set's) go back into their keys when a proxy starts."""
    key, zkey = two_keys_on_two_masters(cluster, f"swept{uuid.uuid4().hex[:6]}")
    lpark, zpark = poppark.park(key.encode(), b"L"), poppark.park(zkey.encode(), b"Z")
    master_of(cluster, key).client().rpush(lpark, "p1", "p2")
    master_of(cluster, key).client().rpush(key, "p3")
    master_of(cluster, zkey).client().zadd(zpark, {"m1": 1.5})
    alive = [n for n in cluster if n.alive()]
    p = Proxy(ProxySettings(listen_port=0, seeds=[("127.0.0.1", n.port) for n in alive[:3]]))
    async with trio.open_nursery() as nursery:
        await nursery.start(p.run)
        c = await connect(p)
        with trio.fail_after(20):
            for _ in range(400):  # the sweep runs once the masters are known
                if not parks(cluster):
                    break
                await trio.sleep(0.05)
            assert parks(cluster) == []
        assert await held(c, "BLPOP", key) == [b"p1", b"p2", b"p3"]
        assert strings(await c.call("ZRANGE", zkey, "0", "-1", "WITHSCORES")) == [b"m1", b"1.5"]
        await c.call("DEL", key, zkey)
        nursery.cancel_scope.cancel()
