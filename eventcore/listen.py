"""Listening sockets and the accept loop.

    addresses: redis_bind(words) (the node, the cluster bus) or resolve(host) (the proxy)
        ─▶ open_listeners(addresses, port, ...) ─▶ [socket, ...]  (bound, listening)
        ─▶ accept_loop(trio socket, handler, nursery): handler(connected socket) per client

Every listener gets SO_REUSEADDR (and SO_REUSEPORT when asked: several processes on one
address), IPv6 ones IPV6_V6ONLY. With port 0 every address gets the port the first one got.
"""

from __future__ import annotations

import errno
import logging
import socket
from collections.abc import Awaitable, Callable, Iterable
from typing import NamedTuple, NoReturn

import trio

log = logging.getLogger("eventcore")

LISTEN_BACKLOG = 65535  # the kernel caps it at net.core.somaxconn
# accept() errors that mean "out of resources right now", not "the listener is broken" (as
# trio's serve_listeners): wait, then accept again.
ACCEPT_CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
ACCEPT_CAPACITY_SLEEP_S = 0.1


class Address(NamedTuple):
    family: int  # socket.AF_INET / AF_INET6, or AF_UNSPEC: whatever the host resolves to
    host: str | None  # None: every local address
    optional: bool = False  # a bind failure skips it instead of failing


def redis_bind(words: Iterable[str]) -> list[Address]:
    """Redis' ``bind`` syntax: a ``-`` prefix makes an address optional, ``*`` is every
    IPv4 address and ``::*`` every IPv6 one; an address with a colon is IPv6."""
    out = []
    for raw in words:
        host = raw.lstrip("-")
        if host == "*":
            host = "0.0.0.0"
        if host == "::*":
            host = "::"
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        out.append(Address(family, host, raw.startswith("-")))
    return out


def resolve(host: str) -> list[Address]:
    """Every address ``host`` resolves to (an empty host: every local address)."""
    return [Address(socket.AF_UNSPEC, host or None)]


def open_listeners(addresses: Iterable[Address], port: int, *, backlog: int = LISTEN_BACKLOG,
                   reuse_port: bool = False, listen: bool = True) -> list[socket.socket]:
    """Sockets bound to ``port`` on each address (all an address resolves to), listening
    unless ``listen`` is False (which reserves the port without taking connections). Raises
    ``OSError`` (address in use, unknown host …); no socket is left open then."""
    out: list[socket.socket] = []
    try:
        for family, host, optional in addresses:
            try:
                out += _bind_all(family, host, port, backlog if listen else None, reuse_port)
            except OSError:
                if not optional:
                    raise
            if out:
                port = out[0].getsockname()[1]  # port 0: the rest on the port the first got
    except BaseException:
        for sock in out:
            sock.close()
        raise
    return out


def _bind_all(family: int, host: str | None, port: int, backlog: int | None,
              reuse_port: bool) -> list[socket.socket]:
    out: list[socket.socket] = []
    try:
        for fam, type_, proto, _, addr in socket.getaddrinfo(
                host, port, family, socket.SOCK_STREAM, flags=socket.AI_PASSIVE):
            sock = socket.socket(fam, type_, proto)
            out.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if fam == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind((addr[0], port, *addr[2:]))
            port = sock.getsockname()[1]  # port 0: the rest on the port this one got
            if backlog is not None:
                sock.listen(backlog)
    except BaseException:
        for sock in out:
            sock.close()
        raise
    return out


async def accept_loop(lsock: trio.socket.SocketType,
                      handler: Callable[[trio.socket.SocketType], Awaitable[object]],
                      nursery: trio.Nursery) -> NoReturn:
    """Accept connections on ``lsock`` forever, starting ``handler(sock)`` in ``nursery`` for
    each (TCP_NODELAY set). Out of file descriptors or memory: wait a little and go on; any
    other accept error is raised."""
    while True:
        try:
            sock, _ = await lsock.accept()
        except OSError as exc:
            if exc.errno in ACCEPT_CAPACITY_ERRNOS:
                log.error("accept() failed: %s; sleeping %d ms", exc,
                          ACCEPT_CAPACITY_SLEEP_S * 1000)
                await trio.sleep(ACCEPT_CAPACITY_SLEEP_S)
                continue
            raise
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass  # not TCP, or already reset: the handler finds out
        nursery.start_soon(handler, sock)
