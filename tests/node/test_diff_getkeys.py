"""COMMAND GETKEYS and COMMAND GETKEYSANDFLAGS against redis-server 7.0: key positions and
the key-spec flags, from the specs or the native finders (SET, BITFIELD, SORT, MIGRATE, the
numkeys commands), errors included."""

from __future__ import annotations

import pytest

from tests.node.diff import Case, check_cases

_COMMANDS = [
    "SET k v", "SET k v GET", "SET k v EX 1 get", "GET k", "MSET a 1 b 2", "LMOVE a b LEFT RIGHT",
    "SORT k", "SORT k BY x STORE d", "SORT k LIMIT 0 1 STORE d GET x", "SORT k STORE", "SORT_RO k",
    "ZUNIONSTORE d 2 a b", "ZUNIONSTORE d x a b", "ZUNIONSTORE d 5 a b", "ZUNIONSTORE d 2x a b",
    "ZUNION 2 a b", "ZUNION 2x a b", "ZDIFFSTORE d 1 a", "ZINTERCARD 2 a b", "SINTERCARD 1 a",
    "XREAD STREAMS a b 0 0", "XREAD STREAMS a b 0", "XREAD STREAMS",
    "XREADGROUP GROUP g c STREAMS a 0", "XREADGROUP GROUP g c COUNT 1 STREAMS a b 0 0",
    "EVAL s 2 a b c", "EVAL s 0", "EVAL s x", "EVAL s 1x a", "EVAL_RO s 1 a", "FCALL f 1 a",
    "MIGRATE h 1 k 0 10", 'MIGRATE h 1 "" 0 10 KEYS a b', "MIGRATE h 1 k 0 10 KEYS a",
    "MIGRATE h 1 k 0 10 AUTH p",
    "GEOSEARCHSTORE d s FROMMEMBER m BYRADIUS 1 km", "GEORADIUS k 0 0 1 km STORE d",
    "GEORADIUS_RO k 0 0 1 km", "GEORADIUSBYMEMBER k m 1 km STOREDIST d",
    "BITFIELD_RO k GET u8 0", "BITFIELD k GET u8 0", "BITFIELD k SET u8 0 1",
    "BITFIELD k OVERFLOW SAT GET u8 0", "BITFIELD k BOGUS", "BITFIELD k",
    "OBJECT ENCODING k", "OBJECT FREQ k", "MEMORY USAGE k", "DEBUG OBJECT k",
    "LMPOP 2 a b LEFT", "LMPOP 1x a LEFT", "LMPOP 0 a", "BLMPOP 0 2 a b LEFT", "BZMPOP 0 1 a MIN",
    "DEL a b", "RENAME a b", "COPY a b", "XADD s * f v", "LCS a b", "SMOVE a b m",
    "PFCOUNT a b", "PFMERGE d a", "WATCH a b", "SPUBLISH ch m", "SUBSCRIBE ch",
    "PING", "NOPE x", "GET", "GET a b", "CONFIG GET x", "CONFIG NOPE x",
]

CASES = [
    Case(cmd, [f"COMMAND GETKEYSANDFLAGS {cmd}", f"COMMAND GETKEYS {cmd}"]) for cmd in _COMMANDS
] + [
    Case("no command", ["COMMAND GETKEYSANDFLAGS", "COMMAND GETKEYS"]),
]


@pytest.mark.parametrize("proto", [2, 3])
def test_getkeys_and_flags_match_redis(diff_pair, proto):
    assert check_cases(diff_pair, CASES, proto) == []
