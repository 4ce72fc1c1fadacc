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

Every request here goes through the router's redirect/retry loop (``router.AwaitedCall``),
with its bounds; only a transaction pinned by WATCH follows nothing.

The client's transaction state is a ``Transaction`` the session holds; only this module
changes it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING

from slotgate.protocol.commands import (
    CommandInfo,
    arity_ok,
    key_positions,
    lookup,
    unknown_command_error,
)
from slotgate.protocol.resp import ReplyFramer, encode_command
from slotgate.protocol.slots import key_slot
from slotgate.proxy import errors
from slotgate.proxy.backend.connections import BackendError, DirectConnection
from slotgate.proxy.front import shardtx, stream_gone
from slotgate.proxy.routing.redirect import error_frame
from slotgate.proxy.routing.router import AwaitedCall, Connect

if TYPE_CHECKING:
    from slotgate.proxy.front.routes import RouteSession

OK = b"+OK\r\n"
QUEUED = b"+QUEUED\r\n"
# Commands that act at once even inside MULTI (Redis' processCommand exceptions).
_RUN_AT_EXEC = (b"auth", b"hello")
OUTSIDE_MULTI = frozenset({b"exec", b"discard", b"multi", b"watch", b"quit", b"reset"})
# Commands answered from the proxy's own client state: refused inside MULTI.
# LATENCY too: the transaction's node would answer with its own figures, not the proxy's.
# So are the others the proxy answers from state of its own: CLIENT PAUSE/UNPAUSE and
# TRACKING (on the node they would pause the node, or track on the transaction's connection),
# MONITOR (it would turn that connection into a monitor), SLOWLOG and ACL (the node's log and
# users are not the proxy's).
OWN_STATE = frozenset({"client|id", "client|info", "client|list", "client|kill",
                       "client|unblock", "client|no-evict", "client|reply", "client|setname",
                       "client|getname", "client|pause", "client|unpause", "client|tracking",
                       "client|caching", "client|getredir", "client|trackinginfo", "monitor",
                       "slowlog|get", "slowlog|len", "slowlog|reset",
                       *(f"acl|{sub}" for sub in ("cat", "deluser", "dryrun", "genpass", "getuser",
                                                 "help", "list", "load", "log", "save",
                                                 "setuser", "users", "whoami")),
                       *(f"latency|{sub}" for sub in ("latest", "history", "reset", "histogram",
                                                     "doctor", "graph", "help"))})


class Transaction:
    """One client's transaction state and connections of its own. The session holds it and
    reads ``queued``; only this module changes it.

    ``queued``: the commands of an open MULTI (None outside MULTI); ``doomed``: a command was
    refused while queuing, so EXEC aborts (Redis' ``CLIENT_DIRTY_EXEC``); ``watch``: the
    connection WATCH pinned to the watched keys' master; ``direct``: connections by node for
    blocking commands and unwatched transactions; ``node_ids``: the node's own client id of
    each (for CLIENT UNBLOCK); ``blocked``: (node, that id) while a blocking command waits;
    ``shard_watch``: with ``cross_slot_transactions: per_shard``, the ``direct`` connection
    of each master holding watched keys (shardtx.py); ``db``: with ``databases: N``, the
    database a SELECT queued in the open MULTI moves to (None: none queued; databases.py)."""

    __slots__ = ("queued", "doomed", "watch", "direct", "node_ids", "blocked", "shard_watch",
                 "db")

    def __init__(self) -> None:
        self.queued: list[list[bytes]] | None = None
        self.doomed = False
        self.watch: DirectConnection | None = None
        self.direct: dict[str, DirectConnection] = {}
        self.node_ids: dict[str, tuple[DirectConnection, int]] = {}
        self.blocked: tuple[str, int] | None = None
        self.shard_watch: dict[str, DirectConnection] = {}
        self.db: int | None = None

    async def aclose(self) -> None:
        """The client is gone: close its connections."""
        conns = list(self.direct.values())
        if self.watch is not None:
            conns.append(self.watch)
        self.direct.clear()
        self.node_ids.clear()
        self.shard_watch.clear()
        self.watch = None
        for conn in conns:
            await conn.aclose()


