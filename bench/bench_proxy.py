"""Throughput through the proxy vs straight to one master vs ``redis-benchmark --cluster``.

Starts a real 3-master redis-server cluster (no replicas) and the proxy (``python -m slotgate.proxy``)
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
requests, and requests per proxy CPU-second. With ``--proxy-workers N`` (the proxy's
``--workers``) the proxy's CPU is that of its supervisor and all its workers (its children).
Everything started is stopped by PID.

    .venv/bin/python bench/bench_proxy.py [--rounds 3] [--requests 100000] [--pipelined 400000]
        [--before DIR]   # DIR: another revision's tree, e.g. git archive REV | tar -x -C DIR
        [--proxy-workers N]
        [--pure]         # also this tree's proxy as pure Python (SLOTGATE_COMPILE=0): 'pure'

(``--requests`` / ``--pipelined``: requests per run at -P 1 / -P 16; the 10-key cases run a
quarter of that, ``--split-share``.)
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_node import build_line  # noqa: E402
from slotgate.protocol.slots import key_slot  # noqa: E402
from tests.support import (  # noqa: E402
    ManagedProcess,
    child_env,
    create_cluster,
    in_tree,
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


def tree_cpu_ticks(pid: int) -> int:
    """utime + stime of ``pid`` and of its children (a proxy's workers), in clock ticks."""
    total = cpu_ticks(pid)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # a process that just ended
        if int(fields[1]) == pid:  # field 4 of stat(5): the parent
            total += int(fields[11]) + int(fields[12])
    return total


def cpu_ns(pid: int) -> int:
    """Time on CPU of every thread of ``pid`` in ns (/proc/<pid>/task/*/schedstat; finer than
    the clock ticks of stat, which matters for the masters' small shares)."""
    total = 0
    for stat in Path(f"/proc/{pid}/task").glob("*/schedstat"):
        try:
            total += int(stat.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # a thread that just ended
    return total


def children_cpu_s() -> float:
    """CPU seconds (user + system) of this process' waited-for children: redis-benchmark."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def redis_benchmark(args: Sequence[str]) -> float:
    """Run redis-benchmark with ``--csv``; requests per second of its one test."""
    done = subprocess.run([REDIS_BENCHMARK, "--csv", *args], capture_output=True, text=True,
                          timeout=900, stdin=subprocess.DEVNULL)
    out = done.stdout
    if done.returncode:
        raise RuntimeError(f"redis-benchmark {' '.join(args[:8])}… failed: {out[-300:]!r}")
    lines = [line for line in out.splitlines() if line.startswith('"')]  # --cluster adds a preamble
    rows = [r for r in csv.reader(io.StringIO("\n".join(lines))) if r and r[0] != "test"]
    if len(rows) != 1:
        raise RuntimeError(f"unexpected redis-benchmark output: {out!r}")
    return float(rows[0][1])


def start_proxy(workdir: Path, seed: int, extra: list[str], tree: str = "",
                compile_setting: str = "") -> ManagedProcess:
    """The proxy; with ``tree``, the proxy of that source tree (another revision); with
    ``compile_setting`` "0", this tree's proxy as pure Python."""
    if not tree:
        with child_env(SLOTGATE_COMPILE=compile_setting):
            proxy = slotgate_proxy(workdir, [seed], extra).start()
        return wait_all_workers(proxy, extra)
    old_path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(Path(tree).resolve())  # inherited by the child only
    try:
        proxy = in_tree(slotgate_proxy(workdir, [seed], extra), Path(tree))
        return wait_all_workers(proxy.start(), extra)
    finally:
        if old_path is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = old_path


def wait_all_workers(proxy: ManagedProcess, extra: list[str], timeout_s: float = 60) -> ManagedProcess:
    """With ``--workers N``: the port answers once the first worker listens; wait for all."""
    if "--workers" not in extra:
        return proxy
    line = f"({extra[extra.index('--workers') + 1]} workers)"
    deadline = time.monotonic() + timeout_s
    while line not in proxy.log_text():
        if time.monotonic() > deadline:
            proxy.stop()
            raise TimeoutError(f"proxy workers not ready: {proxy.log_text()[-500:]}")
        time.sleep(0.1)
    return proxy


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
    ap.add_argument("--proxy-workers", type=int, default=1,
                    help="the proxy's --workers (its CPU: supervisor + workers)")
    ap.add_argument("--pure", action="store_true",
                    help="also this tree's proxy as pure Python (SLOTGATE_COMPILE=0), 'pure'")
    ap.add_argument("--before", default="",
                    help="source tree of another revision (git archive REV | tar -x -C DIR): "
                         "its proxy is one more target, 'before', in the same rounds")
    args = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-proxy-"))
    nodes: list[ManagedProcess] = [redis_server(workdir, cluster=True) for _ in range(3)]
    procs: dict[str, ManagedProcess] = {}  # proxies by target name
    try:
        for node in nodes:
            node.start()
        create_cluster(nodes, replicas=0)
        extra = args.proxy_args.split()
        if args.proxy_workers != 1:
            extra += ["--workers", str(args.proxy_workers)]
        procs["proxy"] = start_proxy(workdir, nodes[0].port, extra)
        targets = args.targets.split(",")
        if args.pure:
            procs["pure"] = start_proxy(workdir, nodes[0].port, extra, compile_setting="0")
            targets.insert(targets.index("proxy") if "proxy" in targets else 0, "pure")
        for name, proc in procs.items():
            print(f"{name}: " + build_line(proc, "build: "), flush=True)
        if args.before:
            procs["before"] = start_proxy(workdir, nodes[0].port, extra, args.before)
            targets.insert(targets.index("proxy") if "proxy" in targets else 0, "before")
        owner_of: dict[int, int] = {}
        for lo, hi, master, *_ in nodes[0].client().execute_command("CLUSTER", "SLOTS"):
            for slot in range(lo, hi + 1):
                owner_of[slot] = int(master[1])
        keys = [k.decode() for k in cross_slot_keys(10, owner_of)]
        tagged = [f"{TAG.decode()}:{i}" for i in range(10)]
        # redis-benchmark --cluster puts each node's own hash tag in place of "{tag}".
        cluster_tagged = [f"{{tag}}:{i}" for i in range(10)]
        value = "xxx"  # redis-benchmark's default 3-byte payload
        bench_owner = owner_of[key_slot(BENCH_KEY)]
        tag_owner = owner_of[key_slot(TAG)]
        # case -> (command words via a proxy, direct, the direct port, via --cluster)
        cases: dict[str, tuple[list[str], list[str], int, list[str]]] = {
            "SET": (["-t", "set"], ["-t", "set"], bench_owner, ["-t", "set"]),
            "GET": (["-t", "get"], ["-t", "get"], bench_owner, ["-t", "get"]),
            "MSET10": (["mset", *(w for k in keys for w in (k, value))],
                       ["mset", *(w for k in tagged for w in (k, value))], tag_owner,
                       ["mset", *(w for k in cluster_tagged for w in (k, value))]),
            "MGET10": (["mget", *keys], ["mget", *tagged], tag_owner, ["mget", *cluster_tagged]),
        }
        wanted = {"get": "GET", "set": "SET", "mget": "MGET10", "mset": "MSET10"}
        case_names = [wanted[c] for c in args.cases.split(",")]
        # SET before GET, MSET before MGET: the reads find values.
        case_names.sort(key=["SET", "GET", "MSET10", "MGET10"].index)
        pipelines = [int(p) for p in args.pipelines.split(",")]
        print(f"slots of the cross-slot keys: {[key_slot(k.encode()) for k in keys]} "
              f"(masters {sorted({owner_of[key_slot(k.encode())] for k in keys})})", flush=True)
        print(f"load before: {os.getloadavg()}", flush=True)
        rates: dict[tuple[str, int, str], list[float]] = {}
        ratios: dict[tuple[str, int, str], list[float]] = {}
        cpu_per_m: dict[tuple[str, int, str], list[float]] = {}
        busy: dict[tuple[str, int, str], list[float]] = {}
        # CPU-s per 1M requests of the 3 masters together, and of redis-benchmark.
        nodes_per_m: dict[tuple[str, int, str], list[float]] = {}
        bench_per_m: dict[tuple[str, int, str], list[float]] = {}
        loads: list[float] = []
        for rnd in range(args.rounds):
            for pipeline in pipelines:
                for case in case_names:
                    requests = args.requests if pipeline == 1 else args.pipelined
                    if case.endswith("10"):
                        requests = int(requests * args.split_share)
                    via_proxy, via_direct, direct_port, via_cluster = cases[case]
                    common = ["-c", str(CLIENTS), "-n", str(requests), "-P", str(pipeline)]
                    this: dict[str, float] = {}
                    for target in targets:
                        measured = procs.get(target)
                        if measured is not None:
                            argv = ["-p", str(measured.port), *common, *via_proxy]
                        elif target == "direct":
                            argv = ["-p", str(direct_port), *common, *via_direct]
                        else:
                            argv = ["--cluster", "-p", str(nodes[0].port), *common, *via_cluster]
                        t0 = time.perf_counter()
                        ticks0 = tree_cpu_ticks(measured.pid) if measured is not None else 0
                        node_ns0 = sum(cpu_ns(n.pid) for n in nodes)
                        bench_cpu0 = children_cpu_s()
                        rate = redis_benchmark(argv)
                        node_cpu_s = (sum(cpu_ns(n.pid) for n in nodes) - node_ns0) / 1e9
                        key = (case, pipeline, target)
                        nodes_per_m.setdefault(key, []).append(node_cpu_s / requests * 1e6)
                        bench_per_m.setdefault(key, []).append(
                            (children_cpu_s() - bench_cpu0) / requests * 1e6)
                        if measured is not None:
                            cpu_s = (tree_cpu_ticks(measured.pid) - ticks0) / CLK_TCK
                            wall_s = time.perf_counter() - t0
                            key = (case, pipeline, target)
                            cpu_per_m.setdefault(key, []).append(cpu_s / requests * 1e6)
                            busy.setdefault(key, []).append(cpu_s / wall_s)
                        this[target] = rate
                        rates.setdefault((case, pipeline, target), []).append(rate)
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
        print("\n| case | -P | direct/s | target | target/s | target/direct (min–max) | "
              "CPU-s per 1M req | req per CPU-s | CPU busy |")
        print("|---|---:|---:|---|---:|---:|---:|---:|---:|")
        for pipeline in pipelines:
            for case in case_names:
                def med(target: str, c: str = case, p: int = pipeline) -> str:
                    v = rates.get((c, p, target))
                    return f"{statistics.median(v):,.0f}" if v else "-"
                for target in targets:
                    if target == "direct":
                        continue
                    key = (case, pipeline, target)
                    r = ratios.get(key)
                    ratio = f"{statistics.median(r):.2f} ({min(r):.2f}–{max(r):.2f})" if r else "-"
                    c = cpu_per_m.get(key)
                    cpu = f"{statistics.median(c):.1f}" if c else "-"
                    per_cpu = f"{1e6 / statistics.median(c):,.0f}" if c else "-"
                    b = busy.get(key)
                    bz = f"{statistics.median(b):.0%}" if b else "-"
                    print(f"| {case} | {pipeline} | {med('direct')} | {target} | {med(target)} | "
                          f"{ratio} | {cpu} | {per_cpu} | {bz} |")
        print_cpu_budget(case_names, pipelines, targets, rates, cpu_per_m, nodes_per_m,
                         bench_per_m)
    finally:
        for proc in procs.values():
            proc.stop()
        for node in nodes:
            node.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def print_cpu_budget(case_names: list[str], pipelines: list[int], targets: list[str],
                     rates: dict[tuple[str, int, str], list[float]],
                     cpu_per_m: dict[tuple[str, int, str], list[float]],
                     nodes_per_m: dict[tuple[str, int, str], list[float]],
                     bench_per_m: dict[tuple[str, int, str], list[float]]) -> None:
    """Where the machine's CPU goes per request (medians): the proxy, the 3 masters together,
    redis-benchmark; and, for the target ratio of each case, the CPU-seconds per second that
    rate would take at these costs (above the core count, no proxy could reach it here)."""
    goal = {"SET": (0.45, 0.25), "GET": (0.45, 0.25), "MSET10": (0.30, 0.30),
            "MGET10": (0.30, 0.30)}
    cores = os.cpu_count() or 1

    def m(d: dict[tuple[str, int, str], list[float]], key: tuple[str, int, str]) -> float:
        v = d.get(key)
        return statistics.median(v) if v else 0.0

    print(f"\nCPU per request (µs, medians; {cores} cores): proxy, the 3 masters together, "
          "redis-benchmark; 'at goal' = CPU-s per s the goal ratio's rate takes at these costs")
    print("| case | -P | target | proxy µs | masters µs | redis-benchmark µs | total µs | "
          "goal rate/s | CPU-s/s at goal | left for the proxy at goal (µs/req) |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for pipeline in pipelines:
        for case in case_names:
            direct = statistics.median(rates.get((case, pipeline, "direct"), [0.0]))
            ratio = goal[case][0 if pipeline == 1 else 1]
            for target in targets:
                key = (case, pipeline, target)
                proxy_us, nodes_us, bench_us = (m(cpu_per_m, key), m(nodes_per_m, key),
                                                m(bench_per_m, key))
                total = proxy_us + nodes_us + bench_us
                if target in ("direct", "cluster"):
                    print(f"| {case} | {pipeline} | {target} | - | {nodes_us:.1f} | "
                          f"{bench_us:.1f} | {total:.1f} | - | - | - |")
                    continue
                goal_rate = ratio * direct
                need = goal_rate * total / 1e6
                # CPU left per request for the proxy if the rest cost what it costs now.
                left = cores * 1e6 / goal_rate - nodes_us - bench_us if goal_rate else 0.0
                print(f"| {case} | {pipeline} | {target} | {proxy_us:.1f} | {nodes_us:.1f} | "
                      f"{bench_us:.1f} | {total:.1f} | {goal_rate:,.0f} | {need:.2f} | "
                      f"{left:.1f} |")


if __name__ == "__main__":
    main()
