"""TLS on the non-blocking sockets the poller and the writer serve.

    sock = tls.wrap(context, plain, server_side=True)    # a TLSSocket on the same descriptor
    await tls.handshake(sock)                             # within the caller's deadline
    poller.park(sock, ...); Writer(sock=sock)             # served as any socket from here on
    stream = tls.TLSStream(sock)                          # or as a trio Stream (request/reply)

``TLSSocket`` is the stdlib ``ssl.SSLSocket`` (OpenSSL's record layer working on the
descriptor itself: no memory BIOs, no extra copy) keeping the contract of a non-blocking
socket that the poller, the writer and ``receive_ready`` rely on:

- "would block" is ``BlockingIOError`` (OpenSSL's want-read / want-write);
- ``recv`` returns every byte OpenSSL has decrypted, so the descriptor's level-triggered
  readiness stays the whole truth (nothing waits inside OpenSSL while epoll sees nothing);
- ``send`` takes its whole buffer or nothing: after "would block", OpenSSL wants the same bytes
  offered again (more may follow them), which is what the writer does with what it kept.

Plain connections are plain ``socket.socket`` objects and pay nothing for any of this.
"""

from __future__ import annotations

import errno
import socket
import ssl
from typing import Any

import trio

from slotgate.eventcore import sockets

_WOULD_BLOCK = (ssl.SSLWantReadError, ssl.SSLWantWriteError)


def _would_block() -> BlockingIOError:
    return BlockingIOError(errno.EAGAIN, "TLS record incomplete")


class TLSSocket(ssl.SSLSocket):
    """An ``SSLSocket`` whose "would block" is ``BlockingIOError`` (made by ``wrap``)."""

    def recv(self, buflen: int = 1024, flags: int = 0) -> bytes:
        try:
            data = super().recv(buflen, flags)
        except _WOULD_BLOCK:
            raise _would_block() from None
        if data and self.pending():
            chunks = [data]
            while (left := self.pending()) > 0:
                try:
                    chunks.append(super().recv(left))
                except _WOULD_BLOCK:
                    break
            data = b"".join(chunks)
        return data

    def send(self, data: Any, flags: int = 0) -> int:
        try:
            return super().send(data, flags)
        except _WOULD_BLOCK:
            raise _would_block() from None


def wrap(context: ssl.SSLContext, sock: socket.socket, *, server_side: bool,
         server_hostname: str | None = None) -> TLSSocket:
    """``sock`` (connected, non-blocking) as a ``TLSSocket``; ``sock`` is unusable after this.
    The handshake is the caller's (``handshake``)."""
    context.sslsocket_class = TLSSocket  # (what every context given here makes)
    tsock = context.wrap_socket(sock, server_side=server_side, do_handshake_on_connect=False,
                                server_hostname=server_hostname)
    assert isinstance(tsock, TLSSocket)
    tsock.setblocking(False)
    return tsock


async def handshake(sock: TLSSocket) -> None:
    """Run the TLS handshake on a non-blocking ``TLSSocket``. Raises ``ssl.SSLError`` (a
    certificate refused, no common protocol ...) or ``OSError``; no deadline of its own."""
    while True:
        try:
            sock.do_handshake()
            return
        except ssl.SSLWantReadError:
            await trio.lowlevel.wait_readable(sock)
        except ssl.SSLWantWriteError:
            await trio.lowlevel.wait_writable(sock)


class TLSStream(trio.abc.Stream):
    """A handshaken ``TLSSocket`` as a trio ``Stream`` (login, request/reply connections).
    Errors of the connection are ``trio.BrokenResourceError``, as with ``trio.SocketStream``."""

    def __init__(self, sock: TLSSocket) -> None:
        self.socket = sock

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        sock = self.socket
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            while view:
                try:
                    view = view[sock.send(view):]
                except BlockingIOError:
                    await trio.lowlevel.wait_writable(sock)
        except OSError as exc:
            raise trio.BrokenResourceError(str(exc)) from exc
        await trio.lowlevel.cancel_shielded_checkpoint()

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.wait_writable(self.socket)

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        sock = self.socket
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            while True:
                try:
                    data = sock.recv(max_bytes or 65536)
                    break
                except BlockingIOError:
                    await trio.lowlevel.wait_readable(sock)
        except OSError as exc:
            raise trio.BrokenResourceError(str(exc)) from exc
        await trio.lowlevel.cancel_shielded_checkpoint()
        return data

    async def aclose(self) -> None:
        sockets.close(self.socket)
        await trio.lowlevel.checkpoint()


# A connection opened as a stream: plain or TLS.
NodeStream = trio.SocketStream | TLSStream


def take_over(stream: NodeStream) -> socket.socket:
    """The connected non-blocking socket behind ``stream`` (its ``TLSSocket`` for a TLS
    stream), now the caller's to serve and to close (``sockets.close``)."""
    if isinstance(stream, TLSStream):
        return stream.socket
    return sockets.take_over(stream.socket)
