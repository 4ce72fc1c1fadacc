"""LATENCY, INFO latencystats and SLOWLOG against redis-server 7.0: values depend on time, so
replies are compared by shape (types, nesting, names) and texts with their numbers masked;
errors and the empty states exactly."""

from __future__ import annotations

import re

import pytest

from tests.node.diff import Case, Pair, both, check_cases
from tests.support import RawClient

CASES = [
    Case("latency without events", [
        "CONFIG SET latency-monitor-threshold 0", "LATENCY DOCTOR", "LATENCY LATEST",
        "LATENCY HISTORY command", "LATENCY GRAPH command", "LATENCY RESET", "LATENCY RESET foo",
        "CONFIG SET latency-monitor-threshold 100", "LATENCY DOCTOR", "LATENCY FOO",
        "LATENCY HISTORY", "LATENCY LATEST x", "LATENCY GRAPH a b", "LATENCY HELP",
        "LATENCY HISTOGRAM nosuch", "CONFIG SET latency-monitor-threshold 0"]),
]


@pytest.mark.parametrize("proto", [2, 3])
def test_latency_exact(diff_pair: Pair, proto: int) -> None:
    assert check_cases(diff_pair, CASES, proto) == []


def _shape(v: object) -> object:
    """Integers as their type; lists and texts kept with digits masked."""
    if isinstance(v, int):
        return "int"
    if isinstance(v, list):
        return [_shape(x) for x in v]
    if isinstance(v, bytes):
        return re.sub(rb"\d+", b"N", v)
    return v


def test_latency_events_after_debug_sleep(raw_pair: tuple[RawClient, RawClient]) -> None:
    for args in (("CONFIG", "SET", "latency-monitor-threshold", "5"), ("LATENCY", "RESET"),
                 ("DEBUG", "SLEEP", "0.02"), ("PING",)):
        both(raw_pair, *args)
    latest = both(raw_pair, "LATENCY", "LATEST")
    assert _shape(latest[0]) == _shape(latest[1]) == [[b"command", "int", "int", "int"]]
    ours_latest = latest[0]
    assert isinstance(ours_latest, list) and 20 <= ours_latest[0][2] < 1000
    history = both(raw_pair, "LATENCY", "HISTORY", "command")
    assert _shape(history[0]) == _shape(history[1]) == [["int", "int"]]
    for sub in ("GRAPH", "DOCTOR"):
        texts = both(raw_pair, "LATENCY", sub, *(["command"] if sub == "GRAPH" else []))
        assert _shape(texts[0]) == _shape(texts[1]), sub
    assert both(raw_pair, "LATENCY", "RESET", "command", "x", "command") == (1, 1)
    assert both(raw_pair, "LATENCY", "LATEST") == ([], [])
    both(raw_pair, "CONFIG", "SET", "latency-monitor-threshold", "0")


def test_latency_histogram_and_info(raw_pair: tuple[RawClient, RawClient]) -> None:
    both(raw_pair, "CONFIG", "RESETSTAT")
    for _ in range(3):
        both(raw_pair, "SET", "a", "b")
    both(raw_pair, "GET", "a")
    both(raw_pair, "CONFIG", "SET", "hz", "10")
    picked = both(raw_pair, "LATENCY", "HISTOGRAM", "set", "get", "nosuch", "config", "incr")
    for reply in picked:
        assert isinstance(reply, list)
        by_name = {reply[i]: reply[i + 1] for i in range(0, len(reply), 2)}
        assert sorted(by_name) == [b"config|resetstat", b"config|set", b"get", b"set"]
        assert by_name[b"set"][:2] == [b"calls", 3] and by_name[b"get"][1] == 1
        levels = by_name[b"set"][3]
        assert levels[-1] == 3 and all(isinstance(x, int) for x in levels)
    ours_all, real_all = both(raw_pair, "LATENCY", "HISTOGRAM")
    assert isinstance(ours_all, list) and isinstance(real_all, list)
    assert sorted(ours_all[::2]) == sorted(real_all[::2])

    def fields(raw: bytes) -> list[str]:
        return sorted(re.sub(r"=[\d.]+", "=N", ln) for ln in raw.decode().split("\r\n")[1:] if ln)

    ours, real = raw_pair
    for pcts in ("50 99 99.9", "0 100 12.5", ""):
        both(raw_pair, "CONFIG", "SET", "latency-tracking-info-percentiles", pcts)
        assert fields(ours.call("INFO", "latencystats")) == fields(real.call("INFO", "latencystats"))
    both(raw_pair, "CONFIG", "SET", "latency-tracking", "no")
    assert both(raw_pair, "INFO", "latencystats") == (b"# Latencystats\r\n",) * 2
    both(raw_pair, "CONFIG", "SET", "latency-tracking", "yes")
    both(raw_pair, "CONFIG", "SET", "latency-tracking-info-percentiles", "50 99 99.9")


