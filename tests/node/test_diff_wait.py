"""WAIT counts the acknowledgements of the asking connection's own last write (Redis'
``c->woff``), compared with redis-server 7.0.15: each a master with one replica, the replica
stopped (SIGSTOP) while the scripts run, so only what it had already acknowledged counts."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import (
    ManagedProcess,
    RawClient,
    redis_server,
    replica_in_sync,
    running,
    slotgate_node,
    wait_until,
)


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[int, int]]]:
    """{"ours": (master port, replica pid), "real": ...}: each a master and its replica."""
    work: Path = tmp_path_factory.mktemp("wait")
    masters = {"ours": slotgate_node(work), "real": redis_server(work)}
    with running(*masters.values()):
        replicas: dict[str, ManagedProcess] = {
            "ours": slotgate_node(work, extra=["--replicaof", "127.0.0.1",
                                               str(masters["ours"].port)]),
            "real": redis_server(work, extra=["--replicaof", "127.0.0.1",
                                              str(masters["real"].port)]),
        }
        with running(*replicas.values()):
            for name, m in masters.items():
                wait_until(lambda m=m, r=replicas[name]: replica_in_sync(m.port, r.port), 30,
                           f"{name} replica in sync", ignore=(OSError,))
            yield {name: (m.port, replicas[name].pid) for name, m in masters.items()}


def _script(port: int, replica_pid: int) -> list[bytes]:
    """With the replica stopped: WAIT waits for the offset at the end of the connection's
    previous command (Redis sets ``c->woff`` after every command), so a connection's first
    command answers at once whatever others wrote, and its later ones wait."""
    out = []
    with RawClient(port) as writer, RawClient(port) as fresh:
        out.append(writer.call("WAIT", "1", "0"))  # nothing written: the replica counts
        os.kill(replica_pid, signal.SIGSTOP)
        try:
            out.append(writer.call("SET", "wait:k", "1"))
            out.append(fresh.call("WAIT", "1", "0"))  # its first command: answered at once
            out.append(fresh.call("WAIT", "1", "100"))  # now past the other's write
            out.append(writer.call("WAIT", "1", "100"))  # its own write: not acknowledged
            out.append(writer.call("WAIT", "0", "100"))
            out.append(fresh.call("SET", "wait:k", "2"))
            out.append(fresh.call("WAIT", "1", "100"))
        finally:
            os.kill(replica_pid, signal.SIGCONT)
        out.append(writer.call("WAIT", "1", "0"))  # running again: it catches up
        out.append(fresh.call("WAIT", "1", "0"))
    return out


def test_wait_counts_the_connections_own_last_write(
        pairs: dict[str, tuple[int, int]]) -> None:
    got = {name: _script(*ports) for name, ports in pairs.items()}
    assert got["ours"] == got["real"]
    assert got["real"] == [b":1\r\n", b"+OK\r\n", b":1\r\n", b":0\r\n", b":0\r\n", b":0\r\n",
                           b"+OK\r\n", b":0\r\n", b":1\r\n", b":1\r\n"]
