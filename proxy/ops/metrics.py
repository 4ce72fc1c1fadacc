"""Metrics: the events the proxy core reports, their Prometheus export, /metrics and /healthz.

``ProxyMetrics`` is the hook the core calls; ``PrometheusMetrics`` adds the export;
``MetricsServer`` serves it over HTTP from trio; ``check_health`` is the client side of
``/healthz`` for container health checks.

The core calls these methods on its hot path, so they must be cheap and must never raise.
A Prometheus exporter subclasses ``ProxyMetrics`` (or duck-types it) and overrides the methods;
``counters`` keeps working for tests and for the INFO ``# Proxy`` section.

Events (labels stay bounded: command names come from the command table, nodes are
``host:port`` of cluster members, kinds and results are the fixed strings below):
- ``redirect(kind, node)``: kind in MOVED / ASK / TRYAGAIN / CLUSTERDOWN; node that sent it.
- ``command(name, result, latency_s)``: one per client request; result ok / error.
- ``upstream(node, result)``: backend connection events: connected / connect_failed / lost /
  timeout.
- ``topology_refresh(reason, duration_s, ok)``: reason startup / periodic / moved / conn_lost /
  retry.
- ``fanout(subrequests)``: one client request split into this many backend requests.
- ``unknown_fate_write()``: a write was sent and its connection died before the reply.
- ``failover(node)``: a slot-map refresh found ``node``, a replica before, serving as a master.
- ``client_connected()`` / ``client_disconnected()``; ``protocol_error()`` for bad input.

``slot_requests`` is a plain list of 16384 counts (requests routed to each hash slot), bumped
in place on the routing path and served as JSON on ``/slots`` (not on /metrics: 16384 series
would swamp Prometheus); ``slotgate cluster rebalance --by-traffic`` reads it.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from bisect import bisect_left
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from typing import Any

import trio
from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from slotgate.protocol.commands import ALL_COMMANDS
from slotgate.protocol.slots import SLOT_COUNT
from slotgate.proxy.ops.tally import CommandTally
from slotgate.proxy.ops.tls import open_node_stream

log = logging.getLogger("slotgate.metrics")

REDIRECT_KINDS = ("MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN")
DURABLE_RESULTS = ("ok", "short", "lost")


class ProxyMetrics:
    """Counters in a dict; subclass to export them."""

    def __init__(self) -> None:
        self.counters: Counter[tuple[str, ...]] = Counter()
        self.clients_connected = 0
        self.tally = CommandTally()  # requests answered (the session bumps it directly)
        self.auth_refusing: set[str] = set()  # nodes whose last login was refused
        # Requests routed to each slot (a resend after MOVED or a retry counts again); the
        # routing path increments the list in place, so holders of the list see the counts.
        self.slot_requests: list[int] = [0] * SLOT_COUNT

    def redirect(self, kind: str, node: str) -> None:
        self.counters["redirect", kind, node] += 1

    @property
    def commands_total(self) -> int:
        return self.tally.total

    def command(self, name: str, result: str, latency_s: float) -> None:
        # The session counts replies without an error with ``tally.ok`` (compiled) and calls
        # this for errors; both come here from elsewhere (tests, other callers).
        if result == "ok":
            self.tally.ok(name, latency_s)
            return
        self.tally.total += 1
        self.command_failed(name, result, latency_s)

    def command_failed(self, name: str, result: str, latency_s: float) -> None:
        self.counters["command_error", name] += 1

    def upstream(self, node: str, result: str) -> None:
        self.counters["upstream", node, result] += 1

    def backend_auth(self, node: str, ok: bool) -> bool:
        """A login to ``node`` succeeded or was refused; True when ``node`` has just started
        refusing (the one refusal to log until it accepts again)."""
        if ok:
            self.auth_refusing.discard(node)
            return False
        self.counters["backend_auth_failure", node] += 1
        if node in self.auth_refusing:
            return False
        self.auth_refusing.add(node)
        return True

    def client_auth_failed(self, reason: str) -> None:
        """A client's AUTH or HELLO AUTH at the proxy refused (one of ``CLIENT_AUTH_REASONS``)."""
        self.counters["client_auth_failure", reason] += 1

    def tls_handshake_failed(self) -> None:
        """A client's TLS handshake failed or timed out (the connection was closed)."""
        self.counters[("tls_handshake_failure",)] += 1

    def topology_refresh(self, reason: str, duration_s: float, ok: bool = True) -> None:
        self.counters["topology_refresh", reason, "ok" if ok else "failed"] += 1

    def fanout(self, subrequests: int) -> None:
        self.tally.fanout(subrequests)  # counted there: the compiled split path calls it

    def unknown_fate_write(self) -> None:
        self.counters[("unknown_fate_write",)] += 1

    def failover(self, node: str) -> None:
        self.counters["failover", node] += 1

    def read(self, node: str, role: str) -> None:
        """A read-only request a read policy sent to ``node`` (role master / replica)."""
        self.counters["read", node, role] += 1

    def durable_wait(self, result: str) -> None:
        """A durable-writes WAIT answered: ok / short (fewer replicas) / lost (connection)."""
        self.counters["durable_wait", result] += 1

    def client_connected(self) -> None:
        self.clients_connected += 1
        self.counters[("client_connections",)] += 1

    def client_disconnected(self) -> None:
        self.clients_connected -= 1

    def protocol_error(self) -> None:
        self.counters[("protocol_error",)] += 1

    def total(self, *prefix: str) -> int:
        """Sum of every counter whose key starts with ``prefix`` (for INFO and tests)."""
        n = len(prefix)
        return sum(v for k, v in self.counters.items() if k[:n] == prefix)


