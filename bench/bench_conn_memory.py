"""Memory per idle client connection: redis-server, our node, and the proxy, side by side.

For each server, on loopback: a few connections first (the baseline, so that what every
server allocates once on its first clients is not counted), then ``--connections`` more idle
connections (connected, nothing sent), opened in batches of ``--batch`` and waited for until
``INFO clients`` counts them all; VmRSS from ``/proc/<pid>/status`` before and after, and the
growth divided by the connection count. The connections are then closed and the server
stopped before the next one starts. The proxy's cluster behind it is one redis-server that
owns every slot (idle clients never reach it). RLIMIT_NOFILE is raised to its hard limit in
this process, which the servers inherit.

    .venv/bin/python bench/bench_conn_memory.py [--connections 10000] [--rounds 1]
        [--servers redis,node,proxy] [--before DIR]   # DIR: another revision's tree
        [--idle-latency 200]   # also: a GET's round trip after 50 ms idle, and back to back

``--idle-latency N``: on each server, with the idle connections still open, N GETs each sent
on a connection idle for 50 ms (the proxy has parked it) and N sent back to back; the round
trips' median and 99th percentile.

Everything started is stopped by PID.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.conn_memory import (  # noqa: E402
    BASELINE_CONNECTIONS,
    connected_clients,
    open_idle,
    per_connection_bytes,
    raise_nofile,
    settle_rss_kib,
)
from tests.support import (  # noqa: E402
    ManagedProcess,
    in_tree,
    redis_server,
    slotgate_node,
    slotgate_proxy,
    wait_cluster_ok,
    wait_until,
)


def _with_tree(make: Callable[[], ManagedProcess], tree: str) -> ManagedProcess:
    """``make()`` started; with ``tree``, that revision's code (on PYTHONPATH)."""
    if not tree:
        return make().start()
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(Path(tree).resolve())
    try:
        return in_tree(make(), Path(tree)).start()
    finally:
        if old is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = old


def _none_connected(port: int) -> bool:
    return connected_clients(port) == 0


GET = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"


def round_trips_us(port: int, samples: int, idle_s: float) -> list[float]:
    """GET round trips (µs) on 10 connections taken in turn, ``idle_s`` of silence before
    each (0: back to back)."""
    conns = [socket.create_connection(("127.0.0.1", port)) for _ in range(10)]
    out = []
    try:
        for c in conns:  # each has served a request (its parser made) before it is idle
            c.sendall(GET)
            c.recv(64)
        for i in range(samples):
            if idle_s:
                time.sleep(idle_s)
            c = conns[i % len(conns)]
            t0 = time.perf_counter()
            c.sendall(GET)
            reply = c.recv(64)
            while not reply.endswith(b"\r\n"):
                reply += c.recv(64)
            out.append((time.perf_counter() - t0) * 1e6)
    finally:
        for c in conns:
            c.close()
    return out


def latency_row(label: str, port: int, samples: int) -> str:
    cells = []
    for idle_s in (0.05, 0.0):
        us = sorted(round_trips_us(port, samples, idle_s))
        cells.append(f"{statistics.median(us):.0f} / {us[int(len(us) * 0.99) - 1]:.0f}")
    return f"| {label} | {cells[0]} | {cells[1]} |"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--connections", type=int, default=10_000)
    ap.add_argument("--batch", type=int, default=256, help="connections opened before waiting")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--servers", default="redis,node,proxy")
    ap.add_argument("--before", default="", help="another revision's source tree: its node "
                    "and proxy are measured too ('node-before', 'proxy-before')")
    ap.add_argument("--idle-latency", type=int, default=0, metavar="N",
                    help="also N GET round trips after 50 ms idle, and N back to back")
    args = ap.parse_args()
    n = args.connections
    raise_nofile(n + BASELINE_CONNECTIONS + 200)
    max_clients = n + BASELINE_CONNECTIONS + 100
    workdir = Path(tempfile.mkdtemp(prefix="bench-connmem-"))
    config = workdir / "proxy.yaml"
    config.write_text(f"clients:\n  max_clients: {max_clients}\n")
    backend = redis_server(workdir, cluster=True)
    started: list[ManagedProcess] = []
    results: dict[str, list[float]] = {}
    latency: list[str] = []
    try:
        servers = args.servers.split(",")
        if "proxy" in servers:
            started.append(backend.start())
            backend.client().execute_command("CLUSTER", "ADDSLOTSRANGE", "0", "16383")
            wait_cluster_ok([backend])

        def make(kind: str, tree: str) -> ManagedProcess:
            if kind == "redis":
                return redis_server(workdir, extra=["--maxclients", str(max_clients)]).start()
            if kind == "node":
                return _with_tree(lambda: slotgate_node(
                    workdir, extra=["--maxclients", str(max_clients)]), tree)
            return _with_tree(lambda: slotgate_proxy(
                workdir, [backend.port], ["--config", str(config)]), tree)

        names = [(kind, "") for kind in servers]
        if args.before:
            names += [(kind, args.before) for kind in servers if kind != "redis"]
        print(f"load before: {os.getloadavg()}", flush=True)
        for rnd in range(args.rounds):
            for kind, tree in names:
                label = kind + ("-before" if tree else "")
                proc = make(kind, tree)
                try:
                    per = per_connection_bytes(proc, n, args.batch)
                    if args.idle_latency and rnd == 0:
                        port = proc.port
                        wait_until(partial(_none_connected, port), 60,
                                   "the measured connections closed")
                        idle = open_idle(proc.port, n, args.batch)  # as loaded as measured
                        try:
                            settle_rss_kib(proc.pid)
                            latency.append(latency_row(label, port, args.idle_latency))
                        finally:
                            for s in idle:
                                s.close()
                finally:
                    proc.stop()
                results.setdefault(label, []).append(per)
                print(f"round {rnd + 1} {label:14s} {per:8.0f} bytes per idle connection",
                      flush=True)
        print(f"\nload after: {os.getloadavg()}")
        redis = statistics.median(results["redis"]) if "redis" in results else None
        print(f"\n| server | RSS per idle connection ({n:,} connections) | / redis-server |")
        print("|---|---:|---:|")
        for label, values in results.items():
            med = statistics.median(values)
            ratio = f"{med / redis:.2f}×" if redis else "-"
            print(f"| {label} | {med / 1024:.1f} KiB | {ratio} |")
        if latency:
            print(f"\nGET round trip, µs, median / p99 ({args.idle_latency} each, {n:,} other "
                  "idle connections open)")
            print("| server | after 50 ms idle | back to back |\n|---|---:|---:|")
            print("\n".join(latency))
    finally:
        for proc in started:
            proc.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
