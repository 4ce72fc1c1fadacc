"""The cluster bus transport (trio): listener on the bus port, outbound and inbound links.

The engine (node/cluster/gossip.py) never awaits: it queues bytes on ``Link.out`` and asks for
connections through ``Hooks.connect``. This shell opens/accepts TCP connections, splits the
byte stream into messages (``bus.FrameReader``), feeds them to the engine, runs the engine's
``before_sleep`` (state update + nodes.conf save) before anything is written, and drains
``Link.out`` in one writer task per link. A framing error or any socket error closes that
link only; the engine's cron reconnects outbound links. While a long command blocks the node
(a busy script), ``serve_while_blocked`` reads and writes the open links without waiting, and
accepts new inbound links (their task starts once the node is free again), as Redis serves its
bus then: a peer's PING is still answered, on an old or a new connection.
"""

from __future__ import annotations

import logging
import os
import select
import socket as _stdsocket
from collections.abc import Callable

import trio

from slotgate.eventcore.listen import accept_loop, open_listeners, redis_bind
from slotgate.node.cluster import bus
from slotgate.node.cluster.gossip import Engine, Link

log = logging.getLogger("node.cluster")

RECV_SIZE = 64 * 1024  # bytes per recv
BUS_LISTEN_BACKLOG = 511  # as Redis' cluster bus listener
ACCEPTS_WHILE_BLOCKED = 16  # new inbound links taken per listener and pass while blocked


