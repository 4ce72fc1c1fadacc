"""Latency monitor and per-command latency histograms, as Redis 7.0's latency.c.

Events (``command``, ``fast-command``, ``expire-cycle``) keep up to 160 one-per-second samples
in milliseconds; LATENCY LATEST/HISTORY/RESET/GRAPH/DOCTOR read them. Every command's
durations (whole microseconds, as Redis records them) feed a histogram that LATENCY HISTOGRAM
and INFO latencystats read the way Redis reads its HDR histogram (2 significant figures, 1 ns
to 1 s): a duration counts in the HDR bucket its nanoseconds fall in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from slotgate.node.commands.registry import Command

TS_LEN = 160
GRAPH_COLS = 80
# A command's durations: the fast path counts one below 64 * 1024 ns in ``lat_small[ns >> 10]``
# (one index, no division), a longer one by its HDR bucket in ``lat_big`` (record_long).
SMALL_BUCKETS = 64
_MAX_NS = 1_000_000_000


@dataclass
class EventSeries:
    samples: list[tuple[int, int]] = field(default_factory=lambda: [(0, 0)] * TS_LEN)
    idx: int = 0
    max_ms: int = 0

    def add(self, ms: int, now_s: int) -> None:
        self.max_ms = max(self.max_ms, ms)
        prev = (self.idx + TS_LEN - 1) % TS_LEN
        t, old = self.samples[prev]
        if t == now_s:  # one sample per second: the worst of that second
            if ms > old:
                self.samples[prev] = (t, ms)
            return
        self.samples[self.idx] = (now_s, ms)
        self.idx = (self.idx + 1) % TS_LEN

    def ordered(self) -> list[tuple[int, int]]:
        """Samples oldest first."""
        return [s for j in range(TS_LEN) if (s := self.samples[(self.idx + j) % TS_LEN])[0]]

    def latest(self) -> tuple[int, int]:
        return self.samples[(self.idx + TS_LEN - 1) % TS_LEN]


class LatencyMonitor:
    def __init__(self) -> None:
        self.events: dict[str, EventSeries] = {}

    def add(self, event: str, ms: int, now_s: int) -> None:
        series = self.events.get(event)
        if series is None:
            series = self.events[event] = EventSeries()
        series.add(ms, now_s)

    def reset(self, names: list[str]) -> int:
        if not names:
            n = len(self.events)
            self.events.clear()
            return n
        return sum(self.events.pop(name, None) is not None for name in names)

    def graph(self, event: str, now_s: int) -> str | None:
        series = self.events.get(event)
        if series is None:
            return None
        values, labels = [], []
        for t, ms in series.ordered():
            values.append(ms)
            labels.append(_ago(now_s - t))
        lo, hi = (min(values), max(values)) if values else (0, 0)
        head = (f"{event} - high {hi} ms, low {lo} ms (all time high {series.max_ms} ms)\n"
                + "-" * GRAPH_COLS + "\n")
        return head + sparkline(values, labels, GRAPH_COLS, 4)

    def doctor(self, threshold_ms: int, slowlog_us: int, hz: int, now_s: int) -> str:
        if not self.events and threshold_ms == 0:
            return (
                "I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this Redis "
                "instance. You may use \"CONFIG SET latency-monitor-threshold <milliseconds>.\" "
                "in order to enable it. If we weren't in a deep space mission I'd suggest to "
                "take a look at https://redis.io/topics/latency-monitor.\n")
        out: list[str] = []
        advise: set[str] = set()
        for num, (event, series) in enumerate(self.events.items(), start=1):
            if num == 1:
                out.append("Dave, I have observed latency spikes in this Redis instance. You "
                           "don't mind talking about it, do you Dave?\n\n")
            samples = [s for s in series.samples if s[0]]
            n = len(samples)
            avg = sum(ms for _, ms in samples) // n if n else 0
            period = max(1, now_s - min(t for t, _ in samples)) if n else 0
            mad = sum(abs(avg - ms) for _, ms in samples) // n if n else 0
            out.append(f"{num}. {event}: {n} latency spikes (average {avg}ms, mean deviation "
                       f"{mad}ms, period {period / n if n else 0:.2f} sec). Worst all time event "
                       f"{series.max_ms}ms.\n")
            advise |= _EVENT_ADVICE.get(event, set())
            if event == "command":
                if slowlog_us < 0:
                    advise.add("slowlog-enable")
                elif slowlog_us // 1000 > threshold_ms:
                    advise.add("slowlog-tune")
        if hz >= 100:
            advise.discard("hz")
        if not out:
            return ("Dave, no latency spike was observed during the lifetime of this Redis "
                    "instance, not in the slightest bit. I honestly think you ought to sit down "
                    "calmly, take a stress pill, and think things over.\n")
        if not advise:
            return "".join(out) + (
                "\nWhile there are latency events logged, I'm not able to suggest any easy fix. "
                "Please use the Redis community to get some help, providing this report in "
                "your request.\n")
        out.append("\nI have a few advices for you:\n\n")
        for key, text in _ADVICE_TEXT:
            if key in advise:
                out.append(text.replace("%THRESHOLD_US%", str(threshold_ms * 1000)))
        return "".join(out)


_EVENT_ADVICE = {
    "command": {"slowlog-inspect", "large-objects"},
    "fast-command": {"scheduler"},
    "expire-cycle": {"hz", "large-objects"},
}
_ADVICE_TEXT = [
    ("slowlog-enable", "- There are latency issues with potentially slow commands you are "
     "using. Try to enable the Slow Log Redis feature using the command 'CONFIG SET "
     "slowlog-log-slower-than %THRESHOLD_US%'. If the Slow log is disabled Redis is not able to "
     "log slow commands execution for you.\n"),
    ("slowlog-tune", "- Your current Slow Log configuration only logs events that are slower "
     "than your configured latency monitor threshold. Please use 'CONFIG SET "
     "slowlog-log-slower-than %THRESHOLD_US%'.\n"),
    ("slowlog-inspect", "- Check your Slow Log to understand what are the commands you are "
     "running which are too slow to execute. Please check https://redis.io/commands/slowlog "
     "for more information.\n"),
    ("scheduler", "- The system is slow to execute Redis code paths not containing system "
     "calls. This usually means the system does not provide Redis CPU time to run for long "
     "periods. You should try to:\n  1) Lower the system load.\n  2) Use a computer / VM just "
     "for Redis if you are running other software in the same system.\n  3) Check if you have "
     "a \"noisy neighbour\" problem.\n  4) Check with 'redis-cli --intrinsic-latency 100' what "
     "is the intrinsic latency in your system.\n  5) Check if the problem is allocator-related "
     "by recompiling Redis with MALLOC=libc, if you are using Jemalloc. However this may create "
     "fragmentation problems.\n"),
    ("hz", "- In order to make the Redis keys expiring process more incremental, try to set "
     "the 'hz' configuration parameter to 100 using 'CONFIG SET hz 100'.\n"),
    ("large-objects", "- Deleting, expiring or evicting (because of maxmemory policy) large "
     "objects is a blocking operation. If you have very large objects that are often deleted, "
     "expired, or evicted, try to fragment those objects into multiple smaller objects.\n"),
]


def _ago(seconds: int) -> str:
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m"
    if seconds < 86400:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


_CHARSET_FILL = "_o#"


def sparkline(values: list[int], labels: list[str], columns: int, rows: int) -> str:
    """Redis' sparkline (filled, linear scale) with a label under each column."""
    out: list[str] = []
    for start in range(0, len(values), columns):
        if start:
            out.append("\n")
        out.append(_sparkline_range(values, labels, start, min(columns, len(values) - start),
                                    rows, min(values), max(values)))
    return "".join(out)


