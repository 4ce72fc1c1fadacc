"""Taking a connected socket over from trio, and closing it.

The poller and the writer call the stdlib socket's ``recv`` and ``send`` directly (cheaper
than ``os.read``/``os.write`` on the descriptor, and than trio's socket methods, which pass
through the scheduler); trio only waits (``wait_readable``/``wait_writable``) when the kernel
says "would block".
"""

from __future__ import annotations

import socket

import trio


def take_over(tsock: trio.socket.SocketType) -> socket.socket:
    """The stdlib socket behind ``tsock``, non-blocking; ``tsock`` is unusable after this
    (the caller owns the returned socket and closes it with ``close``)."""
    sock = socket.socket(fileno=tsock.detach())
    sock.setblocking(False)
    return sock


def close(sock: socket.socket) -> None:
    """Close ``sock``; a task still waiting on it (a writer, a reader) gets
    ``trio.ClosedResourceError``."""
    if sock.fileno() != -1:
        trio.lowlevel.notify_closing(sock)
        sock.close()
