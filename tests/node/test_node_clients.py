"""Several connections at once, on our node and on redis-server 7.0: CLIENT UNBLOCK, CLIENT
KILL, MONITOR, SHUTDOWN. Replies compared as raw bytes where they are deterministic."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support import ManagedProcess, RawClient, slotgate_node, wait_blocked


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
