"""INCR/DECR, HSET and LPUSH/RPUSH hot paths against a real redis-server 7.0: raw replies (RESP2 and RESP3),
the same lines pipelined in one write, keyspace notifications and the dirty counter.

The node serves INCR of a plain counter, HSET of one field of an existing hash and a push to
an existing list by a shorter path when the database has no TTL, WATCH, blocked client or encoding mark to update; these
cases go in and out of that path (TTLs, WATCH, APPEND/INCRBYFLOAT encodings, values at the
edges of the canonical-integer check, encoding thresholds). HDEL, SREM and ZREM (one shared
removal loop) are checked for their events and WATCH too.
"""

from __future__ import annotations

import pytest

from tests.node.diff import Case, Pair, _parse, check_cases, show_difference, split_line
from tests.support import RawClient

COUNTER_CASES = [
    Case("incr values at the edges", [
        "INCR k", "INCR k", "GET k", "OBJECT ENCODING k", "SET k 0", "INCR k", "SET k 9",
        "INCR k", "SET k 8", "INCR k", "INCR k", "SET k 129", "INCR k", "SET k 1299", "INCR k",
        "SET k 5", "INCR k", "GET k", "SET k 999999999999999998", "INCR k", "INCR k", "GET k",
        "INCR k",
        "OBJECT ENCODING k", "SET k 9223372036854775806", "INCR k", "INCR k", "GET k",
        "SET k 00", "INCR k", "SET k 012", "INCR k", "SET k ''", "INCR k", "SET k -5", "INCR k",
        "INCR k", "INCR k", "INCR k", "INCR k", "INCR k", "GET k", "SET k -0", "INCR k",
        "SET k +7", "INCR k", "SET k ' 7'", "INCR k", "SET k '7 '", "INCR k", "SET k 1_000",
        "INCR k", "SET k 7.0", "INCR k", "SET k \xd9\xa3", "INCR k", "SET k 0x10", "INCR k",
        "SET k 99999999999999999999", "INCR k", "DECR k", "SET k 1", "DECR k", "DECR k",
        "DECR k", "GET k", "INCRBY k 18", "DECRBY k 3", "INCRBY k 9223372036854775807",
        "OBJECT ENCODING k", "DBSIZE"]),
    Case("incr in a row, the same counter object again", [
        "SET k 999999999999999996", "INCR k", "INCR k", "INCR k", "INCR k", "INCR k", "GET k",
        "SET k 9223372036854775804", "INCR k", "INCR k", "INCR k", "INCR k", "INCR k", "GET k",
        "SET a 5", "INCR a", "INCR a", "COPY a b", "INCR b", "INCR a", "INCR b", "GET a",
        "GET b", "INCR c1", "INCR c1", "INCR c1", "RENAME c1 c2", "INCR c2", "INCR c2",
        "SET c1 7", "INCR c1", "GET c2", "SET x 41", "INCR x", "INCR x", "APPEND x 0",
        "INCR x", "INCR x", "OBJECT ENCODING x", "INCR y", "INCR y", "SELECT 1", "INCR y",
        "INCR y", "SELECT 0", "INCR y", "GET y", "INCR z", "INCR z", "DECR z", "INCR z",
        "INCR z", "GET z", "INCR w", "INCR w", "INCR w", "SET w 100", "INCR w", "INCR w",
        "INCR z", "INCR w", "INCR z", "INCR w", "MGET w z", "INCR n9", "INCR n9", "INCR n9",
        "INCR n9", "INCR n9", "INCR n9", "INCR n9", "INCR n9", "INCR n9", "INCR n9", "INCR n9",
        "GET n9"]),
    Case("incr and the string encodings", [
        "SET k 1", "APPEND k 2", "OBJECT ENCODING k", "INCR k", "OBJECT ENCODING k", "GET k",
        "SET f 1", "INCRBYFLOAT f 1", "OBJECT ENCODING f", "INCR f", "OBJECT ENCODING f",
        "INCR k", "SETRANGE k 0 5", "OBJECT ENCODING k", "INCR k", "OBJECT ENCODING k",
        "SET big 1234567890123456789", "INCR big", "OBJECT ENCODING big"]),
    Case("incr with TTLs in the db", [
        "SET k 1", "SET t 5 EX 100", "INCR k", "INCR t", ("TTL t", "ttl"), "TTL k", "INCR k",
        "PERSIST t", "INCR t", "TTL t", "SET gone 3 PX 1", "DEBUG SLEEP 0.01", "INCR gone",
        "GET gone", "INCR k", "GET k"]),
    Case("incr wrongtype", ["LPUSH l a", "INCR l", "DECR l", "INCRBY l 2", "HSET h f v", "INCR h",
                            "SET s abc", "INCR s", "GET s"]),
    Case("incr breaks WATCH", [
        "SET k 1", "WATCH k", "INCR k", "MULTI", "GET k", "EXEC", "WATCH other", "INCR k",
        "MULTI", "GET k", "EXEC", "WATCH k", "INCR nokey", "MULTI", "INCR k", "EXEC", "GET k",
        "WATCH n", "INCR n", "MULTI", "GET n", "EXEC"]),
    Case("slowlog threshold on the hot paths", [
        "CONFIG SET slowlog-log-slower-than 0", "SLOWLOG RESET", "INCR k", "HSET h f v",
        "HSET h f w", "SLOWLOG LEN", "CONFIG SET slowlog-log-slower-than -1", "SLOWLOG RESET",
        "INCR k", "HSET h f x", "SLOWLOG LEN", "CONFIG SET slowlog-log-slower-than 10000000",
        "INCR k", "HSET h f y", "SLOWLOG LEN", "CONFIG SET slowlog-log-slower-than 10000",
        "SLOWLOG RESET"]),
]

