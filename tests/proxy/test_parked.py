"""Parked connections: an idle client's session has no task (front/session.py ``_park``), its
socket is served by the poller alone, and a task is started again when one is needed.

In one trio run against the fake cluster (tests/proxy/fakecluster.py), as
test_session_inproc.py: requests served while parked, input split across a park, a kill, a
close, a reset, QUIT, shutdown and cancellation while parked, output the socket does not take
at once, MONITOR lines to a parked monitor.
"""

from __future__ import annotations

import logging
import socket
import struct
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest
import trio

from slotgate.proxy.front.server import Proxy
from slotgate.proxy.front.session import Session
from slotgate.proxy.ops.settings import ProxySettings
from tests.proxy.fakecluster import FakeCluster, bulk

PING = b"*1\r\n$4\r\nPING\r\n"


def command(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(bulk(a) for a in args)


async def until(cond: Callable[[], object], what: str) -> None:
    with trio.move_on_after(10):
        while not cond():  # noqa: ASYNC110 (states of the proxy that have no event)
            await trio.sleep(0.01)
        return
    raise AssertionError(f"never happened: {what}")


class Client:
    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buf = b""

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def read(self, n: int) -> bytes:
        """Exactly ``n`` bytes (fewer only at EOF)."""
        with trio.fail_after(10):
            while len(self.buf) < n:
                data = await self.stream.receive_some(1 << 20)
                if not data:
                    break
                self.buf += data
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    async def call(self, request: bytes, reply_len: int) -> bytes:
        await self.send(request)
        return await self.read(reply_len)

    async def eof(self) -> bool:
        """The proxy closed the connection (everything before it read and dropped)."""
        with trio.fail_after(10):
            while True:
                try:
                    data = await self.stream.receive_some(1 << 20)
                except trio.BrokenResourceError:
                    return True
                if not data:
                    return True


@dataclass
class Env:
    cluster: FakeCluster
    proxy: Proxy
    port: int
    resumed: list[object] = field(default_factory=list)  # why parked sessions woke

    async def connect(self) -> tuple[Client, Session]:
        stream = await trio.open_tcp_stream("127.0.0.1", self.port)
        host, port = stream.socket.getsockname()[:2]
        name = f"{host}:{port}"
        client = Client(stream)
        await until(lambda: any(s.peer == name for s in self.proxy.sessions), "accepted")
        session = next(s for s in self.proxy.sessions if s.peer == name)
        await until(lambda: session._parked, "parked")
        return client, session


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    async with trio.open_nursery() as nursery:
        cluster = FakeCluster(3)
        await cluster.start(nursery)
        proxy = Proxy(ProxySettings(listen_port=0, seeds=cluster.seeds(), shutdown_grace_ms=500))
        await nursery.start(proxy.run)
        e = Env(cluster, proxy, int(proxy.listen_address.rpartition(":")[2]))
        resume = proxy.resume

        def counted(session: Session, woken: object) -> None:
            e.resumed.append(woken)
            resume(session, woken)

        proxy.resume = counted  # type: ignore[method-assign]
        with trio.fail_after(30):
            yield e
        nursery.cancel_scope.cancel()


async def test_requests_are_served_parked_without_a_task(env: Env) -> None:
    client, session = await env.connect()
    for _ in range(3):
        assert await client.call(PING, 7) == b"+PONG\r\n"
        assert await client.call(command(b"SET", b"k", b"v"), 5) == b"+OK\r\n"
        assert await client.call(command(b"GET", b"k"), 7) == b"$1\r\nv\r\n"
    assert session._parked and env.resumed == []


@pytest.mark.parametrize("cut", [4, 8, 9, 13])
async def test_a_request_split_across_a_park(env: Env, cut: int) -> None:
    """A transaction wakes the session's task; the next request's first ``cut`` bytes come
    with EXEC (a header, a header and a length, a part of an argument ...), the session parks
    with them parsed or buffered, the rest arrives while it is parked."""
    client, session = await env.connect()
    assert await client.call(command(b"MULTI"), 5) == b"+OK\r\n"
    assert await client.call(command(b"SET", b"k", b"v"), 9) == b"+QUEUED\r\n"
    get = command(b"GET", b"k")
    await client.send(command(b"EXEC") + get[:cut])
    assert await client.read(9) == b"*1\r\n+OK\r\n"
    await until(lambda: session._parked, "parked after EXEC")
    await client.send(get[cut:])
    assert await client.read(7) == b"$1\r\nv\r\n"


async def test_killed_while_parked(env: Env) -> None:
    client, session = await env.connect()
    other, _ = await env.connect()
    sessions = len(env.proxy.sessions)
    assert await other.call(command(b"CLIENT", b"KILL", b"ID", b"%d" % session.id), 4) == b":1\r\n"
    assert await client.eof()
    await until(lambda: len(env.proxy.sessions) == sessions - 1, "the session ended")
    assert session.closed
    assert await other.call(PING, 7) == b"+PONG\r\n"


@pytest.mark.parametrize("reset", [False, True], ids=["close", "reset"])
async def test_peer_gone_while_parked(env: Env, reset: bool,
                                      caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="slotgate"):
        client, session = await env.connect()
        assert await client.call(PING, 7) == b"+PONG\r\n"
        await until(lambda: session._parked, "parked")
        if reset:  # RST, not FIN: the proxy's read fails (ECONNRESET)
            client.stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                            struct.pack("ii", 1, 0))
        await client.stream.aclose()
        await until(lambda: session not in env.proxy.sessions, "the session ended")
    assert session.closed and session._sock.fileno() == -1
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


