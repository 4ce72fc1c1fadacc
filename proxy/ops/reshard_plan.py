"""Which slots go where: the pure planning half of ``slotgate cluster reshard`` and
``rebalance`` (no sockets; the executor in ``reshard.py`` carries a plan out).

Both follow redis-cli --cluster's arithmetic, so an operator gets the same moves:
  * reshard: sources give slots in proportion to what they hold, the largest source first and
    rounded up, the others rounded down; each source gives its lowest slots first;
  * rebalance: every master's expected share is ``16384 * weight / total_weight`` (rounded
    down); rounding leftovers are taken from the receivers; the most starved master receives
    from the most loaded one until both are even, and so on.

``plan_by_traffic`` (``rebalance --by-traffic``, no redis-cli equivalent) weighs each slot by
the requests the proxies routed to it instead: a master's load is the sum of its slots'
counts, its expected load ``total * weight / total_weight``. Greedy, one slot at a time: the
most loaded master (over its expected load) gives the most starved one the busiest slot that
does not overshoot the smaller of the two gaps (else the quietest slot, when it still narrows
them), until every master is within the threshold or no slot helps. Slots nobody asked for
never move: they change no load.
"""

from __future__ import annotations

import math
from bisect import bisect_right, insort
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from slotgate.protocol.slots import SLOT_COUNT


@dataclass(frozen=True)
class Move:
    """One slot from one master to another (node ids)."""

    slot: int
    source: str
    target: str


class PlanError(Exception):
    """The request cannot be planned; ``str()`` is the operator's message."""


def parse_slot_tokens(tokens: Sequence[str]) -> list[int]:
    """CLUSTER NODES slot tokens ("0-5460", "7", "[93->-id]") -> owned slots (open ones left out)."""
    out: list[int] = []
    for tok in tokens:
        if tok.startswith("["):
            continue
        lo, _, hi = tok.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def plan_reshard(slots_by_master: Mapping[str, Sequence[int]], sources: Sequence[str],
                 target: str, count: int) -> list[Move]:
    """``count`` slots from ``sources`` (node ids; the target is never a source) to ``target``."""
    if target not in slots_by_master:
        raise PlanError(f"the target {target} is not a master")
    srcs = [s for s in sources if s != target]
    for s in srcs:
        if s not in slots_by_master:
            raise PlanError(f"the source {s} is not a master")
    held = sum(len(slots_by_master[s]) for s in srcs)
    if count < 1:
        raise PlanError("the number of slots must be at least 1")
    if count > held:
        raise PlanError(f"the sources hold {held} slots, fewer than the {count} asked for")
    ordered = sorted(srcs, key=lambda s: -len(slots_by_master[s]))
    moves: list[Move] = []
    for i, s in enumerate(ordered):
        share = count * len(slots_by_master[s]) / held
        n = math.ceil(share) if i == 0 else math.floor(share)
        for slot in sorted(slots_by_master[s])[:n]:
            if len(moves) == count:
                break
            moves.append(Move(slot, s, target))
    return moves


def expected_shares(weights: Mapping[str, float]) -> dict[str, int]:
    total = sum(weights.values())
    if total <= 0:
        raise PlanError("the weights add up to 0: nothing could hold the slots")
    return {n: int(SLOT_COUNT / total * w) for n, w in weights.items()}


def needs_rebalance(slots_by_master: Mapping[str, Sequence[int]], weights: Mapping[str, float],
                    threshold_pct: float) -> bool:
    """True when some master is more than ``threshold_pct`` percent off its expected share."""
    expected = expected_shares(weights)
    for n, exp in expected.items():
        have = len(slots_by_master[n])
        if have == 0:
            if exp > 0:
                return True
            continue
        if abs(100 - 100.0 * exp / have) > threshold_pct:
            return True
    return False


def plan_rebalance(slots_by_master: Mapping[str, Sequence[int]],
                   weights: Mapping[str, float]) -> list[Move]:
    """Moves that bring every master (a key of ``weights``) to its weighted share."""
    expected = expected_shares(weights)
    balance = {n: len(slots_by_master[n]) - expected[n] for n in weights}
    extra = sum(balance.values())  # >= 0: the expected shares are rounded down
    while extra > 0:
        progressed = False
        for n in sorted(balance):
            if extra > 0 and balance[n] < 0:
                balance[n] -= 1
                extra -= 1
                progressed = True
        if not progressed:  # nobody receives: the leftovers stay where they are
            break
    order = sorted(balance, key=lambda n: (balance[n], n))
    remaining = {n: sorted(slots_by_master[n]) for n in weights}
    moves: list[Move] = []
    lo, hi = 0, len(order) - 1
    while lo < hi:
        dst, src = order[lo], order[hi]
        count = min(-balance[dst], balance[src])
        if count > 0:
            give, remaining[src] = remaining[src][:count], remaining[src][count:]
            moves.extend(Move(s, src, dst) for s in give)
            balance[dst] += count
            balance[src] -= count
        if balance[dst] >= 0:
            lo += 1
        if balance[src] <= 0:
            hi -= 1
    return moves


