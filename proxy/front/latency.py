"""The proxy's own LATENCY and INFO latencystats: requests as the proxy served them, end to end.

    reply ready (session._filled) ─▶ histograms[name][bucket] += 1        (every request)
                                └▶ took >= latency-monitor-threshold? ─▶ Latency.spike(...)
    LATENCY LATEST / HISTORY / RESET / DOCTOR / GRAPH / HISTOGRAM, INFO latencystats
                                ─▶ answered from the proxy's own figures

The time of a request is the slow log's (proxy/front/slowlog.py): from reading it to its reply
being ready, from the one clock read per request the session already makes. Per command, a
histogram of redis-server 7.0's power-of-2 levels (one ``bisect_left`` in ``LEVELS_S`` and one
increment per request), reported under Redis' keys (``histogram_usec``: 1, 2, 4, 8, 16, 33,
66, ...); INFO latencystats' percentiles are the key of the level the percentile falls in. Like
Redis, requests above ~1 s share the last level and requests refused before running (unknown
command, wrong arity, ...) are not counted.

Latency events (Redis' latency monitor): ``command`` (a request slower than
``latency-monitor-threshold`` ms) and ``fast-command`` (the same for a command Redis flags
``fast``); 160 samples per event, one per second (the worst), and the worst of all time.
Blocking commands, WAIT and EXEC make no event (their time is mostly waiting).

Directives (Redis' names and meanings): ``latency-monitor-threshold`` (ms, 0 off),
``latency-tracking`` and ``latency-tracking-info-percentiles``; from the config file
(``latency`` section) and CONFIG GET/SET through the proxy (own_config.py). The nodes' own
figures: ``slotgate cluster call HOST:PORT LATENCY LATEST``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from slotgate.protocol.commands import ALL_COMMANDS
from slotgate.protocol.resp import array, bulk, integer, verbatim
from slotgate.proxy.routing.redirect import error_frame

if TYPE_CHECKING:
    from slotgate.proxy.front.routes import RouteSession as Session

TOP_BUCKET = 20  # Redis' histograms stop at ~1 s: longer requests are counted here
BUCKETS = TOP_BUCKET + 1
# redis-server 7.0's power-of-2 levels: level k holds what its HdrHistogram counts up to the
# highest value equivalent to 1024 * 2**k ns (seconds here: ``bisect_left`` gives the level).
LEVELS_S = [(1024 * 2**k + 2 ** (3 + k) - 1) / 1e9 for k in range(TOP_BUCKET)]
# The ``histogram_usec`` key Redis reports for each level; the last is where it clamps.
_KEYS_US = [int(s * 1_000_000) for s in LEVELS_S] + [1073741]
SAMPLES = 160  # Redis' LATENCY_TS_LEN
NO_SAMPLES = "ERR No samples available for event '{event}'"
FAST_EVENT = "fast-command"
SLOW_EVENT = "command"

HELP = [
    "LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DOCTOR",
    "    Return a human readable latency analysis report.",
    "GRAPH <event>",
    "    Return an ASCII latency graph for the <event> class.",
    "HISTORY <event>",
    "    Return time-latency samples for the <event> class.",
    "LATEST",
    "    Return the latest latency samples for all events.",
    "RESET [<event> ...]",
    "    Reset latency data of one or more <event> classes.",
    "    (default: reset all data for all event classes)",
    "HISTOGRAM [COMMAND ...]",
    "    Return a cumulative distribution of latencies in the format of a histogram for the "
    "specified command names.",
    "    If no commands are specified then all histograms are replied.",
    "HELP",
    "    Prints this help.",
]


def format_percentile(p: float) -> str:
    """Redis' "%f" with trailing zeros (and a trailing dot) trimmed: 50, 99.9, 99.99."""
    text = f"{p:f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def parse_percentiles(text: str) -> list[float] | str:
    """latency-tracking-info-percentiles' value, or what is wrong with it (Redis' words)."""
    out = []
    for word in text.split():
        try:
            p = float(word)
        except ValueError:
            return "Invalid latency-tracking-info-percentiles parameters"
        if not math.isfinite(p) or p < 0 or p > 100:
            return "latency-tracking-info-percentiles parameters should sit between [0.0,100.0]"
        out.append(p)
    return out


class Event:
    """One event class's samples: ``(unix second, ms)``, oldest first, and the worst ever."""

    __slots__ = ("samples", "max_ms")

    def __init__(self) -> None:
        self.samples: list[tuple[int, int]] = []
        self.max_ms = 0

    def add(self, now_s: int, ms: int) -> None:
        self.max_ms = max(self.max_ms, ms)
        if self.samples and self.samples[-1][0] == now_s:
            if ms > self.samples[-1][1]:
                self.samples[-1] = (now_s, ms)
            return
        self.samples.append((now_s, ms))
        if len(self.samples) > SAMPLES:
            del self.samples[0]


