"""Multi-key commands across slots: the I/O of ``crossslot.py``'s three steps.

A request whose keys span slots holds up the session (as a transaction does): it waits for
the client's earlier replies, then gathers, runs and (moves) commits, and only then is the
client's next request read, so a pipelined ``GET dst`` sees the result.

Reads (step 1 without WATCH) and step 2 go through the router's redirect/retry loop on the
client's own connections (``pinned.py``'s, closed with the session). A move's watched reads
and its commit run on connections opened for the request and closed at its end: a WATCH
belongs to one connection, and a redirect there ends the request with ``TRYAGAIN``.

A move (one source, one destination) writes its source first, then its destination
(``sourcefirst.py``), once step 1 is done. MSETNX and scripts write the first key's slot
(step 2), then the other slots one by one (step 3). Steps 2 and 3 each set a marker key of
their slot in their own transaction, so that their fate is always known afterwards
(``moveundo.py``):

- step 2 fails: nothing was committed in the other slots; the client gets the error. A
  lost connection after sending: ``_recover_run`` asks the marker whether it ran; if it
  did, what it wrote is put back.
- step 3 does not run (EXEC's null: another client changed a key since step 1; a refusal;
  a lost connection and no marker): every key already written is put back as it was;
  after a null the whole command starts again, ``MOVE_ATTEMPTS`` times at most.
- step 3 loses its connection and the marker is there: the commit happened, the client
  gets the command's reply.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING

import trio

from slotgate.protocol.commands import CommandInfo
from slotgate.protocol.resp import encode_command
from slotgate.protocol.slots import key_slot
from slotgate.proxy import errors
from slotgate.proxy.backend.connections import BackendError, DirectConnection
from slotgate.proxy.front.pinned import _direct, _on_owner, after_writes, on_owner_at
from slotgate.proxy.routing import (
    blockmulti,
    crossslot,
    journal,
    movelock,
    moveundo,
    msetnxjournal,
    sortroute,
    sourcefirst,
)
from slotgate.proxy.routing.crossslot import Plan, Undo, Value
from slotgate.proxy.routing.redirect import error_frame
from slotgate.proxy.routing.splitter import array_elements

if TYPE_CHECKING:
    from slotgate.proxy.front.routes import RouteSession

# A move restarted because a source changed meanwhile: at most this many tries in all.
MOVE_ATTEMPTS = 3
_UNKNOWN_FATE = error_frame(errors.UNKNOWN_FATE_WRITE).split(b"{node}")[0]
_LOCAL = -1  # in a node's list of gather reads: the anchor's own keys (moves)


class _Retry(Exception):
    """A source changed between step 1 and step 3; the destination was put back."""


def route(s: RouteSession, argv: list[bytes], info: CommandInfo) -> Awaitable[None] | None:
    """The ``gather`` route: keys in one slot are forwarded as ``single`` would; keys in
    several slots hold up the session while the three steps run."""
    if info.name in sortroute.HANDLED:
        handled, pending = sortroute.route(s, argv, info)  # BY/GET patterns
        if handled:
            return pending
    readonly = "readonly" in info.flags
    slot = s.slot_of(argv)
    if slot is None and info.name in blockmulti.NON_BLOCKING:
        pending = blockmulti.route(s, argv, info)  # LMPOP, ZMPOP: the first key with data
        if pending is not None:
            return pending
        slot = s.any_slot  # malformed: the node's error
    p = None if slot is not None else crossslot.plan(argv, crossslot.SPECS[info.name])
    if p is None:
        s.send_single(argv, s.any_slot if slot is None else slot, readonly, info.name)
        return None
    if not readonly:
        s.last_write_slot = p.anchor_slot  # WAIT waits there (proxy/front/wait.py)
    return _run(s, p, readonly, info.name, s.new_slot(info.name))


async def _run(s: RouteSession, p: Plan, readonly: bool, name: str,
               reply_slot: Callable[[bytes], None]) -> None:
    await s.wait_idle()
    reply = await run_plan(s, p, readonly, name)
    if name in crossslot.SCRIPTS:
        reply = crossslot.unmask(reply, p.temps)  # ``return KEYS``
    reply_slot(reply)


async def run_plan(s: RouteSession, p: Plan, readonly: bool, name: str) -> bytes:
    """Steps 1 to 3 of ``p``, once the client's earlier requests are answered: the reply."""
    locked = p.written + p.local_written
    try:
        async with KEY_LOCKS.hold(locked), movelock.held(s, p.written and locked):
            for _ in range(MOVE_ATTEMPTS):
                try:
                    return await _attempt(s, p, readonly)
                except _Retry:
                    continue
    except movelock.Contended as exc:
        reason = exc.args[0] if exc.args else b""
        if reason[:1] in (b"-", b"!"):
            return bytes(reason)  # the lock's master unreachable
    return error_frame(errors.MOVE_CONTENDED.format(name=name))


