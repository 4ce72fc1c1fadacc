"""Consumer-group commands: XGROUP (CREATE CREATECONSUMER DELCONSUMER DESTROY SETID HELP), XACK,
XPENDING, XCLAIM, XAUTOCLAIM — Redis 7.0's checks in its order, its replies, and what it sends
to replicas (XCLAIM and XAUTOCLAIM go as one ``XCLAIM ... FORCE JUSTID LASTID`` per entry they
move or drop, or ``XGROUP SETID`` when only LASTID moved the group)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from slotgate.node.commands.registry import command
from slotgate.node.commands.replies import OK, ONE, ZERO
from slotgate.node.commands.util import LONG_MAX, parse_int
from slotgate.node.core.errors import SYNTAX, WRONGTYPE, CommandError
from slotgate.node.core.keyspace import NOTIFY_STREAM
from slotgate.node.types.stream import (
    INVALID_READ,
    MIN_ID,
    Consumer,
    Fields,
    Group,
    Nack,
    Stream,
    StreamID,
    ms_now,
)
from slotgate.node.types.streams import (
    bulk_id,
    entry_reply,
    get_stream,
    parse_id,
    propagate,
    range_end,
    range_start,
    strict_id,
)
from slotgate.node.types.typeutil import parse_range
from slotgate.node.types.xread import claimer, create_consumer, setid_effect, xclaim_effect
from slotgate.protocol.resp import array_header

if TYPE_CHECKING:
    from slotgate.node.core.client import Client

NEEDS_KEY = ("ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may "
             "want to use the MKSTREAM option to create an empty stream automatically.")
BUSYGROUP = "BUSYGROUP Consumer Group name already exists"
ENTRIESREAD_RANGE = "ERR value for ENTRIESREAD must be positive or -1"
COUNT_POSITIVE = "ERR COUNT must be > 0"


def _text(b: bytes) -> str:
    """An argument as Redis' "%s" shows it: up to its first NUL byte."""
    return b.partition(b"\0")[0].decode("utf-8", "replace")


def no_such_group(key: bytes, group: bytes) -> str:
    return f"NOGROUP No such consumer group '{_text(group)}' for key name '{_text(key)}'"


def no_key_or_group(key: bytes, group: bytes) -> str:
    return f"NOGROUP No such key '{_text(key)}' or consumer group '{_text(group)}'"


def _sub_syntax(argv: list[bytes]) -> CommandError:
    return CommandError(f"ERR unknown subcommand or wrong number of arguments for "
                        f"'{_text(argv[1])}'. Try XGROUP HELP.")


def _entries_read(arg: bytes) -> int:
    n = parse_int(arg)
    if n < 0 and n != INVALID_READ:
        raise CommandError(ENTRIESREAD_RANGE)
    return n


def _group_target(c: Client, argv: list[bytes], mkstream: bool
                  ) -> tuple[Stream | None, Group | None]:
    """The common part of XGROUP: type check, key and (for some) group must exist."""
    s = get_stream(c.db, argv[2])
    gname = argv[3]
    if mkstream:
        return s, s.groups.get(gname) if s is not None else None
    if s is None:
        raise CommandError(NEEDS_KEY)
    g = s.groups.get(gname)
    if g is None and argv[1].lower() in (b"setid", b"createconsumer", b"delconsumer"):
        raise CommandError(no_such_group(argv[2], gname))
    return s, g


@command("xgroup|create")
def xgroup_create(c: Client, argv: list[bytes]) -> bytes:
    mkstream = False
    entries_read = INVALID_READ
    i = 5
    while i < len(argv):
        opt = argv[i].lower()
        if opt == b"mkstream":
            mkstream = True
            i += 1
        elif opt == b"entriesread" and i + 1 < len(argv):
            entries_read = _entries_read(argv[i + 1])
            i += 2
        else:
            raise _sub_syntax(argv)
    s, g = _group_target(c, argv, mkstream)
    if len(argv) > 8:
        raise _sub_syntax(argv)
    if argv[4] == b"$":
        sid = s.last_id if s is not None else MIN_ID
    else:
        sid = strict_id(argv[4])
    key = argv[2]
    if s is None:
        s = Stream()
        c.db.set(key, s)
    if argv[3] in s.groups:
        raise CommandError(BUSYGROUP)
    s.groups[argv[3]] = Group(sid, entries_read)
    c.ks.dirty += 1
    c.db.modified(key)
    c.db.notify(NOTIFY_STREAM, b"xgroup-create", key)
    return OK


