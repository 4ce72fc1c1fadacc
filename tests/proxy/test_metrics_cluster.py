"""The cluster-health part of the proxy's /metrics (no processes): members' health, replica lag
and failovers read from CLUSTER SHARDS replies, and how workers' expositions merge them."""

from __future__ import annotations

from typing import Any

from slotgate.protocol.slots import SLOT_COUNT
from slotgate.proxy.ops.metrics import PrometheusMetrics
from slotgate.proxy.ops.metrics_merge import merge_expositions
from slotgate.proxy.routing.topology import SlotMap, promoted, slot_map_from_shards
from tests.proxy.test_metrics import parse, value


def node(port: int, role: str, offset: int, health: str = "online") -> list[Any]:
    return [b"id", b"x" * 40, b"port", port, b"ip", b"10.0.0.1", b"endpoint", b"10.0.0.1",
            b"role", role.encode(), b"replication-offset", offset, b"health", health.encode()]


def shards(*entries: tuple[list[int], list[list[Any]]]) -> list[Any]:
    return [[b"slots", slots, b"nodes", nodes] for slots, nodes in entries]


HALF = SLOT_COUNT // 2


def test_shards_give_members_health_and_replica_lag() -> None:
    reply = shards(
        ([0, HALF - 1], [node(1, "master", 5000), node(2, "replica", 4000),
                         node(3, "replica", 0, "loading")]),
        ([HALF, SLOT_COUNT - 1], [node(4, "master", 100), node(5, "replica", 100)]),
        ([], [node(6, "master", 0, "fail")]),  # a failed master that lost its slots
    )
    m = slot_map_from_shards(reply, "127.0.0.1")
    assert m.members == {
        "10.0.0.1:1": ("master", "online"), "10.0.0.1:2": ("replica", "online"),
        "10.0.0.1:3": ("replica", "loading"), "10.0.0.1:4": ("master", "online"),
        "10.0.0.1:5": ("replica", "online"), "10.0.0.1:6": ("master", "fail"),
    }
    # Online replicas only, as bytes behind their master.
    assert m.replica_lag_bytes == {"10.0.0.1:2": ("10.0.0.1:1", 1000),
                                   "10.0.0.1:5": ("10.0.0.1:4", 0)}
    assert m.masters == ["10.0.0.1:1", "10.0.0.1:4"]


def test_odd_offsets_cost_no_slot_map() -> None:
    master = node(1, "master", 0)
    master[master.index(b"replication-offset") + 1] = b"not a number"
    replica = node(2, "replica", 5)
    del replica[replica.index(b"replication-offset"):replica.index(b"replication-offset") + 2]
    m = slot_map_from_shards(shards(([0, SLOT_COUNT - 1], [master, replica])), "h")
    assert m.covered() == SLOT_COUNT and m.replicas == {"10.0.0.1:1": ["10.0.0.1:2"]}
    assert m.replica_lag_bytes == {}


def test_promoted_replicas_are_failovers() -> None:
    before = SlotMap(owners=["a:1"] * SLOT_COUNT, replicas={"a:1": ["b:1"]}, masters=["a:1"])
    after = SlotMap(owners=["b:1"] * SLOT_COUNT, replicas={"b:1": []}, masters=["b:1"])
    assert promoted(before, after) == ["b:1"]
    assert promoted(after, after) == []
    assert promoted(SlotMap(), before) == []  # start-up is not a failover
    # A slot moving to another master (a reshard) is not one either.
    moved = SlotMap(owners=["c:1"] * SLOT_COUNT, replicas={"c:1": []}, masters=["c:1"])
    assert promoted(before, moved) == []


def exported(slot_map: SlotMap, failover: str | None = None) -> str:
    m = PrometheusMetrics(process_metrics=False)

    class Topo:
        version = 1

    Topo.slot_map = slot_map  # type: ignore[attr-defined]
    m.topology = Topo()
    if failover:
        m.failover(failover)
    return m.render().decode()


def test_cluster_health_series() -> None:
    reply = shards(([0, SLOT_COUNT - 1], [node(1, "master", 900), node(2, "replica", 400)]),
                   ([], [node(3, "master", 0, "fail")]))
    text = exported(slot_map_from_shards(reply, "h"), failover="10.0.0.1:1")
    s = parse(text)
    assert value(s, "slotgate_cluster_node_online", node="10.0.0.1:1", role="master") == 1
    assert value(s, "slotgate_cluster_node_online", node="10.0.0.1:3", role="master") == 0
    assert value(s, "slotgate_replica_lag_bytes", node="10.0.0.1:2", master="10.0.0.1:1") == 500
    assert value(s, "slotgate_failovers_total", node="10.0.0.1:1") == 1
    # Every known node has its failover series from the start (at 0), so increase() works.
    assert value(s, "slotgate_failovers_total", node="10.0.0.1:2") == 0


def test_cluster_health_without_shards() -> None:
    # CLUSTER SLOTS only (older servers): the families exist, with no samples.
    text = exported(SlotMap(owners=["a:1"] * SLOT_COUNT, replicas={"a:1": []}, masters=["a:1"]))
    assert "# TYPE slotgate_cluster_node_online gauge" in text
    assert "slotgate_replica_lag_bytes{" not in text


def test_workers_merge_health_pessimistically() -> None:
    def seen(lag_bytes: int, health_3: str) -> str:
        reply = shards(([0, SLOT_COUNT - 1], [node(1, "master", 900),
                                              node(2, "replica", 900 - lag_bytes),
                                              node(3, "replica", 900, health_3)]))
        return exported(slot_map_from_shards(reply, "h"))

    merged = parse(merge_expositions([seen(100, "online"), seen(800, "fail")]).decode())
    # A node one worker saw failed is down; the larger lag wins.
    assert value(merged, "slotgate_cluster_node_online", node="10.0.0.1:3", role="replica") == 0
    assert value(merged, "slotgate_cluster_node_online", node="10.0.0.1:2", role="replica") == 1
    assert value(merged, "slotgate_replica_lag_bytes", node="10.0.0.1:2",
                 master="10.0.0.1:1") == 800
