"""XREAD and XREADGROUP, served at once or blocked (Redis 7.0's xreadCommand and
serveClientsBlockedOnStreamKey), and the group read both XREADGROUP paths share: new entries
(``>``) move the group's last id and entries-read and go to the consumer's PEL; history reads
(any other id) come from the consumer's own PEL. Effects go to replicas as Redis sends them:
one ``XCLAIM ... FORCE JUSTID LASTID`` per delivered entry, ``XGROUP CREATECONSUMER`` and
``XGROUP SETID ... ENTRIESREAD`` for NOACK reads.

A blocked reader waits on its keys through ``Client.block`` (FIFO per key, redirected by the
cluster like BLPOP). A blocked XREADGROUP gets ``-NOGROUP`` when its group is destroyed and
``-UNBLOCKED`` when the key is deleted or overwritten, as 7.0.15 answers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slotgate.node.commands.registry import command
from slotgate.node.commands.util import parse_int
from slotgate.node.core.errors import SYNTAX, TIMEOUT_NEGATIVE, WRONGTYPE, CommandError
from slotgate.node.core.keyspace import NOTIFY_STREAM
from slotgate.node.types.stream import (
    INVALID_READ,
    MAX_ID,
    MIN_ID,
    Consumer,
    Group,
    Nack,
    Stream,
    StreamID,
    id_text,
    incr_id,
    ms_now,
)
from slotgate.node.types.streams import entry_reply, propagate, strict_id

if TYPE_CHECKING:
    from slotgate.node.core.client import Client
    from slotgate.node.core.keyspace import Database

UNBALANCED = ("ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must be "
              "specified.")
GROUP_ONLY = "ERR The GROUP option is only supported by XREADGROUP. You called XREAD instead."
NOACK_ONLY = "ERR The NOACK option is only supported by XREADGROUP. You called XREAD instead."
MISSING_GROUP = "ERR Missing GROUP option for XREADGROUP"
DOLLAR_IN_GROUP = ("ERR The $ ID is meaningless in the context of XREADGROUP: you want to read "
                   "the history of this consumer by specifying a proper ID, or use the > ID to "
                   "get new messages. The $ ID would just return an empty result set.")
GT_OUTSIDE_GROUP = ("ERR The > ID can be specified only when calling XREADGROUP using the GROUP "
                    "<group> <consumer> option.")
TIMEOUT_NOT_INT = "ERR timeout is not an integer or out of range"
BLOCK_IN_SCRIPT = "ERR %s command is not allowed with BLOCK option from scripts"
GROUP_GONE = "NOGROUP the consumer group this client was blocked on no longer exists"
KEY_GONE = "UNBLOCKED the stream key no longer exists"
BLOCKED_DEFAULT_COUNT = 1000  # XREAD_BLOCKED_DEFAULT_COUNT


def no_group(key: bytes, group: bytes) -> str:
    key_s, group_s = (b.partition(b"\0")[0].decode("utf-8", "replace") for b in (key, group))  # "%s"
    return (f"NOGROUP No such key '{key_s}' or consumer group '{group_s}' in XREADGROUP with "
            "GROUP option")


def xclaim_effect(key: bytes, gname: bytes, g: Group, sid: StreamID, nack: Nack) -> list[bytes]:
    """streamPropagateXCLAIM: how a delivery (or a dropped PEL entry) reaches replicas."""
    return [b"XCLAIM", key, gname, nack.consumer.name, b"0", id_text(sid), b"TIME",
            b"%d" % nack.delivery_ms, b"RETRYCOUNT", b"%d" % nack.count, b"FORCE", b"JUSTID",
            b"LASTID", id_text(g.last_id)]


def setid_effect(key: bytes, gname: bytes, g: Group) -> list[bytes]:
    """streamPropagateGroupID."""
    return [b"XGROUP", b"SETID", key, gname, id_text(g.last_id), b"ENTRIESREAD",
            b"%d" % g.entries_read]


def create_consumer(c: Client, g: Group, name: bytes, key: bytes) -> Consumer:
    """streamCreateConsumer (SCC_DEFAULT): event and dirty."""
    cons = g.consumer(name)
    assert cons is not None
    c.db.notify(NOTIFY_STREAM, b"xgroup-createconsumer", key)
    c.ks.dirty += 1
    return cons


def claimer(c: Client, g: Group, name: bytes, key: bytes, noack: bool = False,
            effects: list[list[bytes]] | None = None, gname: bytes = b"") -> Consumer:
    """The consumer ``name`` (seen now), created if new; a new one that reads with NOACK is
    announced to replicas (its reads leave no XCLAIM that would create it there)."""
    cons = g.consumers.get(name)
    if cons is not None:
        cons.seen_ms = ms_now()
        return cons
    cons = create_consumer(c, g, name, key)
    if noack and effects is not None:
        effects.append([b"XGROUP", b"CREATECONSUMER", key, gname, name])
    return cons


def read_new(c: Client, s: Stream, key: bytes, gname: bytes | None, g: Group | None,
             cons: Consumer | None, start: StreamID, count: int, noack: bool,
             effects: list[list[bytes]]) -> bytes:
    """streamReplyWithRange from ``start`` (no end): with a group, move its last id and
    entries-read and (unless NOACK) add each entry to the PELs, recording the effects."""
    out: list[bytes] = []
    moved = False
    now = ms_now()
    for sid, items in s.range(start, MAX_ID):
        if g is not None and sid > g.last_id:
            if g.entries_read != INVALID_READ and not s.range_has_tombstones(sid):
                g.entries_read += 1
            elif s.entries_added:
                g.entries_read = s.estimate_distance(sid)
            g.last_id = sid
            if noack:
                moved = True
        out.append(entry_reply(sid, items, c.null_array))
        if g is not None and cons is not None and not noack:
            nack = g.pel.get(sid)
            if nack is None:
                nack = Nack(cons, now)
                g.pel[sid] = nack
            else:
                del nack.consumer.pel[sid]
                nack.consumer = cons
                nack.delivery_ms = now
                nack.count = 1
            cons.pel[sid] = nack
            assert gname is not None
            effects.append(xclaim_effect(key, gname, g, sid, nack))
        if count and len(out) == count:
            break
    if moved and g is not None and gname is not None:
        effects.append(setid_effect(key, gname, g))
    return b"*%d\r\n" % len(out) + b"".join(out)


def read_history(c: Client, s: Stream, cons: Consumer, start: StreamID, count: int) -> bytes:
    """streamReplyWithRangeFromConsumerPEL: the consumer's own pending entries from
    ``start``; a deleted entry comes back with a null field list."""
    out: list[bytes] = []
    now = ms_now()
    ids = cons.pel.from_id(start)
    for sid in ids[:count] if count else ids:
        items = s.get(sid)
        out.append(entry_reply(sid, items, c.null_array))
        if items is not None:
            nack = cons.pel[sid]
            nack.delivery_ms = now
            nack.count += 1
    return b"*%d\r\n" % len(out) + b"".join(out)


def _key_header(c: Client, key: bytes) -> bytes:
    head = b"$%d\r\n%s\r\n" % (len(key), key)
    return (b"*2\r\n" if c.resp == 2 else b"") + head


def _wrap(c: Client, n: int, body: bytes) -> bytes:
    return (b"*%d\r\n" if c.resp == 2 else b"%%%d\r\n") % n + body


def _lookup(db: Database, key: bytes) -> Stream | None:
    v = db.lookup_read(key)
    if v is not None and type(v) is not Stream:
        raise CommandError(WRONGTYPE)
    return v


def _xread(c: Client, argv: list[bytes], group_cmd: bool) -> bytes:
    timeout_ms = -1
    count = 0
    streams_arg = 0
    noack = False
    gname: bytes | None = None
    cname = b""
    n = len(argv)
    i = 1
    while i < n:
        more = n - i - 1
        o = argv[i].lower()
        if o == b"block" and more:
            if c.script:
                raise CommandError(BLOCK_IN_SCRIPT % argv[0].decode("utf-8", "replace"))
            i += 1
            try:
                timeout_ms = parse_int(argv[i])
            except CommandError:
                raise CommandError(TIMEOUT_NOT_INT) from None
            if timeout_ms < 0:
                raise CommandError(TIMEOUT_NEGATIVE)
        elif o == b"count" and more:
            i += 1
            count = max(parse_int(argv[i]), 0)
        elif o == b"streams" and more:
            streams_arg = i + 1
            if (n - streams_arg) % 2:
                raise CommandError(UNBALANCED)
            break
        elif o == b"group" and more >= 2:
            if not group_cmd:
                raise CommandError(GROUP_ONLY)
            gname, cname = argv[i + 1], argv[i + 2]
            i += 2
        elif o == b"noack":
            if not group_cmd:
                raise CommandError(NOACK_ONLY)
            noack = True
        else:
            raise CommandError(SYNTAX)
        i += 1
    if not streams_arg:
        raise CommandError(SYNTAX)
    if group_cmd and gname is None:
        raise CommandError(MISSING_GROUP)
    nkeys = (n - streams_arg) // 2
    keys = argv[streams_arg:streams_arg + nkeys]
    db = c.db
    ids: list[StreamID] = []
    groups: list[Group | None] = []
    for k, key in enumerate(keys):
        s = _lookup(db, key)
        g = None
        if gname is not None:
            g = s.groups.get(gname) if s is not None else None
            if g is None:
                raise CommandError(no_group(key, gname))
        groups.append(g)
        arg = argv[streams_arg + nkeys + k]
        if arg == b"$":
            if group_cmd:
                raise CommandError(DOLLAR_IN_GROUP)
            ids.append(s.last_id if s is not None else MIN_ID)
        elif arg == b">":
            if not group_cmd:
                raise CommandError(GT_OUTSIDE_GROUP)
            ids.append(MAX_ID)
        else:
            ids.append(strict_id(arg))
    parts: list[bytes] = []
    effects: list[list[bytes]] = []
    dirty_before = c.ks.dirty
    for k, key in enumerate(keys):
        s = _lookup(db, key)
        if s is None:
            continue
        gt = ids[k]
        g = groups[k]
        history = False
        if g is not None:
            if gt != MAX_ID:
                history = True
            elif s.length and s.edge_id(False, False) > g.last_id:
                gt = g.last_id
            else:
                continue
        elif not (s.length and s.edge_id(False, False) > gt):
            continue
        start = incr_id(gt) or MAX_ID
        cons = None if g is None else claimer(c, g, cname, key, noack, effects, gname or b"")
        if history and cons is not None:
            body = read_history(c, s, cons, start, count)
        else:
            body = read_new(c, s, key, gname, g, cons, start, count, noack, effects)
        parts.append(_key_header(c, key) + body)
        if g is not None:
            c.ks.dirty += 1
    if parts:
        _finish(c, effects, dirty_before)
        return _wrap(c, len(parts), b"".join(parts))
    if timeout_ms == -1:
        _finish(c, effects, dirty_before)
        return c.null_array
    return _block(c, argv, keys, ids, timeout_ms, count or BLOCKED_DEFAULT_COUNT, gname, cname,
                  noack)


def _finish(c: Client, effects: list[list[bytes]], dirty_before: int) -> None:
    """Replicas get the effects, never XREADGROUP itself (nothing when there are none)."""
    if effects:
        propagate(c, effects)
    elif c.ks.dirty != dirty_before:
        c.ks.dirty = dirty_before  # history reads change nothing a replica must know


def _block(c: Client, argv: list[bytes], keys: list[bytes], ids: list[StreamID],
           timeout_ms: int, count: int, gname: bytes | None, cname: bytes, noack: bool) -> bytes:
    wanted: dict[bytes, StreamID] = {}
    for key, sid in zip(keys, ids, strict=True):
        wanted.setdefault(key, sid)  # a key given twice waits for its first id, as in Redis

    def serve(bc: Client, sdb: Database, key: bytes) -> bytes | None:
        v = sdb.lookup(key)
        if type(v) is not Stream:
            if gname is not None:
                return b"-" + KEY_GONE.encode() + b"\r\n"
            return None
        s: Stream = v
        gt = wanted[key]
        g = None
        if gname is not None:
            g = s.groups.get(gname)
            if g is None:
                return b"-" + GROUP_GONE.encode() + b"\r\n"
            gt = g.last_id
        if not s.last_id > gt:
            return None
        effects: list[list[bytes]] = []
        cons = None if g is None else claimer(bc, g, cname, key, noack, effects, gname or b"")
        start = incr_id(gt) or MAX_ID
        body = read_new(bc, s, key, gname, g, cons, start, count, noack, effects)
        if effects:
            bc.propagate_as = None
            propagate(bc, effects)
            bc.ks.dirty += 1
        return _wrap(bc, 1, _key_header(bc, key) + body)

    return c.block(list(dict.fromkeys(keys)), timeout_ms / 1000.0, serve, argv)


@command("xread")
def xread(c: Client, argv: list[bytes]) -> bytes:
    return _xread(c, argv, False)


@command("xreadgroup")
def xreadgroup(c: Client, argv: list[bytes]) -> bytes:
    return _xread(c, argv, True)
