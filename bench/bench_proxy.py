"""Throughput through the proxy vs straight to one master vs ``redis-benchmark --cluster``.

Starts a real 3-master redis-server cluster (no replicas) and the proxy (``python -m proxy``)
on free loopback ports, then runs the real ``redis-benchmark -c 50`` for each case, at ``-P 1``
and ``-P 16``, alternating the targets inside every round (the machine is shared, so the
ratios are taken per round and medians reported):

- ``proxy``:   through the proxy;
- ``direct``:  straight to the one master that owns the case's keys (the baseline);
- ``cluster``: ``redis-benchmark --cluster`` against the whole cluster (for reference).

Cases: GET and SET of redis-benchmark's own key; MGET and MSET of 10 keys in 10 different
slots spread over all masters (through the proxy), against a direct MGET/MSET of 10 keys
sharing one hash tag (one slot) on their master. For every proxy run the proxy's CPU time
(utime + stime from /proc/<pid>/stat) is read before and after: CPU-seconds per million
requests, and requests per proxy CPU-second. Everything started is stopped by PID.

    .venv/bin/python bench/bench_proxy.py [--rounds 3] [--requests 100000] [--pipelined 400000]

(``--requests`` / ``--pipelined``: requests per run at -P 1 / -P 16; the 10-key cases run a
quarter of that, ``--split-share``.)
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from protocol.slots import key_slot  # noqa: E402
from tests.support import (  # noqa: E402
    ManagedProcess,
    create_cluster,
    redis_server,
    slotgate_proxy,
)

CLIENTS = 50
PIPELINES = (1, 16)
# redis-benchmark without -r uses this literal key for GET and SET.
BENCH_KEY = b"key:__rand_int__"
TAG = b"{bench}"
CLK_TCK = os.sysconf("SC_CLK_TCK")
REDIS_BENCHMARK = shutil.which("redis-benchmark") or "/usr/bin/redis-benchmark"


def cross_slot_keys(n: int, owner_of: dict[int, int]) -> list[bytes]:
    """``n`` keys in ``n`` different slots, taken round-robin over the masters."""
    by_master: dict[int, list[bytes]] = {}
    seen: set[int] = set()
    i = 0
    while sum(len(v) for v in by_master.values()) < n * 3:
        key = b"bench:%d" % i
        i += 1
        slot = key_slot(key)
        if slot in seen:
            continue
        seen.add(slot)
        by_master.setdefault(owner_of[slot], []).append(key)
    lists = list(by_master.values())
    out: list[bytes] = []
    while len(out) < n:
        for keys in lists:
            if keys and len(out) < n:
                out.append(keys.pop(0))
    return out


def cpu_ticks(pid: int) -> int:
    """utime + stime of ``pid`` in clock ticks."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # fields 14 and 15 of stat(5)


