"""Operation histories and their checker (sans-IO: the checker sees only the records).

Clients record every operation they try (:class:`Recorder`): what it was, on which key, when it
was invoked and when it completed (monotonic seconds), and how it ended: ``ok`` (acknowledged),
``fail`` (refused: it certainly did not happen, e.g. -CLUSTERDOWN, -NOREPLICAS, -MOVED) or
``info`` (unknown: a timeout or a lost connection after the request left; it may have happened,
at any time after its invocation). After the scenario, the final value of every key is read on
a healed cluster; :func:`check` then reports

- acknowledged writes lost: a register's final value was written by a write that completed
  before an acknowledged write started (or the key is gone); a counter ends below the number
  of acknowledged increments, or two acknowledged increments returned the same value;
- stale reads: a read returned a value older than an acknowledged write that completed before
  the read started (for a counter: less than the reply of the last increment acknowledged
  before it started);
- reads of values never written (not even by a write of unknown fate);
- dual-master windows: probes write to every node directly; two nodes that both accepted
  writes for one slot at once, i.e. one accepted a probe invoked after the other's accepted
  probe had completed, and the other accepted again afterwards;
- registers whose history is not linearizable (a bounded search: ``unknown`` past its budget).

Values written to a register are unique per key (the recorder's caller makes them so).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal, TypeVar

Kind = Literal["write", "read", "incr", "probe"]
Status = Literal["ok", "fail", "info"]
T = TypeVar("T")
INITIAL = None  # a register never written reads as nil
NEVER_S = float("inf")
LINEARIZABLE_STEPS = 200_000  # search budget per key


@dataclass(frozen=True)
class Op:
    process: int  # the client that ran it
    kind: Kind
    key: str  # for probes: the slot the probe wrote to
    value: object  # written value; value read; INCR's reply
    start_s: float
    end_s: float
    status: Status
    node: str = ""  # probes: the node written to
    error: str = ""  # a failed operation's error (its first 80 characters)


class Recorder:
    """A history shared by the client threads of one scenario."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.ops: list[Op] = []
        self.lock = threading.Lock()

    def run(self, process: int, kind: Kind, key: str, value: object,
            call: Callable[[], T], judge: Callable[[BaseException], Status],
            node: str = "") -> T | None:
        """``call()`` timed and recorded: ok with its reply (reads and increments record the
        reply as the value), else the status ``judge`` gives the exception; None then."""
        start_s = self.clock()
        try:
            reply = call()
        except Exception as exc:  # every failure is part of the history
            self.add(Op(process, kind, key, value, start_s, self.clock(), judge(exc), node,
                        f"{type(exc).__name__}: {exc}"[:80]))
            return None
        got = value if kind in ("write", "probe") else reply
        self.add(Op(process, kind, key, got, start_s, self.clock(), "ok", node))
        return reply

    def add(self, op: Op) -> None:
        with self.lock:
            self.ops.append(op)

    def snapshot(self) -> list[Op]:
        with self.lock:
            return list(self.ops)


@dataclass(frozen=True)
class DualWindow:
    key: str
    nodes: tuple[str, str]
    start_s: float  # when both had accepted
    end_s: float  # the later of the two last acceptances' invocation

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


@dataclass
class Report:
    lost: list[Op] = field(default_factory=list)  # acknowledged writes / increments lost
    stale: list[Op] = field(default_factory=list)
    never_written: list[Op] = field(default_factory=list)
    dual: list[DualWindow] = field(default_factory=list)
    not_linearizable: list[str] = field(default_factory=list)  # register keys
    unknown_linearizable: list[str] = field(default_factory=list)  # budget exceeded
    acknowledged: int = 0
    failed: int = 0
    unknown: int = 0

    @property
    def clean(self) -> bool:
        return not (self.lost or self.stale or self.never_written or self.dual
                    or self.not_linearizable)


def check(ops: Iterable[Op], final: dict[str, object], counters: Iterable[str] = (),
          linearizability: bool = True) -> Report:
    """The report of a history. ``final`` holds the value of every key read after the scenario
    (nil: None; a key missing from it was not read: nothing is judged lost for it);
    ``counters`` names the keys used with INCR (the others are registers)."""
    ops = list(ops)
    counter_keys = set(counters)
    report = Report()
    by_key: dict[str, list[Op]] = {}
    for op in ops:
        if op.kind != "probe":
            by_key.setdefault(op.key, []).append(op)
            report.acknowledged += op.status == "ok"
            report.failed += op.status == "fail"
            report.unknown += op.status == "info"
    for key, key_ops in sorted(by_key.items()):
        if key in counter_keys:
            _check_counter(key_ops, final.get(key, INITIAL), key in final, report)
        else:
            _check_register(key, key_ops, final.get(key, INITIAL), key in final, report,
                            linearizability)
    report.dual = dual_windows(op for op in ops if op.kind == "probe")
    return report


def _decode(value: object) -> object:
    return value.decode() if isinstance(value, bytes) else value


