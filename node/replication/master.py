"""Replication: roles, replication ids and offsets, the master side, WAIT, checks, INFO/ROLE.

Master side (flow)::

    write command --call()--> propagate hook ``feed_command``
        -> [SELECT db if the stream's db changes] + RESP argv
        -> backlog (bounded history) and every online replica's output
    replica connects as a client: PING, REPLCONF listening-port/capa, PSYNC <replid> <off>
        -> +CONTINUE <replid> + the backlog since <off>        (ids/offset match the backlog)
        -> +FULLRESYNC <replid> <off>, fork a snapshot writer; stream bytes produced while it
           runs are held per replica and sent right after the snapshot ($<len>\\r\\n<bytes>)
    replicas send REPLCONF ACK <off> every second -> lag, WAIT, min-replicas-to-write

The replica side (connecting, loading, applying the stream) is node/replication/replica.py; the
backlog node/replication/backlog.py; the commands node/replication/commands.py.

API for other subsystems (cluster failover, CLUSTER REPLICATE) — ``get(server)`` returns the
``Replication``:
    ``start_replication(host, port)``  become a replica of host:port (partial resync if the
                                      new master has our history, else full)
    ``stop_replication()``             become a master: new replid, the old one kept as
                                      replid2 up to ``second_repl_offset`` for PSYNC
    ``repl_offset()``                  processed offset (replica) / master_repl_offset (master)
    ``role``, ``replid``, ``replid2``, ``master_host``, ``master_port``, ``link_up()``,
    ``link_down_since_s()``, ``online_replicas()`` (each with ``ack_off``, ``ack_time``,
    ``ip``, ``port``), ``acked(offset)`` (replicas whose ACK reached ``offset``)
    ``role_change_hooks``               fn(role) after every master <-> replica switch
REPLICAOF is refused in cluster mode (as Redis); cluster code calls the API directly.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from slotgate.node.core.errors import CommandError
from slotgate.node.persistence import snapshot
from slotgate.node.replication import diskless
from slotgate.node.replication.apply import encode, select_cmd
from slotgate.node.replication.backlog import Backlog
from slotgate.node.replication.replica import MasterLink
from slotgate.node.scripting.shebang import FLAG_ALLOW_STALE, FLAG_NO_WRITES
from slotgate.protocol.resp import array_header, bulk, integer, simple

if TYPE_CHECKING:
    from slotgate.node.commands.registry import Command
    from slotgate.node.core.client import Client
    from slotgate.node.core.server import Server
    from slotgate.node.replication.failover import Failover

log = logging.getLogger("node.replication")

CRON_INTERVAL_S = 0.1
NEWLINE_KEEPALIVE_S = 1.0  # while a replica waits for its snapshot, send "\n" this often
SNAPSHOT_CHUNK_BYTES = 1 << 20  # snapshot bytes queued to a replica at a time
DRAIN_POLL_S = 0.001  # how often a snapshot sender looks whether the last chunk left

ERR_READONLY = b"-READONLY You can't write against a read only replica.\r\n"
ERR_MASTERDOWN = (b"-MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to "
                  b"'no'.\r\n")
ERR_NOREPLICAS = b"-NOREPLICAS Not enough good replicas to write.\r\n"
ERR_WAIT_REPLICA = (
    "ERR WAIT cannot be used with replica instances. Please also note that since Redis 4.0 if a "
    "replica is configured to be writable (which is not the default) writes to replicas are "
    "just local and are not propagated.")
ERR_NOMASTERLINK = "NOMASTERLINK Can't SYNC while not connected with my master"
ERR_CLUSTER = "ERR REPLICAOF not allowed in cluster mode."
ERR_NOT_INT = "ERR value is not an integer or out of range"
UNBLOCKED_ROLE = (b"-UNBLOCKED force unblock from blocking operation, instance state changed "
                  b"(master -> replica?)\r\n")
PING_CMD = encode([b"PING"])
GETACK_CMD = encode([b"REPLCONF", b"GETACK", b"*"])
NO_ID = "0" * 40


def new_replid() -> str:
    return os.urandom(20).hex()


class Replica:
    """One replica connected to us (master side)."""

    __slots__ = ("client", "state", "port", "ip", "ack_off", "ack_time", "pending", "child",
                 "snap_path", "last_newline", "diskless")

    def __init__(self, client: Client) -> None:
        self.client = client
        self.state = "wait_bgsave"  # wait_bgsave -> online
        self.port = 0
        self.ip = client.addr.rsplit(":", 1)[0]
        self.ack_off = 0
        self.ack_time = time.monotonic()
        self.pending: list[bytes] = []  # stream bytes produced while its snapshot is written
        self.child = 0  # snapshot writer pid
        self.snap_path = ""
        self.last_newline = time.monotonic()
        self.diskless = False  # its snapshot streams from the writer's pipe (diskless.py)

    def send(self, data: bytes) -> None:
        c = self.client
        if c.killed:  # (CLIENT KILL: Redis frees it at once; ours until its task ends)
            return
        c.out.append(data)
        dirty = c.server.repl_dirty
        if not dirty or dirty[-1] is not c:
            dirty.append(c)
        c.wake()


class Replication:
    """Role, ids, offsets, backlog, connected replicas, the master link. ``server.replication``."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.cfg = server.config
        self.role = "master"
        self.replid = new_replid()
        self.replid2 = NO_ID
        self.second_repl_offset = -1
        self.backlog = Backlog(int(self.cfg.get("repl-backlog-size")))
        self.seldb = -1  # db of the stream as replicas see it (-1: emit SELECT next)
        self.replicas: dict[int, Replica] = {}
        self.waiting: list[tuple[Client, int, int]] = []  # (client, numreplicas, target offset)
        self.master_host = ""
        self.master_port = 0
        self.link: MasterLink | None = None
        self._link_scope: trio.CancelScope | None = None
        self._snap_seq = 0
        self.last_ping = time.monotonic()
        self.checks_installed = False
        self.stat_sync_full = 0
        self.stat_sync_partial_ok = 0
        self.stat_sync_partial_err = 0
        self.role_change_hooks: list[Callable[[str], None]] = []
        self.failover: Failover | None = None  # FAILOVER (node/replication/failover.py)

    # -- public API ----------------------------------------------------------------------
    def repl_offset(self) -> int:
        if self.role == "slave" and self.link is not None:
            return self.link.reploff
        return self.backlog.master_repl_offset

    def link_up(self) -> bool:
        return self.link is not None and self.link.state == "connected"

    def link_down_since_s(self) -> int:
        if self.link is None or self.link.state == "connected":
            return 0
        return int(time.monotonic() - self.link.down_since)

    def online_replicas(self) -> list[Replica]:
        return [r for r in self.replicas.values() if r.state == "online"]

    def start_replication(self, host: str, port: int) -> None:
        """Become a replica of ``host:port`` (or switch masters)."""
        cached: tuple[str, int] | None
        if self.role == "master":
            # Our own history is what the new master may continue (e.g. our old replica).
            cached = (self.replid, self.backlog.master_repl_offset)
        else:
            assert self.link is not None
            cached = self.link.cached()
        self._cancel_link()
        self._unblock_waiters(UNBLOCKED_ROLE)
        self.role = "slave"
        self.master_host, self.master_port = host, port
        self.server.ks.active_expire_enabled = False  # the master's DELs expire keys here
        self.link = MasterLink(self, host, port, cached)
        self._update_checks()
        for hook in self.role_change_hooks:
            hook(self.role)
        nursery = self.server.nursery
        if nursery is not None:
            nursery.start_soon(self._run_link, self.link)
        log.info("Connecting to MASTER %s:%d", host, port)

    def stop_replication(self) -> None:
        """Become a master. Keeps the data; the old replid continues as replid2 so replicas
        of the old master (and our own replicas) can partially resync with us."""
        if self.role == "master":
            return
        link = self.link
        offset = link.reploff if link is not None else self.backlog.master_repl_offset
        self._cancel_link()
        self.link = None
        self.role = "master"
        self.master_host, self.master_port = "", 0
        self.backlog.master_repl_offset = offset
        self.replid2 = self.replid
        self.second_repl_offset = offset + 1
        self.replid = new_replid()
        self.seldb = -1
        self.server.ks.active_expire_enabled = True
        if self.backlog.active:
            self.ensure_hook()
        # Sub-replicas reconnect and learn the new id with +CONTINUE.
        self._drop_replicas()
        self._update_checks()
        for hook in self.role_change_hooks:
            hook(self.role)
        log.info("MASTER MODE enabled (new replid %s, replid2 %s up to %d)", self.replid,
                 self.replid2, offset)

    # -- link management -----------------------------------------------------------------
    async def _run_link(self, link: MasterLink) -> None:
        with trio.CancelScope() as scope:
            if self.link is not link:
                return
            self._link_scope = scope
            await link.run()

    def _cancel_link(self) -> None:
        if self._link_scope is not None:
            self._link_scope.cancel()
            self._link_scope = None
        if self.link is not None:
            self.link.close()

    def _drop_replicas(self) -> None:
        for r in list(self.replicas.values()):
            self.server.kill_client(r.client)
            self.forget(r)

    # -- the stream ----------------------------------------------------------------------
    def ensure_hook(self) -> None:
        """Propagation costs the fast path, so the hook is added with the first replica."""
        if self.feed_command not in self.server.ks.propagate_hooks:
            self.server.add_propagate_hook(self.feed_command)

    def feed_command(self, db_index: int, argv: list[bytes]) -> None:
        """Propagate hook (masters only: a replica forwards its master's bytes instead)."""
        if self.role != "master" or not self.backlog.active:
            return
        data = encode(argv)
        if db_index != self.seldb:
            data = select_cmd(db_index) + data
            self.seldb = db_index
        self.feed_raw(data)

    def feed_raw(self, data: bytes) -> None:
        """Bytes of the stream: into the backlog and to every replica."""
        self.backlog.feed(data)
        for r in self.replicas.values():
            if r.state == "online":
                r.send(data)
            else:
                r.pending.append(data)

    # -- replicas (master side) ----------------------------------------------------------
    def psync(self, c: Client, replid: str, offset: int, *, send_fullresync: bool = True) -> bytes:
        """PSYNC/SYNC: make ``c`` a replica; the reply to send first."""
        if self.role == "slave" and not self.link_up():
            raise CommandError(ERR_NOMASTERLINK)
        r = self.replicas.get(c.id)
        if r is None:
            r = Replica(c)
            r.port = c.repl_listening_port
            self.replicas[c.id] = r
        c.is_replica = True
        backlog = self.backlog
        same_history = replid == self.replid or (
            replid == self.replid2 and offset <= self.second_repl_offset)
        if send_fullresync and same_history and backlog.covers(offset):
            data = backlog.since(offset) or b""
            r.state = "online"
            r.ack_off = offset - 1
            r.ack_time = time.monotonic()
            self.stat_sync_partial_ok += 1
            log.info("Partial resynchronization request from %s accepted. Sending %d bytes of "
                     "backlog starting from offset %d.", c.addr, len(data), offset)
            return simple(f"CONTINUE {self.replid}") + data
        if replid != "?":
            self.stat_sync_partial_err += 1
        if not backlog.active:
            if self.role == "master":
                # A new backlog starts a new history (Redis: new id, id2 cleared).
                self.replid = new_replid()
                self.replid2, self.second_repl_offset = NO_ID, -1
            backlog.activate()
        self.ensure_hook()
        self.stat_sync_full += 1
        r.state = "wait_bgsave"
        r.pending = []
        if self.role == "master":
            self.seldb = -1  # the replica's stream starts with a SELECT
            stream_db = 0
        else:
            assert self.link is not None
            stream_db = self.link.stream_db()
        aux = {"repl-stream-db": str(stream_db).encode(), "repl-id": self.replid.encode(),
               "repl-offset": str(backlog.master_repl_offset).encode()}
        fns = self.server.functions
        codes = fns.codes() if fns is not None else ()
        delay_us = int(self.cfg.get("rdb-key-save-delay"))
        try:
            if send_fullresync and c.repl_capa_eof and self.cfg.get("repl-diskless-sync"):
                diskless.start(self, r, aux, codes, delay_us)
            else:
                self._snap_seq += 1
                r.snap_path = f"temp-repl-{os.getpid()}-{self._snap_seq}.snap"
                r.child = snapshot.fork_write(self.server.ks, r.snap_path, aux,
                                              functions=codes, key_delay_us=delay_us)
        except OSError as exc:
            self.forget(r)
            raise CommandError(f"ERR fork failed: {exc}") from None
        log.info("Full resync requested by replica %s; starting snapshot for it (pid %d)",
                 c.addr, r.child)
        if not send_fullresync:
            return b""
        return simple(f"FULLRESYNC {self.replid} {backlog.master_repl_offset}")

    def _snapshot_done(self, r: Replica, ok: bool) -> None:
        r.child = 0
        if not ok:
            log.warning("Snapshot for replica %s failed; closing it", r.client.addr)
            self.server.kill_client(r.client)
            self.forget(r)
            return
        nursery = self.server.nursery
        assert nursery is not None
        nursery.start_soon(self._send_snapshot, r)

    async def _send_snapshot(self, r: Replica) -> None:
        """Stream the snapshot file in chunks (at most about two queued at a time, so the
        event loop never copies the whole file at once), then the bytes held meanwhile."""
        c = r.client
        path = r.snap_path
        sent = 0
        try:
            async with await trio.open_file(path, "rb") as f:
                size = (await trio.Path(path).stat()).st_size
                c.out.append(b"$%d\r\n" % size)
                c.wake()
                while True:
                    chunk = await f.read(SNAPSHOT_CHUNK_BYTES)
                    if not chunk:
                        break
                    if not await self.queue_snapshot_chunk(r, chunk):
                        return
                    sent += len(chunk)
        except OSError as exc:
            log.warning("Cannot send the replica snapshot %s: %s", path, exc)
            self.server.kill_client(c)
            self.forget(r)
            return
        finally:
            try:
                os.unlink(path)
            except OSError:
                pass
            r.snap_path = ""
        self.replica_synced(r)
        log.info("Synchronization with replica %s succeeded (%d bytes)", c.addr, sent)

    async def queue_snapshot_chunk(self, r: Replica, chunk: bytes) -> bool:
        """Queue ``chunk`` of ``r``'s snapshot once the last one left (at most about two
        queued at a time, so the loop never copies a whole snapshot); False: ``r`` is gone."""
        c = r.client
        # The core has no "output drained" event for a client: poll.
        while c.out and not c.killed:  # noqa: ASYNC110
            await trio.sleep(DRAIN_POLL_S)
        if c.killed or self.replicas.get(c.id) is not r:
            return False
        c.out.append(chunk)
        c.wake()
        return True

    def replica_synced(self, r: Replica) -> None:
        """The snapshot went out: then the stream held meanwhile, and ``r`` is online."""
        c = r.client
        c.out.extend(r.pending)
        r.pending = []
        r.state = "online"
        r.ack_time = time.monotonic()
        c.wake()

    def forget(self, r: Replica) -> None:
        self.replicas.pop(r.client.id, None)
        if r.child:
            try:
                os.kill(r.child, 9)
                os.waitpid(r.child, 0)
            except OSError:
                pass
            r.child = 0
        if r.snap_path:
            try:
                os.unlink(r.snap_path)
            except OSError:
                pass
        self._check_waiters()

    def on_client_close(self, c: Client) -> None:
        r = self.replicas.get(c.id)
        if r is not None:
            log.info("Connection with replica %s lost.", c.addr)
            self.forget(r)
        if self.waiting:
            self.waiting = [w for w in self.waiting if w[0] is not c]

    def ack(self, c: Client, offset: int) -> None:
        r = self.replicas.get(c.id)
        if r is None:
            return
        if offset > r.ack_off:
            r.ack_off = offset
        r.ack_time = time.monotonic()
        if self.waiting:
            self._check_waiters()

    def good_replicas(self) -> int:
        max_lag = int(self.cfg.get("min-replicas-max-lag"))
        now = time.monotonic()
        return sum(1 for r in self.replicas.values()
                   if r.state == "online" and now - r.ack_time <= max_lag)

    def acked(self, target: int) -> int:
        return sum(1 for r in self.replicas.values() if r.state == "online" and r.ack_off >= target)

    # -- WAIT ------------------------------------------------------------------------------
    def _check_waiters(self) -> None:
        still: list[tuple[Client, int, int]] = []
        for c, want, target in self.waiting:
            if c.blocked is None:
                continue
            n = self.acked(target)
            if n >= want:
                c.unblock(integer(n))
            else:
                c.blocked.timeout_reply = integer(n)
                still.append((c, want, target))
        self.waiting = still

    def _unblock_waiters(self, reply: bytes) -> None:
        waiting, self.waiting = self.waiting, []
        for c, _, _ in waiting:
            if c.blocked is not None:
                c.unblock(reply)

    # -- command checks (READONLY, MASTERDOWN, NOREPLICAS) ----------------------------------
    def _update_checks(self) -> None:
        need = self.role == "slave" or (
            int(self.cfg.get("min-replicas-to-write")) > 0
            and int(self.cfg.get("min-replicas-max-lag")) > 0)
        if need:
            self.server.add_command_check(self.check_write)
        else:
            self.server.remove_command_check(self.check_write)

    def check_write(self, c: Client, cmd: Command, argv: list[bytes]) -> bytes | None:
        write = cmd.write or (cmd.full_name == "exec" and bool(c.multi)
                              and any(q.write for q, _ in c.multi or ()))
        flags_of = self.server.script_flags_of.get(cmd.full_name)
        script_flags = flags_of(c, argv) if flags_of is not None else None
        if script_flags is not None:  # Redis' scriptFlagsToCmdFlags
            write = not script_flags & FLAG_NO_WRITES
        if self.role == "slave":
            if write and self.cfg.get("replica-read-only"):
                return ERR_READONLY
            if self.running_stale():
                return self._check_stale(c, cmd, script_flags)
            return None
        if not write:
            return None
        need = int(self.cfg.get("min-replicas-to-write"))
        if need and int(self.cfg.get("min-replicas-max-lag")) and self.good_replicas() < need:
            return ERR_NOREPLICAS
        return None

    def running_stale(self) -> bool:
        """A replica whose link to its master is down, with replica-serve-stale-data no."""
        return (self.role == "slave" and not self.link_up()
                and not self.cfg.get("replica-serve-stale-data"))

    @staticmethod
    def _check_stale(c: Client, cmd: Command, script_flags: int | None) -> bytes | None:
        """A stale replica serves only the commands flagged ``stale`` (a script command: by
        its script's allow-stale; EXEC: if every queued command is)."""
        if script_flags is not None:
            stale = bool(script_flags & FLAG_ALLOW_STALE)
        elif cmd.full_name == "exec" and c.multi:
            stale = all("stale" in q.flags for q, _ in c.multi)
        else:
            stale = "stale" in cmd.flags
        return None if stale else ERR_MASTERDOWN

    def on_config(self) -> None:
        self.backlog.resize(int(self.cfg.get("repl-backlog-size")))
        self._update_checks()

    # -- cron ------------------------------------------------------------------------------
    async def run(self) -> None:
        replicaof = str(self.cfg.get("replicaof")).split()
        if len(replicaof) == 2 and self.role == "master":
            self.start_replication(replicaof[0], int(replicaof[1]))
        while True:
            await trio.sleep(CRON_INTERVAL_S)
            self.cron()

    def cron(self) -> None:
        now = time.monotonic()
        for r in list(self.replicas.values()):
            if r.child and not r.diskless:  # a diskless writer is watched by its sender
                code = snapshot.child_status(r.child)
                if code is not None:
                    self._snapshot_done(r, code == 0)
            elif r.state == "online" and now - r.ack_time > int(self.cfg.get("repl-timeout")):
                log.warning("Disconnecting timedout replica %s", r.client.addr)
                self.server.kill_client(r.client)
                self.forget(r)
                continue
            if r.child and not r.diskless and now - r.last_newline >= NEWLINE_KEEPALIVE_S:
                r.last_newline = now
                r.send(b"\n")
        fo = self.failover
        if fo is not None:
            fo.cron()
        period = int(self.cfg.get("repl-ping-replica-period"))
        if (self.role == "master" and self.replicas and now - self.last_ping >= period
                and (fo is None or fo.state == "no-failover")):  # a FAILOVER waits for acks
            self.last_ping = now
            self.feed_raw(PING_CMD)
        if self.waiting:
            self._check_waiters()

    # -- INFO / ROLE -------------------------------------------------------------------------
    def info(self, server: Server) -> list[tuple[str, Any]]:
        rows: list[tuple[str, Any]] = [("role", self.role)]
        link = self.link
        if self.role == "slave" and link is not None:
            now = time.monotonic()
            up = link.state == "connected"
            rows += [
                ("master_host", self.master_host), ("master_port", self.master_port),
                ("master_link_status", "up" if up else "down"),
                ("master_last_io_seconds_ago",
                 int(now - link.last_io) if link.last_io and up else -1),
                ("master_sync_in_progress", int(link.state == "sync")),
                ("slave_read_repl_offset", link.read_reploff),
                ("slave_repl_offset", link.reploff),
            ]
            if link.state == "sync":
                total = link.sync_total
                left = max(0, total - link.sync_read)
                perc = (link.sync_read * 100 / total) if total else 0.0
                rows += [
                    ("master_sync_total_bytes", total), ("master_sync_read_bytes", link.sync_read),
                    ("master_sync_left_bytes", left), ("master_sync_perc", f"{perc:.2f}"),
                    ("master_sync_last_io_seconds_ago", int(now - link.last_io)),
                ]
            if not up:
                rows.append(("master_link_down_since_seconds",
                             int(now - link.down_since) if link.ever_connected else -1))
            rows += [
                ("slave_priority", self.cfg.get("replica-priority")),
                ("slave_read_only", int(bool(self.cfg.get("replica-read-only")))),
                ("replica_announced", int(bool(self.cfg.get("replica-announced")))),
            ]
        rows.append(("connected_slaves", len(self.replicas)))
        now = time.monotonic()
        for i, r in enumerate(self.replicas.values()):
            state = r.state if r.state == "online" else (
                "wait_bgsave" if r.child else "send_bulk")
            rows.append((f"slave{i}", f"ip={r.ip},port={r.port},state={state},"
                                      f"offset={r.ack_off},lag={int(now - r.ack_time)}"))
        b = self.backlog
        rows += [
            ("master_failover_state",
             self.failover.state if self.failover is not None else "no-failover"),
            ("master_replid", self.replid), ("master_replid2", self.replid2),
            ("master_repl_offset", b.master_repl_offset),
            ("second_repl_offset", self.second_repl_offset),
            ("repl_backlog_active", int(b.active)), ("repl_backlog_size", b.size),
            ("repl_backlog_first_byte_offset", b.first_byte_offset),
            ("repl_backlog_histlen", b.histlen),
        ]
        return rows

    def role_reply(self) -> bytes:
        if self.role == "slave" and self.link is not None:
            link = self.link
            offset = link.reploff if link.state == "connected" else -1
            return b"".join([array_header(5), bulk(b"slave"), bulk(self.master_host.encode()),
                             integer(self.master_port), bulk(link.role_state().encode()),
                             integer(offset)])
        parts = [array_header(3), bulk(b"master"), integer(self.backlog.master_repl_offset)]
        online = self.online_replicas()
        parts.append(array_header(len(online)))
        for r in online:
            parts += [array_header(3), bulk(r.ip.encode()), bulk(str(r.port).encode()),
                      bulk(str(r.ack_off).encode())]
        return b"".join(parts)

    def on_shutdown(self) -> None:
        for r in list(self.replicas.values()):
            self.forget(r)
        self._cancel_link()


def get(server: Server) -> Replication:
    """The server's ``Replication`` (created by ``install``)."""
    repl = server.replication
    assert repl is not None  # installed with the server (node/core/server.py SUBSYSTEMS)
    return repl


def install(server: Server) -> None:
    """Attach replication to ``server``: propagate hook, checks, INFO, cron, close hooks."""
    repl = Replication(server)
    server.replication = repl
    server.config_hooks.append(repl.on_config)
    server.background_tasks.append(repl.run)
    server.client_close_hooks.append(repl.on_client_close)
    server.shutdown_hooks.append(repl.on_shutdown)
    server.info_sections["replication"] = repl.info


from slotgate.node.replication import commands as _commands  # noqa: E402,F401 - registers the commands
