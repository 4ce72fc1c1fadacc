"""Bitmap commands: identical raw replies to redis-server 7.0."""

from __future__ import annotations

import pytest

from tests.node.diff import Case, Pair, check_cases

CASES = [
    Case("setbit getbit", ["SETBIT b 7 1", "SETBIT b 7 0", "SETBIT b 100 1", "GET b", "GETBIT b 100",
                           "GETBIT b 1000", "GETBIT nokey 0", "SETBIT b -1 1", "SETBIT b x 1",
                           "SETBIT b 4294967295 1", "SETBIT b 4294967296 1", "SETBIT b 0 2",
                           "SETBIT b 0 -1", "SETBIT b 0 x", "GETBIT b -1", "LPUSH l a",
                           "SETBIT l 0 1", "GETBIT l 0", "STRLEN b", "OBJECT ENCODING b"]),
    Case("setbit to the value it has, and growing", [
        "SET b ab", "SETBIT b 1 1", "SETBIT b 1 1", "SETBIT b 0 0", "GET b", "SETBIT b 6 0",
        "GET b", "SET i 12", "SETBIT i 2 1", "OBJECT ENCODING i", "GET i", "SETBIT e 0 0",
        "GET e", "SETBIT e 23 1", "GET e", "SET t x EX 100", "SETBIT t 0 0", "TTL t"]),
    Case("bitcount", ["SET s foobar", "BITCOUNT s", "BITCOUNT s 0 0", "BITCOUNT s 1 1",
                      "BITCOUNT s 1 -2", "BITCOUNT s -1 -2", "BITCOUNT s 5 30 BIT",
                      "BITCOUNT s 0 -1 BIT", "BITCOUNT s -9 -1 BIT", "BITCOUNT s 3 1 BIT",
                      "BITCOUNT s 0", "BITCOUNT s 0 1 FOO", "BITCOUNT s a b", "BITCOUNT nokey",
                      "BITCOUNT nokey 0", "BITCOUNT s 100 200", "BITCOUNT s -100 -50",
                      "BITCOUNT s 0 1 BYTE"]),
    Case("bitpos", ["SET s '\\xff\\xf0\\x00'", "BITPOS s 0", "BITPOS s 1", "BITPOS s 0 1",
                    "BITPOS s 1 2", "BITPOS s 0 2 -1", "BITPOS s 1 0 -1 BIT", "BITPOS s 0 7 15 BIT",
                    "BITPOS s 1 12 15 BIT", "BITPOS s 0 0 11 BIT", "SET f '\\xff\\xff'",
                    "BITPOS f 0", "BITPOS f 0 0", "BITPOS f 0 0 -1", "BITPOS f 0 0 15 BIT",
                    "BITPOS f 0 3 BIT", "BITPOS nokey 0", "BITPOS nokey 1", "BITPOS s 2",
                    "BITPOS s x", "BITPOS s 1 0 1 FOO", "SET e ''", "BITPOS e 0", "BITPOS e 1",
                    "BITPOS s 1 5 2", "BITPOS s 0 -1 -2"]),
    Case("bitop", ["SET a '\\x0f\\xf0'", "SET b '\\xff'", "BITOP AND d a b", "GET d",
                   "BITOP OR d a b", "GET d", "BITOP XOR d a b nokey", "GET d", "BITOP NOT d a",
                   "GET d", "BITOP NOT d a b", "BITOP FOO d a", "BITOP AND d nokey", "EXISTS d",
                   "LPUSH l x", "BITOP AND d a l", "SET e ''", "BITOP OR d e", "EXISTS d",
                   "BITOP AND d a", "OBJECT ENCODING d"]),
    Case("bitfield", ["BITFIELD bf SET u8 0 255", "BITFIELD bf GET u8 0", "BITFIELD bf GET i8 0",
                      "BITFIELD bf INCRBY u8 0 1", "BITFIELD bf OVERFLOW SAT INCRBY u8 0 300",
                      "BITFIELD bf OVERFLOW FAIL INCRBY u8 0 1", "BITFIELD bf OVERFLOW WRAP INCRBY i8 8 200",
                      "BITFIELD bf SET i16 #1 -300 GET i16 #1", "BITFIELD bf GET u63 0",
                      "BITFIELD bf GET i64 0", "BITFIELD bf GET u64 0", "BITFIELD bf GET i65 0",
                      "BITFIELD bf GET x8 0", "BITFIELD bf GET u0 0", "BITFIELD bf GET u8 -1",
                      "BITFIELD bf GET u8 x", "BITFIELD bf OVERFLOW FOO", "BITFIELD bf FOO",
                      "BITFIELD bf GET u8", "BITFIELD bf SET u8 0 x", "BITFIELD_RO bf GET u8 0",
                      "BITFIELD_RO bf SET u8 0 1", "BITFIELD nokey GET u8 0", "BITFIELD bf",
                      "BITFIELD bf OVERFLOW SAT SET i8 0 1000 SET u4 0 -1",
                      "BITFIELD bf OVERFLOW FAIL SET i4 0 100", "GET bf",
                      "BITFIELD bf SET u2 0 7", "BITFIELD bf INCRBY i64 0 9223372036854775807",
                      "BITFIELD bf OVERFLOW SAT INCRBY i64 0 9223372036854775807",
                      "BITFIELD bf OVERFLOW SAT INCRBY i64 0 -9223372036854775808",
                      "BITFIELD bf SET u8 #4294967295 1", "LPUSH l x", "BITFIELD l GET u8 0"]),
]


@pytest.mark.parametrize("proto", [2, 3])
def test_bitmaps_match_redis(diff_pair: Pair, proto: int) -> None:
    problems = check_cases(diff_pair, CASES, proto)
    assert not problems, "\n".join(problems)
