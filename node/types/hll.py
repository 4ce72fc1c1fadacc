"""Redis 7.0's HyperLogLog representation, byte for byte (pure: bytes in, bytes out).

A value is a plain string::

    "HYLL" | encoding (1 sparse, 0 dense) | 3 unused bytes | cached cardinality (8 bytes LE,
    the MSB of the last byte set = stale) | registers

- dense: 16384 registers of 6 bits, packed LSB first (``DENSE_SIZE`` bytes in all);
- sparse: run-length opcodes ZERO ``00xxxxxx`` (1..64 zero registers), XZERO ``01xxxxxx
  yyyyyyyy`` (1..16384 zero registers), VAL ``1vvvvvxx`` (1..4 registers of value 1..32).

``sparse_set`` is hllSparseSet ported step by step (split, in-place merge of adjacent VALs in
a window of 5 opcodes, promotion at ``hll-sparse-max-bytes``), because the exact bytes a
sparse HLL ends up with depend on that procedure. Everything that reads all registers works on
a "raw" array (one byte per register, Redis' HLL_RAW) built with C-speed slicing and
``bytes.translate``; several raws are merged with SWAR arithmetic on big ints. The estimator is
Otmar Ertl's (arXiv:1702.01284) as hllCount computes it, in the same float operations.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from struct import unpack_from
from typing import Final

from mypy_extensions import i64

HDR_SIZE: Final = 16
P: Final = 14
Q: Final = 64 - P  # hash bits left for the run of zeroes
REGISTERS: Final = 1 << P  # 16384
DENSE_SIZE: Final = HDR_SIZE + REGISTERS * 6 // 8  # 12304 bytes
DENSE: Final = 0
SPARSE: Final = 1
SPARSE_VAL_MAX: Final = 32
ZERO_MAX_LEN: Final = 64

_MASK64: Final = (1 << 64) - 1
_MURMUR_M: Final = 0xC6A4A7935BD1E995
_SEED: Final = 0xADC83B19
_ALPHA_INF: Final = 0.721347520444481703680  # 0.5 / ln(2)

# An empty sparse HLL: header, one XZERO:16384 (createHLLObject).
EMPTY_SPARSE: Final = b"HYLL\x01\x00\x00\x00" + bytes(8) + b"\x7f\xff"


def murmur64a(data: bytes) -> int:
    """MurmurHash64A with Redis' seed, read little-endian as Redis does on every arch."""
    n = len(data)
    m = _MURMUR_M
    h = (_SEED ^ (n * m)) & _MASK64
    nblocks = n >> 3
    if nblocks:
        for k in unpack_from(f"<{nblocks}Q", data):
            k = (k * m) & _MASK64
            k ^= k >> 47
            h = ((h ^ ((k * m) & _MASK64)) * m) & _MASK64
    if n & 7:
        h = ((h ^ int.from_bytes(data[nblocks << 3 :], "little")) * m) & _MASK64
    h ^= h >> 47
    h = (h * m) & _MASK64
    return h ^ (h >> 47)


# (SEED ^ len * M) mod 2**64 for every element length below 64: the hash's first step
_H0: Final = [(_SEED ^ (n * _MURMUR_M)) & _MASK64 for n in range(64)]
_ONE_Q: Final = 1 << Q


def _wraps(x: i64) -> bool:
    """Whether i64 arithmetic wraps around at 2**64, as it does compiled (mypyc: C's int64_t,
    built with -fwrapv); in pure Python an i64 is an int and never wraps."""
    y: i64 = x * 4
    return y == 0


_NATIVE_I64: Final = _wraps(1 << 62)
_M_I64: Final[i64] = -4132994306676758123  # _MURMUR_M as a signed 64-bit value
_LOW17: Final[i64] = (1 << 17) - 1  # what is left of a logical shift right by 47


