"""Pops over keys in several slots: BLPOP, BRPOP, BZPOPMIN, BZPOPMAX, BLMPOP, BZMPOP, and the
non-blocking LMPOP and ZMPOP (step 1 only). BLMOVE/BRPOPLPUSH (``blockmove.py``) and XREAD/
XREADGROUP (``xreadmulti.py``) across slots are routed from here too.

Two steps (docs/COMMANDS.md, "Blocking pops across slots"):

1. A non-blocking try in Redis' key order: each run of consecutive keys in one slot is sent as
   ``MULTI; <the command over those keys>; EXEC`` to the slot's master (inside MULTI a
   blocking pop never blocks: it pops or answers null, with Redis' own errors and replies).
   The first run that answers anything but null is the client's reply.
2. Nothing anywhere: the command over each slot's keys waits on a connection of its own to
   that slot's master, all at once, with what is left of the client's timeout. The first
   reply that is not null wins (if several are in, the earliest key's); every other
   connection is ended by ``CLIENT UNBLOCK <id>`` from a control connection, and a node that
   had popped meanwhile gets its elements pushed back to the end they came from (LPUSH/RPUSH
   in reverse order, ZADD with their scores). All null: the client gets the null.

A client that goes away while waiting unblocks every connection the same way, and whatever was
popped is pushed back.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, NamedTuple

import trio

from slotgate.protocol.commands import CommandInfo
from slotgate.protocol.resp import encode_command
from slotgate.protocol.slots import key_slot
from slotgate.proxy.backend.connections import BackendError, DirectConnection
from slotgate.proxy.front.pinned import _direct, after_writes, on_owner_at
from slotgate.proxy.routing.crossslot import is_null
from slotgate.proxy.routing.redirect import error_frame
from slotgate.proxy.routing.splitter import array_elements

if TYPE_CHECKING:
    from slotgate.proxy.front.routes import RouteSession

SLOT_NOT_SERVED = "CLUSTERDOWN Hash slot not served"
# Where the timeout is, for the commands whose keys come first.
_KEYS_FIRST = frozenset({"blpop", "brpop", "bzpopmin", "bzpopmax"})
# The non-blocking pops over several keys: no timeout, the first key with data wins.
NON_BLOCKING = frozenset({"lmpop", "zmpop"})
HANDLED = _KEYS_FIRST | {"blmpop", "bzmpop"} | NON_BLOCKING
_MULTI = encode_command(b"MULTI")
_EXEC = encode_command(b"EXEC")
_CLIENT_ID = encode_command(b"CLIENT", b"ID")


class Parsed(NamedTuple):
    """A command cut around its keys: ``build(keys)`` is the same command over ``keys``."""

    name: str
    keys: list[bytes]
    timeout: bytes
    head: list[bytes]
    tail: list[bytes]


def parse(argv: list[bytes], name: str) -> Parsed | None:
    """None when the command is malformed (the node then answers its error)."""
    if name in _KEYS_FIRST:
        return Parsed(name, argv[1:-1], argv[-1], [argv[0]], [])
    first = 1 if name in NON_BLOCKING else 2  # where numkeys is
    try:
        numkeys = int(argv[first])
    except (ValueError, IndexError):
        return None
    if numkeys <= 0 or first + 1 + numkeys > len(argv):
        return None
    keys_at = first + 1
    return Parsed(name, argv[keys_at:keys_at + numkeys], argv[1] if first == 2 else b"",
                  [argv[0]], argv[keys_at + numkeys:])


def build(p: Parsed, keys: list[bytes], timeout: bytes) -> list[bytes]:
    if p.name in _KEYS_FIRST:
        return [*p.head, *keys, timeout]
    if p.name in NON_BLOCKING:
        return [*p.head, b"%d" % len(keys), *keys, *p.tail]
    return [*p.head, timeout, b"%d" % len(keys), *keys, *p.tail]


def runs(keys: list[bytes]) -> list[tuple[int, list[bytes]]]:
    """Consecutive keys of one slot, in order: (slot, keys)."""
    out: list[tuple[int, list[bytes]]] = []
    for key in keys:
        slot = key_slot(key)
        if out and out[-1][0] == slot:
            out[-1][1].append(key)
        else:
            out.append((slot, [key]))
    return out


def by_slot(keys: list[bytes]) -> list[tuple[int, list[bytes]]]:
    """Every slot's keys in their order, slots by their first key."""
    groups: dict[int, list[bytes]] = {}
    for key in keys:
        groups.setdefault(key_slot(key), []).append(key)
    return list(groups.items())


