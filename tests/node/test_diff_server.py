"""Connection, transaction and server commands: identical raw replies to redis-server 7.0."""

from __future__ import annotations

import pytest

from tests.node.diff import Case, Pair, check_cases

CASES = [
    Case("ping echo", ["PING", "PING hello", "PING a b", "ECHO x", "ECHO", "ECHO a b", "ping",
                       "PiNg"]),
    Case("unknown and arity", ["FOO", "FOO bar baz", "FOO " + "x" * 200, "GET", "SET a",
                               "CONFIG", "CONFIG FOO", "CLIENT FOO", "OBJECT", "GETSET a",
                               "FOO a b c d e f g h i j k l m n o p q r s t u v w x y z "
                               + " ".join(["abcdefghij"] * 20)]),
    Case("hello", ["HELLO 4", "HELLO x", "HELLO 2 FOO", "HELLO 2 AUTH default", "HELLO 1",
                   ("HELLO 2 AUTH default wrong", "type"), "HELLO 2 SETNAME 'a b'"]),
    # HELLO's options act one by one: a name set before a bad option stays; the option in the
    # error is printed as a C string (up to a NUL byte), CR and LF as spaces, at any length.
    Case("hello options in order", [
        "HELLO 2 SETNAME ok BAD", "CLIENT GETNAME", "HELLO 2 SETNAME a2 AUTH foo bar",
        "CLIENT GETNAME", "HELLO 2 AUTH foo bar SETNAME 'a b'", "HELLO 2 AUTH foo bar BAD",
        "HELLO 2 SETNAME ok2 SETNAME 'a b'", "CLIENT GETNAME", "HELLO 2 SETNAME ok3 AUTH foo",
        "CLIENT GETNAME", "HELLO 03", "HELLO +3", "HELLO ' 3'", "HELLO -1",
        "HELLO 99999999999999999999", "HELLO 3 " + "x" * 200, 'HELLO 3 "a\r\nb\x00c"',
        "HELLO 3 AUTH", "HELLO 3 setname", ("HELLO 2 aUtH default x SETNAME ''", "type"),
        "CLIENT GETNAME"]),
    Case("auth without password", ["AUTH x", "AUTH default x", "AUTH a b c", "AUTH foo bar"]),
    Case("multi exec", ["MULTI", "SET a 1", "INCR a", "GET a", "EXEC", "EXEC", "DISCARD",
                        "MULTI", "MULTI", "WATCH a", "DISCARD", "MULTI", "SET a", "GET a", "EXEC",
                        "MULTI", "FOO", "EXEC", "MULTI", "SET a x", "INCR a", "GET a", "EXEC",
                        "MULTI", "EXEC"]),
    Case("watch", ["SET w 1", "WATCH w", "SET w 2", "MULTI", "GET w", "EXEC", "WATCH w",
                   "MULTI", "GET w", "EXEC", "WATCH w", "UNWATCH", "SET w 3", "MULTI", "GET w",
                   "EXEC", "WATCH nokey", "SET nokey 1", "MULTI", "EXEC", "WATCH w", "FLUSHALL",
                   "MULTI", "EXEC", "SET w 1", "WATCH w", "DEL w", "MULTI", "EXEC", "WATCH w",
                   "MULTI", "PING", "EXEC", "WATCH", "WATCH a b c", "SET c 1", "MULTI", "EXEC"]),
    Case("watch and expiry", ["SET w 1 PX 1", "DEBUG SLEEP 0.05", "WATCH w", "MULTI", "PING",
                              "EXEC", "SET w 1 PX 40", "WATCH w", "DEBUG SLEEP 0.08", "MULTI",
                              "PING", "EXEC", "SET x 1", "WATCH x", "PEXPIRE x 1",
                              "DEBUG SLEEP 0.05", "MULTI", "PING", "EXEC"]),
    Case("watch and swapdb", ["SET w 1", "WATCH w", "SWAPDB 0 1", "MULTI", "PING", "EXEC"]),
    Case("client basics", ["CLIENT GETNAME", "CLIENT SETNAME foo", "CLIENT GETNAME",
                           "CLIENT SETNAME 'a b'", "CLIENT SETNAME ''", "CLIENT GETNAME",
                           ("CLIENT ID", "type"), "CLIENT KILL 1.2.3.4:5", "CLIENT KILL ID 0",
                           "CLIENT KILL ID x", "CLIENT KILL ID 999999", "CLIENT KILL FOO bar",
                           "CLIENT KILL TYPE foo", "CLIENT LIST TYPE foo", "CLIENT UNBLOCK 9999",
                           "CLIENT UNBLOCK x", "CLIENT UNBLOCK 1 FOO", "CLIENT REPLY FOO",
                           "CLIENT NO-EVICT maybe", "CLIENT NO-EVICT on", "CLIENT GETREDIR"]),
    Case("client reply", [("CLIENT REPLY OFF", "noreply"), ("SET a 1", "noreply"),
                          ("GET a", "noreply"), "CLIENT REPLY ON", "GET a",
                          ("CLIENT REPLY SKIP", "noreply"), ("SET a 2", "noreply"), "GET a",
                          ("CLIENT REPLY OFF", "noreply"), ("CLIENT REPLY SKIP", "noreply"),
                          "CLIENT REPLY ON", "GET a"]),
    Case("config", ["CONFIG GET maxclients", "CONFIG GET maxmemory", "CONFIG GET appendonly",
                    "CONFIG GET databases", "CONFIG GET nosuch", "CONFIG GET cluster-enabled",
                    "CONFIG GET cluster-node-timeout", "CONFIG GET client-output-buffer-limit",
                    "CONFIG GET proto-max-bulk-len", "CONFIG GET appendfsync",
                    "CONFIG GET slave-read-only", "CONFIG SET maxclients abc",
                    "CONFIG SET maxclients 0", "CONFIG SET foo 1", "CONFIG SET databases 3",
                    "CONFIG SET maxmemory 1x", "CONFIG SET appendfsync foo",
                    "CONFIG SET hz 20 hz 30", "CONFIG SET hz", "CONFIG SET hz 20", "CONFIG GET hz",
                    "CONFIG SET hz 10", "CONFIG SET maxmemory 1gb", "CONFIG GET maxmemory",
                    "CONFIG SET maxmemory 0", "CONFIG SET save '1 2 3'",
                    "CONFIG SET notify-keyspace-events Q", "CONFIG SET slowlog-max-len 64",
                    "CONFIG GET slowlog-max-len", "CONFIG SET slowlog-max-len 128",
                    "CONFIG GET", "CONFIG REWRITE", ("CONFIG GET max*clients", "pairs")]),
    # a name and its alias in one CONFIG SET are both set (in order); a name twice is not
    Case("config set of a name and its alias", [
        "CONFIG SET hash-max-ziplist-value 1 hash-max-listpack-value 2",
        ("CONFIG GET hash-max-*-value", "pairs"),
        "CONFIG SET hash-max-listpack-value 5 hash-max-ziplist-value 6",
        ("CONFIG GET hash-max-*-value", "pairs"), "HSET h f abcdefg", "OBJECT ENCODING h",
        "CONFIG SET list-max-ziplist-size 3 list-max-listpack-size 4",
        ("CONFIG GET list-max-*-size", "pairs"),
        "CONFIG SET hash-max-ziplist-value 1 HASH-MAX-ZIPLIST-VALUE 3",
        "CONFIG SET hash-max-listpack-value 7 hash-max-listpack-value 8",
        ("CONFIG GET hash-max-*-value", "pairs"),
        "CONFIG SET hash-max-listpack-value 64 list-max-listpack-size -2"]),
    # the *-max-listpack-value directives are memory values (units), the entries integers
    Case("listpack limits: memory values and integers", [
        "CONFIG SET hash-max-listpack-value 1kb", "CONFIG GET hash-max-listpack-value",
        "CONFIG SET hash-max-listpack-value abc", "CONFIG SET zset-max-ziplist-value 2k",
        "CONFIG GET zset-max-listpack-value", "CONFIG SET zset-max-listpack-value 1x",
        "CONFIG SET hash-max-listpack-entries 1kb", "CONFIG SET set-max-intset-entries 1k",
        "CONFIG SET hash-max-listpack-value 64 zset-max-listpack-value 64"]),
    Case("command", ["COMMAND COUNT", "COMMAND INFO get", "COMMAND INFO config|get",
                     "COMMAND INFO nosuch get", "COMMAND DOCS get", "COMMAND DOCS nosuch",
                     "COMMAND GETKEYS get a", "COMMAND GETKEYS mset a 1 b 2", "COMMAND GETKEYS",
                     "COMMAND GETKEYS ping", "COMMAND GETKEYS nosuch", "COMMAND GETKEYS get",
                     ("COMMAND LIST FILTERBY PATTERN get*", "sorted"), "COMMAND FOO",
                     "COMMAND LIST FILTERBY foo bar"]),
    Case("debug", ["DEBUG DIGEST", "DEBUG FOO", "DEBUG SET-ACTIVE-EXPIRE 1", "DEBUG OBJECT no",
                   "DEBUG DIGEST-VALUE no", "DEBUG SLEEP 0"]),
    Case("slowlog and misc", ["SLOWLOG LEN", "SLOWLOG RESET", "SLOWLOG GET", "SLOWLOG GET x",
                              "SLOWLOG GET -2", "SLOWLOG FOO", "SLOWLOG HELP", "LATENCY LATEST",
                              "LATENCY RESET", ("TIME", "type"), ("LASTSAVE", "type"),
                              "DBSIZE", "SWAPDB 0 0"]),
    Case("inline-typed ops", ["SET 'a b' 'c d'", "GET 'a b'", "SET e ''", "GET e", "STRLEN e"]),
]