async def test_quit_while_parked(env: Env) -> None:
    client, session = await env.connect()
    assert await client.call(command(b"QUIT"), 5) == b"+OK\r\n"
    assert await client.eof()
    await until(lambda: session.closed, "closed")


async def test_output_the_socket_does_not_take_at_once(env: Env) -> None:
    """Replies larger than the socket takes in one send: the rest needs the writer task,
    started for the parked session (else the rest would never go)."""
    client, session = await env.connect()
    # (the proxy's side takes little at once, whatever the machine's loopback buffers)
    session._sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
    value = b"x" * (1 << 20)
    env.cluster.node_of(b"big").data[b"big"] = value
    reply = bulk(value)
    await client.send(command(b"GET", b"big") * 4)
    await until(lambda: not session._parked, "woken for the rest")
    for _ in range(4):
        assert await client.read(len(reply)) == reply
    assert await client.call(PING, 7) == b"+PONG\r\n"


async def test_monitor_lines_reach_a_parked_monitor(env: Env) -> None:
    watcher, session = await env.connect()
    assert await watcher.call(command(b"MONITOR"), 5) == b"+OK\r\n"
    await until(lambda: session._parked, "parked while monitoring")
    client, _ = await env.connect()
    assert await client.call(command(b"ECHO", b"hello"), 11) == b"$5\r\nhello\r\n"
    line = await watcher.read(1)
    while not line.endswith(b"\r\n"):
        line += await watcher.read(1)
    assert line.startswith(b"+") and b'"ECHO" "hello"' in line


async def test_shutdown_while_parked(env: Env) -> None:
    """Shutdown wakes a parked session, which still gets the reply it is owed."""
    client, session = await env.connect()
    node = env.cluster.node_of(b"slow")
    node.hold = trio.Event()
    await client.send(command(b"GET", b"slow"))
    await until(lambda: node.commands(b"GET"), "the request sent")
    assert session._parked and session.unfilled == 1
    env.proxy.shutdown()
    await trio.sleep(0.2)  # (part of the scenario: the shutdown under way)
    node.hold.set()
    assert await client.read(5) == b"$-1\r\n"
    assert await client.eof()
    await until(lambda: session.closed, "closed")


async def test_cancelled_while_parked() -> None:
    """The proxy cancelled (not shut down): its parked connections are closed all the same."""
    async with trio.open_nursery() as nursery:
        cluster = FakeCluster(1)
        await cluster.start(nursery)
        proxy = Proxy(ProxySettings(listen_port=0, seeds=cluster.seeds()))
        async with trio.open_nursery() as proxy_nursery:
            await proxy_nursery.start(proxy.run)
            env = Env(cluster, proxy, int(proxy.listen_address.rpartition(":")[2]))
            client, session = await env.connect()
            proxy_nursery.cancel_scope.cancel()
        assert session.closed and session._sock.fileno() == -1
        assert await client.eof()
        nursery.cancel_scope.cancel()
