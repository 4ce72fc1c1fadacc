"""A socket's output: queued bytes, written without blocking; the rest sent by a trio task.

    owner: writer.out.append(bytes) … end of a batch: writer.write_now() ─ one send ─▶ socket
                                                      │ the kernel took less
                                                      ▼
           a trio task: send_rest() (wait_writable, send, until ``out`` is empty)

Most writes go out whole with one non-blocking ``send`` at the end of a batch of work (a
poller pass), with no task switch. What the kernel does not take stays first in ``out`` and
goes with ``send_rest``, awaited by a task: the owner's writer task (``run``), or the owner's
own task when it must not read on before its output is gone. While that send is in progress
(``sending``) ``write_now`` writes nothing, so the bytes leave in the order they were queued.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Callable
from typing import Any

import trio
from mypy_extensions import mypyc_attr


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled: proxy/backend/batches.py extends it
class Writer:
    """Output of one socket (not its owner: closing the socket is the caller's)."""

    __slots__ = ("out", "sock", "sending", "dirty", "unsent", "_wakeup", "on_rest", "waiting")

    def __init__(self, out: list[Any] | None = None,
                 sock: socket.socket | None = None,
                 on_rest: Callable[[], None] | None = None) -> None:
        # To send, in order: ``bytes``, or a ``bytearray`` (the node's pub/sub deliveries
        # coalesce into one while it is queued). Typed ``Any``: compiled, an item read from a
        # ``list[bytes]`` is checked to be ``bytes``, and a lone queued ``bytearray`` raised
        # TypeError in the send (a node with a subscriber crashed at its first message).
        self.out: list[Any] = [] if out is None else out
        # A non-blocking socket; None: not connected yet, or closed (set to None before the
        # socket closes: nothing may be written to it after that).
        self.sock = sock
        self.sending = False  # a task is in send_rest: it takes what is queued, in order
        self.dirty = False  # listed in a Flusher for the end of the batch
        self.unsent = 0  # owner's count of items queued since out was last taken (never sent)
        # Set when a rest is left for the writer task; made by the task when it waits (an
        # owner that never runs ``run`` never pays for one).
        self._wakeup: trio.Event | None = None
        # Called when a rest is left and no writer task waits for one: an owner that starts
        # its writer task only when it is first needed (most connections never need it).
        self.on_rest = on_rest
        # What ``send_rest`` waits for the socket to take (the rest of its chunk), while it
        # waits: ``push_rest`` may send some of it meanwhile.
        self.waiting: memoryview | None = None

    def write_now(self) -> int:
        """Write everything queued with one non-blocking write; bytes written. A rest stays
        queued and wakes the writer task (``run``). Writes nothing while a task is sending,
        or without a socket. Errors are not raised here: the rest stays and the task's
        ``send_rest`` raises them."""
        out = self.out
        sock = self.sock
        if not out or self.sending or sock is None:
            return 0
        data: bytes | bytearray = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        self.unsent = 0
        try:
            written = sock.send(data)
        except OSError:  # would block, or the connection broke: send_rest waits or raises
            written = 0
        if written < len(data):
            out.append(data[written:] if written else data)
            if self._wakeup is not None:
                self._wakeup.set()
            elif self.on_rest is not None:
                self.on_rest()
        return written

    async def send_rest(self, after_chunk: Callable[[], None] | None = None) -> int:
        """Send everything queued, and whatever is queued meanwhile, waiting for the socket
        to take it; bytes sent. ``after_chunk`` runs after each joined chunk went out.
        Raises ``OSError`` when the connection is broken or there is no socket
        (``trio.ClosedResourceError`` if it is closed while waiting)."""
        self.sending = True
        try:
            return await self._send_all(after_chunk)
        finally:
            self.sending = False

    async def _send_all(self, after_chunk: Callable[[], None] | None) -> int:
        # No ``try`` around an ``await`` in this loop: compiled with mypyc, a local assigned
        # in a ``try`` whose handler awaits is read back stale after the await (the loop sent
        # its chunk again from the start).
        out = self.out
        total = 0
        while out:
            data: bytes | bytearray = out[0] if len(out) == 1 else b"".join(out)
            out.clear()
            self.unsent = 0
            view = memoryview(data)
            while view:
                sock = self.sock
                if sock is None:
                    raise OSError(errno.EBADF, "the socket is closed")
                sent = _send_some(sock, view)
                if sent < 0:
                    self.waiting = view
                    await trio.lowlevel.wait_writable(sock)
                    left = self.waiting  # (less if push_rest sent some meanwhile)
                    self.waiting = None
                    if left is not None:
                        view = left
                else:
                    view = view[sent:]
            total += len(data)
            if after_chunk is not None:
                after_chunk()
        return total

    def push_rest(self) -> None:
        """Send what the socket takes now of what ``send_rest`` waits to send, from outside
        its task (an owner that cannot let the task run for a while: a long command serving
        other sockets meanwhile). The task goes on from where this left off."""
        view = self.waiting
        sock = self.sock
        if view is None or sock is None:
            return
        while view:
            try:
                sent = sock.send(view)
            except OSError:  # would block, or broken: the task finds out
                break
            view = view[sent:]
        self.waiting = view

    async def run(self, after_chunk: Callable[[], None] | None = None) -> None:
        """The writer task: sends what ``write_now`` left over, as it comes. Raises
        ``OSError`` when the connection breaks."""
        while True:
            if not self.out:
                self._wakeup = trio.Event()
                await self._wakeup.wait()
                continue
            await self.send_rest(after_chunk)


def _send_some(sock: socket.socket, view: memoryview) -> int:
    """Bytes the socket took now; -1 when it takes none (would block)."""
    try:
        return sock.send(view)
    except BlockingIOError:
        return -1


class Flusher:
    """The writers with output queued in this batch of work (each listed once: its ``dirty``
    flag), written at the end of the batch."""

    __slots__ = ("pending",)

    def __init__(self) -> None:
        self.pending: list[Writer] = []

    def add(self, w: Writer) -> None:
        """List ``w`` for the next ``flush`` (hot callers inline this)."""
        if not w.dirty:
            w.dirty = True
            self.pending.append(w)

    def flush(self) -> None:
        while self.pending:
            pending, self.pending = self.pending, []
            for w in pending:
                w.dirty = False
                w.write_now()
