"""Backend connections: pipelined, multiplexed, FIFO-matched, reconnecting.

    send(payload, pending) ──▶ _out (bytes) + _pending (FIFO) ──end of batch: os.write──▶ socket
    socket ──Poller──▶ ReplyFramer ──▶ _pending.popleft().on_frame(type, raw)

``send`` never blocks and never awaits: it queues the request and marks the connection dirty;
at the end of the batch of work (``flush_writes``, called by the session flusher and by the
``Poller`` after each pass) everything queued goes out with one non-blocking ``os.write``;
what the socket does not take goes to the connection's writer task (``send_all``). Requests
from many clients share one connection; replies come back in order, so the oldest pending
request owns the next frame. Callers keep per-client ordering by always using the same
connection for a node (``sticky``).

The ``Poller`` is the hot read path: one epoll set (level-triggered) holding the sockets of
every client session and node connection that is in its ordinary state, waited on by one trio
task. Each wakeup handles every ready socket synchronously (read, parse, dispatch, deliver)
and then flushes all output once, instead of one trio task switch and one epoll
re-registration per socket read. A socket's owner task parks while the Poller serves it and
is woken with a reason (EOF, an error, a request that needs awaiting) when it must take over.

A connection is created idle and connects on its first ``send`` (requests queue meanwhile).
When it fails (connect error, EOF, reset, or the oldest request waiting longer than
``command_timeout_ms``) every pending request gets ``on_failure(exc, sent)``, where ``sent``
says whether its bytes may have reached the server; then the connection stays down for a
backoff and the next ``send`` reconnects. While down, ``send`` fails requests immediately with
``sent=False``. RESP3 connections start with ``HELLO 3``.

``DirectConnection`` is the other kind: one exclusive request/reply socket for a session's
blocking command or transaction.
"""

from __future__ import annotations

import logging
import os
import select
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

import outcome
import trio

from slotgate.protocol.resp import ReplyFramer, encode_command
from slotgate.proxy.ops.metrics import ProxyMetrics
from slotgate.proxy.ops.settings import ProxySettings

log = logging.getLogger("slotgate.backend")

RECV_BUFFER_BYTES = 256 * 1024
HELLO3 = encode_command(b"HELLO", b"3")


async def receive_ready(fd: int, max_bytes: int) -> bytes:
    """``receive_some`` for sockets that are usually empty when we ask: wait until readable,
    then read. (trio's ``receive_some`` tries ``recv`` first, which for a request/reply
    socket almost always fails with EAGAIN: a wasted syscall per request.) b"" means EOF;
    errors (reset…) raise ``OSError``. The caller must be the only reader of ``fd``."""
    while True:
        await trio.lowlevel.wait_readable(fd)
        try:
            return os.read(fd, max_bytes)
        except BlockingIOError:
            continue  # spurious wakeup


class Poller:
    """One epoll set served by one trio task (see the module docstring). Per trio run."""

    MAX_EVENTS = 512

    def __init__(self) -> None:
        self._ep = select.epoll()
        # fd -> (handler, owner task); the handler runs on readability, synchronously.
        self._watched: dict[int, tuple[Callable[[], None], trio.lowlevel.Task]] = {}
        self.dirty: list[BackendConnection] = []  # node connections with output queued
        self.after_pass: list[Callable[[], None]] = []  # flushers called after each pass

    async def park(self, fd: int, handler: Callable[[], None]) -> Any:
        """Serve ``fd`` by calling ``handler`` whenever it is readable, until the handler
        calls ``wake(fd, ...)``; returns (or raises) what was passed there. Cancellable:
        the fd is then no longer watched."""
        task = trio.lowlevel.current_task()
        self._ep.register(fd, select.EPOLLIN)
        self._watched[fd] = (handler, task)

        def abort(_: Any) -> trio.lowlevel.Abort:
            self._unwatch(fd)
            return trio.lowlevel.Abort.SUCCEEDED

        return await trio.lowlevel.wait_task_rescheduled(abort)

    def wake(self, fd: int, result: outcome.Outcome[Any]) -> None:
        """Stop watching ``fd`` and resume its parked owner with ``result``."""
        entry = self._watched.get(fd)
        if entry is not None:
            self._unwatch(fd)
            trio.lowlevel.reschedule(entry[1], result)

    def _unwatch(self, fd: int) -> None:
        del self._watched[fd]
        try:
            self._ep.unregister(fd)
        except (OSError, ValueError):
            pass  # closed already: the kernel dropped it from the set

    def flush_writes(self) -> None:
        while self.dirty:
            dirty, self.dirty = self.dirty, []
            for conn in dirty:
                conn.write_now()

    async def run(self) -> None:
        epfd = self._ep.fileno()
        poll = self._ep.poll
        watched = self._watched
        max_events = self.MAX_EVENTS
        while True:
            await trio.lowlevel.wait_readable(epfd)
            for fd, _ in poll(0, max_events):
                entry = watched.get(fd)
                if entry is None:
                    continue  # woken earlier in this pass
                try:
                    entry[0]()
                except Exception as exc:  # a bug or an unexpected error: its owner raises it
                    self.wake(fd, outcome.Error(exc))
            self.flush_writes()
            for flush in self.after_pass:
                flush()