def _check_register(key: str, ops: list[Op], final: object, judged: bool, report: Report,
                    linearizability: bool) -> None:
    writes = {_decode(op.value): op for op in ops if op.kind == "write" and op.status != "fail"}
    acked = [op for op in ops if op.kind == "write" and op.status == "ok"]

    def precedes(value: object, w: Op) -> bool:
        """The write of ``value`` (nil: the initial state) completed before ``w`` started."""
        if value is INITIAL:
            return True
        src = writes.get(value)
        return src is not None and src.status == "ok" and src.end_s < w.start_s

    final = _decode(final)
    if judged:
        if final is not INITIAL and final not in writes:
            report.never_written.append(Op(-1, "read", key, final, NEVER_S, NEVER_S, "ok"))
        else:
            report.lost += [w for w in acked if precedes(final, w)]
    for r in ops:
        if r.kind != "read" or r.status != "ok":
            continue
        v = _decode(r.value)
        if v is not INITIAL and v not in writes:
            report.never_written.append(r)
        elif any(w.end_s < r.start_s and precedes(v, w) for w in acked):
            report.stale.append(r)
    if linearizability:
        verdict = linearizable_register(ops)
        if verdict is False:
            report.not_linearizable.append(key)
        elif verdict is None:
            report.unknown_linearizable.append(key)


def _check_counter(ops: list[Op], final: object, judged: bool, report: Report) -> None:
    incrs = [op for op in ops if op.kind == "incr"]
    acked = [op for op in incrs if op.status == "ok"]
    attempted = sum(op.status != "fail" for op in incrs)
    seen: set[object] = set()
    duplicates = []
    for op in sorted(acked, key=lambda o: o.end_s):
        if op.value in seen:
            duplicates.append(op)
        seen.add(op.value)
    missing = len(acked) - int(_decode(final) or 0) if judged else 0  # type: ignore[call-overload]
    if missing > len(duplicates):
        report.lost += sorted(acked, key=lambda o: o.end_s)[-missing:]
    else:
        report.lost += duplicates
    for r in ops:
        if r.kind != "read" or r.status != "ok":
            continue
        v = int(_decode(r.value) or 0)  # type: ignore[call-overload]
        before = [op for op in acked if op.end_s < r.start_s]
        if v > attempted:
            report.never_written.append(r)
        elif before and v < int(max(before, key=lambda o: o.end_s).value):  # type: ignore[call-overload]
            report.stale.append(r)


def dual_windows(probes: Iterable[Op]) -> list[DualWindow]:
    """Per slot, the runs of consecutive accepted probes of each node, and every pair of runs
    of two nodes that interleave: B accepted a probe invoked after A's accepted one completed,
    and A accepted one invoked after B's completed (each side saw the other accept)."""
    by_key: dict[str, dict[str, list[Op]]] = {}
    for op in sorted(probes, key=lambda o: o.start_s):
        by_key.setdefault(op.key, {}).setdefault(op.node, []).append(op)
    windows = []
    for key, nodes in sorted(by_key.items()):
        runs: list[tuple[str, Op, Op]] = []
        for node, node_ops in nodes.items():
            first: Op | None = None
            last: Op | None = None
            for op in node_ops + [Op(-1, "probe", key, None, NEVER_S, NEVER_S, "fail")]:
                if op.status == "ok":
                    first = first or op
                    last = op
                    continue
                if op.status == "fail" and first is not None and last is not None:
                    runs.append((node, first, last))
                    first = last = None
        for i, (na, fa, la) in enumerate(runs):
            for nb, fb, lb in runs[i + 1:]:
                if na == nb:
                    continue
                start_s = max(fa.end_s, fb.end_s)
                if lb.start_s > fa.end_s and la.start_s > fb.end_s:
                    end_s = min(la.start_s, lb.start_s)
                    windows.append(DualWindow(key, tuple(sorted((na, nb))),  # type: ignore[arg-type]
                                              min(start_s, end_s), max(start_s, end_s)))
    return windows


def linearizable_register(ops: list[Op], budget: int = LINEARIZABLE_STEPS) -> bool | None:
    """Whether one register's reads and writes have a linearization (Wing & Gong's search with
    memoised states): True, False, or None when ``budget`` steps did not settle it. Refused
    operations never happened; writes of unknown fate may take effect at any time after
    their invocation, or never; reads of unknown fate say nothing."""
    calls = [op for op in ops if op.kind in ("write", "read")
             and (op.status == "ok" or (op.status == "info" and op.kind == "write"))]
    calls.sort(key=lambda o: o.start_s)
    ends = [op.end_s if op.status == "ok" else NEVER_S for op in calls]
    optional = [op.status == "info" for op in calls]
    n = len(calls)
    seen: set[tuple[int, object]] = set()
    steps = 0
    # depth-first: (done bitmask, state); an op may go next if it started before every
    # pending op's end (no pending op must come before it)
    stack: list[tuple[int, object]] = [(0, INITIAL)]
    required = sum(1 << i for i in range(n) if not optional[i])
    while stack:
        done, state = stack.pop()
        if done & required == required:
            return True
        if (done, state) in seen:
            continue
        seen.add((done, state))
        steps += 1
        if steps > budget:
            return None
        pending = [i for i in range(n) if not done >> i & 1]
        horizon = min(ends[i] for i in pending)
        for i in pending:
            op = calls[i]
            if op.start_s > horizon:
                break  # sorted by start: none later can go first
            if op.kind == "write":
                stack.append((done | 1 << i, _decode(op.value)))
            elif _decode(op.value) == state:
                stack.append((done | 1 << i, state))
        # an unknown write may also never take effect
        for i in pending:
            if optional[i] and calls[i].start_s <= horizon:
                stack.append((done | 1 << i, state))
    return False
