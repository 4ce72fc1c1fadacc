"""Proxy processes of their own: lost connections with unknown write fate, and shutdown."""

from __future__ import annotations

import os
import signal
import socket
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from slotgate.protocol.slots import key_slot
from tests.conftest import ClusterBackend
from tests.proxy.test_redirects import slot_owner
from tests.support import (
    ManagedProcess,
    RawClient,
    slotgate_proxy,
    wait_blocked,
    wait_until,
)


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def test_write_with_unknown_fate_gets_an_error_and_reads_are_retried(
    cluster_backend: ClusterBackend, tmp_path: Path
) -> None:
    config = tmp_path / "proxy.yaml"
    config.write_text('backend:\n  command_timeout: "300ms"\n')
    proxy = slotgate_proxy(tmp_path, cluster_backend.ports, ["--config", str(config)]).start()
    key = f"fate{uuid.uuid4().hex[:6]}"
    owner = slot_owner(cluster_backend, key_slot(key.encode()))
    try:
        with RawClient(proxy.port) as writer, RawClient(proxy.port) as reader:
            assert writer.call("SET", key, "before") == b"+OK\r\n"
            os.kill(owner.pid, signal.SIGSTOP)
            try:
                writer.send("SET", key, "after")
                time.sleep(0.05)  # the write goes out first (the node, stopped, shows nothing)
                reader.send("GET", key)
                write_reply = writer.read_frames(1)[0]
                assert write_reply == (
                    f"-ERR slotgate: connection to 127.0.0.1:{owner.port} lost; "
                    "write may or may not have been applied\r\n").encode()
                time.sleep(0.5)  # the scenario: the node stays stopped a while longer
            finally:
                os.kill(owner.pid, signal.SIGCONT)
            # The read was retried on a new connection until the node answered again.
            assert reader.read_frames(1)[0] in (b"$6\r\nbefore\r\n", b"$5\r\nafter\r\n")
            info = proxy.client().info("proxy")
            assert info["unknown_fate_writes"] == 1
            assert writer.call("DEL", key) == b":1\r\n"
    finally:
        proxy.stop()


@contextmanager
def blpop_in_flight(backend: ClusterBackend, workdir: Path,
                    timeout: str) -> Iterator[tuple[ManagedProcess, RawClient]]:
    """A proxy of its own, and a client whose BLPOP (``timeout`` s) waits at the node; the
    proxy is stopped at the end."""
    proxy = slotgate_proxy(workdir, backend.ports[:1]).start()
    q = f"q{uuid.uuid4().hex[:6]}"
    owner = slot_owner(backend, key_slot(q.encode()))
    try:
        with RawClient(proxy.port) as c:
            assert c.call("PING") == b"+PONG\r\n"
            c.send("BLPOP", q, timeout)
            wait_blocked(owner.port, 1)
            yield proxy, c
    finally:
        proxy.stop()


def test_sigterm_finishes_in_flight_requests_then_exits(
    cluster_backend: ClusterBackend, tmp_path: Path
) -> None:
    with blpop_in_flight(cluster_backend, tmp_path, "1.5") as (proxy, c):
        started = time.monotonic()
        os.kill(proxy.pid, signal.SIGTERM)
        wait_until(lambda: not listening(proxy.port), what="the listener to close")
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", proxy.port), timeout=1).close()
        # The in-flight blocking command still gets its (timeout) reply, then the close.
        assert c.read_until_closed() == b"*-1\r\n"
        assert time.monotonic() - started > 1.0
        assert proxy.proc is not None
        assert proxy.proc.wait(10) == 0


def test_a_second_signal_gives_up_blocking_commands_and_exits_at_once(
    cluster_backend: ClusterBackend, tmp_path: Path
) -> None:
    with blpop_in_flight(cluster_backend, tmp_path, "20") as (proxy, c):
        started = time.monotonic()
        os.kill(proxy.pid, signal.SIGTERM)
        time.sleep(0.3)  # the scenario: a while after the first signal, still serving
        assert proxy.alive()  # the first signal waits for the BLPOP
        os.kill(proxy.pid, signal.SIGTERM)
        assert c.read_until_closed() == b""
        assert proxy.proc is not None
        assert proxy.proc.wait(10) == 0
        assert time.monotonic() - started < 5


