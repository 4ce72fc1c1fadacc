"""The proxy's auth check costs nothing for the usual client: a session of the default user with
no password and every permission is not ``checked`` and keeps the fast routes; any other login
is checked, and the flag follows AUTH, RESET, ACL SETUSER and reloads. In one trio run against
the fake cluster (tests/proxy/fakecluster.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable

import pytest
import trio

from slotgate.proxy.front import session as session_module
from slotgate.proxy.front.server import Proxy
from slotgate.proxy.front.session import Session
from slotgate.proxy.ops.settings import ProxySettings
from tests.proxy.fakecluster import FakeCluster
from tests.support import RawClient


@pytest.fixture
async def start() -> AsyncIterator[Callable[..., object]]:
    """``await start(**auth settings)`` -> (proxy, connect) with ``connect()`` a new client."""
    clients: list[RawClient] = []
    async with trio.open_nursery() as nursery:
        cluster = FakeCluster(3)
        await cluster.start(nursery)
        host, _, port = cluster.nodes[0].address.rpartition(":")

        async def go(**auth: object) -> tuple[Proxy, Callable[[], object]]:
            settings = ProxySettings(listen_port=0, seeds=[(host, int(port))],
                                     shutdown_grace_ms=100, **auth)  # type: ignore[arg-type]
            proxy = Proxy(settings)
            await nursery.start(proxy.run)
            proxy_port = int(proxy.listen_address.rpartition(":")[2])

            async def connect() -> RawClient:
                c = await trio.to_thread.run_sync(lambda: RawClient(proxy_port, timeout_s=10))
                clients.append(c)
                return c

            return proxy, connect

        try:
            with trio.fail_after(20):
                yield go
        finally:
            for c in clients:
                c.close()
            nursery.cancel_scope.cancel()


async def call(c: RawClient, *args: str) -> bytes:
    return await trio.to_thread.run_sync(lambda: c.call(*args))


def only_session(proxy: Proxy) -> Session:
    (s,) = proxy.sessions
    return s


def fast(s: Session) -> bool:
    return not s.checked and s._single is session_module._SINGLE and \
        s._split is session_module._SPLIT


async def test_the_default_user_without_password_is_not_checked(start) -> None:
    proxy, connect = await start()
    c = await connect()
    assert await call(c, "SET", "k", "v") == b"+OK\r\n"
    assert fast(only_session(proxy))
    # Users configured but the client stays the default user: still not checked.
    proxy2, connect2 = await start(auth_users=("alice on >pw ~app:* +@read",))
    c2 = await connect2()
    assert await call(c2, "GET", "k") == b"$1\r\nv\r\n"
    s = only_session(proxy2)
    assert fast(s)
    assert await call(c2, "AUTH", "alice", "pw") == b"+OK\r\n"
    assert s.checked and not fast(s)
    assert (await call(c2, "GET", "k")).startswith(b"-NOPERM")
    assert await call(c2, "RESET") == b"+RESET\r\n"
    assert fast(s)


async def test_the_flag_follows_password_and_rules(start) -> None:
    proxy, connect = await start(auth_requirepass="pw")
    c = await connect()
    assert await call(c, "GET", "k") == b"-NOAUTH Authentication required.\r\n"
    s = only_session(proxy)
    assert s.checked
    assert await call(c, "AUTH", "pw") == b"+OK\r\n"
    assert fast(s)
    # The default user restricted, then restored: its sessions follow at once.
    assert await call(c, "ACL", "SETUSER", "default", "resetkeys", "~x*") == b"+OK\r\n"
    assert s.checked
    assert (await call(c, "GET", "k")).startswith(b"-NOPERM")
    assert await call(c, "ACL", "SETUSER", "default", "~*") == b"+OK\r\n"
    assert fast(s)
    # A reload that restricts the default user, then one that gives everything back.
    proxy.apply_settings(dataclasses.replace(
        proxy.settings, auth_users=("default on >pw ~y* +@all",)))
    assert s.checked
    proxy.apply_settings(dataclasses.replace(proxy.settings, auth_users=()))
    assert fast(s)
    assert await call(c, "GET", "k") == b"$-1\r\n"


async def test_acl_setuser_and_deluser_act_on_live_connections(start) -> None:
    """As a server: ACL SETUSER's new rules apply to the user's open connections at once;
    ACL DELUSER closes them (the caller's own after its reply)."""
    proxy, connect = await start(auth_users=("alice on >pw ~app:* +@read",))
    admin, alice = await connect(), await connect()
    assert await call(alice, "AUTH", "alice", "pw") == b"+OK\r\n"
    assert (await call(alice, "SET", "app:1", "x")).startswith(b"-NOPERM")
    assert await call(admin, "ACL", "SETUSER", "alice", "+set") == b"+OK\r\n"
    assert await call(alice, "SET", "app:1", "x") == b"+OK\r\n"
    assert await call(admin, "ACL", "DELUSER", "alice") == b":1\r\n"
    with pytest.raises((ConnectionError, OSError)):
        await call(alice, "PING")
    assert await call(admin, "ACL", "SETUSER", "me", "on", ">p", "+@all", "~*") == b"+OK\r\n"
    assert await call(admin, "AUTH", "me", "p") == b"+OK\r\n"
    assert await call(admin, "ACL", "DELUSER", "me") == b":1\r\n"
    with pytest.raises((ConnectionError, OSError)):
        await call(admin, "PING")
    assert len(proxy.sessions) == 0 or all(s.closed for s in proxy.sessions)


async def test_acl_file_save_and_load(start, tmp_path) -> None:
    """``auth.aclfile``: ACL SAVE writes the process's users, ACL LOAD reads them back (a
    removed user's connections closed), a broken file changes nothing."""
    path = tmp_path / "users.acl"
    path.write_text("user alice on >pw ~app:* +get\n")
    proxy, connect = await start(auth_aclfile=str(path))
    admin, alice = await connect(), await connect()
    assert await call(alice, "AUTH", "alice", "pw") == b"+OK\r\n"
    assert await call(admin, "ACL", "SETUSER", "bob", "on", ">b", "+@all") == b"+OK\r\n"
    assert await call(admin, "ACL", "SAVE") == b"+OK\r\n"
    saved = path.read_text()
    assert "user alice on #" in saved and "user bob on #" in saved
    path.write_text("user bob on >b ~* +@all\n")
    assert await call(admin, "ACL", "LOAD") == b"+OK\r\n"
    assert await call(admin, "ACL", "USERS") == b"*2\r\n$3\r\nbob\r\n$7\r\ndefault\r\n"
    with pytest.raises((ConnectionError, OSError)):
        await call(alice, "PING")
    path.write_text("user carol on +nosuch\n")
    assert (await call(admin, "ACL", "LOAD")).startswith(
        b"-ERR " + str(path).encode() + b":1: Unknown command or category name in ACL.")
    assert await call(admin, "ACL", "USERS") == b"*2\r\n$3\r\nbob\r\n$7\r\ndefault\r\n"


def test_every_proxy_answered_command_has_a_handler() -> None:
    """local.py's or auth.py's (AUTH, HELLO, RESET, ACL ...): none is left without one."""
    from slotgate.protocol.commands import ALL_COMMANDS
    from slotgate.proxy.front import auth, local

    rows = [i for i in ALL_COMMANDS.values() if i.route == "proxy"]
    assert {"auth", "hello", "acl|setuser", "acl|log"} <= {i.name for i in rows}
    missing = [i.name for i in rows if i.name not in auth.HANDLERS and i.name not in local.HANDLERS]
    assert missing == []
