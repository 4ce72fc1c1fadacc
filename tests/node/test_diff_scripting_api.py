"""The numbers the ``redis`` API reads, against redis-server 7.0.15: ``redis.setresp``,
``redis.set_repl`` and ``redis.log`` take C ints of Lua numbers (truncated; NaN and values out
of range invalid; numeric strings accepted), and ``redis.log`` writes each level to the log with
Redis' mark as ``loglevel`` allows."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.node.diff import Case, Pair, check_cases
from tests.support import RawClient, node_and_redis


def _ev(script: str) -> str:
    return 'EVAL "' + script + '" 0'


CASES = [
    Case("setresp, set_repl and log arguments", [_ev(s) for s in [
        "redis.setresp(3.9) return redis.call('hgetall', 'h')", "redis.setresp('3') return 1",
        "redis.setresp('3.5') return redis.call('hgetall', 'h')", "redis.setresp('x') return 1",
        "redis.setresp(nil) return 1", "redis.setresp({}) return 1", "redis.setresp(-2.5) return 1",
        "redis.setresp(0/0) return 1", "redis.setresp(2^40+3) return 1", "redis.setresp(1.9)",
        "redis.set_repl(3.7) return 1", "redis.set_repl(-0.5) return 1",
        "redis.set_repl('x') return 1", "redis.set_repl(4) return 1",
        "redis.set_repl(2^32+1) return 1", "redis.set_repl('2') return 1",
        "redis.log(3.5, 'x') return 1", "redis.log(-0.5, 'x') return 1",
        "redis.log(4, 'x') return 1", "redis.log('1', 'x') return 1", "redis.log('a', 'x') return 1",
        "redis.log(' 2 ', 'x') return 1", "redis.log('0x3', 'x') return 1",
        "redis.log(0/0, 'x') return 1", "redis.log(1) return 1", "redis.log(1, {}) return 1",
        "redis.log(1, true) return 1", "redis.log() return 1", "redis.log(-1, 'x') return 1",
    ]], setup=["HSET h a 1"]),
    # XREAD and XREADGROUP may run in a script, but not with BLOCK (checked at the option, by
    # the name as the script spelled it); the script client never blocks
    Case("blocking options from scripts", [*[_ev(s) for s in [
        "return redis.call('xread', 'block', 0, 'streams', 's', '$')",
        "return redis.call('XREADGROUP', 'GROUP', 'g', 'c', 'block', 10, 'streams', 's', '>')",
        "return redis.call('XReaD', 'block', 'x', 'streams', 's', '0')",
        "return redis.call('XREAD', 'count', 1, 'block')",
        "return redis.call('xread', 'streams', 's', 'block', 1)",
        "return redis.pcall('xread', 'block', 1, 'streams', 'nos', '0')",
        "return redis.call('xread', 'count', 5, 'streams', 's', '0')",
        "return redis.call('blpop', 'nol', 0)", "return redis.call('wait', 0, 0)",
    ]], "INFO keyspace", "CLIENT LIST TYPE pubsub"], setup=["XADD s 1-1 a 1", "XGROUP CREATE s g 0"]),
    # the metatables a script can reach are read-only as Redis': changing the globals' or the
    # strings' metatable used to break every later script until SCRIPT FLUSH
    Case("sandbox metatables", [_ev(s) for s in [
        "local m = getmetatable(_G) return {type(m), tostring(m.__index ~= nil), "
        "tostring(m.__newindex ~= nil), tostring(m.__metatable)}",
        "return type(getmetatable(getmetatable(_G)))", "return type(getmetatable('x'))",
        "return getmetatable('x').__index == string", "getmetatable('x').__index = nil",
        "getmetatable(_G).__index = nil", "getmetatable(_G).__newindex = nil",
        "rawset(getmetatable(_G), '__index', nil)", "rawset(getmetatable('x'), '__index', nil)",
        "setmetatable(getmetatable('x'), {})", "setmetatable(getmetatable(_G), {})",
        "return {type(getmetatable(string)), type(getmetatable(cjson)), type(getmetatable(redis)), "
        "type(getmetatable(math)), type(getmetatable(KEYS)), type(getmetatable(cjson.null))}",
        "local t = setmetatable({}, {__index = function() return 7 end}) "
        "return {t.x, type(getmetatable(t))}",
        "for k in pairs(getmetatable(_G)) do return k end", "return next(getmetatable('x'))",
        "return {('abc'):upper(), type(string), type(getmetatable), redis.call('ping')}",
        "ARGV[1] = 1 return ARGV[1]", "KEYS[1] = 'x' return KEYS", "setmetatable(_G, nil)",
        "return ('still'):rep(2)",
    ]]),
]


@pytest.mark.parametrize("proto", [2, 3])
def test_api_arguments_match_redis(diff_pair: Pair, proto: int) -> None:
    problems = check_cases(diff_pair, CASES, proto)
    assert not problems, "\n".join(problems)


LOG_SCRIPT = ("redis.log(redis.LOG_DEBUG, 'mark-debug') redis.log(redis.LOG_VERBOSE, 'mark-verbose') "
              "redis.log(redis.LOG_NOTICE, 'mark-notice', 5, 'b') redis.log(2.7, 'mark-truncated') "
              "redis.log(redis.LOG_WARNING, 'mark-warning') return 1")
_LINE = re.compile(rb"^\d+:\w \d\d \w{3} \d{4} [\d:.]+ (.) (mark-.*)$", re.M)


def _logged(path: Path) -> list[tuple[bytes, bytes]]:
    return [(m.group(1), m.group(2)) for m in _LINE.finditer(path.read_bytes())]


@pytest.mark.parametrize("level", ["debug", "verbose", "notice", "warning"])
def test_log_levels_and_marks_match_redis(tmp_path: Path, level: str) -> None:
    with node_and_redis(tmp_path, ["--loglevel", level]) as procs:
        for p in procs.values():
            with RawClient(p.port) as conn:
                assert conn.call("EVAL", LOG_SCRIPT, "0") == b":1\r\n"
                conn.call("PING")
        ours, real = _logged(procs["ours"].log_path), _logged(procs["real"].log_path)
    assert real  # the warning at least
    assert ours == real


RANDOM_STEPS = [
    ["EVAL", "return math.random(1000)", "0"], ["EVAL", "return math.random()", "0"],
    ["SCRIPT", "FLUSH"], ["EVAL", "return math.random(1000)", "0"],
    ["FUNCTION", "LOAD", "#!lua name=r\nredis.register_function('r', function() "
                         "return math.random(1000) end)"],
    ["FCALL", "r", "0"], ["EVAL", "math.randomseed(5) return math.random(1000)", "0"],
    ["FCALL", "r", "0"], ["SCRIPT", "FLUSH", "ASYNC"], ["EVAL", "return math.random(1000)", "0"],
    ["FUNCTION", "FLUSH"], ["EVAL", "return math.random(1000)", "0"],
    ["EVAL", "return {math.random(2^40), 1}", "0"],
    ["EVAL", "return math.random(-2^31, 2^31-1)", "0"],
    ["EVAL", "return math.random(3.9, 4)", "0"], ["EVAL", "math.randomseed(2^32+9) return math.random(99)", "0"],
    ["EVAL", "math.randomseed(0/0) return math.random(1000)", "0"],
    ["EVAL", "math.randomseed('7') return math.random(1000)", "0"],
    ["EVAL", "return math.random(1, 2, 3)", "0"], ["EVAL", "return math.random('x')", "0"],
]


def test_random_state_matches_redis(tmp_path: Path) -> None:
    """math.random's rand48 is one state per server from Redis' unseeded start, shared by EVAL
    and FCALL and kept across SCRIPT FLUSH: fresh servers give the same numbers."""
    with node_and_redis(tmp_path) as procs:
        replies = {}
        for side, p in procs.items():
            with RawClient(p.port) as conn:
                replies[side] = [conn.call(*step) for step in RANDOM_STEPS]
    assert replies["ours"] == replies["real"]
