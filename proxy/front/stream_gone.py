"""A blocked XREADGROUP whose stream left its node in a slot migration: follow the stream.

When MIGRATE moves a stream away, Redis 7.0 ends the XREADGROUP clients blocked on it with
``-UNBLOCKED the stream key no longer exists`` (the key was deleted on that node), before the
slot is even reassigned: no MOVED ever reaches them. A client of the proxy would see a
slot move as an error. So, on that reply, the proxy asks the same node ``EXISTS`` of the
command's keys: an ASK, MOVED or TRYAGAIN answer means the keys' slot is migrating or gone, and
the command runs again on the slot's owner through the redirect loop (with its whole BLOCK
time again); any other answer means the key really went (DEL, overwrite) and the client gets
the node's error, as it would from Redis.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from slotgate.protocol.commands import key_positions
from slotgate.protocol.resp import encode_command
from slotgate.proxy.backend.connections import BackendError, DirectConnection

KEY_GONE = b"-UNBLOCKED the stream key no longer exists\r\n"
# Error prefixes of a node that no longer serves the keys' slot alone.
_MIGRATION = (b"-ASK ", b"-MOVED ", b"-TRYAGAIN")


def key_left_in_migration(argv: list[bytes], reply: bytes) -> bool:
    """Whether ``reply`` to ``argv`` is the one a slot migration may have caused."""
    return reply == KEY_GONE and argv[0].upper() == b"XREADGROUP"


async def slot_migrating(conn: Callable[[], Awaitable[DirectConnection]],
                         argv: list[bytes]) -> bool:
    """Whether the node behind ``conn`` redirects ``argv``'s keys elsewhere now."""
    keys = [argv[p] for p in key_positions(argv)]
    try:
        frames = await (await conn()).roundtrip(encode_command(b"EXISTS", *keys), 1)
    except (BackendError, OSError):
        return True  # the node is gone: the redirect loop finds the slot's owner
    return frames[0][1].startswith(_MIGRATION)
