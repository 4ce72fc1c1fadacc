"""FUNCTION LOAD/DELETE/FLUSH/LIST/STATS/KILL/HELP, FCALL, FCALL_RO and
redis.register_function: identical raw replies to redis-server 7.0, RESP2 and RESP3.

Libraries are listed in hash-table order by Redis: lists of several libraries are compared
sorted."""

from __future__ import annotations

import pytest

from tests.node.diff import Case, Pair, check_cases
from tests.support import RawClient


def _load(name: str, body: str, replace: bool = False) -> str:
    return f'FUNCTION LOAD {"REPLACE " if replace else ""}"#!lua name={name}\n{body}"'


LIB = ("redis.register_function('g', function() error('boom') end) "
       "redis.register_function('h', function(k, a) return redis.call('get', k[1]) end) "
       "redis.register_function{function_name='ro', callback=function(k, a) "
       "return redis.call('set', 'x', '1') end, flags={'no-writes'}} "
       "redis.register_function{function_name='nc', callback=function() return 1 end, "
       "flags={'no-cluster', 'allow-oom', 'allow-stale', 'allow-cross-slot-keys'}, "
       "description='d'} "
       "redis.register_function('w', function(k, a) redis.call('set', k[1], a[1]) "
       "redis.setresp(3) return {redis.call('hgetall', 'hh'), type(KEYS)} end) "
       "redis.register_function('glob', function() local t = {} for k in pairs(_G) do "
       "t[#t+1] = k end table.sort(t) return t end) "
       "redis.register_function('rk', function() local t = {} for k in pairs(redis) do "
       "t[#t+1] = k end table.sort(t) return t end)")

LOAD = Case("FUNCTION LOAD and register_function", [
    "FUNCTION FLUSH",
    _load("mylib", "redis.register_function('f1', function(keys, args) return 1 end)"),
    _load("mylib", "redis.register_function('f1', function(keys, args) return 1 end)"),
    _load("mylib", "redis.register_function('f1', function(keys, args) "
                   "return {keys[1], args[1], #keys, #args} end)", replace=True),
    _load("other", "redis.register_function('f1', function() return 2 end)"),
    _load("l2", "return 1"), _load("l2", "local x = 1"), _load("l2", "redis.call('ping')"),
    _load("l2", "redis.register_function('g', function() end) "
                "redis.register_function('g', function() end)"),
    _load("l2", "redis.register_function('g')"), _load("l2", "redis.register_function()"),
    _load("l2", "redis.register_function('g', 1)"),
    _load("q1", "redis.register_function('bad name', function() end)"),
    _load("q2", "redis.register_function{function_name='g', callback=function() end, "
                "flags={'bad'}}"),
    _load("q3", "redis.register_function{function_name='g', callback=function() end, foo=1}"),
    _load("q4", "redis.register_function{function_name='g'}"),
    _load("q5", "redis.register_function{callback=function() end}"),
    _load("q7", "return x"), _load("q8", "x = 1"), _load("q9", "syntax error"),
    _load("q10", "redis.register_function{function_name='g', callback=function() end, "
                 "flags='no-writes'}"),
    _load("q11", "redis.register_function{function_name='g', callback=function() end, "
                 "flags={1}}"),
    _load("q12", "redis.register_function{function_name='g', callback=function() end, [1]=2}"),
    _load("q13", "redis.register_function({}, function() end)"),
    _load("q14", "redis.register_function('', function() end)"),
    _load("q15", "redis.register_function('a', function() end, 3)"),
    _load("q18", "error('at load')"), _load("q19", "local v = string"),
    _load("q20", "local v = redis.setresp"),
    'FUNCTION LOAD "#!lua name=bad-name!\nredis.register_function(\'g\', function() end)"',
    'FUNCTION LOAD "#!lua name=l2 name=l3\nredis.register_function(\'g\', function() end)"',
    'FUNCTION LOAD "#!lua name=l2 foo=1\nredis.register_function(\'g\', function() end)"',
    'FUNCTION LOAD "#!lua\nredis.register_function(\'g\', function() end)"',
    'FUNCTION LOAD "#!pyth name=l2\nredis.register_function(\'g\', function() end)"',
    'FUNCTION LOAD "return 1"', 'FUNCTION LOAD "#!lua name=x"', "FUNCTION LOAD",
    "FUNCTION LOAD REPLACE", "FUNCTION LOAD x y z",
    _load("q16", "redis.log(redis.LOG_WARNING, 'loading') "
                 "redis.register_function('lf', function() return redis.REDIS_VERSION end)"),
    "FCALL lf 0", ("FUNCTION LIST", "libraries"), "FUNCTION STATS",
])