# === Prometheus export ===========================================================================
#
# ``PrometheusMetrics`` keeps the hook's cheap bookkeeping (the ``counters`` dict above) and adds
# what needs more than a count: commands by name and result, the command latency histogram and
# topology refresh durations. Nothing is formatted or locked per event; a prometheus-client
# collector turns the numbers into metric families only when /metrics is scraped. (A
# prometheus_client ``Counter`` child costs about 1.9 µs per inc+observe here, the plain dict
# about 0.4 µs: bench/RESULTS.md, "Proxy metrics".)
#
# Conventions: prefix ``slotgate_``, base units (seconds), counters end in ``_total``, no
# ``_created`` series; labels are bounded (command names from the command table, anything else
# ``other``; nodes are cluster members' ``host:port``; kinds, events, reasons and roles are
# fixed sets, unexpected values count as ``other``). Labelled series exist at 0 from start-up,
# node series from the moment a node is in the slot map or reported an event.

PREFIX = "slotgate_"
OTHER = "other"
LABEL_KINDS = ("moved", "ask", "tryagain", "clusterdown", "loading", "lost", "busy")
COMMAND_RESULTS = ("ok", "error")
UPSTREAM_EVENTS = ("connected", "connect_failed", "lost", "timeout")
REFRESH_REASONS = ("startup", "periodic", "moved", "conn_lost", "retry", "reload")
CLIENT_AUTH_REASONS = ("wrong_password", "disabled_user", "no_such_user")
REFRESH_OUTCOMES = ("ok", "failed")
NODE_ROLES = ("master", "replica")
MAX_ALIASES = 4096  # command-name spellings remembered for the fast path; bounded against abuse

