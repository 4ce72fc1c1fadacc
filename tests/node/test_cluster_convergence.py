"""Topology replies agree across a converged cluster, on our nodes and on real redis-server 7.0
with the same checks: after formation, a reshard, a failover and a node's removal, every node's
CLUSTER SLOTS is byte-identical within a few seconds, and CLUSTER SHARDS and NODES are equal
once each node's own view (replication offsets, ping/pong times, link state, ``myself``) is
set aside."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
import redis
from redis.cluster import RedisCluster

from tests.node.test_failover import create, myid, replicas_synced, role_of, start_cluster_nodes
from tests.support import ManagedProcess, RawClient, redis_cli, wait_until

KINDS = ("ours", "real")
CONVERGE_S = 10.0


def _slots_raw(n: ManagedProcess) -> bytes:
    with RawClient(n.port, timeout_s=5) as c:
        return c.call("CLUSTER", "SLOTS")


def _text(v: object) -> object:
    return v.decode() if isinstance(v, bytes) else v


def _as_dict(v: object) -> dict[object, object]:
    if isinstance(v, dict):
        return {_text(k): w for k, w in v.items()}
    assert isinstance(v, list)
    return {_text(k): w for k, w in zip(v[::2], v[1::2], strict=True)}


def _shards_view(n: ManagedProcess) -> list[tuple[object, ...]]:
    """CLUSTER SHARDS without replication offsets, shards in master id order (Redis lists
    them in its node table's hash order, which differs from node to node)."""
    out = []
    for shard in n.client(socket_timeout=5).execute_command("CLUSTER", "SHARDS"):
        d = _as_dict(shard)
        members = []
        for node in d["nodes"]:
            fields = _as_dict(node)
            fields.pop("replication-offset")
            members.append(tuple((_text(k), _text(v)) for k, v in fields.items()))
        out.append((tuple(d["slots"]), tuple(members)))
    return sorted(out, key=lambda s: str(s[1][0]))


def _nodes_view(n: ManagedProcess) -> list[tuple[str, ...]]:
    """CLUSTER NODES lines without ping/pong times, link state and the ``myself`` flag."""
    text = n.client(socket_timeout=5).execute_command("CLUSTER", "NODES").decode()
    out = []
    for line in text.splitlines():
        f = line.split()
        flags = ",".join(x for x in f[2].split(",") if x != "myself")
        out.append((f[0], f[1], flags, f[3], f[6], *f[8:]))
    return sorted(out)


def converged(nodes: Sequence[ManagedProcess]) -> bool:
    return all(len({repr(view(n)) for n in nodes}) == 1
               for view in (_slots_raw, _shards_view, _nodes_view))


def wait_converged(nodes: Sequence[ManagedProcess], what: str) -> None:
    def detail() -> str:
        return f"{what}: " + "; ".join(
            f"{n.port}: {_slots_raw(n)[:300]!r}" for n in nodes)
    wait_until(lambda: converged(nodes), CONVERGE_S, detail, interval_s=0.2,
               ignore=(redis.RedisError, OSError))
    # the replies name every node with its slots, in ascending slot order
    slots = nodes[0].client(socket_timeout=5).execute_command("CLUSTER", "SLOTS")
    starts = [int(e[0]) for e in slots]
    assert starts == sorted(starts) and sum(int(e[1]) - int(e[0]) + 1 for e in slots) == 16384


def _scenario(kind: str, tmp_path: Path, procs: list[ManagedProcess], count: int) -> None:
    nodes = start_cluster_nodes(kind, tmp_path, count)
    procs.extend(nodes)
    create(nodes)
    rc = RedisCluster(host="127.0.0.1", port=nodes[0].port)
    for i in range(200):  # offsets move on: replicas with offset 0 are left out of SLOTS
        rc.set(f"k{i}", i)
    rc.close()
    wait_until(lambda: replicas_synced(nodes), 30, "replicas in sync",
               ignore=(redis.RedisError,))
    wait_converged(nodes, "after formation")
    # every replica lists itself in its own range's entry, as the others list it
    for n in nodes:
        if role_of(n)[0] == "slave":
            assert myid(n).encode() in _slots_raw(n)
    masters = [n for n in nodes if role_of(n)[0] == "master"]
    ids = {n.port: myid(n) for n in nodes}
    res = redis_cli("--cluster", "reshard", f"127.0.0.1:{masters[0].port}",
                    "--cluster-from", ids[masters[0].port], "--cluster-to",
                    ids[masters[1].port], "--cluster-slots", "100", "--cluster-yes",
                    timeout_s=120, check=False)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    wait_converged(nodes, "after the reshard")
    replica = next(n for n in nodes if role_of(n) == ("slave", ids[masters[2].port]))
    replica.client().execute_command("CLUSTER", "FAILOVER")
    wait_until(lambda: role_of(replica)[0] == "master" and role_of(masters[2])[0] == "slave",
               30, "the failover", ignore=(redis.RedisError,))
    wait_converged(nodes, "after the failover")
    # the demoted master (now a replica) leaves the cluster
    res = redis_cli("--cluster", "del-node", f"127.0.0.1:{replica.port}", ids[masters[2].port],
                    timeout_s=60, check=False)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    rest = [n for n in nodes if n is not masters[2]]
    wait_converged(rest, "after the node's removal")
    assert all(ids[masters[2].port] not in repr(_nodes_view(n)) for n in rest)


@pytest.mark.parametrize("kind", KINDS)
def test_topology_converges(kind: str, tmp_path: Path) -> None:
    procs: list[ManagedProcess] = []
    try:
        _scenario(kind, tmp_path, procs, 6)
    finally:
        for p in procs:
            p.stop()


@pytest.mark.slow
def test_topology_converges_ten_nodes(tmp_path: Path) -> None:
    procs: list[ManagedProcess] = []
    try:
        _scenario("ours", tmp_path, procs, 10)
    finally:
        for p in procs:
            p.stop()
