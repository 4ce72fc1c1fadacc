"""Requests that become several backend requests: cross-slot splits and all-node fan-out.

Planning and merging are the pure functions of ``splitter.py``; this module sends the parts
through the router and fills the client's reply slot once every part has answered. What to
split and how to merge come from the request's command table row (``first_key``, ``step``,
``merge``); every merge a fan-out row names has a handler here, checked at import.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Final, cast

import hiredis

from slotgate.build import BUILD
from slotgate.protocol.commands import ALL_COMMANDS, CommandInfo
from slotgate.protocol.slots import key_slot
from slotgate.proxy import errors
from slotgate.proxy.backend.connections import Reply
from slotgate.proxy.routing import control, splitter
from slotgate.proxy.routing.redirect import error_frame
from slotgate.proxy.routing.router import Call, Gather

if TYPE_CHECKING:
    from slotgate.proxy.front.routes import (
        RouteSession as Session,  # the session as route code sees it
    )
    from slotgate.proxy.front.session import ReplySlot
    from slotgate.proxy.front.session import Session as FullSession

# argv (bytes) -> multibulk, in C. (hiredis' stub types its argument as a 1-tuple.)
pack_command: Callable[[tuple[bytes, ...]], bytes] = hiredis.pack_command  # type: ignore[assignment]
CLUSTER_DOWN = error_frame("CLUSTERDOWN The cluster is down")
WRONGTYPE = b"-WRONGTYPE "
# MGET of keys in distinct slots goes out as one GET per key: same values, and a bulk reply
# frames cheaper than a one-element array. MGET answers a null where GET refuses a key of
# another type, so that one error becomes the null (RESP2, RESP3).
_GET_HEAD = b"*2\r\n$3\r\nGET\r\n"
CRLF = b"\r\n"
_HEADS = 1024  # "$<n>\r\n" made once for arguments shorter than this
_BULK_HEADS = [b"$%d\r\n" % n for n in range(_HEADS)]
# "\r\n$<n>\r\n": a key's end and its value's head (MSET) in one piece.
_VALUE_HEADS = [CRLF + head for head in _BULK_HEADS]
_KEY_HEADS = 256  # a row's part heads with the key's "$<n>\r\n", for keys shorter than this
_NULLS = {2: b"$-1\r\n", 3: b"_\r\n"}
_MINUS: Final = 45  # "-"
_BANG: Final = 33  # "!": a RESP3 blob error
# How a split request's parts answer and merge: the kind of its ``_Split``.
_GETS: Final = 0  # MGET as one GET per key: the bulks concatenated in key order
_SUM: Final = 1  # DEL EXISTS UNLINK TOUCH: the integers summed
_ALL_OK: Final = 2  # MSET: +OK when every part said it
_OTHER: Final = 3  # a merge of the general planner's (``merge``)
COMPILED: Final = BUILD.compiled and __name__ in BUILD.modules


class _Split:
    """One cross-slot request in flight: its parts' replies, counted down, then merged into
    the client's reply slot (no task, no event: the last reply's callback finishes it)."""

    __slots__ = ("session", "reply_slot", "slots", "parts", "payloads", "readonly", "replies",
                 "remaining", "merge", "total_keys", "get_nil", "failed", "argv", "first",
                 "step", "part_name", "late_nodes", "kind", "total")

    def __init__(self, session: Session, reply_slot: Callable[[bytes], None], slots: list[int],
                 parts: list[splitter.Part] | None, payloads: list[bytes] | None,
                 readonly: bool, merge: Callable[[_Split], bytes], total_keys: int,
                 get_nil: bytes = b"", argv: list[bytes] | None = None, first: int = 0,
                 step: int = 1, part_name: bytes = b"", kind: int = _OTHER) -> None:
        self.session = session
        self.reply_slot = reply_slot
        self.slots = slots  # per part
        self.parts = parts  # only for an MGET whose parts are not in key order
        # Each part's own request, or None when each key is a part of its own and the
        # nodes' payloads were encoded straight from ``argv`` (``part_payload`` makes one
        # request again, for the rare paths).
        self.payloads = payloads
        self.argv = argv
        self.first = first
        self.step = step
        self.part_name = part_name  # the command a one-key part runs (GET for MGET)
        self.readonly = readonly
        self.replies: list[bytes] = [b""] * len(slots)
        self.remaining = len(slots)
        self.merge = merge
        self.kind = kind
        self.total = 0  # _SUM: the parts' integers so far
        self.total_keys = total_keys
        # MGET sent as one GET per key: the null a WRONGTYPE error stands for (MGET answers
        # a null for a key holding another type), else b"".
        self.get_nil = get_nil
        self.failed = False  # some part's final reply is an error
        # A write under a write policy: the nodes parts reached through the rare paths.
        self.late_nodes: set[str] | None = None

    def part_done(self, index: int, raw: bytes) -> None:
        """A part's final reply after the router's redirect/retry path."""
        head = raw[:1]
        if head == b"-" or head == b"!":
            if self.get_nil and raw.startswith(WRONGTYPE):
                raw = self.get_nil
            else:
                self.failed = True
        elif self.kind == _SUM:
            self.total += int(raw[1:-2])
        self.replies[index] = raw
        self.remaining -= 1
        if self.remaining == 0:
            self.reply_slot(self.merge(self))

    def part_payload(self, index: int) -> bytes:
        """Part ``index``'s request on its own."""
        if self.payloads is not None:
            return self.payloads[index]
        assert self.argv is not None
        i = self.first + index * self.step
        return pack_command((self.part_name, *self.argv[i : i + self.step]))  # type: ignore[arg-type]

    def part_call(self, index: int, node: str) -> Call:
        """Part ``index`` as a ``Call`` of its own: only for the rare paths (redirects,
        retries, lost connections), which then run exactly as for any other request."""
        s = self.session
        call = Call(s.router, self.part_payload(index), self.slots[index], self.readonly,
                    s.proto, s.id, partial(self.part_done, index))
        call.node = node
        if self.late_nodes is not None:
            call.done = partial(self._late_done, index, call)
        return call

    def _late_done(self, index: int, call: Call, raw: bytes) -> None:
        if raw[:1] != b"-" and call.node:
            self.late_nodes.add(call.node)  # type: ignore[union-attr]
        self.part_done(index, raw)


