"""LZF compression as Redis builds lzf_c.c (HLOG 16, VERY_FAST), byte for byte, and
decompression with lzf_d.c's checks (pure).

Redis' ``rdbSaveRawString`` runs it on every string, and every listpack / intset / ziplist
blob, longer than 20 bytes (``rdbcompression yes``): rdb.py's ``_string_bytes`` does the same.
Compiled with mypyc (pyproject's compiled list) it runs at about 45-175 MB/s on this machine
(bench/bench_lzf.py); as pure Python at 1.5-4 MB/s, so there the callers bound what they
compress (``rdb.PURE_LZF_MAX_BYTES``, ``stream_rdb.LZF_MAX_STREAM_BYTES``). ``COMPILED`` says
which.

What keeps the compiled loop native: constants are ``Final`` (inlined), every quantity is an
i64 local (hashes are masked to 32 bits), input bytes are read by ``bytes`` indexing, and the
hash table is a list of ``_Slot`` objects made once per process, each with one i64 field, so a
store allocates no int object. The table is not cleared between calls (65,536 stores): a slot
holds a ticket, the call's base plus the position, and every call starts at a base above every
earlier ticket, so older entries read as empty, as Redis' zeroed table. The output is a list of
pieces joined once: a literal run is its control byte and a slice of the input, a back
reference its 2 or 3 code bytes, all taken from a table of one-byte strings. Decompression
runs at 35-90 MB/s of output compiled (20-25 as pure Python).
"""

from __future__ import annotations

from typing import Final

from mypy_extensions import i64

from slotgate.build import BUILD

COMPILED = BUILD.compiled and __name__ in BUILD.modules

_MAX_LIT: Final[i64] = 1 << 5
_MAX_OFF: Final[i64] = 1 << 13
_MAX_REF: Final[i64] = (1 << 8) + (1 << 3)
_HSIZE: Final = 1 << 16
_BASE_LIMIT: Final[i64] = 1 << 62  # tickets never reach 2**63; the table is cleared first
_ONE: Final = [bytes((i,)) for i in range(256)]


class _Slot:
    """One hash-table entry: the ticket of the latest position whose 3 bytes hashed here."""

    __slots__ = ("at",)

    def __init__(self) -> None:
        self.at: i64 = 0


class _Table:
    __slots__ = ("slots", "base")

    def __init__(self) -> None:
        self.slots: list[_Slot] = [_Slot() for _ in range(_HSIZE)]
        self.base: i64 = 0


_TABLES: Final[list[_Table]] = []  # made at the first call: 65,536 slots


def _table() -> _Table:
    if not _TABLES:
        _TABLES.append(_Table())
    return _TABLES[0]


def _close_run(pieces: list[bytes], src: bytes, ip: i64, lit: i64) -> None:
    """A literal run of the ``lit`` bytes before ``ip``: its control byte, then them."""
    pieces.append(_ONE[lit - 1])
    pieces.append(src[ip - lit:ip])


def lzf_compress(src: bytes, out_len: int) -> bytes | None:
    """``lzf_compress(src, len, out, out_len)``: the compressed bytes, or None when they would
    not fit in ``out_len`` bytes (Redis then stores the string as it is)."""
    n: i64 = len(src)
    limit: i64 = out_len
    if n < 3 or limit <= 0:
        return None
    table = _table()
    htab = table.slots
    base: i64 = table.base
    if base > _BASE_LIMIT:
        for entry in htab:
            entry.at = 0
        base = 0
    table.base = base + n + 1  # above every ticket of this call
    one = _ONE
    pieces: list[bytes] = []
    ip: i64 = 0
    op: i64 = 1  # the C code's output pointer: the open literal run's control byte is counted
    lit: i64 = 0
    end: i64 = n - 2
    hval: i64 = (i64(src[0]) << 8) | src[1]
    while ip < end:
        hval = ((hval << 8) | src[ip + 2]) & 0xFFFFFFFF
        entry = htab[((hval >> 8) - hval * 5) & 0xFFFF]
        ref: i64 = entry.at - base  # <= 0: empty (an older call's ticket, or none)
        entry.at = base + ip
        off: i64 = ip - ref - 1
        if (ref > 0 and off < _MAX_OFF and src[ref + 2] == src[ip + 2]
                and src[ref] == src[ip] and src[ref + 1] == src[ip + 1]):
            length: i64 = 2
            maxlen: i64 = min(n - ip - length, _MAX_REF)
            if op + 4 >= limit and op - (0 if lit else 1) + 4 >= limit:
                return None
            if lit:  # stop the run
                _close_run(pieces, src, ip, lit)
            else:  # undo the empty run
                op -= 1
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
                pieces.append(one[(off >> 8) + (length << 5)])
                op += 3  # the code, the offset's low byte, the next run's control byte
            else:
                pieces.append(one[(off >> 8) + (7 << 5)])
                pieces.append(one[length - 7])
                op += 4
            pieces.append(one[off & 0xFF])
            lit = 0
            ip += length + 1
            if ip >= end:
                break
            ip -= 2
            hval = (i64(src[ip]) << 8) | src[ip + 1]
            for _ in range(2):
                hval = ((hval << 8) | src[ip + 2]) & 0xFFFFFFFF
                htab[((hval >> 8) - hval * 5) & 0xFFFF].at = base + ip
                ip += 1
            continue
        if op >= limit:
            return None
        lit += 1
        op += 1
        ip += 1
        if lit == _MAX_LIT:
            _close_run(pieces, src, ip, lit)
            lit = 0
            op += 1
    if op + 3 > limit:  # "at most 3 bytes can be missing here"
        return None
    tail: i64 = n - ip  # at most 2 bytes left, literals of the open run
    if lit + tail >= _MAX_LIT:  # they fill it: it ends, another starts
        ip += _MAX_LIT - lit
        tail -= _MAX_LIT - lit
        _close_run(pieces, src, ip, _MAX_LIT)
        lit = 0
    lit += tail
    ip += tail
    if lit:
        _close_run(pieces, src, ip, lit)
    return b"".join(pieces)


def lzf_decompress(src: bytes, out_len: int) -> bytes | None:
    """``lzf_decompress``: exactly ``out_len`` bytes, or None when ``src`` is not an LZF stream
    of that many bytes (a run or a reference past either end, or another length)."""
    n: i64 = len(src)
    want: i64 = out_len
    out = bytearray()  # grows with what is decoded: a false out_len allocates nothing
    size: i64 = 0
    i: i64 = 0
    while i < n:
        ctrl: i64 = src[i]
        i += 1
        if ctrl < 32:  # a literal run of ctrl + 1 bytes
            run: i64 = ctrl + 1
            if i + run > n or size + run > want:
                return None
            out += src[i:i + run]
            i += run
            size += run
            continue
        length: i64 = ctrl >> 5
        if length == 7:
            if i >= n:
                return None
            length += src[i]
            i += 1
        if i >= n:
            return None
        ref: i64 = size - ((ctrl & 0x1F) << 8) - 1 - src[i]
        i += 1
        length += 2
        if ref < 0 or size + length > want:
            return None
        dist: i64 = size - ref
        if dist >= length:
            out += out[ref:ref + length]
        else:  # an overlapping copy repeats the last ``dist`` bytes
            out += (out[ref:] * (length // dist + 1))[:length]
        size += length
    if size != want:
        return None
    return bytes(out)
