"""Stream consumer groups through the proxy while a slot of the streams moves.

5 writers XADD entries to 4 streams (each in a slot of its own); 10 consumers of one group per
stream read them with XREADGROUP ... BLOCK and XACK each batch. Meanwhile the slot of one
stream migrates to another master, either step by step from the test (SETSLOT
IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE: reads and writes meet ASK, then MOVED, and blocked
reads wait on a key that goes away) or by the real ``redis-cli --cluster reshard`` of that one
slot while the writers and consumers run. In the end every entry written was delivered to
exactly one consumer and acknowledged once, no entry stays pending and every stream holds what
was written. Runs against a real redis-server cluster and our nodes (the ``slotgate``
fixture); like test_redirects.py, it restores no topology.
"""

from __future__ import annotations

import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable

import pytest
import redis

from slotgate.protocol.slots import key_slot
from tests.conftest import ClusterBackend
from tests.proxy.test_redirects import (
    masters,
    migrate_keys,
    myid,
    open_migration,
    slot_owner,
)
from tests.support import REDIS_CLI, ManagedProcess, RawClient, redis_cli, wait_blocked, wait_until

STREAMS = 4
WRITERS = 5
CONSUMERS = 10
GROUP = "g"
WRITE_BATCH = 50
READ_COUNT = 50
BLOCK_MS = 100
# Whole run, writers and consumers included. Measured on two busy cores: 10,000 entries take
# 0.7 s (real) / 1.7 s (our nodes), 100,000 take 3 s / 26 s.
DEADLINE_S = {10_000: 120.0, 100_000: 600.0}


def stream_keys(first_slot: int | None = None) -> list[str]:
    """STREAMS keys of this run, each in a slot of its own (the first in ``first_slot`` when
    given)."""
    prefix = f"xc{uuid.uuid4().hex[:6]}"
    keys: list[str] = []
    slots: set[int] = set()
    if first_slot is not None:
        tag = next(str(t) for t in range(1 << 20) if key_slot(str(t).encode()) == first_slot)
        keys.append(f"{{{tag}}}:{prefix}")
        slots.add(first_slot)
    i = 0
    while len(keys) < STREAMS:
        key = f"{prefix}:{i}"
        if key_slot(key.encode()) not in slots:
            slots.add(key_slot(key.encode()))
            keys.append(key)
        i += 1
    return keys


def read_entries(reply: object) -> list[bytes]:
    """Entry ids of an XREADGROUP reply: RESP2 [[key, entries]] or RESP3 {key: entries}."""
    if not reply:
        return []
    per_key = reply.values() if isinstance(reply, dict) else [kv[1] for kv in reply]
    ids: list[bytes] = []
    for entries in per_key:
        # A RESP3 map may wrap the entries in one more list, depending on the client version.
        if entries and isinstance(entries[0], list) and entries[0] and isinstance(
                entries[0][0], (list, tuple)):
            entries = entries[0]
        ids.extend(e[0] for e in entries)
    return ids


