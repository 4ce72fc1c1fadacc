"""One client connection: pipelined requests in, replies out strictly in request order.

    socket ─▶ RequestReader ─▶ dispatch(argv) ─┬▶ local answer ──────────────┐
                                               ├▶ Call(s) to backend(s) ─────┤ fill ReplySlot
                                               └▶ awaited: MULTI/EXEC, WATCH,│ (any order)
                                                  blocking commands          ▼
    socket ◀─ os.write at batch end ◀─ head-of-line flush of filled slots
              (leftovers: the writer task)

Every request gets a ``ReplySlot`` at the tail of a queue when it is read. Backend replies
fill slots in whatever order they arrive; the filled prefix of the queue moves to the output
buffer and the session is marked dirty. At the end of each batch of work (a backend read, a
client read, a retry) the proxy's ``Flusher`` writes every dirty session's buffer with one
non-blocking ``os.write`` — no task switch per reply. Whatever the socket does not take goes
to the session's writer task (``eventcore.writer``; started the first time that happens),
which also keeps the order while it is busy. Requests are dispatched as they are read
(no task per request): most complete through callbacks. Requests that need the session's
earlier requests to have finished first (transactions, WATCH, blocking commands) wait until
the session is idle, run on a connection of their own, and hold up later requests meanwhile,
exactly as one Redis server would.

In the ordinary state the socket is served by the poller (``eventcore.poller``): it reads,
parses and dispatches synchronously, in one pass with every other ready socket, and output is
flushed once per pass. The session's task sleeps meanwhile and takes over only when it must
wait: for a request that holds up the session, for the client to drain replies
(``max_pipeline_depth``), at EOF, QUIT, bad input or shutdown. Most of the time it has no
task at all: a session with nothing that needs one (no task of its own such as the writer or
subscriber links, no transaction or WATCH, no subscriptions) is *parked* (``_park``): its
task ends and the poller serves its socket alone (``Poller.watch``), with the same handler;
a task is started again (``Proxy.resume`` → ``run(woken)``) when the handler hands the socket
back, or when shutdown, CLIENT KILL or a rest of output needs one. A parked connection costs
its objects only: no task, no coroutine frames, no cancel scopes (the memory per idle
connection, bench/conn_memory_pieces.py).

Most requests are one backend call to one slot's master. Those skip the generic dispatch:
the command table row, arity and key finder are looked up once by the command name's exact
spelling (``_SINGLE``), and the request is its own reply slot (``SlotCall``). Every other
request goes to the function ``routes.ROUTES`` has for its row's route; route code uses the
session through ``routes.RouteSession``. Per-feature state is typed and owned by its feature's
module: ``tx`` (MULTI/WATCH, pinned.py) and ``sub`` (subscriber mode, pubsub.py).

The reading side stops when the client closes, sends QUIT, sends bad protocol (Redis' error
is sent, then the connection closes) or the proxy shuts down; replies still owed are flushed
within the shutdown grace period.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

import hiredis
import trio
from mypy_extensions import mypyc_attr

from slotgate.eventcore import sockets
from slotgate.eventcore.groups import on_group
from slotgate.eventcore.poller import EOF, HandlerError, receive_ready
from slotgate.eventcore.writer import Flusher, Writer
from slotgate.protocol.commands import (
    ALL_COMMANDS,
    COMMANDS,
    CommandInfo,
    KeyFn,
    arity_ok,
    key_finder,
    key_positions,
    lookup,
    unknown_command_error,
)
from slotgate.protocol.resp import ProtocolError, RequestReader
from slotgate.protocol.slots import SLOT_COUNT, key_slot
from slotgate.proxy import errors
from slotgate.proxy.backend.connections import BackendConnection
from slotgate.proxy.front import (
    auth,
    clients,
    databases,
    db_swap,
    local,
    monitor,
    pause,
    pinned,
    pubsub,
    tracking,
)
from slotgate.proxy.front.latency import BUCKETS, LEVELS_S
from slotgate.proxy.front.routes import ROUTES
from slotgate.proxy.ops.tally import CommandTally, bucket
from slotgate.proxy.routing import fanout
from slotgate.proxy.routing.redirect import error_frame
from slotgate.proxy.routing.router import Call

if TYPE_CHECKING:
    from slotgate.proxy.front.readwrite import ReadWrite
    from slotgate.proxy.front.server import Proxy

log = logging.getLogger("slotgate.session")

RECV_BUFFER_BYTES = 64 * 1024
_REPLY_ON: Final = 0  # clients.REPLY_ON, inlined in the compiled build
assert _REPLY_ON == clients.REPLY_ON
_MINUS = ord("-")
# Why the poller handed the client socket back to the session's task (besides EOF); and,
# for a parked connection (no task), why a task is started for it again: shutdown, CLIENT
# KILL, something to run (a task to spawn, the writer to start).
_PENDING, _QUIT, _BAD, _FULL, _STOP, _KILLED, _WAKE = range(1, 8)
# How the read loop ended.
_ENDED_EOF, _ENDED, _PARKED = range(3)
_NO_REQUESTS: list[list[bytes]] = []
_NO_RAWS: list[bytes] = []
_LEVELS_S: Final = tuple(LEVELS_S)  # (a constant of the compiled build)
_GONE: tuple[type[Exception], ...] = (trio.BrokenResourceError, trio.ClosedResourceError, OSError,
                                      HandlerError)
# argv (bytes) -> multibulk, in C. (hiredis' stub types its argument as a 1-tuple.)
pack_command: Callable[[tuple[bytes, ...]], bytes] = hiredis.pack_command  # type: ignore[assignment]




def _sockname(sock: socket.socket) -> str:
    try:
        host, port = sock.getsockname()[:2]
    except OSError:
        return "?"
    return f"{host}:{port}"


def _filled(s: Session, slot: ReplySlot | SlotCall, name: str, start_s: float,
            raw: bytes) -> None:
    """A reply slot was just filled with the raw reply (by ``ReplySlot.__call__`` or
    ``SlotCall.finish``, which drop a late duplicate after a failure: the first one wins):
    count it, and write out whatever is now ready in order. (The slot's fields come as
    arguments: read through the union type, each would be a generic attribute lookup.)"""
    s.unfilled -= 1
    s.last_cmd = name  # CLIENT LIST's cmd= and idle=
    s.last_s = start_s
    # perf_counter, not trio's clock: this only measures latency, and it is 4x cheaper; a
    # reply delivered from a node's read ends when that read came (one clock read per read).
    read_s = s.router.pool.read_s
    took_s = (read_s if read_s else time.perf_counter()) - start_s
    if raw[:1] == b"-":
        s.metrics.command(name, "error", took_s)
        s.stats.error_reply(raw)
    else:
        s.tally.ok(name, took_s)  # metrics.command(name, "ok", took_s), compiled
    lat = s.latency
    if lat.tracking:  # LATENCY HISTOGRAM, INFO latencystats: one level counted per request
        try:
            lat.histograms[name][bucket(_LEVELS_S, took_s)] += 1
        except KeyError:  # the command's first request
            lat.histograms[name] = [0] * BUCKETS
            lat.histograms[name][bucket(_LEVELS_S, took_s)] += 1
    if took_s >= s.slowlog.threshold_s:
        _log_slow(slot, took_s)
    if took_s >= lat.threshold_s and name not in _NOT_SLOWLOGGED:
        lat.spike(name, took_s)
    if s.slots[0] is slot:
        s.flush_ready()


def _log_slow(slot: ReplySlot | SlotCall, took_s: float) -> None:
    """The proxy's SLOWLOG entry of a request (slowlog.py); not for the time a blocking
    command or WAIT spent waiting (Redis logs only execution), nor EXEC (skip_slowlog)."""
    if slot.name in _NOT_SLOWLOGGED or not slot.name:
        return
    s = slot.session
    if isinstance(slot, SlotCall):
        s.slowlog.add(slot.payload, took_s, s.peer, s.name, slot.node)
    else:
        s.slowlog.add(slot.argv or [slot.name.encode()], took_s, s.peer, s.name, "")


class ReplySlot:
    """A place in the client's reply order; calling it with the raw reply fills it."""

    __slots__ = ("session", "data", "name", "start_s", "argv")

    def __init__(self, session: Session, name: str, start_s: float) -> None:
        self.session = session
        self.data: bytes | None = None
        self.name = name
        self.start_s = start_s
        self.argv = session.argv  # the request being dispatched (for the slow log)

    def __call__(self, raw: bytes) -> None:
        if self.data is None:
            self.data = raw
            _filled(self.session, self, self.name, self.start_s, raw)


