"""Full sync of a large dataset while the master keeps serving writes.

Starts two real nodes on loopback, loads ``--size-mb`` of string values into the master,
then points the replica at it while one client keeps writing to the master and records
each write's round-trip latency. Reports the full-sync time and the write latency during
the sync (and, for comparison, before it), then checks the replica holds every key.

    .venv/bin/python bench/bench_replication.py --size-mb 100
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support import ManagedProcess, slotgate_node  # noqa: E402

VALUE_BYTES = 1000
BATCH = 1000


def populate(master: ManagedProcess, keys: int) -> float:
    r = master.client()
    value = b"v" * VALUE_BYTES
    t0 = time.monotonic()
    for start in range(0, keys, BATCH):
        pipe = r.pipeline(transaction=False)
        for i in range(start, min(keys, start + BATCH)):
            pipe.set(f"key:{i}", value)
        pipe.execute()
    return time.monotonic() - t0


def measure_writes(master: ManagedProcess, stop: threading.Event, out: list[float],
                   written: list[int], prefix: str = "during") -> None:
    r = master.client()
    i = 0
    while not stop.is_set():
        t0 = time.perf_counter()
        r.set(f"{prefix}:{i}", i)
        out.append(time.perf_counter() - t0)
        written.append(i)
        i += 1


def pct(samples: list[float], p: float) -> float:
    if not samples:
        return float("nan")
    s = sorted(samples)
    return s[min(len(s) - 1, int(len(s) * p))] * 1000


def run(size_mb: int, workdir: Path) -> dict[str, float]:
    keys = size_mb * 1024 * 1024 // VALUE_BYTES
    master = slotgate_node(workdir).start()
    replica = slotgate_node(workdir).start()
    try:
        load_s = populate(master, keys)
        # baseline latency (no sync running)
        base: list[float] = []
        stop = threading.Event()
        t = threading.Thread(target=measure_writes, args=(master, stop, base, [], "base"))
        t.start()
        time.sleep(2)
        stop.set()
        t.join()
        during: list[float] = []
        written: list[int] = []
        stop = threading.Event()
        t = threading.Thread(target=measure_writes, args=(master, stop, during, written))
        t.start()
        rc = replica.client(socket_timeout=120)
        t0 = time.monotonic()
        rc.execute_command("REPLICAOF", "127.0.0.1", master.port)
        while rc.info("replication").get("master_link_status") != "up":
            time.sleep(0.02)
        sync_s = time.monotonic() - t0
        stop.set()
        t.join()
        mc = master.client()
        deadline = time.monotonic() + 60
        while rc.info("replication")["slave_repl_offset"] != \
                mc.info("replication")["master_repl_offset"]:
            if time.monotonic() > deadline:
                raise RuntimeError("replica did not catch up")
            time.sleep(0.05)
        sizes = (rc.dbsize(), mc.dbsize(), keys + len(written) + len(base))
        assert sizes[0] == sizes[1] == sizes[2], sizes
        for start in range(0, len(written), 1000):
            chunk = written[start:start + 1000]
            assert rc.mget([f"during:{i}" for i in chunk]) == [str(i).encode() for i in chunk]
        return {
            "keys": keys, "load_s": load_s, "sync_s": sync_s, "writes_during_sync": len(written),
            "base_p50_ms": pct(base, 0.5), "base_p99_ms": pct(base, 0.99),
            "base_max_ms": max(base) * 1000,
            "sync_p50_ms": pct(during, 0.5), "sync_p99_ms": pct(during, 0.99),
            "sync_max_ms": max(during) * 1000,
            "sync_mean_ms": statistics.fmean(during) * 1000,
        }
    finally:
        replica.stop()
        master.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=100)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-repl-") as d:
        res = run(args.size_mb, Path(d))
    print(f"dataset: {args.size_mb} MB ({res['keys']} keys x {VALUE_BYTES} B), "
          f"loaded in {res['load_s']:.1f} s")
    print(f"full sync (REPLICAOF -> link up): {res['sync_s']:.2f} s; "
          f"{res['writes_during_sync']} writes served meanwhile, all replicated")
    print(f"write latency before sync: p50 {res['base_p50_ms']:.2f} ms, "
          f"p99 {res['base_p99_ms']:.2f} ms, max {res['base_max_ms']:.2f} ms")
    print(f"write latency during sync: p50 {res['sync_p50_ms']:.2f} ms, "
          f"p99 {res['sync_p99_ms']:.2f} ms, max {res['sync_max_ms']:.2f} ms")


if __name__ == "__main__":
    main()
