"""Running a stream of commands as an internal client (AOF loading, a replica's master link).

Sans-IO. ``Applier.apply(argv)`` runs one command of the stream through the dispatcher's
``call`` (stats, propagation, keyspace hooks) without the checks meant for outside clients
(auth, READONLY, cluster redirects): what the stream says happened, happens. MULTI ... EXEC
is held back and run as one unit at EXEC, so a stream cut inside a transaction applies none
of it (``pending_multi`` tells the caller).

``command_len(argv)`` is the byte length of the canonical RESP multibulk encoding of
``argv`` — what our writers (AOF, replication stream) emit — so stream offsets can be
counted per command.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slotgate.node.core import dispatch
from slotgate.node.core.client import Client

if TYPE_CHECKING:
    from slotgate.node.core.server import Server


def command_len(argv: list[bytes]) -> int:
    """len(encode(argv)) without building it."""
    n = len(argv)
    total = len(str(n)) + 3
    for a in argv:
        la = len(a)
        total += len(str(la)) + 5 + la
    return total


def encode(argv: list[bytes]) -> bytes:
    """Canonical multibulk ``*n\\r\\n$len\\r\\narg\\r\\n...``."""
    parts = [b"*%d\r\n" % len(argv)]
    for a in argv:
        parts.append(b"$%d\r\n" % len(a))
        parts.append(a)
        parts.append(b"\r\n")
    return b"".join(parts)


SELECT_CACHE = [encode([b"SELECT", str(i).encode()]) for i in range(16)]


def select_cmd(db_index: int) -> bytes:
    if db_index < len(SELECT_CACHE):
        return SELECT_CACHE[db_index]
    return encode([b"SELECT", str(db_index).encode()])


class Applier:
    """An internal client that executes a command stream."""

    def __init__(self, server: Server, addr: str, register: bool = False) -> None:
        self.server = server
        cid = server._next_client_id
        server._next_client_id += 1
        self.client = Client(server, cid, addr, addr)
        self.client.set_authenticated(True)
        self.client.set_acl_user(None)  # the stream runs unchecked, as Redis' internal clients
        self.registered = register
        if register:
            server.clients[cid] = self.client
        self.multi: list[list[bytes]] | None = None

    @property
    def pending_multi(self) -> bool:
        return self.multi is not None

    def apply(self, argv: list[bytes]) -> bytes:
        """Run one command of the stream; returns its reply (callers usually drop it)."""
        name = argv[0].lower()
        if name == b"multi":
            self.multi = []
            return b""
        if name == b"exec":
            queued, self.multi = self.multi or [], None
            for q in queued:
                self._run(q)
            return b""
        if name == b"discard":
            self.multi = None
            return b""
        if self.multi is not None:
            self.multi.append(argv)
            return b""
        return self._run(argv)

    def _run(self, argv: list[bytes]) -> bytes:
        srv = self.server
        c = self.client
        cmd = srv.table.get(argv[0])
        if cmd is None:
            cmd = srv.table.get(argv[0].lower())
        real, rejected = dispatch.resolve(cmd, argv)
        if rejected is not None or real is None:
            return rejected or b""
        reply = dispatch.call(c, real, argv)
        if srv.ks.ready:
            dispatch.serve_ready_keys(srv)
        return reply

    def close(self) -> None:
        if self.registered:
            self.server.clients.pop(self.client.id, None)
            self.registered = False