def _never(raw: bytes) -> None:
    raise AssertionError("a SlotCall is finished through finish()")


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled: readwrite.py's DurableCall extends it
class SlotCall(Call):
    """A request that is exactly one backend call: the call and its reply slot in one."""

    __slots__ = ("session", "data", "name", "start_s")

    def __init__(self, session: Session, payload: bytes, slot: int, readonly: bool,
                 name: str) -> None:
        # Call's fields, set here directly (this runs once per request).
        self.router = session.router
        self.payload = payload
        self.slot = slot
        self.readonly = readonly
        self.proto = session.proto
        self.sticky = session.id
        self.done = _never
        self.redirects = 0
        self.attempts = 0
        self.deadline = 0.0
        self.node = ""
        self.fixed_node = ""
        # ReplySlot's fields.
        self.session = session
        self.data: bytes | None = None
        self.name = name
        start_s = session._batch_s  # (dispatched with the other requests of one read)
        self.start_s = start_s if start_s else time.perf_counter()

    def on_frame(self, type_byte: int, raw: bytes) -> None:
        if type_byte == _MINUS:
            self.router.on_error(self, raw)
        elif self.data is None:
            self.data = raw
            _filled(self.session, self, self.name, self.start_s, raw)

    def finish(self, raw: bytes) -> None:
        if self.data is None:
            self.data = raw
            _filled(self.session, self, self.name, self.start_s, raw)