@command("xgroup|setid")
def xgroup_setid(c: Client, argv: list[bytes]) -> bytes:
    entries_read = INVALID_READ
    i = 5
    while i < len(argv):  # Redis' option loop: each ENTRIESREAD parsed, then the key, then argc
        if argv[i].lower() != b"entriesread" or i + 1 >= len(argv):
            raise _sub_syntax(argv)
        entries_read = _entries_read(argv[i + 1])
        i += 2
    s, g = _group_target(c, argv, False)
    if len(argv) not in (5, 7):
        raise _sub_syntax(argv)
    assert s is not None and g is not None
    sid = s.last_id if argv[4] == b"$" else interval_free_id(argv[4])
    g.last_id = sid
    g.entries_read = entries_read
    c.ks.dirty += 1
    c.db.modified(argv[2])
    c.db.notify(NOTIFY_STREAM, b"xgroup-setid", argv[2])
    return OK


def interval_free_id(arg: bytes) -> StreamID:
    """streamParseIDOrReply (not strict: ``-`` and ``+`` allowed)."""
    return parse_id(arg)[0]


@command("xgroup|destroy")
def xgroup_destroy(c: Client, argv: list[bytes]) -> bytes:
    s, g = _group_target(c, argv, False)
    assert s is not None
    if g is None:
        return ZERO
    del s.groups[argv[3]]
    c.ks.dirty += 1
    c.db.modified(argv[2])
    c.db.notify(NOTIFY_STREAM, b"xgroup-destroy", argv[2])
    c.db.signal_ready(argv[2])  # blocked XREADGROUP readers get -NOGROUP
    return ONE


@command("xgroup|createconsumer")
def xgroup_createconsumer(c: Client, argv: list[bytes]) -> bytes:
    _, g = _group_target(c, argv, False)
    assert g is not None
    if argv[4] in g.consumers:
        return ZERO
    create_consumer(c, g, argv[4], argv[2])
    return ONE


@command("xgroup|delconsumer")
def xgroup_delconsumer(c: Client, argv: list[bytes]) -> bytes:
    _, g = _group_target(c, argv, False)
    assert g is not None
    cons = g.consumers.get(argv[4])
    if cons is None:
        return ZERO
    pending = len(cons.pel)
    g.delete_consumer(cons)
    c.ks.dirty += 1
    c.db.modified(argv[2])
    c.db.notify(NOTIFY_STREAM, b"xgroup-delconsumer", argv[2])
    return b":%d\r\n" % pending


_XGROUP_HELP = [
    b"XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    b"CREATE <key> <groupname> <id|$> [option]",
    b"    Create a new consumer group. Options are:",
    b"    * MKSTREAM",
    b"      Create the empty stream if it does not exist.",
    b"    * ENTRIESREAD entries_read",
    b"      Set the group's entries_read counter (internal use).",
    b"CREATECONSUMER <key> <groupname> <consumer>",
    b"    Create a new consumer in the specified group.",
    b"DELCONSUMER <key> <groupname> <consumer>",
    b"    Remove the specified consumer.",
    b"DESTROY <key> <groupname>",
    b"    Remove the specified group.",
    b"SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
    b"    Set the current group ID and entries_read counter.",
    b"HELP",
    b"    Prints this help.",
]


def help_reply(lines: list[bytes]) -> bytes:
    return array_header(len(lines)) + b"".join(b"+" + ln + b"\r\n" for ln in lines)


@command("xgroup|help")
def xgroup_help(c: Client, argv: list[bytes]) -> bytes:
    return help_reply(_XGROUP_HELP)


# --- XACK / XPENDING ------------------------------------------------------------------------
def _group_read(c: Client, key: bytes, gname: bytes) -> tuple[Stream | None, Group | None]:
    v = c.db.lookup_read(key)
    if v is None:
        return None, None
    if type(v) is not Stream:
        raise CommandError(WRONGTYPE)
    return v, v.groups.get(gname)


