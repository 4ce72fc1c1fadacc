"""Multi-key commands over keys in several slots, through the proxy, against one redis-server.

The same scripts (keys without hash tags, each in a slot of its own, on several masters) go
to a standalone redis-server 7.0 and to the proxy in front of a real cluster, then of our
nodes (the ``slotgate`` fixture runs each test once per cluster), in RESP2 and RESP3; the raw
replies must be equal. Set replies whose order is a hash table's are compared sorted, TTLs
as "has one" (the two runs happen at different times).
"""

from __future__ import annotations

import random
import threading
import uuid
from collections.abc import Sequence

import pytest

from slotgate.protocol.slots import key_slot
from slotgate.proxy.routing.splitter import array_elements
from tests.support import ManagedProcess, RawClient

# Keys of the scripts, by short name; each gets the test's prefix.
NAMES = ("s1", "s2", "s3", "ss1", "ss2", "z1", "z2", "z3", "str1", "str2", "l1", "l2", "nums",
         "h1", "h2", "g1", "hash", "ttl1", "d", "d2", "zd", "bd", "hd", "gd", "gd2", "gd3", "sd",
         "c1", "c2", "c3", "r1", "r2", "r3", "r4", "m1", "m2", "m3")
UNORDERED = "unordered"
TTL = "ttl"

SETUP: list[list[str]] = [
    ["SADD", "s1", "1", "2", "3"], ["SADD", "s2", "3", "4", "5"], ["SADD", "s3", "5", "6"],
    ["SADD", "ss1", "a", "b", "c"], ["SADD", "ss2", "c", "d"],
    ["ZADD", "z1", "1", "a", "2", "b", "3", "c"], ["ZADD", "z2", "2", "b", "3", "c", "4", "d"],
    ["ZADD", "z3", "10", "x"],
    ["SET", "str1", "ohmytext"], ["SET", "str2", "mynewtext"],
    ["RPUSH", "l1", "a", "b", "c"], ["RPUSH", "l2", "x"], ["RPUSH", "nums", "3", "1", "2"],
    ["PFADD", "h1", "a", "b", "c"], ["PFADD", "h2", "c", "d", "e"],
    ["GEOADD", "g1", "13.361389", "38.115556", "Palermo", "15.087269", "37.502669", "Catania"],
    ["HSET", "hash", "f", "v"], ["SET", "ttl1", "v", "EX", "1000"],
]

