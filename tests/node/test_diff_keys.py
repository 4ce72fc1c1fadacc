"""Generic key commands and expiry: identical raw replies to redis-server 7.0."""

from __future__ import annotations

import hiredis
import pytest

from tests.node.diff import Case, Pair, check_cases
from tests.support import RawClient

CASES = [
    Case("del exists touch type", ["MSET a 1 b 2", "LPUSH l x", "DEL a nokey a", "EXISTS a b b l",
                                   "TOUCH a b l", "TYPE b", "TYPE l", "TYPE nokey", "UNLINK b l",
                                   "DBSIZE", "DEL", "EXISTS"]),
    Case("rename", ["RENAME no x", "SET a 1", "RENAME a a", "RENAMENX a a", "RENAME a b",
                    "GET b", "EXISTS a", "SET c 3 EX 100", "RENAME c d", ("TTL d", "ttl"),
                    "SET e 5", "RENAMENX e d", "RENAMENX e f", "RENAMENX no f", "RENAME d e",
                    "GET e", ("TTL e", "ttl"), "RENAME a"]),
    Case("copy", ["SET a 1 EX 100", "COPY a b", ("TTL b", "ttl"), "COPY a b", "COPY a b REPLACE",
                  "COPY a a", "COPY a c DB 1", "COPY a c DB 99", "COPY a c DB x", "COPY a c foo",
                  "COPY no x", "SELECT 1", "GET c", "TTL c", "LPUSH l 1 2", "COPY l l2",
                  "LRANGE l2 0 -1", "COPY a c DB -1", "COPY a c REPLACE DB"]),
    Case("move", ["SET a 1", "MOVE a 1", "MOVE a 1", "MOVE no 1", "SELECT 1", "GET a",
                  "MOVE a 1", "MOVE a 99", "MOVE a x", "SET a 2", "MOVE a 0", "SELECT 0",
                  "GET a"]),
    Case("keys and scan", ["MSET foo 1 bar 2 fab 3 'a b' 4 'x*y' 5 h\\\\llo 6", ("KEYS *", "sorted"),
                           ("KEYS f*", "sorted"), ("KEYS ?a?", "sorted"), ("KEYS [fb]a*", "sorted"),
                           ("KEYS [^f]*", "sorted"), ("KEYS [a-c]*", "sorted"),
                           ("KEYS x\\*y", "sorted"), ("KEYS *[", "sorted"), ("KEYS nomatch", "sorted"),
                           ("SCAN 0 COUNT 1000", "scan"), ("SCAN 0 MATCH f* COUNT 1000", "scan"),
                           ("SCAN 0 COUNT 1000 TYPE string", "scan"), ("SCAN 0 COUNT 1000 TYPE list", "scan"),
                           "SCAN 0 COUNT 0", "SCAN 0 COUNT -1", "SCAN 0 COUNT x", "SCAN x",
                           "SCAN 0 MATCH", "SCAN 0 FOO bar", ("KEYS [b-a]*", "sorted")]),
    Case("scan cursor forms", ["MSET a 1 b 2 c 3", ("SCAN ''", "scan"), ("SCAN '' COUNT 1000", "scan"),
                               ("SCAN +0", "scan"), ("SCAN -0", "scan"), "SCAN +", "SCAN -",
                               "SCAN ' 0'", "SCAN '0 '", "SCAN 18446744073709551616", "SCAN 0x1"]),
    Case("randomkey", ["RANDOMKEY", "SET only 1", "RANDOMKEY"]),
    Case("expire family", ["SET k v", "EXPIRE k 100", ("TTL k", "ttl"), "PEXPIRE k 100000",
                           ("PTTL k", "ttl"), "EXPIRE no 10", "EXPIRE k abc", "EXPIRE k 10 NX",
                           "EXPIRE k 10 XX", ("TTL k", "ttl"), "EXPIRE k 5 GT", "EXPIRE k 500 GT",
                           ("TTL k", "ttl"), "EXPIRE k 1000 LT", "EXPIRE k 50 LT", ("TTL k", "ttl"),
                           "EXPIRE k 10 NX XX", "EXPIRE k 10 GT LT", "EXPIRE k 10 FOO",
                           "PERSIST k", "PERSIST k", "TTL k", "EXPIRE k 10 XX", "EXPIRE k 10 GT",
                           "EXPIRE k 10 LT", ("TTL k", "ttl"), "PERSIST no",
                           "EXPIREAT k 99999999999", "EXPIRETIME k", "PEXPIREAT k 99999999999000",
                           "PEXPIRETIME k", "EXPIRETIME no", "PEXPIRETIME no", "TTL no", "PTTL no",
                           "EXPIRE k 9223372036854775807", "EXPIRE k -9223372036854775808",
                           "PEXPIRE k 9223372036854775807", "EXPIREAT k 9223372036854775807",
                           "PEXPIREAT k 9223372036854775807", "EXPIRE k -1", "EXISTS k",
                           "SET k v", "PEXPIREAT k 1", "GET k", "SET k v", "EXPIREAT k 0",
                           "EXISTS k", "SET k v", "EXPIRE k 0 GT", "EXISTS k", "EXPIRE k -1 LT",
                           "EXISTS k", "SET k v", "EXPIRE k 10 LT", ("TTL k", "ttl")]),
    Case("lazy expiry", ["SET k v PX 1", "DEBUG SLEEP 0.05", "GET k", "EXISTS k", "TTL k",
                         "SET k2 v PX 1", "DEBUG SLEEP 0.05", "TYPE k2", "SET k3 v PX 1",
                         "DEBUG SLEEP 0.05", "RENAME k3 x", "SET k4 v PX 1", "DEBUG SLEEP 0.05",
                         "SETNX k4 w", "GET k4"]),
    Case("object", ["SET k 1", "OBJECT REFCOUNT k", "SET k 123456", "OBJECT REFCOUNT k",
                    "OBJECT FREQ k", "OBJECT FREQ no", "OBJECT REFCOUNT no", "OBJECT ENCODING no",
                    "OBJECT", "OBJECT FOO k", "OBJECT IDLETIME no", "OBJECT HELP"]),
    Case("select and dbs", ["SELECT 1", "SET a 1", "SELECT 0", "GET a", "SELECT 16",
                            "SELECT -1", "SELECT x", "SELECT 15", "DBSIZE", "SWAPDB 0 1",
                            "SWAPDB 0 x", "SWAPDB x 0", "SWAPDB 0 99", "SELECT 1", "GET a",
                            "SELECT 0", "GET a", "FLUSHDB", "FLUSHDB ASYNC", "FLUSHDB SYNC",
                            "FLUSHDB foo", "FLUSHALL foo", "FLUSHALL ASYNC"]),
]