def test_slowlog_entry_has_client_address_and_name(raw_pair: tuple[RawClient, RawClient]) -> None:
    both(raw_pair, "CONFIG", "SET", "slowlog-log-slower-than", "0")
    both(raw_pair, "CLIENT", "SETNAME", "lat-test")
    both(raw_pair, "SLOWLOG", "RESET")
    both(raw_pair, "SET", "k", "v")
    got = both(raw_pair, "SLOWLOG", "GET", "1")
    both(raw_pair, "CONFIG", "SET", "slowlog-log-slower-than", "10000")
    assert _shape(got[0]) == _shape(got[1])
    for reply in got:
        assert isinstance(reply, list)
        entry = reply[0]
        assert entry[3] == [b"SET", b"k", b"v"] and entry[5] == b"lat-test"
        assert re.fullmatch(rb"127\.0\.0\.1:\d+", entry[4])


def test_latency_replies_in_resp3(raw_pair: tuple[RawClient, RawClient]) -> None:
    """RESP3: HISTOGRAM answers maps, GRAPH and DOCTOR verbatim text, LATEST arrays."""
    ours, real = raw_pair
    for c in raw_pair:
        c.call("HELLO", "3")
    try:
        for args in (("CONFIG", "SET", "latency-monitor-threshold", "5"), ("LATENCY", "RESET"),
                     ("DEBUG", "SLEEP", "0.02"), ("SET", "a", "b")):
            both(raw_pair, *args)
        for args in (("LATENCY", "HISTOGRAM", "set"), ("LATENCY", "GRAPH", "command"),
                     ("LATENCY", "DOCTOR"), ("LATENCY", "LATEST"),
                     ("LATENCY", "HISTORY", "command")):
            a, b = ours.call(*args), real.call(*args)
            if args[1] == "HISTOGRAM":  # how many levels depends on the durations
                a, b = (x.split(b"histogram_usec\r\n")[0] + x.split(b"histogram_usec\r\n")[1][:1]
                        for x in (a, b))
            assert re.sub(rb"\d+", b"N", a) == re.sub(rb"\d+", b"N", b), args
    finally:
        for c in raw_pair:
            c.call("HELLO", "2")
        both(raw_pair, "CONFIG", "SET", "latency-monitor-threshold", "0")


def test_fast_command_event(raw_pair: tuple[RawClient, RawClient]) -> None:
    """A command flagged fast (EXISTS over many keys) is a ``fast-command`` event, with the
    doctor's scheduler advice."""
    both(raw_pair, "LATENCY", "RESET")
    both(raw_pair, "CONFIG", "SET", "latency-monitor-threshold", "1")
    try:
        both(raw_pair, "EXISTS", *[f"k{i}" for i in range(300_000)])
        latest = both(raw_pair, "LATENCY", "LATEST")
        assert _shape(latest[0]) == _shape(latest[1]) == [[b"fast-command", "int", "int", "int"]]
        doctor = both(raw_pair, "LATENCY", "DOCTOR")
        assert _shape(doctor[0]) == _shape(doctor[1])
    finally:
        both(raw_pair, "CONFIG", "SET", "latency-monitor-threshold", "0")
        both(raw_pair, "LATENCY", "RESET")