HASH_CASES = [
    Case("hset replies and arity", [
        "HSET h f v", "HSET h f v", "HSET h f w", "HSET h g v", "HGETALL h", "HSET h f",
        "HSET h f v g", "HSET h a 1 b 2 a 3", "HLEN h", "HMSET h f x", "HGET h f",
        "SET s x", "HSET s f v", "LPUSH l a", "HSET l f v", "HSET h '' ''", "HGETALL h"]),
    Case("hset encoding by value length", [
        "CONFIG SET hash-max-listpack-value 8", "HSET h a 1", "HSET h a 12345678",
        "OBJECT ENCODING h", "HSET h a 123456789", "OBJECT ENCODING h", "HSET h a 1",
        "OBJECT ENCODING h", "HSET h2 a 1", "HSET h2 123456789 1", "OBJECT ENCODING h2",
        "HSET h3 a 1", "HSET h3 b 2 c 123456789", "OBJECT ENCODING h3",
        "CONFIG SET hash-max-listpack-value 64"]),
    Case("hset encoding by entries", [
        "CONFIG SET hash-max-listpack-entries 2", "HSET h a 1", "HSET h b 2",
        "OBJECT ENCODING h", "HSET h b 3", "OBJECT ENCODING h", "HSET h c 3",
        "OBJECT ENCODING h", "CONFIG SET hash-max-listpack-entries 512",
        "HSET u a 1 b 2 c 3", "OBJECT ENCODING u", "CONFIG SET hash-max-listpack-entries 2",
        "HSET u a 9", "OBJECT ENCODING u", "HSET v a 1 b 2 c 3", "OBJECT ENCODING v",
        "CONFIG SET hash-max-listpack-entries 512", "HGET u a", "HLEN u",
        "CONFIG SET hash-max-ziplist-entries 1", "HSET z a 1", "OBJECT ENCODING z",
        "HSET z b 2", "OBJECT ENCODING z", "CONFIG SET hash-max-ziplist-entries 512",
        "CONFIG SET hash-max-ziplist-value 2", "HSET y a 1",
        "HSET y a 12", "OBJECT ENCODING y", "CONFIG SET hash-max-listpack-value 64"]),
    Case("hsetnx, hincrby, hincrbyfloat after CONFIG SET of the limits", [
        "CONFIG SET hash-max-listpack-value 4", "HSETNX a f 1234", "OBJECT ENCODING a",
        "HSETNX a g 12345", "OBJECT ENCODING a", "HINCRBY b f 12345", "OBJECT ENCODING b",
        "HINCRBYFLOAT c f 1.5", "OBJECT ENCODING c", "HINCRBYFLOAT c f 1000.25",
        "OBJECT ENCODING c", "CONFIG SET hash-max-listpack-value 64",
        "CONFIG SET hash-max-listpack-entries 1", "HSETNX d f v", "HSETNX d g v",
        "OBJECT ENCODING d", "HINCRBY e f 1", "HINCRBY e g 1", "OBJECT ENCODING e",
        "HINCRBYFLOAT x f 1", "HINCRBYFLOAT x g 1", "OBJECT ENCODING x",
        "CONFIG SET hash-max-listpack-entries 512"]),
    Case("hset with TTLs and WATCH", [
        "HSET h f v", "EXPIRE h 100", "HSET h f w", ("TTL h", "ttl"), "HSET h g x",
        "HGETALL h", "HSET gone f v", "PEXPIRE gone 1", "DEBUG SLEEP 0.01", "HSET gone g w",
        "HGETALL gone", "HSET w f v", "WATCH w", "HSET w f v2", "MULTI", "HGET w f", "EXEC",
        "WATCH other", "HSET w f v3", "MULTI", "HGET w f", "EXEC", "WATCH w", "HSET w f v3",
        "MULTI", "HGET w f", "EXEC"]),
]

