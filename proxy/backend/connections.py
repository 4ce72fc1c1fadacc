"""Backend connections: pipelined, multiplexed, FIFO-matched, reconnecting.

    send(payload, pending) ──▶ writer.out + _pending (FIFO) ──end of batch: os.write──▶ socket
    socket ──Poller──▶ ReplyFramer ──▶ _pending.popleft().on_frame(type, raw)

``send`` never blocks and never awaits: it queues the request and marks the connection dirty;
at the end of the batch of work (``BackendPool.after_batch``, called by the poller after each
pass and by the session after its own batches) everything queued goes out with one
non-blocking ``os.write`` (``eventcore.writer``); what the socket does not take goes to the
connection's writer task.
Requests from many clients share one connection; replies come back in order, so the oldest
pending request owns the next frame. Callers keep per-client ordering by always using the
same connection for a node (``sticky``).

The poller (``eventcore.poller``, one per trio run) is the hot read path: one epoll set
holding the sockets of every client session and node connection that is in its ordinary
state. Each pass handles every ready socket synchronously (read, parse, dispatch, deliver)
and then flushes all output once. A socket's owner task parks while the poller serves it and
is woken with a reason (EOF, an error, a request that needs awaiting) when it must take over.

A connection is created idle and connects on its first ``send`` (requests queue meanwhile).
When it fails (connect error, EOF, reset, or the oldest request waiting longer than
``command_timeout_ms`` while the node answers nobody) every pending request gets ``on_failure(exc, sent)``, where ``sent``
says whether its bytes may have reached the server; then the connection stays down for a
backoff and the next ``send`` reconnects. While down, ``send`` fails requests immediately with
``sent=False``. RESP3 connections start with ``HELLO 3``. A stalled connection is not dead
when its oldest request may run long (``protocol/overrides.py``'s ``may_run_long``: scripts,
MIGRATE, KEYS ...) or when the node still answers a probe on a connection of its own (a
script running on another connection keeps the node silent until its busy threshold, then it
answers ``-BUSY``).

``DirectConnection`` is the other kind: one exclusive request/reply socket for a session's
blocking command or transaction.
"""

from __future__ import annotations

import logging
import socket
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

import trio
from mypy_extensions import mypyc_attr

from slotgate.eventcore import sockets, tls
from slotgate.eventcore.backoff import backoff_ms
from slotgate.eventcore.groups import on_group
from slotgate.eventcore.poller import EOF, HandlerError, Poller, run_poller
from slotgate.eventcore.writer import Flusher, Writer
from slotgate.protocol.commands import ALL_COMMANDS
from slotgate.protocol.overrides import may_run_long
from slotgate.protocol.resp import ReplyFramer, encode_command
from slotgate.proxy.backend.auth import BackendAuthError, login
from slotgate.proxy.ops.metrics import ProxyMetrics
from slotgate.proxy.ops.settings import ProxySettings
from slotgate.proxy.ops.tls import open_node_stream

log = logging.getLogger("slotgate.backend")

# Bytes per read. Below glibc's mmap threshold (128 KiB): a bigger read buffer is an
# mmap, an mremap (trimmed to what came) and a munmap per read, three system calls.
RECV_BUFFER_BYTES = 64 * 1024
HELLO3 = encode_command(b"HELLO", b"3")
PING = encode_command(b"PING")
# First words (lower case) of the requests that may keep a node busy long.
_LONG_NAMES = frozenset(
    name for name, info in ((n.decode(), i) for n, i in ALL_COMMANDS.items())
    if "|" not in name and may_run_long(name, info.flags)
)


def request_name(payload: bytes) -> str:
    """The lower-case first word of a packed request (``*N\\r\\n$L\\r\\nNAME...``), else ""."""
    start = payload.find(b"\r\n$")
    if start < 0:
        return ""
    head = payload.find(b"\r\n", start + 3)
    if head < 0:
        return ""
    length = payload[start + 3:head]
    if not length.isdigit():
        return ""
    return payload[head + 2:head + 2 + int(length)].decode("latin-1").lower()


def runs_long(pending: object) -> bool:
    """Whether the request ``pending`` answers (a router call) may keep its node busy long."""
    payload = getattr(pending, "payload", None)
    return isinstance(payload, bytes) and request_name(payload) in _LONG_NAMES


async def node_answers(address: str, settings: ProxySettings, metrics: ProxyMetrics) -> bool:
    """Whether ``address`` answers a PING (any reply, ``-BUSY`` included) on a connection of its
    own within the command timeout: a stalled shared connection to it is slow, not gone."""
    with trio.move_on_after(settings.command_timeout_ms / 1000):
        try:
            stream = await connect(address, settings, metrics)
        except BackendAuthError:
            return True  # it answered the login
        except (OSError, trio.TooSlowError, trio.BrokenResourceError):
            return False
        try:
            await stream.send_all(PING)
            return bool(await stream.receive_some(64))
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
            return False
        finally:
            await trio.aclose_forcefully(stream)
    return False


