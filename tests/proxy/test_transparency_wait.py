"""WAIT through the proxy counts the replicas that have the client's own last write
(proxy/front/wait.py): the same script to a standalone redis-server with one replica and to
the proxy (every master with one replica) compares equal, RESP2 and RESP3; a replica stopped
(SIGSTOP) is not counted once the timeout passes, a running one is."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ClusterBackend
from tests.support import (
    ManagedProcess,
    RawClient,
    nodes_lines,
    redis_server,
    replica_in_sync,
    running,
    wait_until,
)

PROTOCOLS = [2, 3]


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """The port of a standalone redis-server with one replica in sync."""
    work: Path = tmp_path_factory.mktemp("wait-standalone")
    master = redis_server(work)
    with running(master):
        replica = redis_server(work, extra=["--replicaof", "127.0.0.1", str(master.port)])
        with running(replica):
            wait_until(lambda: replica_in_sync(master.port, replica.port), 30, "replica in sync",
                       ignore=(OSError,))
            yield master.port


def _script(port: int, proto: int) -> list[bytes]:
    with RawClient(port) as c:
        hello = [c.call("HELLO", "3")[:1]] if proto == 3 else []
        return hello + [
            c.call("WAIT", "1", "0"),  # nothing written yet: the replica counts at once
            c.call("SET", "wait:{a}", "1"),
            c.call("WAIT", "1", "0"),  # until the replica has the write
            c.call("WAIT", "2", "50"),  # a second replica never comes: the count at timeout
            c.call("DEL", "wait:{a}"),
            c.call("WAIT", "0", "0"),
            c.call("WAIT", "x", "0"),
            c.call("WAIT", "1", "-1"),
            c.call("WAIT", "1"),
        ]


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_wait_answers_as_one_server_with_a_replica(slotgate: ManagedProcess, standalone: int,
                                                   proto: int) -> None:
    got = {"proxy": _script(slotgate.port, proto), "real": _script(standalone, proto)}
    assert got["proxy"] == got["real"]
    assert got["real"][proto - 2:][:4] == [b":1\r\n", b"+OK\r\n", b":1\r\n", b":1\r\n"]


def _replica_pid(backend: ClusterBackend, key: bytes) -> int:
    """The pid of the replica of the master that owns ``key``."""
    node = backend.nodes[0]
    with RawClient(node.port) as c:
        slot = int(c.call("CLUSTER", "KEYSLOT", key)[1:-2])
    lines = nodes_lines(node)
    master_id = next(f[0] for f in lines if "master" in f[2] and any(
        (int(t.split("-")[0]) <= slot <= int(t.split("-")[-1])) for t in f[8:]
        if not t.startswith("[")))
    port = next(int(f[1].split("@")[0].rsplit(":", 1)[1]) for f in lines if f[3] == master_id)
    return next(n.pid for n in backend.nodes if n.port == port)


def test_wait_counts_only_replicas_that_have_the_clients_write(
        slotgate: ManagedProcess, cluster_backend: ClusterBackend) -> None:
    key = b"wait:{stopped}"
    replica_pid = _replica_pid(cluster_backend, key)
    with RawClient(slotgate.port) as writer, RawClient(slotgate.port) as fresh:
        assert writer.call("SET", key, "1") == b"+OK\r\n"
        assert writer.call("WAIT", "1", "0") == b":1\r\n"  # the running replica has it
        os.kill(replica_pid, signal.SIGSTOP)
        try:
            assert writer.call("SET", key, "2") == b"+OK\r\n"
            assert writer.call("WAIT", "1", "300") == b":0\r\n"  # stopped: not counted
            assert fresh.call("WAIT", "1", "0") == b":1\r\n"  # nothing of its own to wait for
        finally:
            os.kill(replica_pid, signal.SIGCONT)
        assert writer.call("WAIT", "1", "0") == b":1\r\n"  # running again: it catches up
        assert writer.call("DEL", key) == b":1\r\n"