class Session:
    # Fixed fields (one Session lives per client connection: the memory per idle connection,
    # bench/bench_conn_memory.py).
    __slots__ = ("proxy", "router", "metrics", "tally", "_slot_requests", "settings", "_sock",
                 "_flusher", "_writer", "closed", "_client_eof", "id", "peer", "laddr", "fd",
                 "created_s", "last_s", "last_cmd", "stats", "no_evict", "reply_mode", "_quiet",
                 "proto", "name", "any_slot", "latency", "slots", "unfilled", "_out", "_progress",
                 "quit", "_read_scope", "_parked", "_stopping", "_killed", "_later", "_pending_scope", "_give_up", "tx", "sub", "login",
                 "checked", "_single", "_split", "_nursery", "_flush_all", "_poller", "_reader",
                 "_batch", "_raws", "_next", "_batch_s", "_pending", "_depth", "_conns", "_conns_proto", "slowlog",
                 "argv", "tracking", "tls", "policies", "db", "_databases", "last_write_slot")

    def __init__(self, proxy: Proxy, sock: socket.socket, client_id: int, peer: str) -> None:
        self.proxy = proxy
        self.router = proxy.router
        self.metrics = proxy.metrics
        self.tally: CommandTally = proxy.metrics.tally
        self._slot_requests = proxy.metrics.slot_requests  # bumped in place per request
        self.settings = proxy.settings
        self._sock = sock  # the client's, non-blocking (eventcore.sockets); closed by run()
        self._flusher: Flusher = proxy.flusher  # sessions with replies to write
        self._writer = Writer(sock=sock, on_rest=self._start_writer)
        # Set before the socket closes (with the writer's socket): late backend replies must
        # never be written to it.
        self.closed = False
        self._client_eof = False
        self.id = client_id
        self.peer = peer
        self.laddr = _sockname(sock)
        self.fd = sock.fileno()
        self.created_s = time.monotonic()
        self.last_s = time.perf_counter()  # when the last request came (perf_counter)
        self.last_cmd = "NULL"  # the last request's command name
        self.stats = proxy.stats
        self.slowlog = proxy.slowlog
        self.latency = proxy.latency
        self.argv: list[bytes] = []  # the request being dispatched (routes other than single)
        self.no_evict = False
        self.reply_mode = clients.REPLY_ON
        # replies CLIENT REPLY drops (made when the first one is dropped)
        self._quiet: set[ReplySlot | SlotCall] | None = None
        self.proto = 2
        self.name: bytes | None = None
        # A slot whose owner answers this client's keyless commands (stable per client).
        self.any_slot = (client_id * 2654435761) % SLOT_COUNT
        self.last_write_slot = -1  # the slot of the client's last write (WAIT), -1: none yet
        # Reply slots in request order (a list, not a deque: an idle client's is 56 bytes,
        # a deque's 760; the filled prefix is cut in one ``del`` per flush, at most
        # max_pipeline_depth entries moved).
        self.slots: list[ReplySlot | SlotCall] = []
        self.unfilled = 0
        self._out = self._writer.out  # replies ready, in order
        # Set whenever replies were flushed; made by whoever waits for it (most never do).
        self._progress: trio.Event | None = None
        self.quit = False
        # While the read loop runs: the scope stop_reading() cancels.
        self._read_scope: trio.CancelScope | None = None
        # Parked: idle with no task (its socket watched by the poller alone; ``_wake``).
        self._parked = False
        self._stopping = False  # shutdown: no more reading
        self._killed = False  # CLIENT KILL (or a dead subscriber link): closed without replies
        self._later: list[Callable[[], Awaitable[None]]] | None = None  # spawned while parked
        self._pending_scope: trio.CancelScope | None = None  # a shielded request in flight
        self._give_up = False  # shutdown's deadline passed: no more shielded requests
        self.tx = pinned.Transaction()  # MULTI/WATCH state, changed only by pinned.py
        self.sub = pubsub.Subscriber()  # subscriber mode, changed only by pubsub.py
        self.tracking: tracking.ClientTracking | None = None  # changed only by tracking.py
        # Who the client is (auth.py). ``checked``: every request passes auth.refused, and the
        # fast routes below are off (empty) so that every request reaches it.
        self.login = auth.Login(proxy.users)
        self.checked = False
        self.tls = False  # came in on the TLS listener
        self.policies: ReadWrite | None = None  # read/write policies (readwrite.py), if any
        self._single = _SINGLE
        self._split = _SPLIT
        # The client's database (databases.py; with ``databases: 1`` always 0).
        self.db = 0
        self._databases = self.settings.databases > 1
        self._set_fast_routes()
        auth.derive(self)
        self._nursery: trio.Nursery | None = None
        self._flush_all = proxy.router.pool.after_batch  # node output, then client output
        self._poller = proxy.router.pool.poller
        self._reader: RequestReader | None = None
        self._batch = _NO_REQUESTS  # requests read, dispatched up to _next
        # Beside each request of _batch: its bytes as the client sent them when they are its
        # packed form (RequestReader.get_requests_packed), else b"".
        self._raws = _NO_RAWS
        self._next = 0
        # While _process dispatches: when it started (perf_counter), the start of the
        # requests it dispatches (one clock read per batch); 0.0 otherwise.
        self._batch_s = 0.0
        self._pending: Awaitable[None] | None = None
        self._depth = self.settings.max_pipeline_depth
        # Node address -> this client's connection to it (for self._conns_proto).
        self._conns: dict[str, BackendConnection] = {}
        self._conns_proto = 2

    # --- replies ---------------------------------------------------------------------------
    def new_slot(self, name: str) -> ReplySlot:
        slot = ReplySlot(self, name, time.perf_counter())
        self.slots.append(slot)
        self.unfilled += 1
        return slot

    def reply(self, name: str, raw: bytes) -> None:
        self.new_slot(name)(raw)

    def flush_ready(self) -> None:
        slots = self.slots
        out = self._out
        was_empty = not out
        quiet = self._quiet
        n = len(slots)
        i = 0
        if quiet:
            while i < n and slots[i].data is not None:
                slot = slots[i]
                i += 1
                if slot in quiet:
                    quiet.discard(slot)
                else:
                    out.append(slot.data)  # type: ignore[arg-type]
        while i < n:
            data = slots[i].data
            if data is None:
                break
            out.append(data)
            i += 1
        if i == n:
            slots.clear()
        elif i:
            del slots[:i]
        if was_empty and out and not self._writer.dirty and not self.closed:
            self._writer.dirty = True
            self._flusher.pending.append(self._writer)
        if self._progress is not None:
            self._progress.set()

    async def wait_idle(self, own: int = 1) -> None:
        """Until every request dispatched before the caller's has its reply (``own``: how
        many reply slots the caller itself holds, left unfilled)."""
        while self.unfilled > own:
            self._progress = trio.Event()
            await self._progress.wait()

    def write_raw(self, raw: bytes) -> None:
        """Output that is not the reply to a request (subscriber-mode frames)."""
        self._out.append(raw)
        if not self.closed:
            self._flusher.add(self._writer)

    def flush_output(self) -> None:
        self._flush_all()

    def spawn(self, fn: Callable[[], Awaitable[None]]) -> None:
        """Run ``fn`` as long as this session lives."""
        if self._nursery is not None:
            self._nursery.start_soon(fn)
            return
        if self._later is None:  # no task now: started with the session's next one
            self._later = []
        self._later.append(fn)
        self._wake(_WAKE)

    def abort(self) -> None:
        """Close this client's connection now (its subscriber link died)."""
        self._killed = True
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()
        else:
            self._wake(_KILLED)

    def kill(self) -> None:
        """CLIENT KILL: close this connection now, a blocking command in flight included."""
        self.abandon_pending()
        self.abort()

    # --- CLIENT REPLY OFF / SKIP: requests whose replies are dropped -----------------------
    def set_reply_mode(self, mode: int) -> None:
        """While replies are off (or the next one skipped), ``dispatch`` hands every request
        to ``_dispatch_quiet`` (one flag test on the ordinary path)."""
        self.reply_mode = mode

    def _dispatch_quiet(self, argv: list[bytes]) -> Awaitable[None] | None:
        mode = self.reply_mode
        if clients.answered_anyway(argv, mode):
            return self.dispatch(argv, True)
        if mode == clients.REPLY_SKIP:
            self.reply_mode = clients.REPLY_ON  # this request is the one skipped
        # A filled placeholder ahead of the request's reply slots holds them back until they
        # are marked; the placeholder itself writes nothing.
        hold = ReplySlot(self, "", 0.0)
        slots = self.slots
        slots.append(hold)
        try:
            return self.dispatch(argv, True)
        finally:
            for slot in reversed(slots):  # the slots this request took, after the hold
                if slot is hold:
                    break
                if self._quiet is None:
                    self._quiet = set()
                self._quiet.add(slot)
            hold.data = b""
            if slots and slots[0] is hold:
                self.flush_ready()

    def set_checked(self, checked: bool) -> None:
        """Whether requests pass auth.refused; the fast routes are off while they do, while
        the client tracks keys (tracking.remember sees every request) and while a CLIENT
        PAUSE is on (pause.check sees every request) and while anyone MONITORs."""
        self.checked = checked
        self._set_fast_routes()

    def set_db(self, db: int) -> None:
        """SELECT: a database above 0 has its keys prefixed, so takes no fast route."""
        self.db = db
        self._set_fast_routes()

    def _set_fast_routes(self) -> None:
        proxy = self.proxy
        slow = (self.checked or self.db != 0 or self.tracking is not None
                or proxy.pause.kind != 0 or proxy.monitors.active or bool(proxy.swaps.dbs))
        self._single = (_NO_FAST_ROUTE if slow
                        else _SINGLE_WITH_DATABASES if self._databases else _SINGLE)
        self._split = _NO_FAST_ROUTE if slow else _SPLIT

    def _start_writer(self) -> None:
        """The first time the socket did not take all the output: from now on the writer
        task sends the rests (an idle or quick client never costs a task for it)."""
        nursery = self._nursery
        if nursery is None:  # parked: a task is started for it (run() starts the writer)
            self._wake(_WAKE)
            return
        self._writer.on_rest = None
        try:
            nursery.start_soon(self._writer.run, self._on_sent)
        except RuntimeError:  # the session is ending (its nursery takes no new task): the
            pass  # output is dropped with the connection, as when its writer task is cancelled

    def _on_sent(self) -> None:
        if self._progress is not None:
            self._progress.set()

    async def _drain(self) -> None:
        """Until every owed reply has been written."""
        while self.slots or self._out:
            self._progress = trio.Event()
            with trio.move_on_after(0.01):
                await self._progress.wait()

    # --- reading and dispatch ----------------------------------------------------------------
    def stop_reading(self) -> None:
        """Read no more requests (shutdown); requests already read still get their replies."""
        self._stopping = True
        scope = self._read_scope
        if scope is not None:
            scope.cancel()
        else:
            self._wake(_STOP)

    async def run(self, woken: object = None) -> None:
        """Serve the client until its connection closes, or until it is parked: idle with
        nothing in flight that needs a task (``_park``), its socket left to the poller alone.
        A parked connection gets a task again (``_wake``: Proxy.resume) when the poller hands
        it back (``woken``: why, as ``park`` gives it) or shutdown, a kill or a rest of output
        needs one. ``woken`` is None for a new connection."""
        if woken is None:
            self.metrics.client_connected()
        parked = False
        try:
            # The client went away (reset, broken pipe), or serving it hit a bug (logged by
            # the poller): nothing to answer any more.
            with on_group(_GONE, self._gone):
                if isinstance(woken, BaseException):  # a read error while parked
                    raise woken
                async with trio.open_nursery() as nursery:
                    self._nursery = nursery
                    if self._killed or woken == _KILLED:
                        return
                    later, self._later = self._later, None
                    for fn in later or ():
                        nursery.start_soon(fn)
                    if self._out and self._writer.on_rest is not None:
                        self._start_writer()  # a rest left while parked
                    # (woken from inside its own handler, by a spawn: what the handler
                    # returned then was not seen)
                    if self._pending is not None:
                        woken = _PENDING
                    elif self.quit:
                        woken = _QUIT
                    ended = await self._read_loop(woken)
                    if ended == _PARKED:
                        parked = True
                        return
                    if ended == _ENDED:
                        # QUIT, bad input or shutdown
                        deadline = self.proxy.stop_deadline
                        if deadline is None:
                            deadline = (trio.current_time()
                                        + self.settings.shutdown_grace_ms / 1000)
                        with trio.move_on_at(deadline):
                            await self._drain()
                    nursery.cancel_scope.cancel()
        finally:
            if parked:
                pass  # the poller serves it; the task that wakes it closes it
            else:
                self._nursery = None
                await self._close()

    async def close_parked(self) -> None:
        """The proxy stops with this connection parked (no task to close it): close it."""
        if self._parked:
            self._parked = False
            self._poller.unwatch(self._sock)
            await self._close()

    async def _close(self) -> None:
        self.closed = True
        self._writer.sock = None
        self.metrics.client_disconnected()
        if self.tracking is not None:
            tracking.reset(self)
        monitor.reset(self)
        with trio.CancelScope(shield=True):
            await self.tx.aclose()
            await self.sub.aclose()
            sockets.close(self._sock)

    def _gone(self, exc: Exception) -> None:
        log.debug("client %s gone: %r", self.peer, exc)

    def _can_park(self) -> bool:
        """Idle with nothing that needs the session's task: no task of its own running (the
        writer, subscriber links), no transaction or WATCH, no subscriptions, not stopping."""
        nursery = self._nursery
        tx = self.tx
        return (nursery is not None and not nursery.child_tasks and tx.queued is None
                and tx.watch is None and self.sub.link is None and not self._stopping
                and not self._killed and self._pending is None)

    def _park(self) -> None:
        """Leave the socket to the poller alone; this task ends (``run`` returns)."""
        self._nursery = None
        self._parked = True
        # (its request parser stays: it may hold the start of a request, parsed already)
        self._poller.watch(self._sock, self._on_readable, RECV_BUFFER_BYTES, self._on_wake)

    def _on_wake(self, value: object) -> None:
        """The poller hands a parked connection back (``value``: as ``park`` returns it)."""
        self._parked = False
        self._resume(value)

    def _wake(self, why: int) -> None:
        """Start a task for a parked connection (nothing to do if it is not parked)."""
        if self._parked:
            self._parked = False
            self._poller.unwatch(self._sock)
            self._resume(why)

    def _resume(self, value: object) -> None:
        try:
            self.proxy.resume(self, value)
        except RuntimeError:  # the proxy's clients' nursery is closed: it has stopped
            self.closed = True
            self._writer.sock = None
            self.metrics.client_disconnected()
            self.proxy.sessions.discard(self)
            sockets.close(self._sock)

    async def _read_loop(self, woken: object) -> int:
        """Read and dispatch until EOF (_ENDED_EOF), QUIT / bad input / shutdown (_ENDED), or
        until the session parks (_PARKED). ``woken``: why the poller handed a parked socket
        back (None: nothing, read on)."""
        self._depth = depth = self.settings.max_pipeline_depth
        flush = self._flush_all
        # ``object``: park returns EOF too (compiled, a variable typed ``int | None`` refuses
        # it).
        reason: object = woken
        # Only waiting for input is cancelled by stop_reading(); a request being dispatched
        # (a blocking command, a transaction) is shielded and runs to its end.
        with trio.CancelScope() as scope:
            self._read_scope = scope
            if self._stopping:
                scope.cancel()
            try:
                while True:
                    if reason is None or reason == _FULL or reason == _WAKE:
                        # Backpressure: stop reading while too many replies are owed, or
                        # while the client is not taking what was already written (the
                        # writer is blocked).
                        while len(self.slots) >= depth or (self._writer.sending and self._out):
                            self._progress = trio.Event()
                            await self._progress.wait()
                        # What is left of the last batch, if anything.
                        reason = self._process()
                        if reason is None:
                            flush()
                            if self._can_park():
                                self._park()
                                return _PARKED
                            reason = await self._poller.park(self._sock, self._on_readable,
                                                             RECV_BUFFER_BYTES)
                    if reason is EOF:
                        return _ENDED_EOF
                    flush()
                    if reason == _PENDING:
                        pending, self._pending = self._pending, None
                        reader = self._reader  # made by the read that brought the request
                        assert pending is not None and reader is not None
                        await self._await_pending(pending, reader)
                        if self._client_eof:
                            return _ENDED_EOF
                        if self.quit:
                            flush()
                            return _ENDED
                    elif reason != _FULL and reason != _WAKE:  # QUIT, bad input, shutdown
                        return _ENDED
                    reason = None
            finally:
                self._read_scope = None
        return _ENDED

    def _on_readable(self, data: bytes) -> int | None:
        """The poller's handler for the client socket: parse, dispatch; hand the socket back
        to the session's task (return why) when it has to wait."""
        reader = self._reader
        if reader is None:  # the client's first bytes (an idle client holds no reader)
            s = self.settings
            reader = self._reader = RequestReader(
                max_bulk_len=s.max_bulk_len, max_inline_len=s.max_inline_len,
                max_multibulk_len=s.max_multibulk_len)
        reader.feed(data)
        reason = self._process()
        if reason is None:
            if len(self.slots) < self._depth and not (self._writer.sending and self._out):
                return None
            reason = _FULL
        return reason

    def _process(self) -> int | None:
        """Dispatch every complete request; None, or why the session's task must take over."""
        self._batch_s = time.perf_counter()
        try:
            return self._process_batch()
        finally:
            self._batch_s = 0.0

    def _process_batch(self) -> int | None:
        reqs = self._batch
        raws = self._raws
        i = self._next
        while True:
            if i >= len(reqs):
                reader = self._reader
                if reader is None:  # nothing read yet
                    return None
                try:
                    reqs, raws = reader.get_requests_packed()
                except ProtocolError as exc:
                    self._batch = _NO_REQUESTS
                    self._raws = _NO_RAWS
                    self._next = 0
                    self.metrics.protocol_error()
                    self.reply("protocol_error", error_frame(str(exc)))
                    return _BAD
                i = 0
                if not reqs:
                    self._batch = _NO_REQUESTS
                    self._raws = _NO_RAWS
                    self._next = 0
                    return None
            argv = reqs[i]
            raw = raws[i]
            i += 1
            pending = self.dispatch(argv, False, raw)
            if pending is not None or self.quit:
                self._batch = reqs
                self._raws = raws
                self._next = i
                if pending is not None:
                    self._pending = pending
                    return _PENDING
                return _QUIT

    async def _await_pending(self, pending: Awaitable[None], reader: RequestReader) -> None:
        """Run a request that holds up the session (blocking command, transaction, …).

        Shielded from shutdown, so it finishes; meanwhile the client's socket is still read
        (requests are buffered, not dispatched) so that a client that goes away cancels it,
        as Redis frees a blocked client that disconnects."""
        with trio.CancelScope(shield=True) as self._pending_scope:
            if self._give_up:
                self._pending_scope.cancel()
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._watch_input, reader, nursery.cancel_scope)
                    await pending
                    nursery.cancel_scope.cancel()
            finally:
                self._pending_scope = None

    def abandon_pending(self) -> None:
        """Shutdown is over (its deadline passed, or a second signal): the shielded request in
        flight, if any, and any later one are given up without their replies."""
        self._give_up = True
        if self._pending_scope is not None:
            self._pending_scope.cancel()

    async def _watch_input(self, reader: RequestReader, scope: trio.CancelScope) -> None:
        limit = self.settings.max_inline_len + RECV_BUFFER_BYTES
        while reader.buffered_bytes() < limit:
            data = await receive_ready(self._sock, RECV_BUFFER_BYTES)
            if not data:
                self._client_eof = True
                scope.cancel()
                return
            reader.feed(data)
        await trio.sleep_forever()  # enough buffered: stop reading until the request ends

    def dispatch(self, argv: list[bytes], loud: bool = False,
                 raw: bytes = b"") -> Awaitable[None] | None:
        """Route one request. Returns an awaitable when the request must finish before the
        next one is read (the caller awaits it), else None. ``loud``: its reply is written
        whatever CLIENT REPLY says (``_dispatch_quiet`` decided). ``raw``: the request as the
        client sent it, when that is exactly its packed form (sent on as it is), or b""."""
        if self.reply_mode != _REPLY_ON and not loud:
            return self._dispatch_quiet(argv)
        fast = self._single.get(argv[0])
        if fast is not None and self.tx.queued is None and self.sub.link is None:
            keys, arity, readonly, cmd = fast
            argc = len(argv)
            if argc == arity if arity > 0 else argc >= -arity:
                if keys is _FIRST_KEY:  # GET, SET ... (argc >= 2 by their arity)
                    slot: int | None = key_slot(argv[1])
                else:
                    positions = keys(argv)
                    if len(positions) == 1:
                        slot = key_slot(argv[positions[0]])
                    else:
                        slot = self._slot_at(argv, positions)
                if slot is not None:
                    if self.policies is None:
                        self._send_call(raw or pack_command(tuple(argv)), slot, readonly, cmd)
                    else:
                        self.policies.send_single(argv, slot, readonly, cmd)
                    return None
                # Keys in several slots: the slow path (routes.single, its CROSSSLOT or a
                # route across slots).
        self.argv = argv
        split = self._split.get(argv[0])
        if split is not None and self.tx.queued is None and self.sub.link is None:
            if arity_ok(split, len(argv)):
                fanout.split(self, argv, split)
                return None
        if self.checked and auth.refused(self, argv):
            return None
        if self.proxy.pause.kind:
            held = pause.check(self, argv)
            if held is not None:
                return held  # dispatched again when the pause ends
        if self._databases and self.proxy.swaps.dbs:
            held = db_swap.check(self, argv)
            if held is not None:
                return held  # dispatched again when the swap ends
        if self.proxy.monitors.active:
            self.proxy.monitors.feed(self, argv)
        if self._databases:
            done, argv, pending = databases.dispatch(self, argv)
            if done:
                return pending
        if self.tx.queued is not None and argv[0].lower() not in pinned.OUTSIDE_MULTI:
            pinned.queue(self, argv)
            return None
        info = lookup(argv)
        if info is None:
            extra = local.EXTRA.get(b"|".join(a.lower() for a in argv[:2]))
            reply = extra(self, argv) if extra is not None else None
            if reply is not None:
                self.reply("other", reply)
                return None
            self.stats.reject("other")
            self.reply("other", b"-" + unknown_command_error(argv) + b"\r\n")
            return None
        if not arity_ok(info, len(argv)):
            self.stats.reject(info.name)
            self.reply(info.name, error_frame(errors.WRONG_ARITY.format(name=info.name)))
            return None
        if self.tracking is not None:
            self.proxy.tracker.remember(self, argv, info)
        if self.sub.link is not None:
            name = argv[0].lower()
            if pubsub.refused_while_subscribed(self, name):
                self.stats.reject(info.name)
                self.reply(info.name, error_frame(pubsub.CANT_EXECUTE.format(name=info.name)))
                return None
            if pubsub.forwarded_ping(self, name):
                return pubsub.command(self, argv, info.name)
            if name in pubsub.LEAVING:
                route = ROUTES[info.route]
                return pubsub.leave(self, lambda: route(self, argv, info))
        return ROUTES[info.route](self, argv, info)

    # --- the interface route code uses (routes.RouteSession) ---------------------------------
    @property
    def local_address(self) -> str:
        """``host:port`` the client connected to (cluster emulation's default address)."""
        try:
            host, port = self._sock.getsockname()[:2]
        except OSError:
            return self.proxy.listen_address
        return f"{host}:{port}"

    def slot_of(self, argv: list[bytes]) -> int | None:
        """The one slot of argv's keys; ``any_slot`` if keyless; None if they span slots.

        Arguments that route by slot without being keys (SPUBLISH's shard channel) count."""
        return self._slot_at(argv, key_positions(argv, include_not_key=True))

    def _slot_at(self, argv: list[bytes], positions: list[int]) -> int | None:
        if not positions:
            return self.any_slot
        slot = key_slot(argv[positions[0]])
        for p in positions[1:]:
            if key_slot(argv[p]) != slot:
                return None
        return slot

    def send_single(self, argv: list[bytes], slot: int, readonly: bool, name: str) -> None:
        """One request as one call to ``slot``'s master, the call being its reply slot; with
        read/write policies on (readwrite.py), as they decide."""
        if self.policies is not None:
            self.policies.send_single(argv, slot, readonly, name)
        else:
            self.send_master(argv, slot, readonly, name)

    def send_master(self, argv: list[bytes], slot: int, readonly: bool, name: str) -> None:
        """One request as one call to ``slot``'s master, the call being its reply slot."""
        self._send_call(pack_command(tuple(argv)), slot, readonly, name)

    def _send_call(self, payload: bytes, slot: int, readonly: bool, name: str) -> None:
        """``send_master`` of a request packed already (``payload``)."""
        call = SlotCall(self, payload, slot, readonly, name)
        self.slots.append(call)
        self.unfilled += 1
        if not readonly:
            self.last_write_slot = slot
        owner = self.router.topology.owners[slot]
        if owner is None:
            self.router.send(call)  # unserved slot: the router's retry path (it counts it)
            return
        self._slot_requests[slot] += 1
        call.node = owner
        if self._conns_proto != self.proto:
            self._conns.clear()
            self._conns_proto = self.proto
        conn = self._conns.get(owner)
        if conn is None:
            conn = self._conns[owner] = self.router.pool.get(owner, self.proto, self.id)
        conn.send(call.payload, call)

    def conn_to(self, node: str) -> BackendConnection:
        """This client's shared connection to ``node`` (always the same one, for order)."""
        if self._conns_proto != self.proto:
            self._conns.clear()
            self._conns_proto = self.proto
        conn = self._conns.get(node)
        if conn is None:
            conn = self._conns[node] = self.router.pool.get(node, self.proto, self.id)
        return conn