def parse_weights(specs: Sequence[str], ids: Sequence[str]) -> dict[str, float]:
    """``--weight ID_PREFIX=W`` words -> weight per master id (1.0 where not given)."""
    weights = dict.fromkeys(ids, 1.0)
    for spec in specs:
        prefix, sep, value = spec.partition("=")
        try:
            w = float(value)
        except ValueError:
            w = -1.0
        if not sep or w < 0:
            raise PlanError(f"bad weight {spec!r}: expected NODE_ID=WEIGHT")
        matches = [i for i in ids if i.startswith(prefix)]
        if len(matches) != 1:
            raise PlanError(f"weight {spec!r}: {prefix!r} matches {len(matches)} masters")
        weights[matches[0]] = w
    return weights


def traffic_loads(slots_by_master: Mapping[str, Sequence[int]], traffic: Sequence[int],
                  masters: Sequence[str]) -> dict[str, int]:
    """Requests per master: the sum of its slots' counts."""
    return {m: sum(traffic[s] for s in slots_by_master[m]) for m in masters}


def _expected_loads(loads: Mapping[str, int], weights: Mapping[str, float]) -> dict[str, float]:
    total_w = sum(weights.values())
    if total_w <= 0:
        raise PlanError("the weights add up to 0: nothing could hold the slots")
    total = sum(loads.values())
    return {m: total * w / total_w for m, w in weights.items()}


def _off_by(load: float, expected: float, threshold_pct: float) -> bool:
    if expected <= 0:
        return load > 0
    return abs(load - expected) * 100 > threshold_pct * expected


def traffic_unbalanced(loads: Mapping[str, int], weights: Mapping[str, float],
                       threshold_pct: float) -> bool:
    """True when some master's load is more than ``threshold_pct`` percent off its share."""
    expected = _expected_loads(loads, weights)
    return any(_off_by(loads[m], expected[m], threshold_pct) for m in weights)


def plan_by_traffic(slots_by_master: Mapping[str, Sequence[int]], traffic: Sequence[int],
                    weights: Mapping[str, float], threshold_pct: float) -> list[Move]:
    """Moves that bring every master (a key of ``weights``) near its weighted share of the
    requests counted per slot in ``traffic`` (16384 counts)."""
    loads: dict[str, float] = dict(traffic_loads(slots_by_master, traffic, list(weights)))
    expected = _expected_loads({m: int(v) for m, v in loads.items()}, weights)
    pools = {m: sorted((traffic[s], s) for s in slots_by_master[m] if traffic[s] > 0)
             for m in weights}
    moves: list[Move] = []
    while len(moves) < SLOT_COUNT:
        if not any(_off_by(loads[m], expected[m], threshold_pct) for m in weights):
            break
        dev = {m: loads[m] - expected[m] for m in weights}
        src = max(weights, key=lambda m: (dev[m], m))
        dst = min(weights, key=lambda m: (dev[m], m))
        gap = min(dev[src], -dev[dst])
        pool = pools[src]
        i = bisect_right(pool, (gap, SLOT_COUNT)) - 1  # the busiest slot not above the gap
        if i < 0:
            if not pool or pool[0][0] >= 2 * gap:  # moving it would widen the gaps
                break
            i = 0
        count, slot = pool.pop(i)
        insort(pools[dst], (count, slot))
        loads[src] -= count
        loads[dst] += count
        moves.append(Move(slot, src, dst))
    return _direct(moves)


def _direct(moves: Sequence[Move]) -> list[Move]:
    """A slot moved twice (a -> b, later b -> c) moves once (a -> c); back home, not at all."""
    first: dict[int, Move] = {}
    for mv in moves:
        was = first.get(mv.slot)
        first[mv.slot] = mv if was is None else Move(mv.slot, was.source, mv.target)
    return [mv for mv in first.values() if mv.source != mv.target]
