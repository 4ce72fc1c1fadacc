"""String commands: GET SET (all options) SETNX SETEX PSETEX MGET MSET MSETNX GETSET GETDEL GETEX
APPEND STRLEN GETRANGE SUBSTR SETRANGE INCR DECR INCRBY DECRBY INCRBYFLOAT (LCS: lcs.py).

Strings are stored as ``bytes``. Replication rewrites follow Redis 7.0: relative expiries are
propagated as absolute (``SET .. PXAT``, ``PEXPIREAT``), INCRBYFLOAT as ``SET .. KEEPTTL``.
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, Final

from slotgate.node.commands.registry import command
from slotgate.node.commands.replies import EMPTY_BULK, OK, ONE, ZERO
from slotgate.node.commands.util import LONG_MAX, LONG_MIN, parse_int
from slotgate.node.core.errors import (
    INVALID_EXPIRE,
    NOT_FLOAT,
    NOT_INTEGER,
    OFFSET_OUT_OF_RANGE,
    OVERFLOW,
    STRING_TOO_LONG,
    SYNTAX,
    WRONGTYPE,
    CommandError,
    wrong_args,
)
from slotgate.node.core.keyspace import NOTIFY_GENERIC, NOTIFY_KEY_MISS, NOTIFY_STRING, now_ms
from slotgate.node.types.typeutil import typed_lookups
from slotgate.protocol.resp import (
    array_header,
    bulk,
    format_long_double,
    integer,
)
from slotgate.protocol.resp import parse_long_double as resp_parse_long_double

if TYPE_CHECKING:
    from slotgate.node.core.client import Client


# The string at a key (None if missing), WRONGTYPE for another type; as a write looks it up,
# and as a read does (the bitmaps use both).
get_string_write, get_string = typed_lookups(bytes)


@command("get")
def get(c: Client, argv: list[bytes]) -> bytes:
    db = c.db
    if db.expires:
        v = db.lookup_read(argv[1])
    else:  # db.lookup_read without the calls: nothing can have expired
        v = db.data.get(argv[1])
        if v is None:
            ks = db.ks
            ks.keyspace_misses += 1
            if ks.notify_flags & NOTIFY_KEY_MISS:
                db.notify(NOTIFY_KEY_MISS, b"keymiss", argv[1])
        else:
            ks = db.ks
            ks.keyspace_hits += 1
            if ks.lfu:
                ks.lfu_touch(db, argv[1])
            else:
                db.access[argv[1]] = ks.lru_clock
    if v is None:
        return c.null_bulk
    if type(v) is not bytes:
        raise CommandError(WRONGTYPE)
    return b"$%d\r\n%s\r\n" % (len(v), v)


# SET option flags
_NX, _XX, _GET, _KEEPTTL, _EX, _PX, _EXAT, _PXAT, _PERSIST = (1 << i for i in range(9))
_EXPIRE_FLAGS = _EX | _PX | _EXAT | _PXAT
_UNITS = {b"ex": _EX, b"px": _PX, b"exat": _EXAT, b"pxat": _PXAT}


def parse_set_options(argv: list[bytes], start: int, is_get_cmd: bool) -> tuple[int, bytes | None]:
    """parseExtendedStringArgumentsOrReply: (flags, raw expire arg)."""
    flags = 0
    expire: bytes | None = None
    i = start
    n = len(argv)
    while i < n:
        opt = argv[i].lower()
        nxt = argv[i + 1] if i + 1 < n else None
        if opt == b"nx" and not flags & _XX and not is_get_cmd:
            flags |= _NX
        elif opt == b"xx" and not flags & _NX and not is_get_cmd:
            flags |= _XX
        elif opt == b"get" and not is_get_cmd:
            flags |= _GET
        elif opt == b"keepttl" and not flags & (_PERSIST | _EXPIRE_FLAGS) and not is_get_cmd:
            flags |= _KEEPTTL
        elif opt == b"persist" and is_get_cmd and not flags & (_EXPIRE_FLAGS | _KEEPTTL):
            flags |= _PERSIST
        elif opt in _UNITS and nxt is not None:
            unit = _UNITS[opt]
            if flags & (_KEEPTTL | _PERSIST | (_EXPIRE_FLAGS & ~unit)):
                raise CommandError(SYNTAX)
            flags |= unit
            expire = nxt
            i += 1
        else:
            raise CommandError(SYNTAX)
        i += 1
    return flags, expire


def expire_ms(raw: bytes, flags: int, cmd: str) -> int:
    """getExpireMillisecondsOrReply: absolute unix ms, or Redis' errors."""
    ms = parse_int(raw)
    if ms <= 0 or (flags & (_EX | _EXAT) and ms > LONG_MAX // 1000):
        raise CommandError(INVALID_EXPIRE % cmd)
    if flags & (_EX | _EXAT):
        ms *= 1000
    if flags & (_EX | _PX):
        ms += now_ms()
    if ms <= 0 or ms > LONG_MAX:
        raise CommandError(INVALID_EXPIRE % cmd)
    return ms


@command("set")
def set_(c: Client, argv: list[bytes]) -> bytes:
    if len(argv) == 3:  # the hot path: plain SET
        db = c.db
        db.set(argv[1], argv[2])
        ks = c.ks
        ks.dirty += 1
        if ks.notify_flags:
            db.notify(NOTIFY_STRING, b"set", argv[1])
        return OK
    flags, raw_exp = parse_set_options(argv, 3, False)
    when = expire_ms(raw_exp, flags, "set") if raw_exp is not None else None
    return _set_generic(c, argv[1], argv[2], flags, when, argv)


def _set_generic(c: Client, key: bytes, value: bytes, flags: int, when: int | None,
                 argv: list[bytes] | None) -> bytes:
    db = c.db
    reply = None
    if flags & _GET:
        old = get_string(db, key)
        reply = c.null_bulk if old is None else bulk(old)
    found = db.lookup(key) is not None
    if (flags & _NX and found) or (flags & _XX and not found):
        return reply if reply is not None else c.null_bulk
    db.set(key, value, keep_ttl=bool(flags & _KEEPTTL))
    c.ks.dirty += 1
    db.notify(NOTIFY_STRING, b"set", key)
    if when is not None:
        db.set_expire(key, when)
        db.notify(NOTIFY_GENERIC, b"expire", key)
        if argv is not None and flags & (_EX | _PX | _EXAT):
            # Replicas get an absolute PXAT so their expiry matches ours (as Redis 7.0).
            c.propagate_as = [[b"SET", key, value, b"PXAT", b"%d" % when]]
    return reply if reply is not None else OK


@command("setnx")
def setnx(c: Client, argv: list[bytes]) -> bytes:
    db = c.db
    if db.lookup(argv[1]) is not None:
        return ZERO
    db.set(argv[1], argv[2])
    c.ks.dirty += 1
    db.notify(NOTIFY_STRING, b"set", argv[1])
    return ONE


def _setex(c: Client, argv: list[bytes], unit: int, name: str) -> bytes:
    when = expire_ms(argv[2], unit, name)
    db = c.db
    db.set(argv[1], argv[3])
    db.set_expire(argv[1], when)
    c.ks.dirty += 1
    db.notify(NOTIFY_STRING, b"set", argv[1])
    db.notify(NOTIFY_GENERIC, b"expire", argv[1])
    c.propagate_as = [[b"SET", argv[1], argv[3], b"PXAT", b"%d" % when]]
    return OK


@command("setex")
def setex(c: Client, argv: list[bytes]) -> bytes:
    return _setex(c, argv, _EX, "setex")


@command("psetex")
def psetex(c: Client, argv: list[bytes]) -> bytes:
    return _setex(c, argv, _PX, "psetex")


@command("getex")
def getex(c: Client, argv: list[bytes]) -> bytes:
    flags, raw_exp = parse_set_options(argv, 2, True)
    db = c.db
    key = argv[1]
    v = get_string(db, key)
    if v is None:
        return c.null_bulk
    when = expire_ms(raw_exp, flags, "getex") if raw_exp is not None else None
    reply = bulk(v)
    if when is not None and flags & (_EXAT | _PXAT) and when <= now_ms():
        # An absolute time already past deletes the key (after replying its value).
        db.delete(key)
        c.ks.dirty += 1
        db.notify(NOTIFY_GENERIC, b"del", key)
        c.propagate_as = [[b"DEL", key]]
    elif when is not None:
        db.set_expire(key, when)
        c.ks.dirty += 1
        db.modified(key)
        db.notify(NOTIFY_GENERIC, b"expire", key)
        c.propagate_as = [[b"PEXPIREAT", key, b"%d" % when]]
    elif flags & _PERSIST:
        if db.persist(key):
            c.ks.dirty += 1
            db.modified(key)
            db.notify(NOTIFY_GENERIC, b"persist", key)
            c.propagate_as = [[b"PERSIST", key]]
    return reply


@command("getset")
def getset(c: Client, argv: list[bytes]) -> bytes:
    db = c.db
    old = get_string(db, argv[1])
    db.set(argv[1], argv[2])
    c.ks.dirty += 1
    db.notify(NOTIFY_STRING, b"set", argv[1])
    return c.null_bulk if old is None else bulk(old)


@command("getdel")
def getdel(c: Client, argv: list[bytes]) -> bytes:
    db = c.db
    old = get_string(db, argv[1])
    if old is None:
        return c.null_bulk
    db.delete(argv[1])
    c.ks.dirty += 1
    db.notify(NOTIFY_GENERIC, b"del", argv[1])
    return bulk(old)


@command("mget")
def mget(c: Client, argv: list[bytes]) -> bytes:
    db = c.db
    parts = [array_header(len(argv) - 1)]
    null = c.null_bulk
    for key in argv[1:]:
        v = db.lookup_read(key)
        if v is None or type(v) is not bytes:
            parts.append(null)
        else:
            parts.append(b"$%d\r\n%s\r\n" % (len(v), v))
    return b"".join(parts)


def _check_pairs(argv: list[bytes], name: str) -> None:
    if len(argv) % 2 == 0:
        raise CommandError(wrong_args(name))


@command("mset")
def mset(c: Client, argv: list[bytes]) -> bytes:
    _check_pairs(argv, "mset")
    db = c.db
    for i in range(1, len(argv), 2):
        db.set(argv[i], argv[i + 1])
        db.notify(NOTIFY_STRING, b"set", argv[i])
    c.ks.dirty += (len(argv) - 1) // 2
    return OK


@command("msetnx")
def msetnx(c: Client, argv: list[bytes]) -> bytes:
    _check_pairs(argv, "msetnx")
    db = c.db
    for i in range(1, len(argv), 2):
        if db.lookup(argv[i]) is not None:
            return ZERO
    for i in range(1, len(argv), 2):
        db.set(argv[i], argv[i + 1])
        db.notify(NOTIFY_STRING, b"set", argv[i])
    c.ks.dirty += (len(argv) - 1) // 2
    return ONE


def _max_len(c: Client) -> int:
    return int(c.server.config.get("proto-max-bulk-len"))


@command("append")
def append(c: Client, argv: list[bytes]) -> bytes:
    db = c.db
    key = argv[1]
    old = db.lookup(key)
    if old is None:
        new = argv[2]
    else:
        if type(old) is not bytes:
            raise CommandError(WRONGTYPE)
        if len(old) + len(argv[2]) > _max_len(c):
            raise CommandError(STRING_TOO_LONG)
        new = old + argv[2]
    db.set(key, new, keep_ttl=True)
    if old is not None:
        db.mark_raw(key)
    c.ks.dirty += 1
    db.notify(NOTIFY_STRING, b"append", key)
    return integer(len(new))


@command("strlen")
def strlen(c: Client, argv: list[bytes]) -> bytes:
    v = get_string(c.db, argv[1])
    return integer(0 if v is None else len(v))


def _getrange(c: Client, argv: list[bytes]) -> bytes:
    start = parse_int(argv[2])
    end = parse_int(argv[3])
    v = get_string(c.db, argv[1])
    if v is None:
        return EMPTY_BULK
    n = len(v)
    if start < 0 and end < 0 and start > end:
        return EMPTY_BULK
    if start < 0:
        start += n
    if end < 0:
        end += n
    start = max(start, 0)
    end = max(end, 0)
    if end >= n:
        end = n - 1
    if start > end or n == 0:
        return EMPTY_BULK
    return bulk(v[start : end + 1])


@command("getrange")
def getrange(c: Client, argv: list[bytes]) -> bytes:
    return _getrange(c, argv)


@command("substr")
def substr(c: Client, argv: list[bytes]) -> bytes:
    return _getrange(c, argv)


@command("setrange")
def setrange(c: Client, argv: list[bytes]) -> bytes:
    db = c.db
    key = argv[1]
    offset = parse_int(argv[2])
    value = argv[3]
    if offset < 0:
        raise CommandError(OFFSET_OUT_OF_RANGE)
    old = db.lookup(key)
    if old is not None and type(old) is not bytes:
        raise CommandError(WRONGTYPE)
    if not value:
        return integer(0 if old is None else len(old))
    if offset + len(value) > _max_len(c):
        raise CommandError(STRING_TOO_LONG)
    cur = old or b""
    # One copy of the value at most (a string is immutable ``bytes``): none when the range
    # already holds ``value``, else one join of the untouched parts around it.
    end = offset + len(value)
    if len(cur) < offset:
        new = b"".join((cur, bytes(offset - len(cur)), value))
    elif cur[offset:end] == value:
        new = cur
    else:
        view = memoryview(cur)
        new = b"".join((view[:offset], value, view[end:]))
    db.set(key, new, keep_ttl=True)
    db.mark_raw(key)
    c.ks.dirty += 1
    db.notify(NOTIFY_STRING, b"setrange", key)
    return integer(len(new))


def _incr(c: Client, key: bytes, delta: int) -> bytes:
    db = c.db
    old = db.lookup(key)
    if old is None:
        new = delta
    elif type(old) is bytes:
        new = parse_int(old) + delta
    else:
        raise CommandError(WRONGTYPE)
    if not LONG_MIN <= new <= LONG_MAX:
        raise CommandError(OVERFLOW)
    value = b"%d" % new
    ks = c.ks
    if old is not None and ks.lfu:
        # the lookup's touch counts, not db.set's (Redis' dbOverwrite keeps the LFU word)
        word = db.access.get(key)
        db.set(key, value, keep_ttl=True)
        if word is not None:
            db.access[key] = word
    else:
        db.set(key, value, keep_ttl=True)
    ks.dirty += 1
    db.notify(NOTIFY_STRING, b"incrby", key)
    return b":%b\r\n" % value


# The digit after ASCII digit b (b"0".."8"), indexed by its byte value.
_NEXT_DIGIT: Final = tuple(bytes((b + 1,)) if 48 <= b < 57 else b"" for b in range(58))
# Below this, n + 1 fits a long long (and its text has at most 18 digits).
_CAP: Final = 1_000_000_000_000_000_000


class _LastIncr:
    """The value the INCR hot path stored last, and its number (_CAP: not known). A key INCR'd
    again that still holds that very object (identity: the same immutable bytes) is n + 1
    with no parsing or checking; a counter INCR'd in a row parses its text once. (An object
    of its own, not two module globals: compiled, a global is a dict entry of the module,
    read and written through the dict on every INCR.)"""

    __slots__ = ("value", "n")

    def __init__(self) -> None:
        self.value: object = object()
        self.n = _CAP


_LAST: Final = _LastIncr()


@command("incr")
def incr(c: Client, argv: list[bytes]) -> bytes:
    db = c.db
    key = argv[1]
    if not (db.expires or db.str_enc or db.watched or db.blocking
            or db.invalidator):
        # The hot path, what _incr(c, key, 1) comes down to when the db has no TTL, encoding
        # mark, WATCH or blocked client to update, for an existing key holding 1-18 digits
        # without a leading zero (canonical, and +1 cannot overflow).
        data = db.data
        old = data.get(key)
        last = _LAST
        if old is last.value and last.n < _CAP:  # canonical digits this path stored
            n = last.n + 1
            value = b"%d" % n
        elif type(old) is bytes and len(old) < 19 and old.isdigit() and old[0] != 48:
            if old is last.value:  # INCR'd twice in a row: learn its number
                n = int(old) + 1
                value = b"%d" % n
            else:
                digit = old[-1]
                if digit != 57:  # no carry: only the last digit changes
                    value = old[:-1] + _NEXT_DIGIT[digit]
                else:
                    value = b"%d" % (int(old, 10) + 1)
                n = _CAP
        else:
            return _incr(c, key, 1)
        data[key] = value
        last.value = value
        last.n = n
        ks = c.ks
        if ks.lfu:  # the access clock, as db.set: lookupKeyWrite touches the key
            ks.lfu_touch(db, key)
        else:
            db.access[key] = ks.lru_clock
        ks.dirty += 1
        if ks.notify_flags:
            db.notify(NOTIFY_STRING, b"incrby", key)
        return b":%b\r\n" % value
    return _incr(c, key, 1)


@command("decr")
def decr(c: Client, argv: list[bytes]) -> bytes:
    return _incr(c, argv[1], -1)


@command("incrby")
def incrby(c: Client, argv: list[bytes]) -> bytes:
    return _incr(c, argv[1], parse_int(argv[2]))


@command("decrby")
def decrby(c: Client, argv: list[bytes]) -> bytes:
    delta = parse_int(argv[2])
    if delta == LONG_MIN:
        raise CommandError("ERR decrement would overflow")
    return _incr(c, argv[1], -delta)


def parse_long_double(raw: bytes, err: str = NOT_FLOAT) -> Fraction | float:
    """string2ld (strtold): decimal or hex text, inf/infinity; no surrounding spaces, no nan.
    Returns the exact value as a long double (Fraction), or a float infinity."""
    if not raw or len(raw) > 5000:
        raise CommandError(err)
    try:
        return resp_parse_long_double(raw.decode("latin-1"))
    except ValueError:
        raise CommandError(err) from None


@command("incrbyfloat")
def incrbyfloat(c: Client, argv: list[bytes]) -> bytes:
    db = c.db
    key = argv[1]
    old = db.lookup(key)
    if old is not None and type(old) is not bytes:
        raise CommandError(WRONGTYPE)
    cur = parse_long_double(old) if old is not None else Fraction(0)
    inc = parse_long_double(argv[2])
    if isinstance(cur, float) or isinstance(inc, float):
        raise CommandError("ERR increment would produce NaN or Infinity")
    try:
        new = format_long_double(cur + inc)
    except OverflowError:
        raise CommandError("ERR increment would produce NaN or Infinity") from None
    db.set(key, new, keep_ttl=True)
    db.mark_encoding(key, b"embstr" if len(new) <= 44 else b"raw")
    c.ks.dirty += 1
    db.notify(NOTIFY_STRING, b"incrbyfloat", key)
    c.propagate_as = [[b"SET", key, new, b"KEEPTTL"]]
    return bulk(new)


_ = NOT_INTEGER  # re-exported for modules that parse like strings do
