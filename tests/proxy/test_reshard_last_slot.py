"""Moving a master's last slot away: once the target owns it, the source may turn itself into a
replica of the target (Redis 7's replica migration) before the slot mover tells it the new
owner, and then refuses `CLUSTER SETSLOT` ("Please use SETSLOT only with masters."). As
redis-cli --cluster does, the mover takes that refusal as done (a scale-in emptying a master hit
it at random), on bundled nodes and on a real redis-server 7.0."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from slotgate.protocol.slots import SLOT_COUNT
from slotgate.proxy.ops.reshard import ClusterView, assign_everywhere
from tests.support import ManagedProcess, redis_server, slotgate_node, start_all, wait_until


@pytest.fixture(params=["bundled", "real"])
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[list[ManagedProcess]]:
    """Two masters: the first owns slot 0 only, the second every other slot."""
    make = slotgate_node if request.param == "bundled" else redis_server
    nodes = start_all([make(tmp_path, cluster=True) for _ in range(2)])
    try:
        a, b = (n.client(socket_timeout=5) for n in nodes)
        a.execute_command("CLUSTER", "ADDSLOTS", 0)
        b.execute_command("CLUSTER", "ADDSLOTSRANGE", 1, SLOT_COUNT - 1)
        a.execute_command("CLUSTER", "MEET", "127.0.0.1", nodes[1].port)
        wait_until(lambda: all(c.execute_command("CLUSTER", "INFO").decode().find(
            "cluster_state:ok") >= 0 for c in (a, b)), 30, "both nodes agreeing")
        yield nodes
    finally:
        for n in nodes:
            n.stop()


def test_source_turned_replica_is_not_an_error(pair: list[ManagedProcess]) -> None:
    src, dst = pair
    view = ClusterView(("127.0.0.1", src.port)).load()  # both masters, as the mover planned
    s_line = view.by_address(("127.0.0.1", src.port))
    d_line = view.by_address(("127.0.0.1", dst.port))
    s, d = src.client(socket_timeout=5), dst.client(socket_timeout=5)
    d.execute_command("CLUSTER", "SETSLOT", 0, "IMPORTING", s_line.id)
    s.execute_command("CLUSTER", "SETSLOT", 0, "MIGRATING", d_line.id)
    d.execute_command("CLUSTER", "SETSLOT", 0, "NODE", d_line.id)
    # The target announces the slot; the source, left without slots, follows it as a replica.
    wait_until(lambda: s.info("replication")["role"] == "slave", 30, "the source a replica")
    try:
        assign_everywhere(view, 0, d_line, first=(d_line, s_line))
    finally:
        view.close()
    assert d.execute_command("CLUSTER", "COUNTKEYSINSLOT", 0) == 0
    owner = [e for e in d.execute_command("CLUSTER", "SLOTS") if int(e[0]) == 0]
    assert int(owner[0][2][1]) == dst.port
