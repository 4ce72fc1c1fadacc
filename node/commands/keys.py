"""Generic key commands: DEL UNLINK EXISTS TYPE RENAME RENAMENX COPY MOVE KEYS SCAN RANDOMKEY
TOUCH EXPIRE PEXPIRE EXPIREAT PEXPIREAT TTL PTTL EXPIRETIME PEXPIRETIME PERSIST OBJECT."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from slotgate.node.commands.registry import command
from slotgate.node.commands.replies import OK, ONE, ZERO
from slotgate.node.commands.util import LONG_MAX, LONG_MIN, parse_int
from slotgate.node.core import lru
from slotgate.node.core.errors import (
    DB_INDEX_OUT_OF_RANGE,
    INVALID_EXPIRE,
    NO_SUCH_KEY,
    SYNTAX,
    CommandError,
)
from slotgate.node.core.glob import compile_glob
from slotgate.node.core.keyspace import NOTIFY_GENERIC, TYPES, Database, now_ms
from slotgate.node.types.typeutil import Snapshots, parse_cursor, parse_range, parse_scan_opts
from slotgate.protocol.resp import array_header, bulk, integer

if TYPE_CHECKING:
    from slotgate.node.core.client import Client


def _del(c: Client, argv: list[bytes]) -> bytes:
    db = c.db
    n = 0
    for key in argv[1:]:
        if db.delete(key):
            n += 1
            db.notify(NOTIFY_GENERIC, b"del", key)
    c.ks.dirty += n
    return integer(n)


@command("del")
def del_(c: Client, argv: list[bytes]) -> bytes:
    return _del(c, argv)


@command("unlink")
def unlink(c: Client, argv: list[bytes]) -> bytes:
    return _del(c, argv)


@command("exists")
def exists(c: Client, argv: list[bytes]) -> bytes:
    db = c.db
    return integer(sum(1 for key in argv[1:] if db.lookup_read(key) is not None))


@command("touch")
def touch(c: Client, argv: list[bytes]) -> bytes:
    db = c.db
    return integer(sum(1 for key in argv[1:] if db.lookup(key) is not None))


def type_name(v: Any) -> bytes:
    return TYPES[type(v)].name


@command("type")
def type_(c: Client, argv: list[bytes]) -> bytes:
    v = c.db.lookup_read(argv[1])  # a read lookup in Redis: counts hits/misses, keymiss event
    return b"+none\r\n" if v is None else b"+" + type_name(v) + b"\r\n"


def _rename(c: Client, argv: list[bytes], nx: bool) -> bytes:
    db = c.db
    src, dst = argv[1], argv[2]
    v = db.lookup(src)
    if v is None:
        raise CommandError(NO_SUCH_KEY)
    if src == dst:
        return ZERO if nx else OK
    when = db.get_expire(src)
    dst_exists = db.lookup(dst) is not None
    if dst_exists and nx:
        return ZERO
    enc = db.str_enc.get(src)
    db.delete(src)  # the source's change is signalled first, as in Redis
    if dst_exists:
        db.delete(dst)
    db.set(dst, v)
    if enc is not None:
        db.mark_encoding(dst, enc)
    if when is not None:
        db.set_expire(dst, when)
    c.ks.dirty += 1
    db.notify(NOTIFY_GENERIC, b"rename_from", src)
    db.notify(NOTIFY_GENERIC, b"rename_to", dst)
    return ONE if nx else OK


@command("rename")
def rename(c: Client, argv: list[bytes]) -> bytes:
    return _rename(c, argv, False)


@command("renamenx")
def renamenx(c: Client, argv: list[bytes]) -> bytes:
    return _rename(c, argv, True)


def _copy_value(v: Any) -> Any:
    return TYPES[type(v)].copy(v)


@command("copy")
def copy(c: Client, argv: list[bytes]) -> bytes:
    src_db = c.db
    dst_index = src_db.index
    replace = False
    i = 3
    while i < len(argv):
        opt = argv[i].lower()
        if opt == b"replace":
            replace = True
        elif opt == b"db" and i + 1 < len(argv):
            dst_index = parse_range(argv[i + 1], -(2**31), 2**31 - 1)  # getIntFromObjectOrReply
            if not c.server.cluster_enabled and not 0 <= dst_index < len(c.ks.dbs):
                raise CommandError(DB_INDEX_OUT_OF_RANGE)  # each DB option checked as read
            i += 1
        else:
            raise CommandError(SYNTAX)
        i += 1
    if c.server.cluster_enabled and (src_db.index != 0 or dst_index != 0):
        raise CommandError("ERR Copying to another database is not allowed in cluster mode")
    if not 0 <= dst_index < len(c.ks.dbs):
        raise CommandError(DB_INDEX_OUT_OF_RANGE)
    dst_db = c.ks.dbs[dst_index]
    src, dst = argv[1], argv[2]
    if dst_db is src_db and src == dst:
        raise CommandError("ERR source and destination objects are the same")
    v = src_db.lookup_read(src)
    if v is None:
        return ZERO
    if dst_db.lookup(dst) is not None:
        if not replace:
            return ZERO
        dst_db.delete(dst)
    when = src_db.get_expire(src)
    dst_db.set(dst, _copy_value(v))
    if src in src_db.str_enc:
        dst_db.mark_encoding(dst, src_db.str_enc[src])
    if when is not None:
        dst_db.set_expire(dst, when)
    c.ks.dirty += 1
    dst_db.notify(NOTIFY_GENERIC, b"copy_to", dst)
    return ONE


@command("move")
def move(c: Client, argv: list[bytes]) -> bytes:
    if c.server.cluster_enabled:
        raise CommandError("ERR MOVE is not allowed in cluster mode")
    src_db = c.db
    dst_index = parse_range(argv[2], -(2**31), 2**31 - 1)  # getIntFromObjectOrReply
    if not 0 <= dst_index < len(c.ks.dbs):
        raise CommandError(DB_INDEX_OUT_OF_RANGE)
    dst_db = c.ks.dbs[dst_index]
    if dst_db is src_db:
        raise CommandError("ERR source and destination objects are the same")
    key = argv[1]
    v = src_db.lookup(key)
    if v is None:
        return ZERO
    if dst_db.lookup(key) is not None:
        return ZERO
    when = src_db.get_expire(key)
    dst_db.set(key, v)
    if key in src_db.str_enc:
        dst_db.mark_encoding(key, src_db.str_enc[key])
    if when is not None:
        dst_db.set_expire(key, when)
    src_db.delete(key)
    c.ks.dirty += 1
    src_db.notify(NOTIFY_GENERIC, b"move_from", key)
    dst_db.notify(NOTIFY_GENERIC, b"move_to", key)
    return ONE


@command("keys")
def keys(c: Client, argv: list[bytes]) -> bytes:
    db = c.db
    pattern = argv[1]
    now = now_ms()
    expires = db.expires
    out = []
    match = None if pattern == b"*" else compile_glob(pattern).matches
    for key in list(db.data):
        if match is not None and not match(key):
            continue
        if expires:
            when = expires.get(key)
            if when is not None and when <= now:
                continue
        out.append(key)
    return array_header(len(out)) + b"".join(bulk(k) for k in out)


# -- SCAN ---------------------------------------------------------------------------------------
# A cursor is (snapshot id << 32 | position): cursor 0 takes a snapshot of the db's keys, so
# every key present for the whole scan is returned once, as Redis guarantees.
_SCAN_SNAPSHOTS = Snapshots()


def scan_page(c: Client, cursor_arg: bytes, keys_of: Any, argv_opts: list[bytes],
              allow_type: bool) -> tuple[int, list[bytes], int, bytes | None, Any]:
    """Parse ``cursor [MATCH p] [COUNT n] [TYPE t]`` -> (next cursor, keys, 0, type, match)."""
    cursor = parse_cursor(cursor_arg)
    count, match, type_filter = parse_scan_opts(argv_opts, 0, allow_type)
    owner = id(c.db)
    if cursor == 0:
        nxt_cursor, page = _SCAN_SNAPSHOTS.start(owner, count, lambda: list(keys_of()))
    else:
        served = _SCAN_SNAPSHOTS.resume(owner, cursor, count)
        if served is None:
            # Not a cursor we handed out (or one from a long-gone scan): the iteration is over.
            return 0, [], 0, type_filter, None
        nxt_cursor, page = served
    return nxt_cursor, page, 0, type_filter, match


@command("scan")
def scan(c: Client, argv: list[bytes]) -> bytes:
    db = c.db
    nxt, page, _, type_filter, match = scan_page(c, argv[1], lambda: db.data, argv[2:], True)
    out = []
    for key in page:
        v = db.lookup(key)
        if v is None:
            continue
        if match is not None and not match(key):
            continue
        if type_filter is not None and type_name(v) != type_filter:
            continue
        out.append(key)
    cur = b"%d" % nxt
    return b"*2\r\n" + bulk(cur) + array_header(len(out)) + b"".join(bulk(k) for k in out)


@command("randomkey")
def randomkey(c: Client, argv: list[bytes]) -> bytes:
    key = c.db.random_key()
    return c.null_bulk if key is None else bulk(key)


# -- expiry -------------------------------------------------------------------------------------
_NX, _XX, _GT, _LT = 1, 2, 4, 8
_EXPIRE_OPTS = {b"nx": _NX, b"xx": _XX, b"gt": _GT, b"lt": _LT}


def _expire_generic(c: Client, argv: list[bytes], basetime: int, seconds: bool) -> bytes:
    flags = 0
    for raw in argv[3:]:
        f = _EXPIRE_OPTS.get(raw.lower())
        if f is None:
            shown = raw.partition(b"\0")[0].decode("utf-8", "replace")  # "%s": up to a NUL
            raise CommandError(f"ERR Unsupported option {shown}")
        flags |= f
    if flags & _NX and flags & (_XX | _GT | _LT):
        raise CommandError("ERR NX and XX, GT or LT options at the same time are not compatible")
    if flags & _GT and flags & _LT:
        raise CommandError("ERR GT and LT options at the same time are not compatible")
    when = parse_int(argv[2])
    name = argv[0].lower().decode("utf-8", "replace")
    if seconds:
        if when > LONG_MAX // 1000 or when < -(-LONG_MIN // 1000):
            raise CommandError(INVALID_EXPIRE % name)
        when *= 1000
    if when > LONG_MAX - basetime:
        raise CommandError(INVALID_EXPIRE % name)
    when += basetime
    db = c.db
    key = argv[1]
    if db.lookup(key) is None:
        return ZERO
    if flags:
        cur = db.get_expire(key)
        if flags & _NX and cur is not None:
            return ZERO
        if flags & _XX and cur is None:
            return ZERO
        if flags & _GT and (cur is None or when <= cur):
            return ZERO
        if flags & _LT and cur is not None and when >= cur:
            return ZERO
    if when <= now_ms() and c.ks.expire_enabled:
        db.delete(key)
        c.ks.dirty += 1
        c.propagate_as = [[b"DEL", key]]
        db.notify(NOTIFY_GENERIC, b"del", key)
        return ONE
    db.set_expire(key, when)
    db.modified(key)
    c.ks.dirty += 1
    c.propagate_as = [[b"PEXPIREAT", key, b"%d" % when]]
    db.notify(NOTIFY_GENERIC, b"expire", key)
    return ONE


@command("expire")
def expire(c: Client, argv: list[bytes]) -> bytes:
    return _expire_generic(c, argv, now_ms(), True)


@command("pexpire")
def pexpire(c: Client, argv: list[bytes]) -> bytes:
    return _expire_generic(c, argv, now_ms(), False)


@command("expireat")
def expireat(c: Client, argv: list[bytes]) -> bytes:
    return _expire_generic(c, argv, 0, True)


@command("pexpireat")
def pexpireat(c: Client, argv: list[bytes]) -> bytes:
    return _expire_generic(c, argv, 0, False)


def _ttl(c: Client, key: bytes, ms: bool, absolute: bool) -> bytes:
    db = c.db
    if db.lookup_read(key) is None:
        return integer(-2)
    when = db.get_expire(key)
    if when is None:
        return integer(-1)
    ttl = when if absolute else when - now_ms()
    ttl = max(ttl, 0)
    return integer(ttl if ms else (ttl + 500) // 1000)


@command("ttl")
def ttl(c: Client, argv: list[bytes]) -> bytes:
    return _ttl(c, argv[1], False, False)


@command("pttl")
def pttl(c: Client, argv: list[bytes]) -> bytes:
    return _ttl(c, argv[1], True, False)


@command("expiretime")
def expiretime(c: Client, argv: list[bytes]) -> bytes:
    return _ttl(c, argv[1], False, True)


@command("pexpiretime")
def pexpiretime(c: Client, argv: list[bytes]) -> bytes:
    return _ttl(c, argv[1], True, True)


@command("persist")
def persist(c: Client, argv: list[bytes]) -> bytes:
    db = c.db
    key = argv[1]
    if db.lookup(key) is None or not db.persist(key):
        return ZERO
    db.modified(key)
    c.ks.dirty += 1
    db.notify(NOTIFY_GENERIC, b"persist", key)
    return ONE


# -- OBJECT -------------------------------------------------------------------------------------
_SHARED_INT_LIMIT = 10000  # Redis shares integer objects 0..9999 (refcount INT_MAX)


def _obj(c: Client, key: bytes) -> Any:
    return c.db.lookup_notouch(key)


@command("object|encoding")
def object_encoding(c: Client, argv: list[bytes]) -> bytes:
    v = _obj(c, argv[2])
    return c.null_bulk if v is None else bulk(c.db.encoding(argv[2], v))


@command("object|refcount")
def object_refcount(c: Client, argv: list[bytes]) -> bytes:
    v = _obj(c, argv[2])
    if v is None:
        return c.null_bulk
    if type(v) is bytes and c.db.encoding(argv[2], v) == b"int" and 0 <= int(v) < _SHARED_INT_LIMIT:
        return integer(2147483647)
    return integer(1)


@command("object|idletime")
def object_idletime(c: Client, argv: list[bytes]) -> bytes:
    v = _obj(c, argv[2])
    if v is None:
        return c.null_bulk
    if "lfu" in str(c.server.config.get("maxmemory-policy")):
        raise CommandError(
            "ERR An LFU maxmemory policy is selected, idle time not tracked. Please note that "
            "when switching between policies at runtime LRU and LFU data will take some time "
            "to adjust.")
    return integer(lru.idle_s(c.db.access.get(argv[2], c.server.ks.lru_clock),
                              c.server.ks.lru_clock))


@command("object|freq")
def object_freq(c: Client, argv: list[bytes]) -> bytes:
    v = _obj(c, argv[2])
    if v is None:
        return c.null_bulk
    if "lfu" not in str(c.server.config.get("maxmemory-policy")):
        raise CommandError(
            "ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please "
            "note that when switching between policies at runtime LRU and LFU data will take "
            "some time to adjust.")
    ks = c.server.ks
    field = c.db.access.get(argv[2])
    return integer(0 if field is None else lru.lfu_counter(field, time.time(),
                                                          ks.lfu_decay_time_min))


@command("object|help")
def object_help(c: Client, argv: list[bytes]) -> bytes:
    lines = [
        b"OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        b"ENCODING <key>",
        b"    Return the kind of internal representation used in order to store the value",
        b"    associated with a <key>.",
        b"FREQ <key>",
        b"    Return the access frequency index of the <key>. The returned integer is",
        b"    proportional to the logarithm of the recent access frequency of the key.",
        b"IDLETIME <key>",
        b"    Return the idle time of the <key>, that is the approximated number of",
        b"    seconds elapsed since the last access to the key.",
        b"REFCOUNT <key>",
        b"    Return the number of references of the value associated with the specified",
        b"    <key>.",
        b"HELP",
        b"    Prints this help.",
    ]
    return array_header(len(lines)) + b"".join(b"+" + ln + b"\r\n" for ln in lines)


_unused = Database
