"""`slotgate cluster import`: a standalone redis-server's keys of every type copied, then moved,
into a cluster of bundled nodes and into a real redis-server cluster, as redis-cli --cluster
import does it; compared type by type (and by DUMP where both ends are redis-server)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.proxy.test_cluster_ops import addr, cli, start
from tests.support import ManagedProcess, redis_server, wait_cluster_ok

PER_TYPE = 500
PROGRESS = re.compile(r"^import: (\d+)/(\d+) keys moved, ([\d.]+) keys/s, ETA ")


@pytest.fixture
def cluster_and_source(request: pytest.FixtureRequest,
                       tmp_path: Path) -> Iterator[tuple[list[ManagedProcess], ManagedProcess]]:
    procs = start(request.param, tmp_path, 3)
    source = redis_server(tmp_path / "source").start()
    try:
        out = cli("create", *[addr(n) for n in procs])
        assert out.returncode == 0, out.stderr
        wait_cluster_ok(procs)
        yield procs, source
    finally:
        source.stop()
        for p in procs:
            p.stop()


def fill(c: redis.Redis) -> None:
    """PER_TYPE keys of each type, small and large encodings, some with a TTL."""
    pipe = c.pipeline(transaction=False)
    for i in range(PER_TYPE):
        pipe.set(f"str:{i}", f"value {i}" * (1 + i % 3))
        pipe.rpush(f"list:{i}", *[f"e{j}" for j in range(1 + i % 7)])
        pipe.hset(f"hash:{i}", mapping={f"f{j}": j * i for j in range(1 + i % 5)})
        pipe.sadd(f"set:{i}", *([j for j in range(1 + i % 4)] if i % 2 else
                                [f"m{j}" for j in range(1 + i % 4)]))
        pipe.zadd(f"zset:{i}", {f"z{j}": j / 3 for j in range(1 + i % 6)})
        pipe.xadd(f"stream:{i}", {"a": i, "b": "x"}, id=f"{i + 1}-1")
        if i % 10 == 0:
            pipe.pfadd(f"hll:{i}", *[f"u{j}" for j in range(50)])
            pipe.setbit(f"bits:{i}", i, 1)
            pipe.expire(f"str:{i}", 3600)
    pipe.rpush("list:big", *range(2000))  # a quicklist of several nodes
    pipe.hset("hash:big", mapping={f"f{j}": "v" * 80 for j in range(300)})  # a hashtable
    pipe.execute()


def snapshot(c: redis.Redis | redis.RedisCluster, keys: list[bytes]) -> dict[bytes, object]:
    """Each key's type-aware value and whether it has a TTL."""
    out: dict[bytes, object] = {}
    for k in keys:
        kind = c.type(k).decode()
        value: object
        if kind == "string":
            value = c.get(k)
        elif kind == "list":
            value = c.lrange(k, 0, -1)
        elif kind == "hash":
            value = c.hgetall(k)
        elif kind == "set":
            value = sorted(c.smembers(k))
        elif kind == "zset":
            value = c.zrange(k, 0, -1, withscores=True)
        elif kind == "stream":
            value = c.xrange(k)
        else:
            value = None
        out[k] = (kind, value, c.pttl(k) > 0)
    return out


def progress(stderr: str) -> list[tuple[int, float]]:
    return [(int(m[1]), float(m[3])) for m in map(PROGRESS.match, stderr.splitlines()) if m]


@pytest.mark.parametrize("cluster_and_source", ["bundled", "real"], indirect=True)
def test_import_copies_then_moves_every_type(
        cluster_and_source: tuple[list[ManagedProcess], ManagedProcess]) -> None:
    masters, source = cluster_and_source
    src = source.client()
    fill(src)
    keys = sorted(src.keys("*"))
    assert len(keys) > 3000
    expected = snapshot(src, keys)
    rc = redis.RedisCluster(host="127.0.0.1", port=masters[0].port)
    try:
        rc.set("str:1", "already here")
        out = cli("import", addr(masters[0]), "--from", addr(source), "--cluster-copy")
        assert out.returncode == 1 and "BUSYKEY" in out.stderr, out.stdout + out.stderr
        assert src.dbsize() == len(keys)  # a copy: the source keeps everything

        out = cli("import", addr(masters[0]), "--from", addr(source), "--copy", "--replace",
                  "--rate", "4000", "--progress-every", "500")
        assert out.returncode == 0, out.stdout + out.stderr
        assert f"*** Importing {len(keys)} keys from DB 0" in out.stdout
        assert f"[OK] {len(keys)} keys copied into the cluster" in out.stdout
        seen = progress(out.stderr)
        assert len(seen) >= 5 and seen[-1][0] == len(keys), out.stderr
        assert max(rate for _, rate in seen) <= 4000 * 1.05, seen
        assert src.dbsize() == len(keys)
        assert sum(m.client().dbsize() for m in masters) == len(keys)
        assert snapshot(rc, keys) == expected
        if "redis-server" in masters[0].argv[0]:
            # the same server on both ends: the same bytes, where the encoding keeps an order
            # (a hashtable set's DUMP follows its bucket order)
            ordered = [k for k in keys if expected[k][0] in ("string", "list", "stream")]
            differ = [k for k in ordered if rc.dump(k) != src.dump(k)]
            assert differ == [], [(k, rc.dump(k), src.dump(k)) for k in differ[:3]]

        src.set("str:2", "changed at the source")
        expected[b"str:2"] = ("string", b"changed at the source", False)
        out = cli("import", addr(masters[0]), "--cluster-from", addr(source),
                  "--cluster-replace")
        assert out.returncode == 0, out.stdout + out.stderr
        assert f"[OK] {len(keys)} keys moved into the cluster" in out.stdout
        assert src.dbsize() == 0  # moved: MIGRATE deleted them from the source
        assert snapshot(rc, keys) == expected
    finally:
        rc.close()
    out = cli("import", addr(masters[0]), "--from", addr(masters[1]))
    assert out.returncode == 1 and "is a cluster node" in out.stderr, out.stderr


@pytest.mark.parametrize("cluster_and_source", ["bundled"], indirect=True)
def test_import_logs_in_to_the_source(
        cluster_and_source: tuple[list[ManagedProcess], ManagedProcess]) -> None:
    masters, source = cluster_and_source
    src = source.client()
    src.mset({"a": "1", "b": "2"})
    src.config_set("requirepass", "pw")
    out = cli("import", addr(masters[0]), "--from", addr(source))
    assert out.returncode == 1 and "NOAUTH" in out.stderr, out.stderr
    out = cli("import", addr(masters[0]), "--from", addr(source), "--from-user", "default",
              "--cluster-from-pass", "pw")
    assert out.returncode == 0, out.stdout + out.stderr
    rc = redis.RedisCluster(host="127.0.0.1", port=masters[0].port)
    try:
        assert (rc.get("a"), rc.get("b")) == (b"1", b"2")
    finally:
        rc.close()
