"""The RDB CRC-64 (node/persistence/rdb.py): Redis' test vector, and the zero-block skip equal
to the byte-by-byte table walk whatever the mix of zero runs and other bytes."""

from __future__ import annotations

import random

import pytest

from slotgate.node.persistence import rdb


def test_redis_test_vector() -> None:
    assert rdb.crc64(b"123456789") == 0xE9C6D914C4B8D9CA


@pytest.mark.parametrize("block", [8, 16, 64])
def test_zero_blocks_skipped_give_the_same_crc(monkeypatch: pytest.MonkeyPatch,
                                               block: int) -> None:
    monkeypatch.setattr(rdb, "ZERO_BLOCK", block)
    rng = random.Random(block)
    for _ in range(200):
        parts = [bytes(rng.randrange(5 * block)) if rng.random() < 0.5
                 else rng.randbytes(rng.randrange(3 * block)) for _ in range(rng.randrange(1, 12))]
        data = b"".join(parts)
        start = rng.getrandbits(64) if rng.random() < 0.3 else 0
        want = rdb._crc64_bytes(data, start)
        assert rdb.crc64(data, start) == want
        assert rdb.crc64(memoryview(data), start) == want