def _text(raw: bytes) -> bytes:
    """A bulk string's or a double's bytes."""
    if raw[:1] == b"$":
        return raw[raw.index(b"\r\n") + 2:-2]
    return raw[1:-2]


def push_back(name: str, raw: bytes, argv: list[bytes]) -> bytes | None:
    """The command that puts back what ``raw`` (a pop's reply) took; None if nothing."""
    if raw[:1] not in (b"*", b">") or is_null(raw):
        return None
    elems = array_elements(raw)
    key = _text(elems[0])
    if name in ("blpop", "brpop"):
        return encode_command(b"LPUSH" if name == "blpop" else b"RPUSH", key, _text(elems[1]))
    if name in ("bzpopmin", "bzpopmax"):
        return encode_command(b"ZADD", key, _text(elems[2]), _text(elems[1]))
    items = array_elements(elems[1])
    if name == "blmpop":
        where = b"LPUSH" if b"left" in (a.lower() for a in argv) else b"RPUSH"
        return encode_command(where, key, *reversed([_text(e) for e in items]))
    pairs = [array_elements(e) for e in items]
    return encode_command(b"ZADD", key, *[x for m, sc in pairs for x in (_text(sc), _text(m))])


def route(s: RouteSession, argv: list[bytes], info: CommandInfo) -> Awaitable[None] | None:
    """A pop whose keys span slots; None when it is not one of ours (the caller answers
    CROSSSLOT)."""
    if info.name not in HANDLED:
        return None
    p = parse(argv, info.name)
    if p is None:
        return None
    return _run(s, p, argv, s.new_slot(info.name))


async def _run(s: RouteSession, p: Parsed, argv: list[bytes],
               reply_slot: Callable[[bytes], None]) -> None:
    await s.wait_idle()
    started = trio.current_time()
    for slot, keys in runs(p.keys):
        payload = _MULTI + encode_command(*build(p, keys, p.timeout)) + _EXEC
        raw, node = await on_owner_at(s, slot, payload, 3, False, partial(_direct, s))
        if raw[:1] == b"*" and not is_null(raw):
            raw = array_elements(raw)[0]
        if not is_null(raw):
            reply_slot(await after_writes(s, [s.tx.direct.get(node)], raw))  # popped there
            return
    if p.name in NON_BLOCKING:
        reply_slot(raw)  # every key empty: the node's null
        return
    # Every key was empty: wait on all of them with what is left of the timeout (its syntax
    # was checked by the nodes in step 1).
    timeout_s = float(p.timeout)
    left = b"0"
    if timeout_s > 0:
        left = b"%.3f" % max(timeout_s - (trio.current_time() - started), 0.001)
    reply_slot(await _wait(s, p, argv, left))


class Waiter:
    """One slot's blocking command on a connection of its own."""

    __slots__ = ("node", "conn", "client_id", "payload", "reply", "done")

    def __init__(self, node: str, payload: bytes) -> None:
        self.node = node
        self.conn: DirectConnection | None = None
        self.client_id = 0
        self.payload = payload
        self.reply: bytes | None = None
        self.done = False


# Makes the client's reply from the raced waiters and the winner (None: all null), while
# their connections are still open.
Settle = Callable[[list[Waiter], Waiter | None], Awaitable[bytes]]


async def wait_each(s: RouteSession, parts: list[tuple[int, bytes]], settle: Settle) -> bytes:
    """Each ``(slot, payload)`` sent on a connection of its own to the slot's master, all at
    once (``race``); the reply is ``settle``'s."""
    waiters: list[Waiter] = []
    for slot, payload in parts:
        node = s.router.topology.owners[slot]
        if node is None:
            return error_frame(SLOT_NOT_SERVED)
        waiters.append(Waiter(node, payload))
    try:
        for w in waiters:
            try:
                await open_waiter(s, w)
            except (BackendError, OSError) as exc:
                return error_frame(f"ERR slotgate: {exc}")
        return await settle(waiters, await race(s, waiters))
    finally:
        for w in waiters:
            if w.conn is not None:
                await w.conn.aclose()


