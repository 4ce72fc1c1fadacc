"""The Lua libraries Redis 7.0 loads beside the standard ones (cjson, cmsgpack, bit, struct),
as Lua sources run by the sandbox (each gets the sandbox's helpers and returns its table),
and the float conversions they share (Python's struct does what the C casts do, NaN bits
included, which Lua arithmetic cannot see)."""

from __future__ import annotations

import math
import struct

from slotgate.node.scripting.lib_bit import BIT_LUA
from slotgate.node.scripting.lib_cjson import CJSON_LUA
from slotgate.node.scripting.lib_cmsgpack import CMSGPACK_LUA
from slotgate.node.scripting.lib_struct import STRUCT_LUA

SOURCES: dict[bytes, bytes] = {
    b"bit": BIT_LUA.encode(),
    b"cjson": CJSON_LUA.encode(),
    b"cmsgpack": CMSGPACK_LUA.encode(),
    b"struct": STRUCT_LUA.encode(),
}


_FORMATS = {4: ">f", 8: ">d"}


def float_bytes(x: float, size: int) -> bytes:
    """``x`` as a big-endian IEEE float (``size`` 4) or double (8), as C's cast stores it: a
    double beyond the float range becomes an infinity, a NaN keeps its sign and payload."""
    try:
        return struct.pack(_FORMATS[size], x)
    except OverflowError:  # (float)x rounds to an infinity in C
        return struct.pack(">f", math.copysign(math.inf, x))


def bytes_float(data: bytes, size: int) -> float:
    """The number in ``size`` big-endian bytes (an IEEE float or double), widened as C does."""
    return float(struct.unpack(_FORMATS[size], data)[0])


RAND48_START = 0x1234ABCD330E  # rand48's state before any seed (Redis never seeds at start)
_RAND48_MASK = (1 << 48) - 1


class Rand48:
    """redisLrand48/redisSrand48 for math.random: one state per server, shared by every
    script and function and kept across SCRIPT FLUSH, as Redis' C global is."""

    def __init__(self) -> None:
        self.state = RAND48_START

    def lrand48(self) -> int:
        self.state = (0x5DEECE66D * self.state + 0xB) & _RAND48_MASK
        return self.state >> 17

    def srand48(self, seed: float) -> None:
        self.state = ((int(seed) & 0xFFFFFFFF) << 16) | 0x330E
