"""The stream value (Redis' t_stream.c data structure, pure: no commands here).

Entries live in nodes the way Redis keeps them in listpacks under a radix tree: a node has a
master id and master fields (those of its first entry), its entries in id order, each with a
deleted flag (XDEL and exact trimming inside a node only flag an entry; a node goes when its
last live entry does), and the byte size its listpack would have. New entries go to the last
node unless it reached ``stream-node-max-entries`` (live plus deleted) or its bytes plus the new
entry's raw field/value lengths reach ``stream-node-max-bytes`` — so approximate trimming (``~``),
which only ever drops whole nodes, removes what Redis removes, and a DUMP carries the same
listpacks (node/types/stream_rdb.py).

Consumer groups: a group has its last delivered id, its entries-read counter (-1 unknown), a
pending entries list (PEL: id -> ``Nack``) and consumers (name -> ``Consumer``, each with its
own PEL view of the same ``Nack`` objects).
"""

from __future__ import annotations

import time
from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterator, Sequence
from typing import Final

from mypy_extensions import i64, mypyc_attr

from slotgate.node.persistence.rdb_blobs import strict_int

StreamID = tuple[int, int]
# An entry's fields and values, stored as a tuple: a tuple of bytes leaves the garbage
# collector's lists at its first collection (a list would stay, and every full collection
# would walk every entry of every stream: half of XADD's time on a long stream).
Fields = tuple[bytes, ...]
U64: Final = (1 << 64) - 1
MIN_ID: Final[StreamID] = (0, 0)
MAX_ID: Final[StreamID] = (U64, U64)
INVALID_READ: Final = -1  # SCG_INVALID_ENTRIES_READ
LISTPACK_MAX_BYTES: Final = 1 << 30  # STREAM_LISTPACK_MAX_SIZE


FLAG_DELETED = 1
FLAG_SAMEFIELDS = 2


def ms_now() -> int:
    return int(time.time() * 1000)


def id_text(i: StreamID) -> bytes:
    return b"%d-%d" % i


def incr_id(i: StreamID) -> StreamID | None:
    """streamIncrID: the next id, None after the last possible one."""
    ms, seq = i
    if seq == U64:
        return None if ms == U64 else (ms + 1, 0)
    return ms, seq + 1


def decr_id(i: StreamID) -> StreamID | None:
    ms, seq = i
    if seq == 0:
        return None if ms == 0 else (ms - 1, U64)
    return ms, seq - 1


def _lp_int_size(n: int) -> int:
    """Bytes an integer element takes in a listpack (encoding, data, back-length)."""
    if 0 <= n <= 127:
        return 2
    if -4096 <= n <= 4095:
        return 3
    if -32768 <= n <= 32767:
        return 4
    if -(1 << 23) <= n < (1 << 23):
        return 5
    if -(1 << 31) <= n < (1 << 31):
        return 6
    return 10


def lp_size(s: bytes) -> int:
    """Bytes one string element takes in a listpack (encoding, data, back-length): an integer
    encoding when ``s`` spells an int64 canonically (lpStringToInt64), else a string one.
    Up to 18 characters the digits are read here (no int64 overflows there); longer ones that
    may be integers go through ``strict_int``."""
    n: i64 = len(s)
    if n <= 20 and n:
        c0: i64 = s[0]
        if c0 == 45 or 48 <= c0 <= 57:  # "-" or a digit: may be stored as an integer
            if n > 18:
                v = strict_int(s)
                return n + 2 if v is None else _lp_int_size(v)
            neg = c0 == 45
            i: i64 = 1 if neg else 0
            if i == n or s[i] == 48 and (neg or n > 1):  # "-", "0..." or "-0...": a string
                return n + 2
            x: i64 = 0
            while i < n:
                d: i64 = s[i] - 48
                if d < 0 or d > 9:
                    return n + 2
                x = x * 10 + d
                i += 1
            return _lp_int_size(int(-x if neg else x))
        return n + 2
    if n <= 20:
        return 2  # the empty string: its encoding byte and back-length
    enc = n + (1 if n < 64 else 2 if n < 4096 else 5)
    return int(enc + (1 if enc <= 127 else 2 if enc < 16383 else 3 if enc < 2097151
                      else 4 if enc < 268435455 else 5))


