"""Several processes' /metrics text -> one exposition (the supervisor's /metrics with workers).

Sans-IO: text in, text out. Every family is merged per (sample name, labels):

- counters and histograms (buckets, ``_sum``, ``_count``) are summed: the whole proxy's
  commands, redirects, latencies;
- gauges are summed when they count things each process has (``slotgate_connected_clients``,
  ``process_resident_memory_bytes``, ``process_virtual_memory_bytes``, ``process_open_fds``)
  and take the maximum when every process describes the same cluster or limit
  (``GAUGE_MAX``); ``process_start_time_seconds`` takes the minimum (the oldest process);
- ``process_cpu_seconds_total`` is a counter, so the CPU of every process is summed.

A family's help and type come from the first text that has it; families and samples keep the
order they first appear in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

# Gauges that describe the cluster (every worker sees the same one) or a per-process limit.
GAUGE_MAX = frozenset({
    "slotgate_slots_covered", "slotgate_slot_map_version", "slotgate_nodes", "process_max_fds",
    "slotgate_replica_lag_bytes",
})
# The oldest process; a node any worker last saw failed counts as down.
GAUGE_MIN = frozenset({"process_start_time_seconds", "slotgate_cluster_node_online"})

_Key = tuple[str, tuple[tuple[str, str], ...]]


def _combine(family: Metric) -> Callable[[float, float], float]:
    if family.type == "gauge":
        if family.name in GAUGE_MAX:
            return max
        if family.name in GAUGE_MIN:
            return min
    return _add


def _add(a: float, b: float) -> float:
    return a + b


def merge_expositions(texts: Iterable[str]) -> bytes:
    """The text exposition format of the merged families. Raises ``ValueError`` on a text
    that does not parse (callers pass only texts they fetched whole)."""
    families: dict[str, Metric] = {}
    values: dict[str, dict[_Key, float]] = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            merged = families.get(family.name)
            if merged is None:
                merged = families[family.name] = Metric(family.name, family.documentation,
                                                        family.type, family.unit)
                values[family.name] = {}
            combine = _combine(merged)
            samples = values[family.name]
            for s in family.samples:
                key = (s.name, tuple(sorted(s.labels.items())))
                old = samples.get(key)
                samples[key] = s.value if old is None else combine(old, s.value)
    for name, merged in families.items():
        for (sample_name, labels), value in values[name].items():
            merged.add_sample(sample_name, dict(labels), value)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(list(families.values())))
    return generate_latest(registry)


class _Fixed(Collector):
    def __init__(self, families: Sequence[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        yield from self.families
