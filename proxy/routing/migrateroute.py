"""MIGRATE ... KEYS k1 k2 ... whose keys span slots: one MIGRATE per slot, replies merged.

A cluster node refuses a MIGRATE whose keys are in several slots (``CROSSSLOT``), even
when it serves them all. The proxy sends each slot's keys in a MIGRATE of their own to
that slot's master, with every option of the client's (``COPY``, ``REPLACE``, ``AUTH``,
``AUTH2``, the target, database and timeout), slots of one node one after another, nodes
in parallel, and answers as one server would: the first error of the parts (in the order
of their slots' first keys) if any failed, else ``+OK`` if any part moved a key, else
``+NOKEY``.

Not atomic across slots (MIGRATE of one server is not atomic either: keys move in one
batch, the source deletes them afterwards): a part that failed leaves the keys of the
parts that succeeded moved.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import trio

from slotgate.protocol.commands import CommandInfo, key_positions
from slotgate.protocol.resp import encode_command
from slotgate.protocol.slots import key_slot
from slotgate.proxy.backend.connections import DirectConnection
from slotgate.proxy.front.pinned import after_writes, write_on_owner

if TYPE_CHECKING:
    from slotgate.proxy.front.routes import RouteSession

_NOKEY = b"+NOKEY\r\n"
_OK = b"+OK\r\n"


def parts(argv: list[bytes]) -> list[tuple[int, list[bytes]]] | None:
    """Each slot's MIGRATE (its keys after ``KEYS``, the client's other arguments as they
    are), in the order of the slots' first keys; None unless ``KEYS`` spans slots."""
    positions = key_positions(argv)
    if len(positions) < 2 or positions[-1] != len(argv) - 1:
        return None
    head = argv[: positions[0]]
    by_slot: dict[int, list[bytes]] = {}
    for i in positions:
        by_slot.setdefault(key_slot(argv[i]), []).append(argv[i])
    if len(by_slot) < 2:
        return None
    return [(slot, [*head, *keys]) for slot, keys in by_slot.items()]


def merge(replies: list[bytes]) -> bytes:
    """One server's reply: the first error, else OK if any key moved, else NOKEY."""
    for raw in replies:
        if raw[:1] in (b"-", b"!"):
            return raw
    return _OK if any(raw == _OK for raw in replies) else _NOKEY


def route(s: RouteSession, argv: list[bytes], info: CommandInfo) -> Awaitable[None] | None:
    """MIGRATE across slots (``routes.single``'s, keys in several slots): None when the
    keys do not span slots through ``KEYS`` (the caller answers ``CROSSSLOT``)."""
    todo = parts(argv)
    if todo is None:
        return None
    s.last_write_slot = todo[0][0]
    return _run(s, todo, s.new_slot(info.name))


async def _run(s: RouteSession, todo: list[tuple[int, list[bytes]]],
               reply_slot: Callable[[bytes], None]) -> None:
    await s.wait_idle()
    replies = [b""] * len(todo)
    written: list[DirectConnection | None] = []
    by_node: dict[str | None, list[int]] = {}
    for n, (slot, _) in enumerate(todo):
        by_node.setdefault(s.router.topology.owners[slot], []).append(n)

    async def node_parts(indexes: list[int]) -> None:
        for n in indexes:
            slot, part = todo[n]
            replies[n] = await write_on_owner(s, slot, encode_command(*part), 1, written)

    async with trio.open_nursery() as nursery:
        for indexes in by_node.values():
            nursery.start_soon(node_parts, indexes)
    reply = merge(replies)
    if reply[:1] not in (b"-", b"!"):
        reply = await after_writes(s, written, reply)
    reply_slot(reply)
