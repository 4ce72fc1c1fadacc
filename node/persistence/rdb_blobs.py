"""The blob formats inside RDB values (pure): listpack, ziplist, zipmap, intset (LZF, both ways,
is lzf.py).

Decoders validate in depth (bounds, back-lengths, declared counts, intset order) and raise
``RdbError(ERR_BAD_FORMAT)`` on anything inconsistent; integers come back as decimal bytes.
Encoders emit exactly what Redis 7.0 writes (listpack integer widths, back-length bytes,
smallest intset width), so our payloads can be compared byte for byte with a real server's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from slotgate.node.persistence import lzf

ERR_FOOTER = "ERR DUMP payload version or checksum are wrong"
ERR_BAD_FORMAT = "ERR Bad data format"


class RdbError(Exception):
    """A payload RESTORE must refuse; ``str(e)`` is the exact Redis error reply text."""


# --- strict integers (Redis string2ll + round trip) ---------------------------------------
_INT_RE = re.compile(rb"-?[1-9][0-9]{0,19}|0")
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def strict_int(s: bytes) -> int | None:
    """The int64 that ``s`` spells canonically (no sign +, no leading zero), else None."""
    if len(s) > 20 or not _INT_RE.fullmatch(s):
        return None
    v = int(s)
    return v if INT64_MIN <= v <= INT64_MAX else None


# --- LZF decompression (lzf.py, compiled) ------------------------------------------------
def lzf_decompress(src: bytes, out_len: int) -> bytes:
    """Decompress ``src``; it must yield exactly ``out_len`` bytes, else RdbError."""
    out = lzf.lzf_decompress(src, out_len)
    if out is None:
        raise RdbError(ERR_BAD_FORMAT)
    return out


# --- listpack -----------------------------------------------------------------------------
_ONE_BYTE = [bytes((i,)) for i in range(256)]


def _lp_backlen(n: int) -> bytes:
    """``lpEncodeBacklen``: 7 bits a byte, most significant first, bit 7 set on all but it."""
    if n <= 127:
        return _ONE_BYTE[n]
    size = 1 if n <= 127 else 2 if n < 16383 else 3 if n < 2097151 else 4 if n < 268435455 else 5
    groups = [(n >> (7 * i)) & 127 for i in range(size - 1, -1, -1)]
    return bytes([groups[0]] + [g | 128 for g in groups[1:]])


def lp_entry(s: bytes) -> bytes:
    v = strict_int(s)
    if v is not None:
        if 0 <= v <= 127:
            enc = bytes((v,))
        elif -4096 <= v <= 4095:
            u = v & 0x1FFF
            enc = bytes((0xC0 | (u >> 8), u & 0xFF))
        else:
            for code, size in ((0xF1, 2), (0xF2, 3), (0xF3, 4), (0xF4, 8)):
                lim = 1 << (size * 8 - 1)
                if -lim <= v < lim:
                    enc = bytes((code,)) + v.to_bytes(size, "little", signed=True)
                    break
    else:
        n = len(s)
        if n < 64:
            enc = bytes((0x80 | n,)) + s
        elif n < 4096:
            enc = bytes((0xE0 | (n >> 8), n & 0xFF)) + s
        else:
            enc = b"\xf0" + n.to_bytes(4, "little") + s
    return enc + _lp_backlen(len(enc))


def listpack_from_entries(entries: list[bytes]) -> bytes:
    body = b"".join(entries)
    total = 6 + len(body) + 1
    return (total.to_bytes(4, "little") + min(len(entries), 65535).to_bytes(2, "little")
            + body + b"\xff")


def listpack_encode(items: Iterable[bytes]) -> bytes:
    return listpack_from_entries([lp_entry(it) for it in items])


_LP_INT = {0xF1: 2, 0xF2: 3, 0xF3: 4, 0xF4: 8}


def listpack_decode(blob: bytes) -> list[bytes]:
    """Every entry of a listpack, integers as decimal bytes; validated in depth."""
    n = len(blob)
    if n < 7 or int.from_bytes(blob[0:4], "little") != n or blob[-1] != 0xFF:
        raise RdbError(ERR_BAD_FORMAT)
    declared = int.from_bytes(blob[4:6], "little")
    out: list[bytes] = []
    p, end = 6, n - 1
    while p < end:
        start = p
        b = blob[p]
        if b < 0x80:
            out.append(b"%d" % b)
            p += 1
        elif b < 0xC0:
            ln = b & 0x3F
            out.append(blob[p + 1:p + 1 + ln])
            p += 1 + ln
        elif b < 0xE0:
            if p + 2 > end:
                raise RdbError(ERR_BAD_FORMAT)
            u = ((b & 0x1F) << 8) | blob[p + 1]
            out.append(b"%d" % (u - 0x2000 if u >= 0x1000 else u))
            p += 2
        elif b < 0xF0:
            if p + 2 > end:
                raise RdbError(ERR_BAD_FORMAT)
            ln = ((b & 0x0F) << 8) | blob[p + 1]
            out.append(blob[p + 2:p + 2 + ln])
            p += 2 + ln
        elif b == 0xF0:
            if p + 5 > end:
                raise RdbError(ERR_BAD_FORMAT)
            ln = int.from_bytes(blob[p + 1:p + 5], "little")
            out.append(blob[p + 5:p + 5 + ln])
            p += 5 + ln
        elif b in _LP_INT:
            size = _LP_INT[b]
            if p + 1 + size > end:
                raise RdbError(ERR_BAD_FORMAT)
            out.append(b"%d" % int.from_bytes(blob[p + 1:p + 1 + size], "little", signed=True))
            p += 1 + size
        else:
            raise RdbError(ERR_BAD_FORMAT)
        if p > end:
            raise RdbError(ERR_BAD_FORMAT)
        back = _lp_backlen(p - start)
        if blob[p:p + len(back)] != back:
            raise RdbError(ERR_BAD_FORMAT)
        p += len(back)
    if p != end or (declared != 65535 and declared != len(out)):
        raise RdbError(ERR_BAD_FORMAT)
    return out


# --- ziplist (legacy) ---------------------------------------------------------------------
_ZL_INT = {0xC0: 2, 0xD0: 4, 0xE0: 8, 0xF0: 3, 0xFE: 1}


def ziplist_decode(blob: bytes) -> list[bytes]:
    n = len(blob)
    if n < 11 or int.from_bytes(blob[0:4], "little") != n or blob[-1] != 0xFF:
        raise RdbError(ERR_BAD_FORMAT)
    declared = int.from_bytes(blob[8:10], "little")
    out: list[bytes] = []
    p, end, prev_len = 10, n - 1, 0
    while p < end:
        start = p
        if blob[p] < 0xFE:
            plen, p = blob[p], p + 1
        elif blob[p] == 0xFE and p + 5 <= end:
            plen, p = int.from_bytes(blob[p + 1:p + 5], "little"), p + 5
        else:
            raise RdbError(ERR_BAD_FORMAT)
        if plen != prev_len or p >= end:
            raise RdbError(ERR_BAD_FORMAT)
        b = blob[p]
        top = b >> 6
        if top == 0:
            ln, p = b & 0x3F, p + 1
        elif top == 1:
            ln, p = ((b & 0x3F) << 8) | blob[p + 1], p + 2
        elif b == 0x80:
            ln, p = int.from_bytes(blob[p + 1:p + 5], "big"), p + 5
        elif b in _ZL_INT:
            size = _ZL_INT[b]
            ln, p = -1, p + 1
            out.append(b"%d" % int.from_bytes(blob[p:p + size], "little", signed=True))
            p += size
        elif 0xF1 <= b <= 0xFD:
            ln, p = -1, p + 1
            out.append(b"%d" % ((b & 0x0F) - 1))
        else:
            raise RdbError(ERR_BAD_FORMAT)
        if ln >= 0:
            out.append(blob[p:p + ln])
            p += ln
        if p > end:
            raise RdbError(ERR_BAD_FORMAT)
        prev_len = p - start
    if p != end or (declared != 65535 and declared != len(out)):
        raise RdbError(ERR_BAD_FORMAT)
    return out


def zipmap_decode(blob: bytes) -> list[bytes]:
    """The pre-2.6 zipmap hash blob: field, value, field, value..."""
    out: list[bytes] = []
    p, n = 1, len(blob)

    def zlen() -> int:
        nonlocal p
        if p >= n:
            raise RdbError(ERR_BAD_FORMAT)
        b = blob[p]
        if b < 254:
            p += 1
            return b
        if b == 254 and p + 5 <= n:
            p += 5
            return int.from_bytes(blob[p - 4:p], "little")
        raise RdbError(ERR_BAD_FORMAT)

    while p < n and blob[p] != 0xFF:
        klen = zlen()
        out.append(blob[p:p + klen])
        p += klen
        vlen = zlen()
        if p >= n:
            raise RdbError(ERR_BAD_FORMAT)
        free = blob[p]
        out.append(blob[p + 1:p + 1 + vlen])
        p += 1 + vlen + free
    if p != n - 1:
        raise RdbError(ERR_BAD_FORMAT)
    return out


# --- intset -------------------------------------------------------------------------------
def intset_encode(values: list[int]) -> bytes:
    width = 2 if all(-32768 <= v < 32768 for v in values) else (
        4 if all(-(1 << 31) <= v < (1 << 31) for v in values) else 8)
    values = sorted(values)
    return (width.to_bytes(4, "little") + len(values).to_bytes(4, "little")
            + b"".join(v.to_bytes(width, "little", signed=True) for v in values))


def intset_decode(blob: bytes) -> list[bytes]:
    if len(blob) < 8:
        raise RdbError(ERR_BAD_FORMAT)
    width = int.from_bytes(blob[0:4], "little")
    count = int.from_bytes(blob[4:8], "little")
    if width not in (2, 4, 8) or 8 + width * count != len(blob) or count == 0:
        raise RdbError(ERR_BAD_FORMAT)
    vals = [int.from_bytes(blob[i:i + width], "little", signed=True)
            for i in range(8, len(blob), width)]
    if any(a >= b for a, b in zip(vals, vals[1:], strict=False)):
        raise RdbError(ERR_BAD_FORMAT)
    return [b"%d" % v for v in vals]
