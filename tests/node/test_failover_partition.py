"""Partitions without network namespaces: a master frozen with SIGSTOP for 3 x node_timeout
steps down when it comes back (no second writable master, WAIT-acked writes kept); a master
left alone when the other masters stop refuses writes after node_timeout, as redis-server
does, and accepts them again once the majority is back."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import redis

from tests.node.test_failover import (
    KINDS,
    NODE_TIMEOUT_MS,
    create,
    first_slot,
    formed_cluster,
    key_in_slot,
    myid,
    replicas_synced,
    role_of,
    shard_of,
    start_cluster_nodes,
    wait_agree,
    wait_for,
)
from tests.support import ManagedProcess, during

# redis-py raises ClusterDownError for -CLUSTERDOWN and keeps the text after the prefix
DOWN = "The cluster is down"
DOWN_RO = "The cluster is down and only accepts read commands"


def _freeze(n: ManagedProcess) -> None:
    os.kill(n.pid, signal.SIGSTOP)


def _thaw(n: ManagedProcess) -> None:
    os.kill(n.pid, signal.SIGCONT)


def test_sigstopped_master_steps_down(tmp_path: Path, cleanup: list[ManagedProcess]) -> None:
    nodes = formed_cluster("ours", tmp_path, cleanup)
    master = nodes[0]
    replica = shard_of(nodes, master)[0]
    replica_id = myid(replica)
    slot = first_slot(master)
    mc = master.client(socket_timeout=5)
    waited: dict[str, str] = {}
    for i in range(200):
        key = key_in_slot(slot, f"w{i}-")
        mc.set(key, str(i))
        if mc.execute_command("WAIT", 1, 2000) >= 1:
            waited[key] = str(i)
    assert len(waited) == 200
    probe = key_in_slot(slot, "probe")
    _freeze(master)
    try:
        time.sleep(3 * NODE_TIMEOUT_MS / 1000)  # the scenario: frozen for 3 x node_timeout
        wait_for(lambda: role_of(replica) == ("master", "-"), 10, "the replica to take over")
    finally:
        _thaw(master)
    # From the moment it runs again, the old master must never acknowledge a write to the
    # slots it lost: it learns of the new owner and becomes its replica.
    old = master.client(socket_timeout=2)
    accepted = 0
    for _ in during(4, interval_s=0.02):
        try:
            if old.set(probe, "stale"):
                accepted += 1
        except (redis.ResponseError, redis.ConnectionError, redis.TimeoutError):
            pass
    assert accepted == 0, f"the old master acknowledged {accepted} writes after SIGCONT"
    wait_for(lambda: role_of(master) == ("slave", replica_id), 15, "old master steps down")
    new = replica.client()
    for key, value in waited.items():
        assert new.get(key) == value.encode(), key
    assert new.set(probe, "fresh")
    wait_for(lambda: replicas_synced([master]), 20, "old master syncs from the new one")
    wait_agree(nodes)


@pytest.mark.parametrize("kind", KINDS)
def test_isolated_master_refuses_writes(kind: str, tmp_path: Path,
                                        cleanup: list[ManagedProcess]) -> None:
    nodes = start_cluster_nodes(kind, tmp_path, 3)
    cleanup.extend(nodes)
    create(nodes, replicas=0)
    wait_agree(nodes)
    alone, others = nodes[0], nodes[1:]
    key = key_in_slot(first_slot(alone), "iso")
    c = alone.client(socket_timeout=2)
    assert c.set(key, "1")
    for n in others:
        _freeze(n)
    t0 = time.monotonic()
    try:
        def refused() -> bool:
            try:
                c.set(key, "2")
            except redis.ResponseError as exc:
                assert isinstance(exc, redis.exceptions.ClusterDownError)
                assert str(exc) == DOWN
                return True
            return False

        wait_for(refused, NODE_TIMEOUT_MS / 1000 + 5, "writes to be refused", 0.02)
        elapsed = time.monotonic() - t0
        print(f"\n{kind}: isolated master refuses writes after {elapsed:.2f}s")
        assert elapsed >= NODE_TIMEOUT_MS / 1000 * 0.9
        assert elapsed <= NODE_TIMEOUT_MS / 1000 + 2.5
        with pytest.raises(redis.ResponseError) as err:
            c.get(key)
        assert isinstance(err.value, redis.exceptions.ClusterDownError)
        assert str(err.value) == DOWN
        c.config_set("cluster-allow-reads-when-down", "yes")
        assert c.get(key) in (b"1", b"2")
        with pytest.raises(redis.ResponseError) as err:
            c.set(key, "3")
        assert isinstance(err.value, redis.exceptions.ClusterDownError)
        assert str(err.value) == DOWN_RO
        info = c.execute_command("CLUSTER", "INFO").decode()
        assert "cluster_state:fail" in info
    finally:
        for n in others:
            _thaw(n)
    t1 = time.monotonic()
    wait_for(lambda: c.set(key, "4"), 20, "writes accepted after the majority is back", 0.05)
    print(f"{kind}: writable again {time.monotonic() - t1:.2f}s after the others resumed")