# Seconds. Sub-millisecond buckets: one proxy hop on a LAN lives between 50 µs and a few ms.
COMMAND_BUCKETS_S = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.0025, 0.005, 0.01, 0.025,
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)
REFRESH_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Histogram:
    """Bucket counts (not cumulative; the last is +Inf) and a sum. ``observe`` is the hot path."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        # bisect_left puts value == bound into that bound's bucket, as Prometheus' "le" means.
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def cumulative(self) -> list[tuple[str, float]]:
        out, total = [], 0
        for bound, n in zip(self.bounds, self.counts, strict=False):
            total += n
            out.append((floatToGoString(bound), float(total)))
        out.append(("+Inf", float(total + self.counts[-1])))
        return out


def _command_names() -> tuple[str, ...]:
    """Every name the core may report: top-level commands and ``container|sub`` names."""
    return tuple(sorted(name.decode() for name in ALL_COMMANDS))


class PrometheusMetrics(ProxyMetrics):
    """The hook with Prometheus export. ``registry`` holds its collector (and process metrics).

    ``topology`` (set by whoever owns it: an object with ``slot_map`` — ``owners``, ``masters``,
    ``replicas`` — and ``version``) feeds the slot and node gauges and /healthz. It is read at
    scrape time only.
    """

    def __init__(self, command_names: Iterable[str] | None = None, process_metrics: bool = True) -> None:
        super().__init__()
        names = tuple(command_names) if command_names is not None else _command_names()
        # Labels are top-level names; "config|get" counts as "config".
        self.known_commands = frozenset(n for n in names if "|" not in n)
        # (name as the core passes it, result) -> count, pre-created for every name in the
        # table so the hot path is one dict update; merged into labels at scrape time.
        self.command_counts: dict[tuple[str, str], int] = {
            (n, r): 0 for n in (*names, OTHER) for r in COMMAND_RESULTS
        }
        # The same keys -> seconds spent serving them (INFO commandstats' usec).
        self.command_seconds: dict[tuple[str, str], float] = dict.fromkeys(self.command_counts,
                                                                           0.0)
        self.command_latency = Histogram(COMMAND_BUCKETS_S)
        self.tally.label(self.command_counts, self.command_seconds, self.command_latency.counts,
                         self.command_latency.bounds, self._command_slow)
        self.refresh_duration: dict[tuple[str, str], Histogram] = {
            (r, o): Histogram(REFRESH_BUCKETS_S) for r in REFRESH_REASONS for o in REFRESH_OUTCOMES
        }
        self.topology: Any = None
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(self))
        if process_metrics:
            ProcessCollector(registry=self.registry)

    # --- hot path ----------------------------------------------------------------------------
    def command_failed(self, name: str, result: str, latency_s: float) -> None:
        known = (name, result) in self.command_counts
        self.tally.count(name, result, latency_s)  # (the histogram's sum: tally.latency_sum)
        if known and result != "ok":
            self.counters["command_error", name] += 1

    def _command_slow(self, name: str | bytes, result: str) -> None:
        """A name or result outside the table: count it under its bounded labels."""
        label = self.command_label(name)
        res = result if result in COMMAND_RESULTS else "error"
        self.command_counts[(label, res)] += 1
        if res != "ok":
            self.counters["command_error", label] += 1

    def command_label(self, name: str | bytes) -> str:
        """The bounded label for a command name: its table name, its container's, or other."""
        text = name.decode("utf-8", "replace") if isinstance(name, bytes) else name
        text = text.lower()
        top = text.partition("|")[0]
        return top if top in self.known_commands else OTHER

    def topology_refresh(self, reason: str, duration_s: float, ok: bool = True) -> None:
        super().topology_refresh(reason, duration_s, ok)
        key = (reason if reason in REFRESH_REASONS else OTHER, "ok" if ok else "failed")
        h = self.refresh_duration.get(key)
        if h is None:
            h = self.refresh_duration[key] = Histogram(REFRESH_BUCKETS_S)
        h.observe(duration_s)

    # --- read side ---------------------------------------------------------------------------
    def render(self) -> bytes:
        """The text exposition format of everything in ``registry``."""
        return generate_latest(self.registry)

    def count(self, event: str) -> int:
        """An unlabelled event's count."""
        if event == "fanout":
            return self.tally.fanouts
        if event == "fanout_subrequests":
            return self.tally.fanout_subrequests
        return self.counters.get((event,), 0)

    def slot_map(self) -> Any:
        return getattr(self.topology, "slot_map", None)

    def slots_covered(self) -> int:
        m = self.slot_map()
        return 0 if m is None else sum(1 for o in m.owners if o is not None)

    def node_labels(self) -> list[str]:
        """Every node label known: the slot map's members and any node that reported events."""
        seen: dict[str, None] = {}
        m = self.slot_map()
        if m is not None:
            for master in m.masters:
                seen[master] = None
                for replica in m.replicas.get(master, ()):
                    seen[replica] = None
        for key in self.counters:
            if key[0] == "redirect":
                seen[key[2]] = None
            elif key[0] == "upstream":
                seen[key[1]] = None
        return sorted(seen)


