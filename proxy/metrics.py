"""Metrics hook: the events the proxy core reports, and a plain in-memory implementation.

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
- ``client_connected()`` / ``client_disconnected()``; ``protocol_error()`` for bad input.
"""

from __future__ import annotations

from collections import Counter

REDIRECT_KINDS = ("MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN")


class ProxyMetrics:
    """Counters in a dict; subclass to export them."""

    def __init__(self) -> None:
        self.counters: Counter[tuple[str, ...]] = Counter()
        self.clients_connected = 0
        self.commands_total = 0

    def redirect(self, kind: str, node: str) -> None:
        self.counters["redirect", kind, node] += 1

    def command(self, name: str, result: str, latency_s: float) -> None:
        # Kept deliberately tiny: it runs once per client request.
        self.commands_total += 1
        if result != "ok":
            self.counters["command_error", name] += 1

    def upstream(self, node: str, result: str) -> None:
        self.counters["upstream", node, result] += 1

    def topology_refresh(self, reason: str, duration_s: float, ok: bool = True) -> None:
        self.counters["topology_refresh", reason, "ok" if ok else "failed"] += 1

    def fanout(self, subrequests: int) -> None:
        self.counters[("fanout",)] += 1
        self.counters[("fanout_subrequests",)] += subrequests

    def unknown_fate_write(self) -> None:
        self.counters[("unknown_fate_write",)] += 1

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
