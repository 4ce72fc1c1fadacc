"""String commands: identical raw replies to redis-server 7.0, RESP2 and RESP3."""

from __future__ import annotations

import pytest

from tests.node.diff import Case, Pair, check_cases

CASES = [
    Case("get/set basics", ["GET nokey", "SET k v", "GET k", "SET k v2 GET", "GET k",
                            "SET k", "GET", "GET a b", "SET k v XX", "SET n v XX", "GET n",
                            "SET k v NX", "SET n2 v NX", "SET k v NX XX", "SET k v NX GET",
                            "SET k2 v NX GET", "SET k v XX GET", "SET k v foo"]),
    Case("set expiry options", ["SET k v EX 100", ("TTL k", "ttl"), "SET k v PX 100000",
                                ("PTTL k", "ttl"), "SET k v EX 0", "SET k v EX -1",
                                "SET k v EX abc", "SET k v PX 0", "SET k v EXAT 0",
                                "SET k v EX 10 PX 10", "SET k v EX 10 KEEPTTL",
                                "SET k v KEEPTTL EX 10", "SET k v EX", "SET k v EX 10 EX 20",
                                ("TTL k", "ttl"), "SET k v2 KEEPTTL", ("TTL k", "ttl"),
                                "SET k v3", "TTL k", "SET k v EXAT 99999999999",
                                "EXPIRETIME k", "SET k v PXAT 99999999999000", "PEXPIRETIME k",
                                "SET k v EX 9223372036854775807",
                                "SET k v PX 9223372036854775807",
                                "SET k v EX 9223372036854775", "SET k v EXAT 1", "GET k",
                                "EXISTS k"]),
    Case("wrongtype", ["SET s 1", "LPUSH l a", "GET l", "SET l v GET", "APPEND l x",
                       "INCR l", "STRLEN l", "GETRANGE l 0 1", "SETRANGE l 0 x", "GETSET l x",
                       "GETDEL l", "GETEX l", "MGET s l nokey", "SET l v", "GET l"]),
    Case("setnx setex psetex", ["SETNX k v", "SETNX k w", "GET k", "SETEX k 100 v",
                                ("TTL k", "ttl"), "SETEX k 0 v", "SETEX k -5 v", "SETEX k x v",
                                "PSETEX k 100000 v", ("PTTL k", "ttl"), "PSETEX k 0 v",
                                "SETEX k 10", "SETEX k 9223372036854775807 v"]),
    Case("mget mset msetnx", ["MSET a 1 b 2 c 3", "MGET a b c d", "MSET a", "MSET a 1 b",
                              "MSETNX a 1 x 2", "MSETNX x 1 y 2", "MGET x y", "MSETNX x",
                              "MSET a 1 a 2", "GET a"]),
    Case("getset getdel getex", ["GETSET k v", "GETSET k w", "SET k v EX 100", "GETSET k x",
                                 "TTL k", "GETDEL k", "GETDEL k", "SET k v", "GETEX k",
                                 "GETEX k EX 100", ("TTL k", "ttl"), "GETEX k PERSIST",
                                 "TTL k", "GETEX k PX 100000", ("PTTL k", "ttl"),
                                 "GETEX k EXAT 99999999999", "EXPIRETIME k",
                                 "GETEX k PXAT 99999999999000", "PEXPIRETIME k",
                                 "GETEX k EX 0", "GETEX k EX 10 PX 10", "GETEX k PERSIST EX 1",
                                 "GETEX k foo", "GETEX nokey EX 10", "GETEX k KEEPTTL",
                                 "GETEX k NX", "GETEX k EX"]),
    Case("append strlen", ["APPEND k abc", "APPEND k def", "GET k", "STRLEN k", "STRLEN no",
                           "APPEND k ''", "SET n 123", "APPEND n 4", "GET n"]),
    Case("getrange", ["SET k 'Hello World'", "GETRANGE k 0 4", "GETRANGE k -5 -1",
                      "GETRANGE k 5 2", "GETRANGE k -1 -5", "GETRANGE k 0 100",
                      "GETRANGE k 100 200", "GETRANGE k -100 -50", "GETRANGE k -100 3",
                      "GETRANGE k a b", "GETRANGE no 0 -1", "SUBSTR k 1 3", "SET e ''",
                      "GETRANGE e 0 -1", "GETRANGE k 0 -1", "GETRANGE k 9223372036854775807 1",
                      "GETRANGE k -9223372036854775808 1"]),
    Case("setrange", ["SETRANGE k 5 abc", "GET k", "SETRANGE k 0 XY", "GET k",
                      "SETRANGE k -1 x", "SETRANGE k a x", "SETRANGE n 0 ''", "EXISTS n",
                      "SETRANGE k 100 ''", "STRLEN k", "SETRANGE k 536870911 x",
                      "SETRANGE k 536870912 x", "SET i 12", "SETRANGE i 1 5", "GET i"]),
    Case("incr family", ["INCR k", "INCRBY k 10", "DECR k", "DECRBY k 5", "GET k",
                         "INCRBY k abc", "INCRBY k 1.5", "SET k 9223372036854775807", "INCR k",
                         "SET k -9223372036854775808", "DECR k", "DECRBY k 1",
                         "DECRBY k -9223372036854775808", "SET k ' 1'", "INCR k", "SET k 01",
                         "INCR k", "SET k +1", "INCR k", "SET k 1.0", "INCR k", "SET k abc",
                         "INCR k", "SET k -0", "INCR k", "SET k '1 '", "INCR k",
                         "INCRBY k 99999999999999999999", "SET t 5 EX 100", "INCR t",
                         ("TTL t", "ttl"), "SET k 10", "INCRBY k -9223372036854775808",
                         "DECRBY k 9223372036854775807"]),
    Case("incrbyfloat", ["INCRBYFLOAT k 1.5", "INCRBYFLOAT k 0.1", "INCRBYFLOAT k -1.6",
                         "GET k", "SET k 10.5", "INCRBYFLOAT k 0.1", "INCRBYFLOAT k abc",
                         "INCRBYFLOAT k inf", "INCRBYFLOAT k -inf", "INCRBYFLOAT k nan",
                         "SET k 3.0e3", "INCRBYFLOAT k 200", "SET k abc", "INCRBYFLOAT k 1",
                         "SET k 5", "INCRBYFLOAT k 5.0e3", "INCRBYFLOAT k 1e-17",
                         "INCRBYFLOAT k ' 1'", "INCRBYFLOAT k ''", "SET k 1",
                         "INCRBYFLOAT k 0.333333333333333333333", "SET k 0",
                         "INCRBYFLOAT k 1.23456789012345678901234567890",
                         "INCRBYFLOAT k 1e308", "SET t 1 EX 100", "INCRBYFLOAT t 1",
                         ("TTL t", "ttl")]),
    Case("object encoding of strings", ["SET a 123", "OBJECT ENCODING a", "SET b abc",
                                        "OBJECT ENCODING b", "SET c -9223372036854775808",
                                        "OBJECT ENCODING c",
                                        "SET d 0123", "OBJECT ENCODING d",
                                        "SET e 12345678901234567890123456789012345678901234",
                                        "OBJECT ENCODING e",
                                        "SET f 123456789012345678901234567890123456789012345",
                                        "OBJECT ENCODING f", "OBJECT ENCODING nokey",
                                        "INCR g", "OBJECT ENCODING g"]),
]


