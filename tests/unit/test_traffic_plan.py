"""`slotgate cluster rebalance --by-traffic`'s plan (pure): slots weighed by the requests the
proxies counted per slot, moved until every master carries its share of the traffic."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from slotgate.protocol.slots import SLOT_COUNT
from slotgate.proxy.ops.metrics import parse_slots_json, slots_json
from slotgate.proxy.ops.reshard_plan import (
    Move,
    _direct,
    plan_by_traffic,
    traffic_loads,
    traffic_unbalanced,
)

THREE = {"a": list(range(0, 5461)), "b": list(range(5461, 10923)), "c": list(range(10923, 16384))}
EQUAL = dict.fromkeys(THREE, 1.0)


def apply(slots: Mapping[str, Sequence[int]], moves: Sequence[Move]) -> dict[str, list[int]]:
    out = {m: list(s) for m, s in slots.items()}
    for mv in moves:
        out[mv.source].remove(mv.slot)  # it must be the source's
        out[mv.target].append(mv.slot)
    return out


def spread(loads: Mapping[str, int], weights: Mapping[str, float]) -> float:
    """The largest relative distance of a master's load from its weighted share."""
    total, total_w = sum(loads.values()), sum(weights.values())
    return max(abs(loads[m] - total * weights[m] / total_w) / (total * weights[m] / total_w)
               for m in weights)


def test_even_traffic_moves_nothing() -> None:
    traffic = [3] * SLOT_COUNT
    loads = traffic_loads(THREE, traffic, list(THREE))
    assert not traffic_unbalanced(loads, EQUAL, 2.0)
    assert plan_by_traffic(THREE, traffic, EQUAL, 2.0) == []
    assert plan_by_traffic(THREE, [0] * SLOT_COUNT, EQUAL, 2.0) == []  # nothing counted


def test_a_hot_master_gives_slots_to_the_others() -> None:
    traffic = [1] * SLOT_COUNT
    for s in range(0, 2000):  # a's first 2000 slots get ten times the requests
        traffic[s] = 10
    loads = traffic_loads(THREE, traffic, list(THREE))
    assert traffic_unbalanced(loads, EQUAL, 5.0) and spread(loads, EQUAL) > 0.5
    moves = plan_by_traffic(THREE, traffic, EQUAL, 5.0)
    assert moves and {m.source for m in moves} == {"a"} and "a" not in {m.target for m in moves}
    assert len({m.slot for m in moves}) == len(moves)
    after = traffic_loads(apply(THREE, moves), traffic, list(THREE))
    assert spread(after, EQUAL) <= 0.05, after
    # the busy slots go first: about the 1,143 of them the 5 % allows, not 10x as many cold ones
    assert all(traffic[m.slot] == 10 for m in moves) and len(moves) <= 1150


def test_weights_and_cold_slots() -> None:
    traffic = [0] * SLOT_COUNT
    for s in range(0, 16384, 4):
        traffic[s] = 5
    weights = {"a": 1.0, "b": 1.0, "c": 2.0}
    moves = plan_by_traffic(THREE, traffic, weights, 2.0)
    assert all(traffic[m.slot] > 0 for m in moves)  # slots nobody asked for stay
    after = traffic_loads(apply(THREE, moves), traffic, list(THREE))
    assert spread(after, weights) <= 0.02, after
    assert after["c"] > after["a"] * 1.9


def test_one_slot_hotter_than_a_share_is_not_bounced_around() -> None:
    traffic = [1] * SLOT_COUNT
    traffic[100] = 100_000  # more than a third of everything, alone
    moves = plan_by_traffic(THREE, traffic, EQUAL, 2.0)
    assert 100 not in {m.slot for m in moves}
    before = traffic_loads(THREE, traffic, list(THREE))
    after = traffic_loads(apply(THREE, moves), traffic, list(THREE))
    assert after["a"] <= before["a"] and spread(after, EQUAL) <= spread(before, EQUAL)


def test_random_traffic_always_improves_and_stays_consistent() -> None:
    rng = random.Random(7)
    for _ in range(20):
        traffic = [int(rng.paretovariate(1.2)) if rng.random() < 0.3 else 0
                   for _ in range(SLOT_COUNT)]
        weights = {m: rng.choice([1.0, 1.0, 2.0]) for m in THREE}
        before = traffic_loads(THREE, traffic, list(THREE))
        moves = plan_by_traffic(THREE, traffic, weights, 3.0)
        after = traffic_loads(apply(THREE, moves), traffic, list(THREE))
        assert len({m.slot for m in moves}) == len(moves)
        assert spread(after, weights) <= spread(before, weights) + 1e-9


def test_a_slot_moved_twice_moves_once() -> None:
    moves = [Move(1, "a", "b"), Move(2, "a", "c"), Move(1, "b", "c"), Move(3, "b", "a"),
             Move(3, "a", "b")]
    assert _direct(moves) == [Move(1, "a", "c"), Move(2, "a", "c")]


def test_slots_json_round_trip_and_bad_bodies() -> None:
    counts = [0] * SLOT_COUNT
    counts[0], counts[16383] = 5, 7
    body = slots_json(counts)
    assert body == b'{"slot_requests":{"0":5,"16383":7}}\n'
    assert parse_slots_json(body) == counts
    for bad in (b"[]", b'{"x":1}', b'{"slot_requests":{"16384":1}}', b"nope",
                b'{"slot_requests":[1]}'):
        try:
            parse_slots_json(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} accepted")
