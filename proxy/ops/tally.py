"""The counts every answered request bumps, compiled (the hot half of ``ops/metrics.py``).

    session: a reply without an error ─▶ CommandTally.ok(name, latency_s)   (compiled call)
             an error reply            ─▶ ProxyMetrics.command(name, "error", latency_s)
    /metrics, INFO ─▶ read ``total``, ``counts``, ``seconds``, the latency buckets

``ProxyMetrics`` owns one (``metrics.tally``) and gives it its tables: with no tables only
``total`` counts (the plain hook); ``PrometheusMetrics`` hands it its per-command dicts and
latency histogram, so one compiled call does what its ``command`` did per request. A name
outside the table goes to ``unlisted`` (the exporter counts it under its bounded label).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable


def _nowhere(name: str, result: str) -> None:
    pass


class CommandTally:
    """Requests answered, by command: ``total``; with tables, ``counts`` and ``seconds`` by
    (name, result) and the latency buckets (``latency_counts[i]``: requests up to
    ``latency_bounds[i]``, the last one above every bound)."""

    def __init__(self) -> None:
        self.total = 0
        self.labelled = False  # tables given: count by name and latency too
        self.counts: dict[tuple[str, str], int] = {}
        self.seconds: dict[tuple[str, str], float] = {}
        self.latency_counts: list[int] = []
        self.latency_bounds: tuple[float, ...] = ()
        self.latency_sum = 0.0
        self.unlisted: Callable[[str, str], None] = _nowhere

    def label(self, counts: dict[tuple[str, str], int], seconds: dict[tuple[str, str], float],
              latency_counts: list[int], latency_bounds: tuple[float, ...],
              unlisted: Callable[[str, str], None]) -> None:
        """Count by name and latency from now on, in these tables (the caller's)."""
        self.counts = counts
        self.seconds = seconds
        self.latency_counts = latency_counts
        self.latency_bounds = latency_bounds
        self.unlisted = unlisted
        self.labelled = True

    def ok(self, name: str, latency_s: float) -> None:
        """One request answered without an error."""
        self.total += 1
        if self.labelled:
            self.count(name, "ok", latency_s)

    def count(self, name: str, result: str, latency_s: float) -> None:
        """By name and latency (``total`` is the caller's)."""
        key = (name, result)
        n = self.counts.get(key)
        if n is None:
            self.unlisted(name, result)
        else:
            self.counts[key] = n + 1
            self.seconds[key] += latency_s
        # bisect_left puts a value equal to a bound into that bound's bucket ("le").
        self.latency_counts[bisect_left(self.latency_bounds, latency_s)] += 1
        self.latency_sum += latency_s
