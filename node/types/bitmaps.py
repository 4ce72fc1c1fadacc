"""Bitmaps on strings: SETBIT GETBIT BITCOUNT BITPOS BITOP BITFIELD BITFIELD_RO.

Bit 0 is the most significant bit of byte 0, as in Redis.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from slotgate.node.commands.registry import command
from slotgate.node.commands.util import parse_int
from slotgate.node.core.errors import BIT_OFFSET, SYNTAX, WRONGTYPE, CommandError
from slotgate.node.core.keyspace import NOTIFY_GENERIC, NOTIFY_STRING
from slotgate.node.types.strings import get_string, get_string_write
from slotgate.protocol.resp import array_header, integer

if TYPE_CHECKING:
    from slotgate.node.core.client import Client

_POPCOUNT = bytes(bin(i).count("1") for i in range(256))


def _bit_offset(c: Client, raw: bytes, hash_ok: bool = False, bits: int = 1) -> int:
    mul = False
    if hash_ok and raw[:1] == b"#":
        mul = True
        raw = raw[1:]
    try:
        n = parse_int(raw)
    except CommandError:
        raise CommandError(BIT_OFFSET) from None
    if mul:
        n *= bits
    limit = int(c.server.config.get("proto-max-bulk-len")) * 8
    if n < 0 or n >= limit:
        raise CommandError(BIT_OFFSET)
    return n


@command("setbit")
def setbit(c: Client, argv: list[bytes]) -> bytes:
    offset = _bit_offset(c, argv[2])
    if argv[3] not in (b"0", b"1"):
        raise CommandError("ERR bit is not an integer or out of range")
    on = argv[3] == b"1"
    db = c.db
    key = argv[1]
    cur = get_string_write(db, key) or b""
    byte = offset >> 3
    mask = 1 << (7 - (offset & 7))
    # One copy of the value at most (a string is immutable ``bytes``): none when the bit
    # already has its value, else one join of the untouched parts around the changed byte.
    if byte < len(cur):
        was = cur[byte]
        old = 1 if was & mask else 0
        now = was | mask if on else was & ~mask & 0xFF
        if now != was:
            view = memoryview(cur)
            cur = b"".join((view[:byte], bytes((now,)), view[byte + 1:]))
    else:
        old = 0
        cur = b"".join((cur, bytes(byte - len(cur)), bytes((mask if on else 0,))))
    db.set(key, cur, keep_ttl=True)
    db.mark_raw(key)
    c.ks.dirty += 1
    db.notify(NOTIFY_STRING, b"setbit", key)
    return integer(old)


@command("getbit")
def getbit(c: Client, argv: list[bytes]) -> bytes:
    offset = _bit_offset(c, argv[2])
    v = get_string(c.db, argv[1]) or b""
    byte = offset >> 3
    if byte >= len(v):
        return integer(0)
    return integer(1 if v[byte] & (1 << (7 - (offset & 7))) else 0)


def _unit(raw: bytes) -> bool:
    low = raw.lower()
    if low == b"bit":
        return True
    if low == b"byte":
        return False
    raise CommandError(SYNTAX)


def _range_bits(n_bytes: int, start: int, end: int, isbit: bool) -> tuple[int, int]:
    """Redis' index normalisation; returns an inclusive bit range (may be empty)."""
    total = n_bytes * 8 if isbit else n_bytes
    if start < 0:
        start += total
    if end < 0:
        end += total
    start = max(start, 0)
    end = max(end, 0)
    if end >= total:
        end = total - 1
    if isbit:
        return start, end
    return start * 8, end * 8 + 7


def _count_bits(v: bytes, sbit: int, ebit: int) -> int:
    if sbit > ebit:
        return 0
    sb, eb = sbit >> 3, ebit >> 3
    total = sum(_POPCOUNT[b] for b in v[sb : eb + 1]) if eb - sb < 4096 else (
        int.from_bytes(v[sb : eb + 1], "big").bit_count())
    first = v[sb]
    head_bits = sbit & 7  # bits before sbit in the first byte
    if head_bits:
        total -= _POPCOUNT[first >> (8 - head_bits)]
    tail_bits = 7 - (ebit & 7)  # bits after ebit in the last byte
    if tail_bits:
        total -= _POPCOUNT[v[eb] & ((1 << tail_bits) - 1)]
    return total


@command("bitcount")
def bitcount(c: Client, argv: list[bytes]) -> bytes:
    n = len(argv)
    v = get_string(c.db, argv[1])  # Redis looks the key up before parsing the range
    if v is None:
        return integer(0)
    if n in (4, 5):
        start = parse_int(argv[2])
        end = parse_int(argv[3])
        isbit = _unit(argv[4]) if n == 5 else False
        if start < 0 and end < 0 and start > end:
            return integer(0)
        sbit, ebit = _range_bits(len(v), start, end, isbit)
    elif n == 2:
        sbit, ebit = 0, len(v) * 8 - 1
    else:
        raise CommandError(SYNTAX)
    return integer(_count_bits(v, sbit, ebit))