class Run:
    """Shared state of one run: what was written, what each consumer processed."""

    def __init__(self, keys: list[str], total: int, deadline: float) -> None:
        self.keys = keys
        self.total = total
        self.deadline = deadline
        self.lock = threading.Lock()
        self.written: dict[str, list[bytes]] = {k: [] for k in keys}
        self.processed: dict[str, list[bytes]] = {k: [] for k in keys}
        self.acked = 0
        self.writers_done = threading.Event()
        # Opened by the test: the key has moved (ASK time), the slot is reassigned (MOVED).
        self.gates = [threading.Event(), threading.Event()]
        self.stop = threading.Event()
        self.errors: list[str] = []

    def guarded(self, name: str, body: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                body()
            except Exception as exc:  # reported by the test with the thread's name
                with self.lock:
                    self.errors.append(f"{name}: {type(exc).__name__}: {exc}")
                self.stop.set()
        return run

    def processed_count(self) -> int:
        with self.lock:
            return self.acked


def share_of(total: int, wid: int) -> int:
    return total // WRITERS + (1 if wid < total % WRITERS else 0)


def phase_ends(share: int) -> list[int]:
    """Where a writer with ``share`` entries stops for the slot's next step: the key moves
    after the first third, the slot is reassigned after the second."""
    return [share // 3, 2 * share // 3, share]


def writer(run: Run, port: int, wid: int) -> None:
    r = redis.Redis(port=port, socket_timeout=30)
    ends = phase_ends(share_of(run.total, wid))
    sent = 0
    try:
        for phase, end in enumerate(ends):
            if phase:
                while not run.gates[phase - 1].wait(0.1):
                    assert not run.stop.is_set(), f"writer {wid}: stopped"
                    assert time.monotonic() < run.deadline, f"writer {wid}: gate {phase}"
            while sent < end and not run.stop.is_set():
                assert time.monotonic() < run.deadline, f"writer {wid}: deadline, {sent}/{end}"
                batch = min(WRITE_BATCH, end - sent)
                pipe = r.pipeline(transaction=False)
                keys = [run.keys[(wid + sent + j) % STREAMS] for j in range(batch)]
                for j, key in enumerate(keys):
                    pipe.xadd(key, {"w": wid, "n": sent + j})
                ids = pipe.execute()
                with run.lock:
                    for key, entry_id in zip(keys, ids, strict=True):
                        run.written[key].append(entry_id)
                sent += batch
    finally:
        r.close()


def consumer(run: Run, port: int, cid: int) -> None:
    r = redis.Redis(port=port, socket_timeout=30, protocol=2 + cid % 2)
    name = f"c{cid}"
    turn = cid
    try:
        while not run.stop.is_set():
            assert time.monotonic() < run.deadline, f"consumer {cid}: deadline"
            key = run.keys[turn % STREAMS]
            turn += 1
            ids = read_entries(r.xreadgroup(GROUP, name, {key: ">"}, count=READ_COUNT,
                                            block=BLOCK_MS))
            if ids:
                acked = r.xack(key, GROUP, *ids)
                assert acked == len(ids), f"consumer {cid} XACK {key}: {acked} of {len(ids)}"
                with run.lock:
                    run.processed[key].extend(ids)
                    run.acked += len(ids)
            elif run.writers_done.is_set() and run.processed_count() >= run.total:
                return
    finally:
        r.close()


def wait_processed(run: Run, count: int, what: str) -> None:
    while run.processed_count() < count:
        assert not run.stop.is_set(), f"stopped before {what}: {run.errors[:3]}"
        assert time.monotonic() < run.deadline, f"{what} before the deadline"
        time.sleep(0.01)


def phase_total(total: int, phase: int) -> int:
    return sum(phase_ends(share_of(total, w))[phase] for w in range(WRITERS))


def move_slot_during(run: Run, backend: ClusterBackend) -> tuple[ManagedProcess, ManagedProcess]:
    """Once the first third is processed (consumers now block on empty streams), the slot of
    the first key opens and the key MIGRATEs (blocked readers lose it); the second third is
    written and read while the slot is half-moved (ASK); then the slot is reassigned (MOVED)
    for the last third."""
    slot = key_slot(run.keys[0].encode())
    src = slot_owner(backend, slot)
    dst = next(m for m in masters(backend) if m is not src)
    wait_processed(run, phase_total(run.total, 0), "the first third processed")
    time.sleep(0.2)
    open_migration(slot, src, dst)
    migrate_keys(src, dst, [run.keys[0]])
    run.gates[0].set()
    wait_processed(run, phase_total(run.total, 1), "the second third processed")
    dst_id = myid(dst)
    for node in [dst, src] + [m for m in masters(backend) if m not in (src, dst)]:
        node.client().execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
    run.gates[1].set()
    return src, dst


def lowest_slot(backend: ClusterBackend, node: ManagedProcess) -> int | None:
    """The lowest slot ``node`` owns (what ``redis-cli --cluster reshard`` moves first)."""
    spans = node.client().execute_command("CLUSTER", "SLOTS")
    owned = [int(e[0]) for e in spans if int(e[2][1]) == node.port]
    return min(owned) if owned else None


def cluster_agrees(backend: ClusterBackend) -> bool:
    out = redis_cli("--cluster", "check", f"127.0.0.1:{backend.ports[0]}", check=False).stdout
    return ("[OK] All nodes agree about slots configuration." in out
            and "[WARNING]" not in out and "[ERR]" not in out)


def reshard_slot_during(run: Run, backend: ClusterBackend, src: ManagedProcess,
                        dst: ManagedProcess) -> None:
    """Once the first third is processed, ``redis-cli --cluster reshard`` moves the first
    key's slot (the lowest of ``src``) to ``dst`` while the writers write the rest."""
    wait_processed(run, phase_total(run.total, 0), "the first third processed")
    tool = subprocess.Popen(
        [REDIS_CLI, "--cluster", "reshard", f"127.0.0.1:{src.port}", "--cluster-from",
         myid(src), "--cluster-to", myid(dst), "--cluster-slots", "1", "--cluster-yes"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for gate in run.gates:
            gate.set()
        out, _ = tool.communicate(timeout=max(1.0, run.deadline - time.monotonic()))
    finally:
        if tool.poll() is None:
            tool.kill()
            tool.wait()
    assert tool.returncode == 0 and "[ERR]" not in out, out[-2000:]
    assert f"Moving slot {key_slot(run.keys[0].encode())} from" in out, out[-2000:]


@pytest.mark.parametrize("total", [10_000, pytest.param(100_000, marks=pytest.mark.slow)])
@pytest.mark.parametrize("move", ["setslot", "reshard"])
def test_consumer_group_while_slot_moves(slotgate: ManagedProcess,
                                         cluster_backend: ClusterBackend, move: str,
                                         total: int) -> None:
    if move == "reshard":  # the tool refuses a cluster whose nodes do not agree yet
        wait_until(lambda: cluster_agrees(cluster_backend), timeout_s=60,
                   what="the cluster's nodes agree")
        src = next(m for m in masters(cluster_backend)
                   if lowest_slot(cluster_backend, m) is not None)
        dst = next(m for m in masters(cluster_backend) if m is not src)
        keys = stream_keys(lowest_slot(cluster_backend, src))
    else:
        keys = stream_keys()
    admin = slotgate.client(socket_timeout=30)
    for key in keys:
        assert admin.xgroup_create(key, GROUP, id="$", mkstream=True) is True
    started = time.monotonic()
    run = Run(keys, total, started + DEADLINE_S[total])
    writers = [threading.Thread(target=run.guarded(f"writer {w}", lambda w=w: writer(
        run, slotgate.port, w))) for w in range(WRITERS)]
    consumers = [threading.Thread(target=run.guarded(f"consumer {c}", lambda c=c: consumer(
        run, slotgate.port, c))) for c in range(CONSUMERS)]
    for th in consumers + writers:
        th.start()
    try:
        if move == "reshard":
            reshard_slot_during(run, cluster_backend, src, dst)
        else:
            src, dst = move_slot_during(run, cluster_backend)
        for th in writers:
            th.join(max(0.0, run.deadline - time.monotonic()))
        run.writers_done.set()
        for th in consumers:
            th.join(max(0.0, run.deadline - time.monotonic()))
    finally:
        run.stop.set()
        for th in writers + consumers:
            th.join(30)
    elapsed_s = time.monotonic() - started
    assert not any(th.is_alive() for th in writers + consumers), "a thread hung"
    assert run.errors == [], run.errors[:5]
    print(f"{cluster_backend.kind}: {total} entries in {elapsed_s:.1f}s; slot of {keys[0]} "
          f"moved {src.port}->{dst.port} ({move})")

    assert sum(len(v) for v in run.written.values()) == total
    for key in keys:
        written, processed = run.written[key], run.processed[key]
        twice = [i for i, n in Counter(processed).items() if n > 1]
        assert twice == [], f"{key}: {len(twice)} entries processed twice, e.g. {twice[:3]}"
        lost = set(written) - set(processed)
        assert not lost, f"{key}: {len(lost)} entries never processed, e.g. {sorted(lost)[:3]}"
        extra = set(processed) - set(written)
        assert not extra, f"{key}: processed entries nobody wrote: {sorted(extra)[:3]}"
        assert admin.xpending(key, GROUP)["pending"] == 0, key
        assert admin.xlen(key) == len(written), key
        info = admin.xinfo_groups(key)
        assert [g["name"] for g in info] == [GROUP.encode()], info
        assert info[0]["pending"] == 0 and info[0]["lag"] == 0, info
    assert slot_owner(cluster_backend, key_slot(keys[0].encode())) is dst
    assert admin.delete(*keys) == STREAMS


def test_blocked_group_reader_follows_its_stream(slotgate: ManagedProcess,
                                                 cluster_backend: ClusterBackend) -> None:
    """The node ends a blocked XREADGROUP with an error when its stream MIGRATEs away; the
    proxy's client stays blocked, now on the new owner, and gets the next entry there. A
    stream really deleted still ends it with the node's error."""
    tag = f"xb{uuid.uuid4().hex[:6]}"
    key, gone = f"{{{tag}}}:s", f"{{{tag}}}:gone"
    slot = key_slot(tag.encode())
    src = slot_owner(cluster_backend, slot)
    dst = next(m for m in masters(cluster_backend) if m is not src)
    admin = slotgate.client(socket_timeout=10)
    for k in (key, gone):
        assert admin.xgroup_create(k, GROUP, id="$", mkstream=True) is True
    with RawClient(slotgate.port) as reader, RawClient(slotgate.port) as deleted:
        deleted.send("XREADGROUP", "GROUP", GROUP, "c", "BLOCK", 20_000, "STREAMS", gone, ">")
        wait_blocked(src.port, 1)
        assert admin.delete(gone) == 1
        assert deleted.read() == b"-UNBLOCKED the stream key no longer exists\r\n"

        reader.send("XREADGROUP", "GROUP", GROUP, "c", "BLOCK", 20_000, "STREAMS", key, ">")
        wait_blocked(src.port, 1)
        open_migration(slot, src, dst)
        migrate_keys(src, dst, [key])
        wait_blocked(dst.port, 1)
        entry_id = admin.xadd(key, {"f": "v"})
        got = reader.read()
        assert entry_id in got and b"\r\nf\r\n" in got, got
        dst_id = myid(dst)
        for node in [dst, src] + [m for m in masters(cluster_backend) if m not in (src, dst)]:
            node.client().execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
    assert admin.xack(key, GROUP, entry_id) == 1
    assert admin.delete(key) == 1