@pytest.mark.parametrize("proto", [2, 3])
def test_strings_match_redis(diff_pair: Pair, proto: int) -> None:
    problems = check_cases(diff_pair, CASES, proto)
    assert not problems, "\n".join(problems)


LCS_CASES = [
    Case("lcs", ["MSET k1 ohmytext k2 mynewtext", "LCS k1 k2", "LCS k1 k2 LEN", "LCS k1 k2 IDX",
                 "LCS k1 k2 IDX MINMATCHLEN 4", "LCS k1 k2 IDX MINMATCHLEN 4 WITHMATCHLEN",
                 "LCS k1 k2 IDX WITHMATCHLEN", "LCS k1 k2 IDX LEN", "LCS k1 k2 FOO",
                 "LCS k1 k2 MINMATCHLEN", "LCS k1 k2 IDX MINMATCHLEN x", "LCS k1 nokey",
                 "LCS nokey nokey2 IDX", "LPUSH l a", "LCS k1 l", "LCS l nokey FOO",
                 "MSET a abcabcabc b cbacbacba", "LCS a b IDX WITHMATCHLEN",
                 "LCS a b IDX MINMATCHLEN -3", "LCS b a"]),
]


@pytest.mark.parametrize("proto", [2, 3])
def test_lcs_matches_redis(diff_pair: Pair, proto: int) -> None:
    problems = check_cases(diff_pair, LCS_CASES, proto)
    assert not problems, "\n".join(problems)
