"""Live resharding: ``redis-cli --cluster reshard`` moves 2,000 slots away from one master and
back while 20 plain clients run mixed GET/SET/MGET/MSET/DEL through the proxy.

Every key is owned by exactly one client task, which tracks the value the key must have; so
any lost, stale or misrouted answer shows up as a wrong value. The proxy must follow every
MOVED/ASK/TRYAGAIN itself: clients see no error at all.
"""

from __future__ import annotations

import random
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import redis

from tests.conftest import ClusterBackend
from tests.proxy.test_metrics import parse
from tests.support import ManagedProcess, free_port, redis_cli, slotgate_proxy, wait_until

KEYS = 10_000
TASKS = 20
SLOTS_MOVED = 2_000
RESHARD_TIMEOUT_S = 240.0
# Each client pauses this long between requests, leaving CPU to the nodes and redis-cli on a
# small machine (the clients alone could saturate it and slow the reshard down threefold).
CLIENT_PAUSE_S = 0.002


def keys_mostly_in(slots: set[int]) -> list[str]:
    """KEYS names, most of them in ``slots`` (the slots that move): a request meets a slot in
    the middle of its migration (and gets ASK) only in the short window between the slot's
    SETSLOT MIGRATING and SETSLOT NODE, so the moving slots get most of the traffic."""
    from slotgate.protocol.slots import key_slot

    want_inside = KEYS * 4 // 5
    inside: list[str] = []
    outside: list[str] = []
    i = 0
    while len(inside) < want_inside or len(outside) < KEYS - want_inside:
        key = f"rs:{i}"
        (inside if key_slot(key.encode()) in slots else outside).append(key)
        i += 1
    return inside[:want_inside] + outside[: KEYS - want_inside]


class MetricsProxy:
    def __init__(self, proc: ManagedProcess, metrics_port: int) -> None:
        self.proc = proc
        self.url = f"http://127.0.0.1:{metrics_port}/metrics"

    def redirects(self) -> dict[str, float]:
        with urllib.request.urlopen(self.url, timeout=10) as resp:
            samples = parse(resp.read().decode())
        out: dict[str, float] = {}
        for (name, labels), v in samples.items():
            if name == "slotgate_redirects_total":
                kind = dict(labels)["kind"]
                out[kind] = out.get(kind, 0.0) + v
        return out


@pytest.fixture
def metrics_proxy(cluster_backend: ClusterBackend, tmp_path: Path) -> Iterator[MetricsProxy]:
    mport = free_port()
    proc = slotgate_proxy(tmp_path, cluster_backend.ports[:2],
                          extra=["--metrics", f"127.0.0.1:{mport}"]).start()
    try:
        yield MetricsProxy(proc, mport)
    finally:
        proc.stop()


def slot_owners(node: ManagedProcess) -> dict[int, int]:
    """Slot -> port of its master, from CLUSTER SLOTS of ``node``."""
    out: dict[int, int] = {}
    for entry in node.client().execute_command("CLUSTER", "SLOTS"):
        for slot in range(int(entry[0]), int(entry[1]) + 1):
            out[slot] = int(entry[2][1])
    return out


def wait_cluster_consistent(seed: ManagedProcess, timeout_s: float = 60.0) -> None:
    """Until ``redis-cli --cluster check`` is happy: every node (replicas too, which learn
    slot moves by gossip) agrees on the configuration and no slot is left open. redis-cli
    refuses to reshard before that."""
    out = [""]

    def consistent() -> bool:
        check = redis_cli("--cluster", "check", f"127.0.0.1:{seed.port}", check=False)
        out[0] = check.stdout[-3000:]
        return check.returncode == 0

    wait_until(consistent, timeout_s, lambda: f"a clean cluster check: {out[0]}", interval_s=0.1)


# Keys per MIGRATE. A real redis-server moves a slot in well under a millisecond, so there it
# migrates key by key to keep each slot half-moved a little longer (else few requests meet
# ASK); our node is slow enough with redis-cli's default, and twice as slow with 1.
MIGRATE_PIPELINE = {"real": 1, "bundled": 10}


def reshard(seed: ManagedProcess, src_id: str, dst_id: str, pipeline: int) -> None:
    """Move SLOTS_MOVED slots from ``src_id`` to ``dst_id`` with redis-cli."""
    wait_cluster_consistent(seed)
    done = redis_cli("--cluster", "reshard", f"127.0.0.1:{seed.port}", "--cluster-from", src_id,
                     "--cluster-to", dst_id, "--cluster-slots", str(SLOTS_MOVED),
                     "--cluster-pipeline", str(pipeline), "--cluster-yes",
                     timeout_s=RESHARD_TIMEOUT_S, check=False)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-2000:])


