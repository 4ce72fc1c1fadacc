"""Transactions whose keys span slots, with ``cross_slot_transactions: per_shard``.

Redis Cluster runs a MULTI/EXEC on one node and only when all its keys hash to one slot. In
``per_shard`` mode the proxy queues commands of any slot (pinned.py queues them), and also
commands whose own keys span slots that it runs across slots outside MULTI (SUNIONSTORE,
RENAME, MSETNX, scripts …; the blocking pops and moves, XREAD and XREADGROUP too, run
without blocking as Redis runs them in EXEC: ``runs_across``). At EXEC:

1. the queue is cut into *segments* (``_segments``): each command whose own keys span slots
   (or a SORT with BY/GET patterns, or DBSIZE, KEYS, FLUSHDB …: ``_EVERY_MASTER``) is a
   segment of its own, *alone*; the commands between them form the others (the first one
   always, maybe empty);
2. the segments run one after the other, in the queue's order. An alone command runs as it
   does outside MULTI, through its route (gather.py, sortroute.py …), with its own
   atomicity, and its reply (an error too) takes its place in EXEC's array. The other
   segments are grouped by slot, in the order each slot first appears in the segment; a
   command without keys joins the segment's first group (no keys at all: one group on the
   client's usual master). Each group is one ``MULTI … EXEC``, one group after the other,
   on the client's own connection to the slot's master; the first segment begins with an
   empty ``MULTI EXEC`` on every watched master that has no group in it (it commits
   nothing and only checks the watched keys), then the first group of every watched
   master, then the rest in order. So every watch is checked before any alone command and
   any later segment runs;
3. EXEC answers every command's reply in the client's order; an error inside a group
   (WRONGTYPE …) stays in its place, as Redis puts it.

WATCH: each slot's keys are watched on their own master, on the connection that later runs
that master's groups. A group that answers nil (a watched key changed) makes EXEC answer nil
and the groups not yet run are not sent; groups that already committed stay committed (no
rollback). A group refused as a whole (EXECABORT, lost connection) ends EXEC with that error,
with the same caveat (alone commands already run included). MOVED/ASK: as pinned.py — an
unwatched group follows the redirect and is sent again whole (nothing of it ran); a group on
a watched master follows nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, cast

from slotgate.protocol import sort as sortcore
from slotgate.protocol.commands import CommandInfo, key_positions, lookup
from slotgate.protocol.resp import ReplyFramer, encode_command
from slotgate.protocol.slots import key_slot
from slotgate.proxy import errors
from slotgate.proxy.backend.connections import BackendError, DirectConnection
from slotgate.proxy.routing import crossslot
from slotgate.proxy.routing.control import CLUSTER_DOWN
from slotgate.proxy.routing.redirect import error_frame
from slotgate.proxy.routing.splitter import (
    ALL_MERGES,
    Part,
    array_elements,
    merge_all_ok,
    merge_in_order,
    merge_sum,
    split_by_slot,
)

if TYPE_CHECKING:
    from slotgate.proxy.front.readwrite import ReadWrite
    from slotgate.proxy.front.routes import RouteSession

PER_SHARD = "per_shard"
NULL_REPLIES = (b"*-1\r\n", b"_\r\n")
MULTI = encode_command(b"MULTI")
EXEC = encode_command(b"EXEC")
UNWATCH = encode_command(b"UNWATCH")


def enabled(s: RouteSession) -> bool:
    return s.settings.cross_slot_transactions == PER_SHARD


# Routed ``single``, run across slots outside MULTI (routes.py's ``_SINGLE_ACROSS``).
_SINGLE_ACROSS = crossslot.SCRIPTS | {"migrate"}


def runs_across(argv: list[bytes], info: CommandInfo) -> bool:
    """Whether a command whose keys span slots can be queued with ``per_shard``: MGET, MSET,
    DEL, UNLINK, EXISTS, TOUCH (at EXEC each slot's part runs in that slot's group and the
    parts' replies merge as outside MULTI), every other command the proxy runs across slots
    outside MULTI (at EXEC it runs alone, at its place: ``_alone``), and the blocking pops
    and moves, which run without blocking there, as in Redis' EXEC (``_unblocked``)."""
    if info.route == "split":
        return not (len(argv) - info.first_key) % info.step
    return info.route == "gather" or info.name in _SINGLE_ACROSS or info.name in _UNBLOCKED \
        or info.name in _STREAM_READS


# Blocking pops and moves over keys of several slots inside MULTI: Redis runs them without
# blocking (a null when every key is empty), that is as these commands without a timeout.
# (name, its form without a timeout, arguments kept: slice of argv[1:]).
_UNBLOCKED: dict[str, tuple[bytes, slice]] = {
    "blmove": (b"LMOVE", slice(0, 4)),
    "brpoplpush": (b"RPOPLPUSH", slice(0, 2)),
    "blmpop": (b"LMPOP", slice(1, None)),
    "bzmpop": (b"ZMPOP", slice(1, None)),
    "blpop": (b"LMPOP", slice(0, -1)),
    "brpop": (b"LMPOP", slice(0, -1)),
    "bzpopmin": (b"ZMPOP", slice(0, -1)),
    "bzpopmax": (b"ZMPOP", slice(0, -1)),
}
_ENDS = {"blpop": b"LEFT", "brpop": b"RIGHT", "bzpopmin": b"MIN", "bzpopmax": b"MAX"}
# XREAD, XREADGROUP: without their BLOCK option (``_without_block``).
_STREAM_READS = frozenset({"xread", "xreadgroup"})
# Their options before STREAMS, and how many arguments each takes.
_READ_OPTIONS = {b"block": 1, b"count": 1, b"group": 2, b"noack": 0}
_NOGROUP = b"-NOGROUP "


def _without_block(argv: list[bytes]) -> list[bytes]:
    """XREAD/XREADGROUP without ``BLOCK <ms>`` (options checked by ``_check_unblocked``)."""
    out = [argv[0]]
    i = 1
    while i < len(argv) and argv[i].lower() != b"streams":
        n = _READ_OPTIONS.get(argv[i].lower(), 0)
        if argv[i].lower() != b"block":
            out += argv[i:i + 1 + n]
        i += 1 + n
    return out + argv[i:]


def _unblocked(argv: list[bytes], name: str) -> list[bytes]:
    """The command without a timeout: BLMOVE as LMOVE, BLMPOP as LMPOP, BLPOP as ``LMPOP n
    keys LEFT`` (its reply reshaped by ``_as_pop``), XREAD without BLOCK …"""
    if name in _STREAM_READS:
        return _without_block(argv)
    verb, kept = _UNBLOCKED[name]
    args = argv[1:][kept]
    end = _ENDS.get(name)
    if end is None:
        return [verb, *args]
    return [verb, b"%d" % len(args), *args, end]


def _as_pop(raw: bytes, name: str) -> bytes:
    """An LMPOP/ZMPOP reply of one element as BLPOP/BZPOPMIN … give it: ``[key, element]``,
    ``[key, member, score]``; a null or an error as it is."""
    if name not in _ENDS or raw[:1] != b"*" or crossslot.is_null(raw):
        return raw
    key, elements = array_elements(raw)
    first = array_elements(elements)[0]
    if name in ("blpop", "brpop"):
        return b"*2\r\n" + key + first
    member, score = array_elements(first)
    return b"*3\r\n" + key + member + score


async def _check_unblocked(s: RouteSession, argv: list[bytes]) -> bytes | None:
    """Redis' own argument errors (timeout, direction, COUNT …) of a blocking command: the
    command over an always-empty key of its first key's slot, inside ``MULTI`` on that
    slot's master (where it neither blocks nor changes anything); None when it has none."""
    from slotgate.proxy.front.pinned import _direct, _on_owner
    positions = key_positions(argv)
    slot = key_slot(argv[positions[0]])
    empty = b"{%s}%scheck" % (crossslot.tag_for_slot(slot), crossslot.TEMP_PREFIX)
    checked = [empty if i in positions else a for i, a in enumerate(argv)]
    payload = MULTI + encode_command(*checked) + EXEC
    # It changes nothing: safe to send again after a lost connection (readonly).
    raw = await _on_owner(s, slot, payload, 3, True, partial(_direct, s))
    if raw[:1] == b"*" and not crossslot.is_null(raw):
        raw = array_elements(raw)[0]
    if raw.startswith(_NOGROUP) and argv[0].lower() == b"xreadgroup":
        return None  # the empty key has no group: the options were read, the real keys tell
    return None if raw[:1] != b"-" else raw


def queues_across(s: RouteSession, argv: list[bytes], info: CommandInfo) -> bool:
    return enabled(s) and runs_across(argv, info)


# Rows sent to every master outside MULTI whose replies merge from the masters' own:
# with ``per_shard`` they are queued and run alone at EXEC, on every master
# (``_on_every_master``). The others (SCAN, RANDOMKEY, INFO, the KILLs) stay refused.
_EVERY_MASTER = frozenset({"dbsize", "keys", "flushall", "flushdb", "memory|purge",
                           "script|exists", "script|flush", "script|load"})


def queues_every_master(s: RouteSession, info: CommandInfo) -> bool:
    """DBSIZE, KEYS, FLUSHDB … inside MULTI with ``per_shard`` (and one database: with
    ``databases: N`` they are the proxy's own, databases.py)."""
    return info.name in _EVERY_MASTER and enabled(s) and s.settings.databases == 1


async def _on_every_master(s: RouteSession, argv: list[bytes], info: CommandInfo,
                           policies: _Policies | None) -> bytes:
    """An ``_EVERY_MASTER`` row, one master after another over the client's own connections,
    the replies merged as outside MULTI (splitter.py)."""
    from slotgate.proxy.front.pinned import _direct, after_writes, on_owner_at
    first_slots = s.router.topology.slot_map.first_slots
    if not first_slots:
        return CLUSTER_DOWN
    payload = encode_command(*argv)
    writes = "write" in info.flags
    replies: list[bytes] = []
    conns: list[DirectConnection | None] = []
    for slot in first_slots:
        # A read (DBSIZE, KEYS, SCRIPT EXISTS …) is sent again after a lost connection.
        raw, node = await on_owner_at(s, slot, payload, 1, not writes, partial(_direct, s))
        replies.append(raw)
        conns.append(s.tx.direct.get(node))
    merged = ALL_MERGES[info.merge or ""](replies)
    if not writes:
        return merged
    return await after_writes(cast("RouteSession", _Alone(s, policies)), conns, merged)


Merge = Callable[[list[bytes]], bytes]


def _expand(queued: list[list[bytes]]
            ) -> tuple[list[list[bytes]], list[tuple[int, Merge | None]]]:
    """The commands to run (a split command over several slots: one per slot) and, per queued
    command, how many runs it became and how their replies merge (None: it runs as it is)."""
    runs: list[list[bytes]] = []
    shapes: list[tuple[int, Merge | None]] = []
    for argv in queued:
        info = lookup(argv)
        if info is None or info.route != "split" or len(
                {key_slot(k) for k in argv[info.first_key::info.step]}) < 2:
            runs.append(argv)
            shapes.append((1, None))
            continue
        parts = split_by_slot(argv, info.first_key, info.step)
        runs.extend(p.argv for p in parts)
        merge: Merge = merge_sum if info.merge == "sum" else merge_all_ok
        if info.merge == "mget":
            merge = partial(_merge_mget, parts, len(argv[info.first_key::info.step]))
        shapes.append((len(parts), merge))
    return runs, shapes


def _merge_mget(parts: list[Part], total: int, replies: list[bytes]) -> bytes:
    return merge_in_order(parts, replies, total)


def _merged(replies: list[bytes], shapes: list[tuple[int, Merge | None]]) -> list[bytes]:
    """Each queued command's reply: its runs' replies merged."""
    out: list[bytes] = []
    at = 0
    for n, merge in shapes:
        out.append(replies[at] if merge is None else merge(replies[at:at + n]))
        at += n
    return out


def groups(s: RouteSession, queued: list[list[bytes]]) -> dict[int, list[int]]:
    """Indexes of the commands by slot, slots in order of first appearance; keyless commands
    in the first group."""
    by_slot: dict[int, list[int]] = {}
    keyless: list[int] = []
    for i, argv in enumerate(queued):
        positions = key_positions(argv)
        if not positions:
            keyless.append(i)
            continue
        by_slot.setdefault(key_slot(argv[positions[0]]), []).append(i)
    if not by_slot:
        return {s.any_slot: keyless} if keyless else {}
    if keyless:
        first = next(iter(by_slot))
        by_slot[first] = sorted(by_slot[first] + keyless)
    return by_slot


# -- WATCH ------------------------------------------------------------------------------------

async def _watch_conn(s: RouteSession, node: str) -> DirectConnection:
    from slotgate.proxy.front.pinned import _direct
    conn = await _direct(s, node)
    s.tx.shard_watch[node] = conn
    return conn


async def _watch(s: RouteSession, argv: list[bytes],
                 reply_slot: Callable[[bytes], None]) -> None:
    from slotgate.proxy.front.pinned import _on_owner
    await s.wait_idle()
    by_slot: dict[int, list[bytes]] = {}
    for key in argv[1:]:
        by_slot.setdefault(key_slot(key), []).append(key)
    raw = b"+OK\r\n"
    for slot, keys in by_slot.items():
        # WATCH changes no data: safe to send again after a lost connection (readonly).
        raw = await _on_owner(s, slot, encode_command(b"WATCH", *keys), 1, True,
                              partial(_watch_conn, s))
        if raw[:1] == b"-":
            break
    reply_slot(raw)


def watch(s: RouteSession, argv: list[bytes]) -> Awaitable[None]:
    return _watch(s, argv, s.new_slot("watch"))


def drop(s: RouteSession) -> None:
    """RESET: the watching connections close in the background (nothing stays watched)."""
    tx = s.tx
    for node, conn in tx.shard_watch.items():
        if tx.direct.get(node) is conn:
            del tx.direct[node]
        s.router.nursery.start_soon(conn.aclose)
    tx.shard_watch.clear()


async def release(s: RouteSession) -> None:
    """Unwatch every shard (DISCARD, UNWATCH, RESET, EXEC's end)."""
    watched = s.tx.shard_watch
    conns = [c for c in watched.values() if not c.closed]
    watched.clear()
    for conn in conns:
        try:
            await conn.roundtrip(UNWATCH, 1)
        except BackendError:
            pass  # the connection is gone, and with it the watch


# -- EXEC -------------------------------------------------------------------------------------

def _order(s: RouteSession, by_slot: dict[int, list[int]]) -> list[tuple[int, list[int]]]:
    """(slot, command indexes) in running order; slot -1: an empty check on a watched node."""
    owners = s.router.topology.owners
    watched = s.tx.shard_watch
    first_of: dict[str, int] = {}
    for slot in by_slot:
        node = owners[slot]
        if node in watched and node not in first_of:
            first_of[node] = slot
    checks: list[tuple[int, list[int]]] = [(-1, [])] * sum(1 for n in watched if n not in first_of)
    firsts = [(slot, by_slot[slot]) for slot in first_of.values()]
    rest = [(slot, ix) for slot, ix in by_slot.items() if slot not in first_of.values()]
    return [*checks, *firsts, *rest]


async def _run_group(s: RouteSession, node: str | None, slot: int,
                     commands: list[list[bytes]]) -> tuple[bytes, DirectConnection | None]:
    """One MULTI … EXEC; EXEC's reply frame (or the error that ended it), and the
    connection it ran on."""
    from slotgate.proxy.front.pinned import _direct, on_owner_at
    payload = MULTI + b"".join(encode_command(*a) for a in commands) + EXEC
    n_replies = len(commands) + 2
    watched = s.tx.shard_watch.get(node) if node is not None else None
    if node is None or watched is None:
        raw, ran_at = await on_owner_at(s, slot, payload, n_replies, False,
                                        partial(_direct, s))
        return raw, s.tx.direct.get(ran_at)
    if watched.closed or s.tx.direct.get(node) is not watched:
        return NULL_REPLIES[0] if s.proto == 2 else NULL_REPLIES[1], None  # the watch was lost
    try:
        frames = await watched.roundtrip(payload, n_replies)
    except BackendError:
        s.metrics.unknown_fate_write()
        return error_frame(errors.UNKNOWN_FATE_WRITE.format(node=watched.address)), None
    return frames[-1][1], watched


def _alone(s: RouteSession, argv: list[bytes]) -> bool:
    """A queued command that runs alone at EXEC, at its place, as it runs outside MULTI: its
    keys span slots (a split command's parts do not), or a SORT whose BY/GET patterns the
    proxy looks up (sortroute.py)."""
    name = argv[0].lower()
    if name in _EVERY_MASTER_VERBS:
        info = lookup(argv)
        if info is not None and info.name in _EVERY_MASTER:
            return True
    if name in (b"sort", b"sort_ro"):
        readonly = name == b"sort_ro"
        args = sortcore.parse(argv, readonly)
        if isinstance(args, str):
            return sortcore.parse(argv, readonly, cluster=True) != args
        if args.needs_lookups:
            return True
    return s.slot_of(argv) is None


_EVERY_MASTER_VERBS = frozenset(n.split("|")[0].encode() for n in _EVERY_MASTER)


def _segments(s: RouteSession, queued: list[list[bytes]]) -> list[tuple[bool, list[int]]]:
    """The queue in running order: (alone, command indexes). Runs of commands of one slot
    each (grouped by slot as ``groups`` does), and each command that runs alone between
    them. The first segment is such a run, maybe empty: it checks every watched master."""
    out: list[tuple[bool, list[int]]] = [(False, [])]
    for i, argv in enumerate(queued):
        if _alone(s, argv):
            out += [(True, [i]), (False, [])]
        else:
            out[-1][1].append(i)
    return [seg for n, seg in enumerate(out) if n == 0 or seg[1]]


class _Policies:
    """The client's write policies (readwrite.py) as a command run alone at EXEC meets them:
    at once, on the connections it wrote on (before the next segment runs, while they are
    open); a failure (the WAIT's error) is kept for EXEC's reply, which it replaces, as for
    the groups' writes, and the command's own reply stays in its place."""

    def __init__(self, real: ReadWrite) -> None:
        self.real = real
        self.on_writes = real.on_writes
        self.failed: bytes | None = None

    def __getattr__(self, name: str) -> object:
        return getattr(self.real, name)

    async def after_writes(self, conns: list[DirectConnection], raw: bytes) -> bytes:
        got = await self.real.after_writes(conns, raw)
        if got != raw and self.failed is None:
            self.failed = got
        return raw


class _Alone:
    """The session as a route sees it when a queued command runs alone at EXEC: the route
    runs as outside MULTI (EXEC already waited for the earlier requests); its reply is kept
    instead of being sent, and a command it would forward as one call is kept for
    ``_run_alone``. Everything else is the session's (its write policies: ``_Policies``)."""

    __slots__ = ("_s", "got", "single", "policies")
    _s: RouteSession
    got: bytes | None  # the reply the route gave
    single: tuple[list[bytes], int, bool] | None  # argv, slot, readonly: forward it
    policies: _Policies | None

    def __init__(self, s: RouteSession, policies: _Policies | None) -> None:
        object.__setattr__(self, "_s", s)
        object.__setattr__(self, "got", None)
        object.__setattr__(self, "single", None)
        object.__setattr__(self, "policies", policies)

    def __getattr__(self, name: str) -> object:
        return getattr(self._s, name)

    def __setattr__(self, name: str, value: object) -> None:
        setattr(self._s, name, value)  # last_write_slot, proto …: the session's own

    def reply(self, name: str, raw: bytes) -> None:
        object.__setattr__(self, "got", raw)

    def new_slot(self, name: str) -> Callable[[bytes], None]:
        return partial(self.reply, name)

    async def wait_idle(self, own: int = 1) -> None:
        return None

    def send_single(self, argv: list[bytes], slot: int, readonly: bool, name: str) -> None:
        object.__setattr__(self, "single", (argv, slot, readonly))


async def _run_alone(s: RouteSession, argv: list[bytes], policies: _Policies | None) -> bytes:
    """One queued command run as outside MULTI, through its route: its reply."""
    info = lookup(argv)
    assert info is not None  # checked when queued
    if info.name in _EVERY_MASTER:
        return await _on_every_master(s, argv, info, policies)
    if info.name in _UNBLOCKED or info.name in _STREAM_READS:
        err = await _check_unblocked(s, argv)
        if err is not None:
            return err
        argv = _unblocked(argv, info.name)
        unblocked = lookup(argv)
        assert unblocked is not None
        return _as_pop(await _run_route(s, argv, unblocked, policies), info.name)
    return await _run_route(s, argv, info, policies)


async def _run_route(s: RouteSession, argv: list[bytes], info: CommandInfo,
                     policies: _Policies | None) -> bytes:
    from slotgate.proxy.front.pinned import _direct, after_writes, on_owner_at
    from slotgate.proxy.front.routes import ROUTES
    alone = _Alone(s, policies)
    view = cast("RouteSession", alone)
    pending = ROUTES[info.route](view, argv, info)
    if pending is not None:
        await pending
    if alone.single is not None:  # forwarded as it is (a node's argument error, say)
        argv, slot, readonly = alone.single
        raw, node = await on_owner_at(s, slot, encode_command(*argv), 1, readonly,
                                      partial(_direct, s))
        return raw if readonly else await after_writes(view, [s.tx.direct.get(node)], raw)
    return alone.got or error_frame(errors.CROSSSLOT)


async def _run_groups(s: RouteSession, queued: list[list[bytes]], indexes: list[int],
                      replies: list[bytes | None], ran_on: list[DirectConnection | None]
                      ) -> bytes | None:
    """One segment of commands grouped by slot (watched masters checked first, as long as
    any is watched): each reply put in ``replies``; EXEC's whole reply when it ends EXEC (a
    null: a watched key changed; a group refused whole), else None."""
    by_slot = groups(s, [queued[i] for i in indexes])
    owners = s.router.topology.owners
    pending_checks = [n for n in s.tx.shard_watch if n not in {owners[k] for k in by_slot}]
    for slot, group in _order(s, by_slot):
        node = pending_checks.pop(0) if slot < 0 else owners[slot]
        ix = [indexes[j] for j in group]
        raw, conn = await _run_group(s, node, slot, [queued[i] for i in ix])
        if raw in NULL_REPLIES or raw[:1] != b"*":
            return raw
        if ix:
            ran_on.append(conn)
        framer = ReplyFramer()
        framer.feed(raw[raw.index(b"\r\n") + 2:])
        for i, (_, frame) in zip(ix, framer.frames(), strict=True):
            replies[i] = frame
        if node is not None:
            # Later groups on this master are no longer watched: its EXEC checked them.
            s.tx.shard_watch.pop(node, None)
    return None


async def exec_(s: RouteSession, queued: list[list[bytes]],
                reply_slot: Callable[[bytes], None]) -> None:
    await s.wait_idle()
    client_n = len(queued)
    queued, shapes = _expand(queued)
    replies: list[bytes | None] = [None] * len(queued)
    ran_on: list[DirectConnection | None] = []  # each group's connection
    policies = _Policies(s.policies) if s.policies is not None else None
    try:
        for alone, indexes in _segments(s, queued):
            if alone:
                replies[indexes[0]] = await _run_alone(s, queued[indexes[0]], policies)
                continue
            ended = await _run_groups(s, queued, indexes, replies, ran_on)
            if ended is not None:
                reply_slot(ended)
                return
    finally:
        await release(s)
    done = [r or b"" for r in replies]
    if len(queued) != client_n:
        done = _merged(done, shapes)
    from slotgate.proxy.front.pinned import after_writes
    raw = await after_writes(s, ran_on, b"*%d\r\n" % client_n + b"".join(done))
    reply_slot(policies.failed if policies is not None and policies.failed and
               raw[:1] == b"*" else raw)
