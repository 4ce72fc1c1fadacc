"""What one periodic sweep of the move journal costs a master holding many keys.

Starts one master in cluster mode owning every slot (a real redis-server, or our node with
``--node bundled``), fills it with ``DEBUG POPULATE --keys`` and measures, per sweep, the
master's CPU time (``/proc/<pid>/task/*/schedstat``), the round trips, the wall time and
this process's CPU time (the sweeping proxy's share), for:

- ``scan``: what a sweep did before the index: ``SCAN cursor MATCH *slotgate-journal:*
  COUNT 1000`` until the cursor is 0;
- ``index``: what it does now (``journal._listed``): one pipelined ``SMEMBERS`` of each slot's
  index, for the slots a master owns: all 16384 here, and the 5461 of one master of three
  (``index-5461``).

    .venv/bin/python bench/bench_journal_sweep.py [--keys 1000000] [--rounds 3]

Everything started is stopped by PID.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_proxy import cpu_ns  # noqa: E402
from slotgate.protocol.resp import encode_command  # noqa: E402
from slotgate.proxy.ops.metrics import ProxyMetrics  # noqa: E402
from slotgate.proxy.ops.settings import ProxySettings  # noqa: E402
from slotgate.proxy.routing import journal  # noqa: E402
from slotgate.proxy.routing.splitter import array_elements  # noqa: E402
from tests.support import RawClient, redis_server, slotgate_node, wait_until  # noqa: E402


async def scan_sweep(links: journal.Links, node: str) -> int:
    """The sweep before the index; its round trips."""
    cursor, trips = b"0", 0
    while True:
        raw = (await links.call(node, encode_command(
            b"SCAN", cursor, b"MATCH", b"*" + journal.JOURNAL_PREFIX + b"*", b"COUNT", b"1000"),
            1))[0]
        trips += 1
        head = array_elements(raw)[0]
        cursor = head[head.index(b"\r\n") + 2:-2]
        if cursor == b"0":
            return trips


async def index_sweep(links: journal.Links, node: str, slots: int) -> int:
    await journal._listed(links, node, list(range(slots)))
    return 1


async def measure(node: str, pid: int, method: str, rounds: int) -> dict[str, float]:
    links = journal.Links(ProxySettings(command_timeout_ms=60_000), ProxyMetrics())
    walls, masters, ours, trips = [], [], [], 0
    try:
        await links.call(node, encode_command(b"PING"), 1)  # connected before timing
        for _ in range(rounds):
            m0, p0, w0 = cpu_ns(pid), time.process_time(), time.perf_counter()
            if method == "scan":
                trips = await scan_sweep(links, node)
            else:
                trips = await index_sweep(links, node, 5461 if method == "index-5461" else 16384)
            walls.append(time.perf_counter() - w0)
            ours.append(time.process_time() - p0)
            masters.append((cpu_ns(pid) - m0) / 1e9)
    finally:
        await links.aclose()
    return {"wall_s": statistics.median(walls), "master_cpu_s": statistics.median(masters),
            "sweeper_cpu_s": statistics.median(ours), "round_trips": trips}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--node", choices=["real", "bundled"], default="real")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.node == "real":
            master = redis_server(Path(tmp), cluster=True).start()
        else:
            master = slotgate_node(Path(tmp), cluster=True,
                                   extra=["--enable-debug-command", "yes"]).start()
        try:
            with RawClient(master.port) as c:
                assert c.call("CLUSTER", "ADDSLOTSRANGE", "0", "16383") == b"+OK\r\n"
                wait_until(lambda: b"cluster_state:ok" in c.call("CLUSTER", "INFO"), 30,
                           "cluster ok")
                for start in range(0, args.keys, 100_000):  # (a short block each)
                    n = min(100_000, args.keys - start)
                    got = c.call("DEBUG", "POPULATE", str(n), f"k{start}", "10")
                    assert got == b"+OK\r\n", got
                print(f"{args.node} master, {c.call('DBSIZE').decode().strip()} keys",
                      flush=True)
            node = f"127.0.0.1:{master.port}"
            for method in ("scan", "index", "index-5461"):
                got = trio.run(measure, node, master.pid, method, args.rounds)
                print(f"{method:11} master CPU {got['master_cpu_s'] * 1000:9.1f} ms/sweep  "
                      f"sweeper CPU {got['sweeper_cpu_s'] * 1000:8.1f} ms  wall "
                      f"{got['wall_s'] * 1000:9.1f} ms  round trips {got['round_trips']:.0f}",
                      flush=True)
        finally:
            master.stop()


if __name__ == "__main__":
    main()