def reset(s: RouteSession) -> None:
    """RESET: out of MULTI, nothing watched (the watch connection closes in the background)."""
    tx = s.tx
    tx.queued = None
    tx.doomed = False
    tx.db = None
    if tx.watch is not None:
        watch, tx.watch = tx.watch, None
        s.router.nursery.start_soon(watch.aclose)
    shardtx.drop(s)


def refuse(s: RouteSession, name: str, raw: bytes, rejected: bool = False) -> None:
    """Refuse a command at queue time: EXEC will abort. ``rejected``: refused before it
    could run, as Redis' processCommand does (unknown, arity, no-multi): not a call."""
    s.tx.doomed = True
    if rejected:
        s.proxy.stats.reject(name)
    s.reply(name, raw)


def queue(s: RouteSession, argv: list[bytes]) -> None:
    """A command inside MULTI: checked now, run at EXEC."""
    info = lookup(argv)
    if info is None:
        refuse(s, "other", b"-" + unknown_command_error(argv) + b"\r\n", rejected=True)
        return
    if not arity_ok(info, len(argv)):
        refuse(s, info.name, error_frame(errors.WRONG_ARITY.format(name=info.name)),
                rejected=True)
        return
    if "no_multi" in info.flags:
        refuse(s, info.name, error_frame(errors.NO_MULTI), rejected=True)
        return
    if info.name in OWN_STATE:
        # They answer or change the proxy's own state, which a node inside the transaction
        # cannot see; forwarded, they would act on the node's connection.
        refuse(s, info.name, error_frame(errors.NOT_IN_MULTI.format(name=info.name)))
        return
    if info.route in ("pubsub", "unsupported"):
        refuse(s, info.name, error_frame(errors.NOT_SUPPORTED.format(name=info.name)))
        return
    if info.route in ("all_masters", "all_nodes", "guarded") and \
            not shardtx.queues_every_master(s, info):
        # A transaction runs on one node; DBSIZE, KEYS, FLUSHALL… there would be silently
        # partial.
        refuse(s, info.name, error_frame(errors.NOT_IN_MULTI.format(name=info.name)))
        return
    if s.slot_of(argv) is None and not shardtx.queues_across(s, argv, info):
        # With ``refuse``, the error names the setting that would queue it.
        refuse(s, info.name, error_frame(
            errors.CROSSSLOT_QUEUED if shardtx.runs_across(argv, info) and
            not shardtx.enabled(s) else errors.CROSSSLOT))
        return
    assert s.tx.queued is not None
    s.tx.queued.append(argv)
    s.reply(info.name, QUEUED)


def multi(s: RouteSession, argv: list[bytes]) -> None:
    tx = s.tx
    if tx.queued is not None:
        s.reply("multi", error_frame(errors.MULTI_NESTED))
        return
    tx.queued = []
    tx.doomed = False
    tx.db = None
    s.reply("multi", OK)


async def _release_watch(s: RouteSession, unwatch: bool) -> None:
    tx = s.tx
    conn, tx.watch = tx.watch, None
    if conn is None:
        return
    if unwatch and not conn.closed:
        try:
            await conn.roundtrip(encode_command(b"UNWATCH"), 1)
        except BackendError:
            pass  # the connection is gone, and with it the watch
    await conn.aclose()


def discard(s: RouteSession, argv: list[bytes]) -> Awaitable[None] | None:
    tx = s.tx
    if tx.queued is None:
        s.reply("discard", error_frame(errors.DISCARD_WITHOUT_MULTI))
        return None
    tx.queued = None
    tx.db = None
    s.reply("discard", OK)
    if tx.watch is not None:
        return _release_watch(s, unwatch=False)
    return shardtx.release(s) if tx.shard_watch else None