def _pat_len_i64(ele: bytes) -> tuple[int, int]:
    """pat_len in wrapping i64 arithmetic (only where ``_NATIVE_I64``): the same bits,
    without a big int per step."""
    n: i64 = len(ele)
    m = _M_I64
    h: i64 = _SEED ^ (n * m)
    end: i64 = n & ~7
    p: i64 = 0
    while p < end:
        k: i64 = (i64(ele[p]) | i64(ele[p + 1]) << 8 | i64(ele[p + 2]) << 16
                  | i64(ele[p + 3]) << 24 | i64(ele[p + 4]) << 32 | i64(ele[p + 5]) << 40
                  | i64(ele[p + 6]) << 48 | i64(ele[p + 7]) << 56)
        k *= m
        k ^= (k >> 47) & _LOW17
        k *= m
        h ^= k
        h *= m
        p += 8
    if n & 7:
        tail: i64 = 0
        shift: i64 = 0
        while p < n:
            tail |= i64(ele[p]) << shift
            shift += 8
            p += 1
        h ^= tail
        h *= m
    h ^= (h >> 47) & _LOW17
    h *= m
    h ^= (h >> 47) & _LOW17
    count: i64 = 1
    rest: i64 = h >> P  # the low 50 bits are the pattern (bit 50 stops the count)
    while count <= Q and not rest & 1:
        count += 1
        rest >>= 1
    return int(h & (REGISTERS - 1)), int(count)


def pat_len(ele: bytes) -> tuple[int, int]:
    """hllPatLen: (register index, length of the 000..1 pattern of the other 50 bits). The
    hash is ``murmur64a``; for elements under 64 bytes (PFADD's usual) its 8-byte blocks are
    read off one little-endian int, which is faster than unpacking them."""
    if _NATIVE_I64:
        return _pat_len_i64(ele)
    n = len(ele)
    if n < 64:
        m = _MURMUR_M
        mask = _MASK64
        h = _H0[n]
        x = int.from_bytes(ele, "little")
        for _ in range(n >> 3):
            k = ((x & mask) * m) & mask
            x >>= 64
            k ^= k >> 47
            h = ((h ^ ((k * m) & mask)) * m) & mask
        if n & 7:
            h = ((h ^ x) * m) & mask
        h ^= h >> 47
        h = (h * m) & mask
        h ^= h >> 47
    else:
        h = murmur64a(ele)
    rest = (h >> P) | _ONE_Q
    return h & (REGISTERS - 1), (rest & -rest).bit_length()


# -- dense -----------------------------------------------------------------------------------
def dense_get(buf: bytes | bytearray, i: int) -> int:
    pos = HDR_SIZE + (i * 6 >> 3)
    fb = i * 6 & 7
    if fb <= 2:  # the register lies in one byte (so the last one reads no byte past the end)
        return (buf[pos] >> fb) & 63
    return ((buf[pos] >> fb) | (buf[pos + 1] << (8 - fb))) & 63


def dense_set(buf: bytearray, i: int, val: int) -> None:
    pos = HDR_SIZE + (i * 6 >> 3)
    fb = i * 6 & 7
    buf[pos] = (buf[pos] & ~(63 << fb) & 0xFF) | ((val << fb) & 0xFF)
    if fb > 2:
        fb8 = 8 - fb
        buf[pos + 1] = (buf[pos + 1] & ~(63 >> fb8) & 0xFF) | (val >> fb8)


def _table(fn: Callable[[int], int]) -> bytes:
    return bytes(fn(b) for b in range(256))


# byte -> part of a register (unpacking) and register -> part of a byte (packing)
_LO6 = _table(lambda b: b & 63)
_HI2 = _table(lambda b: b >> 6)
_LO4_SHL2 = _table(lambda b: (b & 15) << 2)
_HI4 = _table(lambda b: b >> 4)
_LO2_SHL4 = _table(lambda b: (b & 3) << 4)
_HI6 = _table(lambda b: b >> 2)
_R_LO2_SHL6 = _table(lambda r: ((r & 3) << 6) & 0xFF)
_R_SHR2 = _table(lambda r: (r >> 2) & 15)
_R_LO4_SHL4 = _table(lambda r: ((r & 15) << 4) & 0xFF)
_R_SHR4 = _table(lambda r: (r >> 4) & 3)
_R_SHL2 = _table(lambda r: (r << 2) & 0xFF)


