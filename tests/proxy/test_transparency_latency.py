"""The proxy's own LATENCY, INFO latencystats and their directives (proxy/front/latency.py,
own_config.py): the same script to a standalone redis-server and to a proxy of this module's
own compares equal, RESP2 and RESP3, once times and durations are masked (the proxy's are end
to end). A proxy-only test checks that a slow request is an event, RESET clears it and
HISTOGRAM counts calls."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import hiredis
import pytest

from tests.support import ManagedProcess, RawClient, proxy_and_redis

PROTOCOLS = [2, 3]
# A script that runs ~120 ms on whichever server runs it (its key keeps it on one master).
BUSY = ("local t0 = redis.call('TIME') local s0 = t0[1] * 1000000 + t0[2] "
        "repeat local t = redis.call('TIME') until t[1] * 1000000 + t[2] - s0 >= 120000 "
        "return 1")
THRESHOLD_MS = 100
# The keys redis-server 7.0 gives its power-of-2 histogram levels (µs).
REDIS_KEYS_US = {1, 2, 4, 8, 16, 33, 66, 132, 264, 528, 1056, 2113, 4227, 8454, 16908, 33816,
                 67633, 135266, 270532, 541065, 1073741}


@pytest.fixture(scope="module")
def pair(real_cluster: list[ManagedProcess], tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[dict[str, ManagedProcess]]:
    ports = [n.port for n in real_cluster]
    with proxy_and_redis(tmp_path_factory.mktemp("latency"), ports[:2]) as procs:
        yield procs


def _parse(raw: bytes) -> Any:
    reader = hiredis.Reader()
    reader.feed(raw)
    return reader.gets()


def _masked(raw: bytes) -> tuple[bytes, bytes]:
    """The reply's type byte and its text with every number masked."""
    return raw[:1], re.sub(rb"\d+", b"N", raw.split(b"\r\n", 1)[1])


def _histogram(raw: bytes) -> object:
    """LATENCY HISTOGRAM as {name: (calls, buckets are powers of 2 growing to calls)}."""
    parsed = _parse(raw)
    items = parsed.items() if isinstance(parsed, dict) else zip(parsed[::2], parsed[1::2],
                                                                strict=True)
    out = {}
    for name, body in items:
        body = body if isinstance(body, dict) else dict(zip(body[::2], body[1::2], strict=True))
        hist = body[b"histogram_usec"]
        hist = hist if isinstance(hist, dict) else dict(zip(hist[::2], hist[1::2], strict=True))
        cumulative = list(hist.values())
        assert cumulative == sorted(cumulative) and cumulative[-1] == body[b"calls"]
        assert set(hist) <= REDIS_KEYS_US, hist
        out[name] = body[b"calls"]
    return raw[:1], out


def _latencystats(raw: bytes) -> list[bytes]:
    lines = [ln for ln in raw.split(b"\r\n") if ln.startswith(b"latency_percentiles_usec_strlen")]
    return [re.sub(rb"=\d+\.\d{3}", b"=N.NNN", ln) for ln in lines]


