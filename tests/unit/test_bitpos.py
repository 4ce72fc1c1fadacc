"""BITPOS' bit search (node/types/bitmaps.py) against a bit-by-bit scan, with blocks of a
few bytes so that every path between the partial bytes, the block skips and the byte found is
taken (the replies themselves are checked against redis-server in test_diff_bitmaps.py)."""

from __future__ import annotations

import random

import pytest

from slotgate.node.types import bitmaps


def _scan(v: bytes, bit: int, sbit: int, ebit: int) -> int:
    for i in range(sbit, ebit + 1):
        if (v[i >> 3] >> (7 - (i & 7))) & 1 == bit:
            return i
    return -1


@pytest.mark.parametrize("block", [1, 3, 1 << 20])
def test_find_bit_is_the_first_matching_bit(monkeypatch: pytest.MonkeyPatch, block: int) -> None:
    monkeypatch.setattr(bitmaps, "_BLOCK", block)
    rng = random.Random(block)
    for _ in range(5000):
        n = rng.randrange(1, 14)
        v = bytes(rng.choice([0, 0, 255, 255, rng.randrange(256)]) for _ in range(n))
        sbit = rng.randrange(n * 8)
        ebit = rng.randrange(sbit, n * 8)
        for bit in (0, 1):
            assert bitmaps._find_bit(v, bit, sbit, ebit) == _scan(v, bit, sbit, ebit), (v, bit)
