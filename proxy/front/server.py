"""``Proxy``: the listener plus everything behind it, as one structured-concurrency component.

    proxy = Proxy(settings, metrics)
    await nursery.start(proxy.run)   # returns once listening (proxy.listen_address is set)
    proxy.shutdown()                 # stop accepting, finish in-flight requests, return
    proxy.apply_settings(new)        # SIGHUP: take what can change without dropping clients

Inside ``run``: the topology refresher, the backend pool's connection tasks, the listener,
and one task per client session, all in one nursery that ``run`` owns.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import socket
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

import trio

from slotgate.eventcore import sockets, tls
from slotgate.eventcore.listen import accept_loop, open_listeners, resolve
from slotgate.eventcore.writer import Flusher, Writer
from slotgate.proxy import errors
from slotgate.proxy.backend.connections import BackendPool
from slotgate.proxy.front import auth, info, readwrite
from slotgate.proxy.front.clients import ServerStats
from slotgate.proxy.front.db_swap import Swaps
from slotgate.proxy.front.latency import Latency
from slotgate.proxy.front.monitor import Monitors
from slotgate.proxy.front.pause import Pause
from slotgate.proxy.front.session import Session
from slotgate.proxy.front.siblings import Siblings
from slotgate.proxy.front.slowlog import SlowLog
from slotgate.proxy.front.tracking import Tracker
from slotgate.proxy.front.users import ProxyUsers
from slotgate.proxy.ops import tls as tls_config
from slotgate.proxy.ops.metrics import ProxyMetrics
from slotgate.proxy.ops.settings import ProxySettings
from slotgate.proxy.routing import journal, poppark
from slotgate.proxy.routing.durable import DurableWrites
from slotgate.proxy.routing.keywake import KeyWake
from slotgate.proxy.routing.offsets import WriteOffsets
from slotgate.proxy.routing.redirect import error_frame
from slotgate.proxy.routing.replicas import ReplicaReads
from slotgate.proxy.routing.router import Router
from slotgate.proxy.routing.topology import Topology

if TYPE_CHECKING:
    from slotgate.proxy.front.routes import RouteSession

log = logging.getLogger("slotgate.proxy")

# What serves one accepted connection (plain, TLS).
Serve = Callable[[trio.socket.SocketType], Awaitable[None]]

# Settings fixed for the life of a Proxy: the listener and the pool's shape.
RESTART_ONLY_FIELDS = frozenset({"listen_host", "listen_port", "backend_connections_per_node",
                                 "tls_port", "tls_only"})


class Proxy:
    """``worker_index``/``worker_count``: this process is one of the supervisor's workers
    (proxy/ops/supervisor.py): it binds its address with SO_REUSEPORT next to its siblings, and its
    client IDs are ``index + 1``, ``index + 1 + count``, ... so they are unique across them."""

    def __init__(self, settings: ProxySettings, metrics: ProxyMetrics | None = None, *,
                 worker_index: int | None = None, worker_count: int = 1) -> None:
        settings.validate()
        tls_config.load(settings)
        self.settings = settings
        self.metrics = metrics if metrics is not None else ProxyMetrics()
        self.topology = Topology(settings, self.metrics)
        self.users: ProxyUsers = ProxyUsers(settings)  # the proxy's own users (auth section)
        self.router: Router  # set in run()
        # Read and write policies (front/readwrite.py), set in run() with the pool.
        self.replica_reads = ReplicaReads(settings, self.metrics, self.topology)
        self.write_offsets: WriteOffsets
        self.durable: DurableWrites
        self.keywake: KeyWake  # set in run(): pops across slots that wait (keywake.py)
        self.listen_address = ""
        self.tls_address = ""  # the TLS listener's (tls.port), "" without one
        self.sessions: set[Session] = set()
        self.stats = ServerStats()  # what INFO and CLIENT report about the proxy itself
        self.slowlog: SlowLog = SlowLog(settings.slowlog_log_slower_than_us,
                                        settings.slowlog_max_len)
        self.latency: Latency = Latency(settings.latency_monitor_threshold_ms,
                                        settings.latency_tracking,
                                        settings.latency_tracking_info_percentiles)
        self.flusher = Flusher()  # sessions with replies to write at the end of a batch
        self.tracker = Tracker(self)  # CLIENT TRACKING: the proxy's table and its feeds
        self.pause = Pause(self)  # CLIENT PAUSE: the proxy's clients held
        self.swaps = Swaps(self)  # SWAPDB (databases: N): the clients of its databases held
        self.monitors = Monitors(self)  # MONITOR: the sessions that watch every request
        self.siblings: Siblings | None = None  # with workers: the others (front/siblings.py)
        self.worker_index = worker_index
        self.worker_count = worker_count
        first_id = 1 if worker_index is None else worker_index + 1
        self._ids = itertools.count(first_id, worker_count if worker_index is not None else 1)
        self._accepting = trio.CancelScope()
        self._clients: trio.Nursery | None = None  # every session's task runs in it
        self._shutdown = trio.Event()
        # trio time by which a shutdown is over: in-flight requests, blocking ones included,
        # are given up then (None: not shutting down).
        self.stop_deadline: float | None = None

    def info_reply(self, s: RouteSession, argv: Sequence[bytes], replies: Sequence[bytes]) -> bytes:
        """INFO: the masters' replies made into the proxy's own (front/info.py)."""
        return info.merge(s, argv, replies)

    def apply_settings(self, new: ProxySettings) -> None:
        """Take new settings while running (SIGHUP reload); raises ``ValueError`` if invalid.

        Components read ``self.settings`` (one shared object) at use time, so its fields are
        updated in place: timeouts and limits apply to the next request, node connection or
        client session. ``RESTART_ONLY_FIELDS`` keep their running values. The two values
        components copy at start-up (the seed list, the redirect limit) are refreshed here.
        """
        new.validate()
        new.tls_port = self.settings.tls_port  # (restart only: the context follows the listener)
        try:
            tls_config.load(new)  # the certificate files read again (rotation)
        except tls_config.TLSConfigError as exc:  # changed since the reload's check
            log.error("reload: TLS files not taken, the running ones stay: %s", exc)
            new.tls_context = self.settings.tls_context
            new.backend_tls_context = self.settings.backend_tls_context
        auth.reload(self, new)
        for f in dataclasses.fields(new):
            if f.name not in RESTART_ONLY_FIELDS:
                setattr(self.settings, f.name, getattr(new, f.name))
        for session in list(self.sessions):
            readwrite.judge(session, self)  # read/write policies apply to every client
        self.topology._seeds = [f"{h}:{p}" for h, p in new.seeds]
        self.slowlog.configure(new.slowlog_log_slower_than_us, new.slowlog_max_len)
        self.latency.configure(new.latency_monitor_threshold_ms, new.latency_tracking,
                               new.latency_tracking_info_percentiles)
        router = getattr(self, "router", None)
        if router is not None:
            router._max_redirects = new.max_redirects

    def judge_policy(self, session: RouteSession) -> None:
        """A session's login changed: its user's read/write policy (front/readwrite.py)."""
        readwrite.judge(session, self)  # type: ignore[arg-type]

    def shutdown(self) -> None:
        """Stop accepting; sessions finish what they have in flight (grace period); run()
        then returns."""
        self._shutdown.set()

    def stop_now(self) -> None:
        """After ``shutdown()``, for a second signal: also give up the blocking commands and
        transactions in flight (which otherwise run to their end); the caller cancels ``run``."""
        self._shutdown.set()
        for session in list(self.sessions):
            session.abandon_pending()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        s = self.settings
        async with trio.open_nursery() as nursery:
            await nursery.start(self.topology.run)
            pool = BackendPool(s, self.metrics, nursery,
                               lambda node: self.topology.request_refresh("conn_lost"),
                               self.flusher.flush)
            self.router = Router(s, self.metrics, self.topology, pool, nursery)
            self.write_offsets = WriteOffsets(pool.dirty)
            self.durable = DurableWrites(s, self.metrics, pool.dirty)
            self.keywake = KeyWake(s, self.metrics, nursery, self.topology)
            nursery.start_soon(self.replica_reads.run)
            if not self.worker_index:  # pops a proxy that died left parked, back in their keys
                nursery.start_soon(poppark.sweep_at_start, s, self.metrics, self.topology)
                # and the moves it left half way (journal entries), settled
                nursery.start_soon(journal.sweep_forever, s, self.metrics, self.topology)
            # A worker shares its address with its siblings (SO_REUSEPORT).
            serving: list[tuple[trio.socket.SocketType, Serve]] = []
            if not s.tls_only:
                listeners = [trio.socket.from_stdlib_socket(sock) for sock in open_listeners(
                    resolve(s.listen_host), s.listen_port,
                    reuse_port=self.worker_index is not None)]
                host, port = listeners[0].getsockname()[:2]
                self.listen_address = f"{host}:{port}"
                log.info("listening on %s", self.listen_address)
                serving += [(sock, self._serve) for sock in listeners]
            if s.tls_port is not None:
                tls_listeners = [trio.socket.from_stdlib_socket(sock) for sock in open_listeners(
                    resolve(s.listen_host), s.tls_port, reuse_port=self.worker_index is not None)]
                host, port = tls_listeners[0].getsockname()[:2]
                self.tls_address = f"{host}:{port}"
                self.listen_address = self.listen_address or self.tls_address
                log.info("listening for TLS on %s", self.tls_address)
                serving += [(sock, self._serve_tls) for sock in tls_listeners]
            try:
                async with trio.open_nursery() as clients:
                    self._clients = clients
                    clients.start_soon(self._accept_loop, serving, clients)
                    task_status.started()
                    await self._shutdown.wait()
                    self.stop_deadline = trio.current_time() + s.shutdown_grace_ms / 1000
                    nursery.start_soon(self._give_up_at_deadline)
                    self._accepting.cancel()
                    for session in list(self.sessions):
                        session.stop_reading()  # a parked one gets a task for it
                    # Sessions drain (bounded by their grace period) and close themselves.
            finally:
                self._clients = None
                # Cancelled (not shut down): parked sessions have no task to close them.
                with trio.CancelScope(shield=True):
                    for session in list(self.sessions):
                        await session.close_parked()
                        if session.closed:
                            self.sessions.discard(session)
            nursery.cancel_scope.cancel()

    async def _give_up_at_deadline(self) -> None:
        assert self.stop_deadline is not None
        await trio.sleep_until(self.stop_deadline)
        for session in list(self.sessions):
            session.abandon_pending()

    async def _accept_loop(self, listeners: list[tuple[trio.socket.SocketType, Serve]],
                           clients: trio.Nursery) -> None:
        with self._accepting:
            try:
                async with trio.open_nursery() as accept_nursery:
                    for listener, serve in listeners:
                        accept_nursery.start_soon(accept_loop, listener, serve, clients)
            finally:
                for listener, _ in listeners:
                    listener.close()

    async def _serve_tls(self, tsock: trio.socket.SocketType) -> None:
        """A TLS client: the handshake with the context of now (a reload's new certificate
        serves the next handshake), then a session as for a plain client."""
        ctx = self.settings.tls_context
        if ctx is None:  # (no listener without a context)
            tsock.close()
            return
        sock = tls.wrap(ctx, sockets.take_over(tsock), server_side=True)
        del tsock  # (as in _serve)
        try:
            with trio.fail_after(tls_config.HANDSHAKE_TIMEOUT_S):
                await tls.handshake(sock)
        except (OSError, trio.TooSlowError) as exc:
            self.metrics.tls_handshake_failed()
            log.debug("TLS handshake failed: %r", exc)
            sockets.close(sock)
            return
        await self._serve_socket(sock, tls=True)

    async def _serve(self, tsock: trio.socket.SocketType) -> None:
        sock = sockets.take_over(tsock)  # the session's from here on
        del tsock  # (the detached trio socket is not kept for the connection's life)
        await self._serve_socket(sock)

    async def _serve_socket(self, sock: socket.socket, tls: bool = False) -> None:
        self.stats.connections_received += 1
        if len(self.sessions) >= self.settings.max_clients:
            self.stats.rejected_connections += 1
            try:
                await Writer([error_frame(errors.MAX_CLIENTS)], sock).send_rest()
            except (trio.ClosedResourceError, OSError):
                pass  # the client is gone already; nothing else to tell it
            sockets.close(sock)
            return
        try:
            peer_host, peer_port = sock.getpeername()[:2]
            peer = f"{peer_host}:{peer_port}"
        except OSError:
            peer = "?"
        session = Session(self, sock, next(self._ids), peer)
        session.tls = tls
        readwrite.judge(session, self)
        self.sessions.add(session)
        await self._run_session(session, None)

    def resume(self, session: Session, woken: object) -> None:
        """A parked session (idle, served by the poller with no task) needs a task again:
        started among the clients' (RuntimeError once the proxy has stopped)."""
        if self._clients is None:
            raise RuntimeError("the proxy has stopped")
        self._clients.start_soon(self._run_session, session, woken)

    async def _run_session(self, session: Session, woken: object) -> None:
        try:
            await session.run(woken)
        except Exception:  # a bug: it ends this client's connection only (closed by run)
            log.exception("client %s: unexpected error; connection closed", session.peer)
        finally:
            if session.closed:  # (not parked)
                self.sessions.discard(session)
