"""Throughput of our node (standalone) against a real redis-server, same run, alternating.

Both servers run pinned to CPU 0 (``taskset -c 0``), ``redis-benchmark`` to CPU 1, so each
server gets one core and the load generator the other. Every round runs, for each pipeline
depth, ``redis-benchmark -c 50 -n N -P p -t set,get,incr,lpush,hset,mset --csv`` against the
node, then against redis-server (the order flips every round). Ratios node/redis are taken per
round and their median reported. The server's CPU time (utime + stime from /proc/<pid>/stat)
is read around each run: CPU-µs per request. Everything started is stopped by PID.

    .venv/bin/python bench/bench_node.py [--rounds 3] [--requests 100000] [--pipelined 400000]
        [--tests set,get,incr,lpush,hset,mset] [--before DIR]

``--before DIR``: also run the node from another tree (e.g. ``git archive REV | tar -x -C DIR``).
``--pure``: also run this tree's node as pure Python (``SLOTGATE_COMPILE=0``), target ``pure``:
the compiled build against its own source, in the same rounds.
``--replica``: give each server a replica of its own kind (pinned to the same CPU), so every
write is also propagated: the master-with-replica throughput, ours against redis-server's.
``--split``: one ``redis-benchmark`` run per test (``-t incr`` alone, ...), so the server CPU
per request is known per test and printed in a second table. ``--pipelines 16``: only -P 16.

Optional tests (not in the default set), each its own redis-benchmark run with a command line,
prefilled identically on every server after each FLUSHALL: ``pfadd`` (``PFADD hll:bench
e:__rand_int__``, ``-r 1000000``), ``pfcount3`` (``PFCOUNT`` of three HLLs of 10,000 elements
each), ``geosearch`` (``GEOSEARCH ... FROMLONLAT 2.35 48.85 BYRADIUS 50 km ASC COUNT 10`` on 500
points, seed 11), ``xadd`` (``XADD stream:bench * f v:__rand_int__``), ``xreadgroup10``
(``XREADGROUP GROUP g c COUNT 10 STREAMS stream:read 0``: the first 10 of the 100 entries
pending for consumer c, of a 1,000-entry stream), ``evalsha3`` / ``fcall3`` (a 3-command script:
INCR, SET, GET of two keys, through EVALSHA of the loaded script and FCALL of the same body as a
function), e.g. ``--split --tests pfadd,pfcount3,geosearch``.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support import (  # noqa: E402
    ManagedProcess,
    child_env,
    in_tree,
    redis_server,
    slotgate_node,
)

CLIENTS = 50
PIPELINES = (1, 16)
TESTS = "set,get,incr,lpush,hset,mset"
CLK_TCK = os.sysconf("SC_CLK_TCK")
REDIS_BENCHMARK = shutil.which("redis-benchmark") or "/usr/bin/redis-benchmark"
# optional tests: name -> the command redis-benchmark sends (with -r 1000000)
COMMANDS = {
    "pfadd": ["PFADD", "hll:bench", "e:__rand_int__"],
    "pfcount3": ["PFCOUNT", "hll:1", "hll:2", "hll:3"],
    "geosearch": ["GEOSEARCH", "geo:bench", "FROMLONLAT", "2.35", "48.85", "BYRADIUS", "50", "km",
                  "ASC", "COUNT", "10"],
    "xadd": ["XADD", "stream:bench", "*", "f", "v:__rand_int__"],
    "xreadgroup10": ["XREADGROUP", "GROUP", "g", "c", "COUNT", "10", "STREAMS", "stream:read", "0"],
}
SCRIPT3 = ("redis.call('incr', KEYS[1]) redis.call('set', KEYS[2], ARGV[1]) "
           "return redis.call('get', KEYS[2])")
LIB3 = f"#!lua name=bench\nredis.register_function('bench3', function(KEYS, ARGV) {SCRIPT3} end)"
COMMANDS["evalsha3"] = ["EVALSHA", hashlib.sha1(SCRIPT3.encode()).hexdigest(), "2", "ev:n",
                        "ev:__rand_int__", "v"]
COMMANDS["fcall3"] = ["FCALL", "bench3", "2", "ev:n", "ev:__rand_int__", "v"]
SERVER_CPU = "0"
BENCH_CPU = "1"


def cpu_s(pid: int) -> float:
    """utime + stime of ``pid`` in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def prefill(client) -> None:
    """The data the optional tests read: identical on every server (fixed seed)."""
    pipe = client.pipeline(transaction=False)
    for k in (1, 2, 3):
        for i in range(0, 10_000, 1000):
            pipe.pfadd(f"hll:{k}", *(f"{k}:{j}" for j in range(i, i + 1000)))
    rng = random.Random(11)
    for i in range(500):
        pipe.geoadd("geo:bench", (rng.uniform(1.5, 3.2), rng.uniform(48.3, 49.4), f"p{i}"))
    for i in range(1, 1001):
        pipe.xadd("stream:read", {"f": f"v{i}", "n": str(i)}, id=f"{i}-0")
    pipe.xgroup_create("stream:read", "g", id="0")
    pipe.xreadgroup("g", "c", {"stream:read": ">"}, count=100)
    pipe.script_load(SCRIPT3)
    pipe.function_load(LIB3, replace=True)
    pipe.execute()


