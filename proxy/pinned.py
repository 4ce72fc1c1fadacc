"""Requests that need a backend connection of their own: WATCH/MULTI/EXEC and blocking
commands. All of them wait until the session's earlier requests have answered, and the
session reads nothing more until they are done — the order one Redis server would give.

Transactions: MULTI, the queued commands and EXEC are buffered by the proxy (each queued
command is checked against the command table and answered ``+QUEUED`` or with Redis' error,
which dooms the transaction as in Redis). At EXEC every key of every queued command must hash
to one slot (else ``-CROSSSLOT``); then ``MULTI … EXEC`` is sent pipelined on a direct
connection to that slot's master. A MOVED/ASK inside it makes EXEC fail with EXECABORT and
nothing ran, so the proxy follows the redirect and sends the whole transaction again (not
when WATCH pinned the session: then the client gets the EXECABORT). WATCH opens a direct
connection to its keys' master and the transaction must run there.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import trio

from eventcore.backoff import backoff_ms
from protocol.commands import CommandInfo, arity_ok, key_positions, lookup, unknown_command_error
from protocol.resp import encode_command
from protocol.slots import key_slot
from proxy import errors
from proxy.backend import BackendError, DirectConnection
from proxy.redirect import Action, classify_error, error_frame

if TYPE_CHECKING:
    from proxy.session import Session

OK = b"+OK\r\n"
QUEUED = b"+QUEUED\r\n"
ASKING = encode_command(b"ASKING")
# Commands that act at once even inside MULTI (Redis' processCommand exceptions).
OUTSIDE_MULTI = frozenset({b"exec", b"discard", b"multi", b"watch", b"quit", b"reset"})


def queue(s: Session, argv: list[bytes]) -> None:
    """A command inside MULTI: checked now, run at EXEC."""
    info = lookup(argv)
    if info is None:
        s.multi_dirty = True
        s.reply("other", b"-" + unknown_command_error(argv) + b"\r\n")
        return
    if not arity_ok(info, len(argv)):
        s.multi_dirty = True
        s.reply(info.name, error_frame(errors.WRONG_ARITY.format(name=info.name)))
        return
    if info.route in ("pubsub", "unsupported"):
        s.multi_dirty = True
        s.reply(info.name, error_frame(errors.NOT_SUPPORTED.format(name=info.name)))
        return
    if info.route in ("all_masters", "all_nodes"):
        # A transaction runs on one node; DBSIZE, KEYS, FLUSHALL… there would be silently
        # partial.
        s.multi_dirty = True
        s.reply(info.name, error_frame(errors.NOT_IN_MULTI.format(name=info.name)))
        return
    if s.slot_of(argv) is None:
        s.multi_dirty = True
        s.reply(info.name, error_frame(errors.CROSSSLOT))
        return
    assert s.multi is not None
    s.multi.append(argv)
    s.reply(info.name, QUEUED)


def multi(s: Session, argv: list[bytes]) -> None:
    if s.multi is not None:
        s.reply("multi", error_frame(errors.MULTI_NESTED))
        return
    s.multi = []
    s.multi_dirty = False
    s.reply("multi", OK)


async def _release_watch(s: Session, unwatch: bool) -> None:
    conn, s.watch = s.watch, None
    if conn is None:
        return
    if unwatch and not conn.closed:
        try:
            await conn.roundtrip(encode_command(b"UNWATCH"), 1)
        except BackendError:
            pass  # the connection is gone, and with it the watch
    await conn.aclose()


def discard(s: Session, argv: list[bytes]) -> Awaitable[None] | None:
    if s.multi is None:
        s.reply("discard", error_frame(errors.DISCARD_WITHOUT_MULTI))
        return None
    s.multi = None
    s.reply("discard", OK)
    if s.watch is not None:
        return _release_watch(s, unwatch=False)
    return None


def _transaction_slot(s: Session, commands: list[list[bytes]]) -> int | None:
    """The one slot of all keys; -1 when there are none; None when they span slots."""
    slot = -1
    for argv in commands:
        for p in key_positions(argv):
            k = key_slot(argv[p])
            if slot == -1:
                slot = k
            elif k != slot:
                return None
    return slot


async def _exec(s: Session, queued: list[list[bytes]], reply_slot: Callable[[bytes], None]) -> None:
    slot = _transaction_slot(s, queued)
    if slot is None:
        reply_slot(error_frame(errors.CROSSSLOT))
        await _release_watch(s, unwatch=True)
        return
    await s.wait_idle()
    payload = encode_command(b"MULTI") + b"".join(encode_command(*a) for a in queued) + \
        encode_command(b"EXEC")
    n_replies = len(queued) + 2
    if s.watch is not None:
        conn = s.watch
        owner = s.router.topology.owners[slot] if slot >= 0 else conn.address
        if owner != conn.address:
            reply_slot(error_frame(errors.CROSSSLOT))
            await _release_watch(s, unwatch=True)
            return
        try:
            frames = await conn.roundtrip(payload, n_replies)
            reply_slot(frames[-1][1])
        except BackendError:
            s.metrics.unknown_fate_write()
            reply_slot(error_frame(errors.UNKNOWN_FATE_WRITE.format(node=conn.address)))
        await _release_watch(s, unwatch=False)
        return
    if slot < 0:
        slot = s.any_slot
    reply_slot(await _run_on_owner(s, slot, payload, n_replies, readonly=False))


async def _run_on_owner(
    s: Session, slot: int, payload: bytes, n_replies: int, readonly: bool
) -> bytes:
    """Send ``payload`` to the slot's master on a direct connection, following MOVED/ASK and
    retrying TRYAGAIN/CLUSTERDOWN/unreachable; return the last reply frame (EXEC's or the
    blocking command's). A redirect in any reply means nothing ran (EXECABORT)."""
    settings = s.settings
    deadline = trio.current_time() + settings.retry_deadline_ms / 1000
    redirects = 0
    attempt = 0
    ask_node = ""
    while True:
        node = ask_node or s.router.topology.owners[slot]
        expired = trio.current_time() >= deadline
        if node is None:
            if expired:
                return error_frame(errors.SLOT_NOT_SERVED)
            s.router.topology.request_refresh("retry")
        else:
            sent = False
            try:
                conn = await _direct(s, node)
                data = ASKING + payload if ask_node else payload
                sent = True
                frames = await conn.roundtrip(data, n_replies + (1 if ask_node else 0))
            except (BackendError, OSError, trio.TooSlowError) as exc:
                s.direct.pop(node, None)
                s.router.topology.request_refresh("conn_lost")
                if sent and not readonly:
                    s.metrics.unknown_fate_write()
                    return error_frame(errors.UNKNOWN_FATE_WRITE.format(node=node))
                if expired:
                    return error_frame(errors.NODE_UNREACHABLE.format(node=node))
                del exc
            else:
                ask_node = ""
                decision = None
                for type_byte, raw in frames:
                    if type_byte == 45:
                        d = classify_error(raw, node, redirects, settings.max_redirects, expired)
                        if d.action is not Action.FORWARD:
                            decision = d
                            break
                if decision is None:
                    return frames[-1][1]
                s.metrics.redirect(decision.kind, node)
                if decision.action is Action.FAIL:
                    return decision.error
                if decision.action is Action.RESEND:
                    redirects += 1
                    s.router.topology.moved(decision.slot, decision.node)
                    continue
                if decision.action is Action.ASK:
                    redirects += 1
                    ask_node = decision.node
                    continue
        await trio.sleep(backoff_ms(attempt, settings.retry_backoff_min_ms,
                                    settings.retry_backoff_max_ms) / 1000)
        attempt += 1


async def _direct(s: Session, node: str) -> DirectConnection:
    conn = s.direct.get(node)
    if conn is None or conn.closed or conn.proto != s.proto:
        conn = await DirectConnection.open(node, s.proto, s.settings.connect_timeout_ms / 1000)
        s.direct[node] = conn
    return conn


def exec_(s: Session, argv: list[bytes]) -> Awaitable[None] | None:
    if s.multi is None:
        s.reply("exec", error_frame(errors.EXEC_WITHOUT_MULTI))
        return None
    queued, dirty = s.multi, s.multi_dirty
    s.multi = None
    s.multi_dirty = False
    reply_slot = s.new_slot("exec")
    if dirty:
        reply_slot(error_frame(errors.EXECABORT))
        return _release_watch(s, unwatch=True) if s.watch is not None else None
    return _exec(s, queued, reply_slot)


async def _watch(s: Session, argv: list[bytes], slot: int, reply_slot: Callable[[bytes], None]) -> None:
    await s.wait_idle()
    node = s.router.topology.owners[slot]
    if s.watch is not None and s.watch.address != node:
        reply_slot(error_frame(errors.CROSSSLOT))
        return
    if node is None:
        reply_slot(error_frame(errors.SLOT_NOT_SERVED))
        return
    try:
        if s.watch is None:
            s.watch = await DirectConnection.open(node, s.proto,
                                                  s.settings.connect_timeout_ms / 1000)
        frames = await s.watch.roundtrip(encode_command(*argv), 1)
    except (BackendError, OSError, trio.TooSlowError) as exc:
        s.watch = None
        reply_slot(error_frame(errors.NODE_UNREACHABLE.format(node=node)))
        del exc
        return
    type_byte, raw = frames[0]
    if type_byte == 45:
        d = classify_error(raw, node, 0, 1, False)
        if d.action is Action.RESEND:
            # Our map was stale: fix it and watch on the right node instead.
            s.router.topology.moved(d.slot, d.node)
            await _release_watch(s, unwatch=False)
            await _watch(s, argv, slot, reply_slot)
            return
    reply_slot(raw)


def watch(s: Session, argv: list[bytes]) -> Awaitable[None] | None:
    if s.multi is not None:
        s.reply("watch", error_frame(errors.WATCH_IN_MULTI))
        return None
    slot = s.slot_of(argv)
    if slot is None:
        s.reply("watch", error_frame(errors.CROSSSLOT))
        return None
    return _watch(s, argv, slot, s.new_slot("watch"))


async def _unwatch(s: Session, reply_slot: Callable[[bytes], None]) -> None:
    await _release_watch(s, unwatch=True)
    reply_slot(OK)


def unwatch(s: Session, argv: list[bytes]) -> Awaitable[None] | None:
    if s.watch is None:
        s.reply("unwatch", OK)
        return None
    return _unwatch(s, s.new_slot("unwatch"))


TRANSACTION: dict[str, Callable[[Session, list[bytes]], Awaitable[None] | None]] = {
    "multi": multi,
    "exec": exec_,
    "discard": discard,
    "watch": watch,
    "unwatch": unwatch,
}


async def _blocking(s: Session, argv: list[bytes], info: CommandInfo, slot: int,
                    reply_slot: Callable[[bytes], None]) -> None:
    await s.wait_idle()
    reply_slot(await _run_on_owner(s, slot, encode_command(*argv), 1,
                                   readonly="readonly" in info.flags))


def blocking(s: Session, argv: list[bytes], info: CommandInfo, slot: int) -> Awaitable[None]:
    """BLPOP & co.: on the session's own connection to the slot's master, no timeout."""
    return _blocking(s, argv, info, slot, s.new_slot(info.name))
