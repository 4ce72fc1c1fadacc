"""The proxy's session, router and fan-out in one trio run, against a fake cluster
(tests/proxy/fakecluster.py): no processes, milliseconds per test.

The proxy is the real one (``Proxy.run`` on a loopback port, its real backend connections);
only the nodes are fakes, which answer from dicts and can be told to redirect. The client is
the blocking ``RawClient``, run in a worker thread.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import pytest
import trio

from slotgate.protocol.commands import COMMANDS
from slotgate.protocol.overrides import ROUTES as ROUTE_NAMES
from slotgate.protocol.resp import encode_command
from slotgate.protocol.slots import key_slot
from slotgate.proxy import errors
from slotgate.proxy.front import routes
from slotgate.proxy.front.routes import ROUTES
from slotgate.proxy.front.server import Proxy
from slotgate.proxy.ops.settings import ProxySettings
from tests.proxy.fakecluster import NULL, FakeCluster, FakeNode, array, bulk
from tests.support import RawClient

MAX_REDIRECTS = 3


@dataclass
class Setup:
    cluster: FakeCluster
    proxy: Proxy
    client: RawClient

    async def call(self, *args: bytes | str | int) -> bytes:
        return await trio.to_thread.run_sync(lambda: self.client.call(*args))

    async def pipeline(self, commands: list[list[bytes]]) -> list[bytes]:
        return await trio.to_thread.run_sync(lambda: self.client.pipeline(commands))

    def redirects(self, kind: str) -> int:
        return self.proxy.metrics.total("redirect", kind)


@pytest.fixture
async def setup() -> AsyncIterator[Setup]:
    async with trio.open_nursery() as nursery:
        cluster = FakeCluster(3)
        await cluster.start(nursery)
        host, _, port = cluster.nodes[0].address.rpartition(":")
        settings = ProxySettings(
            listen_port=0, seeds=[(host, int(port))], max_redirects=MAX_REDIRECTS,
            retry_deadline_ms=2000, retry_backoff_min_ms=1, retry_backoff_max_ms=10,
            connect_timeout_ms=1000, shutdown_grace_ms=100)
        proxy = Proxy(settings)
        await nursery.start(proxy.run)
        proxy_port = int(proxy.listen_address.rpartition(":")[2])
        client = await trio.to_thread.run_sync(lambda: RawClient(proxy_port, timeout_s=10))
        try:
            with trio.fail_after(20):
                yield Setup(cluster, proxy, client)
        finally:
            client.close()
            nursery.cancel_scope.cancel()


def key_on(node: FakeNode, prefix: str = "k", taken: Callable[[bytes], bool] = lambda k: False,
           ) -> bytes:
    """A key whose slot ``node`` owns."""
    for i in range(100_000):
        key = f"{prefix}{i}".encode()
        if node.cluster.owner[key_slot(key)] is node and not taken(key):
            return key
    raise AssertionError("no key found")


def ping_pong(cluster: FakeCluster, slot: int) -> tuple[FakeNode, FakeNode]:
    """Two nodes that send ``slot`` to each other forever (the first owns it)."""
    a = cluster.owner[slot]
    assert a is not None
    b = next(n for n in cluster.nodes if n is not a)
    a.moved_to[slot] = b.address
    b.moved_to[slot] = a.address
    return a, b


# --- the route table ---------------------------------------------------------------------------
def test_every_route_of_the_command_table_has_a_function() -> None:
    used = {info.route for info in COMMANDS.values()}
    used |= {sub.route for info in COMMANDS.values() for sub in info.subcommands.values()}
    # Every declared route has its function, also all_nodes, which no row names today
    # (LATENCY RESET is the proxy's own) but guard.py hands CONFIG SET to.
    assert used <= set(ROUTES) == ROUTE_NAMES
    assert ROUTE_NAMES - used == {"all_nodes"}
    assert ROUTES["single"] is routes.single and ROUTES["all_masters"] is routes.all_nodes
    with pytest.raises(KeyError):
        routes.table({"single", "no-such-route"})  # a route without a function fails the import


# --- one slot ----------------------------------------------------------------------------------
async def test_single_slot_requests_go_to_the_owner_only(setup: Setup) -> None:
    a, b, c = setup.cluster.nodes
    ka, kb = key_on(a), key_on(b)
    assert await setup.pipeline([[b"SET", ka, b"1"], [b"SET", kb, b"2"]]) == [b"+OK\r\n"] * 2
    assert await setup.call("GET", ka) == bulk(b"1")
    assert await setup.call("GET", kb) == bulk(b"2")
    assert a.data == {ka: b"1"} and b.data == {kb: b"2"} and c.data == {}
    assert [argv[1] for argv in a.commands(b"GET")] == [ka]
    assert [argv[1] for argv in b.commands(b"GET")] == [kb]
    assert c.commands(b"GET") == []
    assert setup.redirects("MOVED") == 0


async def test_requests_go_on_as_the_client_wrote_them(setup: Setup) -> None:
    """A request in its packed form is sent to the node as the bytes the client sent (the
    canonical parser's, forced on here whichever build runs); inline requests and requests
    cut across reads between them are packed again, each still beside its own request."""
    a = setup.cluster.nodes[0]
    key, items = key_on(a), key_on(a, "l")
    assert await setup.call("PING") == b"+PONG\r\n"  # the session has its request reader now
    (session,) = setup.proxy.sessions
    session._reader.use_canonical = True
    wire = (encode_command("SET", key, "1") + b"INCR " + key + b"\r\n"
            + encode_command("GET", key) + encode_command("incr", key)
            + b"GET " + key + b"\r\n" + encode_command("RPUSH", items, "x", "y"))
    await trio.to_thread.run_sync(lambda: setup.client.send_raw(wire))
    replies = await trio.to_thread.run_sync(lambda: setup.client.read_frames(6))
    assert replies == [b"+OK\r\n", b":2\r\n", bulk(b"2"), b":3\r\n", bulk(b"3"), b":2\r\n"]
    half = len(wire) // 2  # a request cut in two reads
    await trio.to_thread.run_sync(lambda: setup.client.send_raw(wire[:half]))
    await trio.sleep(0.05)
    await trio.to_thread.run_sync(lambda: setup.client.send_raw(wire[half:]))
    replies = await trio.to_thread.run_sync(lambda: setup.client.read_frames(6))
    assert replies == [b"+OK\r\n", b":2\r\n", bulk(b"2"), b":3\r\n", bulk(b"3"), b":4\r\n"]
    assert [argv[0].lower() for argv in a.log if argv[1:2] in ([key], [items])] == [
        b"set", b"incr", b"get", b"incr", b"get", b"rpush"] * 2


async def test_moved_is_followed_and_the_map_patched(setup: Setup) -> None:
    a, b, _ = setup.cluster.nodes
    key = key_on(a)
    await setup.call("SET", key, "v")
    setup.cluster.move(key_slot(key), b)  # the proxy's map still says a
    assert await setup.call("GET", key) == bulk(b"v")
    assert len(a.commands(b"GET")) == 1 and len(b.commands(b"GET")) == 1
    assert setup.redirects("MOVED") == 1
    assert await setup.call("GET", key) == bulk(b"v")
    assert len(a.commands(b"GET")) == 1, "the second GET goes to the new owner directly"


async def test_ask_is_followed_once_with_asking(setup: Setup) -> None:
    a, b, _ = setup.cluster.nodes
    key = key_on(a)
    slot = key_slot(key)
    a.ask_to[slot] = b.address  # migrating a -> b; the key is already on b
    b.importing.add(slot)
    b.data[key] = b"moved-already"
    assert await setup.call("GET", key) == bulk(b"moved-already")
    # (the proxy's journal sweep may send its SMEMBERS to b meanwhile, on a connection of its own)
    assert [c for c in b.log if c[0] != b"SMEMBERS"][-2:] == [[b"ASKING"], [b"GET", key]]
    assert setup.redirects("ASK") == 1
    # ASK does not change the map: the next request asks a first again.
    assert await setup.call("GET", key) == bulk(b"moved-already")
    assert len(a.commands(b"GET")) == 2


async def test_tryagain_is_retried(setup: Setup) -> None:
    a = setup.cluster.nodes[0]
    key = key_on(a)
    a.data[key] = b"v"
    a.faults[b"GET"] = [b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n"]
    assert await setup.call("GET", key) == bulk(b"v")
    assert len(a.commands(b"GET")) == 2
    assert setup.redirects("TRYAGAIN") == 1


async def test_redirects_are_bounded(setup: Setup) -> None:
    key = key_on(setup.cluster.nodes[0])
    a, b = ping_pong(setup.cluster, key_slot(key))
    reply = await setup.call("GET", key)
    assert reply == b"-%s\r\n" % errors.TOO_MANY_REDIRECTS.format(
        count=MAX_REDIRECTS, slot=key_slot(key)).encode()
    assert len(a.commands(b"GET")) + len(b.commands(b"GET")) == MAX_REDIRECTS + 1


# --- split requests ----------------------------------------------------------------------------
async def test_split_mget_is_merged_in_key_order(setup: Setup) -> None:
    a, b, c = setup.cluster.nodes
    keys: list[bytes] = []
    for node in (b, a, c, a, b, c):  # owners interleaved, so parts come back out of key order
        keys.append(key_on(node, taken=lambda k: k in keys))
    for i, key in enumerate(keys[:-1]):
        setup.cluster.node_of(key).data[key] = b"v%d" % i
    reply = await setup.call("MGET", *keys)
    assert reply == array([bulk(b"v%d" % i) for i in range(5)] + [NULL])
    for node in (a, b, c):
        sent = [k for argv in node.log if argv[0].upper() in (b"GET", b"MGET") for k in argv[1:]]
        assert sorted(sent) == sorted(k for k in keys if setup.cluster.node_of(k) is node)


async def test_split_mget_part_follows_moved(setup: Setup) -> None:
    a, b, c = setup.cluster.nodes
    keys = [key_on(a), key_on(b), key_on(c)]
    for i, key in enumerate(keys):
        setup.cluster.node_of(key).data[key] = b"v%d" % i
    setup.cluster.move(key_slot(keys[0]), c)
    assert await setup.call("MGET", *keys) == array([bulk(b"v0"), bulk(b"v1"), bulk(b"v2")])
    assert setup.redirects("MOVED") == 1


def _keys_around(cluster: FakeCluster) -> list[bytes]:
    """Six keys in six slots, their owners interleaved (a, b, c, a, b, c)."""
    keys: list[bytes] = []
    for node in (*cluster.nodes, *cluster.nodes):
        keys.append(key_on(node, "m", taken=lambda k: k in keys))
    return keys


async def test_split_merges_count_and_fail_per_key(setup: Setup) -> None:
    """Parts answered per key, in each node's batch: DEL sums its integers, MSET is +OK, MGET
    a null for WRONGTYPE; any other error (a blob error ``!`` too) is the reply, the first in
    key order."""
    a, b, c = setup.cluster.nodes
    keys = _keys_around(setup.cluster)
    assert await setup.call("MSET", *(w for k in keys for w in (k, k + b"v"))) == b"+OK\r\n"
    assert await setup.call("DEL", *keys[:4]) == b":4\r\n"
    assert await setup.call("DEL", *keys) == b":2\r\n"
    assert await setup.call("MSET", *(w for k in keys for w in (k, b"x"))) == b"+OK\r\n"
    c.faults[b"DEL"] = [b"-ERR first\r\n"]  # keys[2]
    b.faults[b"DEL"] = [b":1\r\n", b"!11\r\nERR blob\r\nx\r\n"]  # keys[1], keys[4]
    assert await setup.call("DEL", *keys) == b"-ERR first\r\n"
    b.faults[b"DEL"] = [b"!6\r\nERR b2\r\n"]  # keys[4], the first of b's in this order
    assert await setup.call("DEL", *keys[2:], keys[1]) == b"!6\r\nERR b2\r\n"
    a.faults[b"MSET"] = [b"-ERR no room\r\n"]  # keys[0] (a part is MSET of one key)
    reply = await setup.call("MSET", *(w for k in keys for w in (k, b"y")))
    assert reply == b"-ERR no room\r\n"
    assert keys[0] not in a.data and a.data[keys[3]] == b"y"
    b.faults[b"GET"] = [b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"]
    assert await setup.call("MGET", *keys[1:4]) == array([NULL, bulk(b"y"), bulk(b"y")])
    c.faults[b"GET"] = [b"-ERR gone\r\n"]
    assert await setup.call("MGET", *keys[1:4]) == b"-ERR gone\r\n"
    assert await setup.call("DEL", *keys) == b":5\r\n"
    # Keys and values past the pre-made length heads, beside short ones.
    long_keys = [key_on(node, "L" * 300) for node in (a, b)]
    big = b"v" * 2000
    reply = await setup.call("MSET", long_keys[0], big, long_keys[1], b"s", keys[2], big)
    assert reply == b"+OK\r\n"
    assert await setup.call("MGET", *long_keys, keys[2]) == array([bulk(big), bulk(b"s"),
                                                                    bulk(big)])
    assert await setup.call("DEL", *long_keys, keys[2]) == b":3\r\n"
    # /slots counts a request once per slot it reached, also when two keys share a slot
    # (the general planner's path: one part for both).
    counts = setup.proxy.metrics.slot_requests
    slots = [key_slot(k) for k in (keys[0], keys[1], b"{t}a")]
    before = [counts[s] for s in slots]
    assert await setup.call("MGET", keys[0], b"{t}a", keys[1], b"{t}b") == array([NULL] * 4)
    assert [counts[s] - n for s, n in zip(slots, before, strict=True)] == [1, 1, 1]


# --- requests on the client's own connection: MULTI/EXEC, WATCH, blocking commands -----------
def _transaction(key: bytes) -> list[list[bytes]]:
    return [[b"MULTI"], [b"SET", key, b"1"], [b"INCR", key], [b"EXEC"]]


async def test_transaction_follows_moved(setup: Setup) -> None:
    a, b, _ = setup.cluster.nodes
    key = key_on(a, "t")
    setup.cluster.move(key_slot(key), b)
    replies = await setup.pipeline(_transaction(key))
    assert replies == [b"+OK\r\n", b"+QUEUED\r\n", b"+QUEUED\r\n", b"*2\r\n+OK\r\n:2\r\n"]
    assert len(a.commands(b"EXEC")) == 1 and len(b.commands(b"EXEC")) == 1
    assert b.data == {key: b"2"}
    assert setup.redirects("MOVED") == 1


async def test_transaction_redirects_are_bounded(setup: Setup) -> None:
    key = key_on(setup.cluster.nodes[0], "t")
    a, b = ping_pong(setup.cluster, key_slot(key))
    replies = await setup.pipeline(_transaction(key))
    assert replies[3] == b"-%s\r\n" % errors.TOO_MANY_REDIRECTS.format(
        count=MAX_REDIRECTS, slot=key_slot(key)).encode()
    assert len(a.commands(b"EXEC")) + len(b.commands(b"EXEC")) == MAX_REDIRECTS + 1
    assert await setup.call("PING") == b"+PONG\r\n"  # the session serves on


async def test_transaction_tryagain_is_retried(setup: Setup) -> None:
    a = setup.cluster.nodes[0]
    key = key_on(a, "t")
    a.faults[b"EXEC"] = [b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n"]
    replies = await setup.pipeline(_transaction(key))
    assert replies[3] == b"*2\r\n+OK\r\n:2\r\n"
    assert len(a.commands(b"EXEC")) == 2


async def test_watch_follows_moved_and_the_transaction_runs_there(setup: Setup) -> None:
    a, b, _ = setup.cluster.nodes
    key = key_on(a, "w")
    setup.cluster.move(key_slot(key), b)
    assert await setup.call("WATCH", key) == b"+OK\r\n"
    replies = await setup.pipeline(_transaction(key))
    assert replies[3] == b"*2\r\n+OK\r\n:2\r\n"
    assert len(b.commands(b"WATCH")) == 1 and len(b.commands(b"EXEC")) == 1


async def test_watch_redirects_are_bounded(setup: Setup) -> None:
    key = key_on(setup.cluster.nodes[0], "w")
    a, b = ping_pong(setup.cluster, key_slot(key))
    assert await setup.call("WATCH", key) == b"-%s\r\n" % errors.TOO_MANY_REDIRECTS.format(
        count=MAX_REDIRECTS, slot=key_slot(key)).encode()
    assert len(a.commands(b"WATCH")) + len(b.commands(b"WATCH")) == MAX_REDIRECTS + 1
    assert await setup.call("PING") == b"+PONG\r\n"


async def test_blocking_command_follows_moved(setup: Setup) -> None:
    a, b, _ = setup.cluster.nodes
    key = key_on(a, "q")
    a.data[key] = [b"job"]
    setup.cluster.move(key_slot(key), b)
    assert await setup.call("BLPOP", key, "0") == array([bulk(key), bulk(b"job")])
    assert len(a.commands(b"BLPOP")) == 1 and len(b.commands(b"BLPOP")) == 1


async def test_a_client_that_closes_ends_its_session_quietly(
        setup: Setup, caplog: pytest.LogCaptureFixture) -> None:
    """A client's close (EOF while its session waits for input, idle or after requests) ends
    the session without an error (compiled, the read loop once refused the poller's EOF)."""
    port = int(setup.proxy.listen_address.rpartition(":")[2])
    before = len(setup.proxy.sessions)
    with caplog.at_level(logging.ERROR, logger="slotgate"):
        for requests in (0, 1):
            client = await trio.to_thread.run_sync(lambda: RawClient(port, timeout_s=10))
            if requests:
                assert await trio.to_thread.run_sync(client.call, "PING") == b"+PONG\r\n"
            client.close()
        for _ in range(1000):  # until both sessions ended (10 s at most)
            if len(setup.proxy.sessions) <= before:
                break
            await trio.sleep(0.01)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
