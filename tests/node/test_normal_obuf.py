"""client-output-buffer-limit for normal clients: a client that pipelines big replies and
never reads is closed once its unsent output passes the ``normal`` class's hard limit, while
other clients go on being served; with the default (``normal 0 0 0``) it is never closed.
Each scenario runs on our node and on a real redis-server 7.0 and must end the same way."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from tests.support import ManagedProcess, RawClient, node_and_redis, wait_until

VALUE = b"v" * (100 * 1024)
GETS = 200
REPLY = b"$%d\r\n%s\r\n" % (len(VALUE), VALUE)


@pytest.fixture(scope="module")
def procs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ManagedProcess]]:
    with node_and_redis(tmp_path_factory.mktemp("obuf")) as p:
        yield p


def stalled_reader(port: int) -> tuple[socket.socket, int]:
    """A client that learns its id, then pipelines GETs of the big value and never reads."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    s.settimeout(5)
    s.sendall(b"*2\r\n$6\r\nCLIENT\r\n$2\r\nID\r\n")
    got = b""
    while not got.endswith(b"\r\n"):
        got += s.recv(64)
    s.sendall(b"*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n" * GETS)
    return s, int(got[1:-2])


def listed(admin: RawClient, client_id: int) -> bool:
    return admin.call("CLIENT", "LIST", "ID", client_id) != b"$0\r\n\r\n"


def read_all(s: socket.socket, want: int) -> int:
    total = 0
    s.settimeout(10)
    while total < want:
        data = s.recv(1 << 20)
        if not data:
            break
        total += len(data)
    return total


@pytest.mark.parametrize("impl", ["ours", "real"])
def test_hard_limit_closes_a_client_that_does_not_read(procs: dict[str, ManagedProcess],
                                                       impl: str) -> None:
    with RawClient(procs[impl].port) as admin:
        assert admin.call("SET", "big", VALUE) == b"+OK\r\n"
        assert admin.call("CONFIG", "SET", "client-output-buffer-limit",
                          "normal 1mb 0 0") == b"+OK\r\n"
        try:
            s, cid = stalled_reader(procs[impl].port)
            try:
                wait_until(lambda: not listed(admin, cid), 10, "the stalled client closed")
                # another client is served as usual, big replies included
                assert admin.call("PING") == b"+PONG\r\n"
                assert admin.call("GET", "big") == REPLY
                try:
                    got = read_all(s, len(REPLY) * GETS)
                except ConnectionResetError:
                    got = 0
                assert got < len(REPLY) * GETS  # its pending output was dropped
            finally:
                s.close()
        finally:
            admin.call("CONFIG", "SET", "client-output-buffer-limit", "normal 0 0 0")


@pytest.mark.parametrize("impl", ["ours", "real"])
def test_no_normal_limit_by_default(procs: dict[str, ManagedProcess], impl: str) -> None:
    with RawClient(procs[impl].port) as admin:
        assert admin.call("SET", "big", VALUE) == b"+OK\r\n"
        assert b"normal 0 0 0" in admin.call("CONFIG", "GET", "client-output-buffer-limit")
        s, cid = stalled_reader(procs[impl].port)
        try:
            time.sleep(0.5)
            assert listed(admin, cid)
            assert admin.call("PING") == b"+PONG\r\n"
            assert read_all(s, len(REPLY) * GETS) == len(REPLY) * GETS
            assert listed(admin, cid)
        finally:
            s.close()
