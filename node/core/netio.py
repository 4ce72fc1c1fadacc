"""A client socket for the hot path: non-blocking stdlib calls first, trio waits only when the
kernel says "would block".

A trio socket's ``recv``/``send`` pass through the scheduler even when data is ready; at one
request per round trip that costs more than the command itself. ``Conn`` tries the syscall
directly and parks in ``wait_readable``/``wait_writable`` only when needed. To stay fair to
other clients it yields at least every ``MAX_EAGER_READS`` reads that did not wait.
"""

from __future__ import annotations

import select
import socket
from collections.abc import Callable

import trio

MAX_EAGER_READS = 16  # consecutive reads served without waiting before a forced yield
MAX_EVENTS = 256  # ready sockets taken per poller pass


class Conn:
    """Owns one connected, non-blocking socket (taken over from a trio socket)."""

    __slots__ = ("sock", "_eager")

    def __init__(self, trio_sock: trio.socket.SocketType) -> None:
        self.sock = socket.socket(fileno=trio_sock.detach())
        self.sock.setblocking(False)
        self._eager = 0

    async def recv(self, max_bytes: int, eager: bool = True) -> bytes:
        """Some bytes (b"" at EOF). Raises OSError on a reset connection. ``eager=False``
        skips the first read attempt (the caller expects nothing to be there yet)."""
        sock = self.sock
        if not eager:
            pass
        elif self._eager < MAX_EAGER_READS:
            try:
                data = sock.recv(max_bytes)
            except BlockingIOError:
                pass
            else:
                self._eager += 1
                return data
        else:
            await trio.lowlevel.checkpoint()
        self._eager = 0
        while True:
            await trio.lowlevel.wait_readable(sock)
            try:
                return sock.recv(max_bytes)
            except BlockingIOError:
                continue

    async def send_all(self, data: bytes) -> None:
        """Send everything; waits for writability only when the kernel buffer is full."""
        sock = self.sock
        try:
            sent = sock.send(data)
        except BlockingIOError:
            sent = 0
        if sent == len(data):
            return
        view = memoryview(data)[sent:]
        while view:
            await trio.lowlevel.wait_writable(sock)
            try:
                sent = sock.send(view)
            except BlockingIOError:
                continue
            view = view[sent:]

    def close(self) -> None:
        if self.sock.fileno() != -1:
            trio.lowlevel.notify_closing(self.sock)
            self.sock.close()


class Poller:
    """One epoll set served by one task: ``serve(fd)`` runs synchronously for every ready
    socket, all of a wake-up's ready sockets in one pass.

    trio's ``wait_readable`` registers and unregisters the fd with its own epoll on every wait;
    here each socket is registered once (level-triggered) and the task waits on the epoll fd
    alone, so a pass costs one trio wait however many sockets are ready.
    """

    __slots__ = ("_ep", "_serve", "_after_pass")

    def __init__(self, after_pass: Callable[[], None] | None = None) -> None:
        self._ep = select.epoll()
        self._serve: dict[int, Callable[[], None]] = {}
        self._after_pass = after_pass  # runs after every pass (the server's deferred sends)

    def register(self, fd: int, serve: Callable[[], None]) -> None:
        self._ep.register(fd, select.EPOLLIN)
        self._serve[fd] = serve

    def unregister(self, fd: int) -> None:
        if self._serve.pop(fd, None) is not None:
            try:
                self._ep.unregister(fd)
            except (OSError, ValueError):  # already closed
                pass

    async def run(self) -> None:
        ep = self._ep
        serve = self._serve
        after_pass = self._after_pass
        epfd = ep.fileno()
        try:
            while True:
                events = ep.poll(0, MAX_EVENTS)
                if not events:
                    await trio.lowlevel.wait_readable(epfd)
                    continue
                for fd, _mask in events:
                    fn = serve.get(fd)
                    if fn is not None:
                        fn()
                if after_pass is not None:
                    after_pass()
                # let other tasks (flushes, cron, handed-back clients) run between passes
                await trio.lowlevel.checkpoint()
        finally:
            ep.close()
