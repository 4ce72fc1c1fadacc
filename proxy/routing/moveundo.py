"""Writes across slots when a step's outcome is not the expected one: fate, undo.

MSETNX and scripts across slots (``gather.py``) write the first key's slot (step 2), then
each other slot (step 3); moves (``sourcefirst.py``) write their source, then their
destination. Each step's transaction also sets a *marker* key of its slot
(``crossslot.marker``), watched from before it was sent. Whatever reply is lost, the proxy
can tell afterwards whether the step ran: ``fate`` sends ``SET marker 0 NX GET`` to the
slot's master of now (after a failover, the promoted replica, which has the marker exactly
when it has the step: one transaction). "done": it ran. Absent: it did not, and it never
will, since that SET touched a key the step's transaction watches. A step 3 that did not
run after step 2 did is settled by ``settle``: what was written is taken back (``undo``:
each key put back as it was, if it still holds what the proxy wrote).
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

import trio

from slotgate.protocol.resp import encode_command
from slotgate.proxy import errors
from slotgate.proxy.backend.connections import BackendError, DirectConnection
from slotgate.proxy.front.pinned import _direct, _on_owner
from slotgate.proxy.routing import crossslot
from slotgate.proxy.routing.crossslot import Undo, Value
from slotgate.proxy.routing.redirect import error_frame
from slotgate.proxy.routing.splitter import array_elements

if TYPE_CHECKING:
    from slotgate.proxy.front.routes import RouteSession

_DONE = b"$1\r\n" + crossslot.MARK_DONE + b"\r\n"
_GIVEN_UP = b"$1\r\n" + crossslot.MARK_GIVEN_UP + b"\r\n"
_POLL_S = 0.1
# How long a move waits for a replica to have what a step wrote before it goes on.
REPLICA_WAIT_MS = 500
_REDIRECTS = (b"-MOVED", b"-ASK", b"-TRYAGAIN", b"-CLUSTERDOWN", b"-LOADING")

class FateUnknown(Exception):
    """A write of settling lost its reply and no master told its fate in time."""


# What ``settle`` did.
UNDONE = "undone"  # step 2 taken back: nothing changed
HALF = "half"  # a key changed by others meanwhile: it could not be put back
UNKNOWN = "unknown"  # no answer from a master before the deadline


async def roundtrip(s: RouteSession, conn: DirectConnection, payload: bytes,
                    n: int) -> list[tuple[int, bytes]]:
    """A round trip on a connection of the request's own, bounded by ``command_timeout_ms``
    (a timeout is a lost connection: ``BackendError``)."""
    try:
        with trio.fail_after(s.settings.command_timeout_ms / 1000):
            return await conn.roundtrip(payload, n)
    except trio.TooSlowError as exc:
        raise BackendError(f"{conn.address}: no reply in time") from exc


def owner(s: RouteSession, slot: int) -> str | None:
    return s.router.topology.owners[slot]


async def read(s: RouteSession, slot: int, keys: list[bytes]) -> dict[bytes, Value] | bytes:
    """``keys`` (one slot) read on their master, through the redirect/retry loop."""
    payload, n = crossslot.gather_payload(keys, watch=False)
    raw = await _on_owner(s, slot, payload, n, True, partial(_direct, s))
    if raw[:1] != b"*" or crossslot.is_null(raw):
        return raw
    return crossslot.read_values(keys, array_elements(raw))


async def fate(s: RouteSession, slot: int, mark: bytes, keep_done: bool = False) -> bool | None:
    """Did the step whose transaction sets ``mark`` (in ``slot``) run? Asked of the slot's
    master until the retry deadline; None: no answer. Either answer is final. The marker
    is then deleted, unless it says "done" and ``keep_done`` (a move's step 3: its journal
    entry goes first, ``journal.py``)."""
    s.router.topology.request_refresh("conn_lost")
    deadline = trio.current_time() + s.settings.retry_deadline_ms / 1000
    payload = crossslot.fate_payload(mark)
    while True:
        # Sent again after a lost reply: the GET then reads this check's own "given up".
        raw = await _on_owner(s, slot, payload, 1, False, partial(_direct, s))
        if raw == _DONE or raw == _GIVEN_UP or crossslot.is_null(raw):
            if not (keep_done and raw == _DONE):
                await drop_marker(s, slot, mark)
            return raw == _DONE
        if trio.current_time() >= deadline:
            return None
        await trio.sleep(_POLL_S)


async def drop_marker(s: RouteSession, slot: int, mark: bytes,
                      conn: DirectConnection | None = None) -> None:
    """The marker deleted once the step's fate is known (it would expire anyway)."""
    try:
        if conn is None:
            await _on_owner(s, slot, encode_command(b"DEL", mark), 1, False, partial(_direct, s))
        else:
            await roundtrip(s, conn, encode_command(b"DEL", mark), 1)
    except (OSError, BackendError, trio.TooSlowError):
        pass


async def _open(s: RouteSession, node: str) -> DirectConnection:
    return await DirectConnection.open(node, 2, s.settings, s.metrics)


