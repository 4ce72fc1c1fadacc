"""A script that runs past busy-reply-threshold, on our node and on redis-server 7.0 side by side:
the same steps to both, the raw replies compared (RESP2 and RESP3) and checked.

Other clients wait until the threshold, then get -BUSY (SCRIPT or FUNCTION form) for every
command but Redis' allow-busy ones; a transaction is aborted with EXECABORT ... BUSY; SCRIPT
KILL ends an EVAL that has not written, FUNCTION KILL an FCALL (each refuses the other's with
-BUSY); a script that wrote answers -UNKILLABLE and only SHUTDOWN NOSAVE ends it, by ending
the process. Scripts that loop inside a coroutine or behind a pcall are killed too.
"""

from __future__ import annotations

import re
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support import ManagedProcess, RawClient, node_and_redis, wait_until

THRESHOLD_MS = 200
KINDS = ("ours", "real")
LOOP = "while true do end"
WRITE_LOOP = "redis.call('set', KEYS[1], 'w') while true do end"
LIB = ("#!lua name=busylib\n"
       "redis.register_function('loop', function() while true do end end)\n"
       "redis.register_function('wloop', function(k) redis.call('set', k[1], 'x') "
       "while true do end end)")
BUSY_EVAL = (b"-BUSY Redis is busy running a script. You can only call SCRIPT KILL or "
             b"SHUTDOWN NOSAVE.\r\n")
BUSY_FUNCTION = (b"-BUSY Redis is busy running a script. You can only call FUNCTION KILL or "
                 b"SHUTDOWN NOSAVE.\r\n")
UNKILLABLE = (b"-UNKILLABLE Sorry the script already executed write commands against the "
              b"dataset. You can either wait the script termination or kill the server in a "
              b"hard way using the SHUTDOWN NOSAVE command.\r\n")
KILLED = b"-ERR Script killed by user with SCRIPT KILL... script: "


class Background:
    """One command sent on a connection of its own, its reply read by a thread."""

    def __init__(self, port: int, *args: str) -> None:
        self.client = RawClient(port, timeout_s=30)
        self.reply: bytes | None = None
        self.error: Exception | None = None
        self.client.send(*args)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            self.reply = self.client.read()
        except (OSError, ConnectionError) as e:
            self.error = e

    def result(self, timeout_s: float = 20.0) -> bytes | Exception:
        self.thread.join(timeout_s)
        assert not self.thread.is_alive(), "the script's reply never came"
        self.client.close()
        return self.reply if self.reply is not None else self.error  # type: ignore[return-value]


def _wait_busy(c: RawClient, expected: bytes) -> None:
    """Until ``c``'s PING is refused with ``expected`` (the script is past the threshold)."""
    wait_until(lambda: c.call("PING") == expected, 10, "the node to answer BUSY",
               interval_s=0.02)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ManagedProcess]]:
    with node_and_redis(tmp_path_factory.mktemp("busy"),
                        ["--busy-reply-threshold", str(THRESHOLD_MS)]) as procs:
        for p in procs.values():
            with RawClient(p.port) as c:
                assert c.call("FUNCTION", "LOAD", LIB) == b"$7\r\nbusylib\r\n"
        yield procs


def side_by_side(steps: Callable[[str], list[object]]) -> dict[str, list[object]]:
    """``steps(kind)`` for ours and redis-server at the same time (each waits for its own
    script's threshold); the transcripts by kind."""
    out: dict[str, list[object]] = {}
    errors: list[BaseException] = []

    def run(kind: str) -> None:
        try:
            out[kind] = steps(kind)
        except BaseException as e:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(k,)) for k in KINDS]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    if errors:
        raise errors[0]
    return out


def _both(procs: dict[str, ManagedProcess],
          steps: Callable[[int], list[object]]) -> dict[str, list[object]]:
    """``steps(port)`` -> a transcript, run on both servers at the same time."""
    return side_by_side(lambda kind: steps(procs[kind].port))


def test_config_names(pair: dict[str, ManagedProcess]) -> None:
    for kind in KINDS:
        with RawClient(pair[kind].port) as c:
            assert c.call("CONFIG", "SET", "lua-time-limit", "1234") == b"+OK\r\n", kind
            assert c.call("CONFIG", "GET", "busy-reply-threshold") == (
                b"*2\r\n$20\r\nbusy-reply-threshold\r\n$4\r\n1234\r\n"), kind
            assert c.call("CONFIG", "GET", "lua-time-limit") == (
                b"*2\r\n$14\r\nlua-time-limit\r\n$4\r\n1234\r\n"), kind
            assert c.call("CONFIG", "SET", "busy-reply-threshold", str(THRESHOLD_MS)) == b"+OK\r\n"
            assert c.call("SCRIPT", "KILL") == b"-NOTBUSY No scripts in execution right now.\r\n"
            assert c.call("FUNCTION", "KILL") == b"-NOTBUSY No scripts in execution right now.\r\n"