def _bounded(value: str, allowed: Sequence[str]) -> str:
    v = value.lower()
    return v if v in allowed else OTHER


class _Collector(Collector):
    """Builds the metric families from a ``PrometheusMetrics`` at scrape time."""

    def __init__(self, m: PrometheusMetrics) -> None:
        self.m = m

    def collect(self) -> Iterator[Metric]:
        m = self.m
        nodes = m.node_labels()
        events: dict[str, dict[tuple[str, ...], float]] = {}
        count: float
        for key, count in m.counters.items():
            events.setdefault(key[0], {})[key[1:]] = count

        commands: dict[tuple[str, ...], float] = {}
        m.tally.settle()
        for (name, result), count in m.command_counts.items():
            labels = (m.command_label(name), result if result in COMMAND_RESULTS else "error")
            commands[labels] = commands.get(labels, 0) + count
        yield _counter("commands", "Client commands by command name and result.",
                       ("command", "result"), commands)

        h = HistogramMetricFamily(PREFIX + "command_duration_seconds",
                                  "Time from reading a client command to its reply being ready.")
        h.add_metric((), m.command_latency.cumulative(), m.tally.latency_sum)
        yield h

        redirects: dict[tuple[str, ...], float] = {(k, n): 0 for k in LABEL_KINDS for n in nodes}
        for (kind, node), count in events.get("redirect", {}).items():
            labels = (_bounded(kind, LABEL_KINDS), node)
            redirects[labels] = redirects.get(labels, 0) + count
        yield _counter("redirects", "Redirect and retry replies from nodes (MOVED, ASK, TRYAGAIN, "
                       "CLUSTERDOWN, LOADING) and lost connections, by the node involved.",
                       ("kind", "node"), redirects)

        upstream: dict[tuple[str, ...], float] = {(n, e): 0 for n in nodes for e in UPSTREAM_EVENTS}
        for (node, event), count in events.get("upstream", {}).items():
            labels = (node, _bounded(event, UPSTREAM_EVENTS))
            upstream[labels] = upstream.get(labels, 0) + count
        yield _counter("upstream_connection_events", "Node connections: connected, "
                       "connect_failed, lost, timeout (a request waited longer than the command "
                       "timeout).", ("node", "event"), upstream)

        auth: dict[tuple[str, ...], float] = {(n,): 0 for n in nodes}
        for (node,), count in events.get("backend_auth_failure", {}).items():
            auth[node,] = count
        yield _counter("backend_auth_failures", "Node connections whose AUTH the node refused "
                       "(wrong backend.username / backend.password), by node.", ("node",), auth)

        refused = events.get("client_auth_failure", {})
        client_auth: dict[tuple[str, ...], float] = {(r,): refused.get((r,), 0)
                                                     for r in CLIENT_AUTH_REASONS}
        yield _counter("client_auth_failures", "Clients' AUTH / HELLO AUTH refused by the "
                       "proxy, by reason (wrong_password, disabled_user, no_such_user).",
                       ("reason",), client_auth)
        yield _counter("tls_handshake_failures", "Client TLS handshakes that failed or timed "
                       "out.", (), {(): events.get("tls_handshake_failure", {}).get((), 0)})

        refreshes: dict[tuple[str, ...], float] = {
            (r, o): 0 for r in REFRESH_REASONS for o in REFRESH_OUTCOMES}
        for (reason, outcome), count in events.get("topology_refresh", {}).items():
            labels = (_bounded(reason, REFRESH_REASONS), outcome)
            refreshes[labels] = refreshes.get(labels, 0) + count
        yield _counter("topology_refreshes", "Slot-map refreshes by reason and outcome.",
                       ("reason", "outcome"), refreshes)
        h = HistogramMetricFamily(PREFIX + "topology_refresh_duration_seconds",
                                  "Time a slot-map refresh took.", labels=("reason", "outcome"))
        for labels, hist in sorted(m.refresh_duration.items()):
            h.add_metric(labels, hist.cumulative(), hist.sum)
        yield h

        slot_map = m.slot_map()
        yield GaugeMetricFamily(PREFIX + "slots_covered", "Hash slots (of 16384) with a master "
                                "in the slot map.", value=m.slots_covered())
        yield GaugeMetricFamily(PREFIX + "slot_map_version", "Counts slot-map refreshes that "
                                "replaced the map.", value=getattr(m.topology, "version", 0))
        roles: dict[tuple[str, ...], float] = {("master",): 0, ("replica",): 0}
        if slot_map is not None:
            roles["master",] = len(slot_map.masters)
            roles["replica",] = sum(len(r) for r in slot_map.replicas.values())
        g = GaugeMetricFamily(PREFIX + "nodes", "Nodes in the slot map by role.", labels=("role",))
        for role_labels, count in roles.items():
            g.add_metric(role_labels, count)
        yield g

        yield from _cluster_health(m, events)
        yield _counter("policy_reads", "Read-only requests a read policy (read_from) routed, by "
                       "node and its role.", ("node", "role"), events.get("read", {}))
        waits: dict[tuple[str, ...], float] = {(r,): 0.0 for r in DURABLE_RESULTS}
        waits.update(events.get("durable_wait", {}))
        yield _counter("durable_waits", "durable_writes WAITs by result: ok, short (fewer "
                       "replicas acknowledged), lost (connection).", ("result",), waits)
        yield GaugeMetricFamily(PREFIX + "connected_clients", "Client connections open now.",
                                value=m.clients_connected)
        for name, event, doc in _SINGLE_COUNTERS:
            yield CounterMetricFamily(PREFIX + name, doc, value=m.count(event))


