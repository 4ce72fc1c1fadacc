"""Client-side caching and scripts, against redis-server 7.0.15: the keys a script reads
(``redis.call`` in EVAL, EVALSHA, FCALL and their _RO forms) are tracked for the calling
client with its modes (OPTIN with CLIENT CACHING yes before the script, OPTOUT, BCAST,
NOLOOP, REDIRECT), and the keys a script writes invalidate as any write does.

The scenarios run with the named connections of tests/node/test_diff_tracking.py."""

from __future__ import annotations

import hashlib

import pytest

from tests.node.diff import Pair
from tests.node.test_diff_tracking import check_scenario

GET = "\"return redis.call('get', KEYS[1])\""
GET_U = "\"return redis.call('get', 'u')\""
SET = "\"return redis.call('set', KEYS[1], 'x')\""
LIB = ("\"#!lua name=tlib\n"
       "redis.register_function{function_name='fget', flags={'no-writes'}, "
       "callback=function(keys) return redis.call('get', keys[1]) end} "
       "redis.register_function('fset', function(keys) return redis.call('set', keys[1], 'y') end)\"")
SHA = hashlib.sha1(GET[1:-1].encode()).hexdigest()
SETUP = ["w FUNCTION FLUSH", f"w FUNCTION LOAD {LIB}", f"w SCRIPT LOAD {GET}",
         "w MSET k 0 u 0 ro 0 fk 0 s 0 d 0"]
WRITE_ALL = "w MSET k 1 u 1 ro 1 fk 1 s 1 d 1 a 1 b 1 c 1 e 1 f 1 g 1"

SCENARIOS = {
    "default": ["t CLIENT TRACKING ON", f"t EVAL {GET} 1 k", f"t EVAL {GET_U} 0",
                "t EVAL_RO \"return 1\" 1 ro", f"t EVALSHA_RO {SHA} 1 s",
                "t FCALL_RO fget 1 fk", "t EVAL \"return redis.call('exists', 'd')\" 0",
                WRITE_ALL, "t PING", "t READ"],
    "evalsha and fcall": ["t CLIENT TRACKING ON", f"t EVALSHA {SHA} 1 k", "t FCALL fget 1 fk", WRITE_ALL, "t PING"],
    "optin": ["i CLIENT TRACKING ON OPTIN", f"i EVAL {GET} 1 a", "i CLIENT CACHING yes",
              f"i EVAL {GET} 1 b", f"i EVAL {GET} 1 c", "i CLIENT CACHING yes",
              "i FCALL_RO fget 1 fk", "i CLIENT CACHING yes", "i MULTI",
              f"i EVAL {GET} 1 d", "i EXEC", WRITE_ALL, "i PING", "i READ"],
    "optout": ["o CLIENT TRACKING ON OPTOUT", f"o EVAL {GET} 1 a", "o CLIENT CACHING no",
               f"o EVAL {GET} 1 b", f"o EVAL_RO {GET} 1 c", WRITE_ALL, "o PING", "o READ"],
    "script writes": ["t CLIENT TRACKING ON", "t GET a", "t GET b", "t GET f",
                      f"w EVAL {SET} 1 a", "w FCALL fset 1 b", "t PING",
                      f"t EVAL {SET} 1 f", "t PING", "t READ"],
    "own script write": ["t CLIENT TRACKING ON", f"t EVAL {GET} 1 a",
                         "t EVAL \"redis.call('get', 'g') return redis.call('set', 'g', 1)\" 0",
                         f"t EVAL {SET} 1 a", "t PING", "t READ"],
    "noloop": ["l CLIENT TRACKING ON NOLOOP", f"l EVAL {GET} 1 a", "l GET b",
               f"l EVAL {SET} 1 a", "l FCALL fset 1 b", "w SET a 2", "l PING", "l READ"],
    "bcast": ["r2 SUBSCRIBE __redis__:invalidate",
              "b CLIENT TRACKING ON BCAST PREFIX a PREFIX b",
              "n CLIENT TRACKING ON BCAST NOLOOP",
              "c CLIENT TRACKING ON BCAST PREFIX f REDIRECT {r2}",
              f"b EVAL {GET} 1 a", f"w EVAL {SET} 1 a1", f"n EVAL {SET} 1 b1",
              "n FCALL fset 1 f1", f"b EVAL {SET} 1 b2", "b PING", "n PING", "r2 READ",
              "b READ"],
    "redirect": ["r2 SUBSCRIBE __redis__:invalidate", "u CLIENT TRACKING ON REDIRECT {r2}",
                 f"u EVAL {GET} 1 a", "u FCALL_RO fget 1 b", f"w EVAL {SET} 1 a",
                 "w SET b 2", "u PING", "r2 READ"],
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
@pytest.mark.parametrize("proto", [2, 3])
def test_script_reads_are_tracked(diff_pair: Pair, name: str, proto: int) -> None:
    check_scenario(diff_pair, [*SETUP, *SCENARIOS[name]], proto)
