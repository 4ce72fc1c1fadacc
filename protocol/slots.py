"""Key -> hash slot, as Redis Cluster computes it.

slot = CRC16-XMODEM(key) & 16383, where only the hash tag is hashed when the key has one:
the bytes between the first ``{`` and the first ``}`` after it, if that span is non-empty.
``binascii.crc_hqx(data, 0)`` is exactly CRC16-XMODEM (poly 0x1021, init 0), in C.
"""

from __future__ import annotations

from binascii import crc_hqx
from typing import Final

# Final: the compiled build uses the values as constants (no module lookup per key).
SLOT_COUNT: Final = 16384
SLOT_MASK: Final = 16383
assert SLOT_MASK == SLOT_COUNT - 1


def key_slot(key: bytes) -> int:
    """Return the hash slot (0..16383) of ``key``."""
    if b"{" in key:  # (a containment test costs less than a find call, and most keys have none)
        s = key.find(b"{")
        e = key.find(b"}", s + 1)
        # "{}" (empty tag) and an unclosed "{" both hash the whole key.
        if e > s + 1:
            key = key[s + 1 : e]
    return crc_hqx(key, 0) & SLOT_MASK