# (metric name without prefix/_total, hook event, help)
_SINGLE_COUNTERS = (
    ("client_connections", "client_connections", "Client connections accepted."),
    ("fanout_requests", "fanout", "Client commands split into per-node requests."),
    ("fanout_subrequests", "fanout_subrequests", "Per-node requests sent for split commands."),
    ("unknown_fate_writes", "unknown_fate_write", "Writes sent to a node whose connection died "
     "before the reply: the client got an error, and the write may or may not have happened."),
    ("protocol_errors", "protocol_error", "Client connections closed for a RESP protocol error."),
)


def _cluster_health(m: PrometheusMetrics,
                    events: dict[str, dict[tuple[str, ...], float]]) -> Iterator[Metric]:
    """Failovers seen, and the members' health and replicas' lag as the last CLUSTER SHARDS
    told them (absent on servers that only answer CLUSTER SLOTS)."""
    # At 0 for every known node first, so that increase() sees the step from 0 to 1.
    failovers: dict[tuple[str, ...], float] = {(n,): 0 for n in m.node_labels()}
    failovers.update(events.get("failover", {}))
    yield _counter("failovers", "Replicas seen serving as masters after a slot-map refresh "
                   "(a failover), by the promoted node.", ("node",), failovers)
    slot_map = m.slot_map()
    members = getattr(slot_map, "members", {})
    g = GaugeMetricFamily(PREFIX + "cluster_node_online", "1 when the cluster reports the node "
                          "online, 0 when it reports it failed or loading.", labels=("node", "role"))
    for node, (role, health) in sorted(members.items()):
        g.add_metric((node, _bounded(role, NODE_ROLES)), 1.0 if health == "online" else 0.0)
    yield g
    g = GaugeMetricFamily(PREFIX + "replica_lag_bytes", "How far an online replica's "
                          "replication offset is behind its master's, in bytes.",
                          labels=("node", "master"))
    for node, (master, lag_bytes) in sorted(getattr(slot_map, "replica_lag_bytes", {}).items()):
        g.add_metric((node, master), float(lag_bytes))
    yield g


def _counter(name: str, doc: str, labels: Sequence[str],
             values: dict[tuple[str, ...], float]) -> CounterMetricFamily:
    f = CounterMetricFamily(PREFIX + name, doc, labels=labels)
    for label_values, count in sorted(values.items()):
        f.add_metric(label_values, count)
    return f


