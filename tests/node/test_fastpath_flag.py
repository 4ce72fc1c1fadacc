"""The fast-path flag (``Client.slow``, node/client.py) is derived from its inputs: assigning
an input recomputes it, so no state change can leave a client on the fast path past the auth,
MULTI, reply-mode, pub/sub or ASKING checks.

In-process (a real ``Server``, requests through ``dispatch.run_requests``, no sockets): every
input of the flag is a ``SlowInput`` field, and each one, set, takes the client (server-wide:
every client) off the fast path. Through real processes: each state, entered by its command
inside one pipelined batch, changes what the next fast-path command does exactly as on a real
redis-server 7.0.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from node import dispatch
from node.client import REPLY_OFF, REPLY_ON, Client, SlowInput
from node.config import load
from node.server import Server
from protocol.resp import encode_command
from tests.node.diff import Conn
from tests.support import ManagedProcess, redis_server, slotgate_node

# -- in-process ------------------------------------------------------------------------------
# Each input of a client's flag, with a value that must take the client off the fast path.
CLIENT_INPUTS: dict[str, tuple[object, object]] = {  # name: (normal value, slow value)
    "authenticated": (True, False),
    "multi": (None, []),
    "reply_mode": (REPLY_ON, REPLY_OFF),
    "subscriptions": (0, 1),
    "asking": (False, True),
}


def _refuse(c: Client, cmd: object, argv: list[bytes]) -> bytes | None:
    return None


# Each input of the server-wide flag: (normal value, value that takes every client off it).
SERVER_INPUTS: dict[str, tuple[object, Callable[[Client], object]]] = {
    "monitors": ((), lambda c: (c,)),
    "command_checks": ((), lambda c: (_refuse,)),
    # cluster routing that the fast path cannot do (no per-command key positions)
    "cluster_route": (None, lambda c: _refuse),
}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    cwd = os.getcwd()
    os.chdir(tmp_path)  # the server's files (none with --save "") go here
    try:
        yield Server(load(["--save", ""]))
    finally:
        os.chdir(cwd)


def _declared(cls: type) -> set[str]:
    return {name for name, v in vars(cls).items() if isinstance(v, SlowInput)}


class _Reads:
    """Forwards attribute reads to ``target`` and records their names."""

    def __init__(self, target: object, names: set[str]) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_names", names)

    def __getattr__(self, name: str) -> Any:
        self._names.add(name)
        return getattr(self._target, name)

    def __setattr__(self, name: str, value: object) -> None:
        pass  # the flag being computed


def test_every_input_of_the_flag_is_a_slow_input(server: Server) -> None:
    """What the flag is computed from is exactly the declared SlowInput fields (plus the
    server-wide flag, and the flag itself): an input kept as a plain field would need
    every writer to remember an update."""
    assert _declared(Client) == set(CLIENT_INPUTS)
    assert _declared(Server) == set(SERVER_INPUTS) | {"cluster_keypos"}
    c = server._new_client("127.0.0.1:1", "127.0.0.1:2")
    read: set[str] = set()
    Client._refresh_slow(_Reads(c, read))  # type: ignore[arg-type]
    assert read - {"server"} == _declared(Client)
    read = set()
    server.__dict__["cluster_route"] = _refuse  # so that cluster_keypos is read too
    Server._refresh_slow(_Reads(server, read))  # type: ignore[arg-type]
    assert read - {"slow", "clients"} == _declared(Server)


@pytest.mark.parametrize("name", list(CLIENT_INPUTS))
def test_each_client_input_takes_the_client_off_the_fast_path(server: Server, name: str) -> None:
    normal, slow = CLIENT_INPUTS[name]
    c = server._new_client("127.0.0.1:1", "127.0.0.1:2")
    other = server._new_client("127.0.0.1:3", "127.0.0.1:2")
    assert not c.slow
    setattr(c, name, slow)
    assert c.slow
    assert not other.slow
    setattr(c, name, normal)
    assert not c.slow


@pytest.mark.parametrize("name", list(SERVER_INPUTS))
def test_each_server_input_takes_every_client_off_the_fast_path(server: Server,
                                                                name: str) -> None:
    normal, slow = SERVER_INPUTS[name]
    before = server._new_client("127.0.0.1:1", "127.0.0.1:2")
    assert not server.slow and not before.slow
    setattr(server, name, slow(before))
    after = server._new_client("127.0.0.1:3", "127.0.0.1:2")
    assert server.slow and before.slow and after.slow
    setattr(server, name, normal)
    assert not server.slow and not before.slow and not after.slow


def test_cluster_routing_the_fast_path_can_do_keeps_clients_on_it(server: Server) -> None:
    c = server._new_client("127.0.0.1:1", "127.0.0.1:2")
    server.cluster_route = _refuse
    assert c.slow
    server.cluster_keypos = {}  # per-command key positions: the fast path routes itself
    assert not c.slow
    server.cluster_keypos = None
    assert c.slow


def test_commands_that_change_an_input_move_the_client(server: Server) -> None:
    c = server._new_client("127.0.0.1:1", "127.0.0.1:2")
    m = server._new_client("127.0.0.1:3", "127.0.0.1:2")
    steps: list[tuple[list[bytes], bool]] = [
        ([b"MULTI"], True), ([b"DISCARD"], False),
        ([b"MULTI"], True), ([b"EXEC"], False),
        ([b"CLIENT", b"REPLY", b"OFF"], True), ([b"CLIENT", b"REPLY", b"ON"], False),
        ([b"CLIENT", b"REPLY", b"SKIP"], True), ([b"PING"], False),
        ([b"SUBSCRIBE", b"a", b"b"], True), ([b"UNSUBSCRIBE", b"a"], True),
        ([b"UNSUBSCRIBE"], False),
        ([b"PSUBSCRIBE", b"p*"], True), ([b"RESET"], False),
        ([b"HELLO", b"3"], False), ([b"SSUBSCRIBE", b"s"], True), ([b"SUNSUBSCRIBE"], False),
    ]
    for argv, slow in steps:
        dispatch.run_requests(c, [argv])
        assert c.slow is slow, argv
    dispatch.run_requests(m, [[b"MONITOR"]])
    assert c.slow and m.slow
    dispatch.run_requests(m, [[b"RESET"]])
    assert not c.slow and not m.slow
    dispatch.run_requests(c, [[b"CONFIG", b"SET", b"requirepass", b"pw"], [b"RESET"]])
    assert c.slow and c.out[-1] == b"+RESET\r\n"
    dispatch.run_requests(c, [[b"AUTH", b"pw"]])
    assert not c.slow and c.out[-1] == b"+OK\r\n"


def test_asking_lasts_one_command_on_the_fast_path(tmp_path: Path) -> None:
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        srv = Server(load(["--save", "", "--cluster-enabled", "yes",
                           "--cluster-config-file", "nodes.conf"]))
    finally:
        os.chdir(cwd)
    cn = srv.cluster
    assert cn is not None
    st = cn.state
    for slot in range(16384):
        st.add_slot(st.myself, slot)
    st.state = b"ok" if isinstance(st.state, bytes) else st.state
    from node.cluster import bus

    st.state = bus.STATE_OK
    st.generation += 1
    c = srv._new_client("127.0.0.1:1", "127.0.0.1:2")
    dispatch.run_requests(c, [[b"SET", b"k", b"v"]])
    assert not c.slow
    dispatch.run_requests(c, [[b"ASKING"], [b"GET", b"k"]])
    assert c.out[-2:] == [b"+OK\r\n", b"$1\r\nv\r\n"]
    assert not c.asking and not c.slow


# -- real processes: our node and redis-server 7.0 -------------------------------------------
PASSWORD = "pw"

# Each script is sent as one write on a fresh connection; every reply is compared raw.
SCRIPTS: dict[str, list[list[str]]] = {
    "auth": [["GET", "k"], ["AUTH", PASSWORD], ["SET", "k", "1"], ["GET", "k"], ["RESET"],
             ["GET", "k"], ["INCR", "k"], ["HELLO", "2", "AUTH", "default", PASSWORD],
             ["INCR", "k"]],
    "multi": [["AUTH", PASSWORD], ["DEL", "m"], ["MULTI"], ["INCR", "m"], ["SET", "n", "1"],
              ["EXEC"], ["INCR", "m"], ["MULTI"], ["INCR", "m"], ["DISCARD"], ["INCR", "m"],
              ["MULTI"], ["NOSUCHCMD"], ["INCR", "m"], ["EXEC"], ["INCR", "m"], ["MULTI"],
              ["GET", "m", "extra"], ["EXEC"], ["GET", "m"]],
    "subscribe": [["AUTH", PASSWORD], ["SET", "s", "1"], ["SUBSCRIBE", "ch"], ["GET", "s"],
                  ["PSUBSCRIBE", "p*"], ["UNSUBSCRIBE"], ["GET", "s"], ["PUNSUBSCRIBE"],
                  ["GET", "s"], ["SSUBSCRIBE", "sh"], ["GET", "s"], ["SUNSUBSCRIBE"],
                  ["GET", "s"]],
    "client reply": [["AUTH", PASSWORD], ["SET", "r", "0"], ["CLIENT", "REPLY", "OFF"],
                     ["INCR", "r"], ["INCR", "r"], ["CLIENT", "REPLY", "ON"], ["GET", "r"],
                     ["CLIENT", "REPLY", "SKIP"], ["INCR", "r"], ["INCR", "r"], ["GET", "r"]],
    "command checks": [["AUTH", PASSWORD], ["SET", "w", "1"],
                       ["CONFIG", "SET", "min-replicas-to-write", "1"], ["SET", "w", "2"],
                       ["INCR", "w"], ["GET", "w"],
                       ["CONFIG", "SET", "min-replicas-to-write", "0"], ["SET", "w", "3"],
                       ["GET", "w"]],
}


def _replies_to(port: int, script: list[list[str]]) -> list[bytes]:
    """Send ``script`` in one write and read a frame per reply (a command answered with none,
    as under CLIENT REPLY OFF, is skipped on both servers alike, so PING marks the end)."""
    c = Conn(port)
    try:
        c.send_raw(b"".join(encode_command(*argv) for argv in script)
                   + encode_command("PING", "end"))
        out = []
        while True:
            frame = c.read()
            out.append(re.sub(rb"(\$2\r\nid\r\n):\d+", rb"\1:?", frame))  # HELLO's client id
            if frame in (b"$3\r\nend\r\n", b"*2\r\n$4\r\npong\r\n$3\r\nend\r\n"):
                return out
    finally:
        c.close()


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, int]]:
    d = tmp_path_factory.mktemp("fastpath-flag")
    ours: ManagedProcess = slotgate_node(d, extra=["--requirepass", PASSWORD]).start()
    try:
        real = redis_server(d, extra=["--requirepass", PASSWORD]).start()
        try:
            yield ours.port, real.port
        finally:
            real.stop()
    finally:
        ours.stop()


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_state_changes_reach_the_next_request_as_on_redis(pair: tuple[int, int],
                                                          name: str) -> None:
    ours, real = (_replies_to(port, SCRIPTS[name]) for port in pair)
    assert ours == real


def test_a_monitor_sees_requests_of_clients_already_on_the_fast_path(
        pair: tuple[int, int]) -> None:
    for port in pair:
        a, m = Conn(port), Conn(port)
        try:
            assert a.call([b"AUTH", PASSWORD.encode()]) == b"+OK\r\n"
            assert a.call([b"SET", b"seen", b"0"]) == b"+OK\r\n"  # a: on the fast path
            assert m.call([b"AUTH", PASSWORD.encode()]) == b"+OK\r\n"
            assert m.call([b"MONITOR"]) == b"+OK\r\n"
            assert a.call([b"INCR", b"seen"]) == b":1\r\n"
            assert b'"INCR" "seen"' in m.read(), port
        finally:
            a.close()
            m.close()
