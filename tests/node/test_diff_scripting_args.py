"""How a run hands KEYS/ARGV to Lua and how redis.call hands its arguments and replies back
(scripting/engine.py): up to MAX_ARGS_ON_STACK items go as call arguments, more as tables;
redis.call's arguments are checked in Python and, when one is not a string, converted on the
Lua side; +OK crosses as a marker. Each path against a real redis-server 7.0, RESP2 and 3."""

from __future__ import annotations

import pytest

from slotgate.node.scripting.engine import MAX_ARGS_ON_STACK
from tests.node.diff import Case, Pair, check_cases


def _eval(body: str, n_keys: int, n_args: int) -> str:
    keys = " ".join(f"k{i}" for i in range(1, n_keys + 1))
    args = " ".join(f"a{i}" for i in range(1, n_args + 1))
    return f'EVAL "{body}" {n_keys} {keys} {args}'.replace("  ", " ").rstrip()


def _fcall(n_keys: int, n_args: int) -> str:
    keys = " ".join(f"k{i}" for i in range(1, n_keys + 1))
    args = " ".join(f"a{i}" for i in range(1, n_args + 1))
    return f"FCALL shape {n_keys} {keys} {args}".replace("  ", " ").rstrip()


SHAPE = "return {#KEYS, #ARGV, KEYS[1], KEYS[#KEYS], ARGV[1], ARGV[#ARGV], type(KEYS), type(ARGV)}"
EDGE = MAX_ARGS_ON_STACK
SIZES = [(0, 0), (1, 0), (0, 1), (2, 1), (EDGE, 0), (0, EDGE), (EDGE // 2, EDGE - EDGE // 2),
         (EDGE + 1, 0), (0, EDGE + 1), (EDGE, 1), (EDGE + 5, EDGE + 5)]
LIB = ("#!lua name=shapes\nredis.register_function('shape', function(KEYS, ARGV) "
       f"{SHAPE} end)")

KEYS_ARGV = Case("KEYS and ARGV of every size", [_eval(SHAPE, k, a) for k, a in SIZES] + [
    _eval("KEYS[#KEYS + 1] = 'x' return {#KEYS, KEYS[#KEYS]}", 3, 0),
    _eval("table.insert(ARGV, 'x') return ARGV", EDGE + 1, 2),
    _eval("return {unpack(KEYS)}", 4, 4),
    _eval("local n = 0 for _ in pairs(KEYS) do n = n + 1 end return n", 5, 3),
])
FUNCTIONS = Case("FCALL's KEYS and ARGV of every size",
                 [_fcall(k, a) for k, a in SIZES], setup=[f"FUNCTION LOAD REPLACE \"{LIB}\""])
CALL_ARGS = Case("redis.call's arguments and replies", [
    "EVAL \"return redis.call('set', 'k', 5)\" 0",
    "EVAL \"return redis.call('set', 'k', -0)\" 0", "GET k",
    "EVAL \"return redis.call('set', 'k', 1e20)\" 0", "GET k",
    "EVAL \"return redis.call('set', 'k', 0.1)\" 0", "GET k",
    "EVAL \"return redis.call('set', 'k', 2^53 + 1)\" 0", "GET k",
    "EVAL \"return redis.call('SET', 'k', 'v')\" 0", "EVAL \"return redis.call('Get', 'k')\" 0",
    "EVAL \"return redis.pcall('set', 'k', 'v')\" 0",
    "EVAL \"local r = redis.call('set', 'k', 'v') return {type(r), r.ok}\" 0",
    "EVAL \"local r = redis.call('set', 'k', 'v') r.ok = 'changed' return r\" 0",
    "EVAL \"local a = redis.call('set', 'k', 'v') local b = redis.call('set', 'k', 'v') "
    "return tostring(rawequal(a, b))\" 0",
    "EVAL \"return redis.call('ping')\" 0", "EVAL \"return redis.call('type', 'k')\" 0",
    "EVAL \"return redis.call('get', 'missing')\" 0",
    "EVAL \"return redis.call('get', 'k', 1)\" 0", "EVAL \"return redis.call(5, 'k')\" 0",
    "EVAL \"return redis.pcall('get', {})\" 0", "EVAL \"return redis.call('multi', 'x')\" 0",
    "EVAL \"return redis.call('multi')\" 0", "EVAL \"return redis.call('command', 'count')\" 0",
    "EVAL \"return redis.call('config')\" 0", "EVAL \"return redis.call('nosuch')\" 0",
    "SET counter 9", "EVAL \"return redis.call('incrby', 'counter', 3)\" 0",
])


@pytest.mark.parametrize("proto", [2, 3])
def test_script_arguments_match_redis(diff_pair: Pair, proto: int) -> None:
    problems = check_cases(diff_pair, [KEYS_ARGV, FUNCTIONS, CALL_ARGS], proto)
    assert not problems, "\n".join(problems)