def _transaction_slot(commands: list[list[bytes]]) -> int | None:
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


async def _exec(s: RouteSession, queued: list[list[bytes]],
                reply_slot: Callable[[bytes], None]) -> None:
    if shardtx.enabled(s):
        await shardtx.exec_(s, queued, reply_slot)
        return
    slot = _transaction_slot(queued)
    if slot is None:
        reply_slot(error_frame(errors.CROSSSLOT_TX))
        await _release_watch(s, unwatch=True)
        return
    await s.wait_idle()
    payload = encode_command(b"MULTI") + b"".join(encode_command(*a) for a in queued) + \
        encode_command(b"EXEC")
    n_replies = len(queued) + 2
    conn = s.tx.watch
    if conn is not None:
        # Pinned by WATCH: the transaction runs there or not at all (a redirect in it reaches
        # the client as EXECABORT; elsewhere the watched keys would not be watched).
        owner = s.router.topology.owners[slot] if slot >= 0 else conn.address
        if owner != conn.address:
            reply_slot(error_frame(errors.CROSSSLOT_TX))
            await _release_watch(s, unwatch=True)
            return
        try:
            frames = await conn.roundtrip(payload, n_replies)
            reply_slot(await after_writes(s, [conn], frames[-1][1]))
        except BackendError:
            s.metrics.unknown_fate_write()
            reply_slot(error_frame(errors.UNKNOWN_FATE_WRITE.format(node=conn.address)))
        await _release_watch(s, unwatch=False)
        return
    if slot < 0:
        slot = s.any_slot
    s.last_write_slot = slot  # WAIT waits there (wait.py)
    call = AwaitedCall(s.router, payload, slot, False, s.proto, s.id, n_replies)
    raw = await call.run(partial(_direct, s))
    reply_slot(await after_writes(s, [s.tx.direct.get(call.node)], raw))


# Replies after which nothing was written: EXEC's when a WATCHed key changed, a blocking
# pop's timeout, a move's from an empty source.
NOTHING_WRITTEN = frozenset({b"*-1\r\n", b"_\r\n", b"$-1\r\n"})


async def after_writes(s: RouteSession, conns: list[DirectConnection | None],
                       raw: bytes) -> bytes:
    """``raw``, the reply to writes just run on ``conns`` (connections of the client's own),
    once the client's write policies are met there (readwrite.py), or their error. Every
    path that writes on such connections ends here; an error or a null reply wrote
    nothing."""
    policies = s.policies
    if policies is None or not policies.on_writes or raw[:1] in (b"-", b"!") \
            or raw in NOTHING_WRITTEN:
        return raw
    written = [conn for conn in conns if conn is not None]
    return await policies.after_writes(written, raw) if written else raw


async def _on_owner(s: RouteSession, slot: int, payload: bytes, n_replies: int, readonly: bool,
                    connect: Connect) -> bytes:
    """Run ``payload`` on the slot's master over a connection of the client's own, through
    the router's redirect/retry loop; the last reply frame (EXEC's, the blocking command's,
    WATCH's), or the error that ended the loop."""
    return (await on_owner_at(s, slot, payload, n_replies, readonly, connect))[0]


async def on_owner_at(s: RouteSession, slot: int, payload: bytes, n_replies: int,
                      readonly: bool, connect: Connect) -> tuple[bytes, str]:
    """``_on_owner``'s reply, and the node it came from (where the payload ran, if it did)."""
    call = AwaitedCall(s.router, payload, slot, readonly, s.proto, s.id, n_replies)
    return await call.run(connect), call.node