class Latency:
    """The histograms, the events and the three directives. ``threshold_s`` is what the hot
    path compares with: infinite when the monitor is off."""

    def __init__(self, threshold_ms: int = 0, tracking: bool = True,
                 percentiles: Sequence[float] = (50.0, 99.0, 99.9)) -> None:
        # command name -> request count per level (session._filled adds to them)
        self.histograms: dict[str, list[int]] = {}
        self.events: dict[str, Event] = {}
        self.threshold_ms = 0
        self.threshold_s = math.inf
        self.tracking = tracking
        self.percentiles = list(percentiles)
        self.configure(threshold_ms, tracking, percentiles)

    def configure(self, threshold_ms: int, tracking: bool, percentiles: Sequence[float]) -> None:
        self.threshold_ms = threshold_ms
        self.threshold_s = threshold_ms / 1000 if threshold_ms > 0 else math.inf
        self.tracking = tracking
        self.percentiles = list(percentiles)

    def spike(self, name: str, took_s: float) -> None:
        """A request at or above the threshold: a sample of its event class."""
        ms = int(took_s * 1000)
        if not self.threshold_ms or ms < self.threshold_ms:
            return
        info = ALL_COMMANDS.get(name.encode())
        event = FAST_EVENT if info is not None and "fast" in info.flags else SLOW_EVENT
        self.events.setdefault(event, Event()).add(int(time.time()), ms)

    # --- what was counted -------------------------------------------------------------------
    def _counts(self, name: str, rejected: Mapping[str, int]) -> list[int] | None:
        """``name``'s counts per level, less the requests refused before running (answered
        at once: taken from the lowest levels); None when none ran."""
        raw = self.histograms.get(name)
        if raw is None:
            return None
        counts = list(raw)
        drop = rejected.get(name, 0)
        for i, n in enumerate(counts):
            if not drop:
                break
            taken = min(n, drop)
            counts[i] -= taken
            drop -= taken
        return counts if any(counts) else None

    def with_data(self, rejected: Mapping[str, int]) -> list[tuple[str, list[int]]]:
        out = []
        for name in list(self.histograms):
            counts = self._counts(name, rejected)
            if counts is not None and name.encode() in ALL_COMMANDS:
                out.append((name, counts))
        return out

    # --- LATENCY HISTOGRAM -------------------------------------------------------------------
    def histogram(self, names: Sequence[bytes], rejected: Mapping[str, int], proto: int
                  ) -> bytes:
        if not names:
            chosen = self.with_data(rejected)
        else:
            chosen = []
            for raw in names:
                info = ALL_COMMANDS.get(raw.lower())
                if info is None:
                    continue
                wanted = [info.name, *(sub.name for sub in (info.subcommands or {}).values())]
                for name in wanted:
                    counts = self._counts(name, rejected)
                    if counts is not None:
                        chosen.append((name, counts))
        return _map([(bulk(name), _cdf(counts, proto)) for name, counts in chosen], proto)

    # --- INFO latencystats -------------------------------------------------------------------
    def info_lines(self, rejected: Mapping[str, int],
                   chosen: list[tuple[str, list[int]]] | None = None) -> list[tuple[bytes, bytes]]:
        """``chosen``: the counts to report (with workers: every worker's, summed); by
        default this process's."""
        if not self.tracking:
            return []
        out = []
        for name, counts in self.with_data(rejected) if chosen is None else chosen:
            total = sum(counts)
            parts = []
            for p in self.percentiles:
                value_us = _value_at_percentile(counts, total, p)
                parts.append(f"p{format_percentile(p)}={value_us:.3f}")
            out.append((b"latency_percentiles_usec_" + name.encode(), ",".join(parts).encode()))
        return out

    # --- the latency monitor -----------------------------------------------------------------
    def latest(self) -> bytes:
        return array(array([bulk(name), integer(e.samples[-1][0]), integer(e.samples[-1][1]),
                            integer(e.max_ms)])
                     for name, e in self.events.items())

    def history(self, event: bytes) -> bytes:
        e = self.events.get(event.decode("utf-8", "replace"))
        if e is None:
            return b"*0\r\n"
        return array(array([integer(t), integer(ms)]) for t, ms in e.samples)

    def reset(self, events: Sequence[bytes]) -> int:
        if not events:
            n = len(self.events)
            self.events.clear()
            return n
        n = 0
        for raw in events:
            if self.events.pop(raw.decode("utf-8", "replace"), None) is not None:
                n += 1
        return n


