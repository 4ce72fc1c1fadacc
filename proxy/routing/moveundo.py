"""Moves across slots when a step's outcome is not the expected one: fate, undo, forward.

A move (``gather.py``) writes its destination (step 2), then its source (step 3), each in a
transaction that also sets a *marker* key of its slot (``crossslot.marker``), watched from
before it was sent. Whatever reply is lost, the proxy can tell afterwards whether the step
ran: ``fate`` sends ``SET marker 0 NX GET`` to the slot's master of now (after a failover,
the promoted replica, which has the marker exactly when it has the step: one transaction).
"done": it ran. Absent: it did not, and it never will, since that SET touched a key the
step's transaction watches. A step that did not run after step 2 did leaves the element in
both keys; ``settle`` then takes step 2 back (``undo``: the destination put back as it was,
if it still holds what step 2 left) or, if the destination was changed meanwhile, finishes
the move (``forward``: the source written as step 3 would have, if it still holds what step
1 read), trying both until the retry deadline.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

import trio

from slotgate.protocol.resp import encode_command
from slotgate.protocol.slots import key_slot
from slotgate.proxy.backend.connections import BackendError, DirectConnection
from slotgate.proxy.front.pinned import _direct, _on_owner
from slotgate.proxy.routing import crossslot
from slotgate.proxy.routing.crossslot import Undo, Value
from slotgate.proxy.routing.splitter import array_elements

if TYPE_CHECKING:
    from slotgate.proxy.front.routes import RouteSession

_DONE = b"$1\r\n" + crossslot.MARK_DONE + b"\r\n"
_GIVEN_UP = b"$1\r\n" + crossslot.MARK_GIVEN_UP + b"\r\n"
_POLL_S = 0.1

class FateUnknown(Exception):
    """A write of settling lost its reply and no master told its fate in time."""


# What ``settle`` did.
UNDONE = "undone"  # step 2 taken back: nothing changed
FORWARD = "forward"  # the source written: the move is done
HALF = "half"  # both keys changed by others meanwhile: neither could be
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


async def fate(s: RouteSession, slot: int, mark: bytes) -> bool | None:
    """Did the step whose transaction sets ``mark`` (in ``slot``) run? Asked of the slot's
    master until the retry deadline; None: no answer. Either answer is final."""
    s.router.topology.request_refresh("conn_lost")
    deadline = trio.current_time() + s.settings.retry_deadline_ms / 1000
    payload = crossslot.fate_payload(mark)
    while True:
        # Sent again after a lost reply: the GET then reads this check's own "given up".
        raw = await _on_owner(s, slot, payload, 1, False, partial(_direct, s))
        if raw == _DONE or raw == _GIVEN_UP or crossslot.is_null(raw):
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


async def forward(s: RouteSession, old: dict[bytes, Value],
                  new: dict[bytes, Value]) -> bool | None:
    """Step 3 done again on a connection of its own: the keys (one slot) written as ``new``
    if they still hold ``old`` (what step 1 read). True written, False changed, None not
    now."""
    slot = key_slot(next(iter(new)))
    return await _compare_and_write(s, slot, {k: old[k].payload for k in new}, new, True)


async def settle(s: RouteSession, todo: list[Undo], old: dict[bytes, Value] | None,
                 new: dict[bytes, Value]) -> str:
    """Step 2 ran, the write of ``new`` (one slot's sources) did not: take ``todo`` back,
    or, when that cannot be (and ``old`` is given), write ``new`` after all. Tried until
    the retry deadline."""
    deadline = trio.current_time() + s.settings.retry_deadline_ms / 1000
    while True:
        try:
            took_back, went_on = await _settle_once(s, todo, old, new)
        except FateUnknown:
            return UNKNOWN
        if took_back:
            return UNDONE
        if went_on:
            return FORWARD
        if took_back is False and (went_on is False or old is None):
            return HALF
        if trio.current_time() >= deadline:
            return UNKNOWN
        await trio.sleep(_POLL_S)


async def _settle_once(s: RouteSession, todo: list[Undo], old: dict[bytes, Value] | None,
                       new: dict[bytes, Value]) -> tuple[bool | None, bool | None]:
    """One try: (put back?, finished?), each True, False (a key changed by someone else)
    or None (not now)."""
    took_back = await undo(s, todo)
    if took_back:
        return True, None
    # Finishing is tried only when the destination is known not to be put back (never
    # after a put-back whose fate is not known: both would lose the element).
    went_on = await forward(s, old, new) if old is not None and took_back is False else None
    return took_back, went_on