# Sets, sorted sets, bitmaps, HyperLogLogs, LCS, geo and SORT with a destination: the result
# lands in the real destination key.
COMPUTE: list[list[str]] = [
    ["SUNIONSTORE", "d", "s1", "s2", "s3"], ["SMEMBERS", "d"],
    ["SINTERSTORE", "d", "s1", "s2"], ["SMEMBERS", "d"],
    ["SDIFFSTORE", "d", "s1", "s2", "m1"], ["SMEMBERS", "d"],
    ["SUNIONSTORE", "d", "m1", "m2"], ["EXISTS", "d"],
    ["SUNIONSTORE", "d", "s1", "hash"], ["SINTERSTORE", "d", "s1", "str1"],
    ["SUNIONSTORE", "d", "d", "s1", "s3"], ["SMEMBERS", "d"],
    ["SINTER", "s1", "s2"], ["SUNION", "ss1", "ss2", UNORDERED], ["SDIFF", "s1", "s2", "s3"],
    ["SDIFF", "ss1", "m1", "ss2", UNORDERED], ["SINTER", "s1", "m1"], ["SUNION", "s1", "hash"],
    ["SINTERCARD", "2", "s1", "s2"], ["SINTERCARD", "3", "s1", "s2", "s3", "LIMIT", "1"],
    ["SINTERCARD", "2", "s1", "s2", "LIMIT", "-1"], ["SINTERCARD", "3", "s1", "s2"],
    ["SINTERCARD", "0", "s1"], ["SINTERCARD", "2", "s1", "hash"],
    ["ZUNIONSTORE", "zd", "2", "z1", "z2", "WEIGHTS", "1", "2", "AGGREGATE", "MAX"],
    ["ZRANGE", "zd", "0", "-1", "WITHSCORES"],
    ["ZINTERSTORE", "zd", "3", "z1", "z2", "s2"], ["ZRANGE", "zd", "0", "-1", "WITHSCORES"],
    ["ZDIFFSTORE", "zd", "2", "z1", "z2"], ["ZRANGE", "zd", "0", "-1", "WITHSCORES"],
    ["ZUNIONSTORE", "zd", "2", "z1", "hash"], ["ZUNIONSTORE", "zd", "2", "z1", "z2", "WEIGHTS", "1"],
    ["ZUNIONSTORE", "zd", "2", "m1", "m2"], ["EXISTS", "zd"],
    ["ZUNION", "3", "z1", "z2", "z3", "WITHSCORES"], ["ZINTER", "2", "z1", "z2", "WITHSCORES"],
    ["ZINTER", "2", "z1", "s1"], ["ZDIFF", "2", "z1", "z2", "WITHSCORES"],
    ["ZUNION", "2", "z1", "s1", "AGGREGATE", "SUM", "WITHSCORES"],
    ["ZUNION", "2", "z1", "z2", "AGGREGATE", "BAD"], ["ZUNION", "3", "z1", "z2"],
    ["ZINTERCARD", "2", "z1", "z2"], ["ZINTERCARD", "2", "z1", "z2", "LIMIT", "1"],
    ["ZINTERCARD", "2", "z1", "hash"],
    ["ZRANGESTORE", "zd", "z2", "0", "-1"], ["ZRANGE", "zd", "0", "-1", "WITHSCORES"],
    ["ZRANGESTORE", "zd", "z2", "(c", "+", "BYLEX"], ["ZRANGESTORE", "zd", "m1", "0", "-1"],
    ["ZRANGESTORE", "zd", "hash", "0", "-1"], ["ZRANGESTORE", "zd", "z2", "0", "-1", "WITHSCORES"],
    ["BITOP", "AND", "bd", "str1", "str2"], ["GET", "bd"],
    ["BITOP", "XOR", "bd", "str1", "m1"], ["GET", "bd"],
    ["BITOP", "NOT", "bd", "str1", "str2"], ["BITOP", "OR", "bd", "str1", "hash"],
    ["BITOP", "NOT", "bd", "str2"], ["GET", "bd"],
    ["PFCOUNT", "h1", "h2"], ["PFCOUNT", "h1", "m1"], ["PFCOUNT", "h1", "str1"],
    ["PFMERGE", "hd", "h1", "h2"], ["PFCOUNT", "hd"], ["PFMERGE", "hd", "h1", "hash"],
    ["LCS", "str1", "str2"], ["LCS", "str1", "str2", "LEN"],
    ["LCS", "str1", "str2", "IDX", "MINMATCHLEN", "2", "WITHMATCHLEN"],
    ["LCS", "str1", "m1"], ["LCS", "str1", "l1"], ["LCS", "str1", "str2", "BOGUS"],
    ["GEOSEARCHSTORE", "gd", "g1", "FROMLONLAT", "15", "37", "BYRADIUS", "200", "km", "ASC"],
    ["ZRANGE", "gd", "0", "-1", "WITHSCORES"],
    ["GEOSEARCHSTORE", "gd", "g1", "FROMMEMBER", "Palermo", "BYBOX", "400", "400", "km",
     "STOREDIST"], ["ZRANGE", "gd", "0", "-1", "WITHSCORES"],
    ["GEOSEARCHSTORE", "gd", "g1", "FROMMEMBER", "Nowhere", "BYRADIUS", "1", "km"],
    ["GEOSEARCHSTORE", "gd", "hash", "FROMLONLAT", "15", "37", "BYRADIUS", "1", "km"],
    ["GEORADIUS", "g1", "15", "37", "200", "km", "STORE", "gd2"],
    ["ZRANGE", "gd2", "0", "-1", "WITHSCORES"],
    ["GEORADIUSBYMEMBER", "g1", "Palermo", "200", "km", "STOREDIST", "gd3"],
    ["ZRANGE", "gd3", "0", "-1", "WITHSCORES"],
    ["GEORADIUS", "g1", "15", "37", "200", "km", "WITHDIST", "STORE", "gd2"],
    ["SORT", "nums", "STORE", "sd"], ["LRANGE", "sd", "0", "-1"],
    ["SORT", "l1", "ALPHA", "DESC", "LIMIT", "0", "2", "STORE", "sd"], ["LRANGE", "sd", "0", "-1"],
    ["SORT", "l1", "STORE", "sd"], ["SORT", "hash", "STORE", "sd"], ["SORT", "m1", "STORE", "sd"],
    ["EXISTS", "sd"],
    ["COPY", "str1", "c1"], ["GET", "c1"], ["COPY", "str1", "c1"], ["COPY", "str2", "c1", "REPLACE"],
    ["GET", "c1"], ["COPY", "m1", "c2"], ["COPY", "ttl1", "c3"], ["TTL", "c3", TTL],
    ["COPY", "z1", "c2"], ["ZRANGE", "c2", "0", "-1", "WITHSCORES"], ["COPY", "s1", "c1", "BAD"],
]