def redis_benchmark(args: Sequence[str]) -> float:
    """Run redis-benchmark with ``--csv``; requests per second of its one test."""
    out = subprocess.run([REDIS_BENCHMARK, "--csv", *args], capture_output=True, text=True,
                         timeout=900, check=True, stdin=subprocess.DEVNULL).stdout
    lines = [line for line in out.splitlines() if line.startswith('"')]  # --cluster adds a preamble
    rows = [r for r in csv.reader(io.StringIO("\n".join(lines))) if r and r[0] != "test"]
    if len(rows) != 1:
        raise RuntimeError(f"unexpected redis-benchmark output: {out!r}")
    return float(rows[0][1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=100_000, help="per run at -P 1")
    ap.add_argument("--pipelined", type=int, default=400_000, help="per run at -P 16")
    ap.add_argument("--split-share", type=float, default=0.25,
                    help="MGET10/MSET10 runs use this share of the request count")
    ap.add_argument("--cases", default="get,set,mget,mset")
    ap.add_argument("--targets", default="direct,proxy,cluster")
    ap.add_argument("--pipelines", default="1,16")
    ap.add_argument("--proxy-args", default="", help="extra proxy flags (space separated)")
    args = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-proxy-"))
    nodes: list[ManagedProcess] = [redis_server(workdir, cluster=True) for _ in range(3)]
    proxy: ManagedProcess | None = None
    try:
        for n in nodes:
            n.start()
        create_cluster(nodes, replicas=0)
        proxy = slotgate_proxy(workdir, [nodes[0].port], args.proxy_args.split()).start()
        owner_of: dict[int, int] = {}
        for lo, hi, master, *_ in nodes[0].client().execute_command("CLUSTER", "SLOTS"):
            for slot in range(lo, hi + 1):
                owner_of[slot] = int(master[1])
        keys = cross_slot_keys(10, owner_of)
        tagged = [TAG + b":%d" % i for i in range(10)]
        # redis-benchmark --cluster puts each node's own hash tag in place of "{tag}".
        cluster_tagged = [f"{{tag}}:{i}" for i in range(10)]
        value = b"xxx"  # redis-benchmark's default 3-byte payload
        mset_cross = [w.decode() for k in keys for w in (k, value)]
        mset_tagged = [w.decode() for k in tagged for w in (k, value)]
        bench_owner = owner_of[key_slot(BENCH_KEY)]
        tag_owner = owner_of[key_slot(TAG)]
        # case -> (command words via proxy, via direct, direct port, via --cluster)
        cases: dict[str, tuple[list[str], list[str], int, list[str]]] = {
            "SET": (["-t", "set"], ["-t", "set"], bench_owner, ["-t", "set"]),
            "GET": (["-t", "get"], ["-t", "get"], bench_owner, ["-t", "get"]),
            "MSET10": (["mset", *mset_cross], ["mset", *mset_tagged], tag_owner,
                       ["mset", *(w for k in cluster_tagged for w in (k, "xxx"))]),
            "MGET10": (["mget", *(k.decode() for k in keys)],
                       ["mget", *(k.decode() for k in tagged)], tag_owner,
                       ["mget", *cluster_tagged]),
        }
        wanted = {"get": "GET", "set": "SET", "mget": "MGET10", "mset": "MSET10"}
        case_names = [wanted[c] for c in args.cases.split(",")]
        # SET before GET, MSET before MGET: the reads find values.
        case_names.sort(key=["SET", "GET", "MSET10", "MGET10"].index)
        targets = args.targets.split(",")
        pipelines = [int(p) for p in args.pipelines.split(",")]
        print(f"slots of the cross-slot keys: {[key_slot(k) for k in keys]} "
              f"(masters {sorted({owner_of[key_slot(k)] for k in keys})})", flush=True)
        print(f"load before: {os.getloadavg()}", flush=True)
        rates: dict[tuple[str, int, str], list[float]] = {}
        ratios: dict[tuple[str, int, str], list[float]] = {}
        cpu_per_m: dict[tuple[str, int], list[float]] = {}
        busy: dict[tuple[str, int], list[float]] = {}
        loads: list[float] = []
        for rnd in range(args.rounds):
            for pipeline in pipelines:
                for case in case_names:
                    n = args.requests if pipeline == 1 else args.pipelined
                    if case.endswith("10"):
                        n = int(n * args.split_share)
                    via_proxy, via_direct, direct_port, via_cluster = cases[case]
                    this: dict[str, float] = {}
                    for target in targets:
                        common = ["-c", str(CLIENTS), "-n", str(n), "-P", str(pipeline)]
                        if target == "proxy":
                            argv = ["-p", str(proxy.port), *common, *via_proxy]
                        elif target == "direct":
                            argv = ["-p", str(direct_port), *common, *via_direct]
                        else:
                            argv = ["--cluster", "-p", str(nodes[0].port), *common, *via_cluster]
                        t0 = time.perf_counter()
                        ticks0 = cpu_ticks(proxy.pid)
                        rate = redis_benchmark(argv)
                        ticks = cpu_ticks(proxy.pid) - ticks0
                        wall_s = time.perf_counter() - t0
                        this[target] = rate
                        rates.setdefault((case, pipeline, target), []).append(rate)
                        if target == "proxy":
                            cpu_s = ticks / CLK_TCK
                            cpu_per_m.setdefault((case, pipeline), []).append(cpu_s / n * 1e6)
                            busy.setdefault((case, pipeline), []).append(cpu_s / wall_s)
                    if "direct" in this:
                        for target, rate in this.items():
                            if target != "direct":
                                ratios.setdefault((case, pipeline, target), []).append(
                                    rate / this["direct"])
                    loads.append(os.getloadavg()[0])
                    print(f"round {rnd + 1} -P {pipeline:2d} {case:6s} " + "  ".join(
                        f"{t} {r:9.0f}/s" for t, r in this.items()), flush=True)
        print(f"\nload average (1 min) during the runs: min {min(loads):.1f}, "
              f"median {statistics.median(loads):.1f}, max {max(loads):.1f}")
        print("\n| case | -P | direct/s | proxy/s | proxy/direct | --cluster/s | "
              "proxy CPU-s per 1M req | req per proxy CPU-s | proxy CPU busy |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for pipeline in pipelines:
            for case in case_names:
                def med(target: str, c: str = case, p: int = pipeline) -> str:
                    v = rates.get((c, p, target))
                    return f"{statistics.median(v):,.0f}" if v else "-"
                r = ratios.get((case, pipeline, "proxy"))
                ratio = f"{statistics.median(r):.2f} ({min(r):.2f}–{max(r):.2f})" if r else "-"
                c = cpu_per_m.get((case, pipeline))
                cpu = f"{statistics.median(c):.1f}" if c else "-"
                per_cpu = f"{1e6 / statistics.median(c):,.0f}" if c else "-"
                b = busy.get((case, pipeline))
                bz = f"{statistics.median(b):.0%}" if b else "-"
                print(f"| {case} | {pipeline} | {med('direct')} | {med('proxy')} | {ratio} | "
                      f"{med('cluster')} | {cpu} | {per_cpu} | {bz} |")
    finally:
        if proxy is not None:
            proxy.stop()
        for node in nodes:
            node.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
