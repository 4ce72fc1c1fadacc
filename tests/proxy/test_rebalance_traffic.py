"""`slotgate cluster rebalance --by-traffic`: the proxy counts requests per slot (served as
JSON on /slots beside /metrics); one master's slots are made hot through the proxy and the
rebalance moves slots off it until the traffic is even — on bundled nodes and on a real
redis-server cluster."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from slotgate.protocol.slots import key_slot
from tests.proxy.test_cluster_ops import addr, cli, node_id, owners, start
from tests.support import (
    ManagedProcess,
    free_port,
    slotgate_proxy,
    wait_cluster_ok,
    wait_for_port,
    wait_until,
)

HOT_KEYS = 300
READS = 10


def slot_counts(metrics_port: int) -> dict[int, int]:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/slots", timeout=5) as resp:
        assert resp.headers["Content-Type"] == "application/json"
        return {int(k): v for k, v in json.loads(resp.read())["slot_requests"].items()}


@pytest.fixture
def three(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[list[ManagedProcess]]:
    procs = start(request.param, tmp_path, 3)
    try:
        out = cli("create", *[addr(n) for n in procs])
        assert out.returncode == 0, out.stderr
        wait_cluster_ok(procs)
        yield procs
    finally:
        for p in procs:
            p.stop()


def shares(counts: dict[int, int], owner: dict[int, str]) -> dict[str, float]:
    per: dict[str, int] = {}
    for slot, n in counts.items():
        per[owner[slot]] = per.get(owner[slot], 0) + n
    total = sum(per.values())
    return {m: n / total for m, n in per.items()}


@pytest.mark.parametrize("three", ["bundled", "real"], indirect=True)
@pytest.mark.parametrize("workers", [1, 2])
def test_rebalance_by_traffic_moves_slots_off_the_hot_master(three: list[ManagedProcess],
                                                             tmp_path: Path,
                                                             workers: int) -> None:
    masters = three
    hot = node_id(masters[0])
    owner = owners(masters[0])
    # keys spread over many of the first master's slots, plus a little traffic everywhere
    hot_keys = [k for k in (f"hot:{i}" for i in range(5 * HOT_KEYS))
                if owner[key_slot(k.encode())] == hot][:HOT_KEYS]
    assert len(hot_keys) == HOT_KEYS
    warm_keys = [f"warm:{i}" for i in range(300)]
    mport = free_port()
    proxy = slotgate_proxy(tmp_path, [m.port for m in masters],
                           ["--metrics", f"127.0.0.1:{mport}", "--workers", str(workers)]).start()
    try:
        wait_for_port(mport)  # (with workers, the merged endpoint comes once they all listen)
        clients = [redis.Redis(host="127.0.0.1", port=proxy.port) for _ in range(3)]
        for n, c in enumerate(clients):  # several connections: spread over the workers
            pipe = c.pipeline(transaction=False)
            for k in hot_keys[n::3]:
                pipe.set(k, "v")
                for _ in range(READS):
                    pipe.get(k)
            for k in warm_keys[n::3]:
                pipe.get(k)
            pipe.mget(warm_keys[n * 10:n * 10 + 10])  # split per slot: each slot counts once
            pipe.execute()
            c.close()
        counts = slot_counts(mport)
        probe = key_slot(hot_keys[0].encode())
        assert counts[probe] == sum(1 + READS for k in hot_keys if key_slot(k.encode()) == probe)
        expected_total = HOT_KEYS * (1 + READS) + len(warm_keys) + 30
        assert sum(counts.values()) == expected_total, (sum(counts.values()), expected_total)
        before = shares(counts, owner)
        assert before[hot] > 0.9

        metrics = f"127.0.0.1:{mport}"
        dry = cli("rebalance", addr(masters[0]), "--by-traffic", metrics, "--dry-run",
                  "--threshold", "10")
        assert dry.returncode == 0 and "dry run" in dry.stdout, dry.stdout + dry.stderr
        assert owners(masters[0]) == owner
        plain = cli("rebalance", addr(masters[0]), "--simulate")  # by slot count: balanced
        assert "No rebalancing needed" in plain.stdout

        out = cli("rebalance", addr(masters[0]), "--by-traffic", metrics, "--threshold", "10",
                  "--progress-every", "10")
        assert out.returncode == 0, out.stdout + out.stderr
        assert "traffic now: " in out.stdout and "slots moved" in out.stdout
        wait_until(lambda: len({tuple(sorted(owners(m).items())) for m in masters}) == 1, 30,
                   "masters agreeing on the slot owners")
        now = owners(masters[0])
        moved = [s for s in range(16384) if now[s] != owner[s]]
        assert moved and all(owner[s] == hot for s in moved)
        assert all(s in counts for s in moved)  # only slots with traffic moved
        after = shares(counts, now)
        assert all(abs(share - 1 / 3) <= 0.1 / 3 + 0.01 for share in after.values()), after
        # served by their new owners through the proxy
        c = redis.Redis(host="127.0.0.1", port=proxy.port)
        assert c.mget(hot_keys) == [b"v"] * len(hot_keys)
        c.close()
        again = cli("rebalance", addr(masters[0]), "--by-traffic", metrics, "--threshold",
                    "10", "--traffic-window", "0.2")
        assert "No traffic counted" in again.stdout, again.stdout  # nothing in the window
    finally:
        proxy.stop()
    gone = cli("rebalance", addr(masters[0]), "--by-traffic", metrics)
    assert gone.returncode == 1 and "/slots" in gone.stderr
