"""A bug while a client is served closes that client's connection only; the node serves on.

Why in-process: the node has no fault trigger of its own, and a debug command that raises
would put test-only code in the product. So the real ``Server`` runs under this test's trio
run, with real loopback clients, and the fault is injected by wrapping the request-batch
runner (``dispatch.run_requests``) so that it raises when a batch holds a ``CRASH`` request.
(A command handler's own exception is already turned into an ``ERR internal error`` reply by
dispatch; the wrapper stands for a bug outside that guard: the parser, the dispatch loop, the
send path.) Before the shared event core such an exception left the poller task and ended the
whole node (``Server.run`` raised); these tests fail there.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import trio

from slotgate.node.core import dispatch
from slotgate.node.core.client import Client
from slotgate.node.core.config import load
from slotgate.node.core.server import Server
from slotgate.protocol.resp import encode_command
from tests.fault import (
    INJECTED,
    crash_logged,
    exchange,
    fault_in_a_pass_closes_one_client,
    read_to_close,
)

CRASH = encode_command(b"CRASH")


@pytest.fixture
async def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Server]:
    monkeypatch.chdir(tmp_path)
    srv = Server(load(["--port", "0", "--bind", "127.0.0.1", "--save", "",
                       "--dir", str(tmp_path)]))
    run_requests: Callable[..., int] = dispatch.run_requests

    def faulty(c: Client, reqs: list[list[bytes]], start: int = 0) -> int:
        if any(argv[0].upper() == b"CRASH" for argv in reqs[start:]):
            raise RuntimeError(INJECTED)
        return run_requests(c, reqs, start)

    monkeypatch.setattr(dispatch, "run_requests", faulty)
    async with trio.open_nursery() as nursery:
        await nursery.start(srv.run)
        yield srv
        nursery.cancel_scope.cancel()


async def connect(srv: Server) -> trio.SocketStream:
    return await trio.open_tcp_stream("127.0.0.1", srv.port)


async def test_a_handler_bug_in_a_poller_pass_closes_that_client_only(
    node: Server, caplog: pytest.LogCaptureFixture,
) -> None:
    await fault_in_a_pass_closes_one_client(lambda: connect(node), CRASH, caplog)


async def test_a_handler_bug_in_the_clients_own_task_closes_that_client_only(
    node: Server, caplog: pytest.LogCaptureFixture,
) -> None:
    """After a blocking command, the rest of the pipeline runs in the client's own task (not
    in a poller pass): a bug there is handled the same way."""
    victim = await connect(node)
    other = await connect(node)
    await victim.send_all(encode_command(b"BLPOP", b"q", b"0"))
    await trio.testing.wait_all_tasks_blocked()
    assert node.blocked_clients == 1
    await victim.send_all(CRASH)
    await trio.testing.wait_all_tasks_blocked()  # read and buffered while the client blocks
    await exchange(other, encode_command(b"LPUSH", b"q", b"x"), b":1\r\n")
    await exchange(victim, b"", b"*2\r\n$1\r\nq\r\n$1\r\nx\r\n")  # BLPOP's reply, then CRASH
    assert await read_to_close(victim) == b""
    assert crash_logged(caplog, "node")  # by the client's task
    await exchange(other, encode_command(b"PING"), b"+PONG\r\n")
    late = await connect(node)
    await exchange(late, encode_command(b"PING"), b"+PONG\r\n")