# the first byte holding a 1 bit, or a 0 bit: whole bytes are skipped at C speed
_HAS_ONE = re.compile(rb"[^\x00]")
_HAS_ZERO = re.compile(rb"[^\xff]")
_BLOCK = 1 << 20


def _find_bit(v: bytes, bit: int, sbit: int, ebit: int) -> int:
    """The first bit ``bit`` in bits ``sbit..ebit`` of ``v`` (MSB first), or -1."""
    i = sbit
    while i <= ebit and i & 7:  # the bits before the first whole byte
        if (v[i >> 3] >> (7 - (i & 7))) & 1 == bit:
            return i
        i += 1
    whole_end = (ebit + 1) >> 3  # bytes i>>3 .. whole_end-1 lie wholly in the range
    skip = 0 if bit else 0xFF
    j = i >> 3
    if j < whole_end:
        i = whole_end << 3
    while j < whole_end:  # a block at a time: bytes.count runs at memory speed
        end = min(j + _BLOCK, whole_end)
        if v.count(skip, j, end) != end - j:
            m = (_HAS_ONE if bit else _HAS_ZERO).search(v, j, end)
            assert m is not None
            i = m.start() << 3
            break
        j = end
    while i <= ebit:  # within the byte found, or the bits after the last whole byte
        if (v[i >> 3] >> (7 - (i & 7))) & 1 == bit:
            return i
        i += 1
    return -1


@command("bitpos")
def bitpos(c: Client, argv: list[bytes]) -> bytes:
    bit = parse_int(argv[2])
    if bit not in (0, 1):
        raise CommandError("ERR The bit argument must be 1 or 0.")
    n = len(argv)
    v = get_string(c.db, argv[1])
    if v is None:
        return integer(-1 if bit else 0)
    end_given = False
    if n in (4, 5, 6):
        start = parse_int(argv[3])
        isbit = _unit(argv[5]) if n == 6 else False
        if n >= 5:
            end = parse_int(argv[4])
            end_given = True
        else:
            end = len(v) * 8 + 7 if isbit else len(v) - 1
        sbit, ebit = _range_bits(len(v), start, end, isbit)
    elif n == 3:
        sbit, ebit = 0, len(v) * 8 - 1
    else:
        raise CommandError(SYNTAX)
    if sbit > ebit or not v:
        return integer(-1)
    pos = _find_bit(v, bit, sbit, ebit)
    if pos == -1 and bit == 0:
        return integer(-1 if end_given else ebit + 1)
    return integer(pos)


@command("bitop")
def bitop(c: Client, argv: list[bytes]) -> bytes:
    op = argv[1].lower()
    if op not in (b"and", b"or", b"xor", b"not"):
        raise CommandError(SYNTAX)
    srcs = argv[3:]
    if op == b"not" and len(srcs) != 1:
        raise CommandError("ERR BITOP NOT must be called with a single source key.")
    db = c.db
    values = []
    for key in srcs:
        v = db.lookup(key)
        if v is not None and type(v) is not bytes:
            raise CommandError(WRONGTYPE)
        values.append(v or b"")
    maxlen = max((len(v) for v in values), default=0)
    dest = argv[2]
    if maxlen == 0:
        if db.delete(dest):
            db.notify(NOTIFY_GENERIC, b"del", dest)
            c.ks.dirty += 1
        return integer(0)
    nums = [int.from_bytes(v.ljust(maxlen, b"\0"), "big") for v in values]
    if op == b"not":
        res = nums[0] ^ ((1 << (8 * maxlen)) - 1)
    else:
        res = nums[0]
        for x in nums[1:]:
            if op == b"and":
                res &= x
            elif op == b"or":
                res |= x
            else:
                res ^= x
    db.set(dest, res.to_bytes(maxlen, "big"))
    db.mark_raw(dest)
    c.ks.dirty += 1
    db.notify(NOTIFY_STRING, b"set", dest)
    return integer(maxlen)


# -- BITFIELD -----------------------------------------------------------------------------------
_BAD_TYPE = ("ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not "
             "supported but i64 is.")


def _parse_type(raw: bytes) -> tuple[bool, int]:
    low = raw.lower()
    if len(low) < 2 or low[:1] not in (b"i", b"u"):
        raise CommandError(_BAD_TYPE)
    signed = low[:1] == b"i"
    try:
        bits = int(low[1:])
    except ValueError:
        raise CommandError(_BAD_TYPE) from None
    if str(bits).encode() != low[1:] or bits < 1 or (signed and bits > 64) or (not signed and bits > 63):
        raise CommandError(_BAD_TYPE)
    return signed, bits


