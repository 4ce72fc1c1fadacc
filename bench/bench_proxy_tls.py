"""What TLS costs the proxy: the same proxy's plain port against its TLS port.

Starts a real 3-master redis-server cluster (plain) and one proxy with ``tls.port`` (test
certificates made with ``openssl`` in a temporary directory), then runs the real
``redis-benchmark -c 50`` for GET and SET at ``-P 1`` and ``-P 16``, alternating plain and
``--tls`` inside every round. For each run the proxy's CPU time (utime + stime) is read before
and after: CPU-seconds per million requests; medians over the rounds. Connections are opened
once per run (redis-benchmark's 50), so this is the steady-state cost of encryption, not of
handshakes. Everything started is stopped by PID.

    .venv/bin/python bench/bench_proxy_tls.py [--rounds 3] [--requests 50000] [--pipelined 200000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_proxy import CLK_TCK, cpu_ticks, redis_benchmark  # noqa: E402
from tests.proxy.tls_support import make_ca  # noqa: E402
from tests.support import (  # noqa: E402
    create_cluster,
    free_port,
    redis_server,
    running,
    slotgate_proxy,
    start_all,
)

CLIENTS = 50


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=50000, help="per run at -P 1")
    ap.add_argument("--pipelined", type=int, default=200000, help="per run at -P 16")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-tls-") as tmp:
        work = Path(tmp)
        ca = make_ca(work / "certs")
        pair = ca.issue(work / "certs", "proxy", 1)
        nodes = start_all([redis_server(work, cluster=True) for _ in range(3)])
        try:
            create_cluster(nodes, replicas=0)
            tls_port = free_port()
            cfg = work / "proxy.yaml"
            cfg.write_text(yaml.safe_dump({
                "seeds": [f"127.0.0.1:{nodes[0].port}"],
                "tls": {"port": tls_port, "cert_file": str(pair.cert), "key_file": str(pair.key)},
            }))
            proxy = slotgate_proxy(work, [], ["--config", str(cfg)])
            with running(proxy):
                ports = {"plain": (proxy.port, []), "tls": (tls_port, ["--tls", "--cacert",
                                                                      str(ca.cert)])}
                cpu: dict[tuple[str, int, str], list[float]] = {}
                rate: dict[tuple[str, int, str], list[float]] = {}
                for rnd in range(1, args.rounds + 1):
                    for test in ("set", "get"):
                        for pipeline in (1, 16):
                            n = args.requests if pipeline == 1 else args.pipelined
                            for kind, (port, extra) in ports.items():
                                before = cpu_ticks(proxy.pid)
                                rps = redis_benchmark(["-p", str(port), *extra, "-c", str(CLIENTS),
                                                       "-n", str(n), "-P", str(pipeline),
                                                       "-t", test])
                                used_s = (cpu_ticks(proxy.pid) - before) / CLK_TCK
                                key = (test, pipeline, kind)
                                cpu.setdefault(key, []).append(used_s / n * 1e6)
                                rate.setdefault(key, []).append(rps)
                                print(f"round {rnd} {test.upper()} -P {pipeline:2} {kind:5} "
                                      f"{rps:9.0f}/s  proxy {used_s / n * 1e6:5.1f} µs/request",
                                      flush=True)
                print("\n| case | -P | plain µs/req | TLS µs/req | TLS extra | plain req/s | TLS req/s |")
                print("|---|---:|---:|---:|---:|---:|---:|")
                for test in ("set", "get"):
                    for pipeline in (1, 16):
                        p = statistics.median(cpu[(test, pipeline, "plain")])
                        t = statistics.median(cpu[(test, pipeline, "tls")])
                        pr = statistics.median(rate[(test, pipeline, "plain")])
                        tr = statistics.median(rate[(test, pipeline, "tls")])
                        print(f"| {test.upper()} | {pipeline} | {p:.1f} | {t:.1f} | "
                              f"+{(t / p - 1) * 100:.0f} % | {pr:,.0f} | {tr:,.0f} |")
        finally:
            for n in nodes:
                n.stop()


if __name__ == "__main__":
    main()
