"""maxmemory on our node beside redis-server 7.0.15: the OOM refusal, eviction under every
policy, INFO evicted_keys, the `evicted` event, CLIENT PAUSE, and LRU keeping hot keys.

Each server's limit is set relative to its own `used_memory` at the start of the test (Redis'
baseline is about 1 MB, ours is the accounted keyspace only), a few hundred KB above it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.support import RawClient, node_and_redis, slotgate_node, wait_until

OOM = b"-OOM command not allowed when used memory > 'maxmemory'.\r\n"
VALUE = b"v" * 400
NAMES = ("ours", "real")


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, int]]:
    with node_and_redis(tmp_path_factory.mktemp("evict")) as procs:
        yield {name: p.port for name, p in procs.items()}


@pytest.fixture
def clients(servers: dict[str, int]) -> Iterator[dict[str, redis.Redis]]:
    cs = {name: redis.Redis(port=port) for name, port in servers.items()}
    for r in cs.values():
        r.config_set("maxmemory", 0)
        r.flushall()
        r.config_set("maxmemory-policy", "noeviction")
        r.config_resetstat()
    yield cs
    for r in cs.values():
        r.config_set("maxmemory", 0)
        r.config_set("maxmemory-policy", "noeviction")
        r.config_set("notify-keyspace-events", "")
        r.flushall()
        r.close()


def _used(r: redis.Redis) -> int:
    return int(r.info("memory")["used_memory"])


def _evicted(r: redis.Redis) -> int:
    return int(r.info("stats")["evicted_keys"])


def _cap(r: redis.Redis, extra_bytes: int, policy: str) -> int:
    limit = _used(r) + extra_bytes
    r.config_set("maxmemory-policy", policy)
    r.config_set("maxmemory", limit)
    return limit


def test_noeviction_refuses_denyoom_commands_as_redis(servers: dict[str, int],
                                                     clients: dict[str, redis.Redis]) -> None:
    seen: dict[str, list[bytes]] = {}
    for name in NAMES:
        r = clients[name]
        r.set("keep", "x")
        _cap(r, 100_000, "noeviction")
        raw = RawClient(servers[name])
        try:
            reply = b""
            for i in range(2000):  # about 500 bytes a key: full well before the end
                reply = raw.call("SET", f"k{i}", VALUE)
                if reply != b"+OK\r\n":
                    break
            assert reply == OOM, name
            r.config_set("maxmemory", 1)  # firmly over from here on (Redis' figure moves)
            seen[name] = [
                reply,
                raw.call("APPEND", "keep", "y"),  # deny-oom
                raw.call("GET", "keep"),  # not deny-oom: served
                raw.call("MULTI"), raw.call("GET", "keep"),  # anything queued is refused
                raw.call("EXEC"),
                raw.call("MULTI"), raw.call("DISCARD"),
            ]
            assert raw.call("HELLO", "3").startswith(b"%")
            seen[name].append(raw.call("LPUSH", "l", "a"))
            assert raw.call("DEL", "k0", "k1", "k2") == b":3\r\n"  # DEL is not deny-oom
            assert _evicted(r) == 0
        finally:
            raw.close()
    assert seen["ours"] == seen["real"]
    assert seen["ours"][1] == OOM and seen["ours"][2] == b"$1\r\nx\r\n"


@pytest.mark.parametrize("policy", ["allkeys-lru", "allkeys-lfu", "allkeys-random"])
def test_allkeys_policies_evict_and_stay_under_the_cap(clients: dict[str, redis.Redis],
                                                      policy: str) -> None:
    for name in NAMES:
        r = clients[name]
        limit = _cap(r, 200_000, policy)
        pipe = r.pipeline(transaction=False)
        for i in range(2000):  # about 1 MB of writes
            pipe.set(f"k{i}", VALUE)
        assert all(pipe.execute()), name  # never refused: keys were evicted instead
        assert _evicted(r) > 500, name
        assert 0 < r.dbsize() < 2000, name
        # the check runs before each command: one value over at most
        assert _used(r) <= limit + 2 * len(VALUE) + 1024, name


@pytest.mark.parametrize("policy", ["volatile-lru", "volatile-lfu", "volatile-random",
                                    "volatile-ttl"])
def test_volatile_policies_evict_only_keys_with_ttl(clients: dict[str, redis.Redis],
                                                   policy: str) -> None:
    for name in NAMES:
        r = clients[name]
        pipe = r.pipeline(transaction=False)
        for i in range(200):
            pipe.set(f"p{i}", VALUE)
        for i in range(200):  # k0 expires first, k199 last
            pipe.set(f"t{i}", VALUE, ex=1000 + i)
        pipe.execute()
        _cap(r, -50_000, policy)  # below what is stored: evict about 100 keys
        assert r.set("new", "x") is True, name
        assert _evicted(r) > 50, name
        assert all(r.exists(f"p{i}") for i in range(200)), name
        left = [i for i in range(200) if r.exists(f"t{i}")]
        assert len(left) < 200, name
        if policy == "volatile-ttl" and left:  # the nearest TTLs went first (sampled: mostly)
            gone = [i for i in range(200) if i not in left]
            assert sum(gone) / len(gone) < sum(left) / max(len(left), 1), name
        # nothing volatile left to evict: the write is refused
        r.config_set("maxmemory", 1)
        with pytest.raises(redis.exceptions.ResponseError, match="^command not allowed"):
            r.set("more", "x")
        assert r.exists("p0"), name


def test_evicted_event_and_stats(servers: dict[str, int],
                                 clients: dict[str, redis.Redis]) -> None:
    for name in NAMES:
        r = clients[name]
        r.config_set("notify-keyspace-events", "Ee")
        sub = r.pubsub()
        sub.subscribe("__keyevent@0__:evicted")
        assert sub.get_message(timeout=2)["type"] == "subscribe"
        for i in range(60):
            r.set(f"k{i}", VALUE)
        _cap(r, -10_000, "allkeys-random")
        try:
            r.set("x", "y")
        except redis.exceptions.OutOfMemoryError:
            # Redis counts the subscriber's unread notifications in used memory: it can evict
            # every key and still be over
            assert name == "real"
        msg = sub.get_message(timeout=2)
        assert msg is not None and msg["data"].startswith(b"k"), name
        assert _evicted(r) >= 1, name
        sub.close()


def test_client_pause_pauses_eviction(clients: dict[str, redis.Redis]) -> None:
    for name in NAMES:
        r = clients[name]
        for i in range(60):
            r.set(f"k{i}", VALUE)
        r.client_pause(5000, all=False)  # WRITE: reads are served
        _cap(r, -10_000, "allkeys-lru")
        assert r.get("k1") == VALUE
        assert r.dbsize() == 60 and _evicted(r) == 0, name
        r.client_unpause()
        r.get("k1")
        assert _evicted(r) > 0, name


def _hot_cold(r: redis.Redis) -> float:
    """Writes 20 hot keys, then rounds of cold writes each followed by reads of every hot key;
    the share of hot-key reads that hit."""
    limit_keys = 300
    hot = [f"hot{i}" for i in range(20)]
    for k in hot:
        r.set(k, VALUE)
    _cap(r, limit_keys * (len(VALUE) + 100), "allkeys-lru")
    hits = reads = 0
    n = 0
    for _ in range(8):
        pipe = r.pipeline(transaction=False)
        for _ in range(150):
            pipe.set(f"cold{n}", VALUE)
            n += 1
        pipe.execute()
        got = r.mget(hot)
        hits += sum(v is not None for v in got)
        reads += len(got)
        for k in hot:  # a miss is written back, as a cache would
            if r.get(k) is None:
                r.set(k, VALUE)
        time.sleep(0.35)  # the LRU clock has a one-second resolution
    return hits / reads


def test_hot_keys_mostly_survive_allkeys_lru(clients: dict[str, redis.Redis]) -> None:
    ratios = {name: _hot_cold(clients[name]) for name in NAMES}
    print(f"hot-key hit ratio: ours {ratios['ours']:.2f}, redis {ratios['real']:.2f}")
    assert _evicted(clients["ours"]) > 0
    assert ratios["ours"] >= 0.6
    assert ratios["ours"] >= ratios["real"] - 0.2


def test_evictions_reach_the_replica_as_del(tmp_path: Path) -> None:
    """A replica ignores maxmemory (replica-ignore-maxmemory yes) and drops what its master
    evicts, from the DEL the master sends."""
    master = slotgate_node(tmp_path, extra=["--maxmemory-policy", "allkeys-lru"]).start()
    replica = slotgate_node(tmp_path).start()
    try:
        m, r = master.client(), replica.client()
        assert r.execute_command("REPLICAOF", "127.0.0.1", master.port) == b"OK"
        wait_until(lambda: r.info("replication")["master_link_status"] == "up",
                   what="replica link up")
        m.config_set("maxmemory", 100_000)
        r.config_set("maxmemory", 1)  # ignored on a replica
        pipe = m.pipeline(transaction=False)
        for i in range(1000):
            pipe.set(f"k{i}", VALUE)
        pipe.execute()
        m.get("k0")  # the check runs before each command
        assert _evicted(m) > 0
        wait_until(lambda: r.dbsize() == m.dbsize(), what="replica drops the evicted keys")
        assert r.dbsize() < 1000 and _evicted(r) == 0
    finally:
        replica.stop()
        master.stop()