class ClientTask:
    """One client that owns keys[tid::TASKS] and knows what each of them must hold."""

    def __init__(self, proxy_port: int, tid: int, keys: list[str], protocol: int) -> None:
        self.client = redis.Redis(port=proxy_port, protocol=protocol, socket_timeout=60)
        self.tid = tid
        self.keys = keys
        self.expected: dict[str, bytes] = {}
        self.rng = random.Random(tid)
        self.ops = 0
        self.wrong: list[str] = []
        self.errors: list[str] = []

    def run(self, stop: threading.Event) -> None:
        ops = (self.get, self.get, self.get, self.set, self.set, self.mget, self.mset, self.delete)
        try:
            while not stop.is_set() and not self.wrong:
                self.rng.choice(ops)()
                self.ops += 1
                stop.wait(CLIENT_PAUSE_S)
        except Exception as exc:  # reported by the test, with what was being done
            self.errors.append(f"task {self.tid} op {self.ops}: {type(exc).__name__}: {exc}")
        finally:
            self.client.close()

    def check(self, op: str, keys: list[str], got: Sequence[object]) -> None:
        want: list[object] = [self.expected.get(k) for k in keys]
        if got != want:
            self.wrong.append(f"task {self.tid} {op} {keys}: got {got}, want {want}")

    def value(self) -> bytes:
        return f"{self.tid}:{self.ops}:{self.rng.randrange(1 << 30)}".encode()

    def get(self) -> None:
        k = self.rng.choice(self.keys)
        self.check("GET", [k], [self.client.get(k)])

    def set(self) -> None:
        k, v = self.rng.choice(self.keys), self.value()
        assert self.client.set(k, v) is True
        self.expected[k] = v

    def mget(self) -> None:
        ks = self.rng.sample(self.keys, 8)
        self.check("MGET", ks, self.client.mget(ks))

    def mset(self) -> None:
        pairs = {k: self.value() for k in self.rng.sample(self.keys, 6)}
        assert self.client.mset(pairs) is True
        self.expected.update(pairs)

    def delete(self) -> None:
        ks = self.rng.sample(self.keys, self.rng.randint(1, 3))
        present = sum(1 for k in ks if k in self.expected)
        got = self.client.delete(*ks)
        if got != present:
            self.wrong.append(f"task {self.tid} DEL {ks}: got {got}, want {present}")
        for k in ks:
            self.expected.pop(k, None)


@pytest.mark.slow
def test_reshard_2000_slots_away_and_back_under_load(
    metrics_proxy: MetricsProxy, cluster_backend: ClusterBackend
) -> None:
    proxy = metrics_proxy.proc
    seed = cluster_backend.nodes[0]
    wait_cluster_consistent(seed)
    before = slot_owners(seed)
    # The master of slot 0 gives away its lowest 2,000 slots (redis-cli takes a source's slots
    # in order). The destination owns no slot below those, so resharding back from it
    # returns exactly them.
    src = next(n for n in cluster_backend.nodes if n.port == before[0])
    moving = sorted(s for s, port in before.items() if port == src.port)[:SLOTS_MOVED]
    dst = next(n for n in cluster_backend.nodes if n.port in set(before.values())
               and n is not src and min(s for s, p in before.items() if p == n.port) > moving[-1])
    src_id, dst_id = (m.client().execute_command("CLUSTER", "MYID").decode() for m in (src, dst))

    all_keys = keys_mostly_in(set(moving))
    tasks = [ClientTask(proxy.port, t, all_keys[t::TASKS], protocol=2 + t % 2)
             for t in range(TASKS)]
    loader = proxy.client(socket_timeout=30)
    for t in tasks:
        # Half the keys start absent: a missing key in a migrating slot is answered with ASK
        # for the whole migration of its slot, not only after its own MIGRATE.
        initial = {k: f"init:{k}".encode() for k in t.keys[::2]}
        assert loader.mset(initial) is True
        t.expected.update(initial)
    redirects_before = metrics_proxy.redirects()

    stop = threading.Event()
    threads = [threading.Thread(target=t.run, args=(stop,)) for t in tasks]
    for th in threads:
        th.start()
    started = time.monotonic()
    try:
        def under_way() -> bool:
            assert all(th.is_alive() for th in threads), [t.errors for t in tasks]
            return sum(t.ops for t in tasks) >= 2 * TASKS

        wait_until(under_way, 30, "every client under way")
        pipeline = MIGRATE_PIPELINE[cluster_backend.kind]
        reshard(seed, src_id, dst_id, pipeline)
        wait_cluster_consistent(seed)
        moved = slot_owners(seed)
        reshard(seed, dst_id, src_id, pipeline)
        ops_during = sum(t.ops for t in tasks)
    finally:
        stop.set()
        for th in threads:
            th.join(90)
    elapsed_s = time.monotonic() - started
    assert not any(th.is_alive() for th in threads), "a client task hung"
    errors = [e for t in tasks for e in t.errors]
    wrong = [w for t in tasks for w in t.wrong]
    assert errors == [], errors[:5]
    assert wrong == [], wrong[:5]

    # The slots really went away and came back.
    assert {s for s, port in moved.items() if port != before[s]} == set(moving)
    assert all(moved[s] == dst.port for s in moving)
    wait_cluster_consistent(seed)
    assert slot_owners(seed) == before

    # Every key holds what its owner last wrote, read back in one cross-slot MGET.
    expected = {k: v for t in tasks for k, v in t.expected.items()}
    assert loader.mget(all_keys) == [expected.get(k) for k in all_keys]

    after = metrics_proxy.redirects()
    print(f"{cluster_backend.kind}: {ops_during} client ops in {elapsed_s:.1f}s; redirects "
          + ", ".join(f"{k}={after[k] - redirects_before.get(k, 0):.0f}" for k in sorted(after)))
    assert ops_during > 20 * TASKS
    assert after["moved"] > redirects_before.get("moved", 0)
    assert after["ask"] > redirects_before.get("ask", 0)
    assert loader.delete(*all_keys) == len(expected)
