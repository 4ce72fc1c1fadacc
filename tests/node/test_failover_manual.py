"""CLUSTER FAILOVER [FORCE|TAKEOVER] with real processes: the default handshake loses no
acknowledged write under load; FORCE and TAKEOVER promote a replica whose master is down
(ours and real redis-server); the error replies match real Redis."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis
from redis.cluster import RedisCluster

from tests.node.test_failover import (
    KINDS,
    BackgroundWriter,
    first_slot,
    formed_cluster,
    key_in_slot,
    myid,
    nodes_lines,
    role_of,
    shard_of,
    wait_agree,
    wait_for,
)
from tests.support import ManagedProcess


class UniqueWriter(BackgroundWriter):
    """Writes a new key per request; remembers every acknowledged one and every error."""

    socket_timeout_s = 2.0

    def __init__(self, port: int, max_s: float = 60.0) -> None:
        super().__init__(port, max_s)
        self.acked: list[str] = []
        self.errors: list[str] = []

    def write(self, rc: RedisCluster, i: int) -> None:
        key = f"mf:{i}"
        try:
            if rc.set(key, str(i)):
                self.acked.append(key)
        except (redis.RedisError, OSError) as exc:
            self.errors.append(f"{key}: {exc}")
            time.sleep(0.02)  # load pacing: back off from a node that is down


def test_manual_failover_under_load_loses_no_acked_write(tmp_path: Path,
                                                        cleanup: list[ManagedProcess]) -> None:
    nodes = formed_cluster("ours", tmp_path, cleanup)
    master = nodes[0]
    replica = shard_of(nodes, master)[0]
    master_id, replica_id = myid(master), myid(replica)
    with UniqueWriter(nodes[1].port) as writer:
        wait_for(lambda: len(writer.acked) > 200, 20, "write load to start")
        before = len(writer.acked)
        assert replica.client().execute_command("CLUSTER", "FAILOVER") == b"OK"
        wait_for(lambda: role_of(replica) == ("master", "-"), 10, "replica promoted")
        wait_for(lambda: role_of(master) == ("slave", replica_id), 10,
                 "old master re-pointed to the new one")
        n_at_switch = len(writer.acked)
        wait_for(lambda: len(writer.acked) > n_at_switch + 200, 20, "writes after the failover")
    assert len(writer.acked) > before
    rc = RedisCluster(host="127.0.0.1", port=nodes[1].port)
    try:
        missing = []
        for start in range(0, len(writer.acked), 500):
            chunk = writer.acked[start:start + 500]
            pipe = rc.pipeline()
            for k in chunk:
                pipe.get(k)
            for k, v in zip(chunk, pipe.execute(), strict=True):
                if v != k.split(":")[1].encode():
                    missing.append(k)
    finally:
        rc.close()
    assert missing == [], f"{len(missing)} acknowledged writes lost, e.g. {missing[:5]}"
    # the failover happened by election (epoch of the new master is the cluster's max)
    wait_agree(nodes)
    lines = nodes_lines(nodes[2])
    epochs = {f[0]: int(f[6]) for f in lines}
    assert epochs[replica_id] == max(epochs.values())
    assert {f[3] for f in lines if f[0] == master_id} == {replica_id}
    info = replica.client().info("replication")
    assert info["master_replid2"] != "0" * 40  # the old history continues as replid2


def _down_master(kind: str, workdir: Path, cleanup: list[ManagedProcess]
                 ) -> tuple[list[ManagedProcess], list[tuple[ManagedProcess, ManagedProcess]]]:
    nodes = formed_cluster(kind, workdir, cleanup)
    masters = [n for n in nodes if role_of(n)[0] == "master"]
    pairs = [(m, shard_of(nodes, m)[0]) for m in masters]
    for _, r in pairs:  # only the operator may promote them
        r.client().config_set("cluster-replica-no-failover", "yes")
    return nodes, pairs


@pytest.mark.parametrize("kind", KINDS)
def test_force_and_takeover_while_master_down(kind: str, tmp_path: Path,
                                              cleanup: list[ManagedProcess]) -> None:
    nodes, pairs = _down_master(kind, tmp_path, cleanup)
    (m1, r1), (m2, r2) = pairs[0], pairs[1]
    with pytest.raises(redis.ResponseError) as err:
        m1.client().execute_command("CLUSTER", "FAILOVER")
    assert str(err.value) == "You should send CLUSTER FAILOVER to a replica"
    with pytest.raises(redis.ResponseError) as err:
        r1.client().execute_command("CLUSTER", "FAILOVER", "SOMETIMES")
    assert str(err.value) == "syntax error"

    m1_id = myid(m1)
    m1.kill()

    def refuses_default() -> bool:
        try:
            r1.client().execute_command("CLUSTER", "FAILOVER")
        except redis.ResponseError as exc:
            return str(exc) == "Master is down or failed, please use CLUSTER FAILOVER FORCE"
        return False

    wait_for(refuses_default, 10, "the default failover to be refused")
    assert r1.client().execute_command("CLUSTER", "FAILOVER", "FORCE") == b"OK"
    wait_for(lambda: role_of(r1) == ("master", "-"), 10, "FORCE to promote the replica")
    assert r1.client().set(key_in_slot(first_slot(r1)), "v")
    # TAKEOVER: no election at all
    m2.kill()
    assert r2.client().execute_command("CLUSTER", "FAILOVER", "TAKEOVER") == b"OK"
    wait_for(lambda: role_of(r2) == ("master", "-"), 5, "TAKEOVER to promote the replica")
    live = [n for n in nodes if n not in (m1, m2)]
    r2_id = myid(r2)
    wait_for(lambda: all(r2_id in [f[0] for f in nodes_lines(n)
                                   if "master" in f[2] and len(f) > 8] for n in live),
             15, "every live node to see the TAKEOVER")
    wait_for(lambda: all(any(f[0] == m1_id and "fail" in f[2].split(",")
                             for f in nodes_lines(n)) for n in live), 20, "old master FAIL")
    wait_for(lambda: all("cluster_state:ok" in n.client().execute_command(
        "CLUSTER", "INFO").decode() for n in live), 20, "cluster ok again")
