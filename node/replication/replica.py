"""The replica side: the link to our master (one trio task per ``REPLICAOF``).

States (``ROLE`` names them)::

    connect -> connecting -> handshake -> sync (receiving a snapshot) -> connected
       ^__________________________ on any error / disconnect ______________|

Handshake: ``PING``, ``AUTH`` (masterauth), ``REPLCONF listening-port <port>``, ``REPLCONF
capa eof capa psync2``, then ``PSYNC <replid> <offset+1>`` with the history we hold (``? -1``
when none). ``+FULLRESYNC <id> <off>`` is followed by ``$<len>\\r\\n`` and a snapshot (newlines
before it are keepalives): we empty the keyspace, load it and continue at ``off``.
``+CONTINUE [<id>]`` resumes our history (a new id: the master was promoted; our old id
becomes replid2). Then every command of the stream is applied as the master client, its
canonical bytes counted into ``reploff`` and forwarded to our own backlog and replicas; an
``REPLCONF ACK <reploff>`` goes back every second and when ``REPLCONF GETACK`` asks.
Reconnects retry every ``RETRY_S``.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import trio

from slotgate.node.core.errors import CommandError
from slotgate.node.persistence import snapshot
from slotgate.node.replication.apply import Applier, command_len, encode
from slotgate.node.replication.diskless import MARK_CHARS
from slotgate.protocol.resp import ProtocolError, RequestReader

if TYPE_CHECKING:
    from slotgate.node.core.client import Client
    from slotgate.node.persistence.loading import Loader
    from slotgate.node.replication.master import Replication

log = logging.getLogger("node.replication")

RETRY_S = 0.5  # between connection attempts
CONNECT_TIMEOUT_S = 5.0
HANDSHAKE_TIMEOUT_S = 10.0
ACK_PERIOD_S = 1.0
RECV_BYTES = 256 * 1024

_ROLE_STATES = {"connect": "connect", "connecting": "connecting", "handshake": "handshake",
                "sync": "sync", "connected": "connected"}


class LinkError(Exception):
    """The master answered something we cannot continue with."""


# What ends one session (then we reconnect); anything else is a bug and propagates.
_LINK_ERRORS = (OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError,
                LinkError, ProtocolError, snapshot.SnapshotError, ValueError)


class _Conn:
    """Buffered line/bytes reading over a trio stream."""

    def __init__(self, stream: trio.SocketStream, link: MasterLink) -> None:
        self.stream = stream
        self.buf = bytearray()
        self.link = link

    async def _more(self) -> None:
        data = await self.stream.receive_some(RECV_BYTES)
        if not data:
            raise LinkError("connection closed by master")
        self.link.last_io = time.monotonic()
        self.buf += data

    async def line(self) -> bytes:
        while True:
            i = self.buf.find(b"\n")
            if i >= 0:
                line = bytes(self.buf[:i]).rstrip(b"\r")
                del self.buf[: i + 1]
                return line
            await self._more()

    async def command(self, *args: bytes | str) -> bytes:
        await self.stream.send_all(encode([a if isinstance(a, bytes) else a.encode() for a in args]))
        return await self.line()


class MasterLink:
    """Our connection to the master and the state of the stream we replicate."""

    def __init__(self, repl: Replication, host: str, port: int,
                 cached: tuple[str, int] | None) -> None:
        self.repl = repl
        self.server = repl.server
        self.host = host
        self.port = port
        self.state = "connect"
        # The history we hold: (replid, offset of the last byte processed) or None.
        self.cached_master = cached
        self.reploff = cached[1] if cached else 0
        self.read_reploff = self.reploff
        self.last_io = 0.0
        self.down_since = time.monotonic()
        self.ever_connected = False
        self.sync_total = 0
        self.sync_read = 0
        self.applier: Applier | None = None
        self._ack_event = trio.Event()
        self._stream: trio.SocketStream | None = None
        self._db_index = 0

    # -- queried by Replication ----------------------------------------------------------
    def cached(self) -> tuple[str, int] | None:
        if self.state == "connected":
            return (self.repl.replid, self.reploff)
        return self.cached_master

    def role_state(self) -> str:
        return _ROLE_STATES.get(self.state, self.state)

    def stream_db(self) -> int:
        return self.applier.client.db.index if self.applier is not None else 0

    def is_master_client(self, c: Client) -> bool:
        return self.applier is not None and self.applier.client is c

    def request_ack(self) -> None:
        self._ack_event.set()

    def close(self) -> None:
        if self.applier is not None:
            self.applier.close()
            self.applier = None

    # -- the task ------------------------------------------------------------------------
    async def run(self) -> None:
        """Connect, sync, apply; retry forever (until cancelled by REPLICAOF)."""
        while True:
            try:
                await self._session()
            except* _LINK_ERRORS as group:
                log.warning("Replication link with %s:%d: %s", self.host, self.port,
                            group.exceptions[0])
            finally:
                if self.state == "connected":
                    self.cached_master = (self.repl.replid, self.reploff)
                    self.down_since = time.monotonic()
                    log.info("Connection with master lost; cached its state for PSYNC.")
                self.state = "connect"
                self.close()
                if self._stream is not None:
                    with trio.CancelScope(shield=True):
                        await self._stream.aclose()
                    self._stream = None
            await trio.sleep(RETRY_S)

    async def _session(self) -> None:
        self.state = "connecting"
        with trio.fail_after(CONNECT_TIMEOUT_S):
            stream = await trio.open_tcp_stream(self.host, self.port)
        self._stream = stream
        conn = _Conn(stream, self)
        self.state = "handshake"
        with trio.fail_after(HANDSHAKE_TIMEOUT_S):
            reply = await conn.command("PING")
            if reply.startswith(b"-") and not reply.startswith((b"-NOAUTH", b"-NOPERM",
                                                                 b"-ERR operation not permitted")):
                raise LinkError(f"Error reply to PING from master: {reply!r}")
            cfg = self.server.config
            auth = str(cfg.get("masterauth"))
            if auth:
                user = str(cfg.get("masteruser"))
                reply = await (conn.command("AUTH", user, auth) if user
                               else conn.command("AUTH", auth))
                if reply.startswith(b"-"):
                    raise LinkError(f"Unable to AUTH to MASTER: {reply!r}")
            port = int(cfg.get("replica-announce-port")) or self.server.port
            await conn.command("REPLCONF", "listening-port", str(port))
            await conn.command("REPLCONF", "capa", "eof", "capa", "psync2")
            if self.cached_master is not None:
                replid, off = self.cached_master
                fo = self.repl.failover
                extra = fo.psync_extra() if fo is not None else ()
                try:
                    reply = await conn.command("PSYNC", replid, str(off + 1), *extra)
                except Exception:
                    if fo is not None and extra:
                        fo.psync_result(False)  # no answer: the handover failed
                    raise
                if fo is not None and extra:
                    fo.psync_result(reply.startswith((b"+FULLRESYNC", b"+CONTINUE")))
            else:
                reply = await conn.command("PSYNC", "?", "-1")
        if reply.startswith(b"+FULLRESYNC"):
            words = reply.split()
            if len(words) < 3:
                raise LinkError(f"bad FULLRESYNC reply {reply!r}")
            await self._full_sync(conn, words[1].decode(), int(words[2]))
        elif reply.startswith(b"+CONTINUE"):
            words = reply.split()
            self._continue(words[1].decode() if len(words) > 1 else None)
        else:
            raise LinkError(f"Unexpected reply to PSYNC from master: {reply!r}")
        await self._stream_loop(conn)

    async def _full_sync(self, conn: _Conn, replid: str, offset: int) -> None:
        self.state = "sync"
        while True:  # newlines are keepalives sent while the master writes the snapshot
            line = await conn.line()
            if line:
                break
        if not line.startswith(b"$"):
            raise LinkError(f"Bad protocol from MASTER, the first byte is not '$': {line!r}")
        mark = b""
        if line.startswith(b"$EOF:"):  # a diskless transfer: up to the mark (diskless.py)
            mark = line[5:]
            if len(mark) != MARK_CHARS:
                raise LinkError(f"Bad EOF mark from MASTER: {line!r}")
            size = -1
        else:
            size = int(line[1:])
        self.sync_total, self.sync_read = size, 0
        assert self.server.persistence is not None  # installed before replication
        loader = self.server.persistence.loader
        ks = self.server.ks
        if self._diskless_load() and str(self.server.config.get("repl-diskless-load")) \
                == "swapdb" and self.repl.replid == replid:
            # Async loading: the same history again, so the old data set stays served (only
            # no_async_loading commands wait) and the new one replaces it once loaded.
            with loader.state(max(size, 0), async_loading=True):
                log.info("MASTER <-> REPLICA sync: Loading DB in memory (async)")
                data = await self._receive(conn, size, mark, loader)
                dbs = ks.new_dbs()
                res = await loader.load_snapshot(bytes(data), drop_expired=False, dbs=dbs)
                ks.swap_in(dbs)
        elif self._diskless_load():
            # Loaded as it arrives (Redis' diskless load): the old data goes at once and
            # clients are answered -LOADING from here until the new data set is loaded.
            with loader.state(max(size, 0)):
                log.info("MASTER <-> REPLICA sync: Loading DB in memory (diskless)")
                ks.flushall()
                data = await self._receive(conn, size, mark, loader)
                res = await loader.load_snapshot(bytes(data), drop_expired=False)
        else:
            # Received whole first (Redis' temporary file), the old data served meanwhile.
            data = await self._receive(conn, size, mark, None)
            log.info("MASTER <-> REPLICA sync: received %d bytes; flushing old data", len(data))
            with loader.state(len(data)):
                ks.flushall()
                res = await loader.load_snapshot(bytes(data), drop_expired=False)
        del data
        fns = self.server.functions
        if fns is not None:  # the master's libraries replace ours, as its keys do
            try:
                fns.restore(res.functions, b"flush")
            except CommandError as exc:
                log.warning("MASTER <-> REPLICA sync: a function library failed to load: %s", exc)
        repl = self.repl
        repl._drop_replicas()  # their history is not ours any more
        repl.replid, repl.replid2, repl.second_repl_offset = replid, "0" * 40, -1
        repl.backlog.reset(offset)
        repl.backlog.activate()
        self.reploff = self.read_reploff = offset
        self._db_index = int(res.aux.get("repl-stream-db", b"0"))
        log.info("MASTER <-> REPLICA sync: finished with success (%d keys)", res.keys_loaded)

    def _diskless_load(self) -> bool:
        """useDisklessLoad: ``swapdb`` always, ``on-empty-db`` when no key is held."""
        mode = str(self.server.config.get("repl-diskless-load"))
        return mode == "swapdb" or (
            mode == "on-empty-db" and not any(db.size() for db in self.server.ks.dbs))

    async def _receive(self, conn: _Conn, size: int, mark: bytes,
                       loader: Loader | None) -> bytearray:
        """The snapshot: ``size`` bytes, or (size -1) the bytes up to ``mark``. ``loader``:
        its progress follows the transfer."""
        if size >= 0:
            data = bytearray(conn.buf[:size])
            del conn.buf[:size]
        else:
            data = conn.buf
            conn.buf = bytearray()
        self.sync_read = len(data)
        scan = 0
        while True:
            if size < 0:
                at = data.find(mark, scan)
                if at >= 0:  # what follows the mark is the replication stream
                    conn.buf = data[at + len(mark):]
                    del data[at:]
                    return data
                scan = max(0, len(data) - len(mark) + 1)
            elif len(data) >= size:
                return data
            want = RECV_BYTES * 4 if size < 0 else min(RECV_BYTES * 4, size - len(data))
            chunk = await conn.stream.receive_some(want)
            if not chunk:
                raise LinkError("connection lost during the transfer")
            self.last_io = time.monotonic()
            data += chunk
            self.sync_read = len(data)
            if loader is not None:
                loader.loaded_bytes = len(data)

    def _continue(self, new_id: str | None) -> None:
        repl = self.repl
        assert self.cached_master is not None
        cached_id, off = self.cached_master
        self.reploff = self.read_reploff = off
        if repl.backlog.master_repl_offset != off or not repl.backlog.active:
            repl.backlog.reset(off)
            repl.backlog.activate()
        repl.replid = cached_id
        if new_id and new_id != cached_id:
            repl.replid2, repl.second_repl_offset = cached_id, off + 1
            repl.replid = new_id
            repl._drop_replicas()  # let them learn the new id
        log.info("Successful partial resynchronization with master (offset %d).", off)

    async def _stream_loop(self, conn: _Conn) -> None:
        self.state = "connected"
        self.ever_connected = True
        self.cached_master = None
        self.applier = Applier(self.server, f"{self.host}:{self.port}", register=True)
        mc = self.applier.client
        mc.is_master = True
        mc.db = self.server.ks.dbs[self._db_index] if self._db_index < len(self.server.ks.dbs) \
            else self.server.ks.dbs[0]
        reader = RequestReader(max_bulk_len=1 << 62)
        if conn.buf:
            reader.feed(bytes(conn.buf))
            conn.buf.clear()
        timeout_s = int(self.server.config.get("repl-timeout"))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._ack_loop, conn.stream)
            mc.cancel_scope = nursery.cancel_scope
            while True:
                self._apply_pending(reader)
                if mc.killed:
                    raise LinkError("master client killed")
                with trio.move_on_after(timeout_s) as scope:
                    data = await conn.stream.receive_some(RECV_BYTES)
                if scope.cancelled_caught:
                    raise LinkError("timeout: no data from master")
                if not data:
                    raise LinkError("connection closed by master")
                self.last_io = time.monotonic()
                self.read_reploff += len(data)
                reader.feed(data)

    def _apply_pending(self, reader: RequestReader) -> None:
        applier = self.applier
        assert applier is not None
        repl = self.repl
        while True:
            argv = reader.get_request()
            if argv is None:
                return
            applier.apply(argv)
            self.reploff += command_len(argv)
            repl.feed_raw(encode(argv))

    async def _ack_loop(self, stream: trio.SocketStream) -> None:
        while True:
            with trio.move_on_after(ACK_PERIOD_S):
                await self._ack_event.wait()
            self._ack_event = trio.Event()
            await stream.send_all(encode([b"REPLCONF", b"ACK", str(self.reploff).encode()]))