# Moves: the source changes too; MSETNX, every key.
MOVES: list[list[str]] = [
    ["RENAME", "str2", "r1"], ["GET", "r1"], ["EXISTS", "str2"], ["RENAME", "m1", "r2"],
    ["RENAMENX", "r1", "str1"], ["RENAMENX", "r1", "r3"], ["GET", "r3"], ["EXISTS", "r1"],
    ["RENAME", "ttl1", "r4"], ["TTL", "r4", TTL], ["EXISTS", "ttl1"],
    ["RENAME", "z3", "r3"], ["TYPE", "r3"], ["ZRANGE", "r3", "0", "-1", "WITHSCORES"],
    ["LMOVE", "l1", "l2", "LEFT", "RIGHT"], ["LRANGE", "l1", "0", "-1"], ["LRANGE", "l2", "0", "-1"],
    ["RPOPLPUSH", "l1", "l2"], ["LMOVE", "l1", "hash", "LEFT", "LEFT"],
    ["LMOVE", "l1", "l2", "UP", "DOWN"], ["RPOPLPUSH", "m1", "l2"], ["LMOVE", "hash", "l2",
                                                                     "LEFT", "LEFT"],
    ["RPOPLPUSH", "l1", "m2"], ["EXISTS", "l1"], ["LRANGE", "m2", "0", "-1"],
    ["LRANGE", "l2", "0", "-1"],
    ["SMOVE", "s1", "s2", "1"], ["SMEMBERS", "s1"], ["SMEMBERS", "s2"], ["SMOVE", "s1", "s2", "99"],
    ["SMOVE", "hash", "s2", "a"], ["SMOVE", "s1", "hash", "2"], ["SMOVE", "m1", "s2", "1"],
    ["SMOVE", "s3", "m3", "5"], ["SMOVE", "s3", "m3", "6"], ["EXISTS", "s3"], ["SMEMBERS", "m3"],
    ["MSETNX", "c1", "a", "c2", "b", "c3", "c"], ["MGET", "c1", "c2", "c3"],
    ["MSETNX", "c1", "x", "d", "y"], ["EXISTS", "d"], ["MSETNX", "d", "y", "c1", "x"],
    ["MSETNX", "d", "1", "d2", "2", "d", "3"], ["MGET", "d", "d2"],
    ["MSETNX", "zd", "1", "d2"], ["MSETNX", "hash", "1", "bd", "2"], ["EXISTS", "zd", "bd"],
]


def _keys(prefix: str, names: Sequence[str] = NAMES) -> dict[str, str]:
    return {name: f"{prefix}{name}" for name in names}


def _prefix(names: Sequence[str] = NAMES) -> str:
    """A fresh prefix that puts every key in a slot of its own."""
    while True:
        prefix = f"x{uuid.uuid4().hex[:8]}:"
        if len({key_slot(k.encode()) for k in _keys(prefix, names).values()}) == len(names):
            return prefix


