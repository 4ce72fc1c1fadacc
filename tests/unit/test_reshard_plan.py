"""The slot-moving plans of `slotgate cluster reshard/rebalance` (pure functions)."""

from __future__ import annotations

import io
from collections import Counter

import pytest

from slotgate.proxy.ops.reshard import Progress
from slotgate.proxy.ops.reshard_plan import (
    PlanError,
    needs_rebalance,
    parse_slot_tokens,
    parse_weights,
    plan_rebalance,
    plan_reshard,
)

THREE = {"a": list(range(0, 5461)), "b": list(range(5461, 10923)), "c": list(range(10923, 16384))}


def test_slot_tokens() -> None:
    assert parse_slot_tokens(["0-2", "7", "[9->-abc]", "[10-<-abc]"]) == [0, 1, 2, 7]


def test_reshard_takes_from_sources_in_proportion() -> None:
    moves = plan_reshard(THREE, ["a", "b"], "c", 300)
    assert len(moves) == 300
    per = Counter(m.source for m in moves)
    assert per == {"b": 151, "a": 149}  # the larger source rounded up, as redis-cli does
    assert all(m.target == "c" for m in moves)
    assert [m.slot for m in moves if m.source == "b"] == list(range(5461, 5612))  # lowest first
    assert len({m.slot for m in moves}) == 300


def test_reshard_refuses_what_cannot_be() -> None:
    with pytest.raises(PlanError):
        plan_reshard(THREE, ["a"], "c", 6000)
    with pytest.raises(PlanError):
        plan_reshard(THREE, ["a"], "zz", 1)
    assert plan_reshard(THREE, ["a", "c"], "c", 5) == plan_reshard(THREE, ["a"], "c", 5)


def test_rebalance_evens_out_and_counts_add_up() -> None:
    slots = {"a": list(range(0, 10000)), "b": list(range(10000, 16384)), "d": []}
    w = parse_weights([], list(slots))
    assert needs_rebalance(slots, w, 2.0)
    moves = plan_rebalance(slots, w)
    after = {n: len(s) for n, s in slots.items()}
    for m in moves:
        after[m.source] -= 1
        after[m.target] += 1
    assert sum(after.values()) == 16384
    assert max(after.values()) - min(after.values()) <= 1
    assert len({m.slot for m in moves}) == len(moves)
    even = {"a": list(range(8192)), "b": list(range(8192, 16384))}
    assert not needs_rebalance(even, parse_weights([], list(even)), 2.0)
    assert plan_rebalance(even, parse_weights([], list(even))) == []


def test_rebalance_weight_zero_empties_a_master() -> None:
    w = parse_weights(["a=0"], list(THREE))
    moves = plan_rebalance(THREE, w)
    assert Counter(m.source for m in moves) == {"a": 5461}
    with pytest.raises(PlanError):
        parse_weights(["q=1"], list(THREE))
    with pytest.raises(PlanError):
        parse_weights(["a"], list(THREE))


def test_progress_lines_without_a_terminal() -> None:
    now = [0.0]
    out = io.StringIO()
    p = Progress("reshard", 10, out, every_slots=5, clock=lambda: now[0])
    for _ in range(10):
        now[0] += 0.5
        p.advance(3)
    lines = out.getvalue().splitlines()
    assert lines == ["reshard: 5/10 slots, 15 keys moved, 2.0 slots/s, ETA 2s",
                     "reshard: 10/10 slots, 30 keys moved, 2.0 slots/s, ETA 0s"]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_draws_a_bar_on_a_terminal() -> None:
    out = _Terminal()
    p = Progress("rebalance", 3, out, every_slots=100)
    for _ in range(3):
        p.advance(2)
    p.done()
    text = out.getvalue()
    final = text.rstrip("\n").rsplit("\r", 1)[-1]  # the bar as last redrawn
    assert final.startswith("rebalance: 100%|") and "3/3" in final, final
    assert "slots/s" in final and "6 keys moved" in final, final
    assert text.endswith("\n") and "\n" not in text[:-1]  # one line, rewritten in place


def test_progress_in_keys_for_import() -> None:
    now = [0.0]
    out = io.StringIO()
    p = Progress("import", 1000, out, every_slots=400, clock=lambda: now[0], unit="keys")
    for _ in range(10):  # batches of 100 keys, crossing 400 and 800 mid-batch or on it
        now[0] += 0.25
        p.advance(100, slots=0)
    assert out.getvalue().splitlines() == [
        "import: 400/1000 keys moved, 400.0 keys/s, ETA 2s",
        "import: 800/1000 keys moved, 400.0 keys/s, ETA 0s",
        "import: 1000/1000 keys moved, 400.0 keys/s, ETA 0s"]
