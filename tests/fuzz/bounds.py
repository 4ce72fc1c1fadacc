"""Per-input bounds for every fuzzer in tests/fuzz and bench/fuzz.py: no input may take more
than ``INPUT_BOUND_S`` of CPU time (a hang) or make memory grow out of proportion to its size.

- In-process targets (tests/fuzz/targets.py): :func:`run_bounded` runs one input under
  tracemalloc and a CPU-time alarm (SIGPROF after ``INPUT_BOUND_S`` of the process' CPU, so a
  loop that never returns ends as a :class:`~tests.fuzz.targets.Finding` instead of hanging
  the run); the peak of memory allocated while it ran may not pass
  ``MEMORY_BASE_BYTES + MEMORY_PER_INPUT_BYTE * len(input)``.
- Live processes (a node, a proxy): :class:`LiveBounds` times a PING on a connection of its own
  after each input (a process that stalls on an input fails on that input, by name) and reads
  the process' peak RSS (``VmHWM``), which may not grow past ``LIVE_RSS_GROWTH_BYTES`` above
  where it started.

CPU time, not wall time: a loaded CI machine stretches wall time, not the CPU an input needs.
"""

from __future__ import annotations

import hashlib
import os
import signal
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

INPUT_BOUND_S = 2.0  # CPU seconds per input; the inputs need milliseconds
MEMORY_BASE_BYTES = 4 << 20  # what any input may allocate (a parser, a gossip engine, YAML)
MEMORY_PER_INPUT_BYTE = 256  # ... plus this per byte of input (decoded objects, copies)
LIVE_RSS_GROWTH_BYTES = 64 << 20  # a live process' peak RSS above its start, for a whole run
LIVE_PING_BOUND_S = 5.0  # wall seconds for the PING after an input (other processes run too)


class BoundExceeded(AssertionError):
    """An input went past a bound (tests/fuzz/targets.py's Finding derives from it)."""


def name_of(data: bytes) -> str:
    """How a finding names its input: a hash (the corpus file name) and the first bytes."""
    return f"finding-{hashlib.sha1(data).hexdigest()[:12]} {data[:120]!r}"


@dataclass
class Stats:
    """What a run of one fuzzer saw: inputs, the slowest one (CPU s) and the highest peak."""

    inputs: int = 0
    slowest_s: float = 0.0
    peak_bytes: int = 0
    clock: str = "CPU"  # what slowest_s is: the input's CPU, or a live process' PING after it
    memory: str = "allocated"  # what peak_bytes is: traced allocations, or peak RSS growth

    def add(self, took_s: float, peak_bytes: int) -> None:
        self.inputs += 1
        self.slowest_s = max(self.slowest_s, took_s)
        self.peak_bytes = max(self.peak_bytes, peak_bytes)

    def __str__(self) -> str:
        return (f"{self.inputs} inputs, slowest {self.slowest_s * 1000:.1f} ms {self.clock}, "
                f"peak {self.peak_bytes / 1e6:.2f} MB {self.memory}")


def memory_limit(data: bytes) -> int:
    return MEMORY_BASE_BYTES + MEMORY_PER_INPUT_BYTE * len(data)


@contextmanager
def _cpu_alarm(data: bytes, bound_s: float) -> Iterator[None]:
    """SIGPROF after ``bound_s`` of CPU: raises in the target (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expired(signum: int, frame: object) -> None:
        raise BoundExceeded(f"over {bound_s} s of CPU: {name_of(data)}")

    previous = signal.signal(signal.SIGPROF, expired)
    signal.setitimer(signal.ITIMER_PROF, bound_s)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


def run_bounded(target: Callable[[bytes], None], data: bytes, stats: Stats | None = None,
                bound_s: float = INPUT_BOUND_S) -> None:
    """``target(data)`` within the time and memory bounds; BoundExceeded names the input.
    tracemalloc runs only around the target (tracing the fuzzer's own work too costs ten
    times the CPU)."""
    started_tracing = not tracemalloc.is_tracing()
    if started_tracing:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        t0 = time.process_time()
        with _cpu_alarm(data, bound_s):
            target(data)
        took_s = time.process_time() - t0
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        if started_tracing:
            tracemalloc.stop()
    if stats is not None:
        stats.add(took_s, peak)
    if took_s > bound_s:
        raise BoundExceeded(f"{took_s:.1f} s of CPU: {name_of(data)}")
    if peak > memory_limit(data):
        raise BoundExceeded(f"peak {peak} bytes allocated for {len(data)} bytes of input "
                            f"(limit {memory_limit(data)}): {name_of(data)}")


def cpu_s(pid: int) -> float:
    """A process' CPU time so far (user + system; /proc/PID/stat, in clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_bytes(pid: int) -> int:
    """A process' peak resident set (Linux: VmHWM in /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmHWM for {pid}")


class LiveBounds:
    """Bounds for inputs sent to a running process: ``after(data, ping)`` once per input, with
    a callable doing one PING round trip on a connection of the test's own; ``check()`` at the
    end, for the peak RSS."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.start_rss = peak_rss_bytes(pid)
        self.stats = Stats(clock="PING", memory="RSS growth")

    def after(self, data: bytes, ping: Callable[[], object]) -> None:
        t0 = time.monotonic()
        try:
            ping()
        except OSError as exc:
            raise BoundExceeded(f"no PING answer after {name_of(data)}: {exc}") from None
        took_s = time.monotonic() - t0
        grown = peak_rss_bytes(self.pid) - self.start_rss
        self.stats.add(took_s, grown)
        if took_s > LIVE_PING_BOUND_S:
            raise BoundExceeded(f"PING took {took_s:.1f} s after {name_of(data)}")
        if grown > LIVE_RSS_GROWTH_BYTES:
            raise BoundExceeded(f"peak RSS {grown / 1e6:.0f} MB above the start after {name_of(data)}")

    def check(self) -> None:
        grown = peak_rss_bytes(self.pid) - self.start_rss
        if grown > LIVE_RSS_GROWTH_BYTES:
            raise BoundExceeded(f"peak RSS grew {grown / 1e6:.0f} MB (limit "
                                f"{LIVE_RSS_GROWTH_BYTES / 1e6:.0f} MB) over {self.stats.inputs} inputs")