LIST_CASES = [
    Case("push replies", [
        "LPUSH l a", "LPUSH l b", "LPUSH l c d e", "RPUSH l f", "RPUSH l g h", "LRANGE l 0 -1",
        "LPUSH l", "RPUSH l", "SET s x", "LPUSH s a", "RPUSH s a", "HSET h f v", "LPUSH h a",
        "OBJECT ENCODING l", "LLEN l", "LPUSHX l z", "RPUSHX nol z", "LRANGE l 0 -1"]),
    Case("push with TTLs and WATCH", [
        "RPUSH l a", "EXPIRE l 100", "LPUSH l b", ("TTL l", "ttl"), "RPUSH l c",
        "LRANGE l 0 -1", "RPUSH gone a", "PEXPIRE gone 1", "DEBUG SLEEP 0.01", "LPUSH gone b",
        "LRANGE gone 0 -1", "PERSIST l", "RPUSH w a", "WATCH w", "LPUSH w b", "MULTI",
        "LLEN w", "EXEC", "WATCH w", "RPUSH w c", "MULTI", "LLEN w", "EXEC", "WATCH other",
        "RPUSH w d", "MULTI", "LLEN w", "EXEC", "LRANGE w 0 -1"]),
]


@pytest.mark.parametrize("proto", [2, 3])
def test_pushes_match_redis(diff_pair: Pair, proto: int) -> None:
    problems = check_cases(diff_pair, LIST_CASES, proto)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("proto", [2, 3])
def test_counters_match_redis(diff_pair: Pair, proto: int) -> None:
    problems = check_cases(diff_pair, COUNTER_CASES, proto)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("proto", [2, 3])
def test_hset_matches_redis(diff_pair: Pair, proto: int) -> None:
    problems = check_cases(diff_pair, HASH_CASES, proto)
    assert not problems, "\n".join(problems)


def _pipelined(conn: RawClient, lines: list[str]) -> list[bytes]:
    conn.send_raw(b"".join(_encode(split_line(line)) for line in lines))
    return [conn.read() for _ in lines]


def _encode(argv: list[bytes]) -> bytes:
    return b"*%d\r\n" % len(argv) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in argv)


PIPELINED = [
    "INCR c", "INCR c", "INCR c", "DECR c", "INCRBY c 10", "GET c", "SET c 09", "INCR c",
    "SET c 41", "INCR c", "LPUSH l x", "INCR l", "INCR c", "HSET h f 1", "HSET h f 2",
    "HSET h g 3", "HSET h f", "HSET l f v", "HGETALL h", "SET t 1 EX 100", "INCR c", "INCR t",
    "HSET h f 4", "WATCH c", "INCR c", "MULTI", "INCR c", "HSET h f 5", "EXEC", "UNWATCH",
    "MULTI", "INCR c", "HSET h z 6", "EXEC", "HGETALL h", "GET c", "OBJECT ENCODING c",
]


