"""MEMORY against redis-server 7.0.15, RESP2 and RESP3: HELP, errors, nil, PURGE, the
allocator text and the empty-instance doctor exactly; MEMORY USAGE exactly for the values
whose size Redis computes without randomness (our accounting mirrors objectComputeSize);
MEMORY STATS by field names, order and reply types."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.node.diff import Case, Pair, _parse, both, check_cases
from tests.support import RawClient, redis_server, slotgate_node, wait_until

_MEMBERS_1000 = " ".join(f"m{i}" for i in range(1000))
_PAIRS_1000 = " ".join(f"f{i} v{i}" for i in range(1000))
_LONG_ITEMS = " ".join("x" * 100 for _ in range(2000))

CASES = [
    Case("help, purge, doctor when empty", ["MEMORY HELP", "MEMORY PURGE", "MEMORY DOCTOR"]),
    Case("errors and arity", [
        "MEMORY", "MEMORY FOO", "MEMORY USAGE", "MEMORY STATS x", "MEMORY DOCTOR x",
        "MEMORY PURGE x", "MEMORY MALLOC-STATS x", "MEMORY HELP x", "MEMORY USAGE a b",
        "MEMORY USAGE a SAMPLES", "MEMORY USAGE a SAMPLES x", "MEMORY USAGE a SAMPLES -1",
        "MEMORY USAGE a samples 1 foo", "MEMORY USAGE a SAMPLES 99999999999999999999"]),
    Case("usage of a missing key, args checked first", [
        "MEMORY USAGE nokey", "MEMORY USAGE nokey SAMPLES 0", "SET k v", "MEMORY USAGE nokey x",
        "MEMORY USAGE k SAMPLES 3 SAMPLES 0"]),
    Case("usage of strings", [
        "SET k 12345", "MEMORY USAGE k", "SET k hello", "MEMORY USAGE k",
        "SET k " + "a" * 44, "MEMORY USAGE k", "SET k " + "a" * 45, "MEMORY USAGE k",
        "SET k " + "a" * 5000, "MEMORY USAGE k", "SET " + "K" * 40 + " v",
        "MEMORY USAGE " + "K" * 40, "SET k -9223372036854775808", "MEMORY USAGE k"]),
    Case("usage of lists", [
        "RPUSH l a b c", "MEMORY USAGE l",
        "RPUSH m " + " ".join(f"{i}" for i in range(3000)), "MEMORY USAGE m",
        "MEMORY USAGE m SAMPLES 0", "RPUSH n " + _LONG_ITEMS, "MEMORY USAGE n",
        "MEMORY USAGE n SAMPLES 0", "MEMORY USAGE n SAMPLES 1"]),
    Case("usage of hashes and sets", [
        "HSET h f1 v1 f2 v2", "MEMORY USAGE h", "HSET g " + _PAIRS_1000, "MEMORY USAGE g",
        "MEMORY USAGE g SAMPLES 0", "SADD s 1 2 3", "MEMORY USAGE s", "SADD s 70000",
        "MEMORY USAGE s", "SADD s 5000000000", "MEMORY USAGE s", "SADD t " + _MEMBERS_1000,
        "MEMORY USAGE t", "MEMORY USAGE t SAMPLES 0"]),
    Case("usage of a small sorted set and streams", [
        "ZADD z 1 a 2.5 b -3 c", "MEMORY USAGE z", "XADD x 1-1 f v", "MEMORY USAGE x",
        "XADD x 1-2 f v g w", "MEMORY USAGE x"]),
    Case("usage of empty streams", [
        "XGROUP CREATE e $ MKSTREAM", "MEMORY USAGE e", "XADD t 1-1 f v", "XTRIM t MAXLEN 0",
        "MEMORY USAGE t", "XADD d 1-1 f v", "XDEL d 1-1", "MEMORY USAGE d"]),
]


@pytest.mark.parametrize("proto", [2, 3])
def test_memory_exact(diff_pair: Pair, proto: int) -> None:
    assert check_cases(diff_pair, CASES, proto) == []


def _shape(v: object) -> object:
    """Names kept, numbers replaced by their type."""
    if isinstance(v, list):
        return [_shape(x) for x in v]
    if isinstance(v, dict):
        return [(k, _shape(x)) for k, x in v.items()]
    if isinstance(v, bytes):
        try:
            float(v)
        except ValueError:
            return v
        return "number-text"
    return type(v).__name__


@pytest.mark.parametrize("proto", ["2", "3"])
def test_memory_stats_shape(raw_pair: tuple[RawClient, RawClient], proto: str) -> None:
    both(raw_pair, "HELLO", proto)
    both(raw_pair, "FLUSHALL")
    empty = both(raw_pair, "MEMORY", "STATS")
    assert _shape(empty[0]) == _shape(empty[1])
    for i in range(50):
        both(raw_pair, "SET", f"k{i}", "v" * i)
    both(raw_pair, "EXPIRE", "k1", "100")
    both(raw_pair, "SELECT", "3")
    both(raw_pair, "SET", "other", "v")
    both(raw_pair, "SELECT", "0")
    ours, real = both(raw_pair, "MEMORY", "STATS")
    assert _shape(ours) == _shape(real)
    for reply in (ours, real):
        fields = dict(zip(reply[::2], reply[1::2], strict=True)) if isinstance(reply, list) \
            else reply
        assert isinstance(fields, dict)
        assert fields[b"keys.count"] == 51
        db0 = fields[b"db.0"]
        db0 = dict(zip(db0[::2], db0[1::2], strict=True)) if isinstance(db0, list) else db0
        # the keyspace tables: entries, buckets and the key objects, as Redis counts them
        assert db0[b"overhead.hashtable.main"] == 50 * 24 + 64 * 8 + 50 * 16
        assert db0[b"overhead.hashtable.expires"] == 24 + 4 * 8
    both(raw_pair, "FLUSHALL")
    both(raw_pair, "HELLO", "2")


@pytest.mark.parametrize("proto", ["2", "3"])
def test_malloc_stats_as_a_build_without_jemalloc(raw_pair: tuple[RawClient, RawClient],
                                                  proto: str) -> None:
    """redis-server built with libc malloc answers a plain bulk string in both protocols (the
    reference server has jemalloc and prints its report instead)."""
    ours, _ = raw_pair
    ours.call("HELLO", proto)
    assert ours.call("MEMORY", "MALLOC-STATS") == (
        b"$45\r\nStats not supported for the current allocator\r\n")
    ours.call("HELLO", "2")


def test_doctor_with_data(raw_pair: tuple[RawClient, RawClient]) -> None:
    """Past 5 MB of data neither server calls itself empty; ours has no finding (the issue
    detector's fragmentation and peak rules do not apply to it), Redis may have some."""
    both(raw_pair, "FLUSHALL")
    for i in range(60):
        both(raw_pair, "SET", f"big{i}", "x" * 100_000)
    ours, real = both(raw_pair, "MEMORY", "DOCTOR")
    assert ours == (b"Hi Sam, I can't find any memory issue in your instance. I can only account "
                    b"for what occurs on this base.\n")
    assert isinstance(real, bytes) and b"is empty" not in real
    both(raw_pair, "FLUSHALL")


def test_cluster_mode_counts_slot_links(tmp_path: Path) -> None:
    """In cluster mode every key carries 16 bytes of slot-list links: MEMORY USAGE adds them
    and MEMORY STATS reports them as overhead.hashtable.slot-to-keys, on both servers."""
    procs = [slotgate_node(tmp_path, cluster=True), redis_server(tmp_path, cluster=True)]
    try:
        for p in procs:
            p.start()
            with RawClient(p.port) as c:
                c.call("CLUSTER", "ADDSLOTSRANGE", "0", "16383")
                wait_until(lambda c=c: b"cluster_state:ok" in c.call("CLUSTER", "INFO"),
                           what="cluster state ok")
                assert c.call("SET", "s", "hello") == b"+OK\r\n"
                assert c.call("MEMORY", "USAGE", "s") == b":80\r\n"
                stats = _parse(c.call("MEMORY", "STATS"))
                assert isinstance(stats, list)
                db0 = stats[stats.index(b"db.0") + 1]
                assert db0 == [b"overhead.hashtable.main", 72, b"overhead.hashtable.expires", 0,
                               b"overhead.hashtable.slot-to-keys", 16]
    finally:
        for p in procs:
            p.stop()


def test_object_idletime_counts_seconds_since_access(raw_pair: tuple[RawClient, RawClient]) -> None:
    both(raw_pair, "FLUSHALL")
    both(raw_pair, "SET", "k", "v")
    both(raw_pair, "RPUSH", "l", "a")
    both(raw_pair, "HSET", "h", "f", "v")
    # counters: one INCR'd in a row (the value the INCR path stored last), one of plain digits
    # and one whose last digit carries; above 10,000, where Redis keeps no shared integer
    # objects (whose access clock every key holding that number shares)
    both(raw_pair, "SET", "n", "100005")
    both(raw_pair, "INCR", "n")
    both(raw_pair, "INCR", "n")
    both(raw_pair, "SET", "m", "200007")
    both(raw_pair, "SET", "q", "300019")
    assert both(raw_pair, "OBJECT", "IDLETIME", "k") == (0, 0)
    time.sleep(2.2)
    for key in ("k", "l", "h", "n", "m", "q"):
        ours, real = both(raw_pair, "OBJECT", "IDLETIME", key)
        assert isinstance(ours, int) and isinstance(real, int) and abs(ours - real) <= 1
        assert 1 <= ours <= 3
    dump = raw_pair[0].call("DUMP", "k")
    dump = dump[dump.index(b"\r\n") + 2:-2]
    for c in raw_pair:
        assert c.call("RESTORE", "r", "0", dump, "IDLETIME", "1000") == b"+OK\r\n"
    assert both(raw_pair, "OBJECT", "IDLETIME", "r") == (1000, 1000)
    both(raw_pair, "GET", "k")
    both(raw_pair, "RPUSH", "l", "b")
    both(raw_pair, "HSET", "h", "f", "w")
    for key in ("n", "m", "q"):
        both(raw_pair, "INCR", key)
    for key in ("k", "l", "h", "n", "m", "q"):
        assert both(raw_pair, "OBJECT", "IDLETIME", key) == (0, 0), key


def test_object_freq_under_lfu(raw_pair: tuple[RawClient, RawClient]) -> None:
    """With lfu-log-factor 0 every access adds one: the counter is deterministic."""
    both(raw_pair, "FLUSHALL")
    both(raw_pair, "CONFIG", "SET", "maxmemory-policy", "allkeys-lfu")
    both(raw_pair, "CONFIG", "SET", "lfu-log-factor", "0")
    time.sleep(0.3)  # the node applies the policy at its next cron tick
    try:
        both(raw_pair, "SET", "k", "v")
        assert both(raw_pair, "OBJECT", "FREQ", "k") == (5, 5)
        for _ in range(20):
            both(raw_pair, "GET", "k")
        assert both(raw_pair, "OBJECT", "FREQ", "k") == (25, 25)
        both(raw_pair, "SET", "k", "w")
        assert both(raw_pair, "OBJECT", "FREQ", "k") == (26, 26)
        both(raw_pair, "HSET", "h", "f", "v")
        both(raw_pair, "HGET", "h", "f")
        assert both(raw_pair, "OBJECT", "FREQ", "h") == (6, 6)
        both(raw_pair, "SET", "n", "100005")  # (no shared integer object: see above)
        for _ in range(3):  # the INCR path's own store (a counter INCR'd in a row)
            both(raw_pair, "INCR", "n")
        assert both(raw_pair, "OBJECT", "FREQ", "n") == (8, 8)
        both(raw_pair, "INCRBY", "n", "2")
        both(raw_pair, "DECR", "n")
        assert both(raw_pair, "OBJECT", "FREQ", "n") == (10, 10)
        ours = raw_pair[0]
        dump = ours.call("DUMP", "k")
        dump = dump[dump.index(b"\r\n") + 2:-2]
        for c in raw_pair:
            assert c.call("RESTORE", "r", "0", dump, "FREQ", "100") == b"+OK\r\n"
        assert both(raw_pair, "OBJECT", "FREQ", "r") == (100, 100)
    finally:
        both(raw_pair, "CONFIG", "SET", "maxmemory-policy", "noeviction")
        both(raw_pair, "CONFIG", "SET", "lfu-log-factor", "10")
        time.sleep(0.3)
