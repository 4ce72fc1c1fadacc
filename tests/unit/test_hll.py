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


def test_pat_len_hashes_as_murmur64a() -> None:
    """The int-read blocks of short elements give murmur64a's hash, at every length."""
    rng = random.Random(8)
    for n in range(100):
        for _ in range(20):
            ele = rng.randbytes(n)
            h = hll.murmur64a(ele)
            rest = (h >> hll.P) | (1 << hll.Q)
            assert hll.pat_len(ele) == (h & (hll.REGISTERS - 1), (rest & -rest).bit_length())


def test_dense_add_equals_add_and_copies_only_when_a_register_grows() -> None:
    rng = random.Random(7)
    value = b"HYLL\x00" + bytes(hll.DENSE_SIZE - 5)  # an empty dense HLL, cache valid
    mirror: bytearray | None = None
    for i in range(3000):
        # lengths 0..99: every tail length, short and long elements
        elems = [rng.randbytes(rng.randrange(100)) for _ in range(rng.randrange(1, 5))]
        want = bytearray(value)
        grown = sum(hll.add(want, e, 3000) for e in elems)
        if grown:
            want[15] |= 0x80
        # half the time with the mirror the last call left (PFADD's), half without
        given = mirror if i % 2 else None
        got, got_grown, mirror = hll.dense_add(value, elems, given)
        assert (got, got_grown) == (bytes(want), grown)
        if not grown:
            assert got is value and mirror is given
        else:
            assert mirror == got and (given is None or mirror is given)
        value = got
    value = hll.dense_add(value, [b"x"])[0]
    assert hll.dense_add(value, [b"x"]) == (value, 0, None)  # an element met again: no copy
    assert hll.dense_add(value, [b"x"])[0] is value


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


def _opcode_starts(buf: bytearray) -> dict[int, int]:
    """position -> first register of every opcode of a sparse HLL, walked from the header."""
    starts: dict[int, int] = {}
    p, first = hll.HDR_SIZE, 0
    while p < len(buf):
        starts[p] = first
        b = buf[p]
        if not b & 0xC0:
            span, oplen = (b & 0x3F) + 1, 1
        elif b & 0x80:
            span, oplen = (b & 3) + 1, 1
        else:
            span, oplen = hll._xzero_len(buf, p, len(buf)), 2
        p += oplen
        first += span
    return starts


def test_the_walk_marks_change_nothing_and_stay_true() -> None:
    """PFADD's sparse sets from the marks give the bytes of the walk from the header, and
    every mark names a real opcode start with its first register, all the way to dense."""
    rng = random.Random(6)
    for trial, max_bytes in enumerate((300, 3000, 3000, 6000)):
        plain, marked = bytearray(hll.EMPTY_SPARSE), bytearray(hll.EMPTY_SPARSE)
        marks = hll.SparseMarks()
        step = 0
        while marked[4] == hll.SPARSE:
            elems = [rng.randbytes(rng.randrange(1, 12)) for _ in range(rng.choice([1, 1, 4]))]
            assert hll.add_many(plain, elems, max_bytes) == hll.add_many(
                marked, elems, max_bytes, marks, bytes(marked) if step % 2 else None)
            assert plain == marked, (trial, step)
            if step % 97 == 0 and marked[4] == hll.SPARSE:
                starts = _opcode_starts(marked)
                assert marks.pos == sorted(set(marks.pos))
                assert all(starts.get(p) == f for p, f in zip(marks.pos, marks.first, strict=True))
            step += 1
        assert len(marks.pos) > 20 or max_bytes == 300  # the marks were kept, not just reset
