"""SCRIPT KILL and FUNCTION KILL: sent to every master on a connection of their own.

A master running a long script answers nothing on the shared connection that carries the
script, and ``-BUSY`` to the requests queued on the others; a kill queued there would wait
for the script it is meant to end. So each master gets the kill on a fresh control
connection (``DirectConnection``), all at once, and the replies merge as one server's:

    any master killed its script (+OK)          -> +OK
    else any master answered -UNKILLABLE        -> that error (a writing script)
    else any other error (a master unreachable) -> that error
    else (every master -NOTBUSY)                -> -NOTBUSY
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import hiredis
import trio

from slotgate.protocol.commands import CommandInfo
from slotgate.proxy import errors
from slotgate.proxy.backend.connections import BackendError, DirectConnection
from slotgate.proxy.routing.redirect import error_frame

if TYPE_CHECKING:
    from slotgate.proxy.front.routes import RouteSession as Session
    from slotgate.proxy.front.session import ReplySlot

pack_command: Callable[[tuple[bytes, ...]], bytes] = hiredis.pack_command  # type: ignore[assignment]
CLUSTER_DOWN = error_frame("CLUSTERDOWN The cluster is down")
_NOTBUSY = b"-NOTBUSY"
_UNKILLABLE = b"-UNKILLABLE"


def merge_kill(replies: Sequence[bytes]) -> bytes:
    """Every master's reply to the kill merged as one server's (the module's table)."""
    for r in replies:
        if r[:1] not in (b"-", b"!"):
            return r
    for r in replies:
        if r.startswith(_UNKILLABLE):
            return r
    for r in replies:
        if not r.startswith(_NOTBUSY):
            return r
    return replies[0]


async def _kill_on(s: Session, node: str, payload: bytes, proto: int) -> bytes:
    """One master's reply to the kill on a connection of its own, or the unreachable error."""
    settings = s.settings
    unreachable = error_frame(errors.NODE_UNREACHABLE.format(node=node))
    conn: DirectConnection | None = None
    with trio.move_on_after((settings.connect_timeout_ms + settings.command_timeout_ms) / 1000):
        try:
            conn = await DirectConnection.open(node, proto, settings, s.metrics)
            return (await conn.roundtrip(payload, 1))[0][1]
        except (BackendError, OSError, trio.TooSlowError, trio.BrokenResourceError):
            return unreachable
        finally:
            if conn is not None:
                with trio.CancelScope(shield=True):
                    await conn.aclose()
    return unreachable


async def _kill_all(s: Session, slot: ReplySlot, masters: list[str], payload: bytes) -> None:
    replies = [b""] * len(masters)

    async def one(i: int, node: str) -> None:
        replies[i] = await _kill_on(s, node, payload, s.proto)

    async with trio.open_nursery() as nursery:
        for i, node in enumerate(masters):
            nursery.start_soon(one, i, node)
    slot(merge_kill(replies))
    s.router.pool.after_batch()


def kill(s: Session, argv: list[bytes], info: CommandInfo) -> None:
    """SCRIPT KILL / FUNCTION KILL (the ``one_ok`` fan-out rows)."""
    slot = s.new_slot(info.name)
    masters = list(s.router.topology.slot_map.masters)
    if not masters:
        slot(CLUSTER_DOWN)
        return
    s.metrics.fanout(len(masters))
    s.router.nursery.start_soon(_kill_all, s, slot, masters, pack_command(tuple(argv)))