def _sparkline_range(values: list[int], labels: list[str], offset: int, length: int,
                     rows: int, lo: int, hi: int) -> str:
    relmax = float(hi - lo) or 1.0
    steps = len(_CHARSET_FILL) * rows
    out: list[str] = []
    row = 0
    while True:
        chars = [" "] * length
        more = False
        for j in range(length):
            step = int((values[offset + j] - lo) * steps / relmax)
            step = max(0, min(steps - 1, step))
            if row < rows:
                more = True
                idx = step - (rows - row - 1) * len(_CHARSET_FILL)
                if 0 <= idx < len(_CHARSET_FILL):
                    chars[j] = _CHARSET_FILL[idx]
                elif idx >= len(_CHARSET_FILL):
                    chars[j] = "|"
            else:
                if labels and row - rows < 1:  # one blank line above the labels
                    more = True
                    break
                label = labels[offset + j]
                if len(label) > row - rows - 1:
                    more = True
                    chars[j] = label[row - rows - 1]
        if not more:
            return "".join(out)
        row += 1
        out.append("".join(chars) + "\n")


# -- per-command histograms -------------------------------------------------------------------
def hdr_floor(ns: int) -> int:
    """The lowest value of the HDR bucket (2 significant figures) that ``ns`` falls in."""
    shift = max(0, ns.bit_length() - 8)
    return (ns >> shift) << shift


