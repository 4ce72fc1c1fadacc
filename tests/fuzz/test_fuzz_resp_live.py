"""The RESP request corpus, mutated, sent to a running bundled node and to a running proxy (in
front of a one-node cluster of ours): each connection gets an answer, an error or a close,
never a stall (a PING on another connection answers after each input), the process' peak RSS
stays within tests/fuzz/bounds.py's bound, and afterwards both still serve and have logged no
failure of their own."""

from __future__ import annotations

import random
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fuzz import bounds
from tests.fuzz.corpus import CORPUS, examples
from tests.support import (
    ManagedProcess,
    RawClient,
    redis_cli,
    slotgate_node,
    slotgate_proxy,
    wait_cluster_ok,
)

READ_TIMEOUT_S = 5.0


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ManagedProcess]]:
    workdir: Path = tmp_path_factory.mktemp("resp-live")
    node = slotgate_node(workdir, cluster=True).start()
    try:
        redis_cli("-p", str(node.port), "cluster", "addslotsrange", "0", "16383")
        wait_cluster_ok([node])
        proxy = slotgate_proxy(workdir, [node.port]).start()
        try:
            yield {"node": node, "proxy": proxy}
        finally:
            proxy.stop()
    finally:
        node.stop()


def mutations(count: int) -> Iterator[bytes]:
    corpus = [p.read_bytes() for p in sorted((CORPUS / "resp_request").iterdir())]
    rng = random.Random(17)
    for _ in range(count):
        data = bytearray(rng.choice(corpus))
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(data) + 1)
            if rng.random() < 0.5 and data:
                data[min(at, len(data) - 1)] = rng.randrange(256)
            else:
                data[at:at] = rng.choice((b"\r\n", b"*", b"$", b"-1", b"9999999999", b"0"))
        yield bytes(data)


def exchange(port: int, data: bytes) -> None:
    """Send ``data``; read until the server closes or goes quiet (an incomplete request
    waits for more, as it should); a stall would be a server that stops answering later."""
    with socket.create_connection(("127.0.0.1", port), timeout=READ_TIMEOUT_S) as s:
        try:
            s.sendall(data)
            s.settimeout(0.05)
            while s.recv(65536):
                pass
        except (TimeoutError, ConnectionError):
            pass


@pytest.mark.parametrize("which", ["node", "proxy"])
def test_mutated_requests(servers: dict[str, ManagedProcess], which: str) -> None:
    server = servers[which]
    with RawClient(server.port, timeout_s=10) as control:
        live = bounds.LiveBounds(server.pid)
        for data in mutations(examples()):
            exchange(server.port, data)
            live.after(data, lambda: control.call("PING"))
        live.check()
    print(f"{which}: {live.stats}")
    with RawClient(server.port) as c:
        assert c.call("PING") == b"+PONG\r\n"
        assert c.call("SET", "fuzz:k", "v") == b"+OK\r\n"
    assert server.alive()
    assert "Traceback" not in server.log_text(), server.log_text()[-3000:]
