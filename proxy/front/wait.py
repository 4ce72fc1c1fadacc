"""WAIT through the proxy: the count means "replicas that have this client's writes".

A master's WAIT counts the replicas that acknowledged the offset where the asking
connection's previous command ended (Redis' ``c->woff``). The proxy's shared node connections
carry every client's commands, so a WAIT there would measure nothing of this client's. So:

    the session remembers the slot of its last write (``Session.last_write_slot``)
    WAIT n t ─▶ after the client's earlier replies, on the client's own connection to that
               slot's master (the one its blocking commands use):
                   FUNCTION RESTORE <empty payload> APPEND   (replicated, changes nothing:
                                                             the connection's offset is now
                                                             the master's, past the write)
                   WAIT n t                                  ─▶ the client's reply
    no write yet ─▶ nothing to wait for: the replicas of the master of the client's keyless
               commands (the slot map's, online ones), at once, as a server answers a client
               with no pending write; asked for more than that, the plain WAIT n t on that
               master, which answers when its timeout ends (the node parses the arguments
               too, and answers their errors).

WAIT waits as a blocking command does: the client counts in ``blocked_clients``, CLIENT
UNBLOCK ends it, a client that goes away cancels it. A write that reached several masters
(MSET across slots, FLUSHALL) is waited for on one of them only (docs/COMMANDS.md).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING

from slotgate.protocol.commands import CommandInfo
from slotgate.protocol.resp import encode_command, integer, string2ll
from slotgate.proxy.front import pinned

if TYPE_CHECKING:
    from slotgate.proxy.front.routes import RouteSession as Session

# FUNCTION DUMP of a server with no libraries (Redis 7.0: RDB version 10 and the CRC64 of
# nothing): restoring it with APPEND adds nothing, and the master still replicates it.
EMPTY_FUNCTION_DUMP = bytes.fromhex("0a005d9b5c400f7fa2da")
TOUCH = encode_command(b"FUNCTION", b"RESTORE", EMPTY_FUNCTION_DUMP, b"APPEND")
NO_WRITE = -1


def route(s: Session, argv: list[bytes], info: CommandInfo) -> Awaitable[None] | None:
    slot = s.last_write_slot
    if slot != NO_WRITE:
        return pinned.blocking(s, argv, info, slot, TOUCH)
    want, timeout_ms = string2ll(argv[1]), string2ll(argv[2])
    master = s.router.topology.owners[s.any_slot]
    if master is not None and want is not None and timeout_ms is not None and timeout_ms >= 0:
        replicas = len(s.router.topology.slot_map.replicas.get(master, ()))
        if want <= replicas:
            s.reply(info.name, integer(replicas))
            return None
    return pinned.blocking(s, argv, info, s.any_slot)