@pytest.mark.parametrize("proto", [2, 3])
def test_keys_match_redis(diff_pair: Pair, proto: int) -> None:
    problems = check_cases(diff_pair, CASES, proto)
    assert not problems, "\n".join(problems)


def _scan_all(conn: RawClient, *opts: bytes) -> list[bytes]:
    """Every key a whole SCAN returns, cursor to cursor, in the order returned."""
    keys: list[bytes] = []
    cursor = b"0"
    while True:
        reader = hiredis.Reader()
        reader.feed(conn.call(b"SCAN", cursor, *opts))
        cursor, page = reader.gets()
        keys += page
        if cursor == b"0":
            return keys


def test_scan_in_pages_returns_every_key_once(diff_pair: Pair) -> None:
    """SCAN a page of 3 at a time, with MATCH and TYPE too: the same keys as redis-server,
    each exactly once on our node."""
    ours, real = diff_pair.connect()
    for conn in (ours, real):
        conn.call(b"MSET", *[b"k%d" % i if j % 2 == 0 else b"v" for i in range(40) for j in range(2)])
        conn.call(b"RPUSH", b"l1", b"x")
        conn.call(b"RPUSH", b"k-list", b"x")
    for opts in ([b"COUNT", b"3"], [b"COUNT", b"3", b"MATCH", b"k1*"],
                 [b"COUNT", b"3", b"TYPE", b"list"]):
        got = _scan_all(ours, *opts)
        assert len(got) == len(set(got)), (opts, got)
        assert sorted(got) == sorted(set(_scan_all(real, *opts))), opts
