"""The pure parts of replica reads (no processes): lag from offset samples, which node a read
goes to under each policy, ROLE replies read, and read-your-writes tickets."""

from __future__ import annotations

from collections import deque

import pytest

from slotgate.protocol.slots import SLOT_COUNT
from slotgate.proxy.routing.offsets import NEVER, master_offset
from slotgate.proxy.routing.replicas import NodeState, choose, fit_replicas, lag_s, parse_role
from slotgate.proxy.routing.topology import slot_map_from_shards

M, R1, R2 = "m:1", "r:1", "r:2"


def states(now: float = 10.0, **overrides: NodeState) -> dict[str, NodeState]:
    master = NodeState(checked_s=now, rtt_s=0.002, role="master", offset=1000,
                       history=deque([(now - 1.0, 500), (now - 0.5, 800), (now, 1000)]))
    out = {M: master,
           R1: NodeState(checked_s=now, rtt_s=0.003, role="slave", offset=1000, link_up=True),
           R2: NodeState(checked_s=now, rtt_s=0.001, role="slave", offset=1000, link_up=True)}
    out.update({k.replace("_", ":"): v for k, v in overrides.items()})
    return out


def pick(policy: str, st: dict[str, NodeState], need: int = -1, turn: int = 0,
         now: float = 10.0) -> str:
    fit = fit_replicas([R1, R2], st, M, now, 0.5, 0.6)
    return choose(policy, M, fit, st, now - st[M].checked_s <= 0.5, need, turn)


def test_lag_is_how_long_ago_the_master_held_what_the_replica_lacks() -> None:
    history = [(9.0, 500), (9.5, 800), (10.0, 1000)]
    assert lag_s(1000, 10.0, history) == 0.0
    assert lag_s(900, 10.0, history) == 0.0  # wait: 1000 was first seen at 10.0
    assert lag_s(700, 10.0, history) == pytest.approx(0.5)
    assert lag_s(100, 10.2, history) == pytest.approx(1.2)  # at least the oldest sample
    assert lag_s(5, 10.0, []) == 0.0


def test_policies_pick_nodes() -> None:
    st = states()
    assert pick("master", st) == M
    assert {pick("replica", st, turn=t) for t in range(4)} == {R1, R2}  # round-robin
    assert pick("prefer-replica", st) in (R1, R2)
    assert pick("prefer-master", st) == M
    assert pick("nearest", st) == R2  # 1 ms against the master's 2
    st[R2].rtt_s = 0.01
    assert pick("nearest", st) == M


def test_unfit_replicas_are_skipped_and_reads_fall_back() -> None:
    st = states()
    st[R1].checked_s = 9.0  # not answered its checks for a second: stopped or dead
    assert {pick("replica", st, turn=t) for t in range(4)} == {R2}
    st[R2].link_up = False
    assert pick("replica", st) == M
    st = states()
    st[R1].offset = st[R2].offset = 500  # behind since 9.5: lag 0.5 s, within 0.6
    assert pick("replica", st) in (R1, R2)
    st[R1].offset = st[R2].offset = 400  # behind since 9.0: lag 1 s
    assert pick("replica", st) == M
    st = states()
    st[M].checked_s = 8.0  # the master's checks fail: prefer-master reads from a replica
    assert pick("prefer-master", st) in (R1, R2)


def test_read_your_writes_needs_the_replica_offset() -> None:
    st = states()
    st[R1].offset = 990
    assert pick("replica", st, need=995, turn=0) == R2
    assert pick("replica", st, need=995, turn=1) == R2
    assert pick("replica", st, need=1001) == M
    assert pick("replica", st, need=NEVER) == M


def test_role_replies() -> None:
    assert parse_role([b"master", 1234, []]) == ("master", 1234, True)
    assert parse_role([b"slave", b"127.0.0.1", 7000, b"connected", 99]) == ("slave", 99, True)
    assert parse_role([b"slave", b"127.0.0.1", 7000, b"connect", -1]) == ("slave", -1, False)
    with pytest.raises(ValueError):
        parse_role([b"sentinel", []])
    assert master_offset(b"*3\r\n$6\r\nmaster\r\n:4242\r\n*0\r\n") == 4242
    assert master_offset(b"*5\r\n$5\r\nslave\r\n$9\r\n127.0.0.1\r\n:1\r\n") == NEVER
    assert master_offset(b"-ERR nope\r\n") == NEVER


def test_loading_replicas_are_read_candidates_failed_ones_not() -> None:
    """Redis 7.0 reports a replica "loading" while its gossiped offset is 0 (a cluster with no
    writes yet): replica reads check it themselves; a failed one is left out."""
    def node(port: int, role: str, health: str) -> list[object]:
        return [b"port", port, b"ip", b"10.0.0.1", b"endpoint", b"10.0.0.1",
                b"role", role.encode(), b"replication-offset", 0, b"health", health.encode()]

    reply = [[b"slots", [0, SLOT_COUNT - 1], b"nodes", [
        node(1, "master", "online"), node(2, "replica", "loading"), node(3, "replica", "fail"),
        node(4, "replica", "online")]]]
    m = slot_map_from_shards(reply, "h")
    assert m.replicas == {"10.0.0.1:1": ["10.0.0.1:4"]}
    assert m.unfailed_replicas == {"10.0.0.1:1": ["10.0.0.1:2", "10.0.0.1:4"]}
