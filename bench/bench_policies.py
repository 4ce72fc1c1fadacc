"""What replica reads, read-your-writes and durable writes cost through the proxy.

Starts a real redis-server cluster (3 masters, 1 replica each) and one proxy per policy, on
free loopback ports, then runs the real ``redis-benchmark -c 50`` SET and GET at ``-P 1`` and
``-P 16`` against each, alternating the proxies inside every round (medians reported):

- ``plain``:   no policy (every request to its master);
- ``replica``: ``reads.read_from: replica``;
- ``ryw``:     ``read_from: replica`` + ``read_your_writes: true`` (a ROLE after each
               connection's batch of writes);
- ``durable``: ``writes.durable_writes: 1`` (a WAIT 1 after each connection's batch of
               writes, the replies held until it answers);
- ``requirepass``: ``auth.requirepass`` set, redis-benchmark logged in as the default user
               (who may run everything: its requests take the same path as with no auth);
- ``acluser``: a user whose ACL rules are checked on every request (key pattern
               ``~key:*``, ``+@all -@dangerous``), redis-benchmark logged in as that user.

For every run: requests/s, the proxy's CPU per request (utime + stime from /proc) and the
ROLE and WAIT commands the masters ran per 1000 requests (their INFO commandstats; the
replica checks' ROLEs included). Everything started is stopped by PID.

    .venv/bin/python bench/bench_policies.py [--rounds 3] [--requests 50000]
        [--pipelined 200000] [--targets plain,replica,ryw,durable,requirepass,acluser]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_proxy import cpu_ticks, redis_benchmark  # noqa: E402
from tests.conftest import start_cluster  # noqa: E402
from tests.support import ManagedProcess, slotgate_proxy  # noqa: E402

CONFIGS = {
    "plain": "",
    "replica": "reads:\n  read_from: replica\n",
    "ryw": "reads:\n  read_from: replica\n  read_your_writes: true\n",
    "durable": "writes:\n  durable_writes: 1\n",
    "requirepass": "auth:\n  requirepass: benchpw\n",
    "acluser": "auth:\n  users: ['bench on >benchpw ~key:* +@all -@dangerous']\n",
}
# How redis-benchmark logs in to each target (none: no auth).
LOGIN = {"requirepass": ["-a", "benchpw"], "acluser": ["--user", "bench", "-a", "benchpw"]}
TICKS_PER_S = 100


def master_calls(masters: list[ManagedProcess], command: str) -> int:
    total = 0
    for m in masters:
        stats = m.client(socket_timeout=10).info("commandstats")
        total += int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=50_000, help="per run at -P 1")
    ap.add_argument("--pipelined", type=int, default=200_000, help="per run at -P 16")
    ap.add_argument("--targets", default="plain,replica,ryw,durable")
    args = ap.parse_args()
    targets = args.targets.split(",")
    work = Path(tempfile.mkdtemp(prefix="bench-policies-"))
    nodes = start_cluster("real", work / "cluster")
    proxies: dict[str, ManagedProcess] = {}
    try:
        masters = [n for n in nodes
                   if n.client(socket_timeout=5).execute_command("ROLE")[0] == b"master"]
        for name in targets:
            cfg = work / f"{name}.yaml"
            cfg.write_text(CONFIGS[name] or "{}\n")
            proxies[name] = slotgate_proxy(work / name, [nodes[0].port],
                                           ["--config", str(cfg)]).start()
        results: dict[tuple[str, str, int], list[tuple[float, float, float, float]]] = {}
        for rnd in range(args.rounds):
            for pipeline, n in ((1, args.requests), (16, args.pipelined)):
                for test in ("set", "get"):
                    for name in targets:
                        proxy = proxies[name]
                        before = (cpu_ticks(proxy.pid), master_calls(masters, "role"),
                                  master_calls(masters, "wait"))
                        rps = redis_benchmark(["-p", str(proxy.port), "-c", "50", "-n", str(n),
                                               "-P", str(pipeline), "-t", test,
                                               *LOGIN.get(name, [])])
                        cpu_s = (cpu_ticks(proxy.pid) - before[0]) / TICKS_PER_S
                        roles = master_calls(masters, "role") - before[1]
                        waits = master_calls(masters, "wait") - before[2]
                        results.setdefault((test, name, pipeline), []).append(
                            (rps, cpu_s / n * 1e6, roles * 1000 / n, waits * 1000 / n))
                        print(f"round {rnd + 1} -P {pipeline:2} {test} {name:8} {rps:10.0f}/s "
                              f"cpu {cpu_s / n * 1e6:6.1f} us/req role/1k {roles * 1000 / n:6.1f}"
                              f" wait/1k {waits * 1000 / n:6.1f}", flush=True)
        print("\nmedians: test, -P, target: requests/s, proxy CPU us/request, "
              "ROLE and WAIT per 1000 requests")
        for (test, name, pipeline), rows in sorted(results.items()):
            med = [statistics.median(col) for col in zip(*rows, strict=True)]
            print(f"{test} -P {pipeline:2} {name:8} {med[0]:10.0f}/s {med[1]:6.1f} us "
                  f"role {med[2]:6.1f} wait {med[3]:6.1f}")
    finally:
        for p in proxies.values():
            p.stop()
        for n in nodes:
            n.stop()


if __name__ == "__main__":
    main()
