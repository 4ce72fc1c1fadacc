from __future__ import annotations

import random

import pytest

from slotgate.protocol import slots
from slotgate.protocol.slots import SLOT_COUNT, key_slot
from tests.support import ManagedProcess


@pytest.mark.parametrize(
    ("key", "slot"),
    [
        (b"123456789", 0x31C3 & 16383),
        (b"foo", 12182),
        (b"bar", 5061),
        (b"hello", 866),
        (b"{user1000}.following", 3443),
        (b"{user1000}.followers", 3443),
        (b"foo{}{bar}", 8363),
        (b"foo{{bar}}zap", 4015),
        (b"foo{bar}{zap}", key_slot(b"bar")),
        (b"{", key_slot(b"{")),
        (b"", 0),
    ],
)
def test_spec_vectors(key: bytes, slot: int) -> None:
    assert key_slot(key) == slot


def test_crc16_check_value() -> None:
    from binascii import crc_hqx

    assert crc_hqx(b"123456789", 0) == 0x31C3


def test_agrees_with_real_cluster_keyslot(redis_cluster_enabled: ManagedProcess) -> None:
    rng = random.Random(1234)
    alphabet = b"{}ab"
    keys: list[bytes] = []
    for i in range(10_000):
        n = rng.randrange(0, 24)
        if i % 2:
            keys.append(bytes(rng.randrange(256) for _ in range(n)))
        else:  # dense in braces, to exercise the hash-tag rule
            keys.append(bytes(rng.choice(alphabet) for _ in range(n)))
    client = redis_cluster_enabled.client()
    pipe = client.pipeline(transaction=False)
    for k in keys:
        pipe.execute_command("CLUSTER", "KEYSLOT", k)
    answers = pipe.execute()
    mismatches = [(k, a, key_slot(k)) for k, a in zip(keys, answers, strict=True) if a != key_slot(k)]
    assert mismatches == []
    assert all(0 <= a < SLOT_COUNT for a in answers)


def test_the_compiled_builds_loop_agrees_with_binascii() -> None:
    """``slot_by_loop`` (the compiled build's key_slot) against CRC16 by binascii and the
    hash-tag rule, on keys dense in braces and on random bytes (either build runs this)."""
    from binascii import crc_hqx

    def by_binascii(key: bytes) -> int:
        s = key.find(b"{")
        if s != -1:
            e = key.find(b"}", s + 1)
            if e > s + 1:
                key = key[s + 1 : e]
        return crc_hqx(key, 0) & (SLOT_COUNT - 1)

    rng = random.Random(5)
    keys = [b"", b"{", b"}", b"{}", b"{}{a}", b"a{b}c", b"{a", b"a}", b"x" * 5000]
    for i in range(20_000):
        n = rng.randrange(0, 30)
        alphabet = b"{}ab" if i % 2 else bytes(range(256))
        keys.append(bytes(rng.choice(alphabet) for _ in range(n)))
    assert [(k, slots.slot_by_loop(k)) for k in keys] == [(k, by_binascii(k)) for k in keys]
    assert [key_slot(k) for k in keys] == [by_binascii(k) for k in keys]
