"""GET/SET throughput and CPU per request of one cluster-enabled node that owns all 16384
slots, next to the same node standalone, alternating in every round.

The node runs pinned to CPU 0 (``taskset -c 0``), ``redis-benchmark`` to CPU 1. Per round and
pipeline depth, each target gets ``redis-benchmark -p PORT -q -n N -t set -P p`` then the same
with ``-t get``; the server's CPU time (utime + stime from /proc/<pid>/stat) is read around each
run. Medians over the rounds are printed. Everything started is stopped by PID.

    .venv/bin/python bench/bench_node_cluster.py [--rounds 3] [--requests 100000]
        [--before DIR]

``--before DIR``: also run the cluster-enabled node from another tree (e.g.
``git archive REV node protocol | tar -x -C DIR``), as one more target in the same rounds.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support import free_port  # noqa: E402


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cli(port: int, *args: str) -> str:
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True,
                          text=True, check=False).stdout


def run_target(tree: Path, cluster: bool, requests: int, pipeline: int) -> dict[str, tuple[float, float]]:
    """{"SET"|"GET": (requests per second, server CPU-us per request)} for one fresh node."""
    port = free_port(cluster=True)
    with tempfile.TemporaryDirectory() as d:
        argv = ["taskset", "-c", "0", sys.executable, "-m", "slotgate.node", "--port", str(port),
                "--bind", "127.0.0.1", "--dir", d, "--save", ""]
        if cluster:
            argv += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
        env = dict(os.environ, PYTHONPATH=str(tree))
        with open(os.path.join(d, "node.log"), "wb") as log:
            proc = subprocess.Popen(argv, cwd=d, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 20
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), 0.2).close()
                    break
                except OSError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise RuntimeError("node did not start") from None
                    time.sleep(0.05)
            if cluster:
                _cli(port, "CLUSTER", "ADDSLOTSRANGE", "0", "16383")
                while "cluster_state:ok" not in _cli(port, "CLUSTER", "INFO"):
                    if time.monotonic() > deadline + 10:
                        raise RuntimeError("cluster state did not become ok")
                    time.sleep(0.1)
            out: dict[str, tuple[float, float]] = {}
            for test in ("set", "get"):
                c0 = _cpu_s(proc.pid)
                res = subprocess.run(
                    ["taskset", "-c", "1", "redis-benchmark", "-p", str(port), "-q",
                     "-n", str(requests), "-t", test, "-P", str(pipeline)],
                    capture_output=True, text=True, check=True)
                c1 = _cpu_s(proc.pid)
                line = [x for x in res.stdout.replace("\r", "\n").splitlines()
                        if "requests per second" in x][-1]
                rps = float(line.split(":", 1)[1].split("requests per second")[0])
                out[test.upper()] = (rps, (c1 - c0) / requests * 1e6)
            return out
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=100000)
    ap.add_argument("--before", type=Path, default=None)
    args = ap.parse_args()
    targets: list[tuple[str, Path, bool]] = []
    if args.before is not None:
        targets.append(("before, cluster", args.before, True))
    targets += [("cluster", ROOT, True), ("standalone", ROOT, False)]
    results: dict[tuple[str, int, str], list[tuple[float, float]]] = {}
    for rnd in range(args.rounds):
        for pipeline in (1, 16):
            order = targets if rnd % 2 == 0 else targets[::-1]
            for name, tree, cluster in order:
                for test, value in run_target(tree, cluster, args.requests, pipeline).items():
                    results.setdefault((name, pipeline, test), []).append(value)
                    print(f"round {rnd + 1} {name} -P {pipeline} {test}: {value[0]:.0f}/s "
                          f"{value[1]:.1f} CPU-us/request", flush=True)
    print("\nmedians:")
    print("| target | -P | test | requests/s | server CPU-us/request |")
    print("|---|---:|---|---:|---:|")
    for (name, pipeline, test), values in results.items():
        rps = statistics.median(v[0] for v in values)
        cpu = statistics.median(v[1] for v in values)
        print(f"| {name} | {pipeline} | {test} | {rps:,.0f} | {cpu:.1f} |")


if __name__ == "__main__":
    main()