@pytest.mark.parametrize("proto", [2, 3])
def test_server_commands_match_redis(diff_pair: Pair, proto: int) -> None:
    problems = check_cases(diff_pair, CASES, proto)
    assert not problems, "\n".join(problems)


DIGEST_CASES = [
    Case("debug digest equals redis", [
        "DEBUG DIGEST", "SET s hello", "DEBUG DIGEST", "DEBUG DIGEST-VALUE s nokey",
        "SET n 12345", "SET t v EX 1000", "DEBUG DIGEST-VALUE n t", "RPUSH l a b c",
        "SADD st x y 1", "SADD si 1 2 3", "ZADD z 1 a 2.5 b", "HSET h f v g w",
        "DEBUG DIGEST-VALUE l st si z h", "SELECT 1", "SET other 1", "DEBUG DIGEST",
        "SELECT 0", "DEBUG DIGEST"]),
]


@pytest.mark.parametrize("proto", [2, 3])
def test_debug_digest_matches_redis(diff_pair: Pair, proto: int) -> None:
    problems = check_cases(diff_pair, DIGEST_CASES, proto)
    assert not problems, "\n".join(problems)


EXEC_REJECT_CASES = [
    Case("rejected exec aborts", ["EXEC x", "MULTI", "SET a 1", "EXEC x", "EXEC", "GET a",
                                  "MULTI", "SET a 1", "GET", "EXEC"]),
]


@pytest.mark.parametrize("proto", [2, 3])
def test_rejected_exec_matches_redis(diff_pair: Pair, proto: int) -> None:
    problems = check_cases(diff_pair, EXEC_REJECT_CASES, proto)
    assert not problems, "\n".join(problems)