# === HTTP: /metrics and /healthz ================================================================
#
# A deliberately tiny HTTP/1.x server on a trio listener (no threads): one request per
# connection, ``Connection: close``. GET or HEAD only.

HTTP_HEAD_LIMIT = 8192  # bytes; a request head longer than this gets 431
HTTP_READ_TIMEOUT_S = 5.0
HTTP_LINGER_S = 1.0  # after answering a too-large request: how long we drain its rest
HTTP_LINGER_BYTES = 1024 * 1024
PROBE_TIMEOUT_S = 1.0  # per master, for /healthz
PROBE_CACHE_S = 1.0  # /healthz reuses a probe this recent
_PING = b"*1\r\n$4\r\nPING\r\n"


class Health:
    """Readiness: every one of the 16384 slots has a master in the slot map, and every such
    master answers PING now (``+PONG``; ``-NOAUTH`` also proves it is up). Probes run at most
    once per ``PROBE_CACHE_S``, so frequent health checks cost the masters nothing much."""

    def __init__(self, metrics: PrometheusMetrics) -> None:
        self.metrics = metrics
        self._checked_at = -1e9
        self._last: tuple[bool, str] = (False, "not checked yet")

    async def check(self) -> tuple[bool, str]:
        now = trio.current_time()
        if now - self._checked_at < PROBE_CACHE_S:
            return self._last
        self._last = await self._check()
        self._checked_at = trio.current_time()
        return self._last

    async def _check(self) -> tuple[bool, str]:
        covered = self.metrics.slots_covered()
        if covered < SLOT_COUNT:
            return False, f"slots covered {covered}/{SLOT_COUNT}"
        m = self.metrics.slot_map()
        masters = list(m.masters) if m is not None else []
        down: list[str] = []
        async with trio.open_nursery() as nursery:
            for node in masters:
                nursery.start_soon(self._probe, node, down)
        if down:
            return False, f"masters unreachable: {', '.join(sorted(down))}"
        return True, f"ok: {SLOT_COUNT}/{SLOT_COUNT} slots, {len(masters)} masters reachable"

    async def _probe(self, node: str, down: list[str]) -> None:
        from slotgate.proxy.backend.auth import login  # (auth reports to this module)

        settings = getattr(self.metrics.topology, "settings", None)  # credentials, TLS
        try:
            with trio.fail_after(PROBE_TIMEOUT_S):
                stream = await open_node_stream(node, settings)
                async with stream:
                    if settings is not None:
                        await login(stream, node, settings, self.metrics)
                    await stream.send_all(_PING)
                    reply = b""
                    while b"\r\n" not in reply:
                        data = await stream.receive_some(256)
                        if not data:
                            break
                        reply += data
        except (OSError, trio.TooSlowError, trio.BrokenResourceError):
            down.append(node)
            return
        # +PONG; an auth-protected node answering -NOAUTH is reachable too (a refused login
        # raised above: the proxy cannot use that node).
        if not (reply.startswith(b"+PONG") or reply.startswith(b"-NOAUTH")):
            down.append(node)


_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 400: "Bad Request",
            431: "Request Header Fields Too Large", 500: "Internal Server Error",
            503: "Service Unavailable"}


