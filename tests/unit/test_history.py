"""The history checker on hand-made histories: each finding it must report, and the clean
histories (concurrent, unknown fates) it must not accuse."""

from __future__ import annotations

from dataclasses import replace

from tests.history import Op, Recorder, check, dual_windows, linearizable_register


def w(key: str, value: object, start: float, end: float, status: str = "ok", p: int = 0) -> Op:
    return Op(p, "write", key, value, start, end, status)  # type: ignore[arg-type]


def r(key: str, value: object, start: float, end: float, status: str = "ok", p: int = 1) -> Op:
    return Op(p, "read", key, value, start, end, status)  # type: ignore[arg-type]


def incr(key: str, value: object, start: float, end: float, status: str = "ok") -> Op:
    return Op(0, "incr", key, value, start, end, status)  # type: ignore[arg-type]


def probe(slot: str, node: str, start: float, status: str = "ok") -> Op:
    return Op(9, "probe", slot, "x", start, start + 0.01, status, node)  # type: ignore[arg-type]


def test_clean_sequential_register() -> None:
    ops = [w("k", "1", 0, 1), r("k", "1", 1.5, 2), w("k", "2", 3, 4), r("k", "2", 5, 6)]
    rep = check(ops, {"k": b"2"})
    assert rep.clean and rep.acknowledged == 4
    assert not rep.unknown_linearizable


def test_lost_acknowledged_write() -> None:
    ops = [w("k", "1", 0, 1), w("k", "2", 2, 3), w("k", "3", 4, 5)]
    rep = check(ops, {"k": b"1"})
    assert [op.value for op in rep.lost] == ["2", "3"]
    assert rep.not_linearizable == []  # no read saw it: the final read is judged apart


def test_key_gone_loses_every_acknowledged_write() -> None:
    rep = check([w("k", "1", 0, 1)], {"k": None})
    assert [op.value for op in rep.lost] == ["1"]


def test_key_not_read_at_the_end_is_not_judged() -> None:
    assert check([w("k", "1", 0, 1)], {}).clean


def test_concurrent_write_may_win() -> None:
    # "2" overlaps "1": either order is allowed, so "1" last is no loss
    ops = [w("k", "2", 0, 3, p=1), w("k", "1", 1, 2)]
    assert check(ops, {"k": b"1"}).clean
    assert check(ops, {"k": b"2"}).clean


def test_unknown_write_may_have_happened_or_not() -> None:
    ops = [w("k", "1", 0, 1), w("k", "2", 2, 3, status="info"), r("k", "2", 4, 5),
           r("k", "2", 6, 7)]
    assert check(ops, {"k": b"2"}).clean
    assert check(ops[:2], {"k": b"1"}).clean


def test_refused_write_never_happened() -> None:
    ops = [w("k", "1", 0, 1), w("k", "2", 2, 3, status="fail"), r("k", "2", 4, 5)]
    rep = check(ops, {"k": b"1"})
    assert [op.value for op in rep.never_written] == ["2"]


def test_stale_read() -> None:
    ops = [w("k", "1", 0, 1), w("k", "2", 2, 3), r("k", "1", 4, 5), r("k", None, 6, 7)]
    rep = check(ops, {"k": b"2"})
    assert [(op.value, op.start_s) for op in rep.stale] == [("1", 4), (None, 6)]
    assert rep.not_linearizable == ["k"]


def test_read_concurrent_with_write_is_not_stale() -> None:
    ops = [w("k", "1", 0, 1), w("k", "2", 2, 5), r("k", "1", 3, 4), r("k", "2", 3.5, 4.5)]
    rep = check(ops, {"k": b"2"})
    assert rep.clean


def test_read_of_value_never_written() -> None:
    rep = check([w("k", "1", 0, 1), r("k", "zzz", 2, 3)], {"k": b"1"})
    assert [op.value for op in rep.never_written] == ["zzz"]
    rep = check([w("k", "1", 0, 1)], {"k": b"nope"})
    assert [op.value for op in rep.never_written] == ["nope"]


def test_non_linearizable_without_stale_reads() -> None:
    # two readers disagree on the order of two overlapping writes: each read alone is
    # fine (the writes overlap it), together no order explains them
    ops = [w("k", "a", 0, 10), w("k", "b", 0, 10, p=2),
           r("k", "a", 1, 2), r("k", "b", 3, 4, p=3), r("k", "a", 5, 6, p=4)]
    rep = check(ops, {"k": b"a"})
    assert rep.stale == [] and rep.lost == []
    assert rep.not_linearizable == ["k"]


def test_linearizability_budget() -> None:
    ops = [w("k", str(i), 0, 100, p=i) for i in range(30)] + [r("k", "none", 200, 201)]
    assert linearizable_register(ops, budget=50) is None


