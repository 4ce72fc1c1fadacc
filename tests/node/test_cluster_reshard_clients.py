"""A cluster client keeps working while a reshard runs: on three of our masters, ``redis-cli
--cluster reshard`` moves 500 slots (one key in every slot of the cluster) while redis-py's
RedisCluster, in a thread, does SET, GET and pipelined SETs across all slots without pause.
redis-py follows MOVED and ASK itself, so the client must see no error, read back what it
wrote every time, and find every value intact at the end."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.cluster import RedisCluster

from slotgate.protocol.slots import key_slot
from tests.support import ManagedProcess, create_cluster, redis_cli, start_nodes, wait_until

MOVE_SLOTS = 500
RESHARD_TIMEOUT_S = 180.0


def _key_per_slot() -> list[str]:
    """One key name for each of the 16384 slots (index = slot)."""
    keys: list[str | None] = [None] * 16384
    missing, i = 16384, 0
    while missing:
        name = f"k:{i}"
        slot = key_slot(name.encode())
        if keys[slot] is None:
            keys[slot] = name
            missing -= 1
        i += 1
    return [k for k in keys if k is not None]


KEYS = _key_per_slot()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[list[ManagedProcess]]:
    nodes = start_nodes(tmp_path, 3)
    try:
        create_cluster(nodes, replicas=0)
        yield nodes
    finally:
        for n in nodes:
            n.stop()


def _ids(node: ManagedProcess) -> dict[int, str]:
    """Port -> node id, from CLUSTER NODES."""
    text = node.client().execute_command("CLUSTER", "NODES").decode()
    out = {}
    for line in text.splitlines():
        f = line.split()
        out[int(f[1].split("@")[0].split(":")[1])] = f[0]
    return out


def _slot_count(node: ManagedProcess, node_id: str) -> int:
    text = node.client().execute_command("CLUSTER", "NODES").decode()
    for line in text.splitlines():
        f = line.split()
        if f[0] != node_id:
            continue
        count = 0
        for tok in f[8:]:
            if tok.startswith("["):
                continue
            lo, _, hi = tok.partition("-")
            count += int(hi or lo) - int(lo) + 1
        return count
    raise AssertionError(f"{node_id} not in CLUSTER NODES")


class Writer(threading.Thread):
    """SET/GET/pipelined SETs over all slots (half of them in the slots being moved)."""

    def __init__(self, port: int, expected: dict[str, str], hot_slots: range) -> None:
        super().__init__(daemon=True)
        self.rc = RedisCluster(host="127.0.0.1", port=port, decode_responses=True,
                               socket_timeout=10)
        self.expected = expected
        self.hot = hot_slots
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.ops = 0
        self.rng = random.Random(7)

    def _pick(self) -> str:
        if self.rng.random() < 0.5:
            return KEYS[self.rng.choice(self.hot)]
        return KEYS[self.rng.randrange(16384)]

    def _round(self, n: int) -> None:
        key = self._pick()
        value = f"{key}={n}"
        if self.rc.set(key, value) is not True:
            self.errors.append(f"SET {key} did not return OK")
        self.expected[key] = value
        got = self.rc.get(key)
        if got != value:
            self.errors.append(f"GET {key}: {got!r} != {value!r}")
        other = self._pick()
        got = self.rc.get(other)
        if got != self.expected[other]:
            self.errors.append(f"GET {other}: {got!r} != {self.expected[other]!r}")
        if n % 5 == 0:
            pipe = self.rc.pipeline()
            batch = {self._pick(): f"p{n}" for _ in range(20)}
            for k, v in batch.items():
                pipe.set(k, v)
            for k in batch:
                pipe.get(k)
            replies = pipe.execute()
            want = [True] * len(batch) + list(batch.values())
            if replies != want:
                self.errors.append(f"pipeline replies {replies!r} != {want!r}")
            self.expected.update(batch)
        self.ops += 1

    def run(self) -> None:
        n = 0
        try:
            while not self.stop.is_set() and len(self.errors) < 20:
                n += 1
                self._round(n)
        except Exception as exc:  # reported by the test, which fails on any error
            self.errors.append(f"{type(exc).__name__}: {exc}")


def test_redis_py_cluster_client_through_reshard(cluster: list[ManagedProcess]) -> None:
    a, b, _ = cluster
    ids = _ids(a)
    rc = RedisCluster(host="127.0.0.1", port=a.port, decode_responses=True)
    expected = {k: f"{k}=0" for k in KEYS}
    pipe = rc.pipeline()
    for k, v in expected.items():
        pipe.set(k, v)
    assert all(r is True for r in pipe.execute())

    # redis-cli takes the lowest slots of the source first
    src_slots = [s for s in range(16384) if rc.nodes_manager.get_node_from_slot(s).port == a.port]
    moved = src_slots[:MOVE_SLOTS]
    hot = range(moved[0], moved[-1] + 50)
    before_b = _slot_count(a, ids[b.port])

    writer = Writer(a.port, expected, hot)
    writer.start()
    try:
        wait_until(lambda: writer.ops > 0 or not writer.is_alive(), 30, "the writer under way")
        ops_before = writer.ops
        t0 = time.monotonic()
        res = redis_cli("--cluster", "reshard", f"127.0.0.1:{a.port}",
                        "--cluster-from", ids[a.port], "--cluster-to", ids[b.port],
                        "--cluster-slots", str(MOVE_SLOTS), "--cluster-yes",
                        timeout_s=RESHARD_TIMEOUT_S, check=False)
        reshard_s = time.monotonic() - t0
        ops_during = writer.ops - ops_before
        time.sleep(0.5)  # the scenario: the client goes on a little after the reshard
        print(f"reshard took {reshard_s:.1f} s; {ops_during} client rounds ran during it")
    finally:
        writer.stop.set()
        writer.join(30)
    assert not writer.is_alive(), "writer thread did not stop"
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert writer.errors == [], writer.errors[:5]
    assert ops_during > 0, f"no client operation completed during the {reshard_s:.1f} s reshard"
    # the slots really moved, and every node agrees
    for n in cluster:
        assert _slot_count(n, ids[b.port]) == before_b + MOVE_SLOTS
    # every value is what the client last wrote (read through a fresh client)
    fresh = RedisCluster(host="127.0.0.1", port=b.port, decode_responses=True)
    pipe = fresh.pipeline()
    for k in KEYS:
        pipe.get(k)
    got = pipe.execute()
    wrong = [(k, g, expected[k]) for k, g in zip(KEYS, got, strict=True) if g != expected[k]]
    assert wrong == [], wrong[:5]
    # and the moved keys live on their new owner
    direct = b.client(decode_responses=True)
    for s in moved:
        assert direct.execute_command("CLUSTER", "COUNTKEYSINSLOT", s) == 1, s
    for c in (rc, fresh, writer.rc):
        c.close()
    direct.close()
