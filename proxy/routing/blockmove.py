"""BLMOVE and BRPOPLPUSH whose source and destination are in different slots.

No element ever leaves the source except by the move of ``gather.py`` (destination first,
then the source under WATCH, with compensation), so a failure while waiting loses nothing:

1. check    on the source's master: ``MULTI``, the client's command over an empty temporary
            key of the source's slot (as source and destination), ``EXEC``. Inside a
            transaction it never blocks and changes nothing: its only answers are Redis' own
            argument errors (direction syntax, timeout) or null.
2. move     the non-blocking move (``LMOVE`` / ``RPOPLPUSH``) across slots, as ``gather.py``
            runs it. Anything but null (the element, ``WRONGTYPE`` of either key) is the
            client's reply.
3. wait     the source was empty: it is armed (``keywake.py``: read on the master's shared
            tracking connection), step 2 runs again, and then the move sleeps until the
            master says the source changed; then arm and step 2 again, until the timeout
            (the null reply). Step 2 finding the source changed under each of its tries
            (``MOVE_CONTENDED``) is tried again too, while the timeout lasts.

The wait changes nothing on the source and holds no connection of its own.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING

import trio

from slotgate.protocol.commands import CommandInfo
from slotgate.protocol.resp import encode_command
from slotgate.protocol.slots import key_slot
from slotgate.proxy import errors
from slotgate.proxy.front.pinned import _direct, _on_owner
from slotgate.proxy.routing import crossslot, gather, keywake
from slotgate.proxy.routing.crossslot import is_null
from slotgate.proxy.routing.redirect import error_frame
from slotgate.proxy.routing.splitter import array_elements

if TYPE_CHECKING:
    from slotgate.proxy.front.routes import RouteSession

HANDLED: frozenset[str] = frozenset({"blmove", "brpoplpush"})
_MULTI = encode_command(b"MULTI")
_EXEC = encode_command(b"EXEC")


def _check_key(slot: int) -> bytes:
    """A key of ``slot`` that never holds a value (the check's empty list)."""
    return b"{%s}%scheck" % (crossslot.tag_for_slot(slot), crossslot.TEMP_PREFIX)


def shapes(argv: list[bytes]) -> tuple[list[bytes], bytes, bytes]:
    """The non-blocking move, the end the source is popped at, and the timeout argument."""
    if len(argv) == 4:  # BRPOPLPUSH src dst timeout
        return [b"RPOPLPUSH", argv[1], argv[2]], b"RIGHT", argv[3]
    return [b"LMOVE", *argv[1:5]], argv[3], argv[5]


def route(s: RouteSession, argv: list[bytes], info: CommandInfo) -> Awaitable[None] | None:
    if info.name not in HANDLED or len(argv) not in (4, 6):
        return None
    return _run(s, argv, info.name, s.new_slot(info.name))


async def _run(s: RouteSession, argv: list[bytes], name: str,
               reply_slot: Callable[[bytes], None]) -> None:
    await s.wait_idle()
    reply_slot(await _serve(s, argv, name))


async def _serve(s: RouteSession, argv: list[bytes], name: str) -> bytes:
    started = trio.current_time()
    src = argv[1]
    slot = key_slot(src)
    check = _check_key(slot)
    payload = _MULTI + encode_command(argv[0], check, check, *argv[3:]) + _EXEC
    # It changes nothing: safe to send again after a lost connection.
    raw = await _on_owner(s, slot, payload, 3, True, partial(_direct, s))
    if raw[:1] != b"*" or is_null(raw):
        return raw  # the router's error, EXECABORT
    raw = array_elements(raw)[0]
    if not is_null(raw):
        return raw  # an argument error (the check key is always empty)
    move, _, timeout = shapes(argv)
    timeout_s = float(timeout)
    plan = crossslot.plan(move, crossslot.SPECS[move[0].decode().lower()])
    assert plan is not None  # the keys are in two slots
    contended = error_frame(errors.MOVE_CONTENDED.format(name=name))
    waiting = keywake.Waiting(s.proxy.keywake, [src])
    took: bytes | None = None
    try:
        while True:
            reply = await gather.run_plan(s, plan, False, name)
            if reply == contended:
                # The source changed under every try (pushes, other waiters): a blocking
                # move keeps trying while its timeout lasts.
                await trio.sleep(0.001)
                continue
            if not is_null(reply):
                took = src if reply[:1] == b"$" else None
                return reply
            left_s = math.inf
            if timeout_s > 0:
                left_s = timeout_s - (trio.current_time() - started)
                if left_s <= 0:
                    return b"_\r\n" if s.proto == 3 else b"*-1\r\n"
            await waiting.between_tries(left_s)
    finally:
        waiting.close(took)
