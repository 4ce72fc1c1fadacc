"""INFO's combining rules over the masters (front/info.py), on fixed texts: pure functions."""

from __future__ import annotations

from slotgate.proxy.front import info


def _parts(*texts: bytes) -> list[info.Fields]:
    return [list(info._sections(t).values())[0] for t in texts]


def test_memory_sums_integers_and_recomputes_human() -> None:
    a = b"# Memory\r\nused_memory:1024\r\nused_memory_human:1.00K\r\nmem_fragmentation_ratio:1.5\r\n"\
        b"maxmemory_policy:noeviction\r\n"
    b = b"# Memory\r\nused_memory:2097152\r\nused_memory_human:2.00M\r\n"\
        b"mem_fragmentation_ratio:3.0\r\nmaxmemory_policy:noeviction\r\n"
    assert info._memory(_parts(a, b)) == [
        (b"used_memory", b"2098176"), (b"used_memory_human", b"2.00M"),
        (b"mem_fragmentation_ratio", b"1.5"), (b"maxmemory_policy", b"noeviction")]


def test_persistence_rules() -> None:
    a = b"# Persistence\r\nloading:0\r\nrdb_changes_since_last_save:3\r\n"\
        b"rdb_bgsave_in_progress:0\r\nrdb_last_save_time:200\r\nrdb_last_bgsave_status:ok\r\n"\
        b"rdb_last_bgsave_time_sec:-1\r\ncurrent_fork_perc:0.00\r\n"
    b = b"# Persistence\r\nloading:1\r\nrdb_changes_since_last_save:4\r\n"\
        b"rdb_bgsave_in_progress:1\r\nrdb_last_save_time:100\r\nrdb_last_bgsave_status:err\r\n"\
        b"rdb_last_bgsave_time_sec:2\r\ncurrent_fork_perc:5.00\r\n"
    assert info._combine(_parts(a, b), info._persistence_rule) == [
        (b"loading", b"1"), (b"rdb_changes_since_last_save", b"7"),
        (b"rdb_bgsave_in_progress", b"1"), (b"rdb_last_save_time", b"100"),
        (b"rdb_last_bgsave_status", b"err"), (b"rdb_last_bgsave_time_sec", b"2"),
        (b"current_fork_perc", b"0.00")]


def test_keyspace_sums_and_weights_avg_ttl() -> None:
    a = b"# Keyspace\r\ndb0:keys=10,expires=2,avg_ttl=100\r\n"
    b = b"# Keyspace\r\ndb0:keys=30,expires=1,avg_ttl=0\r\ndb1:keys=1,expires=0,avg_ttl=0\r\n"
    c = b"# Keyspace\r\ndb0:keys=10,expires=1,avg_ttl=400\r\n"
    assert info._keyspace(_parts(a, b, c)) == [
        (b"db0", b"keys=50,expires=4,avg_ttl=250"), (b"db1", b"keys=1,expires=0,avg_ttl=0")]


def test_human_as_redis() -> None:
    assert [info._human(n) for n in (0, 1023, 1024, 990632, 12107776, 25276063744)] == [
        b"0B", b"1023B", b"1.00K", b"967.41K", b"11.55M", b"23.54G"]


def _own(index: int, pid: int, echo_calls: int) -> info.Own:
    return info.Own(index, pid, 10 + index, b"r%d" % index, [2, 1, 0], [5, 40, 7, 1],
                    {b"echo": [echo_calls, 100, 1, 0], b"client|list": [1, 50, 0, 0]},
                    {b"WRONGTYPE": 2}, {b"tracking_total_keys": 3},
                    {"echo": [0, 3, 1]}, [0.5, 1.25, 0.0, 0.0, 0.5, 1.0])


def test_workers_facts_travel_and_sum() -> None:
    """With workers: each worker's Own survives its encoding; the combination sums every
    counter (usec_per_call recomputed) and keeps the lowest-indexed worker's identity."""
    one, two = _own(1, 200, 3), _own(0, 100, 5)
    assert info.decode(one.encode()) == one
    total = info.combined(one, [info.decode(two.encode()) or two])
    assert (total.index, total.pid, total.uptime_s, total.run_id) == (0, 100, 10, b"r0")
    assert (total.counts, total.stats) == ([4, 2, 0], [10, 80, 14, 2])
    assert total.commands == {b"echo": [8, 200, 2, 0], b"client|list": [2, 100, 0, 0]}
    assert info._commandstats(total)[0] == (
        b"cmdstat_echo", b"calls=8,usec=200,usec_per_call=25.00,rejected_calls=2,failed_calls=0")
    assert total.errors == {b"WRONGTYPE": 4} and total.tracking == {b"tracking_total_keys": 6}
    assert total.latency == {"echo": [0, 6, 2]} and total.cpu == [1.0, 2.5, 0.0, 0.0, 1.0, 2.0]


def test_a_bad_workers_answer_is_skipped() -> None:
    assert info.decode(b"") is None
    assert info.decode(b"x y z") is None
    good = _own(1, 200, 3).encode()
    garbled = info.decode(good + b"\nc echo 1 x 2 3\ne\nu 1 2\nl echo 1,a\nzz")
    assert garbled is not None and garbled.commands[b"echo"] == [3, 100, 1, 0]