class KeyLocks:
    """Locks on key names, for the writes across slots of this proxy process: two moves (or
    MSETNX) sharing a key run one after the other, so they never undo each other's steps.
    Taken in sorted order (no deadlock); an entry lives while someone holds or awaits it.
    Across the processes of ``workers: N``, ``movelock.py`` adds a lock key on the cluster.
    Other writers (a client of the nodes themselves, single-key commands) are not held back:
    WATCH and compensation deal with them."""

    def __init__(self) -> None:
        self._locks: dict[bytes, tuple[trio.Lock, list[int]]] = {}

    @asynccontextmanager
    async def hold(self, keys: list[bytes]) -> AsyncIterator[None]:
        held: list[bytes] = []
        try:
            for key in sorted(set(keys)):
                lock, users = self._locks.setdefault(key, (trio.Lock(), [0]))
                users[0] += 1
                held.append(key)
                await lock.acquire()
            yield
        finally:
            for key in held:
                lock, users = self._locks[key]
                if lock.locked() and lock.statistics().owner is trio.lowlevel.current_task():
                    lock.release()
                users[0] -= 1
                if users[0] == 0:
                    del self._locks[key]


KEY_LOCKS = KeyLocks()


class _Watches:
    """A move's watching connections, by source key. They are kept among the client's own
    connections (``tx.direct``, under a name of their own, so they close with the session)
    and reused by its next move once clean: after the commit's EXEC, which ends the WATCH.
    Any other ending closes them."""

    def __init__(self, s: RouteSession) -> None:
        self.s = s
        self.by_key: dict[bytes, DirectConnection] = {}
        self.marks: dict[DirectConnection, bytes] = {}  # each commit's marker (its slot's)
        self.clean: set[DirectConnection] = set()
        self.started_s = trio.current_time()  # before step 1's reads: bounds a TTL's decay

    async def open(self, node: str) -> DirectConnection:
        name = _WATCH_PREFIX + node
        conn = self.s.tx.direct.pop(name, None)
        if conn is None or conn.closed:
            conn = await DirectConnection.open(node, 2, self.s.settings, self.s.metrics)
        return conn

    async def aclose(self) -> None:
        for conn in set(self.by_key.values()):
            if conn in self.clean and not conn.closed:
                self.s.tx.direct[_WATCH_PREFIX + conn.address] = conn
            else:
                await conn.aclose()


_WATCH_PREFIX = "watch "


async def _attempt(s: RouteSession, p: Plan, readonly: bool) -> bytes:
    watches = _Watches(s)
    try:
        values: dict[bytes, Value] = {}
        errors_by_slot: dict[int, bytes] = {}
        # Slots of one node one after another (the client's one connection to it), nodes in
        # parallel.
        by_node: dict[str | None, list[int]] = {}
        for slot in p.by_slot:
            by_node.setdefault(_owner(s, slot), []).append(slot)
        # A move also reads what it may change in the anchor's slot, for a step 2 whose
        # reply is lost (``_recover_run``).
        local_before: dict[bytes, Value] = {}
        if p.written:
            by_node.setdefault(_owner(s, p.anchor_slot), []).append(_LOCAL)

        async def gather_node(slots: list[int]) -> None:
            for slot in slots:
                if slot == _LOCAL:
                    local = await moveundo.read(s, p.anchor_slot, p.local_written)
                    if isinstance(local, bytes):
                        errors_by_slot[slot] = local
                        return
                    local_before.update(local)
                    continue
                keys = p.by_slot[slot]
                if any(k in p.written for k in keys):
                    got = await _watched_read(s, slot, keys, watches)
                else:
                    got = await moveundo.read(s, slot, keys)
                if isinstance(got, bytes):
                    errors_by_slot[slot] = got
                    return
                values.update(got)

        if len(by_node) == 1:
            await gather_node(next(iter(by_node.values())))
        else:
            async with trio.open_nursery() as nursery:
                for slots in by_node.values():
                    nursery.start_soon(gather_node, slots)
        for slot in [*p.by_slot, _LOCAL]:
            if slot in errors_by_slot:
                return errors_by_slot[slot]
        # A move, once its destination may be written, runs to its end even if the client
        # goes away: stopping between steps 2 and 3 would leave the element in both keys.
        # Every wait in it is bounded (the router's deadline, ``moveundo.roundtrip``'s timeout).
        with trio.CancelScope(shield=bool(p.written)):
            reply = await _run_and_commit(s, p, readonly, values, watches, local_before)
        return reply
    finally:
        with trio.CancelScope(shield=True):
            await watches.aclose()