class Pending(Protocol):
    def on_frame(self, type_byte: int, raw: bytes) -> None: ...
    def on_failure(self, exc: Exception, sent: bool) -> None: ...


@mypyc_attr(allow_interpreted_subclasses=True)
class Reply:
    """A ``Pending`` the compiled build calls directly (the router's calls, split batches):
    a reply delivered to one of these skips the generic method call of a ``Pending`` that is
    only duck-typed (the read/write policies' replies)."""

    __slots__ = ()

    def on_frame(self, type_byte: int, raw: bytes) -> None:
        raise NotImplementedError

    def on_failure(self, exc: Exception, sent: bool) -> None:
        raise NotImplementedError


class BackendError(Exception):
    """A backend connection failed; ``str()`` says how."""


class _Discard(Reply):
    """Swallows one reply (HELLO 3 at connect, ASKING before an ASK retry)."""

    __slots__ = ()

    def on_frame(self, type_byte: int, raw: bytes) -> None:
        pass

    def on_failure(self, exc: Exception, sent: bool) -> None:
        pass


DISCARD = _Discard()

IDLE, CONNECTING, READY = 0, 1, 2


async def connect(address: str, settings: ProxySettings, metrics: ProxyMetrics) -> tls.NodeStream:
    """A new connection to ``address``, TLS when configured (``ops/tls.py``), logged in
    (``backend/auth.py``), within the connect timeout. Raises ``OSError`` (``ssl.SSLError``
    for a failed TLS handshake)/``trio.TooSlowError``/``trio.BrokenResourceError`` when the
    node is unreachable, ``BackendAuthError`` when it refuses the credentials; closes what it
    opened on failure."""
    with trio.fail_after(settings.connect_timeout_ms / 1000):
        stream = await open_node_stream(address, settings)
        try:
            await login(stream, address, settings, metrics)
        except BaseException:
            await trio.aclose_forcefully(stream)
            raise
    return stream


