"""What the value types' commands share, with Redis 7.0's exact error texts: a type's typed
lookups (strings included), argument parsing, Redis' index arithmetic, the member removal loop
of HDEL/SREM/ZREM, HRANDFIELD/ZRANDMEMBER's choice, reply helpers, DEBUG DIGEST mixing, and the
scan cursors of HSCAN/SSCAN/ZSCAN and SCAN. The blocking pops' scaffolding is in blocking.py."""

from __future__ import annotations

import hashlib
import random
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from slotgate.node.commands.util import LONG_MAX, parse_int
from slotgate.node.core.errors import INVALID_CURSOR, NOT_INTEGER, SYNTAX, WRONGTYPE, CommandError
from slotgate.node.core.glob import compile_glob
from slotgate.node.core.keyspace import NOTIFY_GENERIC

if TYPE_CHECKING:
    from slotgate.node.core.client import Client
    from slotgate.node.core.keyspace import Database

V = TypeVar("V")

MUST_BE_POSITIVE = "ERR value is out of range, must be positive"
NUMKEYS_POSITIVE = "ERR numkeys should be greater than 0"
COUNT_POSITIVE = "ERR count should be greater than 0"
OUT_OF_RANGE = "ERR value is out of range"


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


def index_range(start: int, end: int, n: int) -> tuple[int, int] | None:
    """The inclusive index range of LRANGE, LTRIM, ZRANGE and ZREMRANGEBYRANK over ``n``
    items, as Redis computes it: a negative index counts from the end, ``start`` is clamped to
    0 and ``end`` to n - 1; None when the range is empty."""
    if start < 0:
        start += n
    if end < 0:
        end += n
    if start < 0:
        start = 0
    if start > end or start >= n:
        return None
    if end >= n:
        end = n - 1
    return start, end


