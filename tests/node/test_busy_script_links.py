"""What a node's links do while it runs a busy script, on ours and on redis-server 7.0 side by
side (the same steps to both, at the same time):

- a replica running a long script does not serve its link to its master: the master's writes
  wait in the link (the replica neither applies nor acknowledges them, so the master's WAIT
  gets 0) and are applied once the script ends;
- the cluster bus is served: a peer's PING is answered with a PONG on a link opened before the
  script and on one opened while it runs.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

from slotgate.node.cluster import bus
from tests.node.test_busy_script import BUSY_EVAL, LOOP, Background, _wait_busy, side_by_side
from tests.support import (
    ManagedProcess,
    RawClient,
    redis_server,
    replica_in_sync,
    running,
    slotgate_node,
    wait_until,
)

THRESHOLD = ["--busy-reply-threshold", "200"]
KILLED = b"-ERR Script killed by user with SCRIPT KILL... script: "


def _head(reply: bytes | Exception) -> bytes:
    """The start of a killed script's reply (its sha and line follow)."""
    assert isinstance(reply, bytes), reply
    return reply[: len(KILLED)]


def _server(kind: str, workdir: Path, cluster: bool = False) -> ManagedProcess:
    if kind == "ours":
        return slotgate_node(workdir, cluster=cluster, extra=THRESHOLD)
    return redis_server(workdir, cluster=cluster, extra=THRESHOLD)


def test_replica_does_not_serve_its_master_while_busy(tmp_path: Path) -> None:
    def steps(kind: str) -> list[object]:
        master, replica = _server(kind, tmp_path / kind), _server(kind, tmp_path / kind)
        with running(master, replica), RawClient(master.port) as m, \
                RawClient(replica.port) as r:
            assert r.call("REPLICAOF", "127.0.0.1", str(master.port)) == b"+OK\r\n"
            wait_until(lambda: replica_in_sync(master.port, replica.port), 30,
                       f"{kind} replica in sync")
            script = Background(replica.port, "EVAL", LOOP, "0")
            _wait_busy(r, BUSY_EVAL)
            seen: list[object] = [m.call("SET", "k", "v"), m.call("WAIT", "1", "500")]
            seen.append(r.call("GET", "k"))  # still busy: the script runs on
            seen += [r.call("SCRIPT", "KILL"), _head(script.result())]
            wait_until(lambda: r.call("GET", "k") == b"$1\r\nv\r\n", 30,
                       f"{kind} replica applying the write after the script")
            seen.append(m.call("WAIT", "1", "10000"))
            return seen

    got = side_by_side(steps)
    assert got["ours"] == got["real"]
    assert got["ours"] == [b"+OK\r\n", b":0\r\n", BUSY_EVAL, b"+OK\r\n", KILLED, b":1\r\n"]


def _ping() -> bytes:
    return bus.encode(bus.Message(type=bus.PING, sender=b"f" * 40, myip="127.0.0.1", port=1,
                                  cport=10001))


def _pong_within(link: socket.socket, timeout_s: float) -> bool:
    """Send a PING on ``link``; True if a PONG comes back within ``timeout_s``."""
    link.settimeout(timeout_s)
    link.sendall(_ping())
    reader = bus.FrameReader()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            data = link.recv(65536)
        except TimeoutError:
            return False
        if not data:
            return False
        reader.feed(data)
        if any(bus.decode(frame).type == bus.PONG for frame in reader.messages()):
            return True
    return False


def test_cluster_bus_served_while_busy(tmp_path: Path) -> None:
    def steps(kind: str) -> list[object]:
        node = _server(kind, tmp_path / kind, cluster=True)
        with running(node), RawClient(node.port) as other:
            wait_until(lambda: other.call("PING") == b"+PONG\r\n", 15, f"{kind} up")
            bus_port = node.port + 10000
            with socket.create_connection(("127.0.0.1", bus_port), timeout=10) as old:
                seen: list[object] = [_pong_within(old, 10)]
                script = Background(node.port, "EVAL", LOOP, "0")
                _wait_busy(other, BUSY_EVAL)
                seen.append(_pong_within(old, 10))
                with socket.create_connection(("127.0.0.1", bus_port), timeout=10) as new:
                    seen.append(_pong_within(new, 10))
                    seen.append(other.call("PING"))  # the script was running all along
                    seen += [other.call("SCRIPT", "KILL"), _head(script.result())]
                    seen.append(_pong_within(new, 10))
            return seen

    got = side_by_side(steps)
    assert got["ours"] == got["real"]
    assert got["ours"] == [True, True, True, BUSY_EVAL, b"+OK\r\n", KILLED, True]