_POLLER: trio.lowlevel.RunVar[Poller] = trio.lowlevel.RunVar("slotgate_poller")


def poller() -> Poller:
    """This trio run's Poller (its task is started on first use, as a system task)."""
    try:
        return _POLLER.get()
    except LookupError:
        p = Poller()
        _POLLER.set(p)
        trio.lowlevel.spawn_system_task(p.run, name="slotgate-poller")
        return p


class Pending(Protocol):
    def on_frame(self, type_byte: int, raw: bytes) -> None: ...
    def on_failure(self, exc: Exception, sent: bool) -> None: ...


class BackendError(Exception):
    """A backend connection failed; ``str()`` says how."""


class _Discard:
    """Swallows one reply (HELLO 3 at connect, ASKING before an ASK retry)."""

    __slots__ = ()

    def on_frame(self, type_byte: int, raw: bytes) -> None:
        pass

    def on_failure(self, exc: Exception, sent: bool) -> None:
        pass


DISCARD = _Discard()

IDLE, CONNECTING, READY = 0, 1, 2


class BackendConnection:
    """One pipelined connection to one node in one RESP version."""

    def __init__(self, pool: BackendPool, address: str, proto: int) -> None:
        self._pool = pool
        self.address = address
        self.proto = proto
        self._out: list[bytes] = []
        self._pending: deque[Pending] = deque()
        self._unsent = 0  # how many of the newest pending requests are still in _out
        self._state = IDLE
        self._retry_at = 0.0
        self._failures = 0
        self._writer_wakeup = trio.Event()
        self._writing = False  # the writer task is in send_all
        self._dirty = False  # listed in the poller's dirty list
        self._fd = -1
        self._framer = ReplyFramer()
        self._batches = 0  # reply batches received; the watchdog looks for progress in it

    # --- hot path --------------------------------------------------------------------------
    def send(self, payload: bytes, pending: Pending) -> None:
        state = self._state
        if state != READY:
            if state == IDLE:
                if trio.current_time() < self._retry_at:
                    pending.on_failure(BackendError(f"{self.address} is down"), False)
                    return
                self._state = CONNECTING
                self._pool.nursery.start_soon(self._run)
        elif not self._dirty:
            self._dirty = True
            self._pool.poller.dirty.append(self)
        self._out.append(payload)
        self._pending.append(pending)
        self._unsent += 1

    def send_many(self, payload: bytes, pending: Pending, n: int) -> None:
        """``n`` requests packed back to back in ``payload``, all answered to ``pending``
        (which gets ``n`` calls, one per reply or failure, in order)."""
        state = self._state
        if state != READY:
            if state == IDLE:
                if trio.current_time() < self._retry_at:
                    exc = BackendError(f"{self.address} is down")
                    for _ in range(n):
                        pending.on_failure(exc, False)
                    return
                self._state = CONNECTING
                self._pool.nursery.start_soon(self._run)
        elif not self._dirty:
            self._dirty = True
            self._pool.poller.dirty.append(self)
        self._out.append(payload)
        self._pending.extend([pending] * n)
        self._unsent += n

    def write_now(self) -> None:
        """Write what is queued without blocking; the writer task takes any rest."""
        self._dirty = False
        out = self._out
        if not out or self._writing or self._state != READY:
            return  # the writer task is mid-send and takes what is queued, in order
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        self._unsent = 0
        try:
            written = os.write(self._fd, data)
        except OSError:
            # Would block, or the connection broke: the writer's send_all waits or raises.
            written = 0
        if written < len(data):
            out.insert(0, data[written:] if written else data)
            self._writer_wakeup.set()

    # --- the connection task ---------------------------------------------------------------
    async def _run(self) -> None:
        s = self._pool.settings
        try:
            host, _, port = self.address.rpartition(":")
            with trio.fail_after(s.connect_timeout_ms / 1000):
                stream = await trio.open_tcp_stream(host, int(port))
        except (OSError, trio.TooSlowError) as exc:
            self._pool.metrics.upstream(self.address, "connect_failed")
            self._fail(BackendError(f"cannot connect to {self.address}: {exc}"))
            return
        self._pool.metrics.upstream(self.address, "connected")
        if self.proto == 3:
            self._out.insert(0, HELLO3)
            self._pending.appendleft(DISCARD)
            self._unsent += 1
        self._state = READY
        self._failures = 0
        self._writer_wakeup = trio.Event()
        self._fd = stream.socket.fileno()
        self._framer = ReplyFramer()
        self.write_now()  # what was queued while connecting
        try:
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._write_loop, stream)
                    nursery.start_soon(self._watchdog, nursery.cancel_scope)
                    await self._read_loop(stream)
            finally:
                # Before the socket closes: its fd number may be reused at once, so no more
                # non-blocking writes to it. Requests queue (no new connection) until _fail.
                self._state = CONNECTING
                self._fd = -1
                with trio.CancelScope(shield=True):
                    await stream.aclose()
        except* (OSError, trio.BrokenResourceError, trio.ClosedResourceError, BackendError) as eg:
            first = eg.exceptions[0]
            result = "timeout" if isinstance(first, _Timeout) else "lost"
            self._pool.metrics.upstream(self.address, result)
            self._fail(first if isinstance(first, BackendError) else BackendError(str(first)))

    async def _write_loop(self, stream: trio.SocketStream) -> None:
        """Only what a non-blocking write could not take (the socket buffer was full)."""
        while True:
            out = self._out
            if not out:
                self._writer_wakeup = trio.Event()
                await self._writer_wakeup.wait()
                continue
            data = out[0] if len(out) == 1 else b"".join(out)
            out.clear()
            self._unsent = 0
            self._writing = True
            try:
                await stream.send_all(data)
            finally:
                self._writing = False

    async def _read_loop(self, stream: trio.SocketStream) -> None:
        """The poller reads for us; we only wake up to raise why the connection ended."""
        result = await self._pool.poller.park(self._fd, self._on_readable)
        raise BackendError(f"{self.address}: reading stopped ({result!r})")

    def _on_readable(self) -> None:
        try:
            data = os.read(self._fd, RECV_BUFFER_BYTES)
        except BlockingIOError:
            return  # spurious wakeup
        except OSError as exc:
            self._pool.poller.wake(self._fd, outcome.Error(exc))
            return
        if not data:
            self._pool.poller.wake(
                self._fd, outcome.Error(BackendError(f"{self.address} closed the connection")))
            return
        framer = self._framer
        framer.feed(data)
        frames = framer.frames()
        if not frames:
            return
        self._batches += 1
        pending = self._pending
        for type_byte, raw in frames:
            if len(pending) <= self._unsent:
                self._pool.poller.wake(self._fd, outcome.Error(
                    BackendError(f"{self.address} sent a reply nobody asked for")))
                return
            pending.popleft().on_frame(type_byte, raw)

    async def _watchdog(self, scope: trio.CancelScope) -> None:
        """Declare the connection dead when requests wait and no reply arrived for
        ``command_timeout_ms`` (checked every quarter of it; no clock reads on the hot path)."""
        timeout_ms = self._pool.settings.command_timeout_ms
        tick_s = timeout_ms / 4000
        seen = self._batches
        stalled_ticks = 0
        while True:
            await trio.sleep(tick_s)
            waiting = len(self._pending) > self._unsent
            if not waiting or self._batches != seen:
                seen = self._batches
                stalled_ticks = 0
                continue
            stalled_ticks += 1
            if stalled_ticks >= 4:
                raise _Timeout(f"{self.address} did not answer within {timeout_ms} ms")

    def _fail(self, exc: Exception) -> None:
        s = self._pool.settings
        self._state = IDLE
        self._failures += 1
        delay_ms = min(s.reconnect_backoff_max_ms,
                       s.reconnect_backoff_min_ms * (1 << min(self._failures - 1, 16)))
        self._retry_at = trio.current_time() + delay_ms / 1000
        pending, self._pending = self._pending, deque()
        n_sent = len(pending) - self._unsent
        self._out = []
        self._unsent = 0
        self._fd = -1
        self._pool.on_connection_failed(self)
        for i, p in enumerate(pending):
            p.on_failure(exc, i < n_sent)
        self._pool.after_batch()


