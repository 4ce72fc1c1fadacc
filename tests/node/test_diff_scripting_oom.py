"""Scripts and maxmemory, against redis-server 7.0.15 (noeviction, used memory over the limit):
a script with a shebang is refused before it runs (``-OOM``) unless it declares allow-oom or
no-writes, as is an FCALL of a function without those flags; a script without a shebang runs
and its first deny-oom write fails inside it (Redis' error with the script's line), unless
something was written before; allow-oom scripts write."""

from __future__ import annotations

import pytest

from tests.node.diff import Case, Pair, check_cases

LIB = ("#!lua name=lib\n"
       "redis.register_function('fw', function(k) return redis.call('set', k[1], 'v') end)\n"
       "redis.register_function{function_name='fro', flags={'no-writes'}, "
       "callback=function(k) return redis.call('get', k[1]) end}\n"
       "redis.register_function{function_name='foom', flags={'allow-oom'}, "
       "callback=function(k) return redis.call('set', k[1], 'o') end}\n"
       "redis.register_function{function_name='fstale', flags={'allow-stale'}, "
       "callback=function(k) return 1 end}\n"
       "redis.register_function{function_name='fnw', flags={'no-writes'}, "
       "callback=function(k) return redis.call('set', k[1], 'o') end}")
SET_BY_KEY = "return redis.call('set', KEYS[1], 'x')"


def _q(s: str) -> str:
    """``s`` as one double-quoted word (newlines kept)."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _ev(script: str, *rest: str, cmd: str = "EVAL") -> str:
    return " ".join([cmd, _q(script), *(rest or ("0",))])


OOM_ON = ["CONFIG SET maxmemory-policy noeviction", "CONFIG SET maxmemory 1"]
OOM_OFF = "CONFIG SET maxmemory 0"
SETUP = ["FUNCTION FLUSH", f"FUNCTION LOAD {_q(LIB)}", "SET k 1", "SET big " + "x" * 2000,
         f"SCRIPT LOAD {_q(SET_BY_KEY)}", f"SCRIPT LOAD {_q('#!lua' + chr(10) + SET_BY_KEY)}",
         f"SCRIPT LOAD {_q('#!lua flags=no-writes' + chr(10) + 'return 1')}"]


def _sha(body: str) -> str:
    import hashlib
    return hashlib.sha1(body.encode()).hexdigest()


CASES = [
    Case("legacy scripts: checked at their first write", [
        *OOM_ON, "SET a 1", "GET k", _ev("return 1"), _ev("return redis.call('get', 'k')"),
        _ev("return redis.call('set', 'k', 2)"), _ev("return redis.pcall('set', 'k', 2)"),
        _ev("local r = redis.pcall('set', 'k', 2) return {type(r), r['err']}"),
        _ev("return redis.call('incr', 'zz')"),
        _ev("redis.call('get', 'k')\nreturn redis.call('lpush', 'L', 1)"),
        _ev("return redis.call('expire', 'k', 100)"), _ev("return redis.call('publish', 'c', 'm')"),
        _ev("redis.call('del', 'nokey') return redis.call('set', 'k', 9)"),
        _ev("redis.call('expire', 'k', 50) return redis.call('set', 'k', 10)"),
        "GET k", f"EVALSHA {_sha(SET_BY_KEY)} 1 k", _ev("return redis.call('set','k',5)", cmd="EVAL_RO"),
        _ev("return 1", cmd="EVAL_RO"), "GET k", OOM_OFF,
    ], setup=SETUP),
    Case("scripts with flags: refused before they run", [
        *OOM_ON, _ev("#!lua\nreturn 1"), _ev("#!lua\nreturn redis.call('get', 'k')"),
        _ev("#!lua flags=no-writes\nreturn redis.call('get', 'k')"),
        _ev("#!lua flags=no-writes\nreturn redis.call('set', 'k', 3)"),
        _ev("#!lua flags=allow-oom\nreturn redis.call('set', 'k', 4)"),
        _ev("#!lua flags=allow-oom\nreturn redis.call('lpush', 'L2', 1, 2)"),
        _ev("#!lua flags=allow-oom,no-writes\nreturn redis.call('get', 'k')"),
        _ev("#!lua flags=allow-stale\nreturn 1"), _ev("#!lua flags=allow-cross-slot-keys\nreturn 1"),
        _ev("#!lua\nreturn 1", cmd="EVAL_RO"), _ev("#!lua flags=no-writes\nreturn 1", cmd="EVAL_RO"),
        _ev("#!lua flags=bad\nreturn 1"), _ev("#!lua"),
        f"EVALSHA {_sha('#!lua' + chr(10) + SET_BY_KEY)} 1 k",
        f"EVALSHA_RO {_sha('#!lua' + chr(10) + SET_BY_KEY)} 1 k",
        f"EVALSHA {_sha('#!lua flags=no-writes' + chr(10) + 'return 1')} 0",
        "EVALSHA 0123456789012345678901234567890123456789 0", "EVALSHA abc 0",
        "GET k", "LRANGE L2 0 -1", OOM_OFF,
    ], setup=SETUP),
    Case("functions: by their flags", [
        *OOM_ON, "FCALL fw 1 k", "FCALL fro 1 k", "FCALL foom 1 k", "FCALL fnw 1 k",
        "FCALL fstale 0", "FCALL_RO fw 1 k", "FCALL_RO fro 1 k", "FCALL nosuch 0", "FCALL FW 1 k",
        "GET k", OOM_OFF,
    ], setup=SETUP),
    Case("scripts in MULTI", [
        *OOM_ON, "MULTI", _ev("return 1"), "EXEC", "MULTI", _ev("#!lua flags=no-writes\nreturn 1"),
        "EXEC", OOM_OFF, "MULTI", _ev("return redis.call('set', 'k', 7)"),
        _ev("#!lua\nreturn 1"), "CONFIG SET maxmemory 1", _ev("return redis.call('set', 'k', 8)"),
        _ev("#!lua flags=allow-oom\nreturn redis.call('set', 'k', 9)"), "EXEC", "GET k", OOM_OFF,
    ], setup=SETUP),
]


@pytest.mark.parametrize("proto", [2, 3])
def test_scripts_under_maxmemory_match_redis(diff_pair: Pair, proto: int) -> None:
    problems = check_cases(diff_pair, CASES, proto)
    assert not problems, "\n".join(problems)
