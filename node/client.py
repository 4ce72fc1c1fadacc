"""Per-connection state (sans-IO). The trio shell in node/server.py owns the socket.

A handler gets the ``Client`` and reads/writes its fields directly; the ones meant for
handlers are documented in node/commands/__init__.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from eventcore.writer import Writer
from node.keyspace import Database, now_ms

if TYPE_CHECKING:
    from node.commands.registry import Command
    from node.server import Server



class _BlockedMarker(bytes):
    """Type of ``BLOCKED``: compared by identity, and harmless (empty) if ever sent."""


# Returned by a handler (through ``Client.block``) when the client is now parked.
BLOCKED = _BlockedMarker()

NULL_BULK = {2: b"$-1\r\n", 3: b"_\r\n"}
NULL_ARRAY = {2: b"*-1\r\n", 3: b"_\r\n"}

REPLY_ON, REPLY_OFF, REPLY_SKIP_NEXT, REPLY_SKIP = 0, 1, 2, 3

ServeFn = Callable[["Client", Database, bytes], "bytes | None"]


class BlockState:
    """Why a client is parked: the keys, the deadline, and how to serve it when a key is ready."""

    __slots__ = ("db", "keys", "deadline_s", "serve", "timeout_reply", "argv")

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


class Client:
    """One client connection's state."""

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
        self.authenticated = not server.config.requirepass
        self.user = b"default"
        # MULTI: queued (command, argv) or None outside a transaction
        self.multi: list[tuple[Command, list[bytes]]] | None = None
        self.multi_error = False  # a queue-time error happened: EXEC answers EXECABORT
        self.dirty_cas = False  # a watched key was touched
        self.in_exec = False
        self.watched: list[tuple[Database, bytes]] = []
        self.blocked: BlockState | None = None
        self.reply_mode = REPLY_ON
        self.monitor = False
        self.readonly = False  # cluster READONLY
        self.asking = False  # cluster ASKING (one command)
        self.subscriptions = 0  # channels + patterns (+ shard channels), for pub/sub mode
        self.close_after_reply = False
        self.killed = False
        self.last_cmd = "NULL"
        # set by a handler to replicate something other than its argv (list of argvs)
        self.propagate_as: list[list[bytes]] | None = None
        self.out: list[bytes] = []
        self.writer = Writer(self.out)  # writes ``out`` to the socket (set up by the server)
        # Set by the server: called when the client must wake (unblocked, killed).
        self.wake: Callable[[], None] = _noop
        self.extra: dict[str, Any] = {}  # room for other modules' per-client state
        self.slow = False
        self.update_slow()

    @property
    def db_index(self) -> int:
        return self.db.index

    def set_resp(self, proto: int) -> None:
        self.resp = proto
        self.null_bulk = NULL_BULK[proto]
        self.null_array = NULL_ARRAY[proto]

    def update_slow(self) -> None:
        """Recompute whether this client's commands need the full checks (auth, MULTI, ...)."""
        self.slow = (
            not self.authenticated
            or self.multi is not None
            or self.reply_mode != REPLY_ON
            or self.subscriptions > 0
            or self.asking
            or self.server.slow  # kept current by Server.update_slow
        )

    # -- blocking ------------------------------------------------------------------------
    def block(
        self, keys: list[bytes], timeout_s: float, serve: ServeFn, argv: list[bytes],
        timeout_reply: bytes | None = None,
    ) -> bytes:
        """Park this client until ``serve`` succeeds for one of ``keys`` or ``timeout_s``
        passes (0 = forever). Return the result straight from the handler. Inside EXEC (or
        anything that cannot block) the timeout reply comes back at once instead."""
        reply = self.null_array if timeout_reply is None else timeout_reply
        if self.in_exec:
            return reply
        deadline = self.server.block_deadline(timeout_s)
        self.blocked = BlockState(self.db, keys, deadline, serve, reply, argv)
        for key in keys:
            q = self.db.blocking.get(key)
            if q is None:
                from collections import deque

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
        f = ""
        if self.multi is not None:
            f += "x"
        if self.blocked is not None:
            f += "b"
        if self.dirty_cas:
            f += "d"
        if self.subscriptions:
            f += "P"
        if self.monitor:
            f += "O"
        if self.readonly:
            f += "r"
        return f or "N"


def _noop() -> None:
    return None
