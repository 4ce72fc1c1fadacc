"""The node's trio shell: listener, clients, active expiry, blocking waits.

Clients are served by one poller task (``eventcore.poller``): every ready socket in one pass,
synchronously (``polled.serve``) ``recv`` -> ``RequestReader.get_requests()`` -> ``dispatch.run_requests``
(handlers append encoded replies to ``c.out``) -> one non-blocking write (``c.writer``,
``eventcore.writer``). Each client also has a task of its own, parked while the poller serves
it; anything unusual (a blocking command, a close, a protocol error, EOF, a full send buffer,
the query-buffer limit) is handed back to that task, which finishes it with awaits and then
hands the client to the poller again. Output for a client produced by someone else (a
wake-up, PUBLISH, MONITOR) is sent by a short flush task started by ``Client.wake``. A bug
that raises while a client is served is logged and closes that client only. Only this module
awaits."""

from __future__ import annotations

import functools
import importlib
import logging
import math
import os
import socket as _stdsocket
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio

from slotgate.eventcore import sockets
from slotgate.eventcore.listen import open_listeners, redis_bind
from slotgate.eventcore.poller import EOF, HandlerError, Poller, receive_ready
from slotgate.node.commands import load_all
from slotgate.node.commands.registry import Command, build_table
from slotgate.node.commands.server_cmds import parse_notify_flags
from slotgate.node.core import dispatch, polled
from slotgate.node.core.blocked import WhileBlocked
from slotgate.node.core.client import Client, output_limit_reached
from slotgate.node.core.config import Config, oblimit_class
from slotgate.node.core.keyspace import Keyspace
from slotgate.node.core.latency import LatencyMonitor
from slotgate.node.core.polled import FLUSH
from slotgate.node.persistence import rdb
from slotgate.node.types import hashes
from slotgate.protocol import monitor
from slotgate.protocol.monitor import redacted
from slotgate.protocol.resp import ProtocolError, RequestReader

if TYPE_CHECKING:  # the subsystems import this module's users; they are loaded by name
    from slotgate.node.cluster.node import ClusterNode
    from slotgate.node.commands.acl import NodeAcl
    from slotgate.node.core.evict import Evictor
    from slotgate.node.core.pause import Pause
    from slotgate.node.core.tracking import Tracking
    from slotgate.node.persistence.manager import Persistence
    from slotgate.node.replication.master import Replication
    from slotgate.node.scripting.engine import ScriptEngine
    from slotgate.node.scripting.functions import Functions

log = logging.getLogger("node")

# Bytes per recv, as Redis' PROTO_IOBUF_LEN: a bytes object of this size is allocated for every
# read and shrunk to what arrived; at 64 KiB the freed rest made glibc consolidate its free
# lists on every read.
RECV_SIZE = 16 * 1024
SLOWLOG_OFF_US = 1 << 62  # slowlog-log-slower-than < 0: no duration reaches it
# Subsystems: importing registers their commands; ``install(server)`` (after the table is
# built) sets its field below (``server.persistence`` ...) and adds hooks, command checks,
# INFO sections and background tasks.
# Scripting comes before persistence: the snapshot or AOF loaded at start holds libraries.
SUBSYSTEMS = ("slotgate.node.commands.acl", "slotgate.node.commands.clients",
              "slotgate.node.core.evict",
              "slotgate.node.scripting.commands", "slotgate.node.scripting.functions",
              "slotgate.node.persistence.manager", "slotgate.node.replication.master",
              "slotgate.node.cluster")

CommandCheck = Callable[[Client, Command, list[bytes]], "bytes | None"]