def hdr_top(ns: int) -> int:
    """The highest value equivalent to ``ns`` in that HDR histogram."""
    shift = max(0, ns.bit_length() - 8)
    return (((ns >> shift) + 1) << shift) - 1


def record_long(big: dict[int, int], ns: int) -> None:
    """Count a duration in its HDR bucket (floor in ns) after truncating it to whole µs, as
    Redis: at most a few thousand buckets up to the 1 s the histogram holds."""
    key = hdr_floor(min(max(ns // 1000 * 1000, 1), _MAX_NS))
    big[key] = big.get(key, 0) + 1


def record_ns(cmd: Command, ns: int) -> None:
    try:
        cmd.lat_small[ns >> 10] += 1
    except IndexError:
        record_long(cmd.lat_big, ns)


def fold_counts(small: list[int], big: dict[int, int]) -> dict[int, int]:
    """A command's counts as HDR buckets: bucket floor (ns) -> calls, ascending. A count of
    ``small[b]`` (b * 1024 ns and up) is taken at its middle, truncated to whole µs."""
    out = dict(big)
    for b, n in enumerate(small):
        if n:
            key = hdr_floor(max((b * 1024 + 512) // 1000 * 1000, 1))
            out[key] = out.get(key, 0) + n
    return dict(sorted(out.items()))


def cdf(buckets: dict[int, int]) -> list[tuple[int, int]]:
    """LATENCY HISTOGRAM's ``histogram_usec``: (µs, cumulative calls) at the power-of-two
    reporting levels from 1024 ns, as Redis' log iterator over its HDR histogram."""
    total = sum(buckets.values())
    out: list[tuple[int, int]] = []
    level = 1024
    seen = prev = 0
    items = list(buckets.items())
    i = 0
    while seen < total:
        top = hdr_top(level)
        while i < len(items) and items[i][0] <= top:
            seen += items[i][1]
            i += 1
        if seen > prev:
            out.append((top // 1000, seen))
        prev = seen
        level *= 2
    return out


def percentile_us(buckets: dict[int, int], pct: float) -> float:
    """hdr_value_at_percentile / 1000: the top of the bucket holding that share of calls."""
    total = sum(buckets.values())
    want = max(1, int(min(pct, 100.0) / 100.0 * total + 0.5))
    seen = 0
    for floor_ns, n in buckets.items():
        seen += n
        if seen >= want:
            return (floor_ns if pct == 0.0 else hdr_top(floor_ns)) / 1000.0
    return 0.0
