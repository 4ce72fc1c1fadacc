"""Serving while a command runs long: Redis' processEventsWhileBlocked (a busy script).

A long command runs inside the poller's pass, so no trio task runs until it returns. Its
``tick`` (node/scripting/busy.py) calls ``WhileBlocked.serve``, which, without waiting:

    1. runs a nested poller pass over every client's socket but the running one's (their
       replies are sent by it: -BUSY, or what the allow-busy commands answer);
    2. accepts new connections on the listening sockets and serves them here;
    3. calls the other services (the cluster bus: node/cluster/transport.py).

The node accepts every connection here (``accept_forever``), synchronously: the client is
made at once and its task started; until the task runs, the connection is served by
``serve`` if a long command starts meanwhile (a connection accepted just before a script
would otherwise wait for the script's end).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from slotgate.eventcore.listen import ACCEPT_CAPACITY_ERRNOS, ACCEPT_CAPACITY_SLEEP_S
from slotgate.node.core import dispatch
from slotgate.protocol.errors import MAX_CLIENTS
from slotgate.protocol.resp import ProtocolError, RequestReader, error

if TYPE_CHECKING:
    from slotgate.node.core.client import Client
    from slotgate.node.core.server import Server

log = logging.getLogger("node")

ACCEPTS_PER_PASS = 16  # new connections taken per listening socket and pass while blocked
RECV_SIZE = 16 * 1024  # as server.RECV_SIZE


class WhileBlocked:
    """What the server serves while a long command blocks it (``server.blocked``)."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.listeners: list[socket.socket] = []  # the client listening sockets (server.run)
        self.services: list[Callable[[], None]] = []  # the cluster bus, ...
        # accepted connections whose task has not run yet: served here while blocked
        self.accepted: dict[Client, RequestReader] = {}
        self.serving = False  # in ``serve``: a long command is running

    async def accept_forever(self, lsock: socket.socket) -> None:
        """The node's accept loop on ``lsock`` (a non-blocking listening socket)."""
        while True:
            await trio.lowlevel.wait_readable(lsock)
            # one at a time, as trio's accept: the task of each runs before the next accept
            # (a connection closed at once is gone before it counts against maxclients)
            if self._accept(lsock, 1):
                log.error("accept() failed: out of resources; sleeping %d ms",
                          ACCEPT_CAPACITY_SLEEP_S * 1000)
                await trio.sleep(ACCEPT_CAPACITY_SLEEP_S)

    def serve(self, running: Client) -> None:
        srv = self.server
        poller = srv.poller
        self.serving = True
        try:
            if poller is not None:
                sock = running.writer.sock
                poller.serve_nested(sock.fileno() if sock is not None else -1)
            for lsock in self.listeners:
                self._accept(lsock, ACCEPTS_PER_PASS)
            for c in list(self.accepted):
                self._serve_accepted(c)
            for service in self.services:
                service()
            for c in srv.output_waiting:  # what the script sent others (PUBLISH), replies
                if c is running:          # larger than the socket buffers: written now
                    continue
                w = c.writer
                if w.sending:
                    w.push_rest()
                elif c.out:
                    srv.stat_net_output_bytes += w.write_now()
        finally:
            self.serving = False

    def close_now(self, c: Client) -> None:
        """A client asked to be closed (QUIT) while blocked: its reply written and the
        connection shut for the peer now, as Redis does; its task releases it later."""
        srv = self.server
        sock = c.writer.sock
        if sock is None or c.writer.sending:
            return
        if c.out:
            if srv.repl_dirty:
                srv.flush_replicas()
            srv.stat_net_output_bytes += c.writer.write_now()
        if not c.out:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def taken_back(self, c: Client) -> RequestReader | None:
        """``c``'s task runs: the reader of its requests if it was served here."""
        return self.accepted.pop(c, None)

    def _accept(self, lsock: socket.socket, limit: int) -> bool:
        """Accept what is waiting (up to ``limit``). True: out of descriptors or memory (the
        accept loop waits a little)."""
        srv = self.server
        nursery = srv.nursery
        if nursery is None:
            return False
        for _ in range(limit):
            try:
                sock, peer = lsock.accept()
            except BlockingIOError:
                return False
            except OSError as exc:
                return exc.errno in ACCEPT_CAPACITY_ERRNOS
            sock.setblocking(False)
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                local = sock.getsockname()
            except OSError:
                sock.close()
                continue
            c = srv.new_connection(sock, f"{peer[0]}:{peer[1]}", f"{local[0]}:{local[1]}")
            if c is None:  # maxclients
                try:
                    sock.send(error(MAX_CLIENTS))
                except OSError:
                    pass
                sock.close()
                continue
            cfg = srv.config
            self.accepted[c] = RequestReader(max_bulk_len=int(cfg.get("proto-max-bulk-len")))
            nursery.start_soon(srv.run_client, c, sock)
        return False

    def _serve_accepted(self, c: Client) -> None:
        """One accepted connection, as the poller would: its complete requests run, the
        replies written. Anything its task must finish (a close, a protocol error, a full
        send buffer) stops the serving here; the task takes over."""
        sock = c.writer.sock
        reader = self.accepted[c]
        if sock is None or c.killed or c.close_after_reply:
            return
        try:
            data = sock.recv(RECV_SIZE)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        srv = self.server
        if not data:
            c.close_after_reply = True  # its task closes it
            return
        srv.stat_net_input_bytes += len(data)
        reader.feed(data)
        try:
            reqs = reader.get_requests()
        except ProtocolError as e:
            c.out.append(b"-" + str(e).encode() + b"\r\n")
            c.close_after_reply = True
            reqs = []
        if reqs:
            c.running = True
            try:
                dispatch.run_requests(c, reqs, 0)
            finally:
                c.running = False
        if c.close_after_reply:
            self.close_now(c)
        elif c.out and not c.writer.sending:
            if srv.repl_dirty:
                srv.flush_replicas()
            srv.stat_net_output_bytes += c.writer.write_now()
