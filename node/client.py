"""Per-connection state (sans-IO). The trio shell in node/server.py owns the socket.

A handler gets the ``Client`` and reads/writes its fields directly; the ones meant for
handlers are documented in node/commands/__init__.py.

The fast-path flag ``slow``, read once per request by node/dispatch.py, is derived and never
assigned by hand: its inputs are ``SlowInput`` fields (here: ``authenticated``, ``multi``,
``reply_mode``, ``subscriptions``, ``asking``; on the server: ``monitors``,
``command_checks``, ``cluster_route``, ``cluster_keypos``), and assigning one recomputes the
flag in ``Client._refresh_slow`` (``Server._refresh_slow`` for the server-wide part, which
then refreshes every client). No caller has to remember to update it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, overload

from node.keyspace import Database, now_ms

if TYPE_CHECKING:
    import socket

    import trio

    from node.commands.pubsub import ClientSubs
    from node.commands.registry import Command
    from node.server import Server

_T = TypeVar("_T")


class _Refreshes(Protocol):
    __dict__: dict[str, Any]

    def _refresh_slow(self) -> None: ...


class SlowInput(Generic[_T]):
    """A field the fast-path flag depends on: assigning it recomputes the flag (the owner's
    ``_refresh_slow``).

    Only ``__set__`` exists at run time, so a read finds the value in the instance's
    ``__dict__`` as for a plain attribute, with no function call (handlers and the
    dispatcher read these fields often)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __set__(self, obj: _Refreshes, value: _T) -> None:
        obj.__dict__[self.name] = value
        obj._refresh_slow()

    if TYPE_CHECKING:  # for the type checker only: at run time reads bypass the descriptor
        @overload
        def __get__(self, obj: None, owner: type) -> SlowInput[_T]: ...

        @overload
        def __get__(self, obj: object, owner: type) -> _T: ...

        def __get__(self, obj: object, owner: type) -> SlowInput[_T] | _T: ...



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

    # -- inputs of the fast-path flag (assigning one recomputes ``slow``) ----------------
    authenticated: SlowInput[bool] = SlowInput()
    # MULTI: queued (command, argv) or None outside a transaction
    multi: SlowInput[list[tuple[Command, list[bytes]]] | None] = SlowInput()
    reply_mode: SlowInput[int] = SlowInput()  # REPLY_ON, REPLY_OFF, ...
    subscriptions: SlowInput[int] = SlowInput()  # channels + patterns (+ shard): pub/sub mode
    asking: SlowInput[bool] = SlowInput()  # cluster ASKING (one command)

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
        # The fast-path inputs start in the instance dict; ``slow`` is computed once all are set.
        self.__dict__.update(authenticated=not server.config.requirepass, multi=None,
                             reply_mode=REPLY_ON, subscriptions=0, asking=False)
        self.user = b"default"
        self.multi_error = False  # a queue-time error happened: EXEC answers EXECABORT
        self.dirty_cas = False  # a watched key was touched
        self.in_exec = False
        self.watched: list[tuple[Database, bytes]] = []
        self.blocked: BlockState | None = None
        self.monitor = False  # in the server's ``monitors`` (Server.add_monitor)
        self.readonly = False  # cluster READONLY
        self.close_after_reply = False
        self.killed = False
        self.last_cmd = "NULL"
        # set by a handler to replicate something other than its argv (list of argvs)
        self.propagate_as: list[list[bytes]] | None = None
        self.out: list[bytes] = []
        # Set by the server: called when the client must wake (unblocked, killed).
        self.wake: Callable[[], None] = _noop
        # -- the connection, as node/server.py serves it -----------------------------------
        self.fd = 8  # the socket's descriptor, for CLIENT LIST (8 for internal clients)
        self.rawsock: socket.socket | None = None  # for non-blocking sends outside its task
        self.cancel_scope: trio.CancelScope | None = None  # ends the client's task (a kill)
        self.running = False  # its requests are being run (the output is not to be sent yet)
        self.sending = False  # a send of its output is in progress
        self.flush_scheduled = False  # a flush task for its output is started
        self.unblock_event: trio.Event | None = None  # set to end a blocking wait
        # -- features' per-client state --------------------------------------------------
        # EXEC with writes propagated: MULTI went out before the first (EXEC closes it)
        self.exec_multi_propagated = False
        self.pubsub: ClientSubs | None = None  # subscriptions (node/commands/pubsub.py)
        self.is_replica = False  # a replica of ours (PSYNC/SYNC)
        self.is_master = False  # our master's link (node/repl_replica.py)
        self.repl_listening_port = 0  # REPLCONF listening-port
        self.repl_ip: str | None = None  # REPLCONF ip-address
        self.slow = False  # the fast-path flag: derived, see the module docstring
        self._refresh_slow()

    @property
    def db_index(self) -> int:
        return self.db.index

    def set_resp(self, proto: int) -> None:
        self.resp = proto
        self.null_bulk = NULL_BULK[proto]
        self.null_array = NULL_ARRAY[proto]

    def _refresh_slow(self) -> None:
        """Recompute whether this client's commands need the full checks (auth, MULTI, ...).
        Called only when an input changes (``SlowInput``, ``Server._refresh_slow``)."""
        self.slow = (
            not self.authenticated
            or self.multi is not None
            or self.reply_mode != REPLY_ON
            or self.subscriptions > 0
            or self.asking
            or self.server.slow
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
