"""Which slots go where: the pure planning half of ``slotgate cluster reshard`` and
``rebalance`` (no sockets; the executor in ``reshard.py`` carries a plan out).

Both follow redis-cli --cluster's arithmetic, so an operator gets the same moves:
  * reshard: sources give slots in proportion to what they hold, the largest source first and
    rounded up, the others rounded down; each source gives its lowest slots first;
  * rebalance: every master's expected share is ``16384 * weight / total_weight`` (rounded
    down); rounding leftovers are taken from the receivers; the most starved master receives
    from the most loaded one until both are even, and so on.
"""

from __future__ import annotations

import math
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
