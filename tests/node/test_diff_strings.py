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
                      "SETRANGE k 536870912 x", "SET i 12", "SETRANGE i 1 5", "GET i",
                      "SET j 12", "SETRANGE j 1 2", "OBJECT ENCODING j", "GET j",
                      "SET t hello EX 100", "SETRANGE t 1 ell", "TTL t", "SETRANGE t 3 lo!",
                      "GET t", "SETRANGE t 8 z", "GET t"]),
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
    # string2ld (strtold) rounds to a long double: hex text, its 64-bit significand, the
    # range of 80-bit long doubles (beyond a double's), overflow and underflow to 0 refused
    Case("long double text", [
        "DEL f", "INCRBYFLOAT f 0x10", "HINCRBYFLOAT h f0 0x10",
        "DEL f", "INCRBYFLOAT f 1e400", "HINCRBYFLOAT h f1 1e400",
        "DEL f", "INCRBYFLOAT f 0x1.8p3", "HINCRBYFLOAT h f2 0x1.8p3",
        "DEL f", "INCRBYFLOAT f 0x1p1030", "HINCRBYFLOAT h f3 0x1p1030",
        "DEL f", "INCRBYFLOAT f 0x1p99999", "HINCRBYFLOAT h f4 0x1p99999",
        "DEL f", "INCRBYFLOAT f 0xABCDEF0123456789ABCD", "HINCRBYFLOAT h f5 0xABCDEF0123456789ABCD",
        "DEL f", "INCRBYFLOAT f -0x.8", "HINCRBYFLOAT h f6 -0x.8",
        "DEL f", "INCRBYFLOAT f 0x", "HINCRBYFLOAT h f7 0x",
        "DEL f", "INCRBYFLOAT f 0x1p-20000", "HINCRBYFLOAT h f8 0x1p-20000",
        "DEL f", "INCRBYFLOAT f 0X1P4", "HINCRBYFLOAT h f9 0X1P4",
        "DEL f", "INCRBYFLOAT f 1e-5000", "HINCRBYFLOAT h f10 1e-5000",
        "DEL f", "INCRBYFLOAT f 1e-4940", "HINCRBYFLOAT h f11 1e-4940",
        "DEL f", "INCRBYFLOAT f 1e4932", "HINCRBYFLOAT h f12 1e4932",
        "DEL f", "INCRBYFLOAT f 1e4933", "HINCRBYFLOAT h f13 1e4933",
        "DEL f", "INCRBYFLOAT f 0x1p16383", "HINCRBYFLOAT h f14 0x1p16383",
        "DEL f", "INCRBYFLOAT f 0x1p16384", "HINCRBYFLOAT h f15 0x1p16384",
        "DEL f", "INCRBYFLOAT f 0x1p-16445", "HINCRBYFLOAT h f16 0x1p-16445",
        "DEL f", "INCRBYFLOAT f 0x1p-16446", "HINCRBYFLOAT h f17 0x1p-16446",
        "DEL f", "INCRBYFLOAT f 0x1.g", "HINCRBYFLOAT h f18 0x1.g",
        "DEL f", "INCRBYFLOAT f 0x1p", "HINCRBYFLOAT h f19 0x1p",
        "DEL f", "INCRBYFLOAT f 0x.p1", "HINCRBYFLOAT h f20 0x.p1",
        "DEL f", "INCRBYFLOAT f +Infinity", "HINCRBYFLOAT h f21 +Infinity",
        "DEL f", "INCRBYFLOAT f 0x1P+2", "HINCRBYFLOAT h f22 0x1P+2",
        "DEL f", "INCRBYFLOAT f -0", "HINCRBYFLOAT h f23 -0",
        "MSET k 9223372036854775807", "SETRANGE k 0 0x10", "INCRBYFLOAT k 0.1",
        "SET k 1e4932", "INCRBYFLOAT k 1e4932", "HSET h big 1e4932", "HINCRBYFLOAT h big 1e4932",
    ]),
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
