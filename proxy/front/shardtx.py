"""Transactions whose keys span slots, with ``cross_slot_transactions: per_shard``.

Redis Cluster runs a MULTI/EXEC on one node and only when all its keys hash to one slot. In
``per_shard`` mode the proxy queues commands of any slot (pinned.py queues them) and, at EXEC:

1. groups the queued commands by slot, in the order each slot first appears; a command
   without keys joins the first group (no keys at all: one group on the client's usual
   master);
2. runs one ``MULTI … EXEC`` per group, one group after the other, on the client's own
   connection to the slot's master: first an empty ``MULTI EXEC`` on every watched master
   that has no group (it commits nothing and only checks the watched keys), then the first
   group of every watched master, then the rest in order;
3. answers EXEC with every command's reply in the client's order; an error inside a group
   (WRONGTYPE …) stays in its place, as Redis puts it.

WATCH: each slot's keys are watched on their own master, on the connection that later runs
that master's groups. A group that answers nil (a watched key changed) makes EXEC answer nil
and the groups not yet run are not sent; groups that already committed stay committed (no
rollback). A group refused as a whole (EXECABORT, lost connection) ends EXEC with that error,
with the same caveat. MOVED/ASK: as pinned.py — an unwatched group follows the redirect and is
sent again whole (nothing of it ran); a group on a watched master follows nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING

from slotgate.protocol.commands import CommandInfo, key_positions, lookup
from slotgate.protocol.resp import ReplyFramer, encode_command
from slotgate.protocol.slots import key_slot
from slotgate.proxy import errors
from slotgate.proxy.backend.connections import BackendError, DirectConnection
from slotgate.proxy.routing.redirect import error_frame
from slotgate.proxy.routing.splitter import (
    Part,
    merge_all_ok,
    merge_in_order,
    merge_sum,
    split_by_slot,
)

if TYPE_CHECKING:
    from slotgate.proxy.front.routes import RouteSession

PER_SHARD = "per_shard"
NULL_REPLIES = (b"*-1\r\n", b"_\r\n")
MULTI = encode_command(b"MULTI")
EXEC = encode_command(b"EXEC")
UNWATCH = encode_command(b"UNWATCH")


def enabled(s: RouteSession) -> bool:
    return s.settings.cross_slot_transactions == PER_SHARD


def queues_split(s: RouteSession, argv: list[bytes], info: CommandInfo) -> bool:
    """MGET, MSET, DEL, UNLINK, EXISTS, TOUCH over several slots may be queued: at EXEC each
    slot's part runs in that slot's group and the parts' replies merge as outside MULTI."""
    return info.route == "split" and enabled(s) and not (len(argv) - info.first_key) % info.step


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


async def exec_(s: RouteSession, queued: list[list[bytes]],
                reply_slot: Callable[[bytes], None]) -> None:
    await s.wait_idle()
    client_n = len(queued)
    queued, shapes = _expand(queued)
    by_slot = groups(s, queued)
    owners = s.router.topology.owners
    pending_checks = [n for n in s.tx.shard_watch if n not in {owners[k] for k in by_slot}]
    replies: list[bytes | None] = [None] * len(queued)
    ran_on: list[DirectConnection | None] = []  # each group's connection
    try:
        for slot, indexes in _order(s, by_slot):
            node = pending_checks.pop(0) if slot < 0 else owners[slot]
            raw, conn = await _run_group(s, node, slot, [queued[i] for i in indexes])
            if raw in NULL_REPLIES or raw[:1] != b"*":
                reply_slot(raw)
                return
            if indexes:
                ran_on.append(conn)
            framer = ReplyFramer()
            framer.feed(raw[raw.index(b"\r\n") + 2:])
            for i, (_, frame) in zip(indexes, framer.frames(), strict=True):
                replies[i] = frame
            if node is not None:
                # Later groups on this master are no longer watched: its EXEC checked them.
                s.tx.shard_watch.pop(node, None)
    finally:
        await release(s)
    done = [r or b"" for r in replies]
    if len(queued) != client_n:
        done = _merged(done, shapes)
    from slotgate.proxy.front.pinned import after_writes
    reply_slot(await after_writes(s, ran_on, b"*%d\r\n" % client_n + b"".join(done)))
