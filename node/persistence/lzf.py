"""LZF compression as Redis builds lzf_c.c (HLOG 16, VERY_FAST), byte for byte (pure).

Compiled with mypyc (pyproject's compiled list) it runs at tens of MB/s: stream DUMPs then
compress every listpack as Redis does; in pure Python it runs at a few MB/s and stream_rdb.py
compresses only streams up to ``stream_rdb.LZF_MAX_STREAM_BYTES``. ``COMPILED`` says which.
The loop keeps its state in i64 locals (no value leaves 64 bits: hashes are masked to 32).
"""

from __future__ import annotations

from mypy_extensions import i64

from slotgate.build import BUILD

COMPILED = BUILD.compiled and __name__ in BUILD.modules

_MAX_LIT: i64 = 1 << 5
_MAX_OFF: i64 = 1 << 13
_MAX_REF: i64 = (1 << 8) + (1 << 3)
_HSIZE = 1 << 16


def lzf_compress(src: bytes, out_len: int) -> bytes | None:
    """``lzf_compress(src, len, out, out_len)``: the compressed bytes, or None when they would
    not fit in ``out_len`` bytes (Redis then stores the string as it is)."""
    n: i64 = len(src)
    limit: i64 = out_len
    if n < 3 or limit <= 0:
        return None
    out = bytearray(out_len + 8)
    htab: list[i64] = [0] * _HSIZE
    ip: i64 = 0
    op: i64 = 1
    lit: i64 = 0
    tail_checked = False  # the C loop's end: "at most 3 bytes can be missing here"
    hval: i64 = (i64(src[0]) << 8) | src[1]
    while ip < n:
        if ip < n - 2:
            hval = ((hval << 8) | src[ip + 2]) & 0xFFFFFFFF
            slot: i64 = ((hval >> 8) - hval * 5) & 0xFFFF
            ref: i64 = htab[slot]
            htab[slot] = ip
            off: i64 = ip - ref - 1
            if (0 <= off < _MAX_OFF and ref > 0 and src[ref + 2] == src[ip + 2]
                    and src[ref] == src[ip] and src[ref + 1] == src[ip + 1]):
                length: i64 = 2
                maxlen: i64 = min(n - ip - length, _MAX_REF)
                if op + 4 >= limit and op - (0 if lit else 1) + 4 >= limit:
                    return None
                out[op - lit - 1] = (lit - 1) & 0xFF
                op -= 0 if lit else 1
                unrolled_all = False
                if maxlen > 16:
                    unrolled_all = True
                    for _ in range(16):
                        length += 1
                        if src[ref + length] != src[ip + length]:
                            unrolled_all = False
                            break
                if maxlen <= 16 or unrolled_all:
                    length += 1
                    while length < maxlen and src[ref + length] == src[ip + length]:
                        length += 1
                length -= 2
                ip += 1
                if length < 7:
                    out[op] = ((off >> 8) + (length << 5)) & 0xFF
                    op += 1
                else:
                    out[op] = ((off >> 8) + (7 << 5)) & 0xFF
                    out[op + 1] = (length - 7) & 0xFF
                    op += 2
                out[op] = off & 0xFF
                op += 2  # and a new literal run starts
                lit = 0
                ip += length + 1
                if ip < n - 2:
                    ip -= 2
                    hval = (i64(src[ip]) << 8) | src[ip + 1]
                    for _ in range(2):
                        hval = ((hval << 8) | src[ip + 2]) & 0xFFFFFFFF
                        htab[((hval >> 8) - hval * 5) & 0xFFFF] = ip
                        ip += 1
                continue
            if op >= limit:
                return None
        elif not tail_checked:
            if op + 3 > limit:
                return None
            tail_checked = True
        lit += 1
        out[op] = src[ip]
        op += 1
        ip += 1
        if lit == _MAX_LIT:
            out[op - lit - 1] = lit - 1
            lit = 0
            op += 1
    if not tail_checked and op + 3 > limit:
        return None
    out[op - lit - 1] = (lit - 1) & 0xFF
    op -= 0 if lit else 1
    return bytes(out[:op])