class _NodeBatch(Reply):
    """The parts of one split request that go to one node: sent as one payload, answered to
    this one pending entry (queued once per part; replies arrive in part order)."""

    __slots__ = ("split", "indices", "next", "node", "pieces")

    def __init__(self, split: _Split, indices: list[int], node: str) -> None:
        self.split = split
        self.indices = indices
        self.next = 0
        self.node = node
        self.pieces: list[bytes] = []  # its payload's pieces, while the split is planned

    def on_frame(self, type_byte: int, raw: bytes) -> None:
        index = self.indices[self.next]
        self.next += 1
        split = self.split
        if type_byte == _MINUS:
            if not (split.get_nil and raw.startswith(WRONGTYPE)):
                split.session.router.on_error(split.part_call(index, self.node), raw)
                return
            raw = split.get_nil
        elif type_byte == _BANG:
            split.failed = True
        elif split.kind == _SUM:
            split.total += int(raw[1:-2])
        split.replies[index] = raw
        split.remaining -= 1
        if split.remaining == 0:
            split.reply_slot(split.merge(split))

    def on_failure(self, exc: Exception, sent: bool) -> None:
        index = self.indices[self.next]
        self.next += 1
        split = self.split
        split.session.router.on_lost(split.part_call(index, self.node), sent)


def _merge_mget(sp: _Split) -> bytes:
    assert sp.parts is not None
    return splitter.merge_in_order(sp.parts, sp.replies, sp.total_keys)


def _merge_mget_in_order(sp: _Split) -> bytes:
    return splitter.merge_concat_in_order(sp.replies, sp.total_keys)


