"""Stream commands, part one: XADD XRANGE XREVRANGE XLEN XDEL XTRIM XSETID, the id parsing and
reply helpers the other stream modules share, and the type's registration (TYPE, OBJECT
ENCODING, COPY, DEBUG DIGEST). The value itself is node/types/stream.py; consumer groups are
in xgroups.py, XREAD/XREADGROUP in xread.py, XINFO in xinfo.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from slotgate.node.commands.registry import command
from slotgate.node.commands.replies import EMPTY_ARRAY, OK, ZERO
from slotgate.node.commands.util import parse_int
from slotgate.node.core.errors import NO_SUCH_KEY, SYNTAX, WRONGTYPE, CommandError, wrong_args
from slotgate.node.core.keyspace import NOTIFY_STREAM, register_type
from slotgate.node.persistence.rdb_blobs import strict_int
from slotgate.node.types.stream import (
    MAX_ID,
    MIN_ID,
    U64,
    Fields,
    Stream,
    StreamID,
    decr_id,
    id_text,
    incr_id,
    ms_now,
)
from slotgate.node.types.typeutil import bulks, typed_lookups

if TYPE_CHECKING:
    from slotgate.node.core.client import Client

INVALID_ID = "ERR Invalid stream ID specified as stream command argument"
ID_TOO_SMALL = "ERR The ID specified in XADD is equal or smaller than the target stream top item"
ID_ZERO = "ERR The ID specified in XADD must be greater than 0-0"
EXHAUSTED = "ERR The stream has exhausted the last possible ID, unable to add more items"
TOO_LARGE = "ERR Elements are too large to be stored"
MAXLEN_NEGATIVE = "ERR The MAXLEN argument must be >= 0."
LIMIT_NEGATIVE = "ERR The LIMIT argument must be >= 0."
BOTH_STRATEGIES = "ERR syntax error, MAXLEN and MINID options at the same time are not compatible"
LIMIT_NO_STRATEGY = "ERR syntax error, LIMIT cannot be used without specifying a trimming strategy"
XTRIM_NO_STRATEGY = "ERR syntax error, XTRIM must be called with a trimming strategy"
LIMIT_NOT_APPROX = "ERR syntax error, LIMIT cannot be used without the special ~ option"
BAD_START = "ERR invalid start ID for the interval"
BAD_END = "ERR invalid end ID for the interval"
SETID_SMALLER = "ERR The ID specified in XSETID is smaller than the target stream top item"
SETID_ADDED_SMALL = "ERR The entries_added specified in XSETID is smaller than the target stream length"
SETID_ADDED_NEGATIVE = "ERR entries_added must be positive"
SETID_MAXDEL = "ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id"


# DEBUG DIGEST mixes Stream.digest_items() in order (node/commands/server_cmds.py)
register_type(Stream, b"stream", lambda s: b"stream", lambda s: b"", lambda s: s.copy())

get_stream, get_stream_read = typed_lookups(Stream)


def rdb_adapters() -> list[tuple[type, str, Callable[..., object], Callable[..., object]]]:
    """DUMP/RESTORE and snapshots: a stream is its own RDB value model (stream_rdb.py)."""
    from slotgate.node.types import stream_rdb  # noqa: F401 - registers the codec

    return [(Stream, "stream", lambda s: s, lambda s: s)]


# --- ids ------------------------------------------------------------------------------------
_SPACE = b" \t\n\v\f\r"


def string2ull(s: bytes) -> int | None:
    """util.c string2ull: a strict long long (negative refused), else C strtoull."""
    if not s:
        return None
    v = strict_int(s)
    if v is not None:
        return None if v < 0 else v
    t = s.lstrip(_SPACE)
    neg = t[:1] == b"-"
    if t[:1] in (b"+", b"-"):
        t = t[1:]
    if not t or not t.isdigit() or not t.isascii():
        return None
    v = int(t)
    if v > U64:
        return None
    return (-v) & U64 if neg else v


def parse_id(arg: bytes, missing_seq: int = 0, strict: bool = False,
             allow_star_seq: bool = False) -> tuple[StreamID, bool]:
    """streamParseID -> (id, seq_given); ``ms-*`` only with ``allow_star_seq`` (XADD)."""
    if len(arg) > 127:
        raise CommandError(INVALID_ID)
    buf = arg.split(b"\0", 1)[0]
    if strict and buf in (b"-", b"+"):
        raise CommandError(INVALID_ID)
    if buf == b"-":
        return MIN_ID, True
    if buf == b"+":
        return MAX_ID, True
    ms_part, dash, seq_part = buf.partition(b"-")
    ms = string2ull(ms_part)
    if ms is None:
        raise CommandError(INVALID_ID)
    if not dash:
        return (ms, missing_seq), True
    if allow_star_seq and seq_part == b"*":
        return (ms, 0), False
    seq = string2ull(seq_part)
    if seq is None:
        raise CommandError(INVALID_ID)
    return (ms, seq), True


def strict_id(arg: bytes, missing_seq: int = 0) -> StreamID:
    return parse_id(arg, missing_seq, strict=True)[0]


def interval_id(arg: bytes, missing_seq: int) -> tuple[StreamID, bool]:
    """streamParseIntervalIDOrReply: ``(`` makes the bound exclusive (strict id after it)."""
    if len(arg) > 1 and arg[:1] == b"(":
        return parse_id(arg[1:], missing_seq, strict=True)[0], True
    return parse_id(arg, missing_seq)[0], False


# --- replies --------------------------------------------------------------------------------
def bulk_id(sid: StreamID) -> bytes:
    t = id_text(sid)
    return b"$%d\r\n%s\r\n" % (len(t), t)


# ``[id, [field, value, ...]]`` of entries with up to 16 fields and values, one format each
_ENTRY_FORMAT = [b"*2\r\n$%%d\r\n%%s\r\n*%d\r\n" % n + b"$%d\r\n%s\r\n" * n
                 for n in range(17)]


def entry_reply(sid: StreamID, items: Fields | None, null_array: bytes) -> bytes:
    """``[id, [field, value, ...]]`` (a null fields array for a deleted PEL entry)."""
    t = b"%d-%d" % sid
    if items is None:
        return b"*2\r\n$%d\r\n%s\r\n%s" % (len(t), t, null_array)
    n = len(items)
    if n <= 16:
        args: list[object] = [0, b""] * n
        args[0::2] = map(len, items)
        args[1::2] = items
        return _ENTRY_FORMAT[n] % (len(t), t, *args)
    return b"*2\r\n$%d\r\n%s\r\n%s" % (len(t), t, bulks(items))


def entries_reply(entries: list[tuple[StreamID, Fields]], null_array: bytes) -> bytes:
    return b"*%d\r\n" % len(entries) + b"".join(entry_reply(i, x, null_array) for i, x in entries)


def node_limits(c: Client) -> tuple[int, int]:
    v = c.server.config.values
    return int(v["stream-node-max-entries"]), int(v["stream-node-max-bytes"])


def obeys_master(c: Client) -> bool:
    """mustObeyClient: our master's link or the AOF loader (an unregistered internal client)."""
    return c.is_master or c.server.clients.get(c.id) is not c


def propagate(c: Client, argvs: list[list[bytes]]) -> None:
    """alsoPropagate several effects: wrapped in MULTI/EXEC unless already inside EXEC."""
    if len(argvs) > 1 and not c.in_exec:
        argvs = [[b"MULTI"], *argvs, [b"EXEC"]]
    if c.propagate_as is None:
        c.propagate_as = []
    c.propagate_as.extend(argvs)


# --- XADD / XTRIM ---------------------------------------------------------------------------
class TrimArgs:
    __slots__ = ("maxlen", "minid", "approx", "limit", "arg_idx", "nomkstream", "id", "seq_given",
                 "id_given")

    def __init__(self) -> None:
        self.maxlen: int | None = None
        self.minid: StreamID | None = None
        self.approx = False
        self.limit = 0
        self.arg_idx = 0
        self.nomkstream = False
        self.id: StreamID = MIN_ID
        self.seq_given = True
        self.id_given = False


def parse_trim_args(c: Client, argv: list[bytes], xadd: bool) -> tuple[TrimArgs, int]:
    """streamParseAddOrTrimArgsOrReply -> (args, index of the id for XADD)."""
    a = TrimArgs()
    limit_given = False
    n = len(argv)
    i = 2
    while i < n:
        more = n - 1 - i
        opt = argv[i]
        low = opt.lower()
        if xadd and opt == b"*":
            break
        if low in (b"maxlen", b"minid") and more:
            if a.maxlen is not None or a.minid is not None:
                raise CommandError(BOTH_STRATEGIES)
            a.approx = False
            nxt = argv[i + 1]
            if more >= 2 and nxt in (b"~", b"="):
                a.approx = nxt == b"~"
                i += 1
            if low == b"maxlen":
                v = parse_int(argv[i + 1])
                if v < 0:
                    raise CommandError(MAXLEN_NEGATIVE)
                a.maxlen = v
            else:
                a.minid = strict_id(argv[i + 1])
            i += 1
            a.arg_idx = i
        elif low == b"limit" and more:
            a.limit = parse_int(argv[i + 1])
            if a.limit < 0:
                raise CommandError(LIMIT_NEGATIVE)
            limit_given = True
            i += 1
        elif xadd and low == b"nomkstream":
            a.nomkstream = True
        elif xadd:
            a.id, a.seq_given = parse_id(opt, 0, strict=True, allow_star_seq=True)
            a.id_given = True
            break
        else:
            raise CommandError(SYNTAX)
        i += 1
    strategy = a.maxlen is not None or a.minid is not None
    if a.limit and not strategy:
        raise CommandError(LIMIT_NO_STRATEGY)
    if not xadd and not strategy:
        raise CommandError(XTRIM_NO_STRATEGY)
    if obeys_master(c):
        a.limit = 0
    elif limit_given:
        if not a.approx:
            raise CommandError(LIMIT_NOT_APPROX)
    elif a.approx:
        a.limit = 100 * node_limits(c)[0]
        if a.limit <= 0 or a.limit > 10000:
            a.limit = 10000
    else:
        a.limit = 0
    return a, i


def _trim(c: Client, s: Stream, a: TrimArgs, argv: list[bytes], key: bytes) -> int:
    """Trim as parsed; when approximate, rewrite ``~`` to ``=`` and the threshold to what is
    now true, so replicas and the AOF remove exactly the same entries."""
    deleted = s.trim(a.maxlen, a.minid, a.approx, a.limit)
    if deleted:
        c.db.notify(NOTIFY_STREAM, b"xtrim", key)
    if a.approx:
        argv[a.arg_idx - 1] = b"="
        if a.maxlen is not None:
            argv[a.arg_idx] = b"%d" % s.length
        else:
            argv[a.arg_idx] = id_text(s.edge_id(True, True))
    return deleted


# XADD key * ...: no option, an id to generate (parse_trim_args' answer; never changed)
_PLAIN_XADD: Final = TrimArgs()


@command("xadd")
def xadd(c: Client, argv: list[bytes]) -> bytes:
    if argv[2] == b"*":
        a, idpos = _PLAIN_XADD, 2
    else:
        a, idpos = parse_trim_args(c, argv, True)
    n = len(argv)
    nfields = n - idpos - 1
    if nfields < 2 or nfields % 2:
        raise CommandError(wrong_args("xadd"))
    if a.id_given and a.seq_given and a.id == MIN_ID:
        raise CommandError(ID_ZERO)
    db = c.db
    key = argv[1]
    v = db.lookup(key)
    created = False
    if v is None:
        if a.nomkstream:
            return c.null_bulk
        s = Stream()
        created = True
    elif type(v) is Stream:
        s = v
    else:
        raise CommandError(WRONGTYPE)
    last_ms, last_seq = s.last_id
    if last_ms == U64 and last_seq == U64:
        raise CommandError(EXHAUSTED)
    if not a.id_given:  # streamNextID: now in ms, or one past the last id
        ms = ms_now()
        if ms > last_ms:
            seq = 0
        elif last_seq != U64:
            ms, seq = last_ms, last_seq + 1
        else:
            ms, seq = last_ms + 1, 0
    else:
        ms, seq = a.id
        if not a.seq_given:
            if ms == last_ms:
                if last_seq == U64:
                    raise CommandError(ID_TOO_SMALL)
                seq = last_seq + 1
        if ms < last_ms or ms == last_ms and seq <= last_seq:
            raise CommandError(ID_TOO_SMALL)
    items = tuple(argv[idpos + 1:])
    raw_len = 0
    for item in items:
        raw_len += len(item)
    if raw_len > (1 << 30):
        raise CommandError(TOO_LARGE)
    if created:
        db.set(key, s)
        max_entries = max_bytes = 0  # a new stream: its first node, whatever the limits
    else:
        max_entries, max_bytes = node_limits(c)
    sid = (ms, seq)
    s.append(sid, items, max_entries, max_bytes, raw_len)
    db.modified(key)
    db.notify(NOTIFY_STREAM, b"xadd", key)
    c.ks.dirty += 1
    t = b"%d-%d" % (ms, seq)
    trimming = a.maxlen is not None or a.minid is not None
    if trimming or c.ks.propagate_hooks:  # only call() reads what propagates, with hooks
        p_argv = list(argv)
        if trimming:
            _trim(c, s, a, p_argv, key)
        if not a.id_given or not a.seq_given:
            p_argv[idpos] = t
        c.propagate_as = [p_argv]
    db.signal_ready(key)
    return b"$%d\r\n%s\r\n" % (len(t), t)


@command("xtrim")
def xtrim(c: Client, argv: list[bytes]) -> bytes:
    a, _ = parse_trim_args(c, argv, False)
    db = c.db
    key = argv[1]
    s = get_stream(db, key)
    if s is None:
        return ZERO
    p_argv = list(argv)
    deleted = _trim(c, s, a, p_argv, key)
    if deleted:
        db.modified(key)
        c.ks.dirty += deleted
        c.propagate_as = [p_argv]
    return b":%d\r\n" % deleted


# --- reads ----------------------------------------------------------------------------------
@command("xlen")
def xlen(c: Client, argv: list[bytes]) -> bytes:
    s = get_stream_read(c.db, argv[1])
    return b":%d\r\n" % (s.length if s is not None else 0)


def range_start(arg: bytes) -> StreamID:
    """The inclusive start of an interval (``(`` excludes: the next id)."""
    start, ex = interval_id(arg, 0)
    if ex:
        nxt = incr_id(start)
        if nxt is None:
            raise CommandError(BAD_START)
        start = nxt
    return start


def range_end(arg: bytes) -> StreamID:
    """The inclusive end of an interval (a missing seq is the largest; ``(`` excludes)."""
    end, ex = interval_id(arg, U64)
    if ex:
        prv = decr_id(end)
        if prv is None:
            raise CommandError(BAD_END)
        end = prv
    return end


def _xrange(c: Client, argv: list[bytes], rev: bool) -> bytes:
    start_arg, end_arg = (argv[3], argv[2]) if rev else (argv[2], argv[3])
    start = range_start(start_arg)
    end = range_end(end_arg)
    count = -1
    j = 4
    while j < len(argv):
        if argv[j].lower() == b"count" and j + 1 < len(argv):
            count = max(parse_int(argv[j + 1]), 0)
            j += 2
        else:
            raise CommandError(SYNTAX)
    s = get_stream_read(c.db, argv[1])
    if s is None:
        return EMPTY_ARRAY
    if count == 0:
        return c.null_array
    out = []
    for e in s.range(start, end, rev):
        out.append(e)
        if len(out) == count:
            break
    return entries_reply(out, c.null_array)


@command("xrange")
def xrange(c: Client, argv: list[bytes]) -> bytes:
    return _xrange(c, argv, False)


@command("xrevrange")
def xrevrange(c: Client, argv: list[bytes]) -> bytes:
    return _xrange(c, argv, True)


# --- XDEL / XSETID --------------------------------------------------------------------------
@command("xdel")
def xdel(c: Client, argv: list[bytes]) -> bytes:
    db = c.db
    key = argv[1]
    s = get_stream(db, key)
    if s is None:
        return ZERO
    ids = [strict_id(a) for a in argv[2:]]
    deleted = 0
    first = False
    for sid in ids:
        if s.delete(sid):
            if sid == s.first_id:
                first = True
            if sid > s.max_deleted:
                s.max_deleted = sid
            deleted += 1
    if deleted:
        if s.length == 0:
            s.first_id = MIN_ID
        elif first:
            s.first_id = s.edge_id(True, False)
        db.modified(key)
        db.notify(NOTIFY_STREAM, b"xdel", key)
        c.ks.dirty += deleted
    return b":%d\r\n" % deleted


@command("xsetid")
def xsetid(c: Client, argv: list[bytes]) -> bytes:
    sid = strict_id(argv[2])
    entries_added = -1
    max_xdel = MIN_ID
    i = 3
    while i < len(argv):
        more = len(argv) - 1 - i
        opt = argv[i].lower()
        if opt == b"entriesadded" and more:
            entries_added = parse_int(argv[i + 1])
            if entries_added < 0:
                raise CommandError(SETID_ADDED_NEGATIVE)
            i += 2
        elif opt == b"maxdeletedid" and more:
            max_xdel = strict_id(argv[i + 1])
            if sid < max_xdel:
                raise CommandError(SETID_MAXDEL)
            i += 2
        else:
            raise CommandError(SYNTAX)
    db = c.db
    key = argv[1]
    s = get_stream(db, key)
    if s is None:
        raise CommandError(NO_SUCH_KEY)
    if s.length > 0:
        if sid < s.edge_id(False, False):
            raise CommandError(SETID_SMALLER)
        if entries_added != -1 and s.length > entries_added:
            raise CommandError(SETID_ADDED_SMALL)
    s.last_id = sid
    if entries_added != -1:
        s.entries_added = entries_added
    if max_xdel != MIN_ID:
        s.max_deleted = max_xdel
    db.modified(key)
    db.notify(NOTIFY_STREAM, b"xsetid", key)
    c.ks.dirty += 1
    return OK


def check_type(v: object) -> Stream | None:
    if v is not None and type(v) is not Stream:
        raise CommandError(WRONGTYPE)
    return v  # type: ignore[return-value]