@command("xack")
def xack(c: Client, argv: list[bytes]) -> bytes:
    _, g = _group_read(c, argv[1], argv[2])
    if g is None:
        return ZERO
    ids = [strict_id(a) for a in argv[3:]]
    acked = 0
    for sid in ids:
        nack = g.pel.discard(sid)
        if nack is not None:
            del nack.consumer.pel[sid]
            acked += 1
    c.ks.dirty += acked
    if acked:
        c.db.modified(argv[1])
    return b":%d\r\n" % acked


@command("xpending")
def xpending(c: Client, argv: list[bytes]) -> bytes:
    n = len(argv)
    if n != 3 and not 6 <= n <= 9:
        raise CommandError(SYNTAX)
    minidle = 0
    count = 0
    start, end = MIN_ID, MIN_ID
    cname: bytes | None = None
    if n >= 6:
        si = 3
        if argv[3].lower() == b"idle":
            minidle = parse_int(argv[4])
            if n < 8:
                raise CommandError(SYNTAX)
            si += 2
        count = max(parse_int(argv[si + 2]), 0)
        start, end = range_start(argv[si]), range_end(argv[si + 1])
        if si + 3 < n:
            cname = argv[si + 3]
    s, g = _group_read(c, argv[1], argv[2])
    if g is None:
        raise CommandError(no_key_or_group(argv[1], argv[2]))
    if n == 3:
        if not g.pel:
            return b"*4\r\n:0\r\n" + c.null_bulk * 2 + c.null_array
        ids = g.pel.ids
        owners = [(name, len(cons.pel)) for name, cons in sorted(g.consumers.items()) if cons.pel]
        parts = [b"*4\r\n:%d\r\n" % len(ids), bulk_id(ids[0]), bulk_id(ids[-1]),
                 b"*%d\r\n" % len(owners)]
        for name, k in owners:
            kb = b"%d" % k
            parts.append(b"*2\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(name), name, len(kb), kb))
        return b"".join(parts)
    pel = g.pel
    if cname is not None:
        cons = g.consumers.get(cname)
        if cons is None:
            return b"*0\r\n"
        pel = cons.pel
    now = ms_now()
    out = []
    for sid in pel.from_id(start):
        if not count or sid > end:
            break
        nack = pel[sid]
        if minidle and now - nack.delivery_ms < minidle:
            continue
        count -= 1
        name = nack.consumer.name
        out.append(b"*4\r\n%s$%d\r\n%s\r\n:%d\r\n:%d\r\n" % (
            bulk_id(sid), len(name), name, max(now - nack.delivery_ms, 0), nack.count))
    return b"*%d\r\n" % len(out) + b"".join(out)


# --- XCLAIM / XAUTOCLAIM --------------------------------------------------------------------
def _claim_int(arg: bytes, what: str) -> int:
    return parse_int(arg, f"ERR Invalid {what} argument for XCLAIM")


def _hand_over(c: Client, key: bytes, gname: bytes, g: Group, sid: StreamID, nack: Nack,
               cons: Consumer, delivery_ms: int, retry: int, justid: bool, items: Fields,
               effects: list[list[bytes]]) -> bytes:
    """XCLAIM/XAUTOCLAIM: ``cons`` now owns ``sid`` (delivered at ``delivery_ms``; the count
    set to ``retry`` if given, else one more unless JUSTID); the entry's reply."""
    if nack.consumer is not cons:
        del nack.consumer.pel[sid]
    nack.delivery_ms = delivery_ms
    if retry >= 0:
        nack.count = retry
    elif not justid:
        nack.count += 1
    nack.consumer = cons
    cons.pel[sid] = nack
    effects.append(xclaim_effect(key, gname, g, sid, nack))
    return bulk_id(sid) if justid else entry_reply(sid, items, c.null_array)


@command("xclaim")
def xclaim(c: Client, argv: list[bytes]) -> bytes:
    key, gname = argv[1], argv[2]
    s, g = _group_read(c, key, gname)
    if s is None or g is None:
        raise CommandError(no_key_or_group(key, gname))
    minidle = max(_claim_int(argv[4], "min-idle-time"), 0)
    ids: list[StreamID] = []
    j = 5
    while j < len(argv):
        try:
            ids.append(strict_id(argv[j]))
        except CommandError:
            break
        j += 1
    now = ms_now()
    delivery = -1
    retry = -1
    force = justid = False
    last_id = MIN_ID
    while j < len(argv):
        more = len(argv) - 1 - j
        opt = argv[j].lower()
        if opt == b"force":
            force = True
        elif opt == b"justid":
            justid = True
        elif opt == b"idle" and more:
            j += 1
            delivery = now - _claim_int(argv[j], "IDLE option")
        elif opt == b"time" and more:
            j += 1
            delivery = _claim_int(argv[j], "TIME option")
        elif opt == b"retrycount" and more:
            j += 1
            retry = _claim_int(argv[j], "RETRYCOUNT option")
        elif opt == b"lastid" and more:
            j += 1
            last_id = strict_id(argv[j])
        else:
            raise CommandError(f"ERR Unrecognized XCLAIM option '{_text(argv[j])}'")
        j += 1
    effects: list[list[bytes]] = []
    moved_last = False
    if last_id > g.last_id:
        g.last_id = last_id
        moved_last = True
    if delivery == -1 or delivery < 0 or delivery > now:
        delivery = now
    cons = None
    out: list[bytes] = []
    for sid in ids:
        nack = g.pel.get(sid)
        items = s.get(sid)
        if items is None:
            if nack is not None:
                effects.append(xclaim_effect(key, gname, g, sid, nack))
                moved_last = False
                del g.pel[sid]
                del nack.consumer.pel[sid]
            continue
        fresh = False
        if force and nack is None:
            fresh = True
        elif nack is None:
            continue
        if nack is not None and minidle and now - nack.delivery_ms < minidle:
            continue
        cons = cons or claimer(c, g, argv[3], key)
        if fresh:
            nack = Nack(cons, delivery)
            g.pel[sid] = nack
        assert nack is not None
        out.append(_hand_over(c, key, gname, g, sid, nack, cons, delivery, retry, justid, items,
                              effects))
        moved_last = False
    if moved_last:
        effects.append(setid_effect(key, gname, g))
    if effects:
        c.ks.dirty += len(effects)
        c.db.modified(key)
        propagate(c, effects)
    return b"*%d\r\n" % len(out) + b"".join(out)


@command("xautoclaim")
def xautoclaim(c: Client, argv: list[bytes]) -> bytes:
    key, gname = argv[1], argv[2]
    minidle = max(parse_int(argv[4], "ERR Invalid min-idle-time argument for XAUTOCLAIM"), 0)
    start = range_start(argv[5])
    count = 100
    justid = False
    j = 6
    while j < len(argv):
        more = len(argv) - 1 - j
        opt = argv[j].lower()
        if opt == b"count" and more:
            count = parse_range(argv[j + 1], 1, LONG_MAX // 16, COUNT_POSITIVE)
            j += 1
        elif opt == b"justid":
            justid = True
        else:
            raise CommandError(SYNTAX)
        j += 1
    s, g = _group_read(c, key, gname)
    if s is None or g is None:
        raise CommandError(no_key_or_group(key, gname))
    attempts = count * 10
    now = ms_now()
    ids = g.pel.from_id(start)
    pos = 0
    cons = None
    out: list[bytes] = []
    deleted: list[StreamID] = []
    effects: list[list[bytes]] = []
    while attempts and count and pos < len(ids):
        attempts -= 1
        sid = ids[pos]
        pos += 1
        nack = g.pel[sid]
        items = s.get(sid)
        if items is None:
            effects.append(xclaim_effect(key, gname, g, sid, nack))
            del g.pel[sid]
            del nack.consumer.pel[sid]
            deleted.append(sid)
            count -= 1
            continue
        if minidle and now - nack.delivery_ms < minidle:
            continue
        cons = cons or claimer(c, g, argv[3], key)
        out.append(_hand_over(c, key, gname, g, sid, nack, cons, now, -1, justid, items,
                              effects))
        count -= 1
    cursor = ids[pos] if pos < len(ids) else MIN_ID
    if effects:
        c.ks.dirty += len(effects)
        c.db.modified(key)
        propagate(c, effects)
    return (b"*3\r\n" + bulk_id(cursor) + b"*%d\r\n" % len(out) + b"".join(out)
            + b"*%d\r\n" % len(deleted) + b"".join(bulk_id(d) for d in deleted))
