"""Server/admin commands: CONFIG COMMAND DEBUG SLOWLOG MONITOR SHUTDOWN TIME DBSIZE
FLUSHDB FLUSHALL SWAPDB LASTSAVE."""

from __future__ import annotations

import hashlib
import struct
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, cast

from slotgate.node.commands.registry import command
from slotgate.node.commands.replies import OK
from slotgate.node.commands.util import parse_int
from slotgate.node.core import errors
from slotgate.node.core import keyspace as K
from slotgate.node.core.config import Config, ConfigError, canonical
from slotgate.node.core.errors import SYNTAX, CommandError
from slotgate.node.core.glob import glob_match
from slotgate.protocol import commands as pc
from slotgate.protocol.resp import array_header, bulk, integer, map_header, set_header, simple

if TYPE_CHECKING:
    from slotgate.node.core.client import Client

_NOTIFY_CHARS = {
    "g": K.NOTIFY_GENERIC, "$": K.NOTIFY_STRING, "l": K.NOTIFY_LIST, "s": K.NOTIFY_SET,
    "h": K.NOTIFY_HASH, "z": K.NOTIFY_ZSET, "x": K.NOTIFY_EXPIRED, "e": K.NOTIFY_EVICTED,
    "K": K.NOTIFY_KEYSPACE, "E": K.NOTIFY_KEYEVENT, "t": K.NOTIFY_STREAM,
    "m": K.NOTIFY_KEY_MISS, "n": K.NOTIFY_NEW,
}
_ALL = (K.NOTIFY_GENERIC | K.NOTIFY_STRING | K.NOTIFY_LIST | K.NOTIFY_SET | K.NOTIFY_HASH
        | K.NOTIFY_ZSET | K.NOTIFY_EXPIRED | K.NOTIFY_EVICTED | K.NOTIFY_STREAM)


def parse_notify_flags(text: str) -> int:
    """notify-keyspace-events letters -> flag bits (ValueError on an unknown letter)."""
    flags = 0
    for ch in text:
        if ch == "A":
            flags |= _ALL
        elif ch in _NOTIFY_CHARS:
            flags |= _NOTIFY_CHARS[ch]
        else:
            raise ValueError(ch)
    return flags


def _help(lines: list[str]) -> bytes:
    return array_header(len(lines)) + b"".join(simple(ln) for ln in lines)


# -- keyspace-wide ------------------------------------------------------------------------------
@command("dbsize")
def dbsize(c: Client, argv: list[bytes]) -> bytes:
    return integer(len(c.db.data))


def _flush_mode(argv: list[bytes]) -> None:
    if len(argv) > 2 or (len(argv) == 2 and argv[1].lower() not in (b"async", b"sync")):
        raise CommandError(SYNTAX)


@command("flushdb")
def flushdb(c: Client, argv: list[bytes]) -> bytes:
    _flush_mode(argv)
    c.ks.dirty += c.db.clear() + 1
    return OK


@command("flushall")
def flushall(c: Client, argv: list[bytes]) -> bytes:
    _flush_mode(argv)
    c.ks.dirty += c.ks.flushall() + 1
    return OK


@command("swapdb")
def swapdb(c: Client, argv: list[bytes]) -> bytes:
    if c.server.cluster_enabled:
        raise CommandError("ERR SWAPDB is not allowed in cluster mode")
    a = parse_int(argv[1], "ERR invalid first DB index")
    b = parse_int(argv[2], "ERR invalid second DB index")
    n = len(c.ks.dbs)
    if not (0 <= a < n and 0 <= b < n):
        raise CommandError(errors.DB_INDEX_OUT_OF_RANGE)
    if a != b:
        c.ks.swap(a, b)
    c.ks.dirty += 1
    return OK