def test_counter_clean_and_lost() -> None:
    ops = [incr("c", 1, 0, 1), incr("c", 2, 2, 3), incr("c", None, 4, 5, status="info"),
           r("c", b"2", 6, 7)]
    assert check(ops, {"c": b"3"}, counters=["c"]).clean
    assert check(ops, {"c": b"2"}, counters=["c"]).clean  # the unknown one never happened
    rep = check(ops, {"c": b"1"}, counters=["c"])
    assert [op.value for op in rep.lost] == [2]


def test_counter_duplicate_replies_are_a_loss() -> None:
    # the old master acknowledged 1 and 2, the new one (which never saw them) 1 and 2 again
    ops = [incr("c", 1, 0, 1), incr("c", 2, 2, 3), incr("c", 1, 10, 11), incr("c", 2, 12, 13)]
    rep = check(ops, {"c": b"2"}, counters=["c"])
    assert len(rep.lost) == 2


def test_counter_stale_and_never_written_reads() -> None:
    ops = [incr("c", 1, 0, 1), incr("c", 2, 2, 3), r("c", b"1", 4, 5), r("c", b"7", 6, 7)]
    rep = check(ops, {"c": b"2"}, counters=["c"])
    assert [op.value for op in rep.stale] == [b"1"]
    assert [op.value for op in rep.never_written] == [b"7"]


def test_counter_reads_after_a_loss_follow_the_new_count() -> None:
    # 1 and 2 lost; the new master counts 1, 2 again: reads of its count are not stale
    ops = [incr("c", 1, 0, 1), incr("c", 2, 2, 3), incr("c", 1, 10, 11), r("c", b"1", 12, 13),
           r("c", b"0", 14, 15)]
    rep = check(ops, {"c": b"1"}, counters=["c"])
    assert [op.value for op in rep.stale] == [b"0"]


def test_dual_master_window() -> None:
    # a accepts until 5.0; b (promoted) accepts from 3.0: both accepted between 3.01 and 5.0
    probes = [probe("s1", "a", t) for t in (0, 1, 2, 3, 4, 5)] + [probe("s1", "a", 6, "fail")]
    probes += [probe("s1", "b", 1, "fail"), probe("s1", "b", 2, "fail")]
    probes += [probe("s1", "b", t) for t in (3, 4, 5, 6, 7)]
    [win] = dual_windows(probes)
    assert win.nodes == ("a", "b") and win.key == "s1"
    assert (win.start_s, win.end_s) == (3.01, 5)
    assert check(probes, {}).dual == [win]


def test_handover_without_overlap_is_no_window() -> None:
    probes = [probe("s1", "a", t) for t in (0, 1, 2)] + [probe("s1", "a", 3, "fail")]
    probes += [probe("s1", "b", 3.5, "fail")] + [probe("s1", "b", t) for t in (4, 5)]
    probes += [probe("s1", "a", t, "fail") for t in (4, 5)]
    probes += [probe("s2", "c", t) for t in (0, 5)]  # another slot, another node
    assert dual_windows(probes) == []


def test_unknown_probe_neither_ends_nor_extends_a_run() -> None:
    probes = [probe("s1", "a", 0), probe("s1", "a", 1, "info"), probe("s1", "a", 2, "fail"),
              probe("s1", "b", 1.5)]
    assert dual_windows(probes) == []


def test_recorder() -> None:
    ticks = iter(range(100))
    rec = Recorder(clock=lambda: float(next(ticks)))

    def refuse() -> None:
        raise ConnectionError("down")

    assert rec.run(1, "write", "k", "v1", lambda: True, lambda e: "info") is True
    assert rec.run(1, "read", "k", None, lambda: b"v1", lambda e: "info") == b"v1"
    assert rec.run(1, "write", "k", "v2", refuse, lambda e: "fail") is None
    failed = replace(w("k", "v2", 4, 5, "fail", p=1), error="ConnectionError: down")
    assert rec.snapshot() == [w("k", "v1", 0, 1, p=1), r("k", b"v1", 2, 3, p=1), failed]


def test_the_cut_masters_refusal_is_read_from_the_probes() -> None:
    from tests.reliability.scenarios import Outcome, judge_refusal

    def probe(start: float, end: float, status: str, error: str = "") -> Op:
        return Op(99, "probe", "5", "n1", start, end, status, "n1", error)  # type: ignore[arg-type]

    out = Outcome("minority-master", "ours", "proxy")
    judge_refusal(out, [probe(10.1, 10.2, "ok"), probe(11.0, 11.5, "info"),
                        probe(12.5, 12.6, "ok"),
                        probe(12.7, 12.8, "fail", "ClusterDownError: The cluster is down"),
                        probe(12.9, 13.0, "fail", "ResponseError: NOREPLICAS Not enough good")],
                  cut_s=10.0)
    assert (out.refused_after_s, out.refusal) == (2.8, "ClusterDownError")
    assert (out.accepted_until_s, out.probe_timeouts) == (2.6, 1)
    judge_refusal(out, [probe(11, 11.2, "fail", "ResponseError: NOREPLICAS Not enough good")], 10.0)
    assert (out.refused_after_s, out.refusal, out.accepted_until_s) == (1.2, "NOREPLICAS", None)