def _get_field(buf: bytearray | bytes, offset: int, bits: int, signed: bool) -> int:
    val = 0
    for i in range(offset, offset + bits):
        byte = i >> 3
        b = (buf[byte] >> (7 - (i & 7))) & 1 if byte < len(buf) else 0
        val = (val << 1) | b
    if signed and val & (1 << (bits - 1)):
        val -= 1 << bits
    return val


def _set_field(buf: bytearray, offset: int, bits: int, value: int) -> None:
    value &= (1 << bits) - 1
    for j in range(bits):
        i = offset + j
        bit = (value >> (bits - 1 - j)) & 1
        mask = 1 << (7 - (i & 7))
        if bit:
            buf[i >> 3] |= mask
        else:
            buf[i >> 3] &= ~mask & 0xFF


def _overflow(value: int, bits: int, signed: bool, mode: bytes) -> tuple[int, bool]:
    """(result, failed) for WRAP/SAT/FAIL."""
    if signed:
        lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    else:
        lo, hi = 0, (1 << bits) - 1
    if lo <= value <= hi:
        return value, False
    if mode == b"fail":
        return 0, True
    if mode == b"sat":
        return (hi if value > hi else lo), False
    wrapped = value & ((1 << bits) - 1)
    if signed and wrapped & (1 << (bits - 1)):
        wrapped -= 1 << bits
    return wrapped, False


def _bitfield(c: Client, argv: list[bytes], readonly: bool) -> bytes:
    ops: list[tuple[bytes, bool, int, int, int, bytes]] = []
    mode = b"wrap"
    i = 2
    n = len(argv)
    while i < n:
        sub = argv[i].lower()
        remaining = n - i - 1
        if sub == b"get" and remaining >= 2:
            signed, bits = _parse_type(argv[i + 1])
            off = _bit_offset(c, argv[i + 2], True, bits)
            ops.append((b"get", signed, bits, off, 0, mode))
            i += 3
        elif sub in (b"set", b"incrby") and remaining >= 3:
            signed, bits = _parse_type(argv[i + 1])
            off = _bit_offset(c, argv[i + 2], True, bits)
            val = parse_int(argv[i + 3])
            ops.append((sub, signed, bits, off, val, mode))
            i += 4
        elif sub == b"overflow" and remaining >= 1:
            m = argv[i + 1].lower()
            if m not in (b"wrap", b"sat", b"fail"):
                raise CommandError("ERR Invalid OVERFLOW type specified")
            mode = m
            i += 2
        else:
            raise CommandError(SYNTAX)
    writes = any(op[0] != b"get" for op in ops)
    if readonly and writes:
        raise CommandError("ERR BITFIELD_RO only supports the GET subcommand")
    db = c.db
    key = argv[1]
    cur = (get_string_write if writes else get_string)(db, key)
    # No length check: each offset is below proto-max-bulk-len bits, and Redis grows the string
    # to the last field's byte even when that passes proto-max-bulk-len by up to 8 bytes.
    buf = bytearray(cur or b"")
    replies = []
    changed = False
    for sub, signed, bits, off, val, m in ops:
        if sub == b"get":
            replies.append(integer(_get_field(buf, off, bits, signed)))
            continue
        need = (off + bits + 7) // 8
        if len(buf) < need:
            buf.extend(bytes(need - len(buf)))
        old = _get_field(buf, off, bits, signed)
        if sub == b"set":
            # An unsigned field takes the value as a uint64 (so -1 is "too big", not "too small").
            new, failed = _overflow(val if signed else val % 2**64, bits, signed, m)
            if failed:
                replies.append(b"$-1\r\n" if c.resp == 2 else b"_\r\n")
                continue
            _set_field(buf, off, bits, new)
            replies.append(integer(old))
        else:
            new, failed = _overflow(old + val, bits, signed, m)
            if failed:
                replies.append(b"$-1\r\n" if c.resp == 2 else b"_\r\n")
                continue
            _set_field(buf, off, bits, new)
            replies.append(integer(new))
        changed = True
    if writes and (changed or len(buf) > len(cur or b"")):
        db.set(key, bytes(buf), keep_ttl=True)
        db.mark_raw(key)
        c.ks.dirty += 1
        db.notify(NOTIFY_STRING, b"setbit", key)
    return array_header(len(replies)) + b"".join(replies)


@command("bitfield")
def bitfield(c: Client, argv: list[bytes]) -> bytes:
    return _bitfield(c, argv, False)


@command("bitfield_ro")
def bitfield_ro(c: Client, argv: list[bytes]) -> bytes:
    return _bitfield(c, argv, True)