def _argv(cmd: Sequence[str], keys: dict[str, str]) -> list[str]:
    return [keys.get(a, a) for a in cmd if a not in (UNORDERED, TTL)]


def _normal(cmd: Sequence[str], raw: bytes) -> bytes:
    if UNORDERED in cmd and raw[:1] in (b"*", b"~"):
        return raw[:1] + b"".join(sorted(array_elements(raw)))
    if TTL in cmd and raw[:1] == b":":
        return b":+\r\n" if int(raw[1:-2]) > 0 else raw
    return raw


def _run(port: int, proto: int, prefix: str, script: list[list[str]],
         setup: list[list[str]] = SETUP, names: Sequence[str] = NAMES) -> list[bytes]:
    keys = _keys(prefix, names)
    with RawClient(port) as c:
        if proto == 3:
            assert c.call("HELLO", "3")[:1] == b"%"
        c.pipeline([_argv(cmd, keys) for cmd in setup])
        out = []
        for cmd in script:  # one at a time: a mismatch names its command
            out.append(_normal(cmd, c.call(*_argv(cmd, keys))))
        assert c.call("DEL", *keys.values())[:1] == b":"
        assert c.call("DEL", *keys.values()) == b":0\r\n"
        assert c.call("KEYS", "*slotgate-tmp*") == b"*0\r\n"  # no temporary left behind
        assert c.call("KEYS", "*slotgate-j*") == b"*0\r\n"  # no journal entry, no index
    return out


@pytest.mark.parametrize("script", ["compute", "moves"])
@pytest.mark.parametrize("proto", [2, 3])
def test_same_replies_as_one_redis_server(slotgate: ManagedProcess,
                                          redis_standalone: ManagedProcess,
                                          proto: int, script: str) -> None:
    commands = COMPUTE if script == "compute" else MOVES
    prefix = _prefix()
    want = _run(redis_standalone.port, proto, prefix, commands)
    got = _run(slotgate.port, proto, prefix, commands)
    for cmd, w, g in zip(commands, want, got, strict=True):
        assert g == w, cmd


def concurrent_moves(port: int, n_lists: int, n_elements: int, n_clients: int,
                     moves_each: int) -> None:
    """``n_clients`` clients move elements at random between ``n_lists`` lists (LMOVE in all
    directions, RPOPLPUSH), ``moves_each`` moves each; then every element must be found
    exactly once, and no move may have failed."""
    prefix = f"soak{uuid.uuid4().hex[:6]}:"
    lists = [f"{prefix}{i}" for i in range(n_lists)]
    start = [f"e{i}".encode() for i in range(n_elements)]
    with RawClient(port) as c:
        c.pipeline([["RPUSH", lists[i], *start[i::n_lists]] for i in range(n_lists)])
    errors: list[bytes] = []

    def mover(seed: int) -> None:
        rng = random.Random(seed)
        with RawClient(port) as c:
            for _ in range(moves_each):
                src, dst = rng.sample(lists, 2)
                if rng.random() < 0.2:
                    reply = c.call("RPOPLPUSH", src, dst)
                else:
                    ends = [rng.choice(["LEFT", "RIGHT"]) for _ in range(2)]
                    reply = c.call("LMOVE", src, dst, *ends)
                if reply[:1] not in (b"$", b"_"):
                    errors.append(reply)

    threads = [threading.Thread(target=mover, args=(seed,)) for seed in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    with RawClient(port) as c:
        found = [e for raw in c.pipeline([["LRANGE", k, "0", "-1"] for k in lists])
                 for e in array_elements(raw)]
        assert c.call("KEYS", f"*slotgate-*{prefix}*") == b"*0\r\n"
        c.call("DEL", *lists)
    assert sorted(found) == sorted(b"$%d\r\n%s\r\n" % (len(e), e) for e in start)


def test_concurrent_moves_lose_and_duplicate_nothing(slotgate: ManagedProcess) -> None:
    """Four clients make 600 random moves between 30 lists spread over the masters, many
    moves sharing their lists."""
    concurrent_moves(slotgate.port, n_lists=30, n_elements=300, n_clients=4, moves_each=150)
