"""DUMP / RESTORE payloads in the Redis 7.0 format (pure: bytes in, values out, no I/O).

A payload is ``[1-byte RDB type][object body][RDB version u16 LE][CRC64 u64 LE]``; the CRC
(Jones polynomial, reflected, init 0, no xorout) covers everything before it.

Value model (the keyspace adapter converts to and from its own classes):

    kind      Python value
    string    bytes
    list      list[bytes]
    set       set[bytes]
    hash      dict[bytes, bytes]
    zset      list[tuple[bytes, float]]   (member, score); decoded sorted by (score, member)

``dump(kind, value)`` emits what a real 7.0 server emits for a freshly built value: int-encoded
strings, intset or plain sets, listpack or plain hashes and zsets (by the default
``*-max-listpack-*`` limits), and lists as a quicklist of listpacks (type 18). Every string and
blob is written as ``rdbSaveRawString`` writes it: LZF-compressed when longer than 20 bytes and
4 bytes shorter compressed, with ``rdbcompression yes`` (``_string_bytes``), so a fresh value's
payload is redis-server's byte for byte.

``load(payload)`` checks the footer like ``verifyDumpPayload`` and decodes every string / list
/ set / hash / zset type a 7.0 server loads, including the legacy ziplist, zipmap and quicklist
(type 14) forms and LZF-compressed strings anywhere a string is read. Like Redis, the body is
read from the payload *including* its footer and bytes left unread are ignored. The blob formats
(listpack, ziplist, zipmap, intset, LZF) live in ``node/persistence/rdb_blobs.py``. Errors carry
Redis' exact reply text: ``ERR DUMP payload version or checksum are wrong`` for the footer,
``ERR Bad data format`` for anything undecodable. Unlike a 7.0 server with
``sanitize-dump-payload no``, encoded blobs are always checked in depth (duplicates, order,
bounds), so a value that loads here is always consistent.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Union

from slotgate.node.persistence import lzf
from slotgate.node.persistence.rdb_blobs import (  # noqa: F401 - re-exported: the codec's public surface
    ERR_BAD_FORMAT,
    ERR_FOOTER,
    INT64_MAX,
    INT64_MIN,
    RdbError,
    intset_decode,
    intset_encode,
    listpack_decode,
    listpack_encode,
    listpack_from_entries,
    lp_entry,
    lzf_decompress,
    strict_int,
    ziplist_decode,
    zipmap_decode,
)

RDB_VERSION = 10  # Redis 7.0

ZSet = list[tuple[bytes, float]]
Value = Union[bytes, list[bytes], set[bytes], dict[bytes, bytes], ZSet]  # noqa: UP007

# --- RDB object types (rdb.h) -------------------------------------------------------------
T_STRING, T_LIST, T_SET, T_ZSET, T_HASH, T_ZSET_2 = 0, 1, 2, 3, 4, 5
T_HASH_ZIPMAP, T_LIST_ZIPLIST, T_SET_INTSET, T_ZSET_ZIPLIST, T_HASH_ZIPLIST = 9, 10, 11, 12, 13
T_LIST_QUICKLIST = 14
T_HASH_LISTPACK, T_ZSET_LISTPACK, T_LIST_QUICKLIST_2 = 16, 17, 18

QUICKLIST_NODE_PLAIN, QUICKLIST_NODE_PACKED = 1, 2
# _quicklistNodeAllowInsert (7.0): a node takes an element while its listpack's bytes plus the
# element's raw length plus SIZE_ESTIMATE_OVERHEAD stay within the size limit
LIST_NODE_OVERHEAD = 8


@dataclass(frozen=True)
class EncodingLimits:
    """The encoding thresholds of ``redis.conf`` (7.0 defaults)."""

    hash_max_listpack_entries: int = 128
    hash_max_listpack_value_bytes: int = 64
    zset_max_listpack_entries: int = 128
    zset_max_listpack_value_bytes: int = 64
    set_max_intset_entries: int = 512
    list_node_max_bytes: int = 8192  # list-max-listpack-size -2
    list_packed_threshold_bytes: int = 1 << 30  # larger elements get a plain quicklist node


DEFAULT_LIMITS = EncodingLimits()

# --- CRC64 (Jones, reflected), slicing-by-8 tables ----------------------------------------
_CRC64_POLY_REFLECTED = 0x95AC9329AC4BC9B5  # bit-reversal of 0xad93d23594c935a9


def _crc64_tables() -> list[list[int]]:
    t0 = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ _CRC64_POLY_REFLECTED if c & 1 else c >> 1
        t0.append(c)
    tables = [t0]
    for _ in range(7):
        prev = tables[-1]
        tables.append([(prev[i] >> 8) ^ t0[prev[i] & 0xFF] for i in range(256)])
    return tables


_T = _crc64_tables()


# A block of zero bytes moves the CRC by a fixed linear map (the table is linear, there is no
# final xor): the map of ZERO_BLOCK of them, as the images of the 64 bits, skips such a block
# in 64 steps instead of ZERO_BLOCK / 8. Values made by one SETRANGE or SETBIT are mostly
# zeros: their DUMP, RESTORE and MIGRATE no longer take seconds per 100 MB.
ZERO_BLOCK = 1 << 16
_zero_maps: dict[int, list[int]] = {}


def _zero_map(nbytes: int) -> list[int]:
    """Images of bits 0..63 of the CRC after ``nbytes`` zero bytes (a power of two)."""
    m = _zero_maps.get(nbytes)
    if m is None:
        t0 = _T[0]
        m = [t0[(1 << k) & 0xFF] ^ ((1 << k) >> 8) for k in range(64)]  # one zero byte
        done = 1
        while done < nbytes:  # square: the map applied to its own images
            m = [_apply(m, x) for x in m]
            done *= 2
        _zero_maps[nbytes] = m
    return m


def _apply(m: list[int], crc: int) -> int:
    out = 0
    k = 0
    while crc:
        if crc & 1:
            out ^= m[k]
        crc >>= 1
        k += 1
    return out


def crc64(data: bytes | bytearray | memoryview, crc: int = 0) -> int:
    """CRC-64/Jones as Redis' ``crc64()``; whole blocks of zero bytes skipped (``_zero_map``)."""
    n = len(data)
    if n < 2 * ZERO_BLOCK:
        return _crc64_bytes(data, crc)
    raw = data if isinstance(data, (bytes, bytearray)) else bytes(data)
    zeros = _zero_map(ZERO_BLOCK)
    plain_from = 0
    for pos in range(0, n - ZERO_BLOCK + 1, ZERO_BLOCK):
        if raw.count(0, pos, pos + ZERO_BLOCK) == ZERO_BLOCK:
            crc = _crc64_bytes(memoryview(raw)[plain_from:pos], crc)
            crc = _apply(zeros, crc)
            plain_from = pos + ZERO_BLOCK
    return _crc64_bytes(memoryview(raw)[plain_from:], crc)


