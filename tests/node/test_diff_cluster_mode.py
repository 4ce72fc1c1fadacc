"""Commands whose behaviour changes with cluster-enabled yes, compared with a real
cluster-enabled redis-server (no slots assigned: only commands that need no routing)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.node.diff import Case, Pair, check_cases
from tests.support import ManagedProcess, slotgate_node

CASES = [
    Case("select/swapdb/move/copy in cluster mode", [
        "SELECT 1", "SELECT 0", "SELECT x", "SWAPDB 0 1", "MOVE a 1", "COPY a b DB 1",
        "PING", ("HELLO 3", "type"), "DBSIZE", "CONFIG GET cluster-enabled",
        "COMMAND GETKEYS get a", "INFO cluster"]),
]


@pytest.fixture(scope="module")
def cluster_pair(tmp_path_factory: pytest.TempPathFactory,
                 redis_cluster_enabled: ManagedProcess) -> Iterator[Pair]:
    ours = slotgate_node(tmp_path_factory.mktemp("cm"), cluster=True).start()
    try:
        yield Pair(ours.port, redis_cluster_enabled.port)
    finally:
        ours.stop()


@pytest.mark.parametrize("proto", [2, 3])
def test_cluster_mode_restrictions_match_redis(cluster_pair: Pair, proto: int) -> None:
    problems = check_cases(cluster_pair, CASES, proto)
    assert not problems, "\n".join(problems)
