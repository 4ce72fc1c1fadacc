"""Pops over keys in several slots: BLPOP, BRPOP, BZPOPMIN, BZPOPMAX, BLMPOP, BZMPOP, and the
non-blocking LMPOP and ZMPOP (step 1 only). BLMOVE/BRPOPLPUSH (``blockmove.py``) and XREAD/
XREADGROUP (``xreadmulti.py``) across slots are routed from here too.

No element is ever taken out of a key straight into the proxy: each pop moves what it
takes into a *park* of the key's slot, in one atomic step on the key's master, and the
client is answered only once the winner's park is committed; every other park goes back
into its key (``poppark.py``). Steps (docs/COMMANDS.md, "Blocking pops across slots"):

0. check    Redis' own argument errors (timeout, direction, ``COUNT``): the command over an
            always-empty key of the first key's slot inside ``MULTI … EXEC``.
1. try      each run of consecutive keys of one slot, in Redis' key order, by one script on
            the slot's master: the first key that exists decides (another type:
            ``WRONGTYPE``; else up to ``COUNT`` elements move into its park). The first run
            that pops is the reply, once its park is committed.
2. wait     nothing anywhere: the keys are *armed* (``keywake.py``: read on a connection
            with client-side caching on, shared by every waiting pop of this process), then
            step 1 runs again; still nothing: the pop sleeps until a node says one of its
            keys changed (or its tracking connection is lost, or a slot moved), then arms
            and runs step 1 again, until the timeout. Lists and sorted sets alike: no
            connection of its own, nothing sent while nothing changes. A key that cannot
            be armed: step 1 again every ``keywake.RETRY_S``.

A client that goes away while waiting has every park pushed back.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, NamedTuple

import trio

from slotgate.protocol.commands import CommandInfo
from slotgate.protocol.resp import encode_command
from slotgate.protocol.slots import key_slot
from slotgate.proxy import errors
from slotgate.proxy.backend.connections import BackendError, DirectConnection
from slotgate.proxy.front.pinned import _direct, after_writes, on_owner_at
from slotgate.proxy.routing import crossslot, keywake, poppark
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
_LISTS = frozenset({"blpop", "brpop", "blmpop", "lmpop"})
_UNKNOWN_FATE = error_frame(errors.UNKNOWN_FATE_WRITE).split(b"{node}")[0]
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


def route(s: RouteSession, argv: list[bytes], info: CommandInfo) -> Awaitable[None] | None:
    """A pop whose keys span slots; None when it is not one of ours (the caller answers
    CROSSSLOT)."""
    if info.name not in HANDLED:
        return None
    p = parse(argv, info.name)
    if p is None:
        return None
    return _run(s, p, s.new_slot(info.name))


class Shape(NamedTuple):
    """What a pop takes: ``kind`` (list, zset), ``where`` (LEFT, RIGHT, MIN, MAX), how many
    elements at most, and its parks' letter (``poppark.park``)."""

    kind: bytes
    where: bytes
    most: int
    how: bytes


def shape(p: Parsed) -> Shape:
    """``p``'s shape (its arguments were checked by a node: ``_check``)."""
    if p.name in _KEYS_FIRST:
        where = {"blpop": b"LEFT", "brpop": b"RIGHT", "bzpopmin": b"MIN"}.get(p.name, b"MAX")
        count = 1
    else:
        where = p.tail[0].upper()
        count = int(p.tail[2]) if len(p.tail) >= 3 else 1
    if p.name in _LISTS:
        return Shape(b"list", where, count, where[:1])
    return Shape(b"zset", where, count, b"Z")


async def _check(s: RouteSession, p: Parsed) -> bytes | None:
    """Redis' own argument errors (timeout, direction, COUNT): the command over an always
    empty key, inside ``MULTI`` (it never blocks nor changes anything there)."""
    slot = key_slot(p.keys[0])
    check = b"{%s}%scheck" % (crossslot.tag_for_slot(slot), crossslot.TEMP_PREFIX)
    payload = _MULTI + encode_command(*build(p, [check], p.timeout)) + _EXEC
    deadline = trio.current_time() + s.settings.retry_deadline_ms / 1000
    while True:
        raw, _ = await on_owner_at(s, slot, payload, 3, False, partial(_direct, s))
        if not raw.startswith(_UNKNOWN_FATE) or trio.current_time() >= deadline:
            break  # a lost reply: it changed nothing, sent again
        await trio.sleep(poppark.POLL_S)
    if raw[:1] == b"*" and not is_null(raw):
        raw = array_elements(raw)[0]
    return None if is_null(raw) else raw