def run_benchmark(port: int, n: int, pipeline: int, tests: str) -> dict[str, float]:
    """requests/s per test name (lower case) from one redis-benchmark run."""
    argv = ["taskset", "-c", BENCH_CPU, REDIS_BENCHMARK, "-h", "127.0.0.1", "-p", str(port),
            "-c", str(CLIENTS), "-n", str(n), "-P", str(pipeline), "--csv"]
    if tests in COMMANDS:  # one optional test: its command line, its row named after it
        argv += ["-r", "1000000", *COMMANDS[tests]]
        out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=600).stdout
        return {tests: float(next(r for r in csv.reader(io.StringIO(out))
                                  if len(r) >= 2 and r[0] != "test")[1])}
    argv += ["-t", tests]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=600).stdout
    rps: dict[str, float] = {}
    for row in csv.reader(io.StringIO(out)):
        if len(row) < 2 or row[0] == "test":
            continue
        name = row[0].split()[0].lower()
        rps[name] = float(row[1])
    return rps


def pinned(proc: ManagedProcess) -> ManagedProcess:
    proc.argv = ["taskset", "-c", SERVER_CPU, *proc.argv]  # taskset execs: same PID
    return proc


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=100_000, help="requests per run at -P 1")
    ap.add_argument("--pipelined", type=int, default=400_000, help="requests per run at -P 16")
    ap.add_argument("--tests", default=TESTS)
    ap.add_argument("--split", action="store_true", help="one redis-benchmark run per test")
    ap.add_argument("--pipelines", default=",".join(map(str, PIPELINES)))
    ap.add_argument("--before", type=Path, default=None, help="another tree's node, for before/after")
    ap.add_argument("--replica", action="store_true", help="each server with a replica")
    ap.add_argument("--pure", action="store_true",
                    help="also this tree's node as pure Python (SLOTGATE_COMPILE=0)")
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="bench-node-") as tmp:
        work = Path(tmp)
        targets: dict[str, ManagedProcess] = {
            "node": pinned(slotgate_node(work)),
            "redis": pinned(redis_server(work, extra=["--repl-diskless-sync-delay", "0"])),
        }
        if args.before is not None:
            targets["before"] = pinned(in_tree(slotgate_node(work / "before"), args.before))
        if args.pure:
            targets["pure"] = pinned(slotgate_node(work / "pure"))
        replicas: dict[str, ManagedProcess] = {}
        if args.replica:
            replicas = {name: pinned(redis_server(work) if name == "redis"
                                     else in_tree(slotgate_node(work / f"{name}-replica"),
                                                  args.before) if name == "before"
                                     else slotgate_node(work / f"{name}-replica"))
                        for name in targets}
        cwd_env = os.environ.get("PYTHONPATH")
        try:
            for name, proc in [*targets.items(), *replicas.items()]:
                if name == "before":
                    os.environ["PYTHONPATH"] = str(args.before.resolve())
                    try:
                        proc.start()
                    finally:
                        if cwd_env is None:
                            os.environ.pop("PYTHONPATH", None)
                        else:
                            os.environ["PYTHONPATH"] = cwd_env
                else:
                    with child_env(SLOTGATE_COMPILE="0" if name.startswith("pure") else ""):
                        proc.start()
            for name, replica in replicas.items():
                attach(replica, targets[name])
            for name, proc in targets.items():
                if name != "redis":
                    print(f"{name}: " + build_line(proc, "Build: "), flush=True)
            # results[(pipeline, test, target)] -> list of rps; cpu_us[(pipeline, target)]
            results: dict[tuple[int, str, str], list[float]] = {}
            cpu_us: dict[tuple[int, str], list[float]] = {}
            # --split: cpu_test[(pipeline, test, target)] -> list of CPU-µs per request
            cpu_test: dict[tuple[int, str, str], list[float]] = {}
            tests = args.tests.split(",")
            pipelines = [int(p) for p in args.pipelines.split(",")]
            order = list(targets)
            for rnd in range(args.rounds):
                for pipeline in pipelines:
                    n = args.requests if pipeline == 1 else args.pipelined
                    for name in (order if rnd % 2 == 0 else order[::-1]):
                        proc = targets[name]
                        proc.client().flushall()
                        if any(t in COMMANDS for t in tests):
                            prefill(proc.client())
                        if args.split:
                            rps = {}
                            for t in tests:
                                c0 = cpu_s(proc.pid)
                                rps.update(run_benchmark(proc.port, n, pipeline, t))
                                cpu_test.setdefault((pipeline, t, name), []).append(
                                    (cpu_s(proc.pid) - c0) / n * 1e6)
                            cpu_us.setdefault((pipeline, name), []).append(statistics.mean(
                                cpu_test[(pipeline, t, name)][-1] for t in tests))
                        else:
                            if any(t in COMMANDS for t in tests):
                                ap.error("the optional tests need --split")
                            c0 = cpu_s(proc.pid)
                            rps = run_benchmark(proc.port, n, pipeline, args.tests)
                            used = cpu_s(proc.pid) - c0
                            cpu_us.setdefault((pipeline, name), []).append(
                                used / (n * len(tests)) * 1e6)
                        for t in tests:
                            results.setdefault((pipeline, t, name), []).append(rps[t])
                        print(f"round {rnd} -P {pipeline} {name}: "
                              + " ".join(f"{t}={rps[t]:.0f}" for t in tests)
                              + f" cpu={cpu_us[(pipeline, name)][-1]:.1f}us/req", flush=True)
            report(results, cpu_us, tests, list(targets), args.rounds, pipelines)
            if cpu_test:
                report_cpu(cpu_test, tests, list(targets), pipelines)
        finally:
            for proc in [*targets.values(), *replicas.values()]:
                proc.stop()


