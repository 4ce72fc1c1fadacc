"""A stream in Redis 7.0's RDB form (RDB_TYPE_STREAM_LISTPACKS_2 = 19; type 15 of older servers
loads too), for DUMP/RESTORE, snapshots and MIGRATE.

Body: the number of listpack nodes, each as its 16-byte big-endian master id and its listpack
(master entry: live count, deleted count, field count, fields, 0; then per entry: flags,
ms and seq deltas from the master id, the field count and fields unless they equal the
master's, the values, and the entry's element count); then length, last id, first id, max
deleted id, entries added; then the groups in name order: name, last id, entries-read (-1 as
2**64-1), the PEL (16-byte ids, delivery time as 8 little-endian bytes, delivery count) and the
consumers in name order (name, seen time, their PEL as bare ids). Strings are written as
Redis' rdbSaveRawString writes them (integer forms, LZF when it saves 4 bytes or more), so a
DUMP is byte-identical with redis-server's (in pure Python up to ``LZF_MAX_STREAM_BYTES``). Anything
inconsistent is ``ERR Bad data format``, never a crash.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slotgate.node.persistence import lzf, rdb
from slotgate.node.persistence.rdb_blobs import (
    ERR_BAD_FORMAT,
    RdbError,
    listpack_decode,
    listpack_from_entries,
    lp_entry,
    strict_int,
)
from slotgate.node.types.stream import (
    FLAG_DELETED,
    FLAG_SAMEFIELDS,
    U64,
    Consumer,
    Group,
    Nack,
    Node,
    Stream,
    StreamID,
)

if TYPE_CHECKING:
    from slotgate.node.persistence.rdb import _Reader

_UNOWNED = Consumer(b"", 0)  # the owner of a loaded pending entry until its consumer is read

T_STREAM_LISTPACKS = 15
T_STREAM_LISTPACKS_2 = 19


def _key(sid: StreamID) -> bytes:
    return sid[0].to_bytes(8, "big") + sid[1].to_bytes(8, "big")


def _int(n: int) -> bytes:
    return lp_entry(b"%d" % n)


def node_listpack(node: Node) -> bytes:
    """The node's listpack, element by element as Redis lays it out."""
    els = [_int(node.live), _int(node.ndel), _int(len(node.mfields))]
    els += [lp_entry(f) for f in node.mfields]
    els.append(_int(0))
    mms, mseq = node.master
    for sid, items, dead in zip(node.ids, node.items, node.dead, strict=True):
        same = node.same_fields(items)
        flags = (FLAG_SAMEFIELDS if same else 0) | (FLAG_DELETED if dead else 0)
        els += [_int(flags), _int(sid[0] - mms), _int(sid[1] - mseq)]
        n = len(items) // 2
        if same:
            els += [lp_entry(items[i]) for i in range(1, len(items), 2)]
            els.append(_int(n + 3))
        else:
            els.append(_int(n))
            els += [lp_entry(x) for x in items]
            els.append(_int(2 * n + 4))
    return listpack_from_entries(els)


# LZF in pure Python runs at 2-4 MB/s: there, streams whose listpacks add up to more than this
# are written uncompressed (still loadable everywhere, no longer byte-identical with Redis'
# DUMP); the compiled build compresses every stream (lzf.COMPILED)
LZF_MAX_STREAM_BYTES = 256 * 1024


def _string(b: bytes, compress: bool = False) -> bytes:
    """rdbSaveRawString: an integer form for short numbers, LZF when it saves 4+ bytes."""
    return rdb._string_bytes(b, compress)


def _ms(n: int) -> bytes:
    return (n & U64).to_bytes(8, "little")


def encode(s: Stream, limits: object = None) -> bytes:
    packed = rdb.LZF["on"] and (lzf.COMPILED
                             or sum(node.nbytes() for node in s.nodes) <= LZF_MAX_STREAM_BYTES)
    out = [bytes((T_STREAM_LISTPACKS_2,)), rdb._len_bytes(len(s.nodes))]
    for node in s.nodes:
        out.append(_string(_key(node.master)))
        out.append(_string(node_listpack(node), packed))
    out.append(rdb._len_bytes(s.length))
    for sid in (s.last_id, s.first_id, s.max_deleted):
        out += [rdb._len_bytes(sid[0]), rdb._len_bytes(sid[1])]
    out.append(rdb._len_bytes(s.entries_added))
    out.append(rdb._len_bytes(len(s.groups)))
    for name, g in sorted(s.groups.items()):
        out.append(_string(name, packed))
        out += [rdb._len_bytes(g.last_id[0]), rdb._len_bytes(g.last_id[1]),
                rdb._len_bytes(g.entries_read & U64)]
        pel = g.pel.ids
        out.append(rdb._len_bytes(len(pel)))
        for sid in pel:
            nack = g.pel[sid]
            out += [_key(sid), _ms(nack.delivery_ms), rdb._len_bytes(nack.count)]
        out.append(rdb._len_bytes(len(g.consumers)))
        for cname, cons in sorted(g.consumers.items()):
            out += [_string(cname, packed), _ms(cons.seen_ms), rdb._len_bytes(len(cons.pel))]
            out += [_key(sid) for sid in cons.pel.ids]
    return b"".join(out)