def test_shutdown_grace_bounds_blocking_commands_too(
    cluster_backend: ClusterBackend, tmp_path: Path
) -> None:
    config = tmp_path / "proxy.yaml"
    config.write_text('shutdown:\n  grace: "1s"\n')
    proxy = slotgate_proxy(tmp_path, cluster_backend.ports[:1], ["--config", str(config)]).start()
    q = f"q{uuid.uuid4().hex[:6]}"
    owner = slot_owner(cluster_backend, key_slot(q.encode()))
    try:
        with RawClient(proxy.port) as c, RawClient(proxy.port) as idle:
            assert idle.call("PING") == b"+PONG\r\n"
            c.send("BLPOP", q, "20")
            wait_blocked(owner.port, 1)
            started = time.monotonic()
            os.kill(proxy.pid, signal.SIGTERM)
            assert c.read_until_closed() == b""  # given up at the deadline, no reply
            assert idle.read_until_closed() == b""
            assert proxy.proc is not None
            assert proxy.proc.wait(10) == 0
            assert 0.9 < time.monotonic() - started < 4
    finally:
        proxy.stop()


def test_starts_with_some_seeds_down_and_serves(
    cluster_backend: ClusterBackend, tmp_path: Path
) -> None:
    from tests.support import free_port

    dead = [f"127.0.0.1:{free_port()}" for _ in range(2)]
    proxy = slotgate_proxy(tmp_path, [*dead, cluster_backend.ports[-1]]).start()
    try:
        r = proxy.client()
        keys = [f"seed{uuid.uuid4().hex[:6]}:{i}" for i in range(30)]
        assert r.mset({k: "1" for k in keys}) is True
        assert r.delete(*keys) == 30
        assert r.info("proxy")["cluster_slots_covered"] == 16384
    finally:
        proxy.stop()



def test_client_leaving_during_blpop_does_not_consume_later_pushes(
    cluster_backend: ClusterBackend, slotgate: ManagedProcess, redis_standalone: ManagedProcess
) -> None:
    """Redis frees a blocked client that disconnects; so must the proxy's blocked request."""
    for server in (slotgate, redis_standalone):
        q = f"gone{uuid.uuid4().hex[:6]}"
        node = server if server is redis_standalone else slot_owner(cluster_backend,
                                                                   key_slot(q.encode()))
        c = RawClient(server.port)
        c.send("BLPOP", q, "0")
        wait_blocked(node.port, 1)
        c.close()
        wait_blocked(node.port, 0)
        r = server.client()
        assert r.rpush(q, "job") == 1
        time.sleep(0.3)  # a blocked request left behind anywhere would have taken the job
        assert r.lrange(q, 0, -1) == [b"job"], server
        r.delete(q)


class ResettingNode:
    """A listener that reads a request and answers with a TCP reset, as a node killed in the
    middle of a topology query does."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.05)  # accept() wakes up to see close()
        self.port = self.sock.getsockname()[1]
        self.resets = 0
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            conn.settimeout(5)
            conn.recv(1024)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()
            self.resets += 1

    def close(self) -> None:
        self._closed.set()
        self._thread.join(5)
        self.sock.close()


def test_topology_query_reset_by_a_dying_node_is_survived(
    cluster_backend: ClusterBackend, tmp_path: Path
) -> None:
    dying = ResettingNode()
    proxy = slotgate_proxy(tmp_path, [f"127.0.0.1:{dying.port}", cluster_backend.ports[0]])
    try:
        proxy.start()
        r = proxy.client(socket_timeout=10)
        assert r.set("reset-survivor", "1") is True
        assert dying.resets >= 1
        assert r.info("proxy")["cluster_slots_covered"] == 16384
        assert r.delete("reset-survivor") == 1
        assert proxy.alive()
    finally:
        proxy.stop()
        dying.close()
