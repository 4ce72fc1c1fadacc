"""Backend connections: pipelined, multiplexed, FIFO-matched, reconnecting.

    send(payload, pending) ──▶ _out (bytes) + _pending (FIFO) ──writer──▶ socket
    socket ──reader──▶ ReplyFramer ──▶ _pending.popleft().on_frame(type, raw)

``send`` never blocks and never awaits: it queues the request and wakes the writer, which
coalesces everything queued into one ``send_all``. Requests from many clients share one
connection; replies come back in order, so the oldest pending request owns the next frame.
Callers keep per-client ordering by always using the same connection for a node (``sticky``).

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
from collections import deque
from collections.abc import Callable
from typing import Protocol

import trio

from protocol.resp import ReplyFramer, encode_command
from proxy.metrics import ProxyMetrics
from proxy.settings import ProxySettings

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
        elif not self._out:
            self._writer_wakeup.set()
        self._out.append(payload)
        self._pending.append(pending)
        self._unsent += 1

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
        try:
            async with stream, trio.open_nursery() as nursery:
                nursery.start_soon(self._write_loop, stream)
                nursery.start_soon(self._watchdog, nursery.cancel_scope)
                await self._read_loop(stream)
        except* (OSError, trio.BrokenResourceError, trio.ClosedResourceError, BackendError) as eg:
            first = eg.exceptions[0]
            result = "timeout" if isinstance(first, _Timeout) else "lost"
            self._pool.metrics.upstream(self.address, result)
            self._fail(first if isinstance(first, BackendError) else BackendError(str(first)))

    async def _write_loop(self, stream: trio.SocketStream) -> None:
        while True:
            out = self._out
            if not out:
                self._writer_wakeup = trio.Event()
                await self._writer_wakeup.wait()
                continue
            data = out[0] if len(out) == 1 else b"".join(out)
            out.clear()
            self._unsent = 0
            await stream.send_all(data)

    async def _read_loop(self, stream: trio.SocketStream) -> None:
        framer = ReplyFramer()
        pending = self._pending
        fd = stream.socket.fileno()
        while True:
            data = await receive_ready(fd, RECV_BUFFER_BYTES)
            if not data:
                raise BackendError(f"{self.address} closed the connection")
            framer.feed(data)
            frames = framer.frames()
            if not frames:
                continue
            self._batches += 1
            for type_byte, raw in frames:
                if len(pending) <= self._unsent:
                    raise BackendError(f"{self.address} sent a reply nobody asked for")
                pending.popleft().on_frame(type_byte, raw)
            self._pool.after_batch()

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
        # Called after each batch of replies/failures was delivered (flushes client output).
        self.after_batch = after_batch
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
