"""LATENCY GRAPH and DOCTOR texts and the histogram levels (proxy/front/latency.py) for fixed
samples, against what redis-server 7.0.15 printed for the same samples (history
``[[t, 10], [t + 1, 30], [t + 2, 20]]``: GRAPH read at t + 3, DOCTOR at t + 6)."""

from __future__ import annotations

from bisect import bisect_left
from pathlib import Path

import pytest

from slotgate.proxy.front import latency
from slotgate.proxy.front.latency import LEVELS_S, Event, Latency
from slotgate.proxy.ops.config import ConfigError, load

T0 = 1796182260
REAL_GRAPH = ("command - high 30 ms, low 10 ms (all time high 30 ms)\n" + "-" * 80 + "\n"
              " # \n |_\n ||\n_||\n   \n321\nsss\n")
REAL_DOCTOR_LINE = ("1. command: 3 latency spikes (average 20ms, mean deviation 6ms, period 2.00 "
                    "sec). Worst all time event 30ms.")


@pytest.fixture
def lat(monkeypatch: pytest.MonkeyPatch) -> Latency:
    monkeypatch.setattr(latency.time, "time", lambda: T0 + 3.2)
    lat = Latency(1)
    e = lat.events["command"] = Event()
    for t, ms in ((T0, 10), (T0 + 1, 30), (T0 + 2, 20)):
        e.add(t, ms)
    return lat


def test_graph_is_redis_sparkline(lat: Latency) -> None:
    assert latency.graph("command", lat.events["command"]) == REAL_GRAPH


def test_doctor_is_redis_report(lat: Latency, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(latency.time, "time", lambda: T0 + 6.2)  # Redis' report was read then
    text = latency.doctor(lat, 10000, 128)
    assert text.splitlines()[2] == REAL_DOCTOR_LINE
    assert "Your current Slow Log configuration only logs events" in text
    assert "slowlog-log-slower-than -1" not in text


def test_one_second_keeps_its_worst_sample() -> None:
    e = Event()
    for ms in (5, 9, 7):
        e.add(T0, ms)
    assert e.samples == [(T0, 9)] and e.max_ms == 9


@pytest.mark.parametrize(("took_us", "key_us"), [
    (0, 1), (1, 1), (2, 2), (3, 4), (5, 8), (10158, 16908), (600_000, 1073741),
    (5_000_000, 1073741)])
def test_a_request_is_counted_at_redis_level(took_us: int, key_us: int) -> None:
    """As redis-server 7.0.15's histogram_usec put a GET (4 µs), CONFIG GET (88 µs -> 132),
    DEBUG SLEEP 0.01 (16908) and DEBUG SLEEP 1.2 (1073741)."""
    lat = Latency()
    lat.histograms["get"] = counts = [0] * latency.BUCKETS
    counts[bisect_left(LEVELS_S, took_us / 1e6)] += 1
    assert lat.histogram([b"get"], {}, 2) == (
        b"*2\r\n$3\r\nget\r\n*4\r\n$5\r\ncalls\r\n:1\r\n$14\r\nhistogram_usec\r\n"
        b"*2\r\n:%d\r\n:1\r\n" % key_us)


def test_a_spike_is_a_command_or_fast_command_event() -> None:
    lat = Latency(5)
    lat.spike("eval", 0.0049)  # below the threshold
    lat.spike("get", 0.007)  # Redis flags GET fast
    lat.spike("eval", 0.006)
    assert {name: e.samples[0][1] for name, e in lat.events.items()} == {
        "fast-command": 7, "command": 6}
    assert lat.reset([b"command", b"nosuch"]) == 1 and list(lat.events) == ["fast-command"]


def test_config_file_keys_are_checked(tmp_path: Path) -> None:
    path = tmp_path / "proxy.yaml"
    path.write_text("seeds: [\"127.0.0.1:7000\"]\nlatency:\n  monitor_threshold_ms: 20\n"
                    "  tracking: false\n  tracking_info_percentiles: [50, 99.99]\n")
    settings = load(path).proxy
    assert (settings.latency_monitor_threshold_ms, settings.latency_tracking,
            settings.latency_tracking_info_percentiles) == (20, False, (50.0, 99.99))
    path.write_text("seeds: [\"127.0.0.1:7000\"]\nlatency:\n  monitor_threshold_ms: -1\n"
                    "  tracking: maybe\n  tracking_info_percentiles: [50, 101]\n")
    with pytest.raises(ConfigError) as exc:
        load(path)
    assert [p.split(":")[0] for p in exc.value.problems] == [
        "latency.monitor_threshold_ms", "latency.tracking", "latency.tracking_info_percentiles"]
