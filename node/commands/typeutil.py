"""Argument parsing and reply helpers shared by the collection types (lists, hashes, sets,
sorted sets), with Redis 7.0's exact error texts."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from node.commands.util import LONG_MAX, parse_int
from node.errors import INVALID_CURSOR, NOT_INTEGER, SYNTAX, WRONGTYPE, CommandError
from node.glob import compile_glob

if TYPE_CHECKING:
    from node.keyspace import Database

V = TypeVar("V")

MUST_BE_POSITIVE = "ERR value is out of range, must be positive"
NUMKEYS_POSITIVE = "ERR numkeys should be greater than 0"
COUNT_POSITIVE = "ERR count should be greater than 0"


def parse_positive(arg: bytes, err: str = MUST_BE_POSITIVE) -> int:
    """getPositiveLongFromObjectOrReply: 0..LONG_MAX; any failure answers ``err``."""
    try:
        n = parse_int(arg)
    except CommandError:
        raise CommandError(err) from None
    if n < 0:
        raise CommandError(err)
    return n


def parse_range(arg: bytes, lo: int, hi: int, err: str | None = None) -> int:
    """getRangeLongFromObjectOrReply: with ``err`` every failure answers it, without it a
    non-integer is NOT_INTEGER and an out-of-range value names the bounds."""
    try:
        n = parse_int(arg)
    except CommandError:
        raise CommandError(err or NOT_INTEGER) from None
    if not lo <= n <= hi:
        raise CommandError(err or f"ERR value is out of range, value must between {lo} and {hi}")
    return n


def parse_numkeys(argv: list[bytes], idx: int) -> int:
    """The numkeys of LMPOP/ZMPOP-like commands (1..LONG_MAX)."""
    return parse_range(argv[idx], 1, LONG_MAX, NUMKEYS_POSITIVE)


def typed_lookups(kind: type[V]) -> tuple[Callable[[Database, bytes], V | None],
                                          Callable[[Database, bytes], V | None]]:
    """A value type's two lookups, (get, get_read): the value at ``key``, None when the key is
    missing, WRONGTYPE when it holds another type. ``get`` looks up as a write does
    (``db.lookup``), ``get_read`` as a read does (``db.lookup_read``: hit/miss stats)."""

    def get(db: Database, key: bytes) -> V | None:
        v = db.lookup(key)
        if v is not None and type(v) is not kind:
            raise CommandError(WRONGTYPE)
        return v

    def get_read(db: Database, key: bytes) -> V | None:
        v = db.lookup_read(key)
        if v is not None and type(v) is not kind:
            raise CommandError(WRONGTYPE)
        return v

    return get, get_read


_HDR = [b"$%d" % n for n in range(1024)]  # bulk headers of short strings, precomputed


def bulks(items: Iterable[bytes]) -> bytes:
    """An array reply of bulk strings from an iterable of bytes (the hot path of LRANGE and
    friends: headers come from a table and everything is joined once)."""
    seq = items if isinstance(items, list) else list(items)
    n = len(seq)
    if not n:
        return b"*0\r\n"
    hdr = _HDR
    out: list[bytes] = [b""] * (2 * n)
    out[1::2] = seq
    out[0::2] = [hdr[len(x)] if len(x) < 1024 else b"$%d" % len(x) for x in seq]
    return b"*%d\r\n" % n + b"\r\n".join(out) + b"\r\n"


# --- DEBUG DIGEST-VALUE (debug.c: xorDigest / mixDigest over SHA1) ---------------------------


def _sha1(data: bytes) -> bytes:
    return hashlib.sha1(data).digest()


def xor_digest(digest: bytearray, data: bytes) -> None:
    h = _sha1(data)
    for i in range(20):
        digest[i] ^= h[i]


def mix_digest(digest: bytearray, data: bytes) -> None:
    xor_digest(digest, data)
    digest[:] = _sha1(bytes(digest))


# --- HSCAN / SSCAN / ZSCAN -----------------------------------------------------------------

EMPTY_SCAN = b"*2\r\n$1\r\n0\r\n*0\r\n"
_SNAPSHOT_LIMIT = 64
_snapshots: OrderedDict[int, list[Any]] = OrderedDict()
_next_snapshot = [1]


def parse_cursor(arg: bytes) -> int:
    """parseScanCursorOrReply (strtoul): optional sign, decimal digits, unsigned 64-bit; a
    negative number wraps like strtoul's, and an empty argument is cursor 0."""
    if not arg:
        return 0
    digits = arg[1:] if arg[:1] in (b"+", b"-") else arg
    if not digits.isdigit():
        raise CommandError(INVALID_CURSOR)
    n = int(digits)
    if n > 2**64 - 1:
        raise CommandError(INVALID_CURSOR)
    return (2**64 - n) % 2**64 if arg[:1] == b"-" else n


def parse_scan_opts(argv: list[bytes], start: int) -> tuple[int, Callable[[bytes], Any] | None]:
    """``[MATCH pattern] [COUNT n]`` of a collection SCAN -> (count, match function or None)."""
    count = 10
    pattern: bytes | None = None
    i = start
    n = len(argv)
    while i < n:
        opt = argv[i].lower()
        if opt == b"count" and i + 1 < n:
            count = parse_int(argv[i + 1])
            if count < 1:
                raise CommandError(SYNTAX)
        elif opt == b"match" and i + 1 < n:
            pattern = argv[i + 1]
        else:
            raise CommandError(SYNTAX)
        i += 2
    if pattern is None or pattern == b"*":
        return count, None
    return count, compile_glob(pattern).fullmatch


def scan_snapshot(cursor: int, count: int, items_of: Callable[[], list[Any]]) -> tuple[int, list[Any]]:
    """A page of a large collection: cursor 0 snapshots the items, so every item present
    during the whole scan is returned (exactly once). Returns (next cursor, page)."""
    snap_id, pos = cursor >> 32, cursor & 0xFFFFFFFF
    snap = _snapshots.get(snap_id) if cursor else None
    if snap is None:
        snap_id = _next_snapshot[0]
        _next_snapshot[0] = snap_id % 0xFFFFFFF + 1
        snap = items_of()
        pos = 0
        _snapshots[snap_id] = snap
        while len(_snapshots) > _SNAPSHOT_LIMIT:
            _snapshots.popitem(last=False)
    else:
        _snapshots.move_to_end(snap_id)
    page = snap[pos : pos + count]
    nxt = pos + len(page)
    if nxt >= len(snap):
        _snapshots.pop(snap_id, None)
        return 0, page
    return (snap_id << 32) | nxt, page


def scan_reply(cursor: int, flat: list[bytes]) -> bytes:
    cur = b"%d" % cursor
    return b"*2\r\n$%d\r\n%s\r\n%s" % (len(cur), cur, bulks(flat))