async def write_on_owner(s: RouteSession, slot: int, payload: bytes, n_replies: int,
                         written: list[DirectConnection | None] | None = None) -> bytes:
    """``_on_owner`` of a write on the client's own connection (``_direct``), its reply once
    the client's write policies are met (``after_writes``). A request of several writes
    passes ``written``: each write's connection is added to it, and the request calls
    ``after_writes`` once, at its end."""
    raw, node = await on_owner_at(s, slot, payload, n_replies, False, partial(_direct, s))
    if written is not None:
        written.append(s.tx.direct.get(node))
        return raw
    return await after_writes(s, [s.tx.direct.get(node)], raw)


async def _direct(s: RouteSession, node: str) -> DirectConnection:
    tx = s.tx
    conn = tx.direct.get(node)
    if conn is None or conn.closed or conn.proto != s.proto:
        if conn is not None:
            del tx.direct[node]
            await conn.aclose()
        conn = await DirectConnection.open(node, s.proto, s.settings, s.metrics)
        tx.direct[node] = conn
    return conn


async def _watch_conn(s: RouteSession, node: str) -> DirectConnection:
    """The watch connection, on ``node``: after a redirect or a lost connection the watch
    moves to a new connection there (what the old one watched is no longer watched)."""
    tx = s.tx
    conn = tx.watch
    if conn is not None and (conn.closed or conn.address != node):
        await _release_watch(s, unwatch=False)
        conn = None
    if conn is None:
        conn = await DirectConnection.open(node, s.proto, s.settings, s.metrics)
        tx.watch = conn
    return conn


def exec_(s: RouteSession, argv: list[bytes]) -> Awaitable[None] | None:
    tx = s.tx
    if tx.queued is None:
        s.reply("exec", error_frame(errors.EXEC_WITHOUT_MULTI))
        return None
    queued, doomed, db = tx.queued, tx.doomed, tx.db
    tx.queued = None
    tx.doomed = False
    tx.db = None
    reply_slot: Callable[[bytes], None] = s.new_slot("exec")
    if s.settings.databases > 1 and not doomed:
        from slotgate.proxy.front import databases  # it imports this module
        reply_slot = databases.at_exec(s, queued, db, reply_slot)
    if doomed:
        reply_slot(error_frame(errors.EXECABORT))
        if tx.shard_watch:
            return shardtx.release(s)
        return _release_watch(s, unwatch=True) if tx.watch is not None else None
    reply_slot = s.proxy.tracker.at_exec(s, queued, reply_slot)
    if s.checked or any(argv[0].lower() in _RUN_AT_EXEC for argv in queued):
        # As Redis' EXEC: AUTH and HELLO run in their place and the queued commands are
        # checked again (auth.py imports this module).
        from slotgate.proxy.front import auth
        original = queued
        queued = list(queued)
        own, commit = auth.at_exec(s, queued)
        total = len(queued)
        # A HELLO that changes the protocol goes to the node too (its reply is dropped).
        resent = {i for i in own if queued[i] is not original[i]}
        queued = [argv for i, argv in enumerate(queued) if i not in own or i in resent]
        reply_slot = partial(_with_own, reply_slot, own, commit, total, resent)
    return _exec(s, queued, reply_slot)


def _with_own(reply_slot: Callable[[bytes], None], own: dict[int, bytes],
              commit: Callable[[], None], total: int, resent: set[int], raw: bytes) -> None:
    """EXEC's reply with the proxy's own replies (AUTH's, HELLO's, the refused commands'
    errors) put back in their places, and their effects applied; a null or an error reply (nothing ran)
    stays as it is, with no effect."""
    if raw[:1] != b"*" or raw[:2] == b"*-":
        reply_slot(raw)
        return
    commit()
    if not own:
        reply_slot(raw)
        return
    framer = ReplyFramer()
    framer.feed(raw[raw.index(b"\r\n") + 2:])
    ran = iter(frame for _, frame in framer.frames())
    parts: list[bytes] = []
    for i in range(total):
        if i in own:
            if i in resent:
                next(ran)  # the node's reply to the HELLO sent in its place
            parts.append(own[i])
        else:
            parts.append(next(ran))
    reply_slot(b"*%d\r\n" % total + b"".join(parts))