# --- loading ----------------------------------------------------------------------------------
def _bad() -> RdbError:
    return RdbError(ERR_BAD_FORMAT)


def _num(els: list[bytes], i: int) -> int:
    if i >= len(els):
        raise _bad()
    v = strict_int(els[i])
    if v is None:
        raise _bad()
    return v


def _id(ms: int, seq: int) -> StreamID:
    if not (0 <= ms <= U64 and 0 <= seq <= U64):
        raise _bad()
    return ms, seq


def _node_from(master: StreamID, blob: bytes) -> Node:
    els = listpack_decode(blob)
    live, ndel, nf = _num(els, 0), _num(els, 1), _num(els, 2)
    if nf <= 0 or 3 + nf >= len(els) or _num(els, 3 + nf) != 0:
        raise _bad()
    node = Node(master, els[3:3 + nf])
    i = 4 + nf
    seen_live = seen_dead = 0
    while i < len(els):
        flags = _num(els, i)
        sid = _id(master[0] + _num(els, i + 1), master[1] + _num(els, i + 2))
        i += 3
        if flags & FLAG_SAMEFIELDS:
            vals = els[i:i + nf]
            if len(vals) != nf:
                raise _bad()
            items = [x for pair in zip(node.mfields, vals, strict=True) for x in pair]
            i += nf
        else:
            n = _num(els, i)
            items = els[i + 1:i + 1 + 2 * n]
            if n <= 0 or len(items) != 2 * n:
                raise _bad()
            i += 1 + 2 * n
        _num(els, i)  # the entry's element count
        i += 1
        if node.ids and sid <= node.ids[-1]:
            raise _bad()
        node.append(sid, tuple(items))
        if flags & FLAG_DELETED:
            node.dead[-1] = True
            seen_dead += 1
        else:
            seen_live += 1
    if (seen_live, seen_dead) != (live, ndel) or not node.ids or node.ids[0] < master:
        raise _bad()
    node.live, node.ndel = live, ndel
    return node


def _load_len_id(r: _Reader) -> StreamID:
    return _id(r.plain_length(), r.plain_length())


def _load_raw_id(r: _Reader) -> StreamID:
    raw = r.take(16)
    return int.from_bytes(raw[:8], "big"), int.from_bytes(raw[8:], "big")


def _decode(r: _Reader, v2: bool) -> Stream:
    s = Stream()
    for _ in range(r.plain_length()):
        key = r.string()
        if len(key) != 16:
            raise _bad()
        master = int.from_bytes(key[:8], "big"), int.from_bytes(key[8:], "big")
        node = _node_from(master, r.string())
        if s.nodes and node.ids[0] <= s.nodes[-1].ids[-1]:
            raise _bad()
        s.nodes.append(node)
    s.length = r.plain_length()
    if s.length != sum(n.live for n in s.nodes):
        raise _bad()
    s.last_id = _load_len_id(r)
    if s.nodes and s.last_id < s.nodes[-1].ids[-1]:
        raise _bad()
    if v2:
        s.first_id = _load_len_id(r)
        s.max_deleted = _load_len_id(r)
        s.entries_added = r.plain_length()
    else:
        s.first_id = s.edge_id(True, False) if s.length else (0, 0)
        s.entries_added = s.length
    for _ in range(r.plain_length()):
        name = r.string()
        last = _load_len_id(r)
        if v2:
            er = r.plain_length()
            er = -1 if er == U64 else er
        else:
            er = -1
        if name in s.groups:
            raise _bad()
        g = s.groups[name] = Group(last, er)
        if not v2:
            g.entries_read = s.estimate_distance(last)
        for _ in range(r.plain_length()):
            sid = _load_raw_id(r)
            when = int.from_bytes(r.take(8), "little", signed=True)
            g.pel[sid] = Nack(_UNOWNED, when, r.plain_length())
        for _ in range(r.plain_length()):
            cname = r.string()
            seen = int.from_bytes(r.take(8), "little", signed=True)
            if cname in g.consumers:
                raise _bad()
            cons = g.consumers[cname] = Consumer(cname, seen)
            for _ in range(r.plain_length()):
                sid = _load_raw_id(r)
                nack = g.pel.get(sid)
                if nack is None or nack.consumer is not _UNOWNED:
                    raise _bad()
                nack.consumer = cons
                cons.pel[sid] = nack
        if any(n.consumer is _UNOWNED for n in g.pel.values()):
            raise _bad()
    return s


rdb.register_codec("stream", encode, {
    T_STREAM_LISTPACKS: lambda r: _decode(r, False),
    T_STREAM_LISTPACKS_2: lambda r: _decode(r, True),
})