# Plain (non-container) commands routed "single", under their lower- and upper-case
# spellings: (key finder incl. not-key args, arity, readonly, the row's name).
_SINGLE: dict[bytes, tuple[KeyFn, int, bool, str]] = {}
for _name, _info in COMMANDS.items():
    if _info.route == "single" and not _info.subcommands:
        for _spelling in (_name, _name.upper()):
            _SINGLE[_spelling] = (key_finder(_info, include_not_key=True), _info.arity,
                                  "readonly" in _info.flags, _info.name)
# The key finder of the rows whose one key is argument 1 whatever the request (GET, SET,
# INCR ...): dispatch takes that key without calling it (an interpreted call per request).
_FIRST_KEY: Final = _SINGLE[b"get"][0]
assert _FIRST_KEY([b"get", b"k"]) == [1] and _FIRST_KEY is _SINGLE[b"set"][0]
assert all(row[1] >= 2 or row[1] <= -2 for row in _SINGLE.values() if row[0] is _FIRST_KEY)

# With numbered databases: the same, less the commands databases.py answers (MOVE).
_SINGLE_WITH_DATABASES = {spelling: row for spelling, row in _SINGLE.items()
                          if row[3] not in databases.NOT_FAST}

# Commands split by slot (MGET, MSET, DEL …), by the same spellings: their row.
_SPLIT: dict[bytes, CommandInfo] = {}
_NO_FAST_ROUTE: dict[bytes, Any] = {}  # a checked session's fast routes: none
# Requests the slow log leaves out: the time they spent waiting is not execution.
_NOT_SLOWLOGGED = frozenset({"exec", "wait", *(
    i.name for i in ALL_COMMANDS.values() if "blocking" in i.flags or "skip_slowlog" in i.flags)})
for _name, _info in COMMANDS.items():
    if _info.route == "split" and not _info.subcommands:
        for _spelling in (_name, _name.upper()):
            _SPLIT[_spelling] = _info