def _merge_gets(sp: _Split) -> bytes:
    """MGET sent as one GET per key, in key order: the values are the replies themselves."""
    if sp.failed:
        return splitter.first_error(sp.replies)
    return b"*%d\r\n%s" % (sp.total_keys, b"".join(sp.replies))


def _merge_sum(sp: _Split) -> bytes:
    """One integer reply per key (``_split_by_node``), summed as they came."""
    if sp.failed:
        return splitter.first_error(sp.replies)
    return b":%d\r\n" % sp.total


def _merge_all_ok(sp: _Split) -> bytes:
    """One reply per key (``_split_by_node``): +OK unless some part failed."""
    if sp.failed:
        return splitter.first_error(sp.replies)
    return splitter.OK


# Merges of a split request, by the row's ``merge`` name. MGET's has two faster variants,
# chosen by ``split`` from how the keys fall into slots.
SPLIT_MERGES: dict[str, Callable[[_Split], bytes]] = {
    "mget": _merge_mget,
    "sum": lambda sp: splitter.merge_sum(sp.replies),
    "all_ok": lambda sp: splitter.merge_all_ok(sp.replies),
}
_MERGE_MGET = SPLIT_MERGES["mget"]
# A split row's merge -> (the kind and merge of its parts when each key is a part of its own).
_ONE_KEY_PARTS: dict[str, tuple[int, Callable[[_Split], bytes]]] = {
    "mget": (_GETS, _merge_gets),
    "sum": (_SUM, _merge_sum),
    "all_ok": (_ALL_OK, _merge_all_ok),
}


class _Row:
    """What ``_split_by_node`` reads of a split row, per spelling of its name (the parts
    carry the client's spelling), in native fields: made on the row's first request."""

    __slots__ = ("name", "first", "step", "readonly", "kind", "merge", "head", "part_name",
                 "key_heads")

    def __init__(self, info: CommandInfo, spelling: bytes) -> None:
        self.name = info.name
        self.first = info.first_key
        self.step = info.step
        self.readonly = "readonly" in info.flags
        self.kind, self.merge = _ONE_KEY_PARTS[info.merge or ""]
        if self.kind == _GETS:
            self.head = _GET_HEAD
            self.part_name = b"GET"
        else:
            self.head = b"*%d\r\n$%d\r\n%s\r\n" % (self.step + 1, len(spelling), spelling)
            self.part_name = spelling
        # A part's head and its key's "$<n>\r\n", by the key's length.
        self.key_heads = [self.head + head for head in _BULK_HEADS[:_KEY_HEADS]]


# The fast path's rows, by the spellings the session's split table holds (lower and upper
# case; any other spelling makes a row of its own per request).
_ROWS: dict[bytes, _Row] = {}