def build_line(proc: ManagedProcess, prefix: str, timeout_s: float = 10.0) -> str:
    """The build a started process reports (its log line from ``prefix`` on)."""
    deadline = time.monotonic() + timeout_s
    while True:
        text = proc.log_text()
        if prefix in text or time.monotonic() > deadline:
            return text.partition(prefix)[2].partition("\n")[0] or "(not logged)"
        time.sleep(0.1)


def attach(replica: ManagedProcess, master: ManagedProcess, timeout_s: float = 60.0) -> None:
    """REPLICAOF, then wait until the link is up."""
    r = replica.client()
    r.execute_command("REPLICAOF", "127.0.0.1", master.port)
    deadline = time.monotonic() + timeout_s
    while r.info("replication").get("master_link_status") != "up":
        if time.monotonic() > deadline:
            raise TimeoutError(f"replica of port {master.port} did not link")
        time.sleep(0.1)


def report(results: dict[tuple[int, str, str], list[float]], cpu_us: dict[tuple[int, str], list[float]],
           tests: list[str], names: list[str], rounds: int, pipelines: list[int]) -> None:
    others = [n for n in names if n != "redis"]
    head = "| -P | test | redis rps | " + " | ".join(f"{n} rps | {n}/redis" for n in others) + " |"
    print()
    print(head)
    print("|" + "---|" * (3 + 2 * len(others)))
    for pipeline in pipelines:
        for t in tests + ["cpu"]:
            if t == "cpu":
                red = statistics.median(cpu_us[(pipeline, "redis")])
                cells = [f"{red:.1f} µs/req CPU"]
                for n in others:
                    ours = statistics.median(cpu_us[(pipeline, n)])
                    cells += [f"{ours:.1f} µs/req CPU", f"{red / ours:.2f}x"]
                print(f"| {pipeline} | server CPU | " + " | ".join(cells) + " |")
                continue
            red_l = results[(pipeline, t, "redis")]
            cells = [f"{statistics.median(red_l):,.0f}"]
            for n in others:
                ours_l = results[(pipeline, t, n)]
                ratios = [o / r for o, r in zip(ours_l, red_l, strict=True)]
                cells += [f"{statistics.median(ours_l):,.0f}", f"{statistics.median(ratios):.2f}x"]
            print(f"| {pipeline} | {t} | " + " | ".join(cells) + " |")
    print(f"\nmedians of {rounds} rounds; ratio = median of per-round ratios")


def report_cpu(cpu_test: dict[tuple[int, str, str], list[float]], tests: list[str],
               names: list[str], pipelines: list[int]) -> None:
    """Server CPU-µs per request by test (--split); ratio = redis CPU / ours per round, median."""
    others = [n for n in names if n != "redis"]
    print()
    print("| -P | test | redis CPU/req | " + " | ".join(f"{n} CPU/req | redis/{n}" for n in others)
          + " |")
    print("|" + "---|" * (3 + 2 * len(others)))
    for pipeline in pipelines:
        for t in tests:
            red_l = cpu_test[(pipeline, t, "redis")]
            cells = [f"{statistics.median(red_l):.2f} µs"]
            for n in others:
                ours_l = cpu_test[(pipeline, t, n)]
                ratios = [r / o for o, r in zip(ours_l, red_l, strict=True)]
                cells += [f"{statistics.median(ours_l):.2f} µs", f"{statistics.median(ratios):.2f}x"]
            print(f"| {pipeline} | {t} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
