"""The commands a script runs are counted as Redis counts them: INFO commandstats' calls, the
slowlog and the per-command latency histograms, against a real redis-server 7.0 with the same
scripts (durations left out: they differ by nature). Errors as Redis counts them: a command a
script runs that fails is a failed call of that command and one error in INFO errorstats, a
command the script may not run (arity, read-only script, not allowed) a rejected call and one
error, counted when it happens; an EVAL/FCALL answering an error is a failed call of its own,
and its error reply is counted unless it is the very error a command's failure produced
(Redis' ``ignore_error_stats_update`` mark), nested errors in an array reply included."""

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


ERROR_SCRIPTS = [
    ("EVAL", "return redis.pcall('incr', 'str')", "0"),  # failed: counted once, by INCR
    ("EVAL", "redis.pcall('incr', 'str') return 1", "0"),
    ("EVAL", "return redis.call('incr', 'str')", "0"),
    ("EVAL", "return redis.pcall('get')", "0"),  # rejected: arity
    ("EVAL", "redis.pcall('get') return 1", "0"),
    ("EVAL", "redis.pcall('nosuch') return 1", "0"),
    ("EVAL", "return redis.pcall('nosuch')", "0"),
    ("EVAL", "redis.pcall('subscribe', 'x') return 1", "0"),  # not allowed from scripts
    ("EVAL_RO", "return redis.pcall('set', 'a', 'b')", "0"),
    ("EVAL", "return redis.pcall('set', 'a', 'b', 'XX', 'NX')", "0"),
    ("EVAL", "return redis.pcall()", "0"),  # the script's own error: counted as the reply
    ("EVAL", "return redis.error_reply('MY err')", "0"),
    ("EVAL", "return {err='X y'}", "0"),
    ("EVAL", "error('boom')", "0"),
    ("EVAL", "local e = redis.pcall('get') return {err = e.err}", "0"),  # a new table: counted
    ("EVAL", "local e = redis.pcall('get') return {e}", "0"),
    ("EVAL", "return {redis.error_reply('A b'), redis.pcall('incr', 'str')}", "0"),
    ("EVAL", "local e = redis.pcall('get') local t = {} for k in pairs(e) do t[#t + 1] = k end "
             "table.sort(t) return t", "0"),
    ("EVALSHA", "ffffffffffffffffffffffffffffffffffffffff", "0"),
    ("FUNCTION", "LOAD", "REPLACE", "#!lua name=errs\nredis.register_function('f', function() "
                                    "return redis.pcall('hget', 'str', 'x') end)"),
    ("FCALL", "f", "0"),
]
_CMDSTAT = re.compile(rb"cmdstat_([\w|]+):calls=(\d+),usec=\d+,usec_per_call=[\d.]+,"
                      rb"rejected_calls=(\d+),failed_calls=(\d+)")


def _errors_after(c: RawClient, argv: tuple[str, ...]) -> tuple[object, ...]:
    c.call("CONFIG", "RESETSTAT")
    reply = c.call(*argv)
    stats = sorted(m for m in _CMDSTAT.findall(c.call("INFO", "commandstats"))
                   if m[0] != b"config|resetstat")
    errors = c.call("INFO", "errorstats").split(b"\r\n")[1:]
    total = re.findall(rb"total_error_replies:\d+", c.call("INFO", "stats"))
    return reply, stats, errors, total


def test_script_errors_are_counted_as_redis_counts_them(diff_pair: Pair) -> None:
    ours, real = RawClient(diff_pair.ours_port), RawClient(diff_pair.real_port)
    try:
        for c in (ours, real):
            c.call("SET", "str", "x")
        for argv in ERROR_SCRIPTS:
            assert _errors_after(ours, argv) == _errors_after(real, argv), argv
    finally:
        ours.close()
        real.close()


def test_script_commands_are_counted_as_redis_counts_them(diff_pair: Pair) -> None:
    ours, real = _observed(diff_pair.ours_port), _observed(diff_pair.real_port)
    assert ours[0] == real[0]
    assert ours[0][b"set"] == b"2"  # (not the read-only script's SET: refused)
    assert ours[1] == real[1]
    assert ours[2] == real[2]


def test_script_commands_in_total_commands_processed(diff_pair: Pair) -> None:
    """total_commands_processed counts a script's commands as Redis does: INFO run by the
    script sees the commands it ran before, INFO after it all of them and the EVAL."""
    script = ("redis.call('incr', 'n') redis.call('incr', 'n') "
              "local s = redis.call('info', 'stats') redis.call('incr', 'n') "
              "return string.match(s, 'total_commands_processed:(%d+)')")
    seen = []
    for port in (diff_pair.ours_port, diff_pair.real_port):
        c = RawClient(port)
        try:
            c.call("CONFIG", "RESETSTAT")
            inside = c.call("EVAL", script, "0")
            after = re.findall(rb"total_commands_processed:(\d+)", c.call("INFO", "stats"))
            seen.append((inside, after))
        finally:
            c.close()
    assert seen[0] == seen[1]
