"""A client socket for the hot path: non-blocking stdlib calls first, trio waits only when the
kernel says "would block".

A trio socket's ``recv``/``send`` pass through the scheduler even when data is ready; at one
request per round trip that costs more than the command itself. ``Conn`` tries the syscall
directly and parks in ``wait_readable``/``wait_writable`` only when needed. To stay fair to
other clients it yields at least every ``MAX_EAGER_READS`` reads that did not wait.
"""

from __future__ import annotations

import socket

import trio

MAX_EAGER_READS = 16  # consecutive reads served without waiting before a forced yield


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
