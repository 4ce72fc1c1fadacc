"""Key -> hash slot, as Redis Cluster computes it.

slot = CRC16-XMODEM(key) & 16383, where only the hash tag is hashed when the key has one:
the bytes between the first ``{`` and the first ``}`` after it, if that span is non-empty.
``binascii.crc_hqx(data, 0)`` is exactly CRC16-XMODEM (poly 0x1021, init 0), in C.
"""

from __future__ import annotations

from binascii import crc_hqx
from typing import Final

from mypy_extensions import i64

from slotgate.build import BUILD

# Final: the compiled build uses the values as constants (no module lookup per key).
SLOT_COUNT: Final = 16384
SLOT_MASK: Final = 16383
assert SLOT_COUNT == SLOT_MASK + 1
# Compiled (mypyc), a loop over the key's bytes costs ~15 ns for a short key where the call to
# binascii costs ~100 (its argument parsing and buffer protocol, per key); interpreted, the
# loop is many times slower than binascii's, so each build takes its own way.
COMPILED: Final = BUILD.compiled and __name__ in BUILD.modules


def _crc_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
        table.append(crc & 0xFFFF)
    return table


# The CRC16-XMODEM table's high and low bytes: indexing bytes makes no int objects.
_CRC_HI: Final = bytes(v >> 8 for v in _crc_table())
_CRC_LO: Final = bytes(v & 0xFF for v in _crc_table())


def key_slot(key: bytes) -> int:
    """Return the hash slot (0..16383) of ``key``."""
    if COMPILED:
        return slot_by_loop(key)
    s = key.find(b"{")
    if s != -1:
        e = key.find(b"}", s + 1)
        # "{}" (empty tag) and an unclosed "{" both hash the whole key.
        if e > s + 1:
            key = key[s + 1 : e]
    return crc_hqx(key, 0) & SLOT_MASK


def slot_by_loop(key: bytes) -> int:
    """``key_slot`` in one loop over the key (the compiled build's way): the CRC runs while
    looking for ``{``; at the first one, the tag is hashed instead if it is non-empty."""
    n: i64 = len(key)
    crc: i64 = 0
    hi = _CRC_HI
    lo = _CRC_LO
    j: i64 = 0
    while j < n:
        c: i64 = key[j]
        if c == 123:  # "{"
            e = j + 1
            while e < n and key[e] != 125:  # "}"
                e += 1
            if e < n and e > j + 1:
                crc = 0
                j += 1
                n = e
            # else: "{}" or no "}": the whole key, the CRC goes on from here
            while j < n:
                i = (crc >> 8) ^ key[j]
                crc = (((crc & 0xFF) ^ hi[i]) << 8) | lo[i]
                j += 1
            break
        i = (crc >> 8) ^ c
        crc = (((crc & 0xFF) ^ hi[i]) << 8) | lo[i]
        j += 1
    return int(crc & SLOT_MASK)