class Node:
    """One listpack: master id and fields, entries (ids, flat field/value lists, deleted)."""

    __slots__ = ("master", "mfields", "ids", "items", "dead", "live", "ndel", "body")

    def __init__(self, master: StreamID, fields: Sequence[bytes]) -> None:
        self.master = master
        self.mfields: Fields = tuple(fields)
        self.ids: list[StreamID] = []
        self.items: list[Fields] = []
        self.dead: list[bool] = []
        self.live = 0
        self.ndel = 0
        # every element but the live/deleted counters, plus header and end byte
        self.body = 7 + _lp_int_size(len(fields)) + sum(lp_size(f) for f in fields) + 2

    def nbytes(self) -> int:
        return self.body + _lp_int_size(self.live) + _lp_int_size(self.ndel)

    def same_fields(self, items: Fields) -> bool:
        mfields = self.mfields
        nf = len(mfields)
        if len(items) != 2 * nf:
            return False
        for j in range(nf):
            if items[2 * j] != mfields[j]:
                return False
        return True

    def append(self, sid: StreamID, items: Fields) -> None:
        """Add an entry (``items``: its fields and values, flat) and its listpack bytes."""
        n = len(items) // 2
        ms, seq = sid
        mms, mseq = self.master
        size = 2 + _lp_int_size(ms - mms) + _lp_int_size(seq - mseq)
        if self.same_fields(items):
            for j in range(n):
                size += lp_size(items[2 * j + 1])
            size += _lp_int_size(n + 3)
        else:
            for item in items:
                size += lp_size(item)
            size += _lp_int_size(n) + _lp_int_size(2 * n + 4)
        self.body += size
        self.ids.append(sid)
        self.items.append(items)
        self.dead.append(False)
        self.live += 1

    def last_id(self) -> StreamID:
        return self.ids[-1]


def _master(node: Node) -> StreamID:
    return node.master


class Nack:
    """A pending entry: last delivery time (unix ms), delivery count, owner."""

    __slots__ = ("delivery_ms", "count", "consumer")

    def __init__(self, consumer: Consumer, delivery_ms: int, count: int = 1) -> None:
        self.delivery_ms = delivery_ms
        self.count = count
        self.consumer = consumer


@mypyc_attr(native_class=False)  # a dict subclass stays a Python class when compiled
class Pel(dict):  # type: ignore[type-arg]
    """A pending entries list: id -> Nack, with ``ids`` kept in id order (Redis' rax), so
    range reads (XPENDING, XAUTOCLAIM, history reads) never sort the whole list."""

    __slots__ = ("ids",)

    def __init__(self) -> None:
        super().__init__()
        self.ids: list[StreamID] = []

    def __setitem__(self, sid: StreamID, nack: Nack) -> None:
        if sid not in self:
            ids = self.ids
            if not ids or sid > ids[-1]:
                ids.append(sid)
            else:
                insort(ids, sid)
        super().__setitem__(sid, nack)

    def __delitem__(self, sid: StreamID) -> None:
        super().__delitem__(sid)
        ids = self.ids
        del ids[bisect_left(ids, sid)]

    def discard(self, sid: StreamID) -> Nack | None:
        """Remove ``sid`` if pending; its Nack or None."""
        nack = self.get(sid)
        if nack is not None:
            del self[sid]
        return nack

    def from_id(self, start: StreamID) -> list[StreamID]:
        """The pending ids >= ``start``, in order (a copy: safe to change the list meanwhile)."""
        ids = self.ids
        return ids[bisect_left(ids, start):]


class Consumer:
    __slots__ = ("name", "seen_ms", "pel")

    def __init__(self, name: bytes, seen_ms: int) -> None:
        self.name = name
        self.seen_ms = seen_ms
        self.pel = Pel()


class Group:
    __slots__ = ("last_id", "entries_read", "pel", "consumers")

    def __init__(self, last_id: StreamID, entries_read: int) -> None:
        self.last_id = last_id
        self.entries_read = entries_read
        self.pel = Pel()
        self.consumers: dict[bytes, Consumer] = {}

    def consumer(self, name: bytes, create: bool = True, refresh: bool = True) -> Consumer | None:
        """streamLookupConsumer (+ create): refreshes seen-time unless told not to."""
        cons = self.consumers.get(name)
        now = ms_now()
        if cons is None:
            if not create:
                return None
            cons = self.consumers[name] = Consumer(name, now)
        elif refresh:
            cons.seen_ms = now
        return cons

    def delete_consumer(self, cons: Consumer) -> None:
        for sid in cons.pel.ids:
            self.pel.discard(sid)
        del self.consumers[cons.name]