async def _run_and_commit(s: RouteSession, p: Plan, readonly: bool,
                          values: dict[bytes, Value], watches: _Watches,
                          local_before: dict[bytes, Value]) -> bytes:
    if p.written and _is_move(p):
        conn = watches.by_key[p.written[0]]
        on_exec: list[DirectConnection] = []
        reply = await sourcefirst.run(s, p, values, conn, watches.marks[conn], local_before,
                                      on_exec)
        watches.clean.update(on_exec)
        if reply is None:
            raise _Retry  # nothing changed: the command runs again
        return reply
    mark = crossslot.marker(p.anchor_slot) if p.written else None
    entry: journal.Entry | None = None
    run = p
    extra: tuple[bytes, ...] = ()
    if mark is not None and p.argv[0].lower() == b"msetnx" and len(p.argv) % 2:
        # (its pairs whole: else the node's own arity error, nothing written)
        entry, run, extra = _msetnx_entry(s, p, watches)
    layout = crossslot.run_payload(run, values, mark, extra=extra)
    node = _owner(s, p.anchor_slot)
    raw, ran_at = await on_owner_at(s, p.anchor_slot, layout.payload, layout.n_replies,
                                    readonly, partial(_direct, s))
    if mark is not None and raw.startswith(_UNKNOWN_FATE):
        return await _recover_run(s, p, values, local_before, raw, node or "?", mark, watches,
                                  entry)
    if raw[:1] != b"*" or crossslot.is_null(raw):
        return raw  # the router's error (unreachable, unknown fate), EXECABORT
    elems = array_elements(raw)
    err = crossslot.first_error(elems[: layout.before_at])
    if err is not None:
        return err  # a RESTORE refused (a payload this node cannot read)
    reply = elems[layout.command_at]
    written = [s.tx.direct.get(ran_at)]  # where the command ran (its destination)
    if p.written:
        assert mark is not None
        reply = await _commit(s, p, values, elems, layout, reply, watches, mark, written, entry)
    if readonly or reply[:1] in (b"-", b"!"):
        return reply
    return await after_writes(s, written, reply)  # durable_writes, read-your-writes


def _msetnx_entry(s: RouteSession, p: Plan,
                  watches: _Watches) -> tuple[journal.Entry, Plan, tuple[bytes, ...]]:
    """MSETNX's journal entry (``msetnxjournal.py``): set by step 2's ``MSETNX`` itself, with
    its lease (given its expiry, and the entry its index member, in the same transaction)."""
    e = journal.new_entry(p.anchor_slot, p.anchor_slot)
    by_conn: dict[DirectConnection, list[bytes]] = {}
    for key in p.written:
        by_conn.setdefault(watches.by_key[key], []).append(key)
    groups = [(watches.marks[conn], keys) for conn, keys in by_conn.items()]
    args = msetnxjournal.step2_args(e, crossslot.client_argv(p), groups, journal.TOKEN)
    expiry = encode_command(b"PEXPIRE", e.lease, b"%d" % journal.lease_ms(s.settings))
    index = msetnxjournal.index_command(e, journal.index_of(e.name))
    return e, replace(p, argv=[*p.argv, *args]), (expiry, index)