@command("time")
def time_(c: Client, argv: list[bytes]) -> bytes:
    now_us = time.time_ns() // 1000
    return b"*2\r\n" + bulk(b"%d" % (now_us // 1_000_000)) + bulk(b"%d" % (now_us % 1_000_000))


@command("lastsave")
def lastsave(c: Client, argv: list[bytes]) -> bytes:
    return integer(c.server.last_save_time)


# -- CONFIG ---------------------------------------------------------------------------------------
@command("config|get")
def config_get(c: Client, argv: list[bytes]) -> bytes:
    seen: dict[str, tuple[str, str]] = {}  # by lower-case name, as Redis' nocase dict
    for pat in argv[2:]:
        for name, value in c.server.config.config_get(pat):
            seen.setdefault(name.lower(), (name, value))
    parts = [map_header(len(seen), c.resp)]
    for name, value in seen.values():
        parts.append(bulk(name))
        parts.append(bulk(value))
    return b"".join(parts)


@command("config|set")
def config_set(c: Client, argv: list[bytes]) -> bytes:
    if len(argv) % 2:
        raise CommandError(SYNTAX)
    cfg = c.server.config
    pairs: list[tuple[str, str]] = []
    seen: set[str] = set()
    for i in range(2, len(argv), 2):
        name = argv[i].decode("utf-8", "replace")
        key = canonical(name)
        if key is None:
            raise CommandError(f"ERR Unknown option or number of arguments for CONFIG SET - '{name}'")
        # A name given twice is refused; a name and its alias (hash-max-ziplist-value and
        # hash-max-listpack-value) are not: both are set, in order, as Redis 7.0 does.
        given = name.lower()
        if given in seen:
            raise CommandError(
                f"ERR CONFIG SET failed (possibly related to argument '{name}') - duplicate parameter")
        seen.add(given)
        pairs.append((name, argv[i + 1].decode("utf-8", "surrogateescape")))
    backup = dict(cfg.values)
    try:
        for name, value in pairs:
            if canonical(name) == "notify-keyspace-events":
                try:
                    parse_notify_flags(value)
                except ValueError:
                    raise ConfigError("Invalid event class character. Use 'Ag$lshzxeKEtmdn'.") from None
            cfg.config_set(name, value)
    except ConfigError as e:
        cfg.values = backup
        raise CommandError(f"ERR CONFIG SET failed (possibly related to argument '{name}') - {e}") from None
    c.server.apply_config()
    return OK


@command("config|resetstat")
def config_resetstat(c: Client, argv: list[bytes]) -> bytes:
    srv = c.server
    srv.stat_numcommands = 0
    srv.stat_numconnections = 0
    srv.stat_rejected_conn = 0
    srv.stat_net_input_bytes = 0
    srv.stat_net_output_bytes = 0
    srv.error_counts.clear()
    srv.total_error_replies = 0
    c.ks.expired_keys = 0
    srv.evictor.evicted_keys = 0
    srv.evictor.peak_bytes = 0  # Redis resets its memory peak too
    c.ks.keyspace_hits = 0
    c.ks.keyspace_misses = 0
    for cmd in _all_commands(c):
        cmd.calls = cmd.usec = cmd.failed_calls = cmd.rejected_calls = 0
        cmd.lat_small = [0] * len(cmd.lat_small)
        cmd.lat_big = {}
    return OK


def _all_commands(c: Client) -> list:
    out = []
    for cmd in {id(x): x for x in c.server.table.values()}.values():
        out.append(cmd)
        if cmd.subcommands:
            out.extend(cmd.subcommands.values())
    return out


@command("config|rewrite")
def config_rewrite(c: Client, argv: list[bytes]) -> bytes:
    cfg = c.server.config
    if not cfg.config_file:
        raise CommandError("ERR The server is running without a config file")
    try:
        write_config_file(cfg, cfg.config_file)
    except OSError as e:
        raise CommandError(f"ERR Rewriting config file: {e.strerror}") from None
    return OK


def write_config_file(cfg: Config, path: str, force_all: bool = False) -> None:
    """CONFIG REWRITE of ``path``: comments and unknown lines kept, each directive once
    (every directive with ``force_all``); OSError when it cannot be written."""
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            old = f.read().splitlines()
    except OSError:
        old = []
    wanted = {ln.split(" ", 1)[0]: ln for ln in cfg.rewrite_lines(force_all)}
    out: list[str] = []
    done: set[str] = set()
    for line in old:
        words = line.strip().split()
        name = canonical(words[0]) if words and not words[0].startswith("#") else None
        if name is None:
            out.append(line)
            continue
        if name in done:
            continue
        done.add(name)
        if name in wanted:
            out.append(wanted[name])
    out.extend(ln for name, ln in wanted.items() if name not in done)
    with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
        f.write("\n".join(out) + "\n")


@command("config|help")
def config_help(c: Client, argv: list[bytes]) -> bytes:
    return _help([
        "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "GET <pattern>",
        "    Return parameters matching the glob-like <pattern> and their values.",
        "SET <directive> <value>",
        "    Set the configuration <directive> to <value>.",
        "RESETSTAT",
        "    Reset statistics reported by the INFO command.",
        "REWRITE",
        "    Rewrite the configuration file.",
        "HELP",
        "    Prints this help.",
    ])


# -- COMMAND --------------------------------------------------------------------------------------
@command("command")
def command_(c: Client, argv: list[bytes]) -> bytes:
    if len(argv) == 1:
        return pc.command_info_reply(None, c.resp)
    return b"-" + pc.unknown_command_error(argv) + b"\r\n"


@command("command|count")
def command_count(c: Client, argv: list[bytes]) -> bytes:
    return integer(pc.command_count())


@command("command|info")
def command_info(c: Client, argv: list[bytes]) -> bytes:
    return pc.command_info_reply(argv[2:] if len(argv) > 2 else None, c.resp)


@command("command|docs")
def command_docs(c: Client, argv: list[bytes]) -> bytes:
    return pc.command_docs_reply(argv[2:] if len(argv) > 2 else None, c.resp)


@command("command|list")
def command_list(c: Client, argv: list[bytes]) -> bytes:
    names = pc.command_list()
    if len(argv) > 2:
        if len(argv) != 5 or argv[2].lower() != b"filterby":
            raise CommandError(SYNTAX)
        kind, arg = argv[3].lower(), argv[4]
        if kind == b"pattern":
            names = [n for n in names if glob_match(arg, n, nocase=True)]
        elif kind == b"aclcat":
            cat = arg.lower().decode("utf-8", "replace")
            names = [n for n in names
                     if (info := pc.lookup_name(n)) is not None and cat in info.acl_categories]
        elif kind == b"module":
            names = []
        else:
            raise CommandError(SYNTAX)
    return array_header(len(names)) + b"".join(bulk(n) for n in names)


def _found_keys(find: Callable[[list[bytes]], list[Any]], argv: list[bytes]) -> list[Any]:
    try:
        return find(argv[2:])
    except pc.GetKeysError as e:
        raise CommandError(str(e)) from None


@command("command|getkeys")
def command_getkeys(c: Client, argv: list[bytes]) -> bytes:
    positions = _found_keys(pc.getkeys_command, argv)
    return array_header(len(positions)) + b"".join(bulk(argv[2 + p]) for p in positions)


@command("command|getkeysandflags")
def command_getkeysandflags(c: Client, argv: list[bytes]) -> bytes:
    found = _found_keys(pc.getkeysandflags_command, argv)
    parts = [array_header(len(found))]
    for pos, flags in found:
        parts.append(array_header(2) + bulk(argv[2 + pos]) + set_header(len(flags), c.resp))
        parts.extend(simple(f) for f in flags)
    return b"".join(parts)


@command("command|help")
def command_help(c: Client, argv: list[bytes]) -> bytes:
    return _help([
        "COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "(no subcommand)",
        "    Return details about all Redis commands.",
        "COUNT",
        "    Return the total number of commands in this Redis server.",
        "LIST",
        "    Return a list of all commands in this Redis server.",
        "INFO [<command-name> ...]",
        "    Return details about multiple Redis commands.",
        "    If no command names are given, documentation details for all",
        "    commands are returned.",
        "DOCS [<command-name> ...]",
        "    Return documentation details about multiple Redis commands.",
        "    If no command names are given, documentation details for all",
        "    commands are returned.",
        "GETKEYS <full-command>",
        "    Return the keys from a full Redis command.",
        "GETKEYSANDFLAGS <full-command>",
        "    Return the keys and the access flags from a full Redis command.",
        "HELP",
        "    Prints this help.",
    ])


# -- DEBUG ----------------------------------------------------------------------------------------
_DEBUG_NOT_ALLOWED = (
    "ERR DEBUG command not allowed. If the enable-debug-command option is set to \"local\", "
    "you can run it from a local connection, otherwise you need to set this option in the "
    "configuration file, and then restart the server."
)


def debug_allowed(c: Client) -> bool:
    mode = c.server.config.get("enable-debug-command")
    if mode == "yes":
        return True
    return mode == "local" and (c.addr.startswith("127.") or c.addr.startswith("::1"))


_TYPE_CODES = {b"string": 0, b"list": 1, b"set": 2, b"zset": 3, b"hash": 4, b"stream": 6}


def _sha1(data: bytes) -> bytes:
    return hashlib.sha1(data).digest()


def _mix(digest: bytes, data: bytes) -> bytes:
    """debug.c mixDigest: xor in SHA1(data), then replace by SHA1 of the result."""
    return _sha1(_xor(digest, _sha1(data)))


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


def object_digest(db: K.Database, key: bytes, v: object, start: bytes = bytes(20)) -> bytes:
    """debug.c xorObjectDigest: type, value, and the expire marker, folded into ``start``."""
    info = K.TYPES[type(v)]
    d = _mix(start, struct.pack(">I", _TYPE_CODES.get(info.name, 5)))
    if isinstance(v, bytes):
        d = _mix(d, v)
    elif info.name == b"list":
        for item in cast(Iterable[bytes], v):
            d = _mix(d, item)
    elif info.name == b"stream":  # entries mixed in order, like a list
        for item in cast(Any, v).digest_items():
            d = _mix(d, item)
    else:
        d = _xor(d, info.digest(v))  # sets, zsets, hashes: an xor of per-element digests
    if db.get_expire(key) is not None:
        d = _xor(d, _sha1(b"!!expire!!"))
    return d


def keyspace_digest(c: Client) -> bytes:
    """debug.c computeDatasetDigest (Redis' exact DEBUG DIGEST)."""
    final = bytes(20)
    for db in c.ks.dbs:
        if not db.data:
            continue
        final = _mix(final, struct.pack(">I", db.index))
        for key, v in list(db.data.items()):
            final = _xor(final, _sha1(object_digest(db, key, v, _mix(bytes(20), key))))
    return final.hex().encode()


def _debug_sleep(c: Client, argv: list[bytes]) -> bytes:
    secs = float(argv[2]) if len(argv) > 2 else 0.0
    time.sleep(max(0.0, secs))  # blocks the whole server, as in Redis
    return OK


def _debug_set_active_expire(c: Client, argv: list[bytes]) -> bytes:
    if len(argv) != 3:
        raise CommandError(SYNTAX)
    c.ks.active_expire_enabled = bool(parse_int(argv[2]))
    return OK


def _debug_digest(c: Client, argv: list[bytes]) -> bytes:
    return simple(keyspace_digest(c))


def _debug_digest_value(c: Client, argv: list[bytes]) -> bytes:
    out = [array_header(len(argv) - 2)]
    for key in argv[2:]:
        v = c.db.data.get(key)  # logically expired keys count, as in Redis
        out.append(simple(b"0" * 40 if v is None else object_digest(c.db, key, v).hex().encode()))
    return b"".join(out)


_POSITIVE = "ERR value is out of range, must be positive"
POPULATE_MAX = 1_000_000  # keys of one DEBUG POPULATE: a second or two of blocking
POPULATE_SIZE_MAX = 512 * 1024 * 1024  # bytes of each of its values


def _debug_populate(c: Client, argv: list[bytes]) -> bytes:
    if len(argv) < 3 or len(argv) > 5:
        raise CommandError(SYNTAX)
    count = parse_int(argv[2], _POSITIVE)
    prefix = argv[3] if len(argv) > 3 else b"key"
    size = parse_int(argv[4], _POSITIVE) if len(argv) > 4 else None
    if count < 0 or (size is not None and size < 0):
        raise CommandError(_POSITIVE)
    size = size or None  # 0: the plain "value:<n>"
    # Redis tries any count (2**62 keeps it busy for ever); ours refuses what it could not
    # finish in reasonable time, with Redis' error for a count its table cannot take
    if count > POPULATE_MAX or (size is not None and size > POPULATE_SIZE_MAX):
        raise CommandError("ERR OOM in dictTryExpand")
    db = c.db
    for i in range(count):
        key = prefix + b":%d" % i
        if db.lookup(key) is not None:
            continue
        val = b"value:%d" % i
        if size is not None:
            val = (val + bytes(size))[:size]
        db.set(key, val)
    return OK


def _debug_object(c: Client, argv: list[bytes]) -> bytes:
    if len(argv) != 3:
        raise CommandError(SYNTAX)
    v = c.db.lookup(argv[2])
    if v is None:
        raise CommandError(errors.NO_SUCH_KEY)
    info = K.TYPES[type(v)]
    enc = info.encoding(v).decode()
    refcount = 1
    if type(v) is bytes and enc == "int" and 0 <= int(v) < 10000:
        refcount = 2147483647
    ser = len(v) if type(v) is bytes else 0
    return simple(f"Value at:0x{id(v):x} refcount:{refcount} encoding:{enc} "
                  f"serializedlength:{ser} lru:0 lru_seconds_idle:0")


DEBUG_SUBCOMMANDS: dict[bytes, Callable[[Client, list[bytes]], bytes]] = {
    b"sleep": _debug_sleep,
    b"set-active-expire": _debug_set_active_expire,
    b"digest": _debug_digest,
    b"digest-value": _debug_digest_value,
    b"populate": _debug_populate,
    b"object": _debug_object,
}


@command("debug")
def debug(c: Client, argv: list[bytes]) -> bytes:
    if not debug_allowed(c):
        raise CommandError(_DEBUG_NOT_ALLOWED)
    fn = DEBUG_SUBCOMMANDS.get(argv[1].lower())
    if fn is None:
        raise CommandError(debug_unknown(argv[1]))
    return fn(c, argv)


def debug_unknown(sub: bytes) -> str:
    """Redis' error for a DEBUG subcommand it does not know or got the wrong arguments."""
    return (f"ERR unknown subcommand or wrong number of arguments for "
            f"'{errors._shown(sub, 128)}'. Try DEBUG HELP.")


# -- SLOWLOG / MONITOR / SHUTDOWN -------------------------------------------------------------
@command("slowlog|get")
def slowlog_get(c: Client, argv: list[bytes]) -> bytes:
    count = 10
    if len(argv) == 3:
        count = parse_int(argv[2], "ERR count should be greater than or equal to -1")
        if count < -1:
            raise CommandError("ERR count should be greater than or equal to -1")
    elif len(argv) > 3:
        raise CommandError(errors.wrong_args("slowlog|get"))
    entries = list(c.server.slowlog)
    if count != -1:
        entries = entries[:count]
    parts = [array_header(len(entries))]
    for eid, ts, dur, args, addr, name in entries:
        parts.append(b"*6\r\n" + integer(eid) + integer(ts) + integer(dur)
                     + array_header(len(args)) + b"".join(bulk(a) for a in args)
                     + bulk(addr) + bulk(name))
    return b"".join(parts)


@command("slowlog|len")
def slowlog_len(c: Client, argv: list[bytes]) -> bytes:
    return integer(len(c.server.slowlog))


@command("slowlog|reset")
def slowlog_reset(c: Client, argv: list[bytes]) -> bytes:
    c.server.slowlog.clear()
    return OK


@command("slowlog|help")
def slowlog_help(c: Client, argv: list[bytes]) -> bytes:
    return _help([
        "SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "GET [<count>]",
        "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
        "    Entries are made of:",
        "    id, timestamp, time in microseconds, arguments array, client IP and port,",
        "    client name",
        "LEN",
        "    Return the length of the slowlog.",
        "RESET",
        "    Reset the slowlog.",
        "HELP",
        "    Prints this help.",
    ])


@command("monitor")
def monitor(c: Client, argv: list[bytes]) -> bytes:
    if c.monitor:
        return OK
    c.server.add_monitor(c)
    return OK


@command("shutdown")
def shutdown(c: Client, argv: list[bytes]) -> bytes:
    for opt in argv[1:]:
        if opt.lower() not in (b"nosave", b"save", b"now", b"force", b"abort"):
            raise CommandError(SYNTAX)
    opts = {a.lower() for a in argv[1:]}
    if b"abort" in opts:
        raise CommandError("ERR No shutdown in progress.")
    if b"save" in opts and b"nosave" in opts:
        raise CommandError(SYNTAX)
    persistence = c.server.persistence
    if b"nosave" in opts and persistence is not None:
        persistence.save_params = []  # NOSAVE: no snapshot on the way out, save points or not
    c.server.request_shutdown()
    c.close_after_reply = True
    return b""
