"""Micro-benchmark for proxy/ops/metrics.py: the cost of one metrics event on the hot path.

Compares ``PrometheusMetrics.command`` (plain dict counts, scrape-time collector) with the
in-memory hook it extends and with prometheus_client's own pre-bound children (the usual way:
``Counter.labels(...)`` cached in a dict, ``inc()`` + ``Histogram.observe()``), and times one
scrape (``render()``) with a 6-node cluster's series.

    .venv/bin/python bench/bench_metrics.py
"""

from __future__ import annotations

import platform
import sys
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Histogram

from slotgate.protocol.slots import SLOT_COUNT
from slotgate.proxy.ops.metrics import COMMAND_BUCKETS_S, PrometheusMetrics, ProxyMetrics
from slotgate.proxy.routing.topology import SlotMap


def best_ns(fn: Callable[[], object], loops: int = 100_000, rounds: int = 9) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(loops):
            fn()
        best = min(best, (time.perf_counter() - t0) / loops * 1e9)
    return best


def main() -> None:
    empty = best_ns(lambda: None)
    prom = PrometheusMetrics(process_metrics=False)
    hook = ProxyMetrics()
    reg = CollectorRegistry()
    counter = Counter("bench_commands", "x", ["command", "result"], registry=reg)
    hist = Histogram("bench_seconds", "x", buckets=COMMAND_BUCKETS_S, registry=reg)
    children = {("get", "ok"): counter.labels("get", "ok")}

    def client_children(name: str, result: str, latency_s: float) -> None:
        children[(name, result)].inc()
        hist.observe(latency_s)

    cases: list[tuple[str, Callable[[], object]]] = [
        ("PrometheusMetrics.command (table name)", lambda: prom.command("get", "ok", 0.0003)),
        ("PrometheusMetrics.command (container|sub)",
         lambda: prom.command("config|get", "ok", 0.0003)),
        ("PrometheusMetrics.command (unknown name)", lambda: prom.command("nosuch", "error", 0.0003)),
        ("ProxyMetrics.command (hook, no export)", lambda: hook.command("get", "ok", 0.0003)),
        ("prometheus_client children inc+observe",
         lambda: client_children("get", "ok", 0.0003)),
        ("PrometheusMetrics.redirect", lambda: prom.redirect("MOVED", "127.0.0.1:7000")),
    ]
    print(f"python {sys.version.split()[0]} on {platform.machine()}; empty call {empty:.0f} ns")
    for name, fn in cases:
        print(f"{name:45s} {best_ns(fn) - empty:7.0f} ns/event (call overhead subtracted)")

    masters = [f"10.0.0.{i}:7000" for i in range(1, 4)]

    class Topo:
        version = 1
        slot_map = SlotMap(owners=[masters[s * 3 // SLOT_COUNT] for s in range(SLOT_COUNT)],
                           replicas={m: [m.replace(":7000", ":7001")] for m in masters},
                           masters=masters)

    prom.topology = Topo()
    body = prom.render()
    lines = body.count(b"\n")
    t = best_ns(prom.render, loops=50, rounds=3)
    print(f"{'render() /metrics, 6 nodes':45s} {t / 1e6:7.2f} ms/scrape ({len(body)} bytes, "
          f"{lines} lines)")


if __name__ == "__main__":
    main()