async def _watch(s: RouteSession, argv: list[bytes], slot: int,
                 reply_slot: Callable[[bytes], None]) -> None:
    await s.wait_idle()
    conn = s.tx.watch
    if conn is not None and s.router.topology.owners[slot] != conn.address:
        reply_slot(error_frame(errors.CROSSSLOT))
        return
    # WATCH changes no data: safe to send again after a lost connection (readonly).
    raw = await _on_owner(s, slot, encode_command(*argv), 1, True, partial(_watch_conn, s))
    conn = s.tx.watch
    if conn is not None and conn.closed:
        await _release_watch(s, unwatch=False)  # the loop gave up on a lost connection
    reply_slot(raw)


def watch(s: RouteSession, argv: list[bytes]) -> Awaitable[None] | None:
    if s.tx.queued is not None:
        s.reply("watch", error_frame(errors.WATCH_IN_MULTI))
        return None
    if shardtx.enabled(s):
        return shardtx.watch(s, argv)
    slot = s.slot_of(argv)
    if slot is None:
        s.reply("watch", error_frame(errors.CROSSSLOT))
        return None
    return _watch(s, argv, slot, s.new_slot("watch"))


async def _unwatch(s: RouteSession, reply_slot: Callable[[bytes], None]) -> None:
    await _release_watch(s, unwatch=True)
    await shardtx.release(s)
    reply_slot(OK)


def unwatch(s: RouteSession, argv: list[bytes]) -> Awaitable[None] | None:
    if s.tx.watch is None and not s.tx.shard_watch:
        s.reply("unwatch", OK)
        return None
    return _unwatch(s, s.new_slot("unwatch"))


TRANSACTION: dict[str, Callable[[RouteSession, list[bytes]], Awaitable[None] | None]] = {
    "multi": multi,
    "exec": exec_,
    "discard": discard,
    "watch": watch,
    "unwatch": unwatch,
}


async def _blocking_conn(s: RouteSession, node: str) -> DirectConnection:
    """The blocking command's connection to ``node``, its node-side client id known."""
    tx = s.tx
    conn = await _direct(s, node)
    known = tx.node_ids.get(node)
    if known is None or known[0] is not conn:
        raw = (await conn.roundtrip(encode_command(b"CLIENT", b"ID"), 1))[0][1]
        known = tx.node_ids[node] = (conn, int(raw[1:-2]) if raw[:1] == b":" else 0)
    tx.blocked = (node, known[1])
    return conn


async def _blocking(s: RouteSession, argv: list[bytes], info: CommandInfo, slot: int,
                    reply_slot: Callable[[bytes], None], prefix: bytes) -> None:
    await s.wait_idle()
    readonly = "readonly" in info.flags
    payload = prefix + encode_command(*argv)
    n_replies = 2 if prefix else 1
    try:
        for _ in range(s.settings.max_redirects + 1):
            call = AwaitedCall(s.router, payload, slot, readonly, s.proto, s.id, n_replies)
            reply = await call.run(partial(_blocking_conn, s))
            if not (stream_gone.key_left_in_migration(argv, reply) and await
                    stream_gone.slot_migrating(partial(_direct, s, call.node), argv)):
                break
    finally:
        s.tx.blocked = None
    if "write" in info.flags:  # a pop, a move, XREADGROUP
        reply = await after_writes(s, [s.tx.direct.get(call.node)], reply)
    reply_slot(reply)


def blocking(s: RouteSession, argv: list[bytes], info: CommandInfo,
             slot: int, prefix: bytes = b"") -> Awaitable[None]:
    """BLPOP & co.: on the session's own connection to the slot's master, no timeout.
    ``prefix``: one command sent first on that connection, its reply dropped (WAIT's)."""
    return _blocking(s, argv, info, slot, s.new_slot(info.name), prefix)