def _value_at_percentile(counts: list[int], total: int, p: float) -> float:
    """Redis' hdr_value_at_percentile over the buckets: the key of the bucket where the
    count reaches ``p`` percent (at least one request)."""
    wanted = max(int(p / 100 * total + 0.5), 1)
    seen = 0
    for k, n in enumerate(counts):
        seen += n
        if seen >= wanted:
            return float(_KEYS_US[k])
    return float(_KEYS_US[-1])


def _map(pairs: list[tuple[bytes, bytes]], proto: int) -> bytes:
    head = b"%%%d\r\n" % len(pairs) if proto == 3 else b"*%d\r\n" % (2 * len(pairs))
    return head + b"".join(k + v for k, v in pairs)


def _cdf(counts: list[int], proto: int) -> bytes:
    """One command's ``calls`` and cumulative ``histogram_usec`` (levels where it grows)."""
    pairs = []
    seen = 0
    for k, n in enumerate(counts):
        if n:
            seen += n
            pairs.append((integer(_KEYS_US[k]), integer(seen)))
    return _map([(bulk(b"calls"), integer(seen)), (bulk(b"histogram_usec"), _map(pairs, proto))],
                proto)


# --- LATENCY DOCTOR (Redis 7.0's report, for the two event classes the proxy has) -----------
_DISABLED = (
    "I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this Redis instance. "
    "You may use \"CONFIG SET latency-monitor-threshold <milliseconds>.\" in order to enable "
    "it. If we weren't in a deep space mission I'd suggest to take a look at "
    "https://redis.io/topics/latency-monitor.\n")
_CALM = (
    "Dave, no latency spike was observed during the lifetime of this Redis instance, not in "
    "the slightest bit. I honestly think you ought to sit down calmly, take a stress pill, and "
    "think things over.\n")
_SPIKES = ("Dave, I have observed latency spikes in this Redis instance. You don't mind talking "
           "about it, do you Dave?\n\n")
_ADVICE_HEAD = "\nI have a few advices for you:\n\n"
_ADVICE_SLOWLOG_OFF = (
    "- There are latency issues with potentially slow commands you are using. Try to enable "
    "the Slow Log Redis feature using the command 'CONFIG SET slowlog-log-slower-than {us}'. "
    "If the Slow log is disabled Redis is not able to log slow commands execution for you.\n")
_ADVICE_SLOWLOG_TUNE = (
    "- Your current Slow Log configuration only logs events that are slower than your "
    "configured latency monitor threshold. Please use 'CONFIG SET slowlog-log-slower-than "
    "{us}'.\n")
_ADVICE_SLOWLOG_READ = (
    "- Check your Slow Log to understand what are the commands you are running which are too "
    "slow to execute. Please check https://redis.io/commands/slowlog for more information.\n")
_ADVICE_SCHEDULER = (
    "- The system is slow to execute Redis code paths not containing system calls. This "
    "usually means the system does not provide Redis CPU time to run for long periods. You "
    "should try to:\n"
    "  1) Lower the system load.\n"
    "  2) Use a computer / VM just for Redis if you are running other software in the same "
    "system.\n"
    "  3) Check if you have a \"noisy neighbour\" problem.\n"
    "  4) Check with 'redis-cli --intrinsic-latency 100' what is the intrinsic latency in your "
    "system.\n"
    "  5) Check if the problem is allocator-related by recompiling Redis with MALLOC=libc, if "
    "you are using Jemalloc. However this may create fragmentation problems.\n")
_ADVICE_LARGE = (
    "- Deleting, expiring or evicting (because of maxmemory policy) large objects is a "
    "blocking operation. If you have very large objects that are often deleted, expired, or "
    "evicted, try to fragment those objects into multiple smaller objects.\n")


def _event_line(n: int, name: str, e: Event, now_s: int) -> str:
    """Redis' analyzeLatencyForEvent line: integer average and mean deviation (ms)."""
    lat = [ms for _, ms in e.samples]
    avg = sum(lat) // len(lat)
    mad = sum(abs(avg - ms) for ms in lat) // len(lat)
    period = max(now_s - min(t for t, _ in e.samples), 1)
    return (f"{n}. {name}: {len(lat)} latency spikes (average {avg}ms, mean deviation {mad}ms, "
            f"period {period / len(lat):.2f} sec). Worst all time event {e.max_ms}ms.\n")


