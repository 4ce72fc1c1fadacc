"""Issue 12's eviction figure: with ``maxmemory`` 50 MB and allkeys-lru, 500 MB of writes
(50,000 values of 10 KB, pipelined) leave the node under its cap, its process bounded, and the
hot keys of the workload mostly alive; real redis-server 7.0 runs the same workload in the same
test and both hit ratios are printed.

The bound on the process is stated against its start-up RSS: RSS may grow by at most
``RSS_GROWTH_CAPS`` times maxmemory. Measured on this workload: ours grows by 62 to 73 MB
(1.25 to 1.45 times the cap: the accounted 50 MB of values, plus the interpreter's free lists,
the pipelined requests in flight and a 10 MB MGET reply), and stays there however long the
writes go on (1.5 GB of writes: the same growth); redis-server grows by 108 to 145 MB
(allocator fragmentation, query and reply buffers) while its ``used_memory`` stays at the cap.
Hit ratios seen: ours 0.94 to 0.95, redis-server 0.89 to 0.91. ``used_memory`` (the accounting the cap is compared
with, docs/COMPATIBILITY.md "maxmemory and eviction") is checked after every batch.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from tests.support import ManagedProcess, node_and_redis, rss_bytes

MAXMEMORY_BYTES = 50 * 1024 * 1024
VALUE = b"v" * 10_000
BATCHES = 100
BATCH_KEYS = 500  # 100 x 500 x 10 KB = 500 MB of writes
HOT_KEYS = 1000  # 10 MB: a fifth of the cap, read after every batch
RSS_GROWTH_CAPS = 2.0  # measured 1.25


@pytest.fixture(scope="module")
def procs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ManagedProcess]]:
    with node_and_redis(tmp_path_factory.mktemp("evict-rss")) as both:
        yield both


def _workload(proc: ManagedProcess) -> dict[str, float]:
    """Cold writes in pipelined batches, each batch followed by an MGET of the hot keys (a
    miss is written back, as a cache would). Returns the hit ratio and the figures seen."""
    r = redis.Redis(port=proc.port)
    try:
        r.config_set("maxmemory-policy", "allkeys-lru")
        r.config_set("maxmemory", MAXMEMORY_BYTES)
        start_rss = peak_rss = rss_bytes(proc.pid)
        hot = [f"hot:{i}" for i in range(HOT_KEYS)]
        pipe = r.pipeline(transaction=False)
        for k in hot:
            pipe.set(k, VALUE)
        pipe.execute()
        hits = reads = 0
        max_used = 0
        for b in range(BATCHES):
            pipe = r.pipeline(transaction=False)
            for i in range(BATCH_KEYS):
                pipe.set(f"cold:{b}:{i}", VALUE)
            pipe.execute()
            got = r.mget(hot)
            hits += sum(v is not None for v in got)
            reads += len(got)
            pipe = r.pipeline(transaction=False)
            for k, v in zip(hot, got, strict=True):
                if v is None:
                    pipe.set(k, VALUE)
            pipe.execute()
            peak_rss = max(peak_rss, rss_bytes(proc.pid))
            max_used = max(max_used, int(r.info("memory")["used_memory"]))
        return {"hit_ratio": hits / reads, "rss_growth": peak_rss - start_rss,
                "max_used": max_used, "evicted": int(r.info("stats")["evicted_keys"])}
    finally:
        r.close()


def test_500mb_of_writes_under_a_50mb_cap(procs: dict[str, ManagedProcess]) -> None:
    seen = {name: _workload(proc) for name, proc in procs.items()}
    for name, s in seen.items():
        print(f"{name}: hot-key hit ratio {s['hit_ratio']:.3f}, RSS growth "
              f"{s['rss_growth'] / 2**20:.1f} MB, max used_memory {s['max_used'] / 2**20:.2f} MB, "
              f"evicted {s['evicted']:.0f}")
    ours = seen["ours"]
    assert ours["evicted"] >= BATCHES * BATCH_KEYS * 0.8
    assert ours["max_used"] <= MAXMEMORY_BYTES
    assert ours["rss_growth"] <= RSS_GROWTH_CAPS * MAXMEMORY_BYTES
    assert ours["hit_ratio"] >= 0.8
    assert ours["hit_ratio"] >= seen["real"]["hit_ratio"] - 0.1