async def _wait(s: RouteSession, p: Parsed, argv: list[bytes], left: bytes) -> bytes:
    parts = [(slot, encode_command(*build(p, keys, left))) for slot, keys in by_slot(p.keys)]
    return await wait_each(s, parts, partial(_settle, s, p, argv))


async def open_waiter(s: RouteSession, w: Waiter) -> None:
    w.conn = await DirectConnection.open(w.node, s.proto, s.settings, s.metrics)
    raw = (await w.conn.roundtrip(_CLIENT_ID, 1))[0][1]
    w.client_id = int(raw[1:-2])


async def _settle(s: RouteSession, p: Parsed, argv: list[bytes], waiters: list[Waiter],
                  winner: Waiter | None) -> bytes:
    """The winner's pop is the reply; every other pop is pushed back."""
    with trio.CancelScope(shield=True):
        await _push_back(s, p, argv, [w for w in waiters if w is not winner])
    if winner is not None:
        assert winner.reply is not None
        return await after_writes(s, [winner.conn], winner.reply)  # popped there
    return waiters[0].reply or (b"_\r\n" if s.proto == 3 else b"*-1\r\n")


async def race(s: RouteSession, waiters: list[Waiter]) -> Waiter | None:
    """Every waiter's command at once, until the first reply that is not null (then every
    other one is ended) or until all are null. The winner (None: all null); every waiter's
    ``reply`` is then set, unless its connection was closed (``reply`` None)."""
    first, all_done = trio.Event(), trio.Event()

    async def wait_one(w: Waiter) -> None:
        assert w.conn is not None
        with trio.CancelScope(shield=True):  # ended by CLIENT UNBLOCK, not by cancellation
            try:
                reply = (await w.conn.roundtrip(w.payload, 1))[0][1]
            except BackendError as exc:
                reply = error_frame(f"ERR slotgate: {exc}")
        w.reply = reply
        w.done = True
        if all(x.done for x in waiters):
            all_done.set()
            first.set()
        elif not is_null(reply):
            first.set()

    winner: Waiter | None = None
    async with trio.open_nursery() as nursery:
        for w in waiters:
            nursery.start_soon(wait_one, w)
        try:
            await first.wait()
            winner = next((w for w in waiters if w.reply is not None and not is_null(w.reply)),
                          None)
        finally:
            with trio.CancelScope(shield=True):
                await _end_others(s, waiters, all_done)
    return winner


async def _end_others(s: RouteSession, waiters: list[Waiter], all_done: trio.Event) -> None:
    """CLIENT UNBLOCK every connection still waiting, then wait for its reply (bounded: past
    ``command_timeout_ms`` the connection is closed)."""
    pending = [w for w in waiters if not w.done]
    with trio.move_on_after(s.settings.command_timeout_ms / 1000):
        nodes = {w.node for w in pending}
        for node in nodes:
            mine = [w for w in pending if w.node == node]
            payload = b"".join(encode_command(b"CLIENT", b"UNBLOCK", b"%d" % w.client_id)
                               for w in mine)
            try:
                ctl = await DirectConnection.open(node, 2, s.settings, s.metrics)
            except (BackendError, OSError):
                continue
            try:
                await ctl.roundtrip(payload, len(mine))
            except BackendError:
                pass
            finally:
                await ctl.aclose()
        await all_done.wait()
        return
    for w in pending:
        if not w.done and w.conn is not None:
            await w.conn.aclose()


async def _push_back(s: RouteSession, p: Parsed, argv: list[bytes],
                     losers: list[Waiter]) -> None:
    """Elements popped by a connection that lost the race go back where they came from."""
    for w in losers:
        cmd = push_back(p.name, w.reply, argv) if w.reply is not None else None
        if cmd is None or w.conn is None or w.conn.closed:
            continue
        with trio.move_on_after(s.settings.command_timeout_ms / 1000):
            await w.conn.roundtrip(cmd, 1)
