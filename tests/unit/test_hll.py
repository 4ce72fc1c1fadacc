"""node/types/hll.py in-process: the packing, the SWAR merge, the inlined PFADD loop and the
PFMERGE walk hint each against the plain form they stand for (the bytes themselves are checked
against redis-server in tests/node/test_types_hll.py)."""

from __future__ import annotations

import random

from slotgate.node.types import hll


def _random_raw(rng: random.Random, top: int = 64) -> bytearray:
    return bytearray(rng.randrange(top) for _ in range(hll.REGISTERS))


def test_dense_packing_round_trips_and_matches_the_register_macros() -> None:
    rng = random.Random(1)
    raw = _random_raw(rng)
    dense = bytearray(hll.DENSE_SIZE)
    for i, r in enumerate(raw):
        hll.dense_set(dense, i, r)
    assert bytes(dense[hll.HDR_SIZE:]) == bytes(hll.raw_to_dense(raw))
    assert hll.dense_to_raw(dense) == raw
    assert [hll.dense_get(dense, i) for i in range(hll.REGISTERS)] == list(raw)


def test_raw_max_is_the_bytewise_maximum() -> None:
    rng = random.Random(2)
    a, b = _random_raw(rng), _random_raw(rng)
    a[0], b[0], a[1], b[1] = 0, 63, 63, 0  # both directions at the extremes
    got = hll.raw_max(int.from_bytes(a, "little"), int.from_bytes(b, "little"))
    assert got.to_bytes(hll.REGISTERS, "little") == bytes(map(max, a, b))


def test_add_many_equals_add_one_by_one_across_the_promotion() -> None:
    rng = random.Random(3)
    elems = [rng.randbytes(rng.randrange(40)) for _ in range(6000)]
    one = bytearray(hll.EMPTY_SPARSE)
    grown = sum(hll.add(one, e, 3000) for e in elems)
    many = bytearray(hll.EMPTY_SPARSE)
    assert hll.add_many(many, elems, 3000) == grown
    assert many == one and one[4] == hll.DENSE


def test_the_walk_hint_changes_nothing() -> None:
    """PFMERGE's ascending sparse sets give the same bytes with and without the hint."""
    rng = random.Random(4)
    for trial in range(40):
        base = bytearray(hll.EMPTY_SPARSE)
        hll.add_many(base, [rng.randbytes(8) for _ in range(rng.randrange(1, 900))], 3000)
        merged = bytearray(hll.sparse_to_raw(base) or b"")
        for _ in range(rng.randrange(900)):
            i, n = hll.pat_len(rng.randbytes(8))
            merged[i] = max(merged[i], n)
        max_bytes = rng.choice([400, 3000, 20000])
        plain, hinted = bytearray(base), bytearray(base)
        hint: list[tuple[int, int]] = []
        for i, v in enumerate(merged):
            if v and plain[4] == hll.SPARSE:
                hll.sparse_set(plain, i, v, max_bytes)
                hll.sparse_set(hinted, i, v, max_bytes, hint)
                assert plain == hinted, (trial, i)


def test_estimate_of_an_empty_hll_is_zero_and_overflow_is_two_to_the_63() -> None:
    assert hll.count(hll.EMPTY_SPARSE) == 0
    hist = [0] * 64
    hist[63] = hll.REGISTERS  # every register beyond what the estimator counts: z = 0
    assert hll.estimate(hist) == 1 << 63
