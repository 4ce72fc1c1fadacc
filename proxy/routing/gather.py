"""Multi-key commands across slots: the I/O of ``crossslot.py``'s three steps.

A request whose keys span slots holds up the session (as a transaction does): it waits for
the client's earlier replies, then gathers, runs and (moves) commits, and only then is the
client's next request read, so a pipelined ``GET dst`` sees the result.

Reads (step 1 without WATCH) and step 2 go through the router's redirect/retry loop on the
client's own connections (``pinned.py``'s, closed with the session). A move's watched reads
and its commit run on connections opened for the request and closed at its end: a WATCH
belongs to one connection, and a redirect there ends the request with ``TRYAGAIN``.

Failure handling of a move (the order matters: destination first, then source; MSETNX:
the first key's slot, then the other slots one by one):

- step 2 fails: nothing was committed at the source; the client gets the error. A lost
  connection after sending (a move): ``_recover_run`` finds out whether it ran, from the
  destination's image before it (read in step 1) and after it (the command run again on
  copies), and takes it back if it did; the client gets ``MOVE_NOT_DONE``.
- step 3's EXEC answers null (another client changed the source since step 1): every key
  already written is put back as it was (``_undo``), and the whole command starts again,
  ``MOVE_ATTEMPTS`` times at most.
- step 3 loses its connection: the source is read again on its (maybe new) master until the
  retry deadline. Unchanged: the commit did not happen, the destination is put back, the
  client gets the error. Holding the command's result: the commit happened, the client gets
  the command's reply.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING

import trio

from slotgate.protocol.commands import CommandInfo
from slotgate.protocol.resp import encode_command
from slotgate.protocol.slots import key_slot
from slotgate.proxy import errors
from slotgate.proxy.backend.connections import BackendError, DirectConnection
from slotgate.proxy.front.pinned import _direct, _on_owner, after_writes, on_owner_at
from slotgate.proxy.routing import blockmulti, crossslot, movelock, sortroute
from slotgate.proxy.routing.crossslot import Plan, Undo, Value
from slotgate.proxy.routing.redirect import error_frame
from slotgate.proxy.routing.splitter import array_elements

if TYPE_CHECKING:
    from slotgate.proxy.front.routes import RouteSession

# A move restarted because a source changed meanwhile: at most this many tries in all.
MOVE_ATTEMPTS = 3
# How long a move waits for a replica to have its destination before committing its source.
REPLICA_WAIT_MS = 500
_REDIRECTS = (b"-MOVED", b"-ASK", b"-TRYAGAIN", b"-CLUSTERDOWN", b"-LOADING")
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
    reply_slot(await run_plan(s, p, readonly, name))


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
        self.clean: set[DirectConnection] = set()

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
                    local = await _read(s, p.anchor_slot, p.local_written)
                    if isinstance(local, bytes):
                        errors_by_slot[slot] = local
                        return
                    local_before.update(local)
                    continue
                keys = p.by_slot[slot]
                if any(k in p.written for k in keys):
                    got = await _watched_read(s, slot, keys, watches)
                else:
                    got = await _read(s, slot, keys)
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
        # Every wait in it is bounded (the router's deadline, ``_roundtrip``'s timeout).
        with trio.CancelScope(shield=bool(p.written)):
            reply = await _run_and_commit(s, p, readonly, values, watches, local_before)
        return reply
    finally:
        with trio.CancelScope(shield=True):
            await watches.aclose()


async def _run_and_commit(s: RouteSession, p: Plan, readonly: bool,
                          values: dict[bytes, Value], watches: _Watches,
                          local_before: dict[bytes, Value]) -> bytes:
    layout = crossslot.run_payload(p, values)
    node = _owner(s, p.anchor_slot)
    raw, ran_at = await on_owner_at(s, p.anchor_slot, layout.payload, layout.n_replies,
                                    readonly, partial(_direct, s))
    if p.written and raw.startswith(_UNKNOWN_FATE):
        return await _recover_run(s, p, values, local_before, raw, node or "?")
    if raw[:1] != b"*" or crossslot.is_null(raw):
        return raw  # the router's error (unreachable, unknown fate), EXECABORT
    elems = array_elements(raw)
    err = crossslot.first_error(elems[: layout.before_at])
    if err is not None:
        return err  # a RESTORE refused (a payload this node cannot read)
    reply = elems[layout.command_at]
    written = [s.tx.direct.get(ran_at)]  # where the command ran (its destination)
    if p.written:
        reply = await _commit(s, p, values, elems, layout, reply, watches, written)
    if readonly or reply[:1] in (b"-", b"!"):
        return reply
    return await after_writes(s, written, reply)  # durable_writes, read-your-writes


async def _recover_run(s: RouteSession, p: Plan, values: dict[bytes, Value],
                       before: dict[bytes, Value], lost: bytes, node: str) -> bytes:
    """A move's step 2 lost its connection after sending (its master failed, say): nothing
    was committed at the source, but the destination may hold the copy. The same command
    runs again on copies of what step 2 started from (``crossslot.scratch``), which tells
    what the destination holds if step 2 ran; then the destination is read on its (maybe
    new) master until the retry deadline: as before, step 2 did not run; as the copies'
    result, it ran and is taken back. Either way the client gets "not done", nothing
    changed; anything else leaves the unknown-fate error."""
    s.router.topology.request_refresh("conn_lost")
    keys = p.local_written
    scratch = crossslot.scratch(p)
    layout = crossslot.run_payload(scratch, {**values, **before})
    # It changes nothing (copies made and deleted in one transaction): safe to send again.
    raw = await _on_owner(s, p.anchor_slot, layout.payload, layout.n_replies, True,
                          partial(_direct, s))
    if raw[:1] != b"*" or crossslot.is_null(raw):
        return lost
    elems = array_elements(raw)
    after = [v.payload for v in crossslot.read_values(keys, elems[layout.after_at:]).values()]
    not_done = error_frame(errors.MOVE_NOT_DONE.format(
        name=p.argv[0].decode(errors="replace").lower(), node=node))
    deadline = trio.current_time() + s.settings.retry_deadline_ms / 1000
    while trio.current_time() < deadline:
        got = await _read(s, p.anchor_slot, keys)
        if isinstance(got, dict):
            now = [got[k].payload for k in keys]
            if now == [before[k].payload for k in keys]:
                return not_done
            if now == after:
                undo = [Undo(k, p.anchor_slot, before[k], a)
                        for k, a in zip(keys, after, strict=True)]
                return not_done if await _undo(s, undo) else lost
            return lost
        await trio.sleep(0.1)
    return lost


async def _roundtrip(s: RouteSession, conn: DirectConnection, payload: bytes,
                     n: int) -> list[tuple[int, bytes]]:
    """A round trip on a connection of the request's own, bounded by ``command_timeout_ms``
    (a timeout is a lost connection: ``BackendError``)."""
    try:
        with trio.fail_after(s.settings.command_timeout_ms / 1000):
            return await conn.roundtrip(payload, n)
    except trio.TooSlowError as exc:
        raise BackendError(f"{conn.address}: no reply in time") from exc


async def _read(s: RouteSession, slot: int, keys: list[bytes]) -> dict[bytes, Value] | bytes:
    payload, n = crossslot.gather_payload(keys, watch=False)
    raw = await _on_owner(s, slot, payload, n, True, partial(_direct, s))
    if raw[:1] != b"*" or crossslot.is_null(raw):
        return raw
    return crossslot.read_values(keys, array_elements(raw))


def _owner(s: RouteSession, slot: int) -> str | None:
    return s.router.topology.owners[slot]


async def _open(s: RouteSession, node: str) -> DirectConnection:
    return await DirectConnection.open(node, 2, s.settings, s.metrics)


def _refused(raw: bytes) -> bytes:
    """A redirect on a watched connection ends the request: the client may try again."""
    if raw.startswith(_REDIRECTS):
        return error_frame(errors.CROSSSLOT_TRYAGAIN)
    return raw


async def _watched_read(s: RouteSession, slot: int, keys: list[bytes],
                        watches: _Watches) -> dict[bytes, Value] | bytes:
    node = _owner(s, slot)
    if node is None:
        return error_frame(errors.SLOT_NOT_SERVED)
    payload, n = crossslot.gather_payload(keys, watch=True)
    try:
        conn = await watches.open(node)
    except (OSError, BackendError, trio.TooSlowError):
        return error_frame(errors.NODE_UNREACHABLE.format(node=node))
    for k in keys:
        watches.by_key[k] = conn
    try:
        frames = [raw for _, raw in await _roundtrip(s, conn, payload, n)]
    except BackendError:
        return error_frame(errors.NODE_UNREACHABLE.format(node=node))
    err = crossslot.first_error(frames)
    if err is not None:
        return _refused(err)
    return crossslot.read_values(keys, frames[1:])


async def _commit(s: RouteSession, p: Plan, values: dict[bytes, Value], elems: list[bytes],
                  layout: crossslot.RunLayout, reply: bytes, watches: _Watches,
                  written: list[DirectConnection | None]) -> bytes:
    """Step 3: write back the keys the command changed outside the anchor's slot, slot by
    slot under step 1's WATCH; on a failure, take back what was written (``undo``). Each
    connection a commit ran on is added to ``written``."""
    local = p.local_written
    n_local = len(local)
    before = crossslot.read_values(local, elems[layout.before_at : layout.before_at + 2 * n_local])
    after = crossslot.dumps(elems[layout.after_at : layout.after_at + n_local])
    new = crossslot.read_values(p.written, elems[layout.after_at + n_local :])
    changed = {k: v for k, v in new.items() if v.payload != values[k].payload}
    if not changed:
        return reply
    undo = [Undo(k, p.anchor_slot, before[k], a) for k, a in zip(local, after, strict=True)
            if before[k].payload != a]
    if undo:
        await _wait_replica(s, p.anchor_slot)
    by_conn: dict[DirectConnection, list[bytes]] = {}
    for key in changed:
        by_conn.setdefault(watches.by_key[key], []).append(key)
    for conn, keys in by_conn.items():
        payload, n = crossslot.commit_payload({k: changed[k] for k in keys})
        try:
            frames = await _roundtrip(s, conn, payload, n)
        except BackendError:
            failed = await _resolve(s, p, keys, values, changed, undo, conn.address)
            if failed is not None:
                return failed
            written.append(conn)  # (lost: its WAIT's error tells it)
        else:
            watches.clean.add(conn)  # EXEC, whatever its answer, ended the WATCH
            written.append(conn)
            raw = frames[-1][1]
            if crossslot.is_null(raw):
                if await _undo(s, undo):
                    raise _Retry
                return error_frame(errors.MOVE_HALF_DONE.format(
                    key=undo[-1].key.decode(errors="replace") if undo else ""))
            if raw[:1] != b"*":
                return _refused(raw)
        undo.extend(Undo(k, key_slot(k), values[k], changed[k].payload) for k in keys)
    return reply


async def _wait_replica(s: RouteSession, slot: int) -> None:
    """Before a source loses what step 2 wrote elsewhere: ``WAIT`` until a replica of the
    anchor's master has step 2 (at most ``REPLICA_WAIT_MS``), so that this master failing
    now does not take the only copy with it. No replica, or none in time: the move goes on
    (as any write acknowledged by one master)."""
    node = _owner(s, slot)
    if node is None or not s.router.topology.slot_map.replicas.get(node):
        return
    try:
        conn = await _direct(s, node)  # the connection step 2 ran on: WAIT is per connection
        await _roundtrip(s, conn, encode_command(b"WAIT", b"1", b"%d" % REPLICA_WAIT_MS), 1)
    except (OSError, BackendError, trio.TooSlowError):
        pass  # the commit's own failure handling follows


async def _resolve(s: RouteSession, p: Plan, keys: list[bytes], old: dict[bytes, Value],
                   new: dict[bytes, Value], undo: list[Undo], node: str) -> bytes | None:
    """A commit lost its connection: find out whether it was applied, by reading its keys
    again on their master (after a failover, the new one) until the retry deadline. None:
    it was applied, the command goes on; else the client's error."""
    s.router.topology.request_refresh("conn_lost")
    deadline = trio.current_time() + s.settings.retry_deadline_ms / 1000
    slot = key_slot(keys[0])
    while trio.current_time() < deadline:
        got = await _read(s, slot, keys)
        if isinstance(got, dict):
            now = [got[k].payload for k in keys]
            if now == [new[k].payload for k in keys]:
                return None  # the commit happened
            if now == [old[k].payload for k in keys]:
                if await _undo(s, undo):
                    name = p.argv[0].decode(errors="replace").lower()
                    return error_frame(errors.MOVE_UNDONE.format(name=name, node=node))
                break
        await trio.sleep(0.1)
    s.metrics.unknown_fate_write()
    return error_frame(errors.UNKNOWN_FATE_WRITE.format(node=node))


async def _undo(s: RouteSession, undo: list[Undo]) -> bool:
    """Take back the writes in ``undo``, last first; False if one could not be."""
    ok = True
    for u in reversed(undo):
        ok = await _compensate(s, u) and ok
    return ok


async def _compensate(s: RouteSession, u: Undo) -> bool:
    """Put ``u.key`` back as it was, if it still holds what the proxy wrote there (WATCH,
    compare, then ``MULTI DEL RESTORE EXEC``). False: it changed since, or no master."""
    node = _owner(s, u.slot)
    if node is None:
        return False
    try:
        conn = await _open(s, node)
    except (OSError, BackendError, trio.TooSlowError):
        return False
    try:
        frames = await _roundtrip(s, conn, encode_command(b"WATCH", u.key) +
                                  encode_command(b"DUMP", u.key), 2)
        if crossslot.dumps([frames[1][1]])[0] != u.after:
            return False
        payload, n = crossslot.restore_payload(u.key, u.before)
        frames = await _roundtrip(s, conn, payload, n)
        return frames[-1][1][:1] == b"*" and not crossslot.is_null(frames[-1][1])
    except (BackendError, ValueError):
        return False
    finally:
        with trio.CancelScope(shield=True):
            await conn.aclose()