def _or(a: bytes, b: bytes) -> bytes:
    """Bytewise OR of two equally long strings (their bits never overlap here)."""
    return (int.from_bytes(a, "little") | int.from_bytes(b, "little")).to_bytes(len(a), "little")


def dense_to_raw(buf: bytes | bytearray) -> bytearray:
    """The 16384 registers of a dense HLL, one byte each."""
    regs = bytes(buf[HDR_SIZE:DENSE_SIZE])
    b0, b1, b2 = regs[0::3], regs[1::3], regs[2::3]  # 4 registers in every 3 bytes
    raw = bytearray(REGISTERS)
    raw[0::4] = b0.translate(_LO6)
    raw[1::4] = _or(b0.translate(_HI2), b1.translate(_LO4_SHL2))
    raw[2::4] = _or(b1.translate(_HI4), b2.translate(_LO2_SHL4))
    raw[3::4] = b2.translate(_HI6)
    return raw


def raw_to_dense(raw: bytes | bytearray) -> bytearray:
    """The 12288 register bytes of the dense form of ``raw`` (registers 0..63)."""
    r0, r1, r2, r3 = (bytes(raw[k::4]) for k in range(4))
    regs = bytearray(REGISTERS * 6 // 8)
    regs[0::3] = _or(r0, r1.translate(_R_LO2_SHL6))
    regs[1::3] = _or(r1.translate(_R_SHR2), r2.translate(_R_LO4_SHL4))
    regs[2::3] = _or(r2.translate(_R_SHR4), r3.translate(_R_SHL2))
    return regs


# -- sparse ----------------------------------------------------------------------------------
def _val(value: int, runlen: int) -> int:
    return 0x80 | (value - 1) << 2 | (runlen - 1)


def _xzero_len(buf: bytes | bytearray, p: int, end: int) -> int:
    # the second byte of an XZERO cut off at the end reads sds' terminating zero in Redis
    return (((buf[p] & 0x3F) << 8) | (buf[p + 1] if p + 1 < end else 0)) + 1


def sparse_to_raw(buf: bytes | bytearray) -> bytearray | None:
    """The registers of a sparse HLL, one byte each; None when its runs do not cover exactly
    16384 registers (hllMerge / hllSparseToDense: C_ERR)."""
    raw = bytearray(REGISTERS)
    i = 0
    p = HDR_SIZE
    end = len(buf)
    while p < end:
        b = buf[p]
        if b & 0x80:
            runlen = (b & 3) + 1
            if i + runlen > REGISTERS:
                return None
            raw[i : i + runlen] = bytes((((b >> 2) & 0x1F) + 1,)) * runlen
            i += runlen
            p += 1
        elif b & 0x40:
            i += _xzero_len(buf, p, end)
            p += 2
        else:
            i += (b & 0x3F) + 1
            p += 1
    return raw if i == REGISTERS else None


def to_raw(buf: bytes | bytearray) -> bytearray | None:
    return dense_to_raw(buf) if buf[4] == DENSE else sparse_to_raw(buf)


def sparse_to_dense(buf: bytearray) -> bool:
    """hllSparseToDense in place (header copied, cached cardinality included); False (and
    ``buf`` untouched) when the sparse form is corrupted. A dense ``buf`` is left as it is."""
    if buf[4] == DENSE:
        return True
    raw = sparse_to_raw(buf)
    if raw is None:
        return False
    head = bytearray(buf[:HDR_SIZE])
    head[4] = DENSE
    buf[:] = head + raw_to_dense(raw)
    return True


class SparseMarks:
    """Where some opcodes of one sparse HLL start: ascending positions and the first register
    each covers, about every ``MARK_EVERY``-th opcode, the header's always first. ``sparse_set``
    starts its walk at the mark before its register instead of at the header, and keeps the
    marks true as it changes the string (hllSparseSet walks from the header: in C that costs
    little; here it was most of PFADD's time on a sparse key)."""

    __slots__ = ("pos", "first")

    def __init__(self) -> None:
        self.pos = [HDR_SIZE]
        self.first = [0]


MARK_EVERY: Final = 32


def _remark(marks: SparseMarks, start: int, npassed: int, walked: list[tuple[int, int]],
            prev: int, changed_at: int, delta: int, stable_after: int) -> None:
    """After a set that walked past ``npassed`` opcodes from mark ``start`` (``walked``: every
    MARK_EVERY-th of them): marks up to ``prev`` stay (nothing before it moves), a long walk
    adds its ``walked`` in place of the marks it passed, and the marks at or after
    ``changed_at`` (old position) move by ``delta`` bytes, but only those that land beyond
    ``stable_after`` (the merge scan may have rewritten the opcodes up to there). The lists
    are changed in place."""
    mp, mf = marks.pos, marks.first
    head = bisect_right(mp, prev)  # the marks at or before `prev`
    if changed_at < 0:  # nothing changed: the marks after `prev` stay as they were
        j = head
    else:
        j = bisect_left(mp, changed_at)
        while j < len(mp) and mp[j] + delta <= stable_after:
            j += 1
    if delta:
        for k in range(j, len(mp)):
            mp[k] += delta
    if npassed > 2 * MARK_EVERY:  # a long walk: its opcodes replace the marks it passed
        mp[start + 1 : j] = [q for q, _ in walked]
        mf[start + 1 : j] = [f for _, f in walked]
    elif head:
        del mp[head:j]
        del mf[head:j]
    else:
        mp[:j] = [HDR_SIZE]
        mf[:j] = [0]


def _op_span(b: int, nxt: int) -> tuple[int, int]:
    """(registers covered, bytes taken) of the opcode whose first byte is ``b``; ``nxt`` is the
    byte after it for an XZERO (0 when cut off at the end: Redis reads sds' terminating zero)."""
    if not b & 0xC0:
        return (b & 0x3F) + 1, 1
    if b & 0x80:
        return (b & 3) + 1, 1
    return (((b & 0x3F) << 8) | nxt) + 1, 2


def _walk_marked(rd: bytes, end: int, index: int, p: int,
                 first: int) -> tuple[int, int, int, int, int, list[tuple[int, int]]]:
    """sparse_set's step 1 from a mark, reading ``rd`` (the value's bytes as they are: typed
    ``bytes``, one C read each when compiled): (position and first register of the opcode
    covering ``index``, its span, the previous opcode's position or -1, the number of opcodes
    passed, every MARK_EVERY-th of those passed as (position, first register))."""
    span = 0
    prev = -1
    npassed = 0
    walked: list[tuple[int, int]] = []
    while p < end:
        b = rd[p]
        span, oplen = _op_span(b, rd[p + 1] if b & 0xC0 == 0x40 and p + 1 < end else 0)
        if index <= first + span - 1:
            break
        if npassed and npassed % MARK_EVERY == 0:
            walked.append((p, first))
        npassed += 1
        prev = p
        p += oplen
        first += span
    return p, first, span, prev, npassed, walked


def sparse_set(buf: bytearray, index: int, count: int, max_bytes: int,
               hint: list[tuple[int, int]] | None = None,
               marks: SparseMarks | None = None, view: bytes | None = None) -> int:
    """hllSparseSet: register ``index`` := ``count`` if greater. 1 updated, 0 not, -1 corrupted.
    May promote ``buf`` to dense in place (a value over 32, or a size over ``max_bytes``).

    ``hint`` (PFMERGE: ascending indexes on one value): the (position, first register) of the
    consecutive opcodes from the start that the last call left unchanged (all those before its
    ``prev``); the next walk resumes at the last of them instead of at the start, and still
    sees the same ``prev`` a walk from the start would.

    ``marks`` (PFADD): SparseMarks of ``buf``, kept true here (stale once ``buf`` is dense);
    the walk then reads ``view``, bytes equal to ``buf`` (made here when not given)."""
    if count > SPARSE_VAL_MAX:
        return _promote(buf, index, count)
    end = old_end = len(buf)
    span = 0
    # Step 1: the opcode covering `index` (the hot loop: most frequent opcode first); with a
    # hint, from the last opcode it kept, recording the ones passed; with marks, from the mark
    # before the last one at or below `index` (so the walk itself finds `prev`)
    start = npassed = 0
    walked: list[tuple[int, int]] = []
    if marks is not None:
        start = bisect_right(marks.first, index) - 1
        if start:
            start -= 1
        p, first, span, prev, npassed, walked = _walk_marked(
            view if view is not None else bytes(buf), end, index, marks.pos[start],
            marks.first[start])
    else:
        p, first = hint.pop() if hint else (HDR_SIZE, 0)
        prev = -1
        while p < end:
            b = buf[p]
            span, oplen = _op_span(b, buf[p + 1] if b & 0xC0 == 0x40 and p + 1 < end else 0)
            if index <= first + span - 1:
                break
            if hint is not None:
                hint.append((p, first))
            prev = p
            p += oplen
            first += span
        if hint is not None:
            prev = hint[-1][0] if hint else -1
            if hint:
                hint.pop()  # `prev` may change below; the opcodes before it do not
    if span == 0 or p >= end:
        return -1
    cover = p
    b = buf[p]
    is_xzero = (b & 0xC0) == 0x40
    is_val = bool(b & 0x80)
    if is_val:
        runlen = (b & 3) + 1
        if ((b >> 2) & 0x1F) + 1 >= count:  # case A: already as high
            if marks is not None:
                _remark(marks, start, npassed, walked, prev, -1, 0, 0)
            return 0
    elif is_xzero:
        runlen = span
    else:
        runlen = (b & 0x3F) + 1
    if runlen == 1 and not is_xzero:  # cases B and C: one register, rewritten in place
        buf[p] = _val(count, 1)
    else:  # case D: split the opcode into up to three
        last = first + span - 1
        seq = bytearray()
        if is_val:
            cur = ((b >> 2) & 0x1F) + 1
            if index != first:
                seq.append(_val(cur, index - first))
            seq.append(_val(count, 1))
            if index != last:
                seq.append(_val(cur, last - index))
        else:
            if index != first:
                _zeros(seq, index - first)
            seq.append(_val(count, 1))
            if index != last:
                _zeros(seq, last - index)
        oldlen = 2 if is_xzero else 1
        delta = len(seq) - oldlen
        if delta > 0 and end + delta > max_bytes:
            return _promote(buf, index, count)
        buf[p : p + oldlen] = seq
        end += delta
        if len(buf) > end:  # an XZERO cut off at the end: Redis' copy lands past the length
            del buf[end:]
    # Step 4: merge adjacent VALs of equal value, up to 5 opcodes from the previous one
    p = prev if prev >= 0 else HDR_SIZE
    scan = 5
    while p < end and scan:
        scan -= 1
        b = buf[p]
        if not b & 0x80:
            p += 2 if b & 0x40 else 1
            continue
        if p + 1 < end and buf[p + 1] & 0x80:
            b2 = buf[p + 1]
            if (b >> 2) & 0x1F == (b2 >> 2) & 0x1F:
                ln = (b & 3) + (b2 & 3) + 2
                if ln <= 4:
                    buf[p + 1] = _val(((b >> 2) & 0x1F) + 1, ln)
                    del buf[p]
                    end -= 1
                    continue
        p += 1
    if marks is not None:
        _remark(marks, start, npassed, walked, prev, cover + (2 if is_xzero else 1),
                end - old_end, p + 1)
    buf[15] |= 0x80
    return 1


def _zeros(seq: bytearray, n: int) -> None:
    if n > ZERO_MAX_LEN:
        seq += bytes((0x40 | (n - 1) >> 8, (n - 1) & 0xFF))
    else:
        seq.append(n - 1)


def _promote(buf: bytearray, index: int, count: int) -> int:
    if not sparse_to_dense(buf):
        return -1
    if count > dense_get(buf, index):
        dense_set(buf, index, count)
    return 1


def add(buf: bytearray, ele: bytes, max_bytes: int) -> int:
    """hllAdd: 1 when a register grew, 0 when none did, -1 for a corrupted sparse form."""
    index, count = pat_len(ele)
    if buf[4] == DENSE:
        if count > dense_get(buf, index):
            dense_set(buf, index, count)
            return 1
        return 0
    return sparse_set(buf, index, count, max_bytes)


def add_many(buf: bytearray, elements: list[bytes], max_bytes: int,
             marks: SparseMarks | None = None, view: bytes | None = None) -> int:
    """PFADD's loop: hllAdd for each element in order; the number of registers that grew, or
    -1 at the first corrupted sparse form (what was changed before it stays changed).
    ``marks``: see sparse_set; ``view``: bytes equal to ``buf`` as it is given (the value it
    was copied from), for the first walk.

    The dense register update is inlined, with 16-bit reads of the two bytes a register may
    span (the last register lies in one byte: fb == 2)."""
    updated = 0
    for ele in elements:
        index, count = pat_len(ele)
        if buf[4] == DENSE:
            bit = index * 6
            pos = HDR_SIZE + (bit >> 3)
            fb = bit & 7
            if fb <= 2:
                cur = buf[pos]
                if count > (cur >> fb) & 63:
                    buf[pos] = (cur & ~(63 << fb) & 0xFF) | (count << fb)
                    updated += 1
            else:
                two = buf[pos] | buf[pos + 1] << 8
                if count > (two >> fb) & 63:
                    two = (two & ~(63 << fb)) | (count << fb)
                    buf[pos] = two & 0xFF
                    buf[pos + 1] = two >> 8
                    updated += 1
        else:
            r = sparse_set(buf, index, count, max_bytes, None, marks, view)
            if r < 0:
                return -1
            if r:
                view = None  # no longer what `buf` holds
            updated += r
    return updated


def dense_add(v: bytes, elements: list[bytes],
              mirror: bytearray | None = None) -> tuple[bytes, int, bytearray | None]:
    """PFADD's loop on a dense value that is only read: (the value with the registers grown
    and its cached cardinality invalidated, the number that grew, the bytearray that now holds
    exactly the new value's bytes), or (``v`` itself, 0, ``mirror``) when none grew.

    ``mirror``, when given, holds exactly ``v``'s bytes: it is changed in place and the new
    value copied out of it, one copy of the 12 KB string instead of two (without it, the first
    register that grows copies ``v`` into a new bytearray). Registers are read from ``v``
    (typed ``bytes``: one C read each when compiled) until one grows, then from the copy."""
    buf: bytearray | None = None
    updated = 0
    for ele in elements:
        index, count = pat_len(ele)
        bit = index * 6
        pos = HDR_SIZE + (bit >> 3)
        fb = bit & 7
        if buf is None:
            two = v[pos] | v[pos + 1] << 8 if fb > 2 else v[pos]
            if count <= (two >> fb) & 63:
                continue
            buf = mirror if mirror is not None else bytearray(v)
        else:
            two = buf[pos] | buf[pos + 1] << 8 if fb > 2 else buf[pos]
            if count <= (two >> fb) & 63:
                continue
        # the register lies in one byte when fb <= 2 (the last one does: fb == 2)
        two = (two & ~(63 << fb)) | (count << fb)
        buf[pos] = two & 0xFF
        if fb > 2:
            buf[pos + 1] = two >> 8
        updated += 1
    if buf is None:
        return v, 0, mirror
    buf[15] |= 0x80  # HLL_INVALIDATE_CACHE
    return bytes(buf), updated, buf


# -- merging and counting ---------------------------------------------------------------------
_HIGH_BITS: Final = int.from_bytes(b"\x80" * REGISTERS, "little")


def raw_max(a: int, b: int) -> int:
    """Bytewise max of two raws held as little-endian ints (SWAR: every byte is below 128, so
    ``(a | 0x80) - b`` keeps bit 7 set exactly where a >= b, and never borrows)."""
    ge = (((a | _HIGH_BITS) - b) & _HIGH_BITS) >> 7
    mask = (ge << 8) - ge  # 0xff in each byte where a >= b
    return b ^ ((a ^ b) & mask)


def histogram(raw: bytes | bytearray) -> list[int]:
    """How many registers hold each value 0..63."""
    hist = [0] * 64
    left = REGISTERS
    for v in range(64):
        n = raw.count(v)
        hist[v] = n
        left -= n
        if not left:
            break
    return hist


def _sigma(x: float) -> float:
    if x == 1.0:
        return math.inf
    y = 1.0
    z = x
    while True:
        x *= x
        z_prev = z
        z += x * y
        y += y
        if z_prev == z:
            return z


def _tau(x: float) -> float:
    if x == 0.0 or x == 1.0:
        return 0.0
    y = 1.0
    z = 1 - x
    while True:
        x = math.sqrt(x)
        z_prev = z
        y *= 0.5
        d = 1 - x
        z -= d * d * y  # pow(1 - x, 2): compilers fold pow(v, 2) to v * v
        if z_prev == z:
            return z / 3


_TWO_63: Final = float(1 << 63)


def estimate(hist: list[int]) -> int:
    """hllCount's estimate from the register histogram, in its order of float operations, as
    the uint64 it returns (2**63 when the estimate overflows: a register histogram no element
    sequence makes, but a value SET by hand can)."""
    m = float(REGISTERS)
    z = m * _tau((m - hist[Q + 1]) / m)
    for j in range(Q, 0, -1):
        z += hist[j]
        z *= 0.5
    z += m * _sigma(hist[0] / m)
    if z == 0.0:  # every register above 51: C divides by zero, to infinity
        return 1 << 63
    e = _ALPHA_INF * m * m / z
    if not e < _TWO_63:  # llroundl out of range (or NaN): LLONG_MIN, read back as uint64
        return 1 << 63
    f = math.floor(e)
    return int(f) + (1 if e - f >= 0.5 else 0)  # llroundl: halves away from zero


def count(buf: bytes | bytearray) -> int | None:
    """The cardinality of one HLL value; None when a sparse form is corrupted."""
    raw = to_raw(buf)
    return None if raw is None else estimate(histogram(raw))


def decode_sparse(buf: bytes | bytearray) -> bytes:
    """PFDEBUG DECODE's text: ``z:N`` / ``Z:N`` / ``v:value,N`` per opcode."""
    parts = []
    p = HDR_SIZE
    end = len(buf)
    while p < end:
        b = buf[p]
        if not b & 0xC0:
            parts.append(b"z:%d" % ((b & 0x3F) + 1))
            p += 1
        elif b & 0x80:
            parts.append(b"v:%d,%d" % (((b >> 2) & 0x1F) + 1, (b & 3) + 1))
            p += 1
        else:
            parts.append(b"Z:%d" % _xzero_len(buf, p, end))
            p += 2
    return b" ".join(parts)
