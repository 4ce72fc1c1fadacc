"""Numbered databases (``databases: N``): SWAPDB, atomic as this proxy's clients see it.

The nodes have database 0 only: SWAPDB a b renames every key of both databases, per key one
MULTI/RENAME…/EXEC in its slot. So that no client of this proxy sees some keys swapped and
others not, the swap holds the other clients while it runs::

    SWAPDB a b ─▶ Swaps.lock (one swap at a time in this process)
               ─▶ dbs = {a, b}: every session leaves its fast routes; a request of another
                  client in database a or b (or one that may reach another database: EXEC,
                  MOVE, COPY, SWAPDB, FLUSHALL) waits in ``check`` until the swap ends
               ─▶ the requests of those clients already on their way are answered first
                  (a blocked command excepted: it stays blocked, and is served by the
                  renames as Redis serves it after its SWAPDB), at most ``DRAIN_S``
               ─▶ the keys of both databases listed, renamed per key ─▶ dbs cleared, the
                  held requests dispatched in order

What holds: through this proxy process, every request of another client in either database
runs wholly before or wholly after the swap. A client blocked on a key of one database
(BLPOP & co. in its slot) is served when a list of the other database lands on its key's
stored name, as Redis wakes it (the node wakes it on the RENAME). What does not: clients of
the nodes themselves, of other proxies, and with ``workers: N`` of the other workers are not
held (each worker holds its own clients only): they may see a key of either database
swapped while another is not yet, each key itself always swapped atomically (its two
stored names change in one transaction); a request of theirs that lands between the
listing and the renames is swapped or not (a key created meanwhile stays where it was).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import trio

from slotgate.protocol.commands import lookup
from slotgate.protocol.resp import encode_command
from slotgate.protocol.slots import key_slot
from slotgate.proxy.backend.connections import DirectConnection
from slotgate.proxy.front.db_names import prefixed
from slotgate.proxy.front.pinned import after_writes, write_on_owner
from slotgate.proxy.routing.crossslot import tag_for_slot

if TYPE_CHECKING:
    from slotgate.proxy.front.routes import RouteSession
    from slotgate.proxy.front.server import Proxy
    from slotgate.proxy.front.session import Session

# A database's key names (KEYS on every master), or the error that ended the listing.
AllKeys = Callable[["RouteSession", int], Awaitable["list[bytes] | bytes"]]
_SWAP = b"slotgate-swapdb:"
_OK = b"+OK\r\n"
# Requests that may reach another database than the client's: held during any swap.
_ANY_DB = frozenset({"exec", "move", "copy", "swapdb", "flushall"})
DRAIN_S = 1.0  # at most this long for requests already on their way when a swap starts
_DRAIN_POLL_S = 0.001


class Swaps:
    """The SWAPDB running in this proxy process, if any: its databases and who runs it."""

    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy
        self.dbs: frozenset[int] = frozenset()  # empty while no swap runs
        self.owner: object | None = None
        self.ended = trio.Event()  # set (then replaced) when a swap ends
        self.lock = trio.Lock()

    def holds(self, s: RouteSession, argv: list[bytes]) -> bool:
        """Whether a swap holds this request of ``s`` now."""
        if not self.dbs or s is self.owner:
            return False
        if s.db in self.dbs or (s.tx.queued is not None and s.tx.db in self.dbs):
            return True
        info = lookup(argv)
        return info is not None and info.name in _ANY_DB

    def _derive(self) -> None:
        for s in self.proxy.sessions:
            s.set_db(s.db)  # fast routes off while a swap runs, on again after

    def start(self, owner: object, dbs: frozenset[int]) -> None:
        self.owner, self.dbs = owner, dbs
        self._derive()

    def end(self) -> None:
        self.owner, self.dbs = None, frozenset()
        self._derive()
        self.ended.set()
        self.ended = trio.Event()


async def _held(s: Session, argv: list[bytes]) -> None:
    swaps = s.proxy.swaps
    while swaps.holds(s, argv):
        await swaps.ended.wait()
    pending = s.dispatch(argv)
    if pending is not None:
        await pending


def check(s: Session, argv: list[bytes]) -> Awaitable[None] | None:
    """While a swap runs: the request waits for its end if the swap holds it."""
    if not s.proxy.swaps.holds(s, argv):
        return None
    return _held(s, argv)


async def _drain(s: RouteSession, dbs: frozenset[int]) -> None:
    """Until the other clients in ``dbs`` have every request on its way answered (a
    blocked command excepted), at most ``DRAIN_S``."""
    # Polled: a session's progress event has one waiter already (its own task).
    with trio.move_on_after(DRAIN_S):
        while _in_flight(s, dbs):  # noqa: ASYNC110
            await trio.sleep(_DRAIN_POLL_S)


def _in_flight(s: RouteSession, dbs: frozenset[int]) -> bool:
    return any(o is not s and o.db in dbs and o.unfilled > 0 and o.tx.blocked is None
               for o in s.proxy.sessions)


async def swap(s: RouteSession, a: int, b: int, all_keys: AllKeys) -> bytes:
    """SWAPDB a b (valid and different databases), the other clients held: the reply."""
    swaps = s.proxy.swaps
    async with swaps.lock:
        dbs = frozenset((a, b))
        swaps.start(s, dbs)
        try:
            # Shielded: a client that goes away mid-swap leaves no half-swapped databases.
            with trio.CancelScope(shield=True):
                await _drain(s, dbs)
                reply = await _swap_keys(s, a, b, all_keys)
            return reply
        finally:
            swaps.end()


async def _swap_keys(s: RouteSession, a: int, b: int, all_keys: AllKeys) -> bytes:
    """Per key of either database, in its slot, one MULTI, the RENAMEs that swap it, EXEC."""
    keys_a = await all_keys(s, a)
    if isinstance(keys_a, bytes):
        return keys_a
    keys_b = await all_keys(s, b)
    if isinstance(keys_b, bytes):
        return keys_b
    in_a, in_b = set(keys_a), set(keys_b)
    written: list[DirectConnection | None] = []
    for key in sorted(in_a | in_b):
        pa, pb = prefixed(key, a), prefixed(key, b)
        if key in in_a and key in in_b:
            tmp = b"{%s}%s%s" % (tag_for_slot(key_slot(key)), _SWAP, key)
            cmds = [(pa, tmp), (pb, pa), (tmp, pb)]
        elif key in in_a:
            cmds = [(pa, pb)]
        else:
            cmds = [(pb, pa)]
        payload = (encode_command(b"MULTI")
                   + b"".join(encode_command(b"RENAME", x, y) for x, y in cmds)
                   + encode_command(b"EXEC"))
        raw = await write_on_owner(s, key_slot(key), payload, len(cmds) + 2, written)
        if raw[:1] == b"-":
            return raw
    return await after_writes(s, written, _OK)