def _script(port: int, proto: int) -> list[object]:
    with RawClient(port) as c:
        if proto == 3:
            c.call("HELLO", "3")
        out: list[object] = [
            c.call("CONFIG", "SET", "latency-tracking", "maybe"),
            c.call("CONFIG", "SET", "latency-tracking-info-percentiles", "50 abc"),
            c.call("CONFIG", "SET", "latency-tracking-info-percentiles", "101"),
            c.call("CONFIG", "SET", "latency-monitor-threshold", "-1"),
            c.call("CONFIG", "SET", "latency-monitor-threshold", "x"),
            c.call("CONFIG", "SET", "latency-monitor-threshold", "0"),
            c.call("CONFIG", "GET", "latency-tracking-info-percentiles"),
            c.call("CONFIG", "SET", "latency-tracking-info-percentiles", "50.5 99.99 0 100"),
            c.call("CONFIG", "GET", "latency-tracking-info-percentiles"),
            sorted(_parse(c.call("CONFIG", "GET", "latency*")).__iter__()),
            c.call("LATENCY", "RESET"),
            c.call("LATENCY", "HELP"),
            c.call("LATENCY", "LATEST"),
            c.call("LATENCY", "DOCTOR"),  # monitor off, nothing seen
            c.call("LATENCY", "HISTORY", "command"),
            c.call("LATENCY", "GRAPH", "command"),
            c.call("LATENCY", "FOO"),
            c.call("LATENCY", "LATEST", "x"),
            c.call("LATENCY", "HISTORY"),
            c.call("CONFIG", "SET", "latency-monitor-threshold", str(THRESHOLD_MS)),
            c.call("LATENCY", "DOCTOR"),  # on, nothing seen
            c.call("STRLEN", "{lat}k"),
            c.call("STRLEN", "{lat}k"),
            c.call("STRLEN"),  # refused before running: not counted
            _histogram(c.call("LATENCY", "HISTOGRAM", "strlen", "nosuch", "strlen")),
            _latencystats(c.call("INFO", "latencystats")),
            c.call("CONFIG", "SET", "latency-tracking", "no"),
            c.call("STRLEN", "{lat}k"),  # not counted
            _latencystats(c.call("INFO", "latencystats")),
            _histogram(c.call("LATENCY", "HISTOGRAM", "strlen")),
            c.call("CONFIG", "SET", "latency-tracking", "yes",
                   "latency-tracking-info-percentiles", "50 99 99.9"),
            c.call("EVAL", BUSY, "1", "{lat}k"),
            _masked(c.call("LATENCY", "LATEST")),
            _masked(c.call("LATENCY", "HISTORY", "command")),
            _masked(c.call("LATENCY", "DOCTOR")),
            _masked(c.call("LATENCY", "GRAPH", "command")),
            c.call("CONFIG", "SET", "slowlog-log-slower-than", "-1"),
            _masked(c.call("LATENCY", "DOCTOR")),  # the advice to turn the slow log on
            c.call("CONFIG", "SET", "slowlog-log-slower-than", "10000"),
            c.call("LATENCY", "RESET", "nosuch", "command"),
            c.call("LATENCY", "LATEST"),
            c.call("CONFIG", "SET", "latency-monitor-threshold", "0"),
        ]
        return out


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_latency_and_its_directives_are_one_servers(pair: dict[str, ManagedProcess],
                                                    proto: int) -> None:
    got = {name: _script(server.port, proto) for name, server in pair.items()}
    for i, (p, r) in enumerate(zip(got["proxy"], got["real"], strict=True)):
        assert p == r, (i, p, r)


def test_a_slow_request_is_an_event_until_reset(pair: dict[str, ManagedProcess]) -> None:
    with RawClient(pair["proxy"].port) as c:
        assert c.call("CONFIG", "SET", "latency-monitor-threshold", "50") == b"+OK\r\n"
        try:
            c.call("LATENCY", "RESET")
            before = _histogram(c.call("LATENCY", "HISTOGRAM", "eval"))[1].get(b"eval", 0)
            assert c.call("EVAL", BUSY, "1", "{lat}slow") == b":1\r\n"
            latest = _parse(c.call("LATENCY", "LATEST"))
            history = _parse(c.call("LATENCY", "HISTORY", "command"))
            after = _histogram(c.call("LATENCY", "HISTOGRAM", "eval"))[1][b"eval"]
            assert c.call("LATENCY", "RESET") == b":1\r\n"
            assert c.call("LATENCY", "LATEST") == b"*0\r\n"
            # Inside MULTI the node running the transaction would answer with its own figures.
            assert c.call("MULTI") == b"+OK\r\n"
            assert c.call("LATENCY", "LATEST") == (b"-ERR slotgate: 'latency|latest' cannot run "
                                                   b"inside MULTI through the proxy\r\n")
            assert c.call("DISCARD") == b"+OK\r\n"
        finally:
            c.call("CONFIG", "SET", "latency-monitor-threshold", "0")
    [(event, _when, ms, worst)] = [e for e in latest if e[0] == b"command"]
    assert 120 <= ms == worst
    assert len(history) == 1 and history[0][1] == ms
    assert after == before + 1