def test_pipelined_batch_matches_redis(diff_pair: Pair) -> None:
    ours, real = diff_pair.connect()
    try:
        got, want = _pipelined(ours, PIPELINED), _pipelined(real, PIPELINED)
    finally:
        ours.close()
        real.close()
    problems = [f"{line!r}: {show_difference(o, r)}"
                for line, o, r in zip(PIPELINED, got, want, strict=True) if o != r]
    assert not problems, "\n".join(problems)


NOTIFIED = ["RPUSH l a", "LPUSH l b", "RPUSH l c d", "LPUSH l e f", "INCR k", "INCR k", "DECR k", "INCRBY k 5", "DECRBY k 2", "HSET h f v",
            "HSET h f w", "HSET h g x", "HSET h a 1 b 2", "HMSET h c 3", "SET x 1 EX 100",
            "INCR x", "INCR wrong", "SET wrong abc", "INCR wrong", "HSET wrong f v",
            "LPUSH wrong a"]


def _events(pair: Pair, port: int, lines: list[str] = NOTIFIED, flags: bytes = b"KEA") -> bytes:
    """Raw messages a pattern subscriber gets while ``lines`` run (events ``flags`` on)."""
    cmd = RawClient(port)
    sub = RawClient(port)
    try:
        cmd.call(b"FLUSHALL")
        cmd.call(b"CONFIG", b"SET", b"notify-keyspace-events", flags)
        sub.call(b"PSUBSCRIBE", b"__key*@0__:*")
        for line in lines:
            cmd.call(*split_line(line))
        cmd.call(b"CONFIG", b"SET", b"notify-keyspace-events", b"")
        cmd.call(b"SET", b"end", b"1")  # not notified: marks the end of the stream
        msgs = []
        # one keyspace + one keyevent message per event; stop at the first quiet read
        while True:
            try:
                msgs.append(sub.read(timeout_s=0.5))
            except TimeoutError:
                break
        return b"".join(msgs)
    finally:
        cmd.call(b"CONFIG", b"SET", b"notify-keyspace-events", b"")
        cmd.close()
        sub.close()


def test_keyspace_events_match_redis(diff_pair: Pair) -> None:
    ours = _events(diff_pair, diff_pair.ours_port)
    real = _events(diff_pair, diff_pair.real_port)
    assert real.count(b"pmessage") >= 2 * 12, real  # the real server did notify
    assert ours == real, show_difference(ours, real)


# Read lookups that miss (keymiss, class "m"), hits, writes to missing keys (no keymiss: a
# write lookup) and OBJECT (a lookup without events in Redis).
KEYMISS_LINES = [
    "GET nokey", "SET k v", "GET k", "TYPE nokey", "TYPE k", "MGET k nokey2 nokey3",
    "STRLEN nokey", "GETRANGE nokey 0 1",
    "EXISTS nokey k", "TTL nokey", "PTTL k", "OBJECT ENCODING nokey", "DUMP nokey",
    "HGET noh f", "HGETALL noh", "LRANGE nol 0 -1", "LINDEX nol 0", "SMEMBERS nos",
    "SISMEMBER nos m", "ZSCORE noz m", "ZRANGE noz 0 -1", "GETBIT nob 1", "BITCOUNT nob",
    "INCR newc", "HSET newh f v", "LPUSH newl a", "APPEND news x", "DEL nokey", "GETDEL nokey",
    "SET t 1 PX 1", "DEBUG SLEEP 0.01", "GET t", "SUNION nos nos2", "COPY nokey dst",
    "SELECT 1", "GET nokey", "SELECT 0",
]


