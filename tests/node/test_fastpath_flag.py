"""The fast-path flag (``Client.slow``, node/core/client.py) is derived from its inputs: the
setter of each input recomputes it, so no state change can leave a client on the fast path
past the auth, MULTI, reply-mode, pub/sub or ASKING checks.

In-process (a real ``Server``, requests through ``dispatch.run_requests``, no sockets): the
flag is computed from exactly the declared inputs, no code assigns one past its setter, and
each one, set, takes the client (server-wide: every client) off the fast path. Through real
processes: each state, entered by its command inside one pipelined batch, changes what the
next fast-path command does exactly as on a real redis-server 7.0.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from slotgate.node.core import dispatch
from slotgate.node.core.client import REPLY_OFF, REPLY_ON, Client
from slotgate.node.core.config import load
from slotgate.node.core.server import Server
from slotgate.node.core.tracking import ClientTracking
from slotgate.protocol.acl import User, default_user
from slotgate.protocol.resp import encode_command
from tests.support import RawClient, node_and_redis

# -- in-process ------------------------------------------------------------------------------
NODE = Path(__file__).resolve().parents[2] / "node"

# Each input of a client's flag: (normal value, value that takes the client off the fast path),
# set with the input's setter ``set_<name>``.
CLIENT_INPUTS: dict[str, tuple[object, object]] = {
    "authenticated": (True, False),
    "multi": (None, []),
    "reply_mode": (REPLY_ON, REPLY_OFF),
    "subscriptions": (0, 1),
    "asking": (False, True),
    # the default user may run anything; a user with any restriction takes the slow path
    "acl_user": (default_user(), User(b"restricted")),
    # CLIENT TRACKING: the reads of a tracking client are remembered off the fast path
    "tracking": (None, ClientTracking()),
}


def _refuse(c: Client, cmd: object, argv: list[bytes]) -> bytes | None:
    return None


def _keys_here(cmd: object, argv: list[bytes]) -> bool:
    return True


# Each input of the server-wide flag: (change that takes every client off the fast path, undo).
_Change = Callable[[Server, Client], None]
SERVER_INPUTS: dict[str, tuple[_Change, _Change]] = {
    "monitors": (lambda s, c: s.add_monitor(c), lambda s, c: s.remove_monitor(c)),
    "command_checks": (lambda s, c: s.add_command_check(_refuse),
                       lambda s, c: s.remove_command_check(_refuse)),
    # cluster routing that the fast path cannot do (no per-command key positions)
    "cluster_route": (lambda s, c: s.set_cluster_routing(_refuse, None, _keys_here),
                      lambda s, c: s.set_cluster_routing(None, None, _keys_here)),
}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    cwd = os.getcwd()
    os.chdir(tmp_path)  # the server's files (none with --save "") go here
    try:
        yield Server(load(["--save", ""]))
    finally:
        os.chdir(cwd)


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


def test_the_flag_is_computed_from_exactly_the_declared_inputs(server: Server) -> None:
    """What ``_refresh_slow`` reads is ``SLOW_INPUTS`` (plus the server-wide flag, and the
    flag itself): an input missing from the list would have no setter to keep it right."""
    assert set(Client.SLOW_INPUTS) == set(CLIENT_INPUTS)
    assert set(Server.SLOW_INPUTS) == set(SERVER_INPUTS) | {"cluster_keypos"}
    # Client is compiled (a native class takes no stand-in ``self``): its reads from the source
    assert _self_reads(NODE / "core" / "client.py", "Client", "_refresh_slow") - {"server"} == \
        set(Client.SLOW_INPUTS)
    read: set[str] = set()
    server.cluster_route = _refuse  # so that cluster_keypos is read too
    Server._refresh_slow(_Reads(server, read))  # type: ignore[arg-type]
    assert read - {"slow", "clients"} == set(Server.SLOW_INPUTS)


def _self_reads(path: Path, cls: str, method: str) -> set[str]:
    """The attributes ``method`` of class ``cls`` in ``path`` reads from ``self``."""
    tree = ast.parse(path.read_text(), str(path))
    klass = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    fn = next(n for n in klass.body if isinstance(n, ast.FunctionDef) and n.name == method)
    return {n.attr for n in ast.walk(fn) if isinstance(n, ast.Attribute)
            and isinstance(n.ctx, ast.Load) and isinstance(n.value, ast.Name)
            and n.value.id == "self"}


def _assigned_outside_owner(path: Path) -> list[str]:
    """``x.<input> = ...`` (or ``+=``, or a tuple target) in ``path`` outside the input's own
    class (Client, Server). ``self.<name>`` in another class is that class' own field."""
    owners = {name: "Client" for name in Client.SLOW_INPUTS}
    owners.update((name, "Server") for name in Server.SLOW_INPUTS)
    found: list[str] = []

    def visit(node: ast.AST, cls: str | None) -> None:
        if isinstance(node, ast.ClassDef):
            cls = node.name
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        while targets:
            t = targets.pop()
            if isinstance(t, (ast.Tuple, ast.List)):
                targets.extend(t.elts)
            elif isinstance(t, ast.Attribute) and t.attr in owners and cls != owners[t.attr]:
                own = cls is not None and isinstance(t.value, ast.Name) and t.value.id == "self"
                if not own:
                    found.append(f"{path.relative_to(NODE.parent)}:{t.lineno} .{t.attr}")
        for child in ast.iter_child_nodes(node):
            visit(child, cls)

    visit(ast.parse(path.read_text(), str(path)), None)
    return found


