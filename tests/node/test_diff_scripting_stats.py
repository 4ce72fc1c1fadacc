"""The commands a script runs are counted as Redis counts them: INFO commandstats' calls, the
slowlog and the per-command latency histograms, against a real redis-server 7.0 with the same
scripts (durations left out: they differ by nature). Known gap, not checked here: Redis also
counts a script's refused commands as rejected_calls and an EVAL answering an error as a
failed call; ours does not yet."""

from __future__ import annotations

import re

import hiredis

from tests.node.diff import Pair
from tests.support import RawClient

SCRIPTS = [
    ("EVAL", "redis.call('set', KEYS[1], ARGV[1]) return redis.call('get', KEYS[1])", "1", "k", "v"),
    ("EVAL", "redis.call('SET', 'n', 5) return redis.call('incr', 'n')", "0"),
    ("EVAL", "return redis.pcall('incr', 'k')", "0"),  # fails: not an integer
    ("EVAL", "return redis.pcall('get', 'a', 'b')", "0"),  # refused: arity
    ("EVAL", "redis.setresp(3) return redis.call('hgetall', 'h')", "0"),
    ("EVAL_RO", "return redis.pcall('set', 'k', 'x')", "0"),  # refused: read-only script
]
COMMANDS = ("set", "get", "incr", "hgetall", "eval", "eval_ro")
_STAT = re.compile(rb"cmdstat_(\w+):calls=(\d+),")


def _parse(raw: bytes) -> object:
    reader = hiredis.Reader()
    reader.feed(raw)
    return reader.gets()


def _observed(port: int) -> tuple[dict[bytes, bytes], list[object], list[object]]:
    c = RawClient(port)
    try:
        c.call("FLUSHALL")
        c.call("CONFIG", "SET", "slowlog-log-slower-than", "0")
        c.call("CONFIG", "RESETSTAT")
        c.call("SLOWLOG", "RESET")
        for argv in SCRIPTS:
            c.call(*argv)
        c.call("CONFIG", "SET", "slowlog-log-slower-than", "10000")
        stats = {m[0]: m[1] for m in _STAT.findall(c.call("INFO", "commandstats"))
                 if m[0].decode() in COMMANDS}
        log = _parse(c.call("SLOWLOG", "GET", "-1"))
        assert isinstance(log, list)
        entries = [e[3] for e in reversed(log)
                   if e[3][0].lower() not in (b"config", b"slowlog", b"info")]
        hist = _parse(c.call("LATENCY", "HISTOGRAM", *COMMANDS))
        assert isinstance(hist, list)
        calls = [(hist[i], hist[i + 1][1]) for i in range(0, len(hist), 2)]
        return stats, entries, sorted(calls)
    finally:
        c.close()


def test_script_commands_are_counted_as_redis_counts_them(diff_pair: Pair) -> None:
    ours, real = _observed(diff_pair.ours_port), _observed(diff_pair.real_port)
    assert ours[0] == real[0]
    assert ours[0][b"set"] == b"2"  # (not the read-only script's SET: refused)
    assert ours[1] == real[1]
    assert ours[2] == real[2]