def split(s: Session, argv: list[bytes], info: CommandInfo) -> None:
    """MGET / MSET / DEL / UNLINK / EXISTS / TOUCH across slots.

    Each node's parts go out as one payload with one pending entry (``_NodeBatch``); the
    last reply merges into the client's reply slot. The usual request, every key in a slot
    of its own, is planned and encoded in one pass over the keys (``_split_by_node``)."""
    first, step = info.first_key, info.step
    if (len(argv) - first) % step:
        s.reply(info.name, error_frame(errors.WRONG_ARITY.format(name=info.name)))
        return
    if step <= 2 and _split_by_node(cast("FullSession", s), argv, info):
        return
    merge = SPLIT_MERGES[info.merge or ""]
    readonly = "readonly" in info.flags
    slots = splitter.distinct_slots(argv, first, step)
    parts: list[splitter.Part] | None = None
    if slots is not None:  # each key a part of its own, in key order
        if len(slots) == 1:
            s.send_single(argv, slots[0], readonly, info.name)
            return
        payloads = [pack_command((argv[0], *argv[i : i + step]))  # type: ignore[arg-type]
                    for i in range(first, len(argv), step)]
    else:
        parts, in_order = splitter.plan_split(argv, first, step)
        if len(parts) == 1:
            s.send_single(argv, parts[0].slot, readonly, info.name)
            return
        if merge is _MERGE_MGET and in_order:
            merge = _merge_mget_in_order
        slots = [part.slot for part in parts]
        payloads = [pack_command(tuple(part.argv)) for part in parts]
    if not readonly:
        s.last_write_slot = slots[0]  # WAIT waits on one master (proxy/front/wait.py)
    sp = _Split(s, s.new_slot(info.name), slots, parts, payloads, readonly, merge,
                (len(argv) - first) // step)
    s.metrics.fanout(len(slots))
    policies = s.policies
    if policies is not None and not readonly and policies.on_writes:
        sp.late_nodes = set()
    owners = s.router.topology.owners
    by_node: dict[str, list[int]] = {}
    counts = s.metrics.slot_requests
    for i, slot in enumerate(slots):
        owner = owners[slot]
        if owner is None:
            s.router.send(sp.part_call(i, ""))  # unserved slot: the router's retry path (counted)
            continue
        counts[slot] += 1
        indices = by_node.get(owner)
        if indices is None:
            by_node[owner] = [i]
        else:
            indices.append(i)
    for node, indices in by_node.items():
        conn = s.conn_to(node)
        if len(indices) == 1:
            payload = payloads[indices[0]]
        else:
            payload = b"".join([payloads[i] for i in indices])
        conn.send_many(payload, _NodeBatch(sp, indices, node), len(indices))
    if sp.late_nodes is not None:
        sp.reply_slot = policies.split_write(sp.reply_slot, list(by_node), sp.late_nodes)  # type: ignore[union-attr]


def _split_by_node(s: FullSession, argv: list[bytes], info: CommandInfo) -> bool:
    """A split row of ``step`` 1 or 2 whose keys are each in a slot of their own, in one
    pass over the keys: slot, owner, and the key's request encoded straight into its node's
    batch (no request object per key; MGET's keys as GETs), then one write and one pending
    entry per node. False, with nothing sent or queued, when two keys share a slot (the
    general path plans parts then)."""
    spelling = argv[0]
    row = _ROWS.get(spelling)
    if row is None:
        row = _Row(info, spelling)
        if spelling == info.name.encode() or spelling == info.name.upper().encode():
            _ROWS[spelling] = row
    step = row.step
    head = row.head
    owners = s.router.topology.owners
    counts = s.metrics.slot_requests
    slots: list[int] = []
    sp = _Split(s, _no_reply, slots, None, None, row.readonly, row.merge, 0,
                _NULLS[s.proto] if row.kind == _GETS else b"", argv, row.first, step,
                row.part_name, row.kind)
    # owner (None: slot unserved) -> its batch: the parts' indices, the pieces of its payload
    batches: dict[str | None, _NodeBatch] = {}
    heads = row.key_heads
    value_heads = _VALUE_HEADS
    index = 0
    argc = len(argv)
    k = row.first
    while k < argc:  # (compiled, a range with a variable step is a Python iterator)
        key = argv[k]
        k += step
        slot = key_slot(key)
        slots.append(slot)
        owner = owners[slot]
        if owner is not None:
            counts[slot] += 1  # (taken back if this path gives the request up)
        batch = batches.get(owner)
        if batch is None:
            batch = batches[owner] = _NodeBatch(sp, [], owner or "")
        batch.indices.append(index)
        pieces = batch.pieces
        n = len(key)
        # (appends, not an extend of a tuple: compiled, one call each and no tuple per key)
        pieces.append(heads[n] if n < _KEY_HEADS else b"%s$%d\r\n" % (head, n))
        pieces.append(key)
        if step != 1:
            value = argv[k - 1]
            v = len(value)
            pieces.append(value_heads[v] if v < _HEADS else b"\r\n$%d\r\n" % v)
            pieces.append(value)
        pieces.append(CRLF)
        index += 1
    if index == 1 or not _distinct(slots, batches):
        for slot in slots:
            if owners[slot] is not None:
                counts[slot] -= 1  # counted again where the request goes
        if index != 1:
            return False
        s.send_single(argv, slots[0], row.readonly, row.name)
        return True
    sp.replies = [b""] * index
    sp.remaining = sp.total_keys = index
    if not row.readonly:
        s.last_write_slot = slots[0]  # WAIT waits on one master (proxy/front/wait.py)
    sp.reply_slot = s.new_slot(row.name)
    policies = s.policies
    if policies is not None and not row.readonly and policies.on_writes:
        sp.late_nodes = set()
    s.tally.fanout(index)  # metrics.fanout(index), compiled
    for owner, batch in batches.items():
        indices = batch.indices
        if owner is None:
            for i in indices:  # unserved slot: the router's retry path (which counts it)
                s.router.send(sp.part_call(i, ""))
            continue
        pieces = batch.pieces
        batch.pieces = _NO_PIECES
        s.conn_to(owner).send_many(b"".join(pieces), batch, len(indices))
    if sp.late_nodes is not None:
        sent = [node for node in batches if node is not None]
        sp.reply_slot = policies.split_write(sp.reply_slot, sent, sp.late_nodes)  # type: ignore[union-attr]
    return True


def _distinct(slots: list[int], batches: dict[str | None, _NodeBatch]) -> bool:
    """Whether no two keys share a slot: two keys of one slot share its owner, so only the
    keys of each batch are compared, pairwise while there are few (compiled, that beats a set
    of boxed slots; interpreted, the set is faster)."""
    if len(slots) > 24 or not COMPILED:
        return len(set(slots)) == len(slots)
    for batch in batches.values():
        indices = batch.indices
        for x in range(1, len(indices)):
            slot = slots[indices[x]]
            for y in range(x):
                if slots[indices[y]] == slot:
                    return False
    return True


def _no_reply(raw: bytes) -> None:
    raise AssertionError("a split's reply slot is set before it is sent")


_NO_PIECES: Final[list[bytes]] = []


def _targets(s: Session, info: CommandInfo) -> list[tuple[int, str]]:
    """(slot, fixed node) per target: masters by their first slot, replicas by address."""
    slot_map = s.router.topology.slot_map
    targets = [(slot, "") for slot in slot_map.first_slots]
    if info.route == "all_nodes":
        for master in slot_map.masters:
            targets.extend((-1, r) for r in slot_map.replicas.get(master, ()))
    return targets


def _fan(s: Session, argv: Sequence[bytes], info: CommandInfo,
         slot: ReplySlot | Callable[[bytes], None], merge: splitter.Merge) -> None:
    targets = _targets(s, info)
    if not targets:
        slot(CLUSTER_DOWN)
        return
    payload = pack_command(tuple(argv))
    readonly = "readonly" in info.flags
    if "write" in info.flags:
        s.last_write_slot = targets[0][0]  # WAIT waits on one master (proxy/front/wait.py)
    gather = Gather(len(targets), lambda replies: slot(merge(replies)))
    s.metrics.fanout(len(targets))
    calls = [Call(s.router, payload, target_slot, readonly, s.proto, s.id, gather.part(i),
                  fixed_node=node) for i, (target_slot, node) in enumerate(targets)]
    for call in calls:
        s.router.send(call)
    policies = s.policies
    if policies is not None and policies.on_writes and "write" in info.flags:
        # FLUSHALL, FLUSHDB: the client's write policies on every master it reached.
        reply = policies.split_write(slot, [c.node for c in calls if c.node], set())
        gather.finish = lambda replies: reply(merge(replies))


def all_nodes(s: Session, argv: list[bytes], info: CommandInfo) -> None:
    """Every master (or every node): DBSIZE, KEYS, FLUSHALL, SCRIPT …, INFO, SCAN."""
    merge_name = info.merge or ""
    special = _SPECIAL.get(merge_name)
    if special is not None:
        special(s, argv, info)
        return
    _fan(s, argv, info, s.new_slot(info.name), splitter.ALL_MERGES[merge_name])


def all_nodes_then(s: Session, argv: list[bytes], info: CommandInfo,
                   done: Callable[[bytes, list[bytes]], None]) -> None:
    """``all_nodes`` for a row merged ``all_ok``, with the merged reply and every node's own
    (none if the map has no node) handed to ``done``, which fills the client's reply slot
    after acting on them."""
    parts: list[bytes] = []
    all_ok = splitter.ALL_MERGES["all_ok"]

    def merge(replies: Sequence[bytes]) -> bytes:
        parts[:] = replies
        return all_ok(replies)

    _fan(s, argv, info, lambda raw: done(raw, parts), merge)


# --- SCAN ----------------------------------------------------------------------------------
def scan(s: Session, argv: list[bytes], info: CommandInfo) -> None:
    slot = s.new_slot(info.name)
    decoded = splitter.scan_decode_cursor(argv[1])
    first_slots = s.router.topology.slot_map.first_slots
    if decoded is None or decoded[0] >= max(len(first_slots), 1):
        slot(error_frame(errors.INVALID_CURSOR))
        return
    if not first_slots:
        slot(CLUSTER_DOWN)
        return
    index, node_cursor = decoded
    n_nodes = len(first_slots)

    def done(raw: bytes) -> None:
        if raw[:1] == b"-":
            slot(raw)
            return
        next_cursor, keys = splitter.scan_split_reply(raw)
        if next_cursor:
            cursor = splitter.scan_encode_cursor(index, next_cursor)
        elif index + 1 < n_nodes:
            cursor = splitter.scan_encode_cursor(index + 1, 0)
        else:
            cursor = b"0"
        slot(splitter.scan_reply(cursor, keys))

    node_argv = [argv[0], str(node_cursor).encode(), *argv[2:]]
    s.router.send(Call(s.router, pack_command(tuple(node_argv)), first_slots[index], True, s.proto,
                       s.id, done))


# --- INFO ----------------------------------------------------------------------------------
def info(s: Session, argv: list[bytes], info: CommandInfo) -> None:
    slot = s.new_slot(info.name)
    _fan(s, argv, info, slot, lambda replies: s.proxy.info_reply(s, argv, replies))


# --- RANDOMKEY -----------------------------------------------------------------------------
def merge_any(replies: Sequence[bytes]) -> bytes:
    """The first non-null reply (a random key from some master), else the null."""
    for r in replies:
        if r[:1] == b"-":
            return r
    for r in replies:
        if r not in (b"$-1\r\n", b"_\r\n"):
            return r
    return replies[0]


def randomkey(s: Session, argv: list[bytes], info: CommandInfo) -> None:
    _fan(s, argv, info, s.new_slot(info.name), merge_any)


_SPECIAL = {
    "scan": scan,
    "info": info,
    "any": randomkey,
    "one_ok": control.kill,  # SCRIPT KILL, FUNCTION KILL: on control connections
}
# Every merge name an all-masters / all-nodes row may carry.
FAN_MERGES = frozenset(splitter.ALL_MERGES) | frozenset(_SPECIAL)


def _unhandled_rows() -> list[str]:
    """Fan-out rows of the command table whose merge has no handler here."""
    handlers = {"split": frozenset(SPLIT_MERGES), "all_masters": FAN_MERGES,
                "all_nodes": FAN_MERGES}
    return [i.name for i in ALL_COMMANDS.values()
            if i.route in handlers and i.merge not in handlers[i.route]]


# A row the proxy cannot merge is an "unsupported" row of the table, refused before any
# sending; a fan-out row without a handler is a bug, found at start-up.
if _unhandled_rows():
    raise RuntimeError(f"fan-out rows without a merge handler: {_unhandled_rows()}")