def test_keymiss_events_match_redis(diff_pair: Pair) -> None:
    ours = _events(diff_pair, diff_pair.ours_port, KEYMISS_LINES, b"KEm")
    real = _events(diff_pair, diff_pair.real_port, KEYMISS_LINES, b"KEm")
    assert real.count(b"keymiss") >= 2 * 10, real  # the real server did notify
    assert ours == real, show_difference(ours, real)
    # with "m" off there is no keymiss at all
    ours = _events(diff_pair, diff_pair.ours_port, KEYMISS_LINES, b"KEA")
    real = _events(diff_pair, diff_pair.real_port, KEYMISS_LINES, b"KEA")
    assert b"keymiss" not in real
    assert ours == real, show_difference(ours, real)


def _dirty(conn: RawClient) -> int:
    info = conn.call(b"INFO", b"persistence").decode()
    for line in info.split("\r\n"):
        if line.startswith("rdb_changes_since_last_save:"):
            return int(line.split(":")[1])
    raise AssertionError(f"no rdb_changes_since_last_save in {info!r}")


DIRTY_LINES = ["INCR k", "INCR k", "DECRBY k 3", "SET k abc", "INCR k", "HSET h f v",
               "HSET h f w g x", "HSET h f w g x", "HMSET h a 1", "HSET h f", "LPUSH l a",
               "HSET l f v", "INCR l", "SET t 1 EX 100", "INCR t", "HSET h2 a 1", "LPUSH l b c",
               "RPUSH l d", "RPUSH l e f g", "LPUSH k x"]


def test_dirty_counter_matches_redis(diff_pair: Pair) -> None:
    ours, real = diff_pair.connect()
    try:
        deltas = []
        for conn in (ours, real):
            before = _dirty(conn)
            for line in DIRTY_LINES:
                conn.call(*split_line(line))
            deltas.append(_dirty(conn) - before)
    finally:
        ours.close()
        real.close()
    assert deltas[1] > 0
    assert deltas[0] == deltas[1], f"ours {deltas[0]} vs real {deltas[1]}"


def _stats(conn: RawClient) -> tuple[int, int]:
    info = conn.call(b"INFO", b"stats").decode()
    fields = dict(line.split(":", 1) for line in info.split("\r\n") if ":" in line)
    return int(fields["keyspace_hits"]), int(fields["keyspace_misses"])


HIT_LINES = ["GET nokey", "SET k v", "GET k", "GET k", "GET nokey", "TYPE nokey", "TYPE k",
             "LPUSH l a", "GET l",
             "INCR c", "GET c", "SET t 1 EX 100", "GET t", "GET k", "GET nokey2",
             "SET gone 1 PX 1", "DEBUG SLEEP 0.01", "GET gone", "PERSIST t", "GET t"]


def test_get_hit_and_miss_counts_match_redis(diff_pair: Pair) -> None:
    ours, real = diff_pair.connect()
    try:
        deltas = []
        for conn in (ours, real):
            hits0, misses0 = _stats(conn)
            for line in HIT_LINES:
                conn.call(*split_line(line))
            hits1, misses1 = _stats(conn)
            deltas.append((hits1 - hits0, misses1 - misses0))
    finally:
        ours.close()
        real.close()
    assert deltas[1][0] > 0 and deltas[1][1] > 0
    assert deltas[0] == deltas[1], f"(hits, misses) ours {deltas[0]} vs real {deltas[1]}"


# Runs of one command in a pipeline, broken by other commands, errors, the slow path and
# INFO itself (which must see every command before it counted, as in Redis).
STATS_PIPELINE = [
    "CONFIG RESETSTAT", "INCR c", "INCR c", "INCR c", "INFO commandstats", "GET c", "GET c",
    "INFO commandstats", "INFO commandstats", "SET s abc", "INCR s", "INCR s", "INCR c",
    "INFO stats", "MULTI", "INCR c", "EXEC", "INCR c", "INFO commandstats", "HSET h f v",
    "HSET h g w", "INFO everything", "CONFIG RESETSTAT", "GET c", "INFO commandstats",
]