async def _run(s: RouteSession, p: Parsed, reply_slot: Callable[[bytes], None]) -> None:
    await s.wait_idle()
    started = trio.current_time()
    err = await _check(s, p)
    if err is not None:
        reply_slot(err)
        return
    sh = shape(p)
    try:
        timeout_s = 0.0 if p.name in NON_BLOCKING else float(p.timeout)
    except ValueError:  # a form the node accepts and Python does not: no timeout
        timeout_s = 0.0
    deadline = started + timeout_s if timeout_s > 0 else math.inf
    null = b"_\r\n" if s.proto == 3 else b"*-1\r\n"
    waiting = keywake.Waiting(s.proxy.keywake, p.keys)
    took: bytes | None = None
    try:
        while True:
            with trio.CancelScope(shield=True):  # a pop, once sent, is settled
                got = await _try_runs(s, p, sh)
            if got:
                if got[:1] == b"*" and not is_null(got):
                    took = poppark.text(array_elements(got)[0])
                reply_slot(got)
                return
            left_s = deadline - trio.current_time()
            if got is _AGAIN:
                await trio.sleep(poppark.POLL_S)
            elif p.name in NON_BLOCKING or left_s <= 0:
                reply_slot(null)
                return
            else:
                await waiting.between_tries(left_s)
    finally:
        waiting.close(took)


# ``_try_runs``: a pop was undone (its park pushed back): try again.
_AGAIN = b""


async def _try_runs(s: RouteSession, p: Parsed, sh: Shape) -> bytes | None:
    """Each run of keys of one slot, in Redis' key order, popped into parks by one script;
    the first that pops (or meets a key of another type) is the reply, once committed. None:
    every key empty."""
    for slot, keys in runs(p.keys):
        parks = [poppark.park(k, sh.how) for k in keys]
        cmd = poppark.eval_cmd(poppark.TRY_SCRIPT, [*keys, *parks],
                               [sh.kind, sh.where, b"%d" % sh.most])
        raw, _ = await on_owner_at(s, slot, cmd, 1, False, partial(_direct, s))
        if is_null(raw):
            continue
        if raw[:1] != b"*":  # no reply, or no master in time: whatever it parked goes back
            await poppark.push_back(s, parks)
            return _AGAIN if raw.startswith(_UNKNOWN_FATE) else raw
        head, items = array_elements(raw)
        at = int(poppark.text(head))
        if at == 0:
            return poppark.WRONGTYPE
        return await _commit(s, p, keys[at - 1], parks[at - 1], poppark.popped(items))
    return None


async def _commit(s: RouteSession, p: Parsed, key: bytes, name: bytes,
                  items: list[bytes]) -> bytes:
    """The client's reply once the park ``name`` holding ``items`` is committed."""
    done, node = await poppark.commit(s, name)
    if done is None:
        s.metrics.unknown_fate_write()
        return error_frame(errors.UNKNOWN_FATE_WRITE.format(
            node=s.router.topology.owners[key_slot(key)] or "?"))
    if not done:
        return _AGAIN
    # the pop is a write like any other: the client's write policies (durable writes,
    # read-your-writes) on its own connection to the node that committed it
    return await after_writes(s, [s.tx.direct.get(node)],
                              poppark.reply(p.name, key, items, s.proto))


class Waiter:
    """One blocking command (a slot's, a key's) on a connection of its own."""

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


async def open_waiter(s: RouteSession, w: Waiter) -> None:
    w.conn = await DirectConnection.open(w.node, s.proto, s.settings, s.metrics)
    raw = (await w.conn.roundtrip(_CLIENT_ID, 1))[0][1]
    w.client_id = int(raw[1:-2])


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