async def _recover_run(s: RouteSession, p: Plan, values: dict[bytes, Value],
                       before: dict[bytes, Value], lost: bytes, node: str,
                       mark: bytes, watches: _Watches, entry: journal.Entry | None) -> bytes:
    """A move's step 2 lost its connection after sending (its master failed, say). Its
    marker tells whether it ran (``moveundo.fate``). It did not: the client gets "not
    done", nothing changed. It did: the same command runs again on copies of what step 2
    started from (``crossslot.scratch``), which gives what step 2 left in the destination
    and the source's new value; the destination is put back if it still holds that, else
    the move is finished (the source written, if unchanged since step 1: the client gets
    the command's reply). Neither known in time: the unknown-fate error."""
    not_done = error_frame(errors.MOVE_NOT_DONE.format(
        name=p.argv[0].decode(errors="replace").lower(), node=node))
    ran = await moveundo.fate(s, p.anchor_slot, mark)
    if ran is None:
        s.metrics.unknown_fate_write()
        return lost
    if not ran:
        return not_done
    keys = p.local_written
    scratch = crossslot.scratch(p)
    scratch.written.extend(p.written)
    layout = crossslot.run_payload(scratch, {**values, **before})
    # It changes nothing (copies made and deleted in one transaction): safe to send again.
    raw = await _on_owner(s, p.anchor_slot, layout.payload, layout.n_replies, True,
                          partial(_direct, s))
    if raw[:1] != b"*" or crossslot.is_null(raw):
        s.metrics.unknown_fate_write()
        return lost
    elems = array_elements(raw)
    done = crossslot.read_values(scratch.written, elems[layout.after_at:])
    todo = [Undo(k, p.anchor_slot, before[k], done[k].payload) for k in keys]
    new = {k: done[k] for k in p.written if done[k].payload != values[k].payload}
    if not new:  # the command left its source as it was: nothing more to do
        return elems[layout.command_at]
    if entry is not None:  # taken back: the journal entry goes first
        await journal.close(s, entry, None)
    outcome = await moveundo.settle(s, todo)
    if outcome == moveundo.UNDONE:
        return not_done
    return _unsettled(s, p, outcome, todo, node)


def _is_move(p: Plan) -> bool:
    """A move (one source, one destination: ``sourcefirst.py``), not MSETNX or a script."""
    return crossslot.SPECS[p.argv[0].decode(errors="replace").lower()].writes == "first"


def _unsettled(s: RouteSession, p: Plan, outcome: str, todo: list[Undo], node: str) -> bytes:
    if outcome == moveundo.HALF:
        return error_frame(errors.MOVE_HALF_DONE.format(
            key=todo[-1].key.decode(errors="replace") if todo else ""))
    s.metrics.unknown_fate_write()
    return error_frame(errors.UNKNOWN_FATE_WRITE.format(node=node))


def _owner(s: RouteSession, slot: int) -> str | None:
    return s.router.topology.owners[slot]


async def _watched_read(s: RouteSession, slot: int, keys: list[bytes],
                        watches: _Watches) -> dict[bytes, Value] | bytes:
    node = _owner(s, slot)
    if node is None:
        return error_frame(errors.SLOT_NOT_SERVED)
    mark = crossslot.marker(slot)
    payload, n = crossslot.gather_payload(keys, watch=True, mark=mark)
    try:
        conn = await watches.open(node)
    except (OSError, BackendError, trio.TooSlowError):
        return error_frame(errors.NODE_UNREACHABLE.format(node=node))
    watches.marks[conn] = mark
    for k in keys:
        watches.by_key[k] = conn
    try:
        frames = [raw for _, raw in await moveundo.roundtrip(s, conn, payload, n)]
    except BackendError:
        return error_frame(errors.NODE_UNREACHABLE.format(node=node))
    err = crossslot.first_error(frames)
    if err is not None:
        return moveundo.refused(err)
    return crossslot.read_values(keys, frames[1:])