def _counts(reply: bytes) -> list[str]:
    """The parts of an INFO reply that do not depend on timing: per-command calls and
    failed/rejected counts, total_commands_processed (sorted: the order of the commandstats
    lines is not compared here)."""
    text = reply.decode()
    kept = []
    for line in text.split("\r\n"):
        if line.startswith("cmdstat_"):
            name, fields = line.split(":", 1)
            parts = dict(f.split("=", 1) for f in fields.split(","))
            kept.append(f"{name} calls={parts['calls']} rejected={parts['rejected_calls']} "
                        f"failed={parts['failed_calls']}")
        elif line.startswith("total_commands_processed:"):
            kept.append(line)
    return sorted(kept)


def test_pipelined_command_stats_match_redis(diff_pair: Pair) -> None:
    ours, real = diff_pair.connect()
    try:
        got, want = _pipelined(ours, STATS_PIPELINE), _pipelined(real, STATS_PIPELINE)
        # Runs that end with the write (no INFO after them in it), counted by a later INFO.
        tail = ["INCR c"] * 5 + ["HSET h f x"] * 3 + ["GET nokey"] * 2
        _pipelined(ours, tail), _pipelined(real, tail)
        after = _pipelined(ours, ["INFO commandstats"]), _pipelined(real, ["INFO commandstats"])
        # the latency histograms of those runs: every call in one (a run counts its
        # sub-microsecond calls once, when it ends)
        picked = [_parse(c.call("LATENCY", "HISTOGRAM", "incr", "hset", "get"))
                  for c in (ours, real)]
    finally:
        ours.close()
        real.close()
    for reply in picked:
        assert isinstance(reply, list)
        by_name = {reply[i]: reply[i + 1] for i in range(0, len(reply), 2)}
        assert {name: (v[1], v[3][-1]) for name, v in by_name.items()} == {
            b"incr": (5, 5), b"hset": (3, 3), b"get": (3, 3)}, by_name
    infos = [i for i, line in enumerate(STATS_PIPELINE) if line.startswith("INFO")]
    assert any("cmdstat_incr calls=3" in s for s in _counts(want[infos[0]]))
    problems = [f"{STATS_PIPELINE[i]!r} (#{i}): ours {_counts(got[i])} vs real {_counts(want[i])}"
                for i in infos if _counts(got[i]) != _counts(want[i])]
    assert not problems, "\n".join(problems)
    assert _counts(after[0][0]) == _counts(after[1][0])


# HDEL, SREM and ZREM: some members, none, and the last one (the key goes, with "del").
REMOVALS = ["HSET h a 1 b 2", "HDEL h a nope", "HDEL h b", "HDEL h b", "SADD s x y z",
            "SREM s x nope", "SREM s y z", "ZADD z 1 a 2 b", "ZREM z a", "ZREM z nope",
            "ZREM z b nope", "HDEL noh f", "SREM nos m", "ZREM noz m"]

REMOVAL_CASES = [
    Case("removals and WATCH", [
        "HSET h a 1", "WATCH h", "HDEL h a", "MULTI", "PING", "EXEC",
        "SADD s x", "WATCH s", "SREM s x", "MULTI", "PING", "EXEC",
        "ZADD z 1 a 2 b", "WATCH z", "ZREM z a", "MULTI", "PING", "EXEC",
        "WATCH z", "ZREM z nope", "MULTI", "PING", "EXEC",
        "WATCH z", "ZREM z b", "MULTI", "PING", "EXEC",
        "ZADD z 1 a", "PEXPIRE z 1", "DEBUG SLEEP 0.01", "WATCH z", "ZADD z 1 a", "ZREM z a",
        "MULTI", "PING", "EXEC", "DBSIZE"]),
]


def test_member_removals_match_redis(diff_pair: Pair) -> None:
    ours = _events(diff_pair, diff_pair.ours_port, REMOVALS)
    real = _events(diff_pair, diff_pair.real_port, REMOVALS)
    assert real.count(b"pmessage") >= 2 * 9, real  # the real server did notify
    assert ours == real, show_difference(ours, real)
    problems = check_cases(diff_pair, REMOVAL_CASES, 2)
    assert not problems, "\n".join(problems)