async def _compare_and_write(s: RouteSession, slot: int, expected: dict[bytes, bytes | None],
                             changed: dict[bytes, Value], mark: bool) -> bool | None:
    """``changed`` written (``MULTI DEL RESTORE … EXEC``) if every key still holds its
    ``expected`` DUMP payload, under ``WATCH`` (and with a marker of its own when ``mark``,
    so a lost reply is resolved by ``fate``). True written, False a key differs, None no
    master or an error (try again)."""
    node = owner(s, slot)
    if node is None:
        return None
    keys = list(expected)
    m = crossslot.marker(slot) if mark else None
    try:
        conn = await _open(s, node)
    except (OSError, BackendError, trio.TooSlowError):
        return None
    try:
        watched = [*keys, m] if m is not None else keys
        frames = await roundtrip(s, conn, encode_command(b"WATCH", *watched) + b"".join(
            encode_command(b"DUMP", k) for k in keys), 1 + len(keys))
        try:
            now = crossslot.dumps([raw for _, raw in frames[1:]])
        except ValueError:
            return None  # -CLUSTERDOWN, -MOVED ...: not now
        if now != [expected[k] for k in keys]:
            return False
        payload, n = crossslot.commit_payload(changed, m)
        try:
            raw = (await roundtrip(s, conn, payload, n))[-1][1]
        except BackendError:
            if m is None:
                return None
            ran = await fate(s, slot, m)
            if ran is None:
                raise FateUnknown from None
            return ran or None  # not run: as if refused, try again
        if raw[:1] != b"*" or crossslot.is_null(raw):
            return None  # changed since the DUMP, or refused: look again
        if m is not None:
            await drop_marker(s, slot, m, conn)
        return True
    except BackendError:
        return None
    finally:
        with trio.CancelScope(shield=True):
            await conn.aclose()


async def compensate(s: RouteSession, u: Undo) -> bool | None:
    """Put ``u.key`` back as it was, if it still holds what the proxy wrote there (with a
    marker of its own: a lost reply is resolved, never guessed from the key's value, which
    another client may have brought back to the old one by taking the moved element). True
    put back, False changed since by someone else, None try again."""
    if u.before.payload == u.after:
        return True
    return await _compare_and_write(s, u.slot, {u.key: u.after}, {u.key: u.before}, True)


async def undo(s: RouteSession, todo: list[Undo]) -> bool | None:
    """Take back the writes in ``todo``, last first; those taken back leave the list. True
    all, False one was changed by someone else, None one could not be reached."""
    result: bool | None = True
    for u in list(reversed(todo)):
        got = await compensate(s, u)
        if got:
            todo.remove(u)
        elif result is True or got is False:
            result = got
    return result


async def settle(s: RouteSession, todo: list[Undo]) -> str:
    """A later write of a request did not run: take ``todo`` back (put back, or changed by
    someone else meanwhile: half done). Tried until the retry deadline."""
    deadline = trio.current_time() + s.settings.retry_deadline_ms / 1000
    while True:
        try:
            took_back = await undo(s, todo)
        except FateUnknown:
            return UNKNOWN
        if took_back:
            return UNDONE
        if took_back is False:
            return HALF
        if trio.current_time() >= deadline:
            return UNKNOWN
        await trio.sleep(_POLL_S)


async def write_marked(s: RouteSession, slot: int, op: bytes, *more: bytes) -> bool | None:
    """``op`` (one command; then ``more``, commands whose replies are not looked at) run on
    ``slot``'s master in a transaction with a marker of its own, sent until it runs or the
    retry deadline passes (a lost reply settled by the marker). True: it ran; False: it ran
    and failed (its error), or no master took it before the deadline; None: its fate is
    unknown."""
    deadline = trio.current_time() + s.settings.retry_deadline_ms / 1000
    while True:
        node = owner(s, slot)
        m = crossslot.marker(slot)
        payload = (encode_command(b"WATCH", m) + encode_command(b"MULTI")
                   + crossslot.set_marker(m) + op + b"".join(more) + encode_command(b"EXEC"))
        conn = None
        try:
            if node is not None:
                conn = await _open(s, node)
                raw = (await roundtrip(s, conn, payload, 5 + len(more)))[-1][1]
                if raw[:1] == b"*" and not crossslot.is_null(raw):
                    await drop_marker(s, slot, m, conn)
                    return array_elements(raw)[1][:1] not in (b"-", b"!")
        except (OSError, BackendError, trio.TooSlowError):
            if conn is not None:  # sent, reply lost: did it run?
                ran = await fate(s, slot, m)
                if ran is None or ran:
                    return ran
        finally:
            if conn is not None:
                with trio.CancelScope(shield=True):
                    await conn.aclose()
        if trio.current_time() >= deadline:
            return False
        await trio.sleep(_POLL_S)


def refused(raw: bytes) -> bytes:
    """A redirect on a watched connection ends the request: the client may try again."""
    if raw.startswith(_REDIRECTS):
        return error_frame(errors.CROSSSLOT_TRYAGAIN)
    return raw


async def after_write(s: RouteSession, slot: int, mark: bytes, wait: bool,
                      conn: DirectConnection | None = None, drop: bool = True) -> bool:
    """A step's marker deleted (unless not ``drop``: a move's step 3, whose journal entry
    goes first), once its reply is in; with ``wait``, first ``WAIT`` until a
    replica of the slot's master has the step (at most ``REPLICA_WAIT_MS``), so that this
    master failing now does not take the only copy of a moved element with it. No replica,
    or none in time: the move goes on (as any write acknowledged by one master). False: the
    master did not answer (it may have failed before a replica had the step: the caller asks
    the marker whether the step survived)."""
    node = owner(s, slot)
    payload, n = (encode_command(b"DEL", mark), 1) if drop else (b"", 0)
    if wait and node is not None and s.router.topology.slot_map.replicas.get(node):
        payload, n = encode_command(b"WAIT", b"1", b"%d" % REPLICA_WAIT_MS) + payload, n + 1
    if not n:
        return True
    try:
        if conn is None and node is not None:
            conn = await _direct(s, node)  # the connection step 2 ran on: WAIT is per connection
        if conn is not None:
            await roundtrip(s, conn, payload, n)
            return True
    except (OSError, BackendError, trio.TooSlowError):
        pass
    return False