def parse_random_count(argv: list[bytes], with_word: bytes) -> tuple[int, bool]:
    """HRANDFIELD/ZRANDMEMBER ``key count [WITHVALUES|WITHSCORES]`` -> (count, whether
    ``with_word`` was given), checked in Redis' order: the count, the word, then a count whose
    doubled reply would not fit."""
    n = parse_range(argv[2], -LONG_MAX, LONG_MAX)
    if len(argv) > 4 or (len(argv) == 4 and argv[3].lower() != with_word):
        raise CommandError(SYNTAX)
    with_it = len(argv) == 4
    if with_it and (n < -(LONG_MAX // 2) or n > LONG_MAX // 2):
        raise CommandError(OUT_OF_RANGE)
    return n, with_it


# A negative count repeats members, and Redis emits every one of them (SRANDMEMBER with a count
# of -2**62 keeps redis-server busy for ever): ours refuses more picks than this, so that one
# reply stays within a tenth of a second of work or so (docs/COMPATIBILITY.md).
RANDOM_PICKS_MAX = 200_000
TOO_MANY_PICKS = (f"ERR count is out of range: this server returns at most {RANDOM_PICKS_MAX} "
                  "members with repetitions")


def check_picks(n: int) -> None:
    """SRANDMEMBER/ZRANDMEMBER/HRANDFIELD: refuse a negative count beyond RANDOM_PICKS_MAX."""
    if n < -RANDOM_PICKS_MAX:
        raise CommandError(TOO_MANY_PICKS)


def random_positions(size: int, n: int, hashtable: bool) -> list[int]:
    """Positions out of ``size`` for a HRANDFIELD/ZRANDMEMBER count ``n`` (non-zero, below
    ``size``): for n < 0, -n uniform picks with repetition; else n distinct positions in order,
    shuffled for a count of 1 or a ``hashtable`` (skiplist) encoding, as Redis' reply is."""
    if n < 0:
        check_picks(n)
        return random.choices(range(size), k=-n)
    picked = sorted(random.sample(range(size), n))
    if n == 1 or hashtable:
        random.shuffle(picked)
    return picked


def delete_emptied(db: Database, key: bytes) -> None:
    """A collection's last element went: the key goes too (keys never hold empty
    collections), with the ``del`` event Redis sends then."""
    db.delete(key)
    db.notify(NOTIFY_GENERIC, b"del", key)


def remove_members(c: Client, argv: list[bytes], get: Callable[[Database, bytes], V | None],
                   remove: Callable[[V, bytes], object], event_class: int, event: bytes) -> bytes:
    """``HDEL key field [field ...]`` (SREM, ZREM): ``remove(value, member)`` is true when it
    removed the member; the reply counts them. An emptied value stops the loop and its key is
    deleted."""
    db = c.db
    key = argv[1]
    v = get(db, key)
    if v is None:
        return b":0\r\n"
    removed = 0
    for m in argv[2:]:
        if remove(v, m):
            removed += 1
            if not v:
                break
    if removed:
        db.modified(key)
        db.notify(event_class, event, key)
        if not v:
            delete_emptied(db, key)
        c.ks.dirty += removed
    return b":%d\r\n" % removed


_HDR = [b"$%d" % n for n in range(1024)]  # bulk headers of short strings, precomputed


def bulks(items: Iterable[bytes]) -> bytes:
    """An array reply of bulk strings from an iterable of bytes (the hot path of LRANGE and
    friends: headers come from a table and everything is joined once)."""
    seq = items if isinstance(items, (list, tuple)) else list(items)
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


# --- SCAN, HSCAN, SSCAN, ZSCAN --------------------------------------------------------------

EMPTY_SCAN = b"*2\r\n$1\r\n0\r\n*0\r\n"
Match = Callable[[bytes], bool]  # a MATCH pattern's test (Glob.matches)


def parse_cursor(arg: bytes) -> int:
    """parseScanCursorOrReply (strtoul): optional sign, decimal digits, unsigned 64-bit; a
    negative number wraps like strtoul's, and an empty argument is cursor 0. The argument is
    read as a C string: a NUL byte ends it."""
    arg = arg.partition(b"\0")[0]
    if not arg:
        return 0
    digits = arg[1:] if arg[:1] in (b"+", b"-") else arg
    if not digits.isdigit():
        raise CommandError(INVALID_CURSOR)
    n = int(digits)
    if n > 2**64 - 1:
        raise CommandError(INVALID_CURSOR)
    return (2**64 - n) % 2**64 if arg[:1] == b"-" else n


def parse_scan_opts(argv: list[bytes], start: int, allow_type: bool = False
                    ) -> tuple[int, Match | None, bytes | None]:
    """``[MATCH pattern] [COUNT n]`` (and ``[TYPE t]`` where ``allow_type``: SCAN's) from
    ``argv[start]`` on -> (count, match function or None, lower-cased type or None)."""
    count = 10
    pattern: bytes | None = None
    type_filter: bytes | None = None
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
        elif opt == b"type" and i + 1 < n and allow_type:
            type_filter = argv[i + 1].lower()
        else:
            raise CommandError(SYNTAX)
        i += 2
    if pattern is None or pattern == b"*":
        return count, None, type_filter
    return count, compile_glob(pattern).matches, type_filter


class Snapshots:
    """Point-in-time copies of what a scan walks, so that every item present during the whole
    scan is returned exactly once. A cursor is ``snapshot id << 32 | position``; an owner (a
    db for SCAN) keeps its ids apart from another's. At most ``limit`` snapshots are kept, the
    least recently used dropped first. Both methods answer (next cursor, up to ``count``
    items); the last page answers cursor 0 and forgets its snapshot."""

    def __init__(self, limit: int = 64) -> None:
        self.limit = limit
        self._snaps: OrderedDict[tuple[int, int], list[Any]] = OrderedDict()
        self._next_id = 1

    def start(self, owner: int, count: int, items_of: Callable[[], list[Any]]
              ) -> tuple[int, list[Any]]:
        """Cursor 0: snapshot ``items_of()`` and answer its first page."""
        snaps = self._snaps
        snap_id = self._next_id
        self._next_id = snap_id % 0xFFFFFFF + 1
        snaps[(owner, snap_id)] = items_of()
        while len(snaps) > self.limit:
            snaps.popitem(last=False)
        return self._page(owner, snap_id, 0, count)

    def resume(self, owner: int, cursor: int, count: int) -> tuple[int, list[Any]] | None:
        """The page at a non-zero ``cursor``; None when its snapshot is unknown (never handed
        out, or dropped)."""
        snap_id = cursor >> 32
        if (owner, snap_id) not in self._snaps:
            return None
        self._snaps.move_to_end((owner, snap_id))
        return self._page(owner, snap_id, cursor & 0xFFFFFFFF, count)

    def _page(self, owner: int, snap_id: int, pos: int, count: int) -> tuple[int, list[Any]]:
        snap = self._snaps[(owner, snap_id)]
        page = snap[pos : pos + count]
        nxt = pos + len(page)
        if nxt >= len(snap):
            del self._snaps[(owner, snap_id)]
            return 0, page
        return (snap_id << 32) | nxt, page


_COLLECTION_SNAPSHOTS = Snapshots()


def scan_items(cursor: int, count: int, big: bool, items_of: Callable[[], list[Any]]
               ) -> tuple[int, list[Any]]:
    """(next cursor, items) of a collection: a small one (listpack or intset encoded) whole,
    cursor 0, in one call as Redis does; a big one a page at a time from a snapshot taken at
    cursor 0 (an unknown cursor starts a new scan)."""
    if not big:
        return 0, items_of()
    snaps = _COLLECTION_SNAPSHOTS
    served = snaps.resume(0, cursor, count) if cursor else None
    return served if served is not None else snaps.start(0, count, items_of)


def collection_scan(c: Client, argv: list[bytes], get_read: Callable[[Database, bytes], V | None],
                    page: Callable[[V, int, int, Match | None], tuple[int, list[bytes]]]) -> bytes:
    """``HSCAN key cursor [MATCH pattern] [COUNT count]`` (SSCAN, ZSCAN): Redis' checks in its
    order (the cursor, the key's type, then the options, which a missing key never reaches);
    ``page(value, cursor, count, match)`` -> (next cursor, the reply's flat items)."""
    cursor = parse_cursor(argv[2])
    v = get_read(c.db, argv[1])
    if v is None:
        return EMPTY_SCAN
    count, match, _ = parse_scan_opts(argv, 3)
    nxt, flat = page(v, cursor, count, match)
    return scan_reply(nxt, flat)


def scan_reply(cursor: int, flat: list[bytes]) -> bytes:
    cur = b"%d" % cursor
    return b"*2\r\n$%d\r\n%s\r\n%s" % (len(cur), cur, bulks(flat))