class _Timeout(BackendError):
    pass


class BackendPool:
    """All shared backend connections, by (node, RESP version): ``per_node`` each."""

    def __init__(
        self,
        settings: ProxySettings,
        metrics: ProxyMetrics,
        nursery: trio.Nursery,
        on_failure: Callable[[str], None],
        after_batch: Callable[[], None] = lambda: None,
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.nursery = nursery
        self._on_failure = on_failure
        self.poller = poller()
        # After each pass the poller writes queued node output, then calls after_batch.
        self.poller.after_pass.append(after_batch)
        flush_writes = self.poller.flush_writes

        def flush_all() -> None:
            flush_writes()
            after_batch()

        # Called after each batch of work outside the poller's passes (a retry, a failure, a
        # session's awaited request): writes queued node output, then client output.
        self.after_batch = flush_all
        # RESP version -> node address -> that node's connections.
        self._conns: dict[int, dict[str, list[BackendConnection]]] = {2: {}, 3: {}}
        self._per_node = settings.backend_connections_per_node

    def get(self, address: str, proto: int, sticky: int) -> BackendConnection:
        by_node = self._conns[proto]
        conns = by_node.get(address)
        if conns is None:
            conns = by_node[address] = [
                BackendConnection(self, address, proto) for _ in range(self._per_node)
            ]
        return conns[sticky % self._per_node]

    def on_connection_failed(self, conn: BackendConnection) -> None:
        self._on_failure(conn.address)


class DirectConnection:
    """An exclusive request/reply connection (blocking commands, WATCH/MULTI/EXEC)."""

    def __init__(self, address: str, proto: int, stream: trio.SocketStream) -> None:
        self.address = address
        self.proto = proto
        self._stream = stream
        self._framer = ReplyFramer()
        self.closed = False

    @classmethod
    async def open(cls, address: str, proto: int, connect_timeout_s: float) -> DirectConnection:
        host, _, port = address.rpartition(":")
        with trio.fail_after(connect_timeout_s):
            stream = await trio.open_tcp_stream(host, int(port))
        conn = cls(address, proto, stream)
        if proto == 3:
            await conn.roundtrip(HELLO3, 1)
        return conn

    async def roundtrip(self, payload: bytes, replies: int) -> list[tuple[int, bytes]]:
        """Send ``payload`` and read exactly ``replies`` frames. Raises ``BackendError``.

        If this raises or is cancelled, the connection is marked closed: its state is unknown.
        """
        self.closed = True  # until the round trip completes
        try:
            await self._stream.send_all(payload)
            frames: list[tuple[int, bytes]] = []
            while len(frames) < replies:
                frame = self._framer.next_frame()
                if frame is not None:
                    frames.append(frame)
                    continue
                data = await self._stream.receive_some(RECV_BUFFER_BYTES)
                if not data:
                    raise BackendError(f"{self.address} closed the connection")
                self._framer.feed(data)
            self.closed = False
            return frames
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise BackendError(f"connection to {self.address} lost: {exc}") from exc

    async def aclose(self) -> None:
        self.closed = True
        await self._stream.aclose()
