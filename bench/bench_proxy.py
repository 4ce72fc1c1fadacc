"""Throughput through the proxy vs straight to one master, with the real redis-benchmark.

Starts a real 3+3 redis-server cluster and the proxy (``python -m proxy``) on free loopback
ports, then runs ``redis-benchmark -q -n N -t get,set -P p`` against the master that owns
redis-benchmark's key and against the proxy, interleaved for ``--rounds`` rounds (the machine
is shared; medians are reported). Everything started is stopped.

    .venv/bin/python bench/bench_proxy.py [--rounds 3] [--requests 50000]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from protocol.slots import key_slot  # noqa: E402
from tests.conftest import start_real_cluster  # noqa: E402
from tests.support import slotgate_proxy  # noqa: E402

# redis-benchmark without -r uses this literal key for GET and SET.
BENCH_KEY = b"key:__rand_int__"


def redis_benchmark(port: int, pipeline: int, requests: int) -> dict[str, float]:
    out = subprocess.run(
        ["redis-benchmark", "-p", str(port), "-q", "-n", str(requests), "-t", "get,set",
         "-P", str(pipeline)],
        capture_output=True, text=True, timeout=600, check=True,
    ).stdout
    rates = {}
    for line in out.splitlines():
        m = re.match(r"(SET|GET): ([\d.]+) requests per second", line.split("\r")[-1])
        if m:
            rates[m[1]] = float(m[2])
    return rates


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=50000)
    args = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-proxy-"))
    nodes = start_real_cluster(workdir)
    proxy = None
    try:
        proxy = slotgate_proxy(workdir, [nodes[0].port]).start()
        slot = key_slot(BENCH_KEY)
        owner = next(int(e[2][1]) for e in nodes[0].client().execute_command("CLUSTER", "SLOTS")
                     if e[0] <= slot <= e[1])
        runs: dict[tuple[str, int, str], list[float]] = {}
        for _ in range(args.rounds):
            for pipeline in (1, 16):
                for target, port in (("direct", owner), ("proxy", proxy.port)):
                    for cmd, rate in redis_benchmark(port, pipeline, args.requests).items():
                        runs.setdefault((target, pipeline, cmd), []).append(rate)
        for pipeline in (1, 16):
            for cmd in ("SET", "GET"):
                direct = statistics.median(runs["direct", pipeline, cmd])
                proxied = statistics.median(runs["proxy", pipeline, cmd])
                print(f"-P {pipeline:2d} {cmd}: direct {direct:9.0f}/s  proxy {proxied:8.0f}/s  "
                      f"ratio {proxied / direct:.2f}")
    finally:
        if proxy is not None:
            proxy.stop()
        for n in nodes:
            n.stop()


if __name__ == "__main__":
    main()
