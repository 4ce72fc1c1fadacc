"""Limits and abuse, on our node and on the proxy (in front of a one-node cluster): slowloris
clients, a connection flood past the client limit, and a client that pipelines big replies and
never reads. Meanwhile another client's latency is measured (p99 printed; only a generous bound
is asserted, the machine is shared) and the server's memory must stay bounded."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tests.support import (
    ManagedProcess,
    RawClient,
    rss_bytes,
    running,
    slotgate_node,
    slotgate_proxy,
    wait_cluster_ok,
    wait_until,
)

MAX_CLIENTS = 40
P99_BOUND_S = 3.0  # generous: a loaded 2-core machine (one run saw a 1.6 s first reply on the
# proxy while it took the 128 MB of replies below); an unbounded stall shows as tens of seconds
RSS_BOUND_BYTES = 600 * 1024 * 1024


@pytest.fixture(scope="module", params=["node", "proxy"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagedProcess]:
    workdir = tmp_path_factory.mktemp("abuse")
    if request.param == "node":
        node = slotgate_node(workdir, extra=["--maxclients", str(MAX_CLIENTS)])
        with running(node):
            yield node
        return
    node = slotgate_node(workdir, cluster=True)
    conf = workdir / "proxy.yaml"
    conf.write_text(f"clients:\n  max_clients: {MAX_CLIENTS}\n")
    with running(node):
        node.client().execute_command("CLUSTER", "ADDSLOTSRANGE", "0", "16383")
        wait_cluster_ok([node])
        proxy = slotgate_proxy(workdir, [node.port], ["--config", str(conf)])
        with running(proxy):
            wait_until(lambda: _pong(proxy.port), 20, "the proxy answering", ignore=(OSError,))
            yield proxy


def _pong(port: int) -> bool:
    with RawClient(port, timeout_s=5) as c:
        return c.call("SET", "probe", "1") == b"+OK\r\n"


def _latencies(port: int, seconds: float) -> list[float]:
    out = []
    with RawClient(port, timeout_s=20) as c:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t0 = time.perf_counter()
            assert c.call("SET", "lat", "v") == b"+OK\r\n"
            out.append(time.perf_counter() - t0)
            time.sleep(0.005)
    return out


def _name(proc: ManagedProcess) -> str:
    return proc.argv[proc.argv.index("-m") + 1]


def _p99(samples: list[float]) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(len(s) * 0.99))]


def test_slowloris_clients(server: ManagedProcess) -> None:
    """Eight clients send a SET one byte every 100 ms; the others are served meanwhile, and
    the slow ones get their reply once their last byte is in."""
    request = b"*3\r\n$3\r\nSET\r\n$4\r\nslow\r\n$2\r\nok\r\n"
    socks = [socket.create_connection(("127.0.0.1", server.port), timeout=20) for _ in range(8)]

    def drip() -> None:
        for i in range(len(request)):
            for s in socks:
                s.sendall(request[i : i + 1])
            time.sleep(0.1)

    t = threading.Thread(target=drip)
    t.start()
    lat = _latencies(server.port, 2.0)
    t.join()
    print(f"{_name(server)}: slowloris p99 {_p99(lat) * 1000:.1f} ms over {len(lat)} requests")
    assert _p99(lat) < P99_BOUND_S
    for s in socks:
        assert s.recv(64) == b"+OK\r\n"
        s.close()


def test_connection_flood_past_the_limit(server: ManagedProcess) -> None:
    """MAX_CLIENTS + 20 connections at once: the extra ones get Redis' error and are closed;
    once the flood is gone, new clients are served."""
    socks = [socket.create_connection(("127.0.0.1", server.port), timeout=20)
             for _ in range(MAX_CLIENTS + 20)]
    try:
        replies = []
        for s in socks:
            s.sendall(b"PING\r\n")
        for s in socks:
            data = b""
            while not data.endswith(b"\r\n"):
                chunk = s.recv(256)
                if not chunk:
                    break
                data += chunk
            replies.append(data)
        refused = [r for r in replies if r != b"+PONG\r\n"]
        assert set(refused) == {b"-ERR max number of clients reached\r\n"}, set(replies)
        assert len(replies) - len(refused) <= MAX_CLIENTS
    finally:
        for s in socks:
            s.close()
    wait_until(lambda: _pong(server.port), 20, "a new client served after the flood",
               ignore=(OSError, AssertionError))


def test_client_that_never_reads(server: ManagedProcess) -> None:
    """A client pipelines 2,000 GETs of a 64 KB value (128 MB of replies) and reads nothing:
    the others keep their latency and the server's memory stays bounded."""
    with RawClient(server.port) as c:
        assert c.call("SET", "big", b"x" * 65536) == b"+OK\r\n"
    hog = socket.create_connection(("127.0.0.1", server.port), timeout=20)
    hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    hog.setblocking(False)
    pipeline = b"*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n" * 2000
    sent = 0
    end = time.monotonic() + 3
    while sent < len(pipeline) and time.monotonic() < end:
        try:
            sent += hog.send(pipeline[sent : sent + 65536])
        except BlockingIOError:
            time.sleep(0.01)
    lat = _latencies(server.port, 2.0)
    rss = rss_bytes(server.pid)
    print(f"{_name(server)}: never-reading client ({sent} bytes sent): p99 {_p99(lat) * 1000:.1f} ms, "
          f"max {max(lat) * 1000:.0f} ms, RSS {rss / 2**20:.0f} MB")
    hog.close()
    assert _p99(lat) < P99_BOUND_S
    assert rss < RSS_BOUND_BYTES
    wait_until(lambda: _pong(server.port), 20, "served after the hog left", ignore=(OSError,))