async def _commit(s: RouteSession, p: Plan, values: dict[bytes, Value], elems: list[bytes],
                  layout: crossslot.RunLayout, reply: bytes, watches: _Watches, mark: bytes,
                  written: list[DirectConnection | None], entry: journal.Entry | None) -> bytes:
    """Step 3: write back the keys the command changed outside the anchor's slot, slot by
    slot under step 1's WATCH, each with its slot's marker. A commit that did not run (a
    source changed: EXEC's null; refused; its connection lost and its marker absent) is
    settled (``moveundo.settle``): what was written is taken back, or a move is finished.
    Each connection a commit ran on is added to ``written``. MSETNX's journal ``entry`` is
    deleted once every commit ran, or before anything is taken back."""
    local = p.local_written
    n_local = len(local)
    before = crossslot.read_values(local, elems[layout.before_at : layout.before_at + 2 * n_local])
    after = crossslot.dumps(elems[layout.after_at : layout.after_at + n_local])
    new = crossslot.read_values(p.written, elems[layout.after_at + n_local :])
    elapsed_ms = int((trio.current_time() - watches.started_s) * 1000)
    changed = {k: v for k, v in new.items() if crossslot.changed(values[k], v, elapsed_ms)}
    undo = [Undo(k, p.anchor_slot, before[k], a) for k, a in zip(local, after, strict=True)
            if before[k].payload != a]
    # Step 2's marker goes (its fate is known), after a replica has step 2 when the sources
    # are about to lose what it wrote.
    name = p.argv[0].decode(errors="replace").lower()
    anchor_node = _owner(s, p.anchor_slot) or "?"
    if not await moveundo.after_write(s, p.anchor_slot, mark, bool(undo and changed)):
        # The destination's master went silent after step 2: did step 2 survive it?
        ran = await moveundo.fate(s, p.anchor_slot, mark)
        if ran is None:
            s.metrics.unknown_fate_write()
            return error_frame(errors.UNKNOWN_FATE_WRITE.format(node=anchor_node))
        if not ran:
            return error_frame(errors.MOVE_NOT_DONE.format(name=name, node=anchor_node))
    if not changed:
        return reply
    if p.argv[0].lower() == b"msetnx":
        journal.fault_point(journal.KILL_AFTER_FIRST_SLOT)
    by_conn: dict[DirectConnection, list[bytes]] = {}
    for key in changed:
        by_conn.setdefault(watches.by_key[key], []).append(key)
    for i, (conn, keys) in enumerate(by_conn.items()):
        part = {k: changed[k] for k in keys}
        slot = key_slot(keys[0])
        if entry is not None and i:
            await journal.renew(s, entry)
        ran, raw = await _commit_slot(s, conn, part, watches)
        if ran is None:  # no master answered in time: it may or may not have run
            return raw  # MSETNX's journal entry stays: a sweep settles it
        if not ran:
            if entry is not None:  # taken back: the journal entry goes first
                await journal.close(s, entry, None)
            outcome = await moveundo.settle(s, undo)
            if outcome == moveundo.UNDONE:
                if crossslot.is_null(raw):
                    raise _Retry  # a source changed: the command runs again
                if raw[:1] in (b"-", b"!"):
                    return moveundo.refused(raw)
                return error_frame(errors.MOVE_UNDONE.format(name=name, node=conn.address))
            return _unsettled(s, p, outcome, undo, conn.address)
        else:
            written.append(conn)
        undo.extend(Undo(k, slot, values[k], changed[k].payload) for k in keys)
    if entry is not None:
        await journal.close(s, entry, None)
    return reply


async def _commit_slot(s: RouteSession, conn: DirectConnection, part: dict[bytes, Value],
                       watches: _Watches) -> tuple[bool | None, bytes]:
    """One slot's commit on its watching connection: (ran, EXEC's reply; empty when the
    connection was lost and the marker told; None and the unknown-fate error when no
    master answered before the deadline)."""
    mark = watches.marks[conn]
    slot = key_slot(next(iter(part)))
    payload, n = crossslot.commit_payload(part, mark)
    try:
        raw = (await moveundo.roundtrip(s, conn, payload, n))[-1][1]
    except BackendError:
        ran = await moveundo.fate(s, slot, mark)
        if ran is None:
            s.metrics.unknown_fate_write()
            return None, error_frame(errors.UNKNOWN_FATE_WRITE.format(node=conn.address))
        return ran, b""
    watches.clean.add(conn)  # EXEC, whatever its answer, ended the WATCH
    if raw[:1] != b"*" or crossslot.is_null(raw):
        return False, raw
    if not await moveundo.after_write(s, slot, mark, True, conn):
        # Its master went silent after the commit: did the commit survive it?
        ran = await moveundo.fate(s, slot, mark)
        if ran is None:
            s.metrics.unknown_fate_write()
            return None, error_frame(errors.UNKNOWN_FATE_WRITE.format(node=conn.address))
        return ran, raw if ran else b""
    return True, raw