CALL = Case("FCALL and FCALL_RO", [
    "FUNCTION FLUSH", _load("lib", LIB), "HSET hh a 1",
    "FCALL g 0", "FCALL h 1 nokey", "FCALL H 1 nokey", "FCALL ro 0", "FCALL_RO ro 0",
    "FCALL_RO h 1 k", "FCALL_RO w 1 k v", "FCALL nc 0", "FCALL w 1 k v", "GET k",
    "FCALL glob 0", "FCALL rk 0", "FCALL nosuch 0", "FCALL h -1", "FCALL h 5 a",
    "FCALL h x", "FCALL", "FCALL h",
    "EVAL \"return redis.call('fcall','g',0)\" 0",
    _load("one", "redis.register_function{function_name='only', callback=function() end, "
                 "flags={'allow-stale', 'no-writes'}, description='the only one'}"),
    "FUNCTION LIST LIBRARYNAME one", "FUNCTION LIST WITHCODE LIBRARYNAME o*",
    "FUNCTION DELETE one",
    ("FUNCTION LIST LIBRARYNAME li*", "libraries"),
    "FUNCTION LIST LIBRARYNAME nomatch", "FUNCTION LIST LIBRARYNAME",
    "FUNCTION LIST WITHCODE WITHCODE", "FUNCTION LIST LIBRARYNAME a LIBRARYNAME b",
    "FUNCTION LIST foo", "FUNCTION STATS", "FUNCTION STATS x", "FUNCTION KILL",
    "FUNCTION HELP", "FUNCTION DELETE nolib", "FUNCTION DELETE", "FUNCTION DELETE lib",
    "FUNCTION DELETE lib", "FCALL g 0", "FUNCTION FLUSH bad", "FUNCTION FLUSH ASYNC",
    "FUNCTION FLUSH SYNC", "FUNCTION FLUSH", "FUNCTION STATS",
    "MULTI", "FCALL nosuch 0", "EXEC",
])


def _library(name: str, functions: str) -> str:
    body = " ".join(f"redis.register_function{{function_name='{f}', callback=function() end, "
                    f"flags={{'no-writes'}}, description='{f} of {name}'}}"
                    for f in functions.split())
    return _load(name, body)


# Redis lists libraries, and the functions of a library, in the order of dicts seeded per
# process: the same libraries list in another order after a restart. Compared as sets.
LIST_ORDER = Case("FUNCTION LIST of several libraries", [
    "FUNCTION FLUSH", _library("zeta", "z1 z2 z3 z4 z5"), _library("alpha", "a9 a1 a5"),
    _library("mid", "m"), _library("alpine", "p2 p1"),
    ("FUNCTION LIST", "libraries"), ("FUNCTION LIST WITHCODE", "libraries"),
    ("FUNCTION LIST LIBRARYNAME al*", "libraries"), ("FUNCTION LIST LIBRARYNAME *a", "libraries"),
    "FUNCTION DELETE alpha", ("FUNCTION LIST", "libraries"), "FUNCTION STATS", "FUNCTION FLUSH",
])

CASES = [LOAD, CALL, LIST_ORDER]


@pytest.mark.parametrize("proto", [2, 3])
def test_functions_match_redis(diff_pair: Pair, proto: int) -> None:
    problems = check_cases(diff_pair, CASES, proto)
    assert not problems, "\n".join(problems)


# The script cache and the libraries as Redis counts their memory (INFO memory, MEMORY STATS):
# keys, bodies (embstr or raw), entries; libraries' code and names, functions' names and
# descriptions. At most 4 scripts and 4 functions: past that Redis' dicts rehash step by step,
# so its figures depend on its hash seed for a while.
MEMORY_STEPS: list[tuple[str, ...]] = [
    ("SCRIPT", "FLUSH"), ("FUNCTION", "FLUSH"), ("SCRIPT", "LOAD", "return 1"),
    ("EVAL", "return '" + "x" * 100 + "'", "0"), ("SCRIPT", "LOAD", "return '" + "y" * 400 + "'"),
    ("FUNCTION", "LOAD", "#!lua name=alpha\nredis.register_function('one', function() end)"),
    ("FUNCTION", "LOAD", "#!lua name=b" + "e" * 40 + "\nredis.register_function{function_name="
     "'two_" + "t" * 35 + "', callback=function() end, description='" + "d" * 300 + "'}\n"
     "redis.register_function{function_name='three', callback=function() end, description=''}"
     "\n-- " + "c" * 5000),
    ("FUNCTION", "DELETE", "alpha"),
    ("FUNCTION", "LOAD", "REPLACE", "#!lua name=alpha\nredis.register_function('u', function() end)"),
    ("SCRIPT", "FLUSH"), ("FUNCTION", "FLUSH"),
]
MEMORY_FIELDS = [b"used_memory_scripts_eval", b"number_of_cached_scripts", b"number_of_functions",
                 b"number_of_libraries", b"used_memory_functions", b"used_memory_scripts",
                 b"used_memory_scripts_human"]


def _script_memory(c: RawClient) -> list[bytes]:
    info = dict(line.split(b":", 1) for line in c.call("INFO", "memory").split(b"\r\n")
                if b":" in line)
    stats = c.call("MEMORY", "STATS")
    caches = [stats.split(name + b"\r\n")[1].split(b"\r\n")[0]
              for name in (b"lua.caches", b"functions.caches")]
    return [info[f] for f in MEMORY_FIELDS] + caches


def test_script_and_function_memory_match_redis(diff_pair: Pair) -> None:
    with RawClient(diff_pair.ours_port) as ours, RawClient(diff_pair.real_port) as real:
        for step in MEMORY_STEPS:
            ours.call(*step)
            real.call(*step)
            assert _script_memory(ours) == _script_memory(real), step
