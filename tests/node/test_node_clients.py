"""Several connections at once, on our node and on redis-server 7.0: CLIENT UNBLOCK, CLIENT
KILL, MONITOR, SHUTDOWN. Replies compared as raw bytes where they are deterministic."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from slotgate.protocol.resp import encode_command
from tests.support import ManagedProcess, RawClient, slotgate_node, wait_blocked, wait_until


def _both(node_standalone: ManagedProcess, redis_standalone: ManagedProcess) -> list[int]:
    return [node_standalone.port, redis_standalone.port]


@pytest.mark.parametrize("how", [[], [b"TIMEOUT"], [b"ERROR"]])
def test_client_unblock(node_standalone: ManagedProcess, redis_standalone: ManagedProcess,
                        how: list[bytes]) -> None:
    results = []
    for port in _both(node_standalone, redis_standalone):
        a, b = RawClient(port), RawClient(port)
        cid = a.call(b"CLIENT", b"ID")
        a.send(b"BLPOP", b"unblock-me", b"0")
        wait_blocked(b, 1)
        unblocked = b.call(b"CLIENT", b"UNBLOCK", cid[1:-2], *how)
        results.append((unblocked, a.read(), b.call(b"CLIENT", b"UNBLOCK", cid[1:-2])))
        a.close()
        b.close()
    assert results[0] == results[1]
    assert results[0][0] == b":1\r\n"


def test_client_kill_by_id(node_standalone: ManagedProcess,
                           redis_standalone: ManagedProcess) -> None:
    results = []
    for port in _both(node_standalone, redis_standalone):
        a, b = RawClient(port), RawClient(port)
        cid = a.call(b"CLIENT", b"ID")[1:-2]
        killed = b.call(b"CLIENT", b"KILL", b"ID", cid)
        a.sock.settimeout(5)
        closed = a.sock.recv(100) == b""
        again = b.call(b"CLIENT", b"KILL", b"ID", cid)
        results.append((killed, closed, again))
        a.close()
        b.close()
    assert results[0] == results[1] == (b":1\r\n", True, b":0\r\n")


_MONITOR_LINE = re.compile(rb'^\+\d+\.\d{6} \[0 127\.0\.0\.1:\d+\] "SET" "mon" "a b\\"c"\r\n$')


def test_monitor_sees_other_clients(node_standalone: ManagedProcess,
                                    redis_standalone: ManagedProcess) -> None:
    for port in _both(node_standalone, redis_standalone):
        m, b = RawClient(port), RawClient(port)
        assert b.call(b"PING") == b"+PONG\r\n"  # b is a client before MONITOR starts
        assert m.call(b"MONITOR") == b"+OK\r\n"
        b.call(b"SET", b"mon", b'a b"c')
        line = m.read()
        assert _MONITOR_LINE.match(line), line
        m.close()
        b.close()


# sdscatrepr's cases: quote, backslash, the five named escapes, other control bytes, DEL, bytes
# from 0x80 up (UTF-8 text too), \v and \f (not named: hex), an empty argument.
_REPR_ARGS = [b'say "hi"', b"back\\slash\\", b"nl\ncr\rtab\t", b"bell\abs\b", b"\x00\x01\x1b\x7f",
              b"\x80\xfe\xff", "caf\u00e9 \u65e5\u672c".encode(), b"\x0b\x0c", b"", b"plain ~!#{}"]


def test_monitor_quotes_arguments_as_redis(node_standalone: ManagedProcess,
                                           redis_standalone: ManagedProcess) -> None:
    shown = []
    for port in _both(node_standalone, redis_standalone):
        m, b = RawClient(port), RawClient(port)
        assert m.call(b"MONITOR") == b"+OK\r\n"
        assert b.call(b"RPUSH", b"mon-repr", *_REPR_ARGS) == b":%d\r\n" % len(_REPR_ARGS)
        assert b.call(b"ECHO", bytes(range(256)))[:6] == b"$256\r\n"  # every byte value
        for _ in range(2):
            line = m.read()
            assert line.startswith(b"+") and line.endswith(b"\r\n"), line
            shown.append(line.split(b"] ", 1)[1])  # after "+<time> [<db> <addr>] "
        b.call(b"DEL", b"mon-repr")
        m.close()
        b.close()
    assert shown[:2] == shown[2:]  # ours, then redis-server's
    assert shown[2] == (b'"RPUSH" "mon-repr" "say \\"hi\\"" "back\\\\slash\\\\" "nl\\ncr\\rtab\\t" '
                    b'"bell\\abs\\b" "\\x00\\x01\\x1b\\x7f" "\\x80\\xfe\\xff" '
                    b'"caf\\xc3\\xa9 \\xe6\\x97\\xa5\\xe6\\x9c\\xac" "\\x0b\\x0c" "" "plain ~!#{}"\r\n')


def test_shutdown_nosave_stops_the_node(tmp_path: Path) -> None:
    node = slotgate_node(tmp_path).start()
    try:
        c = RawClient(node.port)
        c.send(b"SHUTDOWN", b"NOSAVE")
        c.sock.settimeout(10)
        assert c.sock.recv(100) == b""
        assert node.proc is not None
        assert node.proc.wait(10) == 0
    finally:
        node.stop()


def test_client_kill_ends_a_client_waiting_to_send(node_standalone: ManagedProcess) -> None:
    """A client that does not read its replies leaves its task waiting for the socket to take
    them (the only time an idle-looking client's task holds a cancel scope): CLIENT KILL
    still ends it, and the connection closes once what was sent is read."""
    a, b = RawClient(node_standalone.port), RawClient(node_standalone.port)
    cid = a.call(b"CLIENT", b"ID")[1:-2]
    assert b.call(b"SET", b"kill-big", b"x" * 1_000_000) == b"+OK\r\n"
    a.send_raw(encode_command(b"GET", b"kill-big") * 16)  # 16 MB of replies, not read yet

    def line() -> bytes:
        return next((x for x in b.call(b"CLIENT", b"LIST").split(b"\n")
                     if b"id=" + cid + b" " in x), b"")

    # the GETs ran: their 16 MB cannot all be in the socket buffers, the rest waits to be sent
    wait_until(lambda: b" cmd=get " in line(), what="the GETs to run")
    assert b.call(b"CLIENT", b"KILL", b"ID", cid) == b":1\r\n"
    wait_until(lambda: line() == b"", what="the killed client to be gone")
    a.sock.settimeout(10)
    assert len(a.read_until_closed()) < 16 * 1_000_020  # closed before every reply went out
    a.close()
    b.close()
