"""One client connection: pipelined requests in, replies out strictly in request order.

    socket ─▶ RequestReader ─▶ dispatch(argv) ─┬▶ local answer ──────────────┐
                                               ├▶ Call(s) to backend(s) ─────┤ fill ReplySlot
                                               └▶ awaited: MULTI/EXEC, WATCH,│ (any order)
                                                  blocking commands          ▼
    socket ◀─ os.write at batch end ◀─ head-of-line flush of filled slots
              (leftovers: writer task, send_all)

Every request gets a ``ReplySlot`` at the tail of a queue when it is read. Backend replies
fill slots in whatever order they arrive; the filled prefix of the queue moves to the output
buffer and the session is marked dirty. At the end of each batch of work (a backend read, a
client read, a retry) ``OutputFlusher.flush`` writes every dirty session's buffer with one
non-blocking ``os.write`` — no task switch per reply. Whatever the socket does not take goes
to the session's writer task (``send_all``), which also keeps the order while it is busy. Requests are dispatched as they are read
(no task per request): most complete through callbacks. Requests that need the session's
earlier requests to have finished first (transactions, WATCH, blocking commands) wait until
the session is idle, run on a connection of their own, and hold up later requests meanwhile,
exactly as one Redis server would.

The reading side stops when the client closes, sends QUIT, sends bad protocol (Redis' error
is sent, then the connection closes) or the proxy shuts down; replies still owed are flushed
within the shutdown grace period.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import hiredis
import trio

from protocol.commands import CommandInfo, arity_ok, key_positions, lookup, unknown_command_error
from protocol.resp import ProtocolError, RequestReader
from protocol.slots import SLOT_COUNT, key_slot
from proxy import errors
from proxy.backend import DirectConnection, receive_ready
from proxy.redirect import error_frame
from proxy.router import Call

if TYPE_CHECKING:
    from proxy.server import Proxy

log = logging.getLogger("slotgate.session")

RECV_BUFFER_BYTES = 64 * 1024
CROSSSLOT = error_frame(errors.CROSSSLOT)
# argv (bytes) -> multibulk, in C. (hiredis' stub types its argument as a 1-tuple.)
pack_command: Callable[[tuple[bytes, ...]], bytes] = hiredis.pack_command  # type: ignore[assignment]


class OutputFlusher:
    """Sessions with replies waiting to be written; flushed at the end of each batch."""

    __slots__ = ("pending",)

    def __init__(self) -> None:
        self.pending: list[Session] = []

    def flush(self) -> None:
        while self.pending:
            pending, self.pending = self.pending, []
            for session in pending:
                session.write_now()
_ROUTE_HANDLERS: dict[str, str] = {}  # route -> Session method name, filled below


class ReplySlot:
    """A place in the client's reply order; calling it with the raw reply fills it."""

    __slots__ = ("session", "data", "name", "start_s")

    def __init__(self, session: Session, name: str, start_s: float) -> None:
        self.session = session
        self.data: bytes | None = None
        self.name = name
        self.start_s = start_s

    def __call__(self, raw: bytes) -> None:
        if self.data is not None:
            return  # filled already (a late duplicate after a failure): keep the first
        self.data = raw
        s = self.session
        s.unfilled -= 1
        # perf_counter, not trio's clock: this only measures latency, and it is 4x cheaper.
        s.metrics.command(self.name, "error" if raw[:1] == b"-" else "ok",
                          time.perf_counter() - self.start_s)
        if s.slots[0] is self:
            s.flush_ready()


