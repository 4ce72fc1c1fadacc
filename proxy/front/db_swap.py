"""Numbered databases (``databases: N``): SWAPDB, atomic as the proxy's clients see it.

The nodes have database 0 only: SWAPDB a b renames every key of both databases, per key one
MULTI/RENAME…/EXEC in its slot. So that no client of the proxy sees some keys swapped and
others not, the swap holds the other clients while it runs::

    SWAPDB a b ─▶ Swaps.lock (one swap at a time in this process) and, with workers, the
                  cluster lock ``SWAP_LOCK`` (movelock.py: one at a time over every worker)
               ─▶ dbs = {a, b}: every session leaves its fast routes; a request of another
                  client in database a or b (or one that may reach another database: EXEC,
                  MOVE, COPY, SWAPDB, FLUSHALL) waits in ``check`` until the swap ends
               ─▶ with workers, ``SWAPHOLD a b`` to the others (front/siblings.py): each
                  holds its clients the same way and answers once it does
               ─▶ the requests of those clients already on their way are answered first
                  (a blocked command excepted: it stays blocked, and is served by the
                  renames as Redis serves it after its SWAPDB), at most ``DRAIN_S``
               ─▶ the keys of both databases listed, renamed per key ─▶ dbs cleared
                  (``SWAPEND`` to the other workers), the held requests dispatched in order

What holds: through the proxy (every worker), every request of another client in either
database runs wholly before or wholly after the swap. A client blocked on a key of one
database (BLPOP & co. in its slot) is served when a list of the other database lands on its
key's stored name, as Redis wakes it (the node wakes it on the RENAME). The swap runs to its
end if its client goes away. What does not: clients of the nodes themselves and of other
proxies are not held: they may see a key of either database swapped while another is not
yet, each key itself always swapped atomically (its two stored names change in one
transaction); a key they create meanwhile stays where it was. Another worker holds its
clients ``PEER_HOLD_S`` at most (the cluster lock's own life): a longer swap, or a swapping
worker that dies, lets them go then. A worker that does not answer ``SWAPHOLD`` within the
question's timeout (siblings.py) is not waited for.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import trio

from slotgate.protocol.commands import lookup
from slotgate.protocol.resp import encode_command
from slotgate.protocol.slots import key_slot
from slotgate.proxy import errors
from slotgate.proxy.backend.connections import DirectConnection
from slotgate.proxy.front.db_names import prefixed
from slotgate.proxy.front.pinned import after_writes, write_on_owner
from slotgate.proxy.routing import movelock
from slotgate.proxy.routing.crossslot import tag_for_slot
from slotgate.proxy.routing.redirect import error_frame

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
# With workers: the cluster lock that runs one swap at a time over every worker, and how long
# another worker holds its clients at most (the lock's own life).
SWAP_LOCK = b"slotgate-swapdb"
PEER_HOLD_S = movelock.LOCK_TTL_MS / 1000
_OWN_NAME = re.compile(rb"\A\{[0-9a-f]+\}slotgate-")
_DRAIN_POLL_S = 0.001


class Swaps:
    """The SWAPDB running in this proxy process, if any: its databases and who runs it
    (None: another worker's swap, held here too)."""

    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy
        self.dbs: frozenset[int] = frozenset()  # empty while no swap runs
        self.owner: object | None = None
        self.ended = trio.Event()  # set (then replaced) when a swap ends
        self.peer_ended = trio.Event()  # set (then replaced) when another worker's swap ends
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


async def _drain(proxy: Proxy, owner: object | None, dbs: frozenset[int]) -> None:
    """Until the other clients in ``dbs`` have every request on its way answered (a
    blocked command excepted), at most ``DRAIN_S``."""
    # Polled: a session's progress event has one waiter already (its own task).
    with trio.move_on_after(DRAIN_S):
        while _in_flight(proxy, owner, dbs):  # noqa: ASYNC110
            await trio.sleep(_DRAIN_POLL_S)


def _in_flight(proxy: Proxy, owner: object | None, dbs: frozenset[int]) -> bool:
    return any(o is not owner and o.db in dbs and o.unfilled > 0 and o.tx.blocked is None
               for o in proxy.sessions)


async def swap(s: RouteSession, a: int, b: int, all_keys: AllKeys) -> bytes:
    """SWAPDB a b (valid and different databases), the other clients held: the reply."""
    swaps, siblings = s.proxy.swaps, s.proxy.siblings
    dbs = frozenset((a, b))
    try:
        async with swaps.lock, movelock.held(s, [SWAP_LOCK]):
            swaps.start(s, dbs)
            try:
                # Shielded: a client that goes away mid-swap leaves no half-swapped databases.
                with trio.CancelScope(shield=True):
                    if siblings is not None:  # they answer once they hold their clients
                        await siblings.ask_all([b"SWAPHOLD", b"%d" % a, b"%d" % b])
                    await _drain(s.proxy, s, dbs)
                    reply = await _swap_keys(s, a, b, all_keys)
                return reply
            finally:
                swaps.end()
                if siblings is not None:
                    siblings.ask([b"SWAPEND"], _ignored)
    except movelock.Contended:
        return error_frame(errors.MOVE_CONTENDED.format(name="swapdb"))


def _ignored(answers: list[bytes]) -> None:
    pass


def asked_hold(proxy: Proxy, args: list[bytes], answer: Callable[[list[bytes]], None]) -> None:
    """Another worker's SWAPDB: this worker's clients of both databases held until it ends
    (``SWAPEND``), at most ``PEER_HOLD_S``; answered once they are."""
    if len(args) != 2 or not all(a.isdigit() for a in args):
        answer([])
        return
    proxy.router.nursery.start_soon(_hold_for_peer, proxy, frozenset(int(a) for a in args),
                                    answer)


async def _hold_for_peer(proxy: Proxy, dbs: frozenset[int],
                         answer: Callable[[list[bytes]], None]) -> None:
    swaps = proxy.swaps
    swaps.start(None, dbs)
    try:
        await _drain(proxy, None, dbs)
        answer([])
        with trio.move_on_after(PEER_HOLD_S):
            await swaps.peer_ended.wait()
    finally:
        swaps.end()


def asked_end(proxy: Proxy, args: list[bytes]) -> list[bytes]:
    swaps = proxy.swaps
    swaps.peer_ended.set()
    swaps.peer_ended = trio.Event()
    return []


async def _swap_keys(s: RouteSession, a: int, b: int, all_keys: AllKeys) -> bytes:
    """Per key of either database, in its slot, one MULTI, the RENAMEs that swap it, EXEC."""
    keys_a = await all_keys(s, a)
    if isinstance(keys_a, bytes):
        return keys_a
    keys_b = await all_keys(s, b)
    if isinstance(keys_b, bytes):
        return keys_b
    # Database 0's names of the proxy's own (locks, temporaries of moves under way) stay.
    in_a, in_b = ({k for k in ks if db or not _OWN_NAME.match(k)}
                  for db, ks in ((a, keys_a), (b, keys_b)))
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