class BackendConnection:
    """One pipelined connection to one node in one RESP version."""

    def __init__(self, pool: BackendPool, address: str, proto: int) -> None:
        self._pool = pool
        self.address = address
        self.proto = proto
        # Queued requests; its ``unsent``: how many of the newest pending requests are still
        # wholly in ``out``; its ``sock`` is None unless READY.
        self._writer = Writer()
        self._pending: deque[Pending] = deque()
        self._state = IDLE
        self._retry_at = 0.0
        self._failures = 0
        self._framer = ReplyFramer()
        self._batches = 0  # reply batches received; the watchdog looks for progress in it
        # READONLY for replica reads: sent first on every connect once set (set_readonly).
        self.readonly: bytes | None = None

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
        elif not self._writer.dirty:
            self._writer.dirty = True
            self._pool.dirty.pending.append(self._writer)
        w = self._writer
        w.out.append(payload)
        self._pending.append(pending)
        w.unsent += 1

    def set_readonly(self, payload: bytes) -> None:
        """Send ``payload`` (READONLY) now if connected, and first after every connect."""
        if self.readonly is None:
            self.readonly = payload
            if self._state == READY:
                self.send(payload, DISCARD)

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
        elif not self._writer.dirty:
            self._writer.dirty = True
            self._pool.dirty.pending.append(self._writer)
        w = self._writer
        w.out.append(payload)
        self._pending.extend([pending] * n)
        w.unsent += n

    # --- the connection task ---------------------------------------------------------------
    async def _run(self) -> None:
        s = self._pool.settings
        try:
            stream = await connect(self.address, s, self._pool.metrics)
        except BackendAuthError as exc:
            self._fail(BackendError(str(exc)))
            return
        except (OSError, trio.TooSlowError, trio.BrokenResourceError) as exc:
            self._pool.metrics.upstream(self.address, "connect_failed")
            self._fail(BackendError(f"cannot connect to {self.address}: {exc}"))
            return
        self._pool.metrics.upstream(self.address, "connected")
        w = self._writer
        if self.readonly is not None:
            w.out.insert(0, self.readonly)
            self._pending.appendleft(DISCARD)
            w.unsent += 1
        if self.proto == 3:
            w.out.insert(0, HELLO3)
            self._pending.appendleft(DISCARD)
            w.unsent += 1
        self._state = READY
        self._failures = 0
        sock = w.sock = tls.take_over(stream)  # None unless READY
        self._framer = ReplyFramer()
        w.write_now()  # what was queued while connecting
        with on_group(_LOST, self._lost):
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(w.run)
                    nursery.start_soon(self._watchdog, nursery.cancel_scope)
                    await self._read_loop(sock)
            finally:
                # Before the socket closes: no more non-blocking writes to it. Requests queue
                # (no new connection) until _fail.
                self._state = CONNECTING
                w.sock = None
                sockets.close(sock)

    def _lost(self, first: Exception) -> None:
        result = "timeout" if isinstance(first, _Timeout) else "lost"
        self._pool.metrics.upstream(self.address, result)
        self._fail(first if isinstance(first, BackendError) else BackendError(str(first)))

    async def _read_loop(self, sock: socket.socket) -> None:
        """The poller reads for us; we only wake up to raise why the connection ended (a
        read error is raised by ``park``, the handler returns the exception it found)."""
        result = await self._pool.poller.park(sock, self._on_readable, RECV_BUFFER_BYTES)
        if result is EOF:
            raise BackendError(f"{self.address} closed the connection")
        raise BackendError(f"{self.address}: reading stopped ({result!r})")

    def _on_readable(self, data: bytes) -> Exception | None:
        framer = self._framer
        framer.feed(data)
        frames = framer.frames()
        if not frames:
            return None
        self._batches += 1
        pool = self._pool
        pool.read_s = time.perf_counter()
        try:
            return self._deliver(frames)
        finally:
            pool.read_s = 0.0

    def _deliver(self, frames: list[tuple[int, bytes]]) -> Exception | None:
        pending = self._pending
        for type_byte, raw in frames:
            if len(pending) <= self._writer.unsent:
                return BackendError(f"{self.address} sent a reply nobody asked for")
            p = pending.popleft()
            if isinstance(p, Reply):
                p.on_frame(type_byte, raw)  # compiled: a direct call
            else:
                p.on_frame(type_byte, raw)
        return None

    async def _watchdog(self, scope: trio.CancelScope) -> None:
        """Declare the connection dead when requests wait and no reply arrived for
        ``command_timeout_ms`` (checked every quarter of it; no clock reads on the hot path),
        unless the oldest request may run long or the node answers a probe."""
        timeout_ms = self._pool.settings.command_timeout_ms
        tick_s = timeout_ms / 4000
        seen = self._batches
        stalled_ticks = 0
        while True:
            await trio.sleep(tick_s)
            waiting = len(self._pending) > self._writer.unsent
            if not waiting or self._batches != seen:
                seen = self._batches
                stalled_ticks = 0
                continue
            stalled_ticks += 1
            if stalled_ticks < 4:
                continue
            s = self._pool.settings
            long_head = bool(self._pending) and runs_long(self._pending[0])
            if long_head or await node_answers(self.address, s, self._pool.metrics):
                stalled_ticks = 0
                continue
            if self._batches == seen:
                raise _Timeout(f"{self.address} did not answer within {timeout_ms} ms")

    def _fail(self, exc: Exception) -> None:
        s = self._pool.settings
        self._state = IDLE
        self._failures += 1
        delay_ms = backoff_ms(self._failures - 1, s.reconnect_backoff_min_ms,
                              s.reconnect_backoff_max_ms)
        self._retry_at = trio.current_time() + delay_ms / 1000
        pending, self._pending = self._pending, deque()
        w = self._writer
        n_sent = len(pending) - w.unsent
        w.out.clear()
        w.unsent = 0
        w.sock = None
        self._pool.on_connection_failed(self)
        for i, p in enumerate(pending):
            p.on_failure(exc, i < n_sent)
        self._pool.after_batch()


class _Timeout(BackendError):
    pass


# How a live connection ends: _lost records it and fails what it still owed.
_LOST = (OSError, trio.BrokenResourceError, trio.ClosedResourceError, BackendError,
         HandlerError)


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
        self.poller: Poller = run_poller()
        self.dirty = Flusher()  # node connections with output queued
        # While a connection hands out the replies of one read: when they were read
        # (perf_counter), the end of their requests' latency (one clock read per read); 0.0
        # otherwise.
        self.read_s = 0.0
        flush_writes = self.dirty.flush

        def flush_all() -> None:
            flush_writes()
            after_batch()

        # Called after each poller pass and after each batch of work outside the passes (a
        # retry, a failure, a session's awaited request): writes queued node output, then
        # client output.
        self.after_batch = flush_all
        self.poller.after_pass.append(flush_all)
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

    def __init__(self, address: str, proto: int, stream: tls.NodeStream) -> None:
        self.address = address
        self.proto = proto
        self._stream = stream
        self._framer = ReplyFramer()
        self.closed = False

    @classmethod
    async def open(cls, address: str, proto: int, settings: ProxySettings,
                   metrics: ProxyMetrics) -> DirectConnection:
        """Connected and logged in; raises as ``connect`` does."""
        stream = await connect(address, settings, metrics)
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