def doctor(lat: Latency, slower_than_us: int, slowlog_max_len: int) -> str:
    """LATENCY DOCTOR's text; the slow log's directives decide its advice, as in Redis."""
    if not lat.events and not lat.threshold_ms:
        return _DISABLED
    if not lat.events:
        return _CALM
    now_s = int(time.time())
    report = _SPIKES
    slowlog_off = slowlog_tune = slowlog_read = scheduler = False
    for n, (name, e) in enumerate(lat.events.items(), 1):
        report += _event_line(n, name, e, now_s)
        if name == SLOW_EVENT:
            if slower_than_us < 0 or slowlog_max_len == 0:
                slowlog_off = True
            elif slower_than_us // 1000 > lat.threshold_ms:
                slowlog_tune = True
            slowlog_read = True
        elif name == FAST_EVENT:
            scheduler = True
    report += _ADVICE_HEAD
    us = lat.threshold_ms * 1000
    if slowlog_off:
        report += _ADVICE_SLOWLOG_OFF.format(us=us)
    if slowlog_tune:
        report += _ADVICE_SLOWLOG_TUNE.format(us=us)
    if slowlog_read:
        report += _ADVICE_SLOWLOG_READ
    if scheduler:
        report += _ADVICE_SCHEDULER
    if slowlog_read:
        report += _ADVICE_LARGE
    return report


# --- LATENCY GRAPH (Redis' sparkline: 80 columns, 4 rows, filled, labels below) -------------
_GRAPH_COLS = 80
_GRAPH_ROWS = 4
_FILL = "_o#"


def _ago(elapsed_s: int) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if elapsed_s >= size:
            return f"{elapsed_s // size}{unit}"
    return f"{elapsed_s}s"


def _render(values: list[int], labels: list[str], lo: int, hi: int) -> str:
    """One band of at most 80 samples: the rows of the graph, then the labels downwards."""
    span = float(hi - lo) or 1.0
    steps = len(_FILL) * _GRAPH_ROWS
    step = [min(max(int(int((v - lo) * steps) / span), 0), steps - 1) for v in values]
    lines = []
    for row in range(_GRAPH_ROWS):
        chars = []
        for st in step:
            idx = st - (_GRAPH_ROWS - row - 1) * len(_FILL)
            chars.append(_FILL[idx] if 0 <= idx < len(_FILL) else "|" if idx >= 0 else " ")
        lines.append("".join(chars))
    lines.append(" " * len(values))  # the margin above the labels
    for i in range(max(map(len, labels))):
        lines.append("".join(lb[i] if i < len(lb) else " " for lb in labels))
    return "".join(line + "\n" for line in lines)


def graph(name: str, e: Event) -> str:
    """LATENCY GRAPH's text for one event (its samples, oldest first)."""
    now_s = int(time.time())
    values = [ms for _, ms in e.samples]
    labels = [_ago(now_s - t) for t, _ in e.samples]
    lo, hi = min(values), max(values)
    out = (f"{name} - high {hi} ms, low {lo} ms (all time high {e.max_ms} ms)\n"
           + "-" * _GRAPH_COLS + "\n")
    bands = [_render(values[i:i + _GRAPH_COLS], labels[i:i + _GRAPH_COLS], lo, hi)
             for i in range(0, len(values), _GRAPH_COLS)]
    return out + "\n".join(bands)


# --- the LATENCY subcommands (argv's arity already checked against the command table) ---------
def _latest(s: Session, argv: list[bytes]) -> bytes:
    return s.proxy.latency.latest()


def _history(s: Session, argv: list[bytes]) -> bytes:
    return s.proxy.latency.history(argv[2])


def _reset(s: Session, argv: list[bytes]) -> bytes:
    return integer(s.proxy.latency.reset(argv[2:]))


def _histogram(s: Session, argv: list[bytes]) -> bytes:
    return s.proxy.latency.histogram(argv[2:], s.proxy.stats.rejected, s.proto)


def _doctor(s: Session, argv: list[bytes]) -> bytes:
    slowlog = s.proxy.slowlog
    text = doctor(s.proxy.latency, slowlog.slower_than_us, slowlog.max_len)
    return verbatim(text, proto=s.proto)


def _graph(s: Session, argv: list[bytes]) -> bytes:
    name = argv[2].decode("utf-8", "replace")
    e = s.proxy.latency.events.get(name)
    if e is None:
        return error_frame(NO_SAMPLES.format(event=name))
    return verbatim(graph(name, e), proto=s.proto)


def _help(s: Session, argv: list[bytes]) -> bytes:
    return array(b"+" + line.encode() + b"\r\n" for line in HELP)


HANDLERS: dict[str, Callable[[Session, list[bytes]], bytes]] = {
    "latency|latest": _latest,
    "latency|history": _history,
    "latency|reset": _reset,
    "latency|histogram": _histogram,
    "latency|doctor": _doctor,
    "latency|graph": _graph,
    "latency|help": _help,
}
