"""``workers: N`` (N > 1): the started process supervises N proxy processes on one address.

    supervisor ──socketpair + "python -m slotgate.proxy ... --worker I/N/FD"──▶ worker 0..N-1
        │ binds the address with SO_REUSEPORT, never listens (reserves the port)
        │ SIGTERM/SIGINT/SIGHUP ──forwarded──▶ every worker
        │ a worker that dies unexpectedly ──▶ started again (backoff while it keeps dying)
        ├ /metrics, /healthz, /slots on the public address: every worker's own endpoint
        │ (loopback, ephemeral port announced on the socketpair), fetched concurrently and
        │ merged (/slots: the per-slot request counts summed)
        └ the socketpairs after ``ready``: what one worker tells the others, relayed
          (MON/PEERMON/LINE for MONITOR; ASK/ANS: a question to every other worker, their
          answers gathered for the asker; proxy/front/siblings.py is the worker's side)

Each worker is a whole proxy (its own node connections, topology, clients); the kernel spreads
new client connections over the workers' listening sockets. Workers run in their own process
group, so a terminal's Ctrl-C reaches them once, through the supervisor; if the supervisor
dies without stopping them, they see their socketpair close and stop as on SIGTERM.
"""

from __future__ import annotations

import itertools
import logging
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

import trio
from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from slotgate.eventcore.backoff import backoff_ms
from slotgate.eventcore.listen import open_listeners, resolve
from slotgate.protocol.slots import SLOT_COUNT
from slotgate.proxy.ops.config import Config
from slotgate.proxy.ops.metrics import (
    PREFIX,
    SLOTS_CONTENT_TYPE,
    MetricsServer,
    parse_slots_json,
    slots_json,
)
from slotgate.proxy.ops.metrics_merge import merge_expositions
from slotgate.proxy.ops.workers import READY, Link, WorkerRole, http_get

log = logging.getLogger("slotgate.supervisor")

READY_TIMEOUT_S = 60.0  # a worker must listen within this (it also learns the topology)
RESTART_BACKOFF_MIN_MS = 100
RESTART_BACKOFF_MAX_MS = 5000
STABLE_RUN_S = 10.0  # a worker that ran this long before dying restarts without backoff
SCRAPE_TIMEOUT_S = 1.0  # per worker, for /metrics
HEALTH_TIMEOUT_S = 2.5  # per worker, for /healthz (a worker probes its masters for up to 1 s)
STOP_KILL_AFTER_S = 10.0  # after the grace period: workers still running get SIGKILL
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class WorkerStartError(Exception):
    """A worker exited before it was ready, while the proxy was starting."""


@dataclass
class Worker:
    index: int
    proc: trio.Process | None = None
    metrics_port: int | None = None
    ready: bool = False  # listening now
    started: trio.Event = field(default_factory=trio.Event)  # ready at least once
    restarts: int = 0
    link: Link | None = None  # the control link while the worker is ready
    monitors: bool = False  # it has MONITOR clients
    told_peer_monitors: bool = False  # what it was last told about the others' monitors


@dataclass
class _Ask:
    """A worker's question relayed to the others: who asked, whose answers are missing."""

    origin: Worker
    origin_id: bytes
    waiting: set[int]
    answers: list[bytes] = field(default_factory=list)


