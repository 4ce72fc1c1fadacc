"""Wire compatibility: two of our nodes and one real redis-server 7.0 in one cluster, joined by
CLUSTER MEET; each side detects the other's failure. And our node's restart from nodes.conf."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from tests.support import (
    ManagedProcess,
    during,
    nodes_lines,
    redis_server,
    signature,
    start_nodes,
    wait_cluster_ok,
    wait_until,
)

RANGES = [(0, 5460), (5461, 10922), (10923, 16383)]


def wait_for(cond: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    wait_until(cond, timeout_s, what)


def myid(n: ManagedProcess) -> str:
    return n.client().execute_command("CLUSTER", "MYID").decode()


def flags_of(viewer: ManagedProcess, node_id: str) -> list[str]:
    for f in nodes_lines(viewer):
        if f[0] == node_id:
            return f[2].split(",")
    return []


@pytest.fixture
def mixed(tmp_path: Path) -> Iterator[list[ManagedProcess]]:
    """[ours, ours, real redis-server], all masters with a third of the slots each."""
    ours = start_nodes(tmp_path, 2)
    real = redis_server(tmp_path, cluster=True)
    nodes = [*ours, real]
    try:
        real.start()
        for i, (n, (a, b)) in enumerate(zip(nodes, RANGES, strict=True)):
            c = n.client()
            c.execute_command("CLUSTER", "ADDSLOTSRANGE", a, b)
            c.execute_command("CLUSTER", "SET-CONFIG-EPOCH", i + 1)
        for n in nodes[1:]:
            n.client().execute_command("CLUSTER", "MEET", "127.0.0.1", nodes[0].port)
        wait_cluster_ok(nodes)
        wait_for(lambda: len({signature(n) for n in nodes}) == 1, "same slot signature")
        yield nodes
    finally:
        for n in nodes:
            n.stop()


def test_mixed_cluster_agrees(mixed: list[ManagedProcess]) -> None:
    sigs = {signature(n) for n in mixed}
    assert len(sigs) == 1
    ids = {myid(n) for n in mixed}
    assert {p.split(":")[0] for p in next(iter(sigs)).split("|")} == ids
    for n in mixed:
        lines = nodes_lines(n)
        assert len(lines) == 3
        for f in lines:
            assert "master" in f[2].split(",") and f[7] == "connected"
            assert f[1].startswith("127.0.0.1:")
        info = n.client().execute_command("CLUSTER", "INFO").decode()
        assert "cluster_state:ok" in info and "cluster_size:3" in info


def test_real_node_failure_seen_by_ours_and_back(mixed: list[ManagedProcess]) -> None:
    ours, real = mixed[:2], mixed[2]
    real_id = myid(real)
    real.kill()
    def failed(n: ManagedProcess) -> bool:
        return "fail" in flags_of(n, real_id)

    def state_fail(n: ManagedProcess) -> bool:
        return b"cluster_state:fail" in n.client().execute_command("CLUSTER", "INFO")

    def cleared(n: ManagedProcess) -> bool:
        return not {"fail", "fail?"} & set(flags_of(n, real_id))

    for n in ours:
        wait_for(functools.partial(failed, n), "ours mark the real node FAIL")
        wait_for(functools.partial(state_fail, n), "cluster state fail")
    real.start()  # same nodes.conf: it comes back with its id and slots
    for n in ours:
        wait_for(functools.partial(cleared, n), "FAIL cleared")
    wait_cluster_ok(mixed)


def test_our_node_failure_seen_by_real_and_ours(mixed: list[ManagedProcess]) -> None:
    victim, other, real = mixed
    vid = myid(victim)
    victim.kill()
    wait_for(lambda: "fail" in flags_of(real, vid), "real redis marks our node FAIL")
    wait_for(lambda: "fail" in flags_of(other, vid), "our other node marks it FAIL")
    assert "Marking node" in real.log_text() or "FAIL message received" in real.log_text()


def test_restart_keeps_identity_and_slots(tmp_path: Path) -> None:
    nodes = start_nodes(tmp_path, 3)
    try:
        for i, (n, (a, b)) in enumerate(zip(nodes, RANGES, strict=True)):
            n.client().execute_command("CLUSTER", "ADDSLOTSRANGE", a, b)
            n.client().execute_command("CLUSTER", "SET-CONFIG-EPOCH", i + 1)
        for n in nodes[1:]:
            n.client().execute_command("CLUSTER", "MEET", "127.0.0.1", nodes[0].port)
        wait_cluster_ok(nodes)
        before = myid(nodes[1])
        sig = signature(nodes[0])
        nodes[1].stop()
        conf = (nodes[1].cwd / f"nodes-{nodes[1].port}.conf").read_text()
        assert conf.splitlines()[-1].startswith("vars currentEpoch 3 lastVoteEpoch 0")
        nodes[1].start()
        assert myid(nodes[1]) == before
        wait_cluster_ok(nodes)
        wait_for(lambda: all(signature(n) == sig for n in nodes), "same view after restart")
    finally:
        for n in nodes:
            n.stop()


def test_hostnames_and_endpoint_type_at_run_time(mixed: list[ManagedProcess]) -> None:
    """CONFIG SET cluster-announce-hostname travels in the ping extension both ways;
    cluster-preferred-endpoint-type hostname changes MOVED and CLUSTER SLOTS."""
    ours, other, real = mixed
    ours.client().config_set("cluster-announce-hostname", "ours-host")
    real.client().config_set("cluster-announce-hostname", "real-host")
    ours_id, real_id = myid(ours), myid(real)

    def addr_token(viewer: ManagedProcess, node_id: str) -> str:
        return next(f[1] for f in nodes_lines(viewer) if f[0] == node_id)

    wait_for(lambda: addr_token(real, ours_id).endswith(",ours-host"), "real learns our name")
    wait_for(lambda: addr_token(other, real_id).endswith(",real-host"), "ours learn real's")
    assert addr_token(ours, ours_id).endswith(",ours-host")  # myself line
    other.client().config_set("cluster-preferred-endpoint-type", "hostname")
    real_port = real.port
    key = next(k for k in (f"k{i}" for i in range(1000))
               if 10923 <= int(other.client().execute_command("CLUSTER", "KEYSLOT", k)))
    try:
        other.client().get(key)
    except Exception as e:  # noqa: BLE001 - redis-py turns MOVED into its own error type
        assert str(e).endswith(f"real-host:{real_port}"), str(e)
    else:
        raise AssertionError("expected a MOVED")
    slots = other.client().execute_command("CLUSTER", "SLOTS")
    entry = next(e for e in slots if e[0] == 10923)
    assert entry[2][0] == b"real-host" and entry[2][1] == real_port
    assert entry[2][3] in ([b"ip", b"127.0.0.1"], {b"ip": b"127.0.0.1"})


def test_restart_with_data_claims_unassigned_slots(tmp_path: Path) -> None:
    """verifyClusterConfigWithData: keys loaded at start-up in slots the config does not give
    to this node: unassigned -> claimed; another node's -> importing."""
    node = start_nodes(tmp_path, 1, extra=["--appendonly", "yes"])[0]
    try:
        c = node.client()
        c.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
        wait_for(lambda: b"cluster_state:ok" in c.execute_command("CLUSTER", "INFO"), "ok")
        c.set("foo", "1")  # slot 12182
        c.set("bar", "2")  # slot 5061
        node.stop()
        conf = node.cwd / f"nodes-{node.port}.conf"
        conf.write_text("")  # forget the cluster config, keep the data
        node.start()
        c = node.client()

        def my_slots() -> list[str]:
            return next(f for f in nodes_lines(node) if "myself" in f[2])[8:]

        # the node listens while it loads (as Redis): the check runs once the data is in
        wait_until(lambda: my_slots() == ["5061", "12182"], 10,
                   lambda: f"the loaded keys' slots claimed (now {my_slots()})",
                   ignore=(redis.RedisError,))
        assert c.dbsize() == 2  # (GET would say CLUSTERDOWN: the other slots are unassigned)
        assert "Taking responsibility" in node.log_text()
        assert "5061" in conf.read_text()  # saved at once
    finally:
        node.stop()


