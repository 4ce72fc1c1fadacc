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
