"""Persistence with real node processes: AOF (kill -9 safety, truncated tail, rewrite),
snapshots (SAVE/BGSAVE/save points/LASTSAVE, corruption), restart recovery, INFO fields."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from tests.support import ManagedProcess, redis_server, slotgate_node, wait_until


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Callable[..., ManagedProcess]]:
    started: list[ManagedProcess] = []

    def make(*extra: str, port: int | None = None) -> ManagedProcess:
        p = slotgate_node(tmp_path, port=port, extra=list(extra))
        started.append(p)
        return p

    try:
        yield make
    finally:
        for p in started:
            p.stop()


def restart(proc: ManagedProcess) -> ManagedProcess:
    """The same node (port, dir, arguments) started again."""
    return ManagedProcess(proc.argv, proc.port, proc.cwd, "node.log").start()


def refused(proc: ManagedProcess) -> str:
    """The same node started again exits with status 1: it listens first and then fails to
    load, as redis-server does (or exits before it listens). Its log."""
    again = ManagedProcess(proc.argv, proc.port, proc.cwd, "node.log")
    try:
        again.start()
    except RuntimeError as exc:
        assert "exited" in str(exc)
        return again.log_text()
    try:
        assert again.proc is not None and again.proc.wait(timeout=20) == 1
    finally:
        again.stop()
    return again.log_text()


def aof_dir(proc: ManagedProcess) -> Path:
    return proc.cwd / "appendonlydir"


def manifest(proc: ManagedProcess) -> list[str]:
    return (aof_dir(proc) / "appendonly.aof.manifest").read_text().splitlines()


def test_acknowledged_writes_survive_kill9_with_appendfsync_always(
        node: Callable[..., ManagedProcess]) -> None:
    proc = node("--appendonly", "yes", "--appendfsync", "always").start()
    acked: list[int] = []
    stop = threading.Event()

    def writer() -> None:
        r = proc.client(socket_timeout=5)
        i = 0
        while not stop.is_set():
            try:
                r.set(f"k{i}", i)
                r.incr("counter")
            except (redis.ConnectionError, redis.TimeoutError):
                return
            acked.append(i)
            i += 1

    t = threading.Thread(target=writer)
    t.start()
    wait_until(lambda: len(acked) >= 300, what="writes acknowledged")
    proc.kill()  # kill -9 while the writer is mid-stream
    stop.set()
    t.join(10)
    assert acked
    again = restart(proc)
    try:
        r = again.client()
        vals = r.mget([f"k{i}" for i in acked])
        missing = [i for i, v in zip(acked, vals, strict=True) if v != str(i).encode()]
        assert missing == [], f"{len(missing)} acknowledged writes lost"
        assert int(r.get("counter") or 0) >= len(acked)
    finally:
        again.stop()


def test_truncated_tail_is_cut_and_loaded(node: Callable[..., ManagedProcess]) -> None:
    proc = node("--appendonly", "yes").start()
    r = proc.client()
    for i in range(10):
        r.set(f"k{i}", i)
    r.rpush("l", "a", "b")
    proc.stop()
    incr = aof_dir(proc) / manifest(proc)[-1].split()[1]
    good_size = incr.stat().st_size
    with open(incr, "ab") as f:  # a crash in the middle of writing a command
        f.write(b"*3\r\n$3\r\nSET\r\n$2\r\nk1")
    again = restart(proc)
    try:
        r = again.client()
        assert r.mget([f"k{i}" for i in range(10)]) == [str(i).encode() for i in range(10)]
        assert r.lrange("l", 0, -1) == [b"a", b"b"]
        assert incr.stat().st_size == good_size
        assert "short read while loading the AOF" in again.log_text()
        r.set("after", "1")
    finally:
        again.stop()
    # The file is whole again: a plain restart loads everything including the new write.
    third = restart(proc)
    try:
        assert third.client().get("after") == b"1"
    finally:
        third.stop()


def test_truncated_tail_refused_when_aof_load_truncated_no(
        node: Callable[..., ManagedProcess]) -> None:
    proc = node("--appendonly", "yes", "--aof-load-truncated", "no").start()
    proc.client().set("k", "v")
    proc.stop()
    incr = aof_dir(proc) / manifest(proc)[-1].split()[1]
    with open(incr, "ab") as f:
        f.write(b"*2\r\n$3\r\nGET")
    assert "Unexpected end of file reading the append only file" in refused(proc)


def test_unfinished_multi_is_dropped(node: Callable[..., ManagedProcess]) -> None:
    proc = node("--appendonly", "yes").start()
    proc.client().set("k", "v")
    proc.stop()
    incr = aof_dir(proc) / manifest(proc)[-1].split()[1]
    with open(incr, "ab") as f:
        f.write(b"*1\r\n$5\r\nMULTI\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$3\r\nnew\r\n")
    again = restart(proc)
    try:
        assert again.client().get("k") == b"v"
    finally:
        again.stop()


def test_bgrewriteaof_replaces_files_and_restores(node: Callable[..., ManagedProcess]) -> None:
    proc = node("--appendonly", "yes").start()
    r = proc.client()
    for i in range(200):
        r.set("overwritten", i)
    r.hset("h", mapping={"a": "1", "b": "2"})
    r.set("ttl", "v", px=100_000)
    before = manifest(proc)
    assert r.bgrewriteaof()
    wait_until(lambda: r.info("persistence")["aof_rewrites"] == 1, what="rewrite done")
    after = manifest(proc)
    assert after[0].endswith("type b") and ".base.rdb" in after[0] and len(after) == 2
    names = {line.split()[1] for line in after}
    assert {p.name for p in aof_dir(proc).iterdir()} == names | {"appendonly.aof.manifest"}
    assert after != before
    r.set("post-rewrite", "1")
    proc.stop()
    again = restart(proc)
    try:
        r2 = again.client()
        assert r2.get("overwritten") == b"199"
        assert r2.hgetall("h") == {b"a": b"1", b"b": b"2"}
        assert 0 < r2.pttl("ttl") <= 100_000
        assert r2.get("post-rewrite") == b"1"
    finally:
        again.stop()


def test_automatic_rewrite_on_growth(node: Callable[..., ManagedProcess]) -> None:
    proc = node("--appendonly", "yes", "--auto-aof-rewrite-min-size", "20kb",
                "--auto-aof-rewrite-percentage", "100").start()
    r = proc.client()
    pipe = r.pipeline(transaction=False)
    for i in range(400):
        pipe.set("same-key", "x" * 100 + str(i))
    pipe.execute()
    wait_until(lambda: r.info("persistence")["aof_rewrites"] >= 1, what="automatic rewrite")
    wait_until(lambda: r.info("persistence")["aof_rewrite_in_progress"] == 0)
    assert r.info("persistence")["aof_current_size"] < 20 * 1024


def test_snapshot_save_bgsave_restart(node: Callable[..., ManagedProcess]) -> None:
    proc = node().start()
    r = proc.client()
    r.set("s", "v")
    r.set("ttl", "v", px=100_000)
    r.rpush("l", "1", "2")
    r.sadd("set", "a", "b")
    redis.Redis(host="127.0.0.1", port=proc.port, db=5).set("db5", "x")
    first = r.lastsave()
    wait_until(lambda: time.time() >= first.timestamp() + 1, 5, "a new second (LASTSAVE's unit)")
    assert r.save()
    assert r.lastsave() > first
    assert r.info("persistence")["rdb_changes_since_last_save"] == 0
    r.set("after-save", "1")
    assert r.bgsave()
    wait_until(lambda: r.info("persistence")["rdb_bgsave_in_progress"] == 0, what="bgsave done")
    assert r.info("persistence")["rdb_saves"] == 2
    assert (proc.cwd / "dump.rdb").exists()
    proc.kill()
    again = restart(proc)
    try:
        r2 = again.client()
        assert r2.get("s") == b"v" and r2.get("after-save") == b"1"
        assert 0 < r2.pttl("ttl") <= 100_000
        assert r2.lrange("l", 0, -1) == [b"1", b"2"] and r2.smembers("set") == {b"a", b"b"}
        assert redis.Redis(host="127.0.0.1", port=again.port, db=5).get("db5") == b"x"
        assert r2.info("persistence")["rdb_last_load_keys_loaded"] == 6
    finally:
        again.stop()


def test_corrupted_snapshot_is_refused(node: Callable[..., ManagedProcess]) -> None:
    proc = node().start()
    proc.client().set("k", "v" * 100)
    proc.client().save()
    proc.stop()
    path = proc.cwd / "dump.rdb"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    assert "Short read or bad snapshot file" in refused(proc)


def test_save_point_triggers_bgsave(node: Callable[..., ManagedProcess]) -> None:
    p = node()
    i = p.argv.index("--save")
    p.argv[i + 1] = "1 1"
    proc = p.start()
    r = proc.client()
    r.set("k", "v")
    wait_until(lambda: r.info("persistence")["rdb_saves"] >= 1, timeout_s=6, what="save point")
    assert r.info("persistence")["rdb_changes_since_last_save"] == 0


def test_aof_preferred_over_snapshot(node: Callable[..., ManagedProcess]) -> None:
    proc = node("--appendonly", "yes").start()
    r = proc.client()
    r.set("k", "from-snapshot")
    r.save()
    r.set("k", "from-aof")
    proc.kill()
    again = restart(proc)
    try:
        assert again.client().get("k") == b"from-aof"
    finally:
        again.stop()


def test_info_persistence_fields_match_real_redis(node: Callable[..., ManagedProcess],
                                                   tmp_path: Path) -> None:
    real = redis_server(tmp_path, extra=["--appendonly", "yes"]).start()
    try:
        ours = node("--appendonly", "yes").start()
        assert list(ours.client().info("persistence")) == list(real.client().info("persistence"))
        assert ours.client().config_set("appendonly", "no")
        real.client().config_set("appendonly", "no")
        assert list(ours.client().info("persistence")) == list(real.client().info("persistence"))
    finally:
        real.stop()


def test_config_set_appendonly_yes_at_runtime(node: Callable[..., ManagedProcess]) -> None:
    proc = node().start()
    r = proc.client()
    r.set("old", "1")
    assert r.config_set("appendonly", "yes")
    wait_until(lambda: r.info("persistence")["aof_rewrites"] == 1, what="base written")
    r.set("new", "2")
    proc.kill()
    proc.argv += ["--appendonly", "yes"]
    third = restart(proc)
    try:
        assert third.client().mget(["old", "new"]) == [b"1", b"2"]
    finally:
        third.stop()


@pytest.mark.parametrize("kind", ["ours", "real"])
def test_shutdown_nosave_and_save_points(kind: str, tmp_path: Path) -> None:
    """With save points set, SHUTDOWN saves and SHUTDOWN NOSAVE does not; SAVE with NOSAVE
    is a syntax error. Our node and redis-server, the same steps."""
    start = slotgate_node if kind == "ours" else redis_server
    proc = start(tmp_path, extra=["--save", "3600 1"]).start()
    try:
        c = proc.client()
        c.set("kept", "1")
        with pytest.raises(redis.ResponseError, match="syntax error"):
            c.execute_command("SHUTDOWN", "SAVE", "NOSAVE")
        with pytest.raises(redis.ConnectionError):
            c.execute_command("SHUTDOWN")  # saves: the save point is set
        _restart_after_exit(proc)
        c = proc.client()
        assert c.get("kept") == b"1"
        c.set("lost", "1")
        with pytest.raises(redis.ConnectionError):
            c.execute_command("SHUTDOWN", "NOSAVE")
        _restart_after_exit(proc)
        c = proc.client()
        assert (c.get("kept"), c.get("lost")) == (b"1", None)
    finally:
        proc.stop()


def _restart_after_exit(proc: ManagedProcess) -> None:
    assert proc.proc is not None
    assert proc.proc.wait(10) == 0
    proc.start()