class Session:
    def __init__(self, proxy: Proxy, stream: trio.SocketStream, client_id: int, peer: str) -> None:
        self.proxy = proxy
        self.router = proxy.router
        self.metrics = proxy.metrics
        self.settings = proxy.settings
        self.stream = stream
        self._fd = stream.socket.fileno()
        self._flusher: OutputFlusher = proxy.flusher
        self._dirty = False
        self._writing = False
        # Set before the socket closes: late backend replies must never reach os.write, whose
        # file descriptor number may by then belong to another connection.
        self.closed = False
        self._client_eof = False
        self.id = client_id
        self.peer = peer
        self.proto = 2
        self.name: bytes | None = None
        # A slot whose owner answers this client's keyless commands (stable per client).
        self.any_slot = (client_id * 2654435761) % SLOT_COUNT
        self.slots: deque[ReplySlot] = deque()
        self.unfilled = 0
        self._out: list[bytes] = []
        self._writer_wakeup = trio.Event()
        self._progress = trio.Event()  # set whenever replies were flushed
        self.quit = False
        self._read_scope = trio.CancelScope()
        # Transactions (see pinned.py).
        self.multi: list[list[bytes]] | None = None
        self.multi_dirty = False
        self.watch: DirectConnection | None = None
        self.direct: dict[str, DirectConnection] = {}
        self.link: pubsub.Link | None = None  # subscriber mode (see pubsub.py)
        self._nursery: trio.Nursery | None = None
        self._routes = {route: getattr(self, method) for route, method in _ROUTE_HANDLERS.items()}

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
        while slots and slots[0].data is not None:
            out.append(slots.popleft().data)  # type: ignore[arg-type]
        if was_empty and out and not self._dirty and not self.closed:
            self._dirty = True
            self._flusher.pending.append(self)
        self._progress.set()

    def write_now(self) -> None:
        """Write the output buffer without blocking; the writer task takes any rest."""
        self._dirty = False
        out = self._out
        if not out or self._writing or self.closed:
            return  # the writer task is mid-send and will take what is queued, in order
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        try:
            written = os.write(self._fd, data)
        except OSError:
            # Would block, or the client is gone: the writer's send_all waits or reports it.
            written = 0
        if written < len(data):
            out.append(data[written:])
            self._writer_wakeup.set()

    async def wait_idle(self, own: int = 1) -> None:
        """Until every request dispatched before the caller's has its reply (``own``: how
        many reply slots the caller itself holds, left unfilled)."""
        while self.unfilled > own:
            self._progress = trio.Event()
            await self._progress.wait()

    def write_raw(self, raw: bytes) -> None:
        """Output that is not the reply to a request (subscriber-mode frames)."""
        self._out.append(raw)
        if not self._dirty and not self.closed:
            self._dirty = True
            self._flusher.pending.append(self)

    def flush_output(self) -> None:
        self._flusher.flush()

    def spawn(self, fn: Callable[[], Awaitable[None]]) -> None:
        """Run ``fn`` as long as this session lives."""
        assert self._nursery is not None
        self._nursery.start_soon(fn)

    def abort(self) -> None:
        """Close this client's connection now (its subscriber link died)."""
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    async def _write_loop(self) -> None:
        out = self._out
        while True:
            if not out:
                self._writer_wakeup = trio.Event()
                await self._writer_wakeup.wait()
                continue
            data = out[0] if len(out) == 1 else b"".join(out)
            out.clear()
            self._writing = True
            try:
                await self.stream.send_all(data)
            finally:
                self._writing = False
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
        self._read_scope.cancel()

    async def run(self) -> None:
        self.metrics.client_connected()
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._write_loop)
                eof = await self._read_loop()
                if not eof:
                    with trio.move_on_after(self.settings.shutdown_grace_ms / 1000):
                        await self._drain()
                nursery.cancel_scope.cancel()
        except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as eg:
            # The client went away (reset, broken pipe): nothing to answer any more.
            log.debug("client %s gone: %r", self.peer, eg.exceptions[0])
        finally:
            self.closed = True
            self.metrics.client_disconnected()
            with trio.CancelScope(shield=True):
                await self._close_pinned()
                await self.stream.aclose()

    async def _close_pinned(self) -> None:
        conns: list[DirectConnection | pubsub.Link] = list(self.direct.values())
        if self.watch is not None:
            conns.append(self.watch)
        if self.link is not None:
            conns.append(self.link)
        self.direct.clear()
        self.watch = None
        self.link = None
        for conn in conns:
            await conn.aclose()

    async def _read_loop(self) -> bool:
        """Read and dispatch until EOF (True) or QUIT / bad input / shutdown (False)."""
        s = self.settings
        reader = RequestReader(max_bulk_len=s.max_bulk_len, max_inline_len=s.max_inline_len,
                               max_multibulk_len=s.max_multibulk_len)
        depth = s.max_pipeline_depth
        flush = self._flusher.flush
        # Only waiting for input is cancelled by stop_reading(); a request being dispatched
        # (a blocking command, a transaction) is shielded and runs to its end.
        with self._read_scope:
            while True:
                # Backpressure: stop reading while too many replies are owed, or while the
                # client is not taking what was already written (the writer is blocked).
                while len(self.slots) >= depth or (self._writing and self._out):
                    self._progress = trio.Event()
                    await self._progress.wait()
                data = await receive_ready(self._fd, RECV_BUFFER_BYTES)
                if not data:
                    return True
                reader.feed(data)
                while True:
                    try:
                        requests = reader.get_requests()
                    except ProtocolError as exc:
                        self.metrics.protocol_error()
                        self.reply("protocol_error", error_frame(str(exc)))
                        flush()
                        return False
                    if not requests:
                        break
                    for argv in requests:
                        pending = self.dispatch(argv)
                        if pending is not None:
                            flush()
                            await self._await_pending(pending, reader)
                            if self._client_eof:
                                return True
                        if self.quit:
                            flush()
                            return False
                    flush()
        return False

    async def _await_pending(self, pending: Awaitable[None], reader: RequestReader) -> None:
        """Run a request that holds up the session (blocking command, transaction, …).

        Shielded from shutdown, so it finishes; meanwhile the client's socket is still read
        (requests are buffered, not dispatched) so that a client that goes away cancels it,
        as Redis frees a blocked client that disconnects."""
        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._watch_input, reader, nursery.cancel_scope)
                await pending
                nursery.cancel_scope.cancel()

    async def _watch_input(self, reader: RequestReader, scope: trio.CancelScope) -> None:
        limit = self.settings.max_inline_len + RECV_BUFFER_BYTES
        while reader.buffered_bytes() < limit:
            data = await receive_ready(self._fd, RECV_BUFFER_BYTES)
            if not data:
                self._client_eof = True
                scope.cancel()
                return
            reader.feed(data)
        await trio.sleep_forever()  # enough buffered: stop reading until the request ends

    def dispatch(self, argv: list[bytes]) -> Awaitable[None] | None:
        """Route one request. Returns an awaitable when the request must finish before the
        next one is read (the caller awaits it), else None."""
        if self.multi is not None and argv[0].lower() not in pinned.OUTSIDE_MULTI:
            pinned.queue(self, argv)
            return None
        info = lookup(argv)
        if info is None:
            extra = local.EXTRA.get(b"|".join(a.lower() for a in argv[:2]))
            reply = extra(self, argv) if extra is not None else None
            if reply is not None:
                self.reply("other", reply)
                return None
            self.reply("other", b"-" + unknown_command_error(argv) + b"\r\n")
            return None
        if not arity_ok(info, len(argv)):
            self.reply(info.name, error_frame(f"ERR wrong number of arguments for '{info.name}' command"))
            return None
        if self.link is not None:
            name = argv[0].lower()
            if pubsub.refused_while_subscribed(self, name):
                self.reply(info.name, error_frame(pubsub.CANT_EXECUTE.format(name=info.name)))
                return None
            if pubsub.forwarded_ping(self, name):
                return pubsub.command(self, argv, info.name)
        return self._routes[info.route](argv, info)

    # --- routes ------------------------------------------------------------------------------
    def slot_of(self, argv: list[bytes]) -> int | None:
        """The one slot of argv's keys; ``any_slot`` if keyless; None if they span slots.

        Arguments that route by slot without being keys (SPUBLISH's shard channel) count."""
        positions = key_positions(argv, include_not_key=True)
        if not positions:
            return self.any_slot
        slot = key_slot(argv[positions[0]])
        for p in positions[1:]:
            if key_slot(argv[p]) != slot:
                return None
        return slot

    def route_single(self, argv: list[bytes], info: CommandInfo) -> None:
        slot = self.slot_of(argv)
        if slot is None:
            self.reply(info.name, CROSSSLOT)
            return
        self.router.send(Call(self.router, pack_command(tuple(argv)), slot, "readonly" in info.flags,
                              self.proto, self.id, self.new_slot(info.name)))

    def route_keyless(self, argv: list[bytes], info: CommandInfo) -> None:
        slot = _KEYLESS_HOME.get(info.name, self.any_slot)
        self.router.send(Call(self.router, pack_command(tuple(argv)), slot,
                              "readonly" in info.flags, self.proto, self.id,
                              self.new_slot(info.name)))

    def route_split(self, argv: list[bytes], info: CommandInfo) -> None:
        fanout.split(self, argv, info)

    def route_all(self, argv: list[bytes], info: CommandInfo) -> None:
        fanout.all_nodes(self, argv, info)

    def route_proxy(self, argv: list[bytes], info: CommandInfo) -> None:
        reply = local.HANDLERS[info.name](self, argv)
        if reply is None:
            self.route_keyless(argv, info)
        else:
            self.reply(info.name, reply)

    def route_pubsub(self, argv: list[bytes], info: CommandInfo) -> Awaitable[None]:
        return pubsub.command(self, argv, info.name)

    def route_unsupported(self, argv: list[bytes], info: CommandInfo) -> None:
        self.reply(info.name, error_frame(errors.NOT_SUPPORTED.format(name=info.name)))

    def route_transaction(self, argv: list[bytes], info: CommandInfo) -> Awaitable[None] | None:
        return pinned.TRANSACTION[info.name](self, argv)

    def route_blocking(self, argv: list[bytes], info: CommandInfo) -> Awaitable[None] | None:
        slot = self.slot_of(argv)
        if slot is None:
            self.reply(info.name, CROSSSLOT)
            return None
        return pinned.blocking(self, argv, info, slot)


_ROUTE_HANDLERS.update({
    "single": "route_single",
    "keyless": "route_keyless",
    "split": "route_split",
    "all_masters": "route_all",
    "all_nodes": "route_all",
    "proxy": "route_proxy",
    "pubsub": "route_pubsub",
    "unsupported": "route_unsupported",
    "transaction": "route_transaction",
    "blocking": "route_blocking",
})

# Imported last: these modules take a Session and use the names above.
from proxy import fanout, local, pinned, pubsub  # noqa: E402

# Keyless commands that must reach one fixed node: classic pub/sub lives on the pub/sub home.
_KEYLESS_HOME = {
    name: pubsub.PUBSUB_HOME_SLOT
    for name in ("publish", "pubsub|channels", "pubsub|numsub", "pubsub|numpat")
}