# Commands other clients send while an EVAL is busy (allow-busy ones are served)
DURING_EVAL = [
    ("GET", "x"), ("SET", "x", "1"), ("FUNCTION", "STATS"), ("INFO", "server"), ("CLIENT", "ID"),
    ("SCRIPT", "LOAD", "return 1"), ("EVAL", "return 1", "0"), ("CONFIG", "GET", "x"),
    ("MULTI",), ("DISCARD",), ("WATCH", "x"), ("UNWATCH",), ("BLPOP", "l", "0"),
    ("AUTH", "x"), ("FUNCTION", "KILL"), ("SHUTDOWN",), ("SHUTDOWN", "SAVE"),
    ("SHUTDOWN", "FOO"), ("SUBSCRIBE", "ch"),
]


def test_eval_busy_then_script_kill(pair: dict[str, ManagedProcess]) -> None:
    def steps(port: int) -> list[object]:
        other, other3, tx = RawClient(port), RawClient(port), RawClient(port)
        other3.call("HELLO", "3")
        assert tx.call("MULTI") == b"+OK\r\n"
        assert tx.call("SET", "a", "1") == b"+QUEUED\r\n"  # queued before the script
        script = Background(port, "EVAL", LOOP, "0")
        _wait_busy(other, BUSY_EVAL)
        seen: list[object] = [other3.call("PING"), other3.call("FUNCTION", "STATS")]
        seen += [other.call(*cmd) for cmd in DURING_EVAL]
        seen += [tx.call("SET", "b", "2"), tx.call("EXEC")]
        seen.append(other3.call("SCRIPT", "KILL"))
        seen.append(script.result())
        seen.append(other.call("PING"))
        for c in (other, other3, tx):
            c.close()
        return seen

    got = _both(pair, steps)
    assert got["ours"] == got["real"]
    seen = got["ours"]
    assert seen[0] == seen[1] == BUSY_EVAL
    during = dict(zip(DURING_EVAL, seen[2:], strict=False))
    assert during[("GET", "x")] == during[("FUNCTION", "KILL")] == during[("SHUTDOWN",)] == BUSY_EVAL
    assert during[("MULTI",)] == during[("WATCH", "x")] == b"+OK\r\n"
    assert during[("SHUTDOWN", "FOO")] == b"-ERR syntax error\r\n"
    assert seen[-5:-3] == [BUSY_EVAL, b"-EXECABORT Transaction discarded because of: "
                                      + BUSY_EVAL[1:]]
    assert seen[-3] == b"+OK\r\n"
    assert isinstance(seen[-2], bytes) and seen[-2].startswith(KILLED)
    assert seen[-1] == b"+PONG\r\n"


def _stats_shape(reply: bytes) -> bytes:
    return re.sub(rb"duration_ms\r\n:\d+", b"duration_ms\r\n:N", reply)


def test_fcall_busy_then_function_kill(pair: dict[str, ManagedProcess]) -> None:
    def steps(port: int) -> list[object]:
        other, other3 = RawClient(port), RawClient(port)
        other3.call("HELLO", "3")
        script = Background(port, "FCALL", "loop", "0")
        _wait_busy(other, BUSY_FUNCTION)
        seen: list[object] = [
            _stats_shape(other.call("FUNCTION", "STATS")),
            _stats_shape(other3.call("FUNCTION", "STATS")),
            other.call("GET", "x"), other.call("SCRIPT", "KILL"), other.call("SHUTDOWN"),
            other3.call("FUNCTION", "KILL"), script.result(),
            other.call("FUNCTION", "STATS"), other3.call("FUNCTION", "STATS"),
        ]
        other.close()
        other3.close()
        return seen

    got = _both(pair, steps)
    assert got["ours"] == got["real"]
    seen = got["ours"]
    assert seen[0] == (b"*4\r\n$14\r\nrunning_script\r\n*6\r\n$4\r\nname\r\n$4\r\nloop\r\n"
                       b"$7\r\ncommand\r\n*3\r\n$5\r\nFCALL\r\n$4\r\nloop\r\n$1\r\n0\r\n"
                       b"$11\r\nduration_ms\r\n:N\r\n$7\r\nengines\r\n*2\r\n$3\r\nLUA\r\n*4\r\n"
                       b"$15\r\nlibraries_count\r\n:1\r\n$15\r\nfunctions_count\r\n:2\r\n")
    assert seen[2] == seen[3] == seen[4] == BUSY_FUNCTION
    assert seen[5] == b"+OK\r\n"
    assert seen[6] == KILLED.replace(b"script: ", b"script: loop, on @user_function:2.\r\n")