def _response(status: int, body: bytes, content_type: str, head_only: bool) -> bytes:
    head = (
        f"HTTP/1.1 {status} {_REASONS[status]}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode("ascii")
    return head if head_only else head + body


class MetricsServer:
    """Serves ``/metrics`` and ``/healthz`` for a ``PrometheusMetrics`` on ``host:port``."""

    def __init__(self, metrics: PrometheusMetrics, host: str, port: int) -> None:
        self.metrics = metrics
        self.health = Health(metrics)
        self.host = host
        self.port = port
        self._routes: dict[str, Callable[[], Awaitable[tuple[int, bytes, str]]]] = {
            "/metrics": self._metrics,
            "/healthz": self._healthz,
            "/slots": self._slots,
        }

    async def run(self, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen and serve until cancelled; ``task_status.started(listeners)`` once bound."""
        listeners = await trio.open_tcp_listeners(self.port, host=self.host)
        log.info("metrics on http://%s:%d/metrics", self.host, self.port)
        await trio.serve_listeners(self._handle, listeners, task_status=task_status)

    async def _metrics(self) -> tuple[int, bytes, str]:
        return 200, self.metrics.render(), CONTENT_TYPE_LATEST

    async def _healthz(self) -> tuple[int, bytes, str]:
        ok, reason = await self.health.check()
        return (200 if ok else 503), (reason + "\n").encode(), "text/plain; charset=utf-8"

    async def _slots(self) -> tuple[int, bytes, str]:
        return 200, slots_json(self.metrics.slot_requests), SLOTS_CONTENT_TYPE

    async def _handle(self, stream: trio.SocketStream) -> None:
        try:
            async with stream:
                head = await self._read_head(stream)
                await stream.send_all(await self._answer(head))
                if head is None:
                    # Unread request bytes would make close() send a reset, which can destroy
                    # the answer before the client reads it: half-close, then drain a little.
                    await stream.send_eof()
                    with trio.move_on_after(HTTP_LINGER_S):
                        drained = 0
                        while drained < HTTP_LINGER_BYTES:
                            data = await stream.receive_some(65536)
                            if not data:
                                break
                            drained += len(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError):
            pass  # the scraper went away or was too slow; nothing to answer to

    async def _read_head(self, stream: trio.SocketStream) -> bytes | None:
        buf = b""
        with trio.fail_after(HTTP_READ_TIMEOUT_S):
            while b"\r\n\r\n" not in buf and b"\n\n" not in buf:
                if len(buf) > HTTP_HEAD_LIMIT:
                    return None
                data = await stream.receive_some(4096)
                if not data:
                    break
                buf += data
        return buf

    async def _answer(self, head: bytes | None) -> bytes:
        if head is None:
            return _response(431, b"request head too large\n", "text/plain", False)
        parts = head.split(b"\r\n", 1)[0].split(b"\n", 1)[0].split()
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
            return _response(400, b"bad request\n", "text/plain", False)
        method, target = parts[0], parts[1].decode("latin-1")
        route = self._routes.get(target.partition("?")[0])
        if route is None:
            return _response(404, b"not found; try /metrics, /healthz or /slots\n", "text/plain", False)
        if method not in (b"GET", b"HEAD"):
            return _response(405, b"GET or HEAD only\n", "text/plain", False)
        try:
            status, body, ctype = await route()
        except Exception:  # a bug here must not take the data path down with it: log it, 500
            log.exception("%s failed", target)
            return _response(500, b"internal error; see the proxy log\n", "text/plain", False)
        return _response(status, body, ctype, method == b"HEAD")


SLOTS_CONTENT_TYPE = "application/json"


def slots_json(slot_requests: Sequence[int]) -> bytes:
    """/slots' body: ``{"slot_requests": {"<slot>": count, ...}}``, slots never asked for
    left out."""
    counts = {str(slot): n for slot, n in enumerate(slot_requests) if n}
    return json.dumps({"slot_requests": counts}, separators=(",", ":")).encode() + b"\n"


def parse_slots_json(body: bytes) -> list[int]:
    """/slots' body -> 16384 counts (ValueError when it is not such a body)."""
    out = [0] * SLOT_COUNT
    try:
        for slot, n in json.loads(body)["slot_requests"].items():
            if not 0 <= int(slot) < SLOT_COUNT:
                raise ValueError(f"slot {slot} out of range")
            out[int(slot)] = int(n)
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a /slots answer: {exc!r}") from exc
    return out


def check_health(url: str, timeout_s: float = 3.0) -> int:
    """Probe a running proxy's /healthz: print the answer, return 0 when it is 200, else 1.

    For container health checks (``slotgate-proxy --check-health URL``): slim images have no
    curl.
    """
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 - operator URL
            print(resp.status, resp.read().decode(errors="replace").strip())
            return 0 if resp.status == 200 else 1
    except urllib.error.HTTPError as exc:
        print(exc.code, exc.read().decode(errors="replace").strip())
        return 1
    except (urllib.error.URLError, OSError) as exc:
        print(f"unhealthy: {url}: {getattr(exc, 'reason', exc)}")
        return 1