class Stream:
    """A stream value (see the module doc)."""

    __slots__ = ("nodes", "length", "last_id", "first_id", "max_deleted", "entries_added",
                 "groups", "_hint")

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self._hint = 0  # the node ``get`` found last: checked, never trusted
        self.length = 0
        self.last_id: StreamID = MIN_ID
        self.first_id: StreamID = MIN_ID
        self.max_deleted: StreamID = MIN_ID
        self.entries_added = 0
        self.groups: dict[bytes, Group] = {}

    def __len__(self) -> int:
        return self.length

    # -- adding ----------------------------------------------------------------------------
    def append(self, sid: StreamID, items: Fields, max_entries: int, max_bytes: int,
               raw_len: int) -> None:
        """streamAppendItem after the id checks: to the last node or a new one
        (``stream-node-max-entries`` / ``-bytes`` decide when a node is full; ``raw_len`` is
        the sum of the lengths of ``items``)."""
        nodes = self.nodes
        if nodes:
            node = nodes[-1]
            if max_bytes == 0 or max_bytes > LISTPACK_MAX_BYTES:
                max_bytes = LISTPACK_MAX_BYTES
            if (node.nbytes() + raw_len >= max_bytes
                    or (max_entries and node.live + node.ndel >= max_entries)):
                node = Node(sid, items[0::2])
                nodes.append(node)
        else:
            node = Node(sid, items[0::2])
            nodes.append(node)
        node.append(sid, items)
        self.length += 1
        self.entries_added += 1
        self.last_id = sid
        if self.length == 1:
            self.first_id = sid

    # -- reading ---------------------------------------------------------------------------
    def _node_index(self, sid: StreamID) -> int:
        """Index of the node that may hold ``sid`` (the last one whose master id <= sid)."""
        return max(bisect_right(self.nodes, sid, key=_master) - 1, 0)

    def range(self, start: StreamID, end: StreamID, rev: bool = False,
              tombstones: bool = False) -> Iterator[tuple[StreamID, Fields]]:
        """Live entries (with ``tombstones`` deleted ones too) with start <= id <= end."""
        if start > end or not self.nodes:
            return
        if not rev:
            for ni in range(self._node_index(start), len(self.nodes)):
                node = self.nodes[ni]
                if node.ids[0] > end:
                    return
                for i in range(bisect_left(node.ids, start), len(node.ids)):
                    sid = node.ids[i]
                    if sid > end:
                        return
                    if tombstones or not node.dead[i]:
                        yield sid, node.items[i]
        else:
            for ni in range(self._node_index(end), -1, -1):
                node = self.nodes[ni]
                if node.ids[-1] < start:
                    return
                for i in range(bisect_right(node.ids, end) - 1, -1, -1):
                    sid = node.ids[i]
                    if sid < start:
                        return
                    if tombstones or not node.dead[i]:
                        yield sid, node.items[i]

    def get(self, sid: StreamID) -> Fields | None:
        """The fields of the live entry ``sid``, or None. (Reads of ascending ids, as a
        consumer's history, mostly stay in the node the last one found: tried first.)"""
        nodes = self.nodes
        if not nodes:
            return None
        h = self._hint
        if (h < len(nodes) and nodes[h].master <= sid
                and (h + 1 == len(nodes) or nodes[h + 1].master > sid)):
            node = nodes[h]
        else:
            h = self._hint = self._node_index(sid)
            node = nodes[h]
        i = bisect_left(node.ids, sid)
        if i < len(node.ids) and node.ids[i] == sid and not node.dead[i]:
            return node.items[i]
        return None

    def edge_id(self, first: bool, tombstones: bool) -> StreamID:
        """streamGetEdgeID: first/last entry id; max id (first) or 0-0 (last) when none."""
        for sid, _ in self.range(MIN_ID, MAX_ID, not first, tombstones):
            return sid
        return MAX_ID if first else MIN_ID

    # -- removing --------------------------------------------------------------------------
    def delete(self, sid: StreamID) -> bool:
        """streamDeleteItem: flag a live entry deleted; drop its node if it was the last."""
        if not self.nodes:
            return False
        ni = self._node_index(sid)
        node = self.nodes[ni]
        i = bisect_left(node.ids, sid)
        if i >= len(node.ids) or node.ids[i] != sid or node.dead[i]:
            return False
        if node.live == 1:
            del self.nodes[ni]
        else:
            node.dead[i] = True
            node.live -= 1
            node.ndel += 1
        self.length -= 1
        return True

    def trim(self, maxlen: int | None, minid: StreamID | None, approx: bool, limit: int) -> int:
        """streamTrim: whole nodes from the head, then (exact only) entries in one node."""
        deleted = 0
        while self.nodes:
            if maxlen is not None and self.length <= maxlen:
                break
            node = self.nodes[0]
            entries = node.live
            if limit and deleted + entries > limit:
                break
            if maxlen is not None:
                remove = self.length - entries >= maxlen
            else:
                assert minid is not None
                remove = node.last_id() < minid
            if remove:
                del self.nodes[0]
                self.length -= entries
                deleted += entries
                continue
            if approx:
                break
            flagged = 0
            for i, sid in enumerate(node.ids):
                if maxlen is not None:
                    if self.length <= maxlen:
                        break
                elif minid is not None and sid >= minid:
                    break
                if not node.dead[i]:
                    node.dead[i] = True
                    flagged += 1
                    self.length -= 1
            node.live -= flagged
            node.ndel += flagged
            deleted += flagged
            break
        if self.length == 0:
            self.first_id = MIN_ID
        else:
            self.first_id = self.edge_id(True, False)
        return deleted

    # -- consumer-group arithmetic (7.0) ----------------------------------------------------
    def range_has_tombstones(self, start: StreamID | None) -> bool:
        """streamRangeHasTombstones(start, end=max)."""
        if not self.length or self.max_deleted == MIN_ID:
            return False
        if self.first_id > self.max_deleted:
            return False
        return (start or MIN_ID) <= self.max_deleted

    def estimate_distance(self, sid: StreamID) -> int:
        """streamEstimateDistanceFromFirstEverEntry."""
        if not self.entries_added:
            return 0
        if not self.length and sid <= self.last_id:
            return self.entries_added
        if sid == self.last_id:
            return self.entries_added
        if sid > self.last_id:
            return INVALID_READ
        if self.max_deleted == MIN_ID or self.max_deleted < self.first_id:
            if sid < self.first_id:
                return self.entries_added - self.length
            if sid == self.first_id:
                return self.entries_added - self.length + 1
        return INVALID_READ

    def lag(self, g: Group) -> int | None:
        """streamReplyWithCGLag: None when it cannot be known."""
        if not self.entries_added:
            return 0
        if g.entries_read != INVALID_READ and not self.range_has_tombstones(g.last_id):
            return self.entries_added - g.entries_read
        er = self.estimate_distance(g.last_id)
        return None if er == INVALID_READ else self.entries_added - er

    def digest_items(self) -> list[bytes]:
        """debug.c: every live entry as "ms.seq", then its fields and values, in order."""
        out: list[bytes] = []
        for sid, items in self.range(MIN_ID, MAX_ID):
            out.append(b"%d.%d" % sid)
            out.extend(items)
        return out

    def copy(self) -> Stream:
        n = Stream()
        for node in self.nodes:
            m = Node(node.master, node.mfields)
            m.ids = list(node.ids)
            m.items = list(node.items)
            m.dead = list(node.dead)
            m.live, m.ndel, m.body = node.live, node.ndel, node.body
            n.nodes.append(m)
        n.length, n.last_id, n.first_id = self.length, self.last_id, self.first_id
        n.max_deleted, n.entries_added = self.max_deleted, self.entries_added
        for name, g in self.groups.items():
            ng = n.groups[name] = Group(g.last_id, g.entries_read)
            for cname, cons in g.consumers.items():
                nc = ng.consumers[cname] = Consumer(cname, cons.seen_ms)
                for sid, nack in cons.pel.items():
                    nn = Nack(nc, nack.delivery_ms, nack.count)
                    nc.pel[sid] = nn
                    ng.pel[sid] = nn
        return n
