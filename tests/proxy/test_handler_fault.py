"""A bug while a client is served closes that client's connection only; the proxy serves on.

Why in-process: the proxy has no fault trigger of its own, and a debug command that raises
would put test-only code in the product. So the real ``Proxy`` runs under this test's trio
run, in front of a real redis-server (a one-node cluster), with real loopback clients; the
fault is injected by replacing the proxy's local ECHO handler (``local.HANDLERS``) with one
that raises, as a bug would. Before the shared event core such an exception ended the whole
proxy (``Proxy.run`` raised); these tests fail there.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import trio

from slotgate.protocol.resp import encode_command
from slotgate.proxy.front import local
from slotgate.proxy.front.server import Proxy
from slotgate.proxy.front.session import Session
from slotgate.proxy.ops.settings import ProxySettings
from tests.fault import (
    INJECTED,
    crash_logged,
    exchange,
    fault_in_a_pass_closes_one_client,
    read_to_close,
)
from tests.support import ManagedProcess, redis_cli, redis_server, wait_cluster_ok

ECHO = encode_command(b"ECHO", b"hi")


@pytest.fixture(scope="module")
def one_node_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagedProcess]:
    proc = redis_server(tmp_path_factory.mktemp("fault-backend"), cluster=True).start()
    try:
        redis_cli("-p", str(proc.port), "cluster", "addslotsrange", "0", "16383")
        wait_cluster_ok([proc])
        yield proc
    finally:
        proc.stop()


@pytest.fixture
async def proxy(one_node_cluster: ManagedProcess,
                monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Proxy]:
    def broken(s: Session, argv: list[bytes]) -> bytes:
        raise RuntimeError(INJECTED)

    monkeypatch.setitem(local.HANDLERS, "echo", broken)
    p = Proxy(ProxySettings(listen_port=0, seeds=[("127.0.0.1", one_node_cluster.port)]))
    async with trio.open_nursery() as nursery:
        await nursery.start(p.run)
        yield p
        nursery.cancel_scope.cancel()


async def connect(p: Proxy) -> trio.SocketStream:
    host, _, port = p.listen_address.rpartition(":")
    return await trio.open_tcp_stream(host, int(port))


async def test_a_handler_bug_in_a_poller_pass_closes_that_client_only(
    proxy: Proxy, caplog: pytest.LogCaptureFixture,
) -> None:
    await fault_in_a_pass_closes_one_client(lambda: connect(proxy), ECHO, caplog)
    assert len(proxy.sessions) == 2


async def test_a_handler_bug_in_the_sessions_own_task_closes_that_client_only(
    proxy: Proxy, caplog: pytest.LogCaptureFixture,
) -> None:
    """After a blocking command, the rest of the pipeline is dispatched by the session's own
    task (not in a poller pass): a bug there is handled the same way."""
    victim = await connect(proxy)
    other = await connect(proxy)
    await victim.send_all(encode_command(b"BLPOP", b"fault:q", b"0.05") + ECHO)
    # BLPOP's reply (nil after 50 ms) may or may not have left before the close.
    assert await read_to_close(victim) in (b"", b"*-1\r\n")
    await trio.testing.wait_all_tasks_blocked()  # (logged once the session's task ended)
    assert crash_logged(caplog, "slotgate.proxy")  # by the proxy, for the session's task
    await exchange(other, encode_command(b"PING"), b"+PONG\r\n")
    late = await connect(proxy)
    await exchange(late, encode_command(b"SET", b"fault:k2", b"v"), b"+OK\r\n")
