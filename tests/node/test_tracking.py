"""Client-side caching on our node only: redis-py's RESP3 cache under concurrent writers,
invalidations for the ways a key changes that need more than one server (MIGRATE, RESTORE),
``tracking-table-max-keys``, and the INFO fields."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.cache import CacheConfig
from redis.connection import CacheProxyConnection

from tests.support import RawClient, running, slotgate_node, wait_until

WRITERS = 20
KEYS = 200


@pytest.fixture(scope="module")
def node_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    proc = slotgate_node(tmp_path_factory.mktemp("tracking"))
    with running(proc):
        yield proc.port


def _get_calls(plain: redis.Redis) -> int:
    return int(plain.info("commandstats").get("cmdstat_get", {}).get("calls", 0))


def test_redis_py_cache_serves_locally_and_sees_every_invalidation(
        node_port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # redis-py 8 turns its cache on only for servers reporting 7.4+ (a product policy: what it
    # uses, CLIENT TRACKING ON and RESP3 invalidate pushes, is 7.0's); our node reports 7.0.15.
    monkeypatch.setattr(CacheProxyConnection, "MIN_ALLOWED_VERSION", "7.0.0")
    plain = redis.Redis(port=node_port)
    plain.flushall()
    keys = [f"key:{i}" for i in range(KEYS)]
    plain.mset({k: "0" for k in keys})
    cached = redis.Redis(port=node_port, protocol=3, cache_config=CacheConfig(max_size=10_000),
                         single_connection_client=True)
    try:
        for k in keys:
            assert cached.get(k) == b"0"
        calls = _get_calls(plain)
        for _ in range(3):  # repeated reads: served from the local cache
            for k in keys:
                assert cached.get(k) == b"0"
        assert _get_calls(plain) == calls
        assert cached.get_cache().size >= KEYS

        stop = threading.Event()
        errors: list[BaseException] = []

        def writer(seed: int) -> None:
            rnd = random.Random(seed)
            conn = redis.Redis(port=node_port)
            try:
                for n in range(300):
                    conn.set(rnd.choice(keys), f"{seed}:{n}")
            except BaseException as e:  # noqa: BLE001 - reported by the test
                errors.append(e)
            finally:
                conn.close()

        def reader() -> None:
            rnd = random.Random(99)
            try:
                while not stop.is_set():
                    cached.get(rnd.choice(keys))
            except BaseException as e:  # noqa: BLE001 - reported by the test
                errors.append(e)

        threads = [threading.Thread(target=writer, args=(i,)) for i in range(WRITERS)]
        reading = threading.Thread(target=reader)
        reading.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        stop.set()
        reading.join(timeout=30)
        assert not errors
        truth = dict(zip(keys, plain.mget(keys), strict=True))

        def all_fresh() -> bool:
            return all(cached.get(k) == truth[k] for k in keys)

        wait_until(all_fresh, timeout_s=10)  # the last invalidations may still be on the way
        calls = _get_calls(plain)
        for k in keys:  # ... and once fresh, served locally again
            assert cached.get(k) == truth[k]
        assert _get_calls(plain) == calls
    finally:
        cached.close()
        plain.close()


def _push(conn: RawClient) -> bytes:
    return conn.read(timeout_s=5)


def test_restore_and_migrate_invalidate(node_port: int, tmp_path: Path) -> None:
    other = slotgate_node(tmp_path)
    with running(other), RawClient(node_port) as t, RawClient(node_port) as w:
        w.call("FLUSHALL")
        t.call("HELLO", "3")
        t.call("CLIENT", "TRACKING", "ON")
        w.call("SET", "src", "v")
        dump = w.call("DUMP", "src")
        payload = dump[dump.index(b"\r\n") + 2:-2]
        t.call("GET", "dst")
        assert w.call("RESTORE", "dst", "0", payload) == b"+OK\r\n"
        assert _push(t) == b">2\r\n$10\r\ninvalidate\r\n*1\r\n$3\r\ndst\r\n"
        t.call("GET", "src")
        assert w.call("MIGRATE", "127.0.0.1", str(other.port), "src", "0", "5000") == b"+OK\r\n"
        assert _push(t) == b">2\r\n$10\r\ninvalidate\r\n*1\r\n$3\r\nsrc\r\n"


def test_table_max_keys_evicts_with_invalidations(node_port: int) -> None:
    with RawClient(node_port) as t, RawClient(node_port) as admin:
        admin.call("FLUSHALL")
        t.call("HELLO", "3")
        t.call("CLIENT", "TRACKING", "ON")
        admin.call("CONFIG", "SET", "tracking-table-max-keys", "10")
        try:
            for i in range(30):
                t.send("GET", f"k{i}")
            frames = [_push(t) for _ in range(50)]  # 30 replies, 20 invalidations, mixed
            pushes = [f for f in frames if f.startswith(b">")]
            assert frames.count(b"_\r\n") == 30 and len(pushes) == 20
            assert all(p.startswith(b">2\r\n$10\r\ninvalidate\r\n*1\r\n") for p in pushes)
            info = admin.call("INFO", "stats")
            assert b"tracking_total_keys:10\r\n" in info
            assert b"tracking_total_items:10\r\n" in info
            assert b"tracking_clients:1\r\n" in admin.call("INFO", "clients")
        finally:
            admin.call("CONFIG", "SET", "tracking-table-max-keys", "1000000")


def test_client_list_fields(node_port: int) -> None:
    with RawClient(node_port) as a, RawClient(node_port) as b:
        aid, bid = a.call("CLIENT", "ID")[1:-2], b.call("CLIENT", "ID")[1:-2]
        b.call("CLIENT", "NO-EVICT", "on")
        b.call("CLIENT", "TRACKING", "ON", "BCAST", "REDIRECT", aid)
        a.call("MULTI")
        a.call("SET", "k", "12345")
        own = b.call("CLIENT", "LIST", "ID", bid)
        assert b" flags=tBe " in own and b" redir=" + aid + b" " in own
        # the running CLIENT LIST: still in the query buffer and argv, as in Redis
        size = len(b"*4\r\n$6\r\nCLIENT\r\n$4\r\nLIST\r\n$2\r\nID\r\n") + 4 + len(bid) + 2
        assert b" qbuf=%d " % (size + len(str(len(bid))) - 1) in own
        assert b" argv-mem=%d " % (6 + 4 + 2 + len(bid)) in own
        other = b.call("CLIENT", "LIST", "ID", aid)
        assert b" flags=x " in other and b" multi-mem=9 " in other  # SET k 12345 queued
        assert b" argv-mem=0 " in other and b" redir=-1 " in other
        a.call("DISCARD")


def test_pause_holds_no_replication_link(node_port: int, tmp_path: Path) -> None:
    """A replica paused for writes still applies its master's stream; a paused master's
    replica link keeps acknowledging (its REPLCONF ACKs are not held)."""
    replica = slotgate_node(tmp_path)
    with running(replica):
        m, r = redis.Redis(port=node_port), redis.Redis(port=replica.port)
        try:
            m.flushall()
            r.execute_command("REPLICAOF", "127.0.0.1", node_port)
            wait_until(lambda: r.info("replication").get("master_link_status") == "up",
                       what="replica link up")
            r.execute_command("CLIENT", "PAUSE", "20000", "WRITE")
            m.set("during", "pause")
            wait_until(lambda: r.get("during") == b"pause", what="applied while paused")
            m.execute_command("CLIENT", "PAUSE", "20000", "WRITE")
            time.sleep(2.5)
            lags = [v["lag"] for k, v in m.info("replication").items() if k.startswith("slave")]
            assert lags and max(lags) <= 1
        finally:
            m.execute_command("CLIENT", "UNPAUSE")
            r.execute_command("CLIENT", "UNPAUSE")
            r.execute_command("REPLICAOF", "NO", "ONE")
            m.close()
            r.close()
