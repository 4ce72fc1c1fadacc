"""The counts every answered request bumps, compiled (the hot half of ``ops/metrics.py``).

    session: a reply without an error ─▶ CommandTally.ok(name, latency_s)   (compiled call)
             an error reply            ─▶ ProxyMetrics.command(name, "error", latency_s)
    /metrics, INFO ─▶ read ``total``, ``counts``, ``seconds``, the latency buckets

``ProxyMetrics`` owns one (``metrics.tally``) and gives it its tables: with no tables only
``total`` counts (the plain hook); ``PrometheusMetrics`` hands it its per-command dicts and
latency histogram, so one compiled call does what its ``command`` did per request. A name
outside the table goes to ``unlisted`` (the exporter counts it under its bounded label).

A reply without an error costs one dict lookup by its name (a ``_Cell`` per name, made by the
name's first request) and two additions; the cells are added into the tables when these are
read (``settle``: /metrics, INFO), not per request. Split requests are counted here too
(``fanout``).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable


def _nowhere(name: str, result: str) -> None:
    pass


def bucket(bounds: tuple[float, ...], value: float) -> int:
    """``bisect_left(bounds, value)`` for a few sorted bounds: the first bound >= ``value``
    (``len(bounds)`` if none). Compiled, a scan from the low end costs less than the call."""
    i = 0
    for bound in bounds:
        if bound >= value:
            return i
        i += 1
    return i


class _Cell:
    """A command's replies without an error since the last ``settle``, and their seconds."""

    __slots__ = ("n", "seconds")

    def __init__(self) -> None:
        self.n = 0
        self.seconds = 0.0


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
        self._ok: dict[str, _Cell] = {}  # with tables: "ok" replies not yet in them
        self.fanouts = 0  # client requests split into per-node requests
        self.fanout_subrequests = 0  # the per-node requests they became

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
            cell = self._ok.get(name)
            if cell is None:
                cell = self._ok[name] = _Cell()
            cell.n += 1
            cell.seconds += latency_s
            # a value equal to a bound goes into that bound's bucket ("le")
            self.latency_counts[bucket(self.latency_bounds, latency_s)] += 1
            self.latency_sum += latency_s

    def settle(self) -> None:
        """Add the replies ``ok`` counted into the tables (their readers call it first)."""
        cells, self._ok = self._ok, {}
        counts = self.counts
        seconds = self.seconds
        for name, cell in cells.items():
            key = (name, "ok")
            n = counts.get(key)
            if n is None:
                for _ in range(cell.n):
                    self.unlisted(name, "ok")
            else:
                counts[key] = n + cell.n
                seconds[key] += cell.seconds

    def fanout(self, subrequests: int) -> None:
        """A client request split into ``subrequests`` per-node requests."""
        self.fanouts += 1
        self.fanout_subrequests += subrequests

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