def test_config_file_is_locked(tmp_path: Path) -> None:
    """A second node on the same nodes.conf exits 1 with Redis' message."""
    import subprocess
    import sys

    first = start_nodes(tmp_path, 1)[0]
    try:
        conf = f"nodes-{first.port}.conf"
        out = subprocess.run(
            [sys.executable, "-m", "slotgate.node", "--port", "0", "--bind", "127.0.0.1",
             "--cluster-enabled", "yes", "--cluster-config-file", conf, "--save", ""],
            cwd=first.cwd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert out.returncode == 1
        assert "is already used by a different Redis Cluster node" in out.stdout + out.stderr
        assert first.alive() and first.client().ping()
    finally:
        first.stop()


def test_publish_crosses_the_bus_both_ways(mixed: list[ManagedProcess]) -> None:
    """PUBLISH on any node reaches subscribers on every node (bus PUBLISH messages)."""
    ours, other, real = mixed
    subs = []
    for n in (ours, other, real):
        p = n.client().pubsub()
        p.subscribe("news")
        assert p.get_message(timeout=5)["type"] == "subscribe"
        subs.append(p)
    try:
        for i, publisher in enumerate((ours, real)):
            publisher.client().publish("news", f"m{i}")
            for p in subs:
                msg = wait_until(functools.partial(p.get_message, timeout=1), 10,
                                 f"m{i} on every subscriber", interval_s=0)
                assert msg is not None and msg["data"] == f"m{i}".encode()
    finally:
        for p in subs:
            p.close()


def test_debug_drop_cluster_packet_filter(tmp_path: Path) -> None:
    """Dropping PONGs on one node leaves its ping to the peer unanswered (ping_sent stays
    set); other traffic still proves the peer alive, so no PFAIL (as in Redis 7.0, where any
    packet counts as liveness). -1 removes the filter and the peer stays healthy."""
    a, b = start_nodes(tmp_path, 2, extra=["--enable-debug-command", "yes"])
    try:
        a.client().execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 8191)
        b.client().execute_command("CLUSTER", "ADDSLOTSRANGE", 8192, 16383)
        b.client().execute_command("CLUSTER", "MEET", "127.0.0.1", a.port)
        wait_cluster_ok([a, b])
        bid = myid(b)

        def ping_sent() -> int:
            return next(int(f[4]) for f in nodes_lines(a) if f[0] == bid)

        assert a.client().execute_command("DEBUG", "DROP-CLUSTER-PACKET-FILTER", 1) == b"OK"
        wait_for(lambda: ping_sent() != 0, "a waits for a PONG")
        # > node_timeout: a ping stays unanswered the whole time, yet no PFAIL. (Whether it is
        # the same ping depends on timing: b's traffic arrives about every node_timeout/2, the
        # very bound at which the cron drops a link with a pending ping, on Redis too.)
        for _ in during(2.5, interval_s=0.25):
            assert ping_sent() != 0
            assert not {"fail?", "fail"} & set(flags_of(a, bid))
        assert a.client().execute_command("DEBUG", "DROP-CLUSTER-PACKET-FILTER", -1) == b"OK"
        time.sleep(1)  # the scenario: a second without the filter, and the peer still healthy
        assert not {"fail?", "fail"} & set(flags_of(a, bid))
    finally:
        a.stop()
        b.stop()