def test_no_code_assigns_an_input_past_its_setter() -> None:
    found = [hit for path in sorted(NODE.rglob("*.py")) for hit in _assigned_outside_owner(path)]
    assert not found, "assign these through their setters (set_<name>, add_..., ...):\n" + \
        "\n".join(found)


@pytest.mark.parametrize("name", list(CLIENT_INPUTS))
def test_each_client_input_takes_the_client_off_the_fast_path(server: Server, name: str) -> None:
    normal, slow = CLIENT_INPUTS[name]
    c = server._new_client("127.0.0.1:1", "127.0.0.1:2")
    other = server._new_client("127.0.0.1:3", "127.0.0.1:2")
    setter = getattr(c, f"set_{name}")
    assert not c.slow
    setter(slow)
    assert c.slow
    assert not other.slow
    setter(normal)
    assert not c.slow


@pytest.mark.parametrize("name", list(SERVER_INPUTS))
def test_each_server_input_takes_every_client_off_the_fast_path(server: Server,
                                                                name: str) -> None:
    change, undo = SERVER_INPUTS[name]
    before = server._new_client("127.0.0.1:1", "127.0.0.1:2")
    assert not server.slow and not before.slow
    change(server, before)
    after = server._new_client("127.0.0.1:3", "127.0.0.1:2")
    assert server.slow and before.slow and after.slow
    undo(server, before)
    assert not server.slow and not before.slow and not after.slow


def test_cluster_routing_the_fast_path_can_do_keeps_clients_on_it(server: Server) -> None:
    c = server._new_client("127.0.0.1:1", "127.0.0.1:2")
    server.set_cluster_routing(_refuse, None, _keys_here)
    assert c.slow
    server.set_cluster_routing(_refuse, {}, _keys_here)  # the fast path routes by itself
    assert not c.slow


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
    from slotgate.node.cluster import bus

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
    c = RawClient(port)
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
    with node_and_redis(tmp_path_factory.mktemp("fastpath-flag"),
                        ["--requirepass", PASSWORD]) as procs:
        yield procs["ours"].port, procs["real"].port


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_state_changes_reach_the_next_request_as_on_redis(pair: tuple[int, int],
                                                          name: str) -> None:
    ours, real = (_replies_to(port, SCRIPTS[name]) for port in pair)
    assert ours == real


def test_a_monitor_sees_requests_of_clients_already_on_the_fast_path(
        pair: tuple[int, int]) -> None:
    for port in pair:
        a, m = RawClient(port), RawClient(port)
        try:
            assert a.call(b"AUTH", PASSWORD.encode()) == b"+OK\r\n"
            assert a.call(b"SET", b"seen", b"0") == b"+OK\r\n"  # a: on the fast path
            assert m.call(b"AUTH", PASSWORD.encode()) == b"+OK\r\n"
            assert m.call(b"MONITOR") == b"+OK\r\n"
            assert a.call(b"INCR", b"seen") == b":1\r\n"
            assert b'"INCR" "seen"' in m.read(), port
        finally:
            a.close()
            m.close()