class Transport:
    """Owns every bus socket. ``run`` serves until cancelled."""

    def __init__(self, engine: Engine, bind_addrs: list[str], port: int,
                 after_input: Callable[[], None]) -> None:
        self.engine = engine
        self.bind_addrs = bind_addrs
        self.port = port
        self.after_input = after_input  # engine.before_sleep + whatever the node adds
        self._nursery: trio.Nursery | None = None
        self._scopes: dict[Link, trio.CancelScope] = {}
        self._pending: list[Link] = []
        # the open links' descriptors and frame readers (serve_while_blocked reads them too)
        self._live: dict[Link, tuple[int, bus.FrameReader]] = {}
        self._listeners: list[_stdsocket.socket] = []  # the bus listening sockets (non-blocking)

    # hooks the engine calls -----------------------------------------------------------------
    def connect(self, link: Link) -> None:
        if self._nursery is None:
            self._pending.append(link)
            return
        self._nursery.start_soon(self._outbound, link)

    def close(self, link: Link) -> None:
        scope = self._scopes.get(link)
        if scope is not None:
            scope.cancel()

    # tasks ------------------------------------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen on the bus port (OSError if it cannot be bound), then serve until cancelled."""
        self._listeners = open_listeners(redis_bind(self.bind_addrs), self.port,
                                         backlog=BUS_LISTEN_BACKLOG)
        listeners = [trio.socket.from_stdlib_socket(sock) for sock in self._listeners]
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                for lsock in listeners:
                    nursery.start_soon(accept_loop, lsock, self._inbound, nursery)
                for link in self._pending:
                    nursery.start_soon(self._outbound, link)
                self._pending.clear()
                task_status.started()
        finally:
            self._nursery = None
            self._listeners = []
            for lsock in listeners:
                lsock.close()

    async def _inbound(self, sock: trio.socket.SocketType) -> None:
        try:
            peer = sock.getpeername()[0]
            local = sock.getsockname()[0]
        except OSError:
            sock.close()
            return
        link = self.engine.accept(_plain_ip(peer), _plain_ip(local))
        await self._serve_link(link, trio.SocketStream(sock))

    def _accept_while_blocked(self) -> None:
        """Take the inbound links waiting on the bus port: each is read and written by
        ``serve_while_blocked`` until its task runs (with the same frame reader)."""
        nursery = self._nursery
        if nursery is None:
            return
        for lsock in self._listeners:
            for _ in range(ACCEPTS_WHILE_BLOCKED):
                try:
                    sock, peer = lsock.accept()
                except OSError:  # nothing waiting (or out of descriptors: the loop retries)
                    break
                try:
                    sock.setblocking(False)
                    sock.setsockopt(_stdsocket.IPPROTO_TCP, _stdsocket.TCP_NODELAY, 1)
                    local = sock.getsockname()[0]
                except OSError:
                    sock.close()
                    continue
                link = self.engine.accept(_plain_ip(peer[0]), _plain_ip(local))
                reader = bus.FrameReader()
                self._live[link] = (sock.fileno(), reader)
                nursery.start_soon(self._serve_adopted, link, sock, reader)

    async def _serve_adopted(self, link: Link, sock: _stdsocket.socket,
                             reader: bus.FrameReader) -> None:
        await self._serve_link(link, trio.SocketStream(trio.socket.from_stdlib_socket(sock)),
                               reader)

    async def _outbound(self, link: Link) -> None:
        node = link.node
        assert node is not None
        timeout_s = max(self.engine.cfg.node_timeout_ms, 1000) / 1000
        stream: trio.SocketStream | None = None
        with trio.move_on_after(timeout_s):
            try:
                stream = await trio.open_tcp_stream(node.ip, node.cport)
            except (OSError, UnicodeError) as e:  # UnicodeError: an address no resolver takes
                log.debug("Connecting with node %s at %s:%d failed: %s",
                          node.name.decode(errors="replace"), node.ip, node.cport, e)
        if stream is None or link.closed:
            if stream is not None:
                await stream.aclose()
            self.engine.on_link_closed(link)
            return
        try:
            link.local_ip = _plain_ip(stream.socket.getsockname()[0])
        except OSError:
            pass
        self.engine.on_link_connected(link)  # the first PING/MEET, behind what the cron queued
        await self._serve_link(link, stream)

    async def _serve_link(self, link: Link, stream: trio.SocketStream,
                          reader: bus.FrameReader | None = None) -> None:
        try:
            stream.setsockopt(_stdsocket.IPPROTO_TCP, _stdsocket.TCP_NODELAY, 1)
        except OSError:
            pass
        try:
            with trio.CancelScope() as scope:
                self._scopes[link] = scope
                if link.closed:
                    scope.cancel()
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._writer, link, stream)
                    await self._reader(link, stream, reader or bus.FrameReader())
                    nursery.cancel_scope.cancel()
        except* (OSError, trio.BrokenResourceError, trio.ClosedResourceError,
                 bus.BusError) as group:
            # the reader runs inside a nursery: its errors arrive as an ExceptionGroup
            log.debug("cluster link closed: %s", group.exceptions[0])
        finally:
            self._scopes.pop(link, None)
            link.wake = _noop
            self.engine.on_link_closed(link)
            with trio.CancelScope(shield=True):
                await stream.aclose()
            self.after_input()

    async def _reader(self, link: Link, stream: trio.SocketStream,
                      reader: bus.FrameReader) -> None:
        self._live[link] = (stream.socket.fileno(), reader)
        try:
            while True:
                data = await stream.receive_some(RECV_SIZE)
                if not data or not self._input(link, reader, data):
                    return
        finally:
            self._live.pop(link, None)

    def _input(self, link: Link, reader: bus.FrameReader, data: bytes) -> bool:
        """The messages completed by ``data`` to the engine. False: close the link (raises
        ``bus.BusError`` on a framing error)."""
        reader.feed(data)
        engine = self.engine
        for msg in reader.messages():
            try:
                engine.on_message(link, msg)
            except Exception:  # noqa: BLE001 - a peer's message must not take us down
                log.exception("cluster bus message from %s could not be processed; "
                              "closing the link", link.peer_ip)
                return False
            if link.closed:
                self.after_input()
                return False
        self.after_input()
        return True

    def serve_while_blocked(self) -> None:
        """Without waiting: read every link with input and hand its messages to the engine,
        then write what the links queued (a link whose writer task is in the middle of a send
        is left to it). Errors and closes are left to the links' tasks, which run later."""
        self._accept_while_blocked()
        live = self._live
        if not live:
            return
        poll = select.poll()
        by_fd: dict[int, tuple[Link, bus.FrameReader]] = {}
        for link, (fd, reader) in live.items():
            poll.register(fd, select.POLLIN)
            by_fd[fd] = (link, reader)
        for fd, _ in poll.poll(0):
            link, reader = by_fd[fd]
            try:
                data = os.read(fd, RECV_SIZE)
                if data and not self._input(link, reader, data):
                    self.close(link)
            except (OSError, bus.BusError):
                self.close(link)
        for link, (fd, _) in list(live.items()):
            if not link.out or link.inflight_bytes or link.closed:
                continue
            data = b"".join(link.out)
            link.out.clear()
            try:
                sent = os.write(fd, data)
            except BlockingIOError:
                sent = 0
            except OSError:
                continue  # the link's tasks find out
            if sent < len(data):
                link.out.append(data[sent:])
            link.send_bytes = len(data) - sent

    async def _writer(self, link: Link, stream: trio.SocketStream) -> None:
        while True:
            while link.out:
                data = b"".join(link.out)
                link.out.clear()
                link.send_bytes = 0
                link.inflight_bytes = len(data)
                await stream.send_all(data)
                link.inflight_bytes = 0
            event = trio.Event()
            link.wake = event.set
            if link.out:
                continue
            await event.wait()


def _plain_ip(ip: str) -> str:
    # IPv4-mapped IPv6 (::ffff:1.2.3.4) -> 1.2.3.4, as Redis' anetFdToString does
    return ip[7:] if ip.startswith("::ffff:") and "." in ip else ip


def _noop() -> None:
    return None
