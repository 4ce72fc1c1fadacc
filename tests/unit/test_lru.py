"""node/core/lru.py: the LRU clock and Redis' LFU counter."""

from __future__ import annotations

import random

from slotgate.node.core import lru


def test_idle_seconds_wrap_with_the_24_bit_clock() -> None:
    assert lru.idle_s(100, 130) == 30
    assert lru.idle_s(lru.LRU_CLOCK_MAX - 5, 10) == 15
    assert lru.lru_clock(2**24 + 7.9) == 7


def test_lfu_counter_starts_at_five_and_decays_per_period() -> None:
    t = 1_000_000 * 60.0
    field = lru.lfu_new(t)
    assert lru.lfu_counter(field, t, 1) == 5
    assert lru.lfu_counter(field, t + 3 * 60, 1) == 2
    assert lru.lfu_counter(field, t + 3 * 60, 2) == 4
    assert lru.lfu_counter(field, t + 100 * 60, 1) == 0
    assert lru.lfu_counter(field, t + 100 * 60, 0) == 5  # lfu-decay-time 0: never decays


def test_lfu_increment_is_logarithmic() -> None:
    rng = random.Random(7)
    t = 60.0 * 5000
    field = lru.lfu_touch(None, t, 10, 1, rng)
    for _ in range(10):
        field = lru.lfu_touch(field, t, 0, 1, rng)
    assert field & 255 == 15  # factor 0: every access counts
    for _ in range(100_000):
        field = lru.lfu_touch(field, t, 10, 1, rng)
    assert 100 < field & 255 < 200  # Redis' table for factor 10: 100K hits give about 142
    assert field >> 8 == 5000 & 65535