class Supervisor:
    def __init__(self, config: Config, args: Sequence[str]) -> None:
        self.config = config
        self.args = list(args)  # the command line it was started with, given to each worker
        self.workers = [Worker(i) for i in range(config.workers)]
        self.stopping = False
        self._stop = trio.Event()
        self.scrape_errors = 0
        self.listen_address = ""
        self._asks: dict[bytes, _Ask] = {}
        self._ask_seq = itertools.count(1)
        # The clients' pause now: (kind, trio time it ends), told to a worker started again.
        self._pause: tuple[bytes, float] | None = None
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_SupervisorCollector(self))
        ProcessCollector(registry=self.registry)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start the workers, serve until a signal stopped them all. Raises ``OSError`` (the
        address cannot be bound) or ``WorkerStartError``."""
        s = self.config.proxy
        # Bound, not listening: that reserves the port (and resolves port 0) without taking
        # connections, which the kernel spreads only over the workers' listening sockets.
        reserved = open_listeners(resolve(s.listen_host), s.listen_port, reuse_port=True,
                                  listen=False)
        try:
            host, port = reserved[0].getsockname()[:2]
            self.listen_address = f"{host}:{port}"
            # The configured host (a name may stand for several addresses), the bound port.
            name = s.listen_host
            listen_flag = f"[{name}]:{port}" if ":" in name else f"{name}:{port}"
            with trio.open_signal_receiver(*FORWARDED) as signals:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._forward_signals, signals, nursery)
                    async with trio.open_nursery() as workers:
                        for w in self.workers:
                            workers.start_soon(self._supervise, w, listen_flag)
                        for w in self.workers:
                            await w.started.wait()
                        if not self.stopping:
                            if self.config.metrics_listen is not None:
                                server = MergedMetricsServer(self, *self.config.metrics_listen)
                                await nursery.start(server.run)
                            log.info("%d workers listening on %s", len(self.workers),
                                     self.listen_address)
                            task_status.started()
                    nursery.cancel_scope.cancel()  # every worker is gone
        finally:
            for sock in reserved:
                sock.close()

    # --- one worker's life ---------------------------------------------------------------------
    async def _supervise(self, w: Worker, listen_flag: str) -> None:
        quick_exits = 0  # exits in a row since the last stable run
        while not self.stopping:
            started_at = trio.current_time()
            try:
                status = await self._run_once(w, listen_flag)
            finally:
                w.ready = False
            if self.stopping:
                w.started.set()  # (stopped while starting: nothing more to wait for)
                return
            if not w.started.is_set():
                raise WorkerStartError(f"worker {w.index} exited with status {status} before "
                                       "it was ready (its own message is above)")
            if trio.current_time() - started_at >= STABLE_RUN_S:
                quick_exits = 0
            backoff_s = backoff_ms(quick_exits, RESTART_BACKOFF_MIN_MS, RESTART_BACKOFF_MAX_MS) / 1000
            quick_exits += 1
            w.restarts += 1
            log.warning("worker %d exited unexpectedly with status %s; starting it again in "
                        "%.1f s", w.index, status, backoff_s)
            with trio.move_on_after(backoff_s):
                await self._stop.wait()

    async def _run_once(self, w: Worker, listen_flag: str) -> int:
        """Start the worker, wait until it is ready, then until it exits; its exit status."""
        ours, theirs = socket.socketpair()
        role = WorkerRole(w.index, len(self.workers), theirs.fileno())
        argv = [sys.executable, "-m", "slotgate.proxy", *self.args, "--listen", listen_flag,
                "--worker", role.flag()]
        try:
            proc = await trio.lowlevel.open_process(argv, pass_fds=(theirs.fileno(),),
                                                    process_group=0, stdin=subprocess.DEVNULL)
        finally:
            theirs.close()
        w.proc = proc
        link = trio.SocketStream(trio.socket.from_stdlib_socket(ours))
        try:
            if self.stopping:  # a signal came while it was being started
                proc.send_signal(signal.SIGTERM)
            line, rest = b"", b""
            with trio.move_on_after(READY_TIMEOUT_S) as waited:
                line, rest = await _read_line(link)
            if waited.cancelled_caught:
                log.error("worker %d (pid %d) not ready after %.0f s; killing it", w.index,
                          proc.pid, READY_TIMEOUT_S)
                proc.kill()
            elif line.startswith(READY + b" "):
                w.metrics_port = int(line.split()[1])
                w.ready = True
                w.started.set()
                log.info("worker %d ready (pid %d)", w.index, proc.pid)
                w.link = Link(link, rest)
                self._tell_pause(w.link)
                try:
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(w.link.run_writer)
                        nursery.start_soon(self._relay, w, w.link)
                        self._tell_monitors()
                        status = await proc.wait()
                        nursery.cancel_scope.cancel()
                    return status
                finally:
                    self._link_gone(w)
            return await proc.wait()
        finally:
            # Cancelled (the supervisor is failing): no worker may outlive it.
            if proc.returncode is None:
                proc.kill()
                with trio.CancelScope(shield=True):
                    await proc.wait()
            await link.aclose()

    # --- what the workers tell each other -------------------------------------------------------
    async def _relay(self, w: Worker, link: Link) -> None:
        async for frame in link.frames():
            op = frame[0]
            if op == b"LINE" and len(frame) == 2:  # a MONITOR line: to every other monitor
                for o in self.workers:
                    if o is not w and o.monitors and o.link is not None:
                        o.link.send(b"LINE", frame[1])
            elif op == b"MON" and len(frame) == 2:
                w.monitors = frame[1] == b"1"
                self._tell_monitors()
            elif op == b"ASK" and len(frame) >= 3:
                self._ask(w, frame[1], frame[2:])
            elif op == b"ANS" and len(frame) >= 2:
                self._answer(w, frame[1], frame[2:])

    def _tell_monitors(self) -> None:
        """Every ready worker learns whether another one has MONITOR clients (then it sends
        the lines of its clients' requests)."""
        for o in self.workers:
            if o.link is None:
                continue
            others = any(x.monitors for x in self.workers if x is not o and x.link is not None)
            if others != o.told_peer_monitors:
                o.told_peer_monitors = others
                o.link.send(b"PEERMON", b"1" if others else b"0")

    def _note_pause(self, question: list[bytes]) -> None:
        now = trio.current_time()
        if question[0] == b"UNPAUSE":
            self._pause = None
        elif question[0] == b"PAUSE" and len(question) == 3 and question[2].isdigit():
            kind, end = question[1], now + int(question[2]) / 1000
            if self._pause is not None and self._pause[1] > now:
                kind, end = max(kind, self._pause[0]), max(end, self._pause[1])
            self._pause = (kind, end)

    def _tell_pause(self, link: Link) -> None:
        """A worker (started again) holds its clients as the others do until the pause ends
        (its answer, to an ask of no one, is dropped)."""
        if self._pause is not None:
            left_ms = int((self._pause[1] - trio.current_time()) * 1000)
            if left_ms > 0:
                link.send(b"ASK", b"0", b"PAUSE", self._pause[0], b"%d" % left_ms)

    def _ask(self, w: Worker, origin_id: bytes, question: list[bytes]) -> None:
        self._note_pause(question)
        others = [o for o in self.workers if o is not w and o.link is not None]
        if not others:
            if w.link is not None:
                w.link.send(b"ANS", origin_id)
            return
        seq = b"%d" % next(self._ask_seq)
        self._asks[seq] = _Ask(w, origin_id, {o.index for o in others})
        for o in others:
            assert o.link is not None
            o.link.send(b"ASK", seq, *question)

    def _answer(self, w: Worker, seq: bytes, answer: list[bytes]) -> None:
        ask = self._asks.get(seq)
        if ask is None or w.index not in ask.waiting:
            return
        ask.waiting.discard(w.index)
        ask.answers.extend(answer)
        self._maybe_done(seq, ask)

    def _maybe_done(self, seq: bytes, ask: _Ask) -> None:
        if ask.waiting:
            return
        del self._asks[seq]
        if ask.origin.link is not None:
            ask.origin.link.send(b"ANS", ask.origin_id, *ask.answers)

    def _link_gone(self, w: Worker) -> None:
        """A worker stopped: its monitors are gone, and it answers nothing more."""
        w.link = None
        w.monitors = False
        w.told_peer_monitors = False
        for seq, ask in list(self._asks.items()):
            ask.waiting.discard(w.index)
            self._maybe_done(seq, ask)
        self._tell_monitors()

    # --- signals -------------------------------------------------------------------------------
    async def _forward_signals(self, signals: AsyncIterator[int], nursery: trio.Nursery) -> None:
        async for signum in signals:
            if signum == signal.SIGHUP:
                self._send_all(signum)
                continue
            first = not self.stopping
            self.stopping = True
            self._stop.set()
            self._send_all(signum)  # the second one makes the workers stop at once
            if first:
                log.info("stopping %d workers", len(self.workers))
                nursery.start_soon(self._kill_stragglers)

    def _send_all(self, signum: int) -> None:
        for w in self.workers:
            if w.proc is not None and w.proc.returncode is None:
                try:
                    w.proc.send_signal(signum)
                except ProcessLookupError:
                    pass  # it exited in the meantime; its task sees that

    async def _kill_stragglers(self) -> None:
        await trio.sleep(self.config.proxy.shutdown_grace_ms / 1000 + STOP_KILL_AFTER_S)
        for w in self.workers:
            if w.proc is not None and w.proc.returncode is None:
                log.warning("worker %d did not stop; killing it", w.index)
                w.proc.kill()

    # --- metrics -------------------------------------------------------------------------------
    async def merged_metrics(self) -> bytes:
        texts: list[str | None] = [None] * len(self.workers)

        async def scrape(i: int, port: int) -> None:
            try:
                status, body = await http_get(port, "/metrics", SCRAPE_TIMEOUT_S)
                if status == 200:
                    texts[i] = body.decode("utf-8")
            except (OSError, trio.TooSlowError, trio.BrokenResourceError, ValueError,
                    UnicodeDecodeError) as exc:
                log.debug("scraping worker %d: %s", i, exc)

        async with trio.open_nursery() as nursery:
            for i, w in enumerate(self.workers):
                if w.ready and w.metrics_port is not None:
                    nursery.start_soon(scrape, i, w.metrics_port)
        self.scrape_errors += sum(1 for t in texts if t is None)
        own = generate_latest(self.registry).decode()
        return merge_expositions([own, *(t for t in texts if t is not None)])

    async def merged_slots(self) -> list[int]:
        """Every ready worker's /slots, summed (a worker that does not answer is left out)."""
        total = [0] * SLOT_COUNT

        async def scrape(port: int) -> None:
            try:
                status, body = await http_get(port, "/slots", SCRAPE_TIMEOUT_S)
                if status == 200:
                    for slot, n in enumerate(parse_slots_json(body)):
                        total[slot] += n
            except (OSError, trio.TooSlowError, trio.BrokenResourceError, ValueError) as exc:
                log.debug("/slots of a worker: %s", exc)

        async with trio.open_nursery() as nursery:
            for w in self.workers:
                if w.ready and w.metrics_port is not None:
                    nursery.start_soon(scrape, w.metrics_port)
        return total

    async def health(self) -> tuple[bool, str]:
        answers: list[tuple[int, str]] = [(0, "not running")] * len(self.workers)

        async def probe(i: int, port: int) -> None:
            try:
                status, body = await http_get(port, "/healthz", HEALTH_TIMEOUT_S)
                answers[i] = (status, body.decode("utf-8", "replace").strip())
            except (OSError, trio.TooSlowError, trio.BrokenResourceError, ValueError) as exc:
                answers[i] = (0, f"no answer ({exc or type(exc).__name__})")

        async with trio.open_nursery() as nursery:
            for i, w in enumerate(self.workers):
                if w.ready and w.metrics_port is not None:
                    nursery.start_soon(probe, i, w.metrics_port)
        bad = [f"worker {i}: {text}" for i, (status, text) in enumerate(answers) if status != 200]
        if bad:
            return False, "; ".join(bad)
        return True, f"ok: {len(self.workers)} workers; {answers[0][1]}"


async def _read_line(link: trio.SocketStream) -> tuple[bytes, bytes]:
    """The first line the worker sends and what came after it, or b"" if it closed the link
    first (it died)."""
    buf = b""
    while b"\n" not in buf:
        try:
            data = await link.receive_some(256)
        except trio.BrokenResourceError:
            return b"", b""
        if not data:
            return b"", b""
        buf += data
    line, _, rest = buf.partition(b"\n")
    return line, rest


class _SupervisorCollector(Collector):
    def __init__(self, sup: Supervisor) -> None:
        self.sup = sup

    def collect(self) -> list[Metric]:
        ready = sum(1 for w in self.sup.workers if w.ready)
        return [
            GaugeMetricFamily(PREFIX + "workers", "Worker processes listening now.", value=ready),
            CounterMetricFamily(PREFIX + "worker_restarts", "Workers started again after "
                                "exiting unexpectedly.",
                                value=sum(w.restarts for w in self.sup.workers)),
            CounterMetricFamily(PREFIX + "worker_scrape_errors", "Workers left out of a "
                                "/metrics answer: not running, or no answer in time.",
                                value=self.sup.scrape_errors),
        ]


class MergedMetricsServer(MetricsServer):
    """/metrics and /healthz of the whole supervised proxy."""

    def __init__(self, sup: Supervisor, host: str, port: int) -> None:  # noqa: D107
        self.sup = sup
        self.host = host
        self.port = port
        self._routes = {"/metrics": self._metrics, "/healthz": self._healthz,
                        "/slots": self._merged_slots}

    async def _metrics(self) -> tuple[int, bytes, str]:
        return 200, await self.sup.merged_metrics(), CONTENT_TYPE_LATEST

    async def _merged_slots(self) -> tuple[int, bytes, str]:
        return 200, slots_json(await self.sup.merged_slots()), SLOTS_CONTENT_TYPE

    async def _healthz(self) -> tuple[int, bytes, str]:
        ok, reason = await self.sup.health()
        return (200 if ok else 503), (reason + "\n").encode(), "text/plain; charset=utf-8"
