"""Helpers for the fault tests: a server (node or proxy) runs in the test's own trio run, a
bug is injected, and real loopback clients check that only the faulty connection closed."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
import trio

from slotgate.protocol.resp import encode_command

INJECTED = "injected handler bug"


async def exchange(stream: trio.SocketStream, request: bytes, reply: bytes) -> None:
    """Send ``request``; exactly ``reply`` comes back."""
    await stream.send_all(request)
    got = b""
    with trio.fail_after(10):
        while len(got) < len(reply):
            data = await stream.receive_some(65536)
            assert data, f"closed after {got!r}"
            got += data
    assert got == reply


async def read_to_close(stream: trio.SocketStream) -> bytes:
    """Everything until the server closes the connection."""
    got = b""
    with trio.fail_after(10):
        try:
            while data := await stream.receive_some(65536):
                got += data
        except trio.BrokenResourceError:
            pass  # reset: closed as well
    return got


def crash_logged(caplog: pytest.LogCaptureFixture, logger: str) -> bool:
    """The injected bug was logged with its traceback, by ``logger``."""
    return any(r.name == logger and r.exc_info is not None for r in caplog.records) \
        and f"RuntimeError: {INJECTED}" in caplog.text


async def fault_in_a_pass_closes_one_client(
    connect: Callable[[], Awaitable[trio.SocketStream]], trigger: bytes,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One client is served by the poller, another stored a key; the first sends ``trigger``
    (which hits the injected bug): it is closed without a reply and the bug is logged by the
    poller; the other client (its key still there) and new clients are served on."""
    victim = await connect()
    other = await connect()
    await exchange(victim, encode_command(b"PING"), b"+PONG\r\n")  # polled from now on
    await exchange(other, encode_command(b"SET", b"fault:k", b"v"), b"+OK\r\n")
    await victim.send_all(trigger)
    assert await read_to_close(victim) == b""
    assert crash_logged(caplog, "eventcore")
    await exchange(other, encode_command(b"GET", b"fault:k"), b"$1\r\nv\r\n")
    late = await connect()
    await exchange(late, encode_command(b"PING"), b"+PONG\r\n")
    await exchange(other, encode_command(b"DEL", b"fault:k"), b":1\r\n")
