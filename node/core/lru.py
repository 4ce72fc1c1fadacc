"""The per-key access clock behind OBJECT IDLETIME and OBJECT FREQ (pure).

Each database keeps ``access`` (key -> 24-bit field), written on every key lookup and store,
as Redis writes ``robj.lru``. Under an LRU (or no-eviction) policy the field is the LRU clock:
unix seconds, the clock the cron refreshes (Redis' ``server.lruclock`` has the same one-second
resolution). Under an LFU policy it is Redis' LFU word: the access time in minutes (16 bits)
and a logarithmic counter (8 bits) that grows with probability ``1 / ((c - 5) *
lfu-log-factor + 1)`` and decays by one per ``lfu-decay-time`` minutes without access.
"""

from __future__ import annotations

import random

LRU_CLOCK_MAX = (1 << 24) - 1  # the lru field is 24 bits wide
LFU_INIT_VAL = 5  # a new key's counter, so that it is not evicted at once
LFU_COUNTER_MAX = 255


def lru_clock(unix_s: float) -> int:
    """The LRU clock: seconds, wrapping at 24 bits."""
    return int(unix_s) & LRU_CLOCK_MAX


def idle_s(field: int, clock: int) -> int:
    """estimateObjectIdleTime, in seconds: the clock wraps every 194 days."""
    if clock >= field:
        return clock - field
    return clock + (LRU_CLOCK_MAX - field)


def _minutes(unix_s: float) -> int:
    return (int(unix_s) // 60) & 65535


def lfu_counter(field: int, unix_s: float, decay_time_min: int) -> int:
    """LFUDecrAndReturn: the counter after the decay periods elapsed since the last access."""
    ldt, counter = field >> 8, field & 255
    now = _minutes(unix_s)
    elapsed = now - ldt if now >= ldt else 65535 - ldt + now
    periods = elapsed // decay_time_min if decay_time_min else 0
    return max(counter - periods, 0)


def lru_idle_since(clock: int, idle_s: int) -> int:
    """The field of a key last accessed ``idle_s`` seconds ago (wrapping as Redis does)."""
    at = clock - idle_s
    return at + LRU_CLOCK_MAX if at < 0 else at


def lfu_with_counter(unix_s: float, counter: int) -> int:
    return _minutes(unix_s) << 8 | counter


def lfu_new(unix_s: float) -> int:
    return lfu_with_counter(unix_s, LFU_INIT_VAL)


def lfu_touch(field: int | None, unix_s: float, log_factor: int, decay_time_min: int,
              rng: random.Random) -> int:
    """updateLFU: decay, then the logarithmic increment; a key without a field starts anew."""
    if field is None:
        return lfu_new(unix_s)
    counter = lfu_counter(field, unix_s, decay_time_min)
    if counter < LFU_COUNTER_MAX:
        base = max(counter - LFU_INIT_VAL, 0)
        if rng.random() < 1.0 / (base * log_factor + 1):
            counter += 1
    return _minutes(unix_s) << 8 | counter