@pytest.mark.parametrize("body", [
    "while true do pcall(function() while true do end end) end",
    "local f = coroutine.wrap(function() while true do end end) f()",
    "local co = coroutine.create(function() while true do end end) coroutine.resume(co) "
    "while true do end",
], ids=["pcall", "wrap", "create"])
def test_kill_cannot_be_caught(pair: dict[str, ManagedProcess], body: str) -> None:
    def steps(port: int) -> list[object]:
        with RawClient(port) as other:
            script = Background(port, "EVAL", body, "0")
            _wait_busy(other, BUSY_EVAL)
            return [other.call("SCRIPT", "KILL"), script.result(), other.call("PING")]

    got = _both(pair, steps)
    assert got["ours"] == got["real"]
    assert got["ours"][0] == b"+OK\r\n"


@pytest.fixture
def fresh_pair(tmp_path: Path) -> Iterator[dict[str, ManagedProcess]]:
    with node_and_redis(tmp_path, ["--busy-reply-threshold", str(THRESHOLD_MS)]) as procs:
        yield procs


@pytest.mark.parametrize("command", [("EVAL", WRITE_LOOP, "1", "k"), ("FCALL", "wloop", "1", "k")],
                         ids=["eval", "fcall"])
def test_writing_script_unkillable_until_shutdown_nosave(
        fresh_pair: dict[str, ManagedProcess], command: tuple[str, ...]) -> None:
    def steps(port: int) -> list[object]:
        with RawClient(port) as other:
            assert other.call("SET", "before", "1") == b"+OK\r\n"
            if command[0] == "FCALL":
                other.call("FUNCTION", "LOAD", LIB)
            script = Background(port, *command)
            busy = BUSY_FUNCTION if command[0] == "FCALL" else BUSY_EVAL
            _wait_busy(other, busy)
            seen: list[object] = [other.call("SCRIPT", "KILL"), other.call("FUNCTION", "KILL"),
                                  other.call("SHUTDOWN"), other.call("SHUTDOWN", "NOSAVE", "SAVE")]
            other.send("SHUTDOWN", "NOSAVE")
            try:
                seen.append(other.read_until_closed())
            except ConnectionResetError:
                seen.append(b"")
            seen.append(type(script.result()).__name__)
            return seen

    got = _both(fresh_pair, steps)
    assert got["ours"] == got["real"]
    busy = BUSY_FUNCTION if command[0] == "FCALL" else BUSY_EVAL
    assert got["ours"][:4] == [UNKILLABLE, UNKILLABLE, busy, b"-ERR syntax error\r\n"]
    for kind in KINDS:
        proc = fresh_pair[kind].proc
        assert proc is not None
        wait_until(lambda p=proc: p.poll() is not None, 10, f"{kind} to exit")  # type: ignore[misc]
        assert proc.returncode == 0, kind


def test_clients_wait_for_the_threshold(pair: dict[str, ManagedProcess]) -> None:
    """Before the threshold nothing else is served (as Redis): a PING sent right after the
    script starts is answered -BUSY only once the script is THRESHOLD_MS old."""
    for kind in KINDS:
        port = pair[kind].port
        with RawClient(port) as other:
            script = Background(port, "EVAL", LOOP, "0")
            time.sleep(0.02)
            t0 = time.monotonic()
            assert other.call("PING") == BUSY_EVAL, kind
            assert time.monotonic() - t0 > THRESHOLD_MS / 1000 / 2, kind
            assert other.call("SCRIPT", "KILL") == b"+OK\r\n"
            assert isinstance(script.result(), bytes)


