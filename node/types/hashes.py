"""Hash commands: HSET HSETNX HGET HMSET HMGET HDEL HLEN HSTRLEN HEXISTS HKEYS HVALS HGETALL
HINCRBY HINCRBYFLOAT HRANDFIELD HSCAN.

A hash is an ``RHash`` (a ``dict`` subclass, insertion ordered like Redis' listpack). ``ht``
records whether Redis would have converted it to a hashtable (more than
``hash-max-listpack-entries`` fields, or a field/value longer than
``hash-max-listpack-value``); like Redis the conversion is one-way. While small, field order,
HSCAN (everything in one call, cursor 0) and OBJECT ENCODING match Redis exactly.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from mypy_extensions import mypyc_attr

from slotgate.node.commands.registry import command
from slotgate.node.commands.replies import EMPTY_ARRAY, OK, ONE, ZERO
from slotgate.node.commands.util import LONG_MAX, LONG_MIN, parse_int
from slotgate.node.core.errors import NOT_FLOAT, OVERFLOW, WRONGTYPE, CommandError, wrong_args
from slotgate.node.core.keyspace import NOTIFY_HASH, register_type
from slotgate.node.types.strings import parse_long_double
from slotgate.node.types.typeutil import (
    Match,
    bulks,
    collection_scan,
    mix_digest,
    parse_random_count,
    random_positions,
    remove_members,
    scan_items,
    typed_lookups,
    xor_digest,
)
from slotgate.protocol.resp import format_long_double

if TYPE_CHECKING:
    from slotgate.node.core.client import Client

HASH_NOT_INTEGER = "ERR hash value is not an integer"
HASH_NOT_FLOAT = "ERR hash value is not a float"
NAN_OR_INF = "ERR value is NaN or Infinity"
WOULD_BE_NAN_OR_INF = "ERR increment would produce NaN or Infinity"

# hash-max-listpack-entries / -value for RESTORE and RDB loading (no client at hand); kept
# current by set_limits, which the server's apply_config calls after start and CONFIG SET.
# Commands read the same pair from ``server.hash_max_listpack``.
LIMITS = {"entries": 512, "value": 64}


def set_limits(entries: int, value: int) -> tuple[int, int]:
    """The listpack limits changed: RESTORE and RDB loading use them from now on."""
    LIMITS["entries"] = entries
    LIMITS["value"] = value
    return entries, value


@mypyc_attr(native_class=False)  # compiled: a subclass of a builtin stays a Python class
class RHash(dict):  # type: ignore[type-arg]
    """A hash value; ``ht`` is True once Redis would use the hashtable encoding."""

    __slots__ = ("ht",)

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.ht = False


def _limits(c: Client) -> tuple[int, int]:
    """(hash-max-listpack-entries, hash-max-listpack-value) as of the last CONFIG SET."""
    return c.server.hash_max_listpack


def _check_lengths(h: RHash, args: list[bytes], max_value: int) -> None:
    """hashTypeTryConversion: any field or value longer than the limit converts."""
    if not h.ht:
        for a in args:
            if len(a) > max_value:
                h.ht = True
                return


def _copy(h: RHash) -> RHash:
    n = RHash(h)
    n.ht = h.ht
    return n


def _digest(h: RHash) -> bytes:
    d = bytearray(20)
    for f, v in h.items():
        e = bytearray(20)
        mix_digest(e, f)
        mix_digest(e, v)
        xor_digest(d, bytes(e))
    return bytes(d)


register_type(RHash, b"hash", lambda h: b"hashtable" if h.ht else b"listpack", _digest, _copy)


def _from_rdb(d: dict[bytes, bytes]) -> RHash:
    h = RHash(d)
    h.ht = len(h) > LIMITS["entries"] or any(
        len(k) > LIMITS["value"] or len(v) > LIMITS["value"] for k, v in h.items())
    return h


def rdb_adapters() -> list[tuple[type, str, Callable[..., object], Callable[..., object]]]:
    """DUMP/RESTORE: a hash travels as ``dict[bytes, bytes]``."""
    return [(RHash, "hash", dict, _from_rdb)]


_get, _get_read = typed_lookups(RHash)


def _get_or_create(c: Client, key: bytes) -> RHash:
    db = c.db
    h = db.lookup(key)
    if h is None:
        h = RHash()
        db.set(key, h)
    elif type(h) is not RHash:
        raise CommandError(WRONGTYPE)
    return h


def _wrong_args(argv: list[bytes]) -> CommandError:
    return CommandError(wrong_args(argv[0].decode("utf-8", "replace").lower()))


def _bulk(x: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(x), x)


# --- writes ---------------------------------------------------------------------------------


def _hset(c: Client, argv: list[bytes]) -> int:
    n = len(argv)
    if n % 2:
        raise _wrong_args(argv)
    db = c.db
    key = argv[1]
    if db.expires:
        h = db.lookup(key)
    else:
        h = db.data.get(key)
        if h is not None:
            db.touch(key)
    if h is None:
        h = RHash()
        created = True
    elif type(h) is RHash:
        created = False
    else:
        raise CommandError(WRONGTYPE)
    max_entries, max_value = c.server.hash_max_listpack
    before = len(h)
    if n == 4:  # one field: the common case, without the loops
        field = argv[2]
        value = argv[3]
        if not h.ht and (len(field) > max_value or len(value) > max_value):
            h.ht = True
        h[field] = value
    else:
        _check_lengths(h, argv[2:], max_value)
        for i in range(2, n, 2):
            h[argv[i]] = argv[i + 1]
    if len(h) > max_entries:
        h.ht = True
    if created:
        db.set(key, h)
    elif db.watched:
        db.touch_watched(key)  # db.modified(key)
    ks = c.ks
    if ks.notify_flags:
        db.notify(NOTIFY_HASH, b"hset", key)
    ks.dirty += (n - 2) // 2
    return len(h) - before


@command("hset")
def hset(c: Client, argv: list[bytes]) -> bytes:
    db = c.db
    if len(argv) == 4 and not (db.expires or db.watched or db.invalidator):
        # The hot path, what _hset comes down to for one field of an existing hash when the
        # db has no TTL to check and no WATCH to touch (the limits as of the last CONFIG SET).
        key = argv[1]
        h = db.data.get(key)
        if type(h) is RHash:
            db.touch(key)
            field = argv[2]
            value = argv[3]
            max_entries, max_value = c.server.hash_max_listpack
            if not h.ht and (len(field) > max_value or len(value) > max_value):
                h.ht = True
            before = len(h)
            h[field] = value
            after = len(h)
            if after > max_entries:
                h.ht = True
            ks = c.ks
            if ks.notify_flags:
                db.notify(NOTIFY_HASH, b"hset", key)
            ks.dirty += 1
            return ZERO if after == before else ONE
    added = _hset(c, argv)
    return ZERO if added == 0 else ONE if added == 1 else b":%d\r\n" % added


@command("hmset")
def hmset(c: Client, argv: list[bytes]) -> bytes:
    _hset(c, argv)
    return OK


@command("hsetnx")
def hsetnx(c: Client, argv: list[bytes]) -> bytes:
    h = _get_or_create(c, argv[1])
    max_entries, max_value = _limits(c)
    _check_lengths(h, argv[2:4], max_value)
    if argv[2] in h:
        return ZERO
    h[argv[2]] = argv[3]
    if len(h) > max_entries:
        h.ht = True
    db = c.db
    db.modified(argv[1])
    db.notify(NOTIFY_HASH, b"hset", argv[1])
    c.ks.dirty += 1
    return ONE


def _hdel_one(h: RHash, field: bytes) -> bool:
    return h.pop(field, None) is not None


@command("hdel")
def hdel(c: Client, argv: list[bytes]) -> bytes:
    return remove_members(c, argv, _get, _hdel_one, NOTIFY_HASH, b"hdel")


def _store_number(c: Client, h: RHash, key: bytes, field: bytes, text: bytes, event: bytes
                  ) -> None:
    """HINCRBY/HINCRBYFLOAT: the new number's text into ``field``, the encoding converted as
    Redis would, the change signalled and counted."""
    h[field] = text
    max_entries, max_value = _limits(c)
    _check_lengths(h, [field, text], max_value)
    if len(h) > max_entries:
        h.ht = True
    db = c.db
    db.modified(key)
    db.notify(NOTIFY_HASH, event, key)
    c.ks.dirty += 1


@command("hincrby")
def hincrby(c: Client, argv: list[bytes]) -> bytes:
    incr = parse_int(argv[3])
    key, field = argv[1], argv[2]
    h = _get_or_create(c, key)
    old = h.get(field)
    if old is None:
        cur = 0
    else:
        try:
            cur = parse_int(old)
        except CommandError:
            raise CommandError(HASH_NOT_INTEGER) from None
    new = cur + incr
    if not LONG_MIN <= new <= LONG_MAX:
        raise CommandError(OVERFLOW)
    _store_number(c, h, key, field, b"%d" % new, b"hincrby")
    return b":%d\r\n" % new


@command("hincrbyfloat")
def hincrbyfloat(c: Client, argv: list[bytes]) -> bytes:
    incr = parse_long_double(argv[3], NOT_FLOAT)
    if isinstance(incr, float):
        raise CommandError(NAN_OR_INF)
    key, field = argv[1], argv[2]
    h = _get_or_create(c, key)
    old = h.get(field)
    cur = parse_long_double(old, HASH_NOT_FLOAT) if old is not None else Fraction(0)
    if isinstance(cur, float):
        raise CommandError(WOULD_BE_NAN_OR_INF)
    try:
        text = format_long_double(cur + incr)
    except OverflowError:
        raise CommandError(WOULD_BE_NAN_OR_INF) from None
    _store_number(c, h, key, field, text, b"hincrbyfloat")
    c.propagate_as = [[b"HSET", key, field, text]]
    return _bulk(text)


# --- reads ----------------------------------------------------------------------------------


@command("hget")
def hget(c: Client, argv: list[bytes]) -> bytes:
    h = _get_read(c.db, argv[1])
    if h is None:
        return c.null_bulk
    v = h.get(argv[2])
    return c.null_bulk if v is None else b"$%d\r\n%s\r\n" % (len(v), v)


@command("hmget")
def hmget(c: Client, argv: list[bytes]) -> bytes:
    h = _get_read(c.db, argv[1])
    fields = argv[2:]
    if h is None:
        return b"*%d\r\n" % len(fields) + c.null_bulk * len(fields)
    null = c.null_bulk
    out = [b"*%d\r\n" % len(fields)]
    for f in fields:
        v = h.get(f)
        out.append(null if v is None else b"$%d\r\n%s\r\n" % (len(v), v))
    return b"".join(out)


@command("hlen")
def hlen(c: Client, argv: list[bytes]) -> bytes:
    h = _get_read(c.db, argv[1])
    return b":%d\r\n" % (len(h) if h is not None else 0)


@command("hstrlen")
def hstrlen(c: Client, argv: list[bytes]) -> bytes:
    h = _get_read(c.db, argv[1])
    v = h.get(argv[2]) if h is not None else None
    return b":%d\r\n" % (len(v) if v is not None else 0)


@command("hexists")
def hexists(c: Client, argv: list[bytes]) -> bytes:
    h = _get_read(c.db, argv[1])
    return ONE if h is not None and argv[2] in h else ZERO


@command("hkeys")
def hkeys(c: Client, argv: list[bytes]) -> bytes:
    h = _get_read(c.db, argv[1])
    return EMPTY_ARRAY if h is None else bulks(h.keys())


@command("hvals")
def hvals(c: Client, argv: list[bytes]) -> bytes:
    h = _get_read(c.db, argv[1])
    return EMPTY_ARRAY if h is None else bulks(h.values())


@command("hgetall")
def hgetall(c: Client, argv: list[bytes]) -> bytes:
    h = _get_read(c.db, argv[1])
    if h is None:
        return b"%0\r\n" if c.resp == 3 else EMPTY_ARRAY
    head = b"%%%d\r\n" % len(h) if c.resp == 3 else b"*%d\r\n" % (2 * len(h))
    return head + b"".join(
        [b"$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(f), f, len(v), v) for f, v in h.items()])


# --- HRANDFIELD -----------------------------------------------------------------------------


def _pairs_reply(c: Client, pairs: list[tuple[bytes, bytes]], withvalues: bool) -> bytes:
    if not withvalues:
        return bulks([f for f, _ in pairs])
    if c.resp == 3:
        return b"*%d\r\n" % len(pairs) + b"".join(
            b"*2\r\n" + _bulk(f) + _bulk(v) for f, v in pairs)
    return b"*%d\r\n" % (2 * len(pairs)) + b"".join(_bulk(f) + _bulk(v) for f, v in pairs)


@command("hrandfield")
def hrandfield(c: Client, argv: list[bytes]) -> bytes:
    if len(argv) == 2:
        h = _get_read(c.db, argv[1])
        if h is None:
            return c.null_bulk
        return _bulk(random.choice(list(h)))
    n, withvalues = parse_random_count(argv, b"withvalues")
    h = _get_read(c.db, argv[1])
    if h is None or n == 0:
        return EMPTY_ARRAY
    items = list(h.items())
    if n >= len(items):
        return _pairs_reply(c, items, withvalues)
    return _pairs_reply(c, [items[i] for i in random_positions(len(items), n, h.ht)], withvalues)


# --- HSCAN ----------------------------------------------------------------------------------


def _hscan_page(h: RHash, cursor: int, count: int, match: Match | None
                ) -> tuple[int, list[bytes]]:
    nxt, pairs = scan_items(cursor, count, h.ht, lambda: list(h.items()))
    flat: list[bytes] = []
    for f, v in pairs:
        if match is not None and not match(f):
            continue
        if h.ht and f not in h:
            continue
        flat.append(f)
        flat.append(h[f] if h.ht else v)
    return nxt, flat


@command("hscan")
def hscan(c: Client, argv: list[bytes]) -> bytes:
    return collection_scan(c, argv, _get_read, _hscan_page)
