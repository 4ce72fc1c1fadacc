"""Per-connection state (sans-IO). The trio shell in node/core/server.py owns the socket.

A handler gets the ``Client`` and reads/writes its fields directly; the ones meant for
handlers are documented in node/commands/__init__.py.

The fast-path flag ``slow``, read once per request by node/core/dispatch.py, is derived, never
assigned by hand: its inputs (``Client.SLOW_INPUTS``; the server's, ``Server.SLOW_INPUTS``)
are plain attributes for reading, changed only through their setters here (``set_multi``
...; on the server ``add_monitor`` ...), each of which recomputes the flag in
``_refresh_slow``, the one place that computes it (``Server._refresh_slow`` for the
server-wide part, which then refreshes every client). No caller has to remember to update
it; tests/node/test_fastpath_flag.py checks that no other code assigns an input.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

from mypy_extensions import mypyc_attr

from slotgate.eventcore.writer import Writer
from slotgate.node.core.keyspace import Database, now_ms

if TYPE_CHECKING:

    import trio

    from slotgate.node.commands.pubsub import ClientSubs
    from slotgate.node.commands.registry import Command
    from slotgate.node.core.server import Server
    from slotgate.node.core.tracking import ClientTracking
    from slotgate.protocol.acl import User


@mypyc_attr(native_class=False)  # compiled: a subclass of bytes stays a Python class
class _BlockedMarker(bytes):
    """Type of ``BLOCKED``: compared by identity, and harmless (empty) if ever sent."""


# Returned by a handler (through ``Client.block``) when the client is now parked.
BLOCKED = _BlockedMarker()

NULL_BULK = {2: b"$-1\r\n", 3: b"_\r\n"}
NULL_ARRAY = {2: b"*-1\r\n", 3: b"_\r\n"}

REPLY_ON, REPLY_OFF, REPLY_SKIP_NEXT, REPLY_SKIP = 0, 1, 2, 3
REPLY_MUTED = (REPLY_OFF, REPLY_SKIP)  # modes that drop what is replied now (pushes aside)
# Commands whose replies are pushes: Redis sends them whatever CLIENT REPLY says (RESP2 too)
PUSHING_COMMANDS = frozenset({b"subscribe", b"unsubscribe", b"psubscribe", b"punsubscribe",
                              b"ssubscribe", b"sunsubscribe"})

ServeFn = Callable[["Client", Database, bytes], "bytes | None"]


class BlockState:
    """Why a client is parked: the keys, the deadline, and how to serve it when a key is ready."""

    __slots__ = ("db", "keys", "deadline_s", "serve", "timeout_reply", "argv", "postponed")

    def __init__(
        self, db: Database, keys: list[bytes], deadline_s: float | None, serve: ServeFn,
        timeout_reply: bytes, argv: list[bytes],
    ) -> None:
        self.db = db
        self.keys = keys
        self.deadline_s = deadline_s  # trio.current_time() based; None = forever
        self.serve = serve
        self.timeout_reply = timeout_reply
        self.argv = argv
        self.postponed = False  # CLIENT PAUSE: the command runs again when the pause ends


class Client:
    """One client connection's state."""

    # The inputs of the fast-path flag ``slow``: read them freely, change them only with
    # their setters (``set_<name>``), which recompute the flag.
    SLOW_INPUTS: ClassVar[tuple[str, ...]] = ("authenticated", "multi", "reply_mode", "subscriptions", "asking", "acl_user",
                   "tracking")
    # Fixed fields, no per-instance dict: one of these lives for every connection (the
    # memory per idle connection, bench/bench_conn_memory.py).
    __slots__ = ("server", "ks", "id", "addr", "laddr", "name", "created_ms",
                 "last_interaction_ms", "db", "resp", "null_bulk", "null_array", "authenticated",
                 "multi", "reply_mode", "subscriptions", "asking", "acl_user", "tracking",
                 "user", "multi_error", "dirty_cas", "in_exec", "reply_mode_applied", "script",
                 "watched", "blocked", "monitor", "readonly", "no_evict", "close_after_reply",
                 "killed", "last_cmd", "propagate_as", "out", "writer", "wake", "fd",
                 "query_buffered", "cancel_scope", "running", "flush_scheduled", "unblock_event",
                 "obuf_soft_since_s", "exec_multi_propagated", "pubsub", "is_replica",
                 "is_master", "repl_listening_port", "repl_ip", "repl_capa_eof", "slow", "woff")

    def __init__(self, server: Server, cid: int, addr: str, laddr: str) -> None:
        self.server = server
        self.ks = server.ks
        self.id = cid
        self.addr = addr
        self.laddr = laddr
        self.name = b""
        self.created_ms = now_ms()
        self.last_interaction_ms = self.created_ms
        self.db: Database = self.ks.dbs[0]
        self.resp = 2
        self.null_bulk = NULL_BULK[2]
        self.null_array = NULL_ARRAY[2]
        # -- the fast-path flag's inputs (SLOW_INPUTS): changed only by their setters --------
        self.authenticated: bool = server.acl.open_login()
        # MULTI: queued (command, argv) or None outside a transaction
        self.multi: list[tuple[Command, list[bytes]]] | None = None
        self.reply_mode = REPLY_ON  # REPLY_ON, REPLY_OFF, REPLY_SKIP_NEXT, REPLY_SKIP
        self.subscriptions = 0  # channels + patterns (+ shard channels): pub/sub mode
        self.asking = False  # cluster ASKING (one command)
        # the ACL user (None: an internal client, which may run anything); any user but one
        # allowed every command, key and channel takes the slow path (node/commands/acl.py)
        self.acl_user: User | None = server.acl.default
        # CLIENT TRACKING on (node/core/tracking.py): its reads are remembered, off the fast path
        self.tracking: ClientTracking | None = None
        # ------------------------------------------------------------------------------------
        self.user = b"default"
        self.multi_error = False  # a queue-time error happened: EXEC answers EXECABORT
        self.dirty_cas = False  # a watched key was touched
        self.in_exec = False
        # the command's reply went through CLIENT REPLY's mode piece by piece as it was made
        # (EXEC: the mode can change between its replies): process_command leaves it whole
        self.reply_mode_applied = False
        self.script = False  # the scripting engine's client (CLIENT_SCRIPT): it never blocks
        self.watched: list[tuple[Database, bytes]] = []
        self.blocked: BlockState | None = None
        self.monitor = False  # in the server's ``monitors`` (Server.add_monitor)
        self.readonly = False  # cluster READONLY
        self.no_evict = False  # CLIENT NO-EVICT
        self.close_after_reply = False
        self.killed = False
        self.last_cmd = "NULL"
        # set by a handler to replicate something other than its argv (list of argvs)
        self.propagate_as: list[list[bytes]] | None = None
        # Redis' c->woff: the replication offset when this client's last command ended (WAIT
        # waits for replicas to reach it; node/core/dispatch.py's call() sets it).
        self.woff = 0
        self.out: list[bytes] = []
        self.writer = Writer(self.out)  # writes ``out`` to the socket (set up by the server)
        # Set by the server: called when the client must wake (unblocked, killed).
        self.wake: Callable[[], None] = _noop
        # -- the connection, as node/core/server.py serves it -----------------------------------
        self.fd = 8  # the socket's descriptor, for CLIENT LIST (8 for internal clients)
        self.query_buffered: Callable[[], int] = _zero  # bytes of requests not yet complete
        self.cancel_scope: trio.CancelScope | None = None  # ends the client's task (a kill)
        self.running = False  # its requests are being run (the output is not to be sent yet)
        self.flush_scheduled = False  # a flush task for its output is started
        self.unblock_event: trio.Event | None = None  # set to end a blocking wait
        # when output left unsent first passed the ``normal`` class's soft limit
        self.obuf_soft_since_s: float | None = None
        # -- features' per-client state --------------------------------------------------
        # EXEC with writes propagated: MULTI went out before the first (EXEC closes it)
        self.exec_multi_propagated = False
        self.pubsub: ClientSubs | None = None  # subscriptions (node/commands/pubsub.py)
        self.is_replica = False  # a replica of ours (PSYNC/SYNC)
        self.is_master = False  # our master's link (node/replication/replica.py)
        self.repl_listening_port = 0  # REPLCONF listening-port
        self.repl_ip: str | None = None  # REPLCONF ip-address
        self.repl_capa_eof = False  # REPLCONF capa eof (node/replication/diskless.py)
        self.slow = False  # the fast-path flag: derived (_refresh_slow), never set elsewhere
        self._refresh_slow()

    @property
    def db_index(self) -> int:
        return self.db.index

    def set_resp(self, proto: int) -> None:
        self.resp = proto
        self.null_bulk = NULL_BULK[proto]
        self.null_array = NULL_ARRAY[proto]

    # -- the fast-path flag -----------------------------------------------------------------
    def _refresh_slow(self) -> None:
        """Recompute whether this client's commands need the full checks (auth, MULTI, ...).
        Called only by the setters below and by ``Server._refresh_slow``."""
        self.slow = (
            not self.authenticated
            or self.multi is not None
            or self.reply_mode != REPLY_ON
            or self.subscriptions > 0
            or self.asking
            or (self.acl_user is not None and not self.acl_user.unrestricted)
            or self.tracking is not None
            or self.server.slow
        )

    def set_authenticated(self, authenticated: bool) -> None:
        self.authenticated = authenticated
        self._refresh_slow()

    def set_multi(self, queue: list[tuple[Command, list[bytes]]] | None) -> None:
        """Open a transaction (``[]``) or close it (None; see also ``discard_multi``)."""
        self.multi = queue
        self._refresh_slow()

    def discard_multi(self) -> None:
        """Leave MULTI: drop the queue, the queue-time error and the watched keys."""
        self.set_multi(None)
        self.multi_error = False
        self.unwatch_all()

    def set_reply_mode(self, mode: int) -> None:
        self.reply_mode = mode
        self._refresh_slow()

    def set_subscriptions(self, count: int) -> None:
        self.subscriptions = count
        self._refresh_slow()

    def set_asking(self, asking: bool) -> None:
        self.asking = asking
        self._refresh_slow()

    def set_acl_user(self, user: User | None) -> None:
        """Run as ``user`` (None: no ACL checks); also after the user's rules changed."""
        self.acl_user = user
        if user is not None:
            self.user = user.name
        self._refresh_slow()

    def set_tracking(self, tracking: ClientTracking | None) -> None:
        self.tracking = tracking
        self._refresh_slow()

    # -- blocking ------------------------------------------------------------------------
    def block(
        self, keys: list[bytes], timeout_s: float, serve: ServeFn, argv: list[bytes],
        timeout_reply: bytes | None = None,
    ) -> bytes:
        """Park this client until ``serve`` succeeds for one of ``keys`` or ``timeout_s``
        passes (0 = forever). Return the result straight from the handler. Inside EXEC (or
        anything that cannot block) the timeout reply comes back at once instead."""
        reply = self.null_array if timeout_reply is None else timeout_reply
        if self.in_exec or self.script:
            return reply
        deadline = self.server.block_deadline(timeout_s)
        self.blocked = BlockState(self.db, keys, deadline, serve, reply, argv)
        for key in keys:
            q = self.db.blocking.get(key)
            if q is None:
                q = self.db.blocking[key] = deque()
            if self not in q:
                q.append(self)
        self.server.blocked_clients += 1
        return BLOCKED

    def unblock(self, reply: bytes | None) -> None:
        """Leave the blocked state, queue ``reply`` (None: none) and wake the client task."""
        st = self.blocked
        if st is None:
            return
        self.blocked = None
        self.server.blocked_clients -= 1
        for key in st.keys:
            q = st.db.blocking.get(key)
            if q is not None:
                try:
                    q.remove(self)
                except ValueError:
                    pass
                if not q:
                    del st.db.blocking[key]
        if reply is not None:
            self.out.append(reply)
        self.wake()

    # -- WATCH ---------------------------------------------------------------------------
    def unwatch_all(self) -> None:
        for db, key in self.watched:
            clients = db.watched.get(key)
            if clients is not None:
                clients.pop(self, None)
                if not clients:
                    del db.watched[key]
        self.watched = []
        self.dirty_cas = False

    def flags_text(self) -> str:
        """CLIENT LIST flags, in Redis' order."""
        f = ""
        if self.monitor:
            f += "O"
        elif self.is_replica:
            f += "S"
        if self.is_master:
            f += "M"
        if self.subscriptions:
            f += "P"
        if self.multi is not None:
            f += "x"
        if self.blocked is not None:
            f += "b"
        trk = self.tracking
        if trk is not None:
            f += "t"
            if trk.broken_redirect:
                f += "R"
            if trk.bcast:
                f += "B"
        if self.dirty_cas:
            f += "d"
        if self.readonly:
            f += "r"
        if self.no_evict:
            f += "e"
        return f or "N"


def _noop() -> None:
    return None


def _zero() -> int:
    return 0


def output_limit_reached(pending_bytes: int, hard: int, soft: int, soft_s: int,
                         soft_since_s: float | None) -> tuple[bool, float | None]:
    """client-output-buffer-limit for ``pending_bytes`` of output not yet written: (over the
    hard limit, or over the soft one for more than ``soft_s`` seconds; when the output first
    passed the soft limit, None when it is under it). A limit of 0 is no limit."""
    over = bool(hard) and pending_bytes >= hard
    if soft and pending_bytes >= soft:
        now = time.monotonic()
        if soft_since_s is None:
            soft_since_s = now
        elif now - soft_since_s > soft_s:
            over = True
    else:
        soft_since_s = None
    return over, soft_since_s