class Server:
    """A Redis-compatible node. ``await Server(cfg).run()`` serves until cancelled/SHUTDOWN."""

    # The inputs of the server-wide fast-path flag ``slow``: read them freely, change them
    # only with add_monitor / remove_monitor, add_command_check / remove_command_check and
    # set_cluster_routing, which recompute the flag.
    SLOW_INPUTS = ("monitors", "command_checks", "cluster_route", "cluster_keypos")
    acl: NodeAcl  # users, ACL LOG, the ACL file (set by node/commands/acl.py's install)
    tracker: Tracking  # client-side caching (set by node/commands/clients.py's install)
    pause: Pause  # CLIENT PAUSE (set by node/commands/clients.py's install)
    evictor: Evictor  # maxmemory (set by node/core/evict.py's install)

    def __init__(self, config: Config) -> None:
        self.config = config
        # The optional subsystems, each set by its own ``install`` (None: not running).
        self.persistence: Persistence | None = None
        self.replication: Replication | None = None
        self.cluster: ClusterNode | None = None  # cluster-enabled yes
        self.scripting: ScriptEngine | None = None  # EVAL, SCRIPT (node/scripting)
        self.functions: Functions | None = None  # FUNCTION, FCALL (node/scripting)
        self.cluster_enabled: bool = bool(config.get("cluster-enabled"))
        self.ks = Keyspace(int(config.get("databases")), cluster=self.cluster_enabled)
        load_all()
        subsystems = [importlib.import_module(name) for name in SUBSYSTEMS]
        self.table: dict[bytes, Command] = build_table()
        self.clients: dict[int, Client] = {}
        # clients whose output waits for a task (a flush task to start, or the socket to take
        # the rest): a busy script's serving passes write it meanwhile (node/core/blocked.py)
        self.output_waiting: set[Client] = set()
        # script commands (EVAL..., FCALL...): their script's shebang.FLAG_* bits for a call
        # (None: the command's own flags), as Redis' getCommandFlags
        self.script_flags_of: dict[str, Callable[[Client, list[bytes]], int | None]] = {}
        self._next_client_id = 1
        self.start_time = time.time()
        self.start_monotonic = time.monotonic()
        self.run_id = os.urandom(20).hex()
        self.port: int = int(config.get("port"))
        self.listen_addrs: list[tuple[str, int]] = []
        # stats (INFO)
        self.stat_numcommands = 0
        self.stat_numconnections = 0
        self.stat_rejected_conn = 0
        self.stat_net_input_bytes = 0
        self.stat_net_output_bytes = 0
        self.blocked_clients = 0
        self.total_error_replies = 0
        self.skip_checksum_validation = False  # DEBUG SET-SKIP-CHECKSUM-VALIDATION (RESTORE)
        self.error_counts: dict[str, int] = {}  # INFO errorstats: prefix -> count
        self.ops_per_sec = 0
        self._ops_sample: tuple[float, int] = (time.monotonic(), 0)
        self.slowlog: deque[tuple[int, int, int, list[bytes], str, bytes]] = deque()
        self.slowlog_next_id = 0
        self.slowlog_threshold_us = SLOWLOG_OFF_US
        self.latency = LatencyMonitor()
        self.latency_threshold_ms = 0  # latency-monitor-threshold; 0: no events
        self.latency_tracking = True  # latency-tracking: per-command histograms
        # the smaller of the slowlog and latency-monitor thresholds: a command at least this
        # long goes to command_took()
        self.timing_threshold_us = SLOWLOG_OFF_US
        self.hash_max_listpack = (512, 64)  # (entries, value bytes), from apply_config()
        # maxmemory (node/core/evict.py): run after the command checks; the fast path sends a
        # deny-oom command here only once the evictor's ``next_check_dirty`` is reached
        self.oom_check: CommandCheck | None = None
        # -- the fast-path flag's inputs (SLOW_INPUTS): changed only by their methods --------
        self.monitors: tuple[Client, ...] = ()  # MONITOR clients
        # Checks run before every command off the fast path (replica READONLY, NOREPLICAS,
        # the failover write pause): fn(c, cmd, argv) -> an error reply, or None to go on.
        self.command_checks: tuple[CommandCheck, ...] = ()
        # Cluster mode: fn(c, cmd, argv) -> a redirect (MOVED, ASK ...) or None to run it.
        self.cluster_route: CommandCheck | None = None
        # Cluster routing on the fast path (filled by node/cluster/routing.py): per command 0
        # (no keys), the index of its only key, or -1 (ask cluster_keys_here); and the slots
        # served here without further checks.
        self.cluster_keypos: dict[Command, int] | None = None
        # ------------------------------------------------------------------------------------
        self.slow = False  # every client's commands take the full path (_refresh_slow)
        self.cluster_slots: bytes | bytearray = b""
        self.cluster_keys_here: Callable[[Command, list[bytes]], bool] = _keys_here
        # Runs before any client output is written (cluster: save nodes.conf first).
        self.before_reply: Callable[[], None] | None = None
        # Replica links with replication stream queued since the last client reply: written
        # before any reply (``flush_replicas``), as Redis writes replicas first.
        self.repl_dirty: list[Client] = []
        # Polled clients whose replies wait for the end of the poller's pass because replica
        # bytes were queued: the pass's writes then reach each replica in one send.
        self.deferred_replies: list[Client] = []
        # Clients killed while their task was neither parked, nor awaiting, nor running: woken
        # already, with something to finish; their next await is cancelled (_busy).
        self._kill_pending: set[Client] = set()
        self.info_sections: dict[str, Callable[[Server], list[tuple[str, Any]]]] = {}
        self.client_close_hooks: list[Callable[[Client], None]] = []
        self.shutdown_hooks: list[Callable[[], None]] = []
        # what is served while a long command (a busy script) blocks the server
        self.blocked = WhileBlocked(self)
        self.nursery: trio.Nursery | None = None
        self.poller: Poller | None = None  # serves idle clients' sockets (eventcore.poller)
        self.last_save_time = int(time.time())
        self.config_hooks: list[Callable[[], None]] = []  # after start and after CONFIG SET
        # client-output-buffer-limit's ``normal`` class (hard, soft, soft seconds); None: no
        # limit (the default), nothing is checked
        self.normal_obuf_limits: tuple[int, int, int] | None = None
        self.background_tasks: list[Callable[[], Awaitable[None]]] = []  # started by run()
        # awaited by run() once clients are accepted, before the cron and background tasks
        # (a slowed start-up load: node/persistence/loading.py)
        self.loaders: list[Callable[[], Awaitable[None]]] = []
        # run once every loader has finished (the cluster checks its config against the data)
        self.after_load: list[Callable[[], None]] = []
        for mod in subsystems:
            mod.install(self)
        self.renamed_away: set[bytes] = set()  # names rename-command took away
        for old, new in config.renamed_commands:  # rename-command lines
            self.renamed_away.add(old)
            self.renamed_away.discard(new)
            renamed = self.table.pop(old, None)
            self.table.pop(old.upper(), None)
            if renamed is not None and new:
                self.table[new] = self.table[new.upper()] = renamed
        self.apply_config()

    # -- configuration-derived state -------------------------------------------------------
    def apply_config(self) -> None:
        """Re-read settings that live in fast fields (after start and after CONFIG SET)."""
        cfg = self.config
        thr_us = int(cfg.get("slowlog-log-slower-than"))
        # Redis logs a command whose duration in whole microseconds is >= the setting
        self.slowlog_threshold_us = SLOWLOG_OFF_US if thr_us < 0 else thr_us
        self.latency_threshold_ms = int(cfg.get("latency-monitor-threshold"))
        self.latency_tracking = bool(cfg.get("latency-tracking"))
        self.timing_threshold_us = min(self.slowlog_threshold_us, self.latency_threshold_ms * 1000
                                       if self.latency_threshold_ms else SLOWLOG_OFF_US)
        self.ks.notify_flags = parse_notify_flags(str(cfg.get("notify-keyspace-events")))
        self.hash_max_listpack = hashes.set_limits(int(cfg.get("hash-max-listpack-entries")),
                                                   int(cfg.get("hash-max-listpack-value")))
        rdb.LZF["on"] = bool(cfg.get("rdbcompression"))
        limits = oblimit_class(str(cfg.get("client-output-buffer-limit")), "normal")
        self.normal_obuf_limits = limits if limits[0] or limits[1] else None
        for hook in self.config_hooks:
            hook()

    # -- the fast-path flag ------------------------------------------------------------------
    def _refresh_slow(self) -> None:
        """Recompute the server-wide part of the fast-path flag; called only by the methods
        below that change its inputs. Propagation and cluster routing are done on the fast
        path too (node/core/dispatch.py), so propagate hooks are no input."""
        slow = bool(self.monitors or self.command_checks
                    or (self.cluster_route is not None and self.cluster_keypos is None))
        if slow != self.slow:
            self.slow = slow
            for c in self.clients.values():  # each client's ``slow`` includes the server's
                c._refresh_slow()

    def add_command_check(self, check: CommandCheck, *, first: bool = False) -> None:
        """Run ``check`` before every command off the fast path (once, however often added);
        ``first``: before the checks already there."""
        if check not in self.command_checks:
            self.command_checks = ((check, *self.command_checks) if first
                                   else (*self.command_checks, check))
            self._refresh_slow()

    def remove_command_check(self, check: CommandCheck) -> None:
        if check in self.command_checks:
            self.command_checks = tuple(x for x in self.command_checks if x != check)
            self._refresh_slow()

    def add_monitor(self, c: Client) -> None:
        """MONITOR: feed ``c`` every command from now on."""
        c.monitor = True
        if c not in self.monitors:
            self.monitors = (*self.monitors, c)
            self._refresh_slow()

    def remove_monitor(self, c: Client) -> None:
        c.monitor = False
        if c in self.monitors:
            self.monitors = tuple(m for m in self.monitors if m is not c)
            self._refresh_slow()

    def set_cluster_routing(self, route: CommandCheck | None, keypos: dict[Command, int] | None,
                            keys_here: Callable[[Command, list[bytes]], bool]) -> None:
        """Cluster mode: ``route`` decides redirects off the fast path; with ``keypos`` (and
        ``cluster_slots``, ``keys_here``) the fast path routes by itself."""
        self.cluster_route = route
        self.cluster_keypos = keypos
        self.cluster_keys_here = keys_here
        self._refresh_slow()

    def add_propagate_hook(self, hook: Callable[[int, list[bytes]], None]) -> None:
        self.ks.propagate_hooks.append(hook)

    def count_error(self, reply: bytes) -> None:
        """INFO errorstats / total_error_replies for an error reply ``-PREFIX text``."""
        self.total_error_replies += 1
        prefix = reply[1:].split(b" ", 1)[0].decode("utf-8", "replace")
        self.error_counts[prefix] = self.error_counts.get(prefix, 0) + 1

    def block_deadline(self, timeout_s: float) -> float | None:
        return None if timeout_s <= 0 else trio.current_time() + timeout_s

    # -- slowlog / latency monitor / monitor ----------------------------------------------
    def command_took(self, c: Client, cmd: Command, argv: list[bytes], duration_us: int) -> None:
        """A command ran at least ``timing_threshold_us``: the slowlog and the latency
        monitor's ``command`` / ``fast-command`` events take it if it reaches theirs."""
        if duration_us >= self.slowlog_threshold_us:
            self.slowlog_add(c, argv, duration_us)
        self.latency_sample("fast-command" if cmd.fast else "command", duration_us // 1000)

    def latency_sample(self, event: str, ms: int) -> None:
        if self.latency_threshold_ms and ms >= self.latency_threshold_ms:
            self.latency.add(event, ms, int(time.time()))

    def slowlog_add(self, c: Client, argv: list[bytes], duration_us: int) -> None:
        max_len = int(self.config.get("slowlog-max-len"))
        argv = redacted(argv)
        shown = [a if len(a) <= 128 else a[:128] + b"... (%d more bytes)" % (len(a) - 128)
                 for a in argv[:31]]
        if len(argv) > 32:
            shown.append(b"... (%d more arguments)" % (len(argv) - 31))
        elif len(argv) == 32:
            shown.append(argv[31])
        self.slowlog.appendleft((self.slowlog_next_id, int(time.time()), duration_us, shown,
                                 c.addr, c.name))
        self.slowlog_next_id += 1
        while len(self.slowlog) > max_len:
            self.slowlog.pop()

    def feed_monitors(self, c: Client, argv: list[bytes]) -> None:
        line = monitor.line(time.time(), c.db.index, c.addr, argv)
        for m in self.monitors:
            if m is not c:
                m.out.append(line)
                m.wake()

    # -- clients -------------------------------------------------------------------------
    def _new_client(self, addr: str, laddr: str) -> Client:
        cid = self._next_client_id
        self._next_client_id += 1
        c = Client(self, cid, addr, laddr)
        self.clients[cid] = c
        return c

    def _drop_client(self, c: Client) -> None:
        self.clients.pop(c.id, None)
        self._kill_pending.discard(c)
        if c.blocked is not None:
            c.wake = _noop
            c.unblock(None)
        c.unwatch_all()
        if c.monitor:
            self.remove_monitor(c)
        for hook in self.client_close_hooks:
            hook(c)

    def kill_client(self, c: Client) -> None:
        """CLIENT KILL: close ``c`` (after the current reply if it is the caller)."""
        c.killed = True
        c.close_after_reply = True
        if not c.running:
            self._end_task(c)

    def _end_task(self, c: Client) -> None:
        """End a killed client's task (not while it runs requests): cancel what it awaits, or
        wake it from the poller with EOF; else (already woken) its next await is cancelled."""
        scope = c.cancel_scope
        if scope is not None:
            scope.cancel()
            return
        poller = self.poller
        sock = c.writer.sock
        if poller is None or sock is None:
            return  # no task of its own (an internal client), or its task has ended
        if not poller.wake(sock, EOF):
            self._kill_pending.add(c)

    def flush_replicas(self) -> None:
        """Write the replication stream queued for replicas now, with one non-blocking send
        each, before a client's reply goes out. Redis writes replicas first in the same event
        loop turn; here a write is likewise on its way to the replicas before its client
        hears OK, so a master killed right after the reply loses only what Redis would. A rest
        the kernel does not take goes with the replica's own flush task."""
        dirty = self.repl_dirty
        self.repl_dirty = []
        for r in dirty:
            if not r.out or r.writer.sending or r.killed or r.writer.sock is None:
                continue
            self.stat_net_output_bytes += r.writer.write_now()
            if r.out:  # the rest (or the error) goes with the replica's flush task
                r.wake()

    async def _flush(self, c: Client) -> None:
        if self.repl_dirty:
            self.flush_replicas()
        if self.before_reply is not None:
            self.before_reply()
        if c.writer.sending:
            return
        waiting = self.output_waiting
        waiting.add(c)
        try:
            self.stat_net_output_bytes += await c.writer.send_rest()
        finally:
            waiting.discard(c)

    async def _flushed(self, c: Client) -> bool:
        await self._flush(c)
        return True

    async def _flush_task(self, c: Client) -> None:
        c.flush_scheduled = False
        try:
            await self._flush(c)
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
            self.kill_client(c)
        except Exception:  # a bug while sending its output: this client only, not the server
            log.exception("Closing client id=%d addr=%s after an unexpected error", c.id, c.addr)
            self.kill_client(c)
        finally:
            self.output_waiting.discard(c)

    def new_connection(self, sock: _stdsocket.socket, addr: str, laddr: str) -> Client | None:
        """A client for an accepted connection, or None past maxclients."""
        self.stat_numconnections += 1
        if len(self.clients) >= int(self.config.get("maxclients")):
            self.stat_rejected_conn += 1
            return None
        c = self._new_client(addr, laddr)
        c.fd = sock.fileno()
        c.writer.sock = sock
        return c

    async def run_client(self, c: Client, sock: _stdsocket.socket) -> None:
        """Serve ``c`` until it or the server ends, then close its socket. (One coroutine,
        parked in the poller while idle: its frame is part of the memory per connection.)"""
        try:
            cfg = self.config
            # made when accepted (node/core/blocked.py), maybe served already while a long
            # command blocked the server
            reader = self.blocked.taken_back(c)
            if reader is None:
                reader = RequestReader(max_bulk_len=int(cfg.get("proto-max-bulk-len")))
            elif (c.close_after_reply or c.out) and (not await self._busy(c, self._flushed(c))
                                                     or c.close_after_reply):
                return
            qbuf_limit = int(cfg.get("client-query-buffer-limit"))
            c.wake = functools.partial(self._wake, c)  # (a partial: smaller than a closure)
            c.query_buffered = reader.buffered_bytes
            poller = self.poller
            assert poller is not None
            # The poller serves this client until something needs this task (``serve`` returns
            # what): a blocking command, a close, a protocol error, a full send buffer, the
            # query-buffer limit; or EOF. A socket error is raised by ``park``.
            serve = functools.partial(polled.serve, self, c, reader, qbuf_limit,
                                      dispatch.run_requests)
            # A new connection may have sent something (or closed) already: served once now.
            what: Any = poller.serve_now(sock, serve, RECV_SIZE)
            if self.deferred_replies:  # served outside a poller pass: end it here
                self._end_pass()
                if what is None and c.out:  # a rest _end_pass could not hand to a parked task
                    what = FLUSH
            while True:
                if what is None:
                    if c.killed:
                        return
                    # idle: no cancel scope of its own (memory per idle connection); a kill wakes
                    # it from here with EOF (_end_task)
                    what = await poller.park(sock, serve, RECV_SIZE)
                if what is EOF or not await self._busy(c, self._finish(c, sock, reader, what,
                                                                       qbuf_limit)):
                    return
                what = None
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, HandlerError):
            pass  # gone, or a bug the poller logged: this client only
        except Exception:  # a bug while its task served it: this client only
            log.exception("Closing client id=%d addr=%s after an unexpected error", c.id, c.addr)
        finally:
            self._drop_client(c)
            c.writer.sock = None  # nothing more is written to it
            sockets.close(sock)

    def _wake(self, c: Client) -> None:
        """``c.wake``: end its blocking wait, or send its output (a flush task), or end it."""
        ev = c.unblock_event
        if ev is not None:
            ev.set()
            return
        nursery = self.nursery
        if c.out and not c.flush_scheduled and not c.running and nursery is not None:
            c.flush_scheduled = True
            self.output_waiting.add(c)
            nursery.start_soon(self._flush_task, c)
        if c.killed and not c.running:
            self._end_task(c)

    async def _busy(self, c: Client, work: Awaitable[bool]) -> bool:
        """Await ``work`` in a cancel scope that a kill of ``c`` cancels (``_end_task``);
        False: the connection is to be closed (killed, or ``work`` said so)."""
        with trio.CancelScope() as scope:
            c.cancel_scope = scope
            if c in self._kill_pending:
                self._kill_pending.discard(c)
                scope.cancel()
            try:
                return await work
            finally:
                c.cancel_scope = None
        return False  # cancelled: killed

    async def _finish(self, c: Client, sock: _stdsocket.socket, reader: RequestReader,
                      what: Any, qbuf_limit: int) -> bool:
        """Finish what the poller handed back for ``c``; False: close the connection."""
        kind = what[0]
        if kind == "proto":
            self._protocol_error(c, what[1])
            await self._flush(c)
            return False
        if kind == "batch" and not await self._process(c, sock, reader, what[1], what[2]):
            return False
        if c.out:
            await self._flush(c)
        if reader.buffered_bytes() > qbuf_limit:
            self._qbuf_overflow(c)
            return False
        return True

    def _end_pass(self) -> None:
        """After a poller pass: the replication stream of the pass's writes goes to each
        replica in one send, then each served client's replies in one send (Redis' order in
        beforeSleep: replicas, then clients)."""
        if self.repl_dirty:
            self.flush_replicas()
        deferred = self.deferred_replies
        if deferred:
            self.deferred_replies = []
            polled.send_deferred(self, deferred)

    def obuf_over(self, c: Client) -> bool:
        """client-output-buffer-limit ``normal`` for what a pass left unsent in ``c.out``
        (pub/sub clients have their own class, checked on delivery; replicas theirs): over
        it, ``c`` is closed at once and its output dropped. True: closed."""
        limits = self.normal_obuf_limits
        if limits is None or c.pubsub is not None or c.is_replica or c.is_master:
            return False
        over, c.obuf_soft_since_s = output_limit_reached(sum(map(len, c.out)), *limits,
                                                         c.obuf_soft_since_s)
        if not over:
            return False
        log.warning("Client id=%d addr=%s scheduled to be closed ASAP for overcoming of "
                    "output buffer limits.", c.id, c.addr)
        c.out.clear()
        self.kill_client(c)
        return True

    async def _process(self, c: Client, sock: _stdsocket.socket, reader: RequestReader,
                       reqs: list[list[bytes]], idx: int) -> bool:
        """Run ``reqs[idx:]``, then every complete request buffered in ``reader`` (parking
        while blocked). False: the connection is to be closed."""
        run = dispatch.run_requests
        c.running = True
        try:
            while True:
                while True:
                    if c.close_after_reply:
                        await self._flush(c)
                        return False
                    if c.blocked is not None:
                        await self._flush(c)
                        c.running = False
                        await self._wait_unblocked(c, sock, reader)
                        c.running = True
                        if c.killed:
                            return False
                    if idx >= len(reqs):
                        break
                    idx = run(c, reqs, idx)
                if reqs:
                    c.last_interaction_ms = int(time.time() * 1000)
                    if not reader.buffered_bytes():
                        return True
                try:
                    reqs = reader.get_requests()
                except ProtocolError as e:
                    self._protocol_error(c, e)
                    await self._flush(c)
                    return False
                if not reqs:
                    return True
                idx = 0
        finally:
            c.running = False

    def _protocol_error(self, c: Client, e: ProtocolError) -> None:
        c.out.append(b"-" + str(e).encode() + b"\r\n")
        log.debug("protocol error from %s: %s", c.addr, e)

    def _qbuf_overflow(self, c: Client) -> None:
        log.warning("Closing client that reached max query buffer length: id=%d addr=%s",
                    c.id, c.addr)

    async def _wait_unblocked(self, c: Client, sock: _stdsocket.socket, reader: Any) -> None:
        """Park until ``c`` is served, times out, is unblocked or disconnects. Input that
        arrives meanwhile is buffered, not executed (as Redis does for blocked clients)."""
        st = c.blocked
        assert st is not None
        ev = trio.Event()
        c.unblock_event = ev

        async def watch_socket(cancel: trio.CancelScope) -> None:
            while True:
                try:
                    data = await receive_ready(sock, RECV_SIZE)
                except OSError:  # reset: gone, as at EOF
                    data = b""
                if not data:
                    c.killed = True
                    break
                self.stat_net_input_bytes += len(data)
                reader.feed(data)
            cancel.cancel()

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch_socket, nursery.cancel_scope)
                deadline = st.deadline_s if st.deadline_s is not None else math.inf
                with trio.move_on_at(deadline):
                    await ev.wait()
                nursery.cancel_scope.cancel()
        finally:
            c.unblock_event = None
            if c.blocked is not None:
                c.unblock(None if c.killed else c.blocked.timeout_reply)
        if c.out and not c.killed:
            await self._flush(c)

    # -- background ----------------------------------------------------------------------
    async def _cron(self) -> None:
        while True:
            hz = max(1, min(500, int(self.config.get("hz"))))
            await trio.sleep(1.0 / hz)
            t0_ns = time.perf_counter_ns()
            cfg = self.config
            self.ks.refresh_access_clock(str(cfg.get("maxmemory-policy")),
                                         int(cfg.get("lfu-log-factor")),
                                         int(cfg.get("lfu-decay-time")))
            self.ks.active_expire_cycle()
            self.latency_sample("expire-cycle", (time.perf_counter_ns() - t0_ns) // 1_000_000)
            now = time.monotonic()
            t0, n0 = self._ops_sample
            if now - t0 >= 1.0:
                self.ops_per_sec = int((self.stat_numcommands - n0) / (now - t0))
                self._ops_sample = (now, self.stat_numcommands)
                self.evictor.used_bytes()  # once a second: the used-memory peak follows
            if self.ks.ready:
                dispatch.serve_ready_keys(self)

    def request_shutdown(self) -> None:
        for hook in self.shutdown_hooks:
            hook()
        if self.nursery is not None:
            self.nursery.cancel_scope.cancel()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen on every ``bind`` address at ``port`` and serve until cancelled or SHUTDOWN.

        Raises OSError when a listener cannot be opened (the caller reports "Failed listening").
        """
        listeners = self._open_listeners()
        try:
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                self.poller = Poller()
                self.poller.after_pass.append(self._end_pass)
                nursery.start_soon(self.poller.run)
                for lsock in listeners:
                    nursery.start_soon(self.blocked.accept_forever, lsock)
                for loader in self.loaders:
                    await loader()
                for hook in self.after_load:
                    hook()
                nursery.start_soon(self._cron)
                for task in self.background_tasks:
                    nursery.start_soon(task)
                task_status.started()
                log.info("Ready to accept connections")
        finally:
            self.blocked.listeners = []
            for lsock in listeners:
                sockets.close(lsock)
            self.nursery = None
            self.poller = None

    def _open_listeners(self) -> list[_stdsocket.socket]:
        """The listening sockets, non-blocking (accepted from by node/core/blocked.py)."""
        socks = open_listeners(redis_bind(str(self.config.get("bind")).split()), self.port,
                               backlog=int(self.config.get("tcp-backlog")))
        self.blocked.listeners = socks
        for sock in socks:
            sock.setblocking(False)
            self.listen_addrs.append(sock.getsockname()[:2])
        if socks:
            self.port = socks[0].getsockname()[1]
        return socks

    def uptime_s(self) -> int:
        return int(time.monotonic() - self.start_monotonic)


def _noop() -> None:
    return None


def _keys_here(cmd: Command, argv: list[bytes]) -> bool:
    return True