def test_new_connections_while_busy(pair: dict[str, ManagedProcess]) -> None:
    """Connections opened while a script is busy are served (as Redis accepts them in its
    blocked event loop): -BUSY, SCRIPT KILL from one of them, and they work on afterwards."""
    def steps(port: int) -> list[object]:
        with RawClient(port) as other, RawClient(port) as old:
            script = Background(port, "EVAL", LOOP, "0")
            _wait_busy(other, BUSY_EVAL)
            fresh, leaving = RawClient(port), RawClient(port)
            seen: list[object] = [fresh.call("PING"), fresh.call("HELLO", "3")[:1],
                                  fresh.call("GET", "x"), leaving.call("QUIT")]
            seen.append(leaving.read_until_closed())
            seen += [old.call("QUIT"), old.read_until_closed()]  # open before the script
            seen += [fresh.call("SCRIPT", "KILL"), script.result(), fresh.call("PING"),
                     fresh.pipeline([("SET", "n", "1"), ("GET", "n")])]
            fresh.close()
            leaving.close()
            return seen

    got = _both(pair, steps)
    assert got["ours"] == got["real"]
    assert got["ours"][0] == got["ours"][2] == BUSY_EVAL
    assert got["ours"][3:8] == [b"+OK\r\n", b"", b"+OK\r\n", b"", b"+OK\r\n"]


@pytest.mark.parametrize("code", [
    "while true do end",
    "for i = 1, 1e12 do end redis.register_function('f', function() end)",
], ids=["while", "for"])
def test_function_load_times_out(pair: dict[str, ManagedProcess], code: str) -> None:
    """A library whose code runs past 500 ms fails to load (Redis' FUNCTION LOAD timeout);
    the node serves on."""
    got = {}
    for kind in KINDS:
        with RawClient(pair[kind].port) as c:
            t0 = time.monotonic()
            got[kind] = [c.call("FUNCTION", "LOAD", f"#!lua name=slow\n{code}"),
                         c.call("FUNCTION", "LOAD", "#!lua name=quick\nredis.register_function("
                                "'q', function() return 7 end)"),
                         c.call("FCALL", "q", "0"), c.call("FUNCTION", "DELETE", "quick")]
            assert time.monotonic() - t0 < 5, kind
    assert got["ours"] == got["real"]
    assert got["ours"][2] == b":7\r\n"


BIG_REPLY_BYTES = 8 * 1024 * 1024


def test_busy_script_lets_a_big_reply_go_out(pair: dict[str, ManagedProcess]) -> None:
    """A reply larger than the socket buffers, read slowly while another client's script is
    busy: Redis keeps writing it during the script (its event loop serves writable sockets
    too), so the reader gets all of it before the script ends."""
    def steps(port: int) -> list[object]:
        with RawClient(port) as setter:
            assert setter.call("SET", "big", "x" * BIG_REPLY_BYTES) == b"+OK\r\n"
        reader = socket.socket()
        reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        reader.settimeout(20)
        reader.connect(("127.0.0.1", port))
        reader.sendall(b"*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n")
        other = RawClient(port)
        # the reply has begun: what the socket buffers cannot hold waits in the server
        wait_until(lambda: select.select([reader], [], [], 0)[0], 10, "the reply to begin")
        script = Background(port, "EVAL", LOOP, "0")
        _wait_busy(other, BUSY_EVAL)
        expected = len(b"$%d\r\n" % BIG_REPLY_BYTES) + BIG_REPLY_BYTES + 2
        got = 0
        while got < expected:
            data = reader.recv(1 << 16)
            assert data, "the connection closed"
            got += len(data)
        reader.close()
        seen: list[object] = [got, script.thread.is_alive(), other.call("PING")]
        seen += [other.call("SCRIPT", "KILL"), script.result()[:len(KILLED)],
                 other.call("DEL", "big")]
        other.close()
        return seen

    got = _both(pair, steps)
    assert got["ours"] == got["real"]
    assert got["ours"][1:4] == [True, BUSY_EVAL, b"+OK\r\n"]



def test_busy_script_publishes_at_once(pair: dict[str, ManagedProcess]) -> None:
    """A message the script publishes reaches its subscriber while the script still runs (Redis
    writes pending output in its event loop during a busy script)."""
    def steps(port: int) -> list[object]:
        with RawClient(port) as sub, RawClient(port) as other:
            assert sub.call("SUBSCRIBE", "busy-ch").startswith(b"*3\r\n$9\r\nsubscribe")
            script = Background(port, "EVAL", "redis.call('publish', 'busy-ch', 'hi') " + LOOP,
                                "0")
            _wait_busy(other, BUSY_EVAL)
            seen: list[object] = [sub.read(timeout_s=10), script.thread.is_alive()]
            seen += [other.call("SCRIPT", "KILL"), script.result()[:len(KILLED)]]
        return seen

    got = _both(pair, steps)
    assert got["ours"] == got["real"]
    assert got["ours"][:2] == [b"*3\r\n$7\r\nmessage\r\n$7\r\nbusy-ch\r\n$2\r\nhi\r\n", True]