def _crc64_bytes(data: bytes | bytearray | memoryview, crc: int) -> int:
    """CRC-64/Jones as Redis' ``crc64()``: 8 bytes per step, then byte by byte."""
    t0, t1, t2, t3, t4, t5, t6, t7 = _T
    mv = memoryview(data).cast("B")
    n8 = len(mv) & ~7
    for (word,) in struct.iter_unpack("<Q", mv[:n8]):
        c = crc ^ word
        crc = (t7[c & 0xFF] ^ t6[(c >> 8) & 0xFF] ^ t5[(c >> 16) & 0xFF] ^ t4[(c >> 24) & 0xFF]
               ^ t3[(c >> 32) & 0xFF] ^ t2[(c >> 40) & 0xFF] ^ t1[(c >> 48) & 0xFF] ^ t0[c >> 56])
    for b in mv[n8:]:
        crc = t0[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc


# --- the RDB stream reader ----------------------------------------------------------------
class _Reader:
    """Reads RDB primitives from a buffer; any overrun is ``ERR Bad data format``."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.buf):
            raise RdbError(ERR_BAD_FORMAT)
        chunk = self.buf[self.pos:end]
        self.pos = end
        return chunk

    def byte(self) -> int:
        if self.pos >= len(self.buf):
            raise RdbError(ERR_BAD_FORMAT)
        b = self.buf[self.pos]
        self.pos += 1
        return b

    def length(self) -> tuple[int, bool]:
        """(value, is_encoded): ``rdbLoadLenByRef``."""
        b = self.byte()
        kind = b >> 6
        if kind == 0:
            return b & 0x3F, False
        if kind == 1:
            return ((b & 0x3F) << 8) | self.byte(), False
        if kind == 3:
            return b & 0x3F, True
        if b == 0x80:
            return int.from_bytes(self.take(4), "big"), False
        if b == 0x81:
            return int.from_bytes(self.take(8), "big"), False
        raise RdbError(ERR_BAD_FORMAT)

    def plain_length(self) -> int:
        n, encoded = self.length()
        if encoded:
            raise RdbError(ERR_BAD_FORMAT)
        return n

    def string(self) -> bytes:
        """``rdbGenericLoadStringObject``: raw, int-encoded or LZF."""
        n, encoded = self.length()
        if not encoded:
            return self.take(n)
        if n in _INT_ENC:
            size = _INT_ENC[n]
            return b"%d" % int.from_bytes(self.take(size), "little", signed=True)
        if n == 3:
            clen = self.plain_length()
            ulen = self.plain_length()
            return lzf_decompress(self.take(clen), ulen)
        raise RdbError(ERR_BAD_FORMAT)

    def binary_double(self) -> float:
        return float(struct.unpack("<d", self.take(8))[0])

    def legacy_double(self) -> float:
        """``rdbLoadDoubleValue``: 1 length byte, 253/254/255 = nan/+inf/-inf."""
        n = self.byte()
        special = {253: math.nan, 254: math.inf, 255: -math.inf}
        if n in special:
            return special[n]
        return _parse_score(self.take(n))


_INT_ENC = {0: 1, 1: 2, 2: 4}  # RDB_ENC_INT8/16/32 → byte width


def _parse_score(s: bytes) -> float:
    try:
        return float(s)
    except ValueError:
        raise RdbError(ERR_BAD_FORMAT) from None


# --- writers ------------------------------------------------------------------------------
def _len_bytes(n: int) -> bytes:
    if n < 1 << 6:
        return bytes((n,))
    if n < 1 << 14:
        return bytes((0x40 | (n >> 8), n & 0xFF))
    if n <= 0xFFFFFFFF:
        return b"\x80" + n.to_bytes(4, "big")
    return b"\x81" + n.to_bytes(8, "big")


# rdbcompression (the server's apply_config keeps it current): strings and blobs over 20 bytes
# are LZF-compressed as Redis compresses them. In pure Python (LZF at a few MB/s) only those
# up to PURE_LZF_MAX_BYTES are: a dense HyperLogLog (12,304 bytes), every listpack of the
# default encoding limits; larger ones are written as they are (still loadable everywhere).
LZF = {"on": True}
LZF_MIN_BYTES = 21  # "under 20 bytes it's unable to compress even aaaaaaaaaaaaaaaaaa"
PURE_LZF_MAX_BYTES = 32 * 1024
ENC_LZF = 0xC3  # RDB_ENC_LZF as a length byte: compressed length, original length, data


def _string_bytes(s: bytes, compress: bool = True) -> bytes:
    """``rdbSaveRawString``: small canonical ints use INT8/16/32; longer strings are written
    LZF-compressed when that saves 4 bytes or more (``compress`` and ``rdbcompression``)."""
    n = len(s)
    if n <= 11:
        v = strict_int(s)
        if v is not None:
            for code, size in _INT_ENC.items():
                lim = 1 << (size * 8 - 1)
                if -lim <= v < lim:
                    return bytes((0xC0 | code,)) + v.to_bytes(size, "little", signed=True)
    elif (n >= LZF_MIN_BYTES and compress and LZF["on"]
            and (lzf.COMPILED or n <= PURE_LZF_MAX_BYTES)):
        packed = lzf.lzf_compress(s, n - 4)
        if packed is not None:
            return bytes((ENC_LZF,)) + _len_bytes(len(packed)) + _len_bytes(n) + packed
    return _len_bytes(n) + s


# --- object encoders ----------------------------------------------------------------------
def _encode_string(v: bytes, lim: EncodingLimits) -> bytes:
    return bytes((T_STRING,)) + _string_bytes(v)


def _encode_list(v: list[bytes], lim: EncodingLimits) -> bytes:
    """A quicklist of listpack nodes, split the way ``list-max-listpack-size -2`` fills them
    (``LIST_NODE_OVERHEAD``)."""
    nodes: list[bytes] = []
    cur: list[bytes] = []
    cur_bytes = 0
    packed = _len_bytes(QUICKLIST_NODE_PACKED)
    for item in v:
        if len(item) >= lim.list_packed_threshold_bytes:
            if cur:
                nodes.append(packed + _string_bytes(listpack_from_entries(cur)))
                cur, cur_bytes = [], 0
            nodes.append(_len_bytes(QUICKLIST_NODE_PLAIN) + _string_bytes(item))
            continue
        entry = lp_entry(item)
        if cur and 7 + cur_bytes + len(item) + LIST_NODE_OVERHEAD > lim.list_node_max_bytes:
            nodes.append(packed + _string_bytes(listpack_from_entries(cur)))
            cur, cur_bytes = [], 0
        cur.append(entry)
        cur_bytes += len(entry)
    if cur:
        nodes.append(packed + _string_bytes(listpack_from_entries(cur)))
    return bytes((T_LIST_QUICKLIST_2,)) + _len_bytes(len(nodes)) + b"".join(nodes)


def _encode_set(v: set[bytes], lim: EncodingLimits) -> bytes:
    if len(v) <= lim.set_max_intset_entries:
        ints = [strict_int(m) for m in v]
        if all(i is not None for i in ints):
            blob = intset_encode([i for i in ints if i is not None])
            return bytes((T_SET_INTSET,)) + _string_bytes(blob)
    return bytes((T_SET,)) + _len_bytes(len(v)) + b"".join(_string_bytes(m) for m in v)


def _encode_hash(v: dict[bytes, bytes], lim: EncodingLimits) -> bytes:
    cap = lim.hash_max_listpack_value_bytes
    if len(v) <= lim.hash_max_listpack_entries and all(
            len(f) <= cap and len(x) <= cap for f, x in v.items()):
        blob = listpack_encode(s for pair in v.items() for s in pair)
        return bytes((T_HASH_LISTPACK,)) + _string_bytes(blob)
    body = b"".join(_string_bytes(f) + _string_bytes(x) for f, x in v.items())
    return bytes((T_HASH,)) + _len_bytes(len(v)) + body


def _score_text(score: float) -> bytes:
    """``d2string``: integral values (|x| < 2^52) print as integers, others as %.17g."""
    if math.isinf(score):
        return b"inf" if score > 0 else b"-inf"
    if score == 0:  # 7.0 stores -0 as the integer 0
        return b"0"
    if -4503599627370495 < score < 4503599627370496 and score == int(score):
        return b"%d" % int(score)
    return b"%.17g" % score


def _encode_zset(v: ZSet, lim: EncodingLimits) -> bytes:
    ordered = sorted(v, key=lambda ms: (ms[1], ms[0]))
    if len(v) <= lim.zset_max_listpack_entries and all(
            len(m) <= lim.zset_max_listpack_value_bytes for m, _ in v):
        blob = listpack_encode(s for m, sc in ordered for s in (m, _score_text(sc)))
        return bytes((T_ZSET_LISTPACK,)) + _string_bytes(blob)
    # Redis writes the skiplist from the greatest element down.
    body = b"".join(_string_bytes(m) + struct.pack("<d", sc) for m, sc in reversed(ordered))
    return bytes((T_ZSET_2,)) + _len_bytes(len(v)) + body


_ENCODERS: dict[str, Callable[..., bytes]] = {
    "string": _encode_string, "list": _encode_list, "set": _encode_set,
    "hash": _encode_hash, "zset": _encode_zset,
}


def register_codec(kind: str, encoder: Callable[..., bytes],
                   decoders: dict[int, Callable[[_Reader], object]]) -> None:
    """A type whose RDB form lives with the type (streams): its encoder (the value model is
    its own class) and its decoders by RDB type byte."""
    _ENCODERS[kind] = encoder
    for code, fn in decoders.items():
        _DECODERS[code] = (kind, fn)  # type: ignore[assignment]


def encode_object(kind: str, value: Value, limits: EncodingLimits = DEFAULT_LIMITS) -> bytes:
    """The RDB type byte and object body (``rdbSaveObjectType`` + ``rdbSaveObject``)."""
    return _ENCODERS[kind](value, limits)


def dump(kind: str, value: Value, limits: EncodingLimits = DEFAULT_LIMITS) -> bytes:
    """A complete DUMP payload for a value of ``kind`` (see the module doc for the model)."""
    body = encode_object(kind, value, limits) + RDB_VERSION.to_bytes(2, "little")
    return body + crc64(body).to_bytes(8, "little")


# --- object decoders ----------------------------------------------------------------------
def _nonempty(n: int) -> int:
    if n == 0:  # Redis refuses empty collections (RDB_LOAD_ERR_EMPTY_KEY)
        raise RdbError(ERR_BAD_FORMAT)
    return n


def _pairs(items: list[bytes]) -> list[tuple[bytes, bytes]]:
    if not items or len(items) % 2:
        raise RdbError(ERR_BAD_FORMAT)
    return list(zip(items[0::2], items[1::2], strict=True))


def _to_hash(pairs: Iterable[tuple[bytes, bytes]]) -> dict[bytes, bytes]:
    out: dict[bytes, bytes] = {}
    for f, x in pairs:
        if f in out:
            raise RdbError(ERR_BAD_FORMAT)
        out[f] = x
    return out


def _to_set(members: Iterable[bytes]) -> set[bytes]:
    out: set[bytes] = set()
    for m in members:
        if m in out:
            raise RdbError(ERR_BAD_FORMAT)
        out.add(m)
    return out


def _to_zset(pairs: Iterable[tuple[bytes, float]]) -> ZSet:
    seen: set[bytes] = set()
    out: ZSet = []
    for m, sc in pairs:
        if m in seen or math.isnan(sc):
            raise RdbError(ERR_BAD_FORMAT)
        seen.add(m)
        out.append((m, sc))
    out.sort(key=lambda ms: (ms[1], ms[0]))
    return out


def _d_list(r: _Reader) -> list[bytes]:
    return [r.string() for _ in range(_nonempty(r.plain_length()))]


def _d_list_ziplist(r: _Reader) -> list[bytes]:
    items = ziplist_decode(r.string())
    _nonempty(len(items))
    return items


def _d_quicklist(r: _Reader) -> list[bytes]:
    out: list[bytes] = []
    for _ in range(_nonempty(r.plain_length())):
        out += ziplist_decode(r.string())
    _nonempty(len(out))
    return out


def _d_quicklist_2(r: _Reader) -> list[bytes]:
    out: list[bytes] = []
    for _ in range(_nonempty(r.plain_length())):
        container = r.plain_length()
        if container == QUICKLIST_NODE_PLAIN:
            out.append(r.string())
        elif container == QUICKLIST_NODE_PACKED:
            out += listpack_decode(r.string())  # an empty node is skipped, as Redis does
        else:
            raise RdbError(ERR_BAD_FORMAT)
    _nonempty(len(out))
    return out


def _d_set(r: _Reader) -> set[bytes]:
    return _to_set(r.string() for _ in range(_nonempty(r.plain_length())))


def _d_set_intset(r: _Reader) -> set[bytes]:
    return _to_set(intset_decode(r.string()))


def _d_hash(r: _Reader) -> dict[bytes, bytes]:
    return _to_hash((r.string(), r.string()) for _ in range(_nonempty(r.plain_length())))


def _d_hash_blob(decode: Callable[[bytes], list[bytes]]) -> Callable[[_Reader], dict]:
    return lambda r: _to_hash(_pairs(decode(r.string())))


def _d_zset(r: _Reader) -> ZSet:
    return _to_zset((r.string(), r.legacy_double()) for _ in range(_nonempty(r.plain_length())))


def _d_zset_2(r: _Reader) -> ZSet:
    return _to_zset((r.string(), r.binary_double()) for _ in range(_nonempty(r.plain_length())))


def _d_zset_blob(decode: Callable[[bytes], list[bytes]]) -> Callable[[_Reader], ZSet]:
    return lambda r: _to_zset((m, _parse_score(s)) for m, s in _pairs(decode(r.string())))


_DECODERS: dict[int, tuple[str, Callable[[_Reader], Value]]] = {
    T_STRING: ("string", _Reader.string),
    T_LIST: ("list", _d_list),
    T_LIST_ZIPLIST: ("list", _d_list_ziplist),
    T_LIST_QUICKLIST: ("list", _d_quicklist),
    T_LIST_QUICKLIST_2: ("list", _d_quicklist_2),
    T_SET: ("set", _d_set),
    T_SET_INTSET: ("set", _d_set_intset),
    T_HASH: ("hash", _d_hash),
    T_HASH_ZIPMAP: ("hash", _d_hash_blob(zipmap_decode)),
    T_HASH_ZIPLIST: ("hash", _d_hash_blob(ziplist_decode)),
    T_HASH_LISTPACK: ("hash", _d_hash_blob(listpack_decode)),
    T_ZSET: ("zset", _d_zset),
    T_ZSET_2: ("zset", _d_zset_2),
    T_ZSET_ZIPLIST: ("zset", _d_zset_blob(ziplist_decode)),
    T_ZSET_LISTPACK: ("zset", _d_zset_blob(listpack_decode)),
}


def check_footer(payload: bytes, *, check_crc: bool = True) -> None:
    """``verifyDumpPayload``: length, RDB version (≤ ours) and CRC64 (unless ``check_crc`` is
    off: DEBUG SET-SKIP-CHECKSUM-VALIDATION)."""
    if len(payload) < 10:
        raise RdbError(ERR_FOOTER)
    version = int.from_bytes(payload[-10:-8], "little")
    if version > RDB_VERSION:
        raise RdbError(ERR_FOOTER)
    if check_crc and crc64(memoryview(payload)[:-8]) != int.from_bytes(payload[-8:], "little"):
        raise RdbError(ERR_FOOTER)


def load(payload: bytes, *, verify: bool = True, check_crc: bool = True) -> tuple[str, Value]:
    """Decode a DUMP payload into ``(kind, value)``; raises RdbError with Redis' reply text."""
    if verify:
        check_footer(payload, check_crc=check_crc)
    r = _Reader(bytes(payload))
    entry = _DECODERS.get(r.byte())
    if entry is None:
        raise RdbError(ERR_BAD_FORMAT)
    kind, decode = entry
    return kind, decode(r)


# --- function libraries (FUNCTION DUMP / RESTORE, snapshots) ------------------------------
OP_FUNCTION2 = 0xF5  # RDB_OPCODE_FUNCTION2: the library's code as one string
OP_FUNCTION_PRE_GA = 0xF6  # 7.0 release candidates: name, engine, description, code
ERR_NOT_FUNCTION = "ERR given type is not a function"
ERR_LIBRARY_PAYLOAD = "ERR Failed loading library payload"
_PRE_GA_FIELDS = ("ERR Failed loading library name", "ERR Failed loading engine name")


def function_record(code: bytes) -> bytes:
    """One library as ``rdbSaveFunctions`` writes it (the code LZF-compressed as any string)."""
    return bytes((OP_FUNCTION2,)) + _string_bytes(code)


def dump_functions(codes: Iterable[bytes]) -> bytes:
    """The FUNCTION DUMP payload of libraries with these codes, in this order."""
    body = b"".join(function_record(code) for code in codes) + RDB_VERSION.to_bytes(2, "little")
    return body + crc64(body).to_bytes(8, "little")


def _field(r: _Reader, err: str) -> bytes:
    try:
        return r.string()
    except RdbError:
        raise RdbError(err) from None


def iter_functions(payload: bytes) -> Iterator[bytes]:
    """The library codes of a FUNCTION RESTORE payload, read as ``functionRestoreCommand``
    does (footer first, then records until 10 bytes remain); RdbError with Redis' text."""
    check_footer(payload)
    r = _Reader(bytes(payload))
    while len(payload) - r.pos > 10:
        op = r.byte()
        if op == OP_FUNCTION_PRE_GA:  # rewritten into a GA library: "#!<engine> name=<name>"
            name, engine = (_field(r, err) for err in _PRE_GA_FIELDS)
            try:
                has_desc = r.plain_length()
            except RdbError:
                raise RdbError("ERR Failed loading library description indicator") from None
            if has_desc:
                _field(r, "ERR Failed loading library description")
            blob = _field(r, "ERR Failed loading library blob")
            yield b"#!%s name=%s\n%s" % (engine, name, blob)
            continue
        if op != OP_FUNCTION2:
            raise RdbError(ERR_NOT_FUNCTION)
        yield _field(r, ERR_LIBRARY_PAYLOAD)
