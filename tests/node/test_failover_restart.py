"""Whole-cluster restart: all six nodes of a 3+3 cluster killed with -9 and started again on
the same directories (appendonly yes, appendfsync always) come back with the same topology
(ids, roles, masters, epochs, slots) and every acknowledged write."""

from __future__ import annotations

from pathlib import Path

from redis.cluster import RedisCluster

from tests.node.test_failover import (
    formed_cluster,
    replicas_synced,
    view,
    wait_agree,
    wait_for,
)
from tests.support import ManagedProcess, wait_cluster_ok

AOF = ["--appendonly", "yes", "--appendfsync", "always"]
KEYS = 1500


def test_whole_cluster_restart_keeps_topology_and_acked_writes(
        tmp_path: Path, cleanup: list[ManagedProcess]) -> None:
    nodes = formed_cluster("ours", tmp_path, cleanup, extra=AOF)
    rc = RedisCluster(host="127.0.0.1", port=nodes[0].port)
    acked: dict[str, str] = {}
    try:
        for i in range(KEYS):
            if rc.set(f"r:{i}", str(i)):
                acked[f"r:{i}"] = str(i)
    finally:
        rc.close()
    assert len(acked) == KEYS
    before = view(nodes[0])
    for n in nodes:
        n.kill()
    for n in nodes:
        n.start()
    wait_cluster_ok(nodes)
    wait_agree(nodes)
    assert view(nodes[0]) == before
    wait_for(lambda: replicas_synced(nodes), 30, "replicas in sync after the restart")
    rc = RedisCluster(host="127.0.0.1", port=nodes[1].port)
    try:
        pipe = rc.pipeline()
        keys = list(acked)
        for k in keys:
            pipe.get(k)
        values = pipe.execute()
    finally:
        rc.close()
    lost = [k for k, v in zip(keys, values, strict=True) if v != acked[k].encode()]
    assert lost == [], f"{len(lost)} acknowledged writes lost, e.g. {lost[:5]}"
