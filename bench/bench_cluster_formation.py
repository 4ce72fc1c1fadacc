"""How long N nodes take to form a cluster: ours vs real redis-server 7.0.

For each kind, start N cluster-enabled nodes on free loopback ports, give each 1/N of the slots
and a distinct config epoch (as redis-cli --cluster create does), send every node but the
first ``CLUSTER MEET <first>``, and time from the first MEET until every node reports
``cluster_state:ok``, knows all N nodes (no handshake left) and shows the same slot signature.

    .venv/bin/python bench/bench_cluster_formation.py [--nodes 10] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support import ManagedProcess, redis_server, slotgate_node  # noqa: E402


def _signature(text: str) -> str:
    parts = []
    for line in text.splitlines():
        f = line.split()
        slots = sorted(t for t in f[8:] if not t.startswith("["))
        if slots:
            parts.append(f[0] + ":" + ",".join(slots))
    return "|".join(sorted(parts))


def _formed(nodes: list[ManagedProcess]) -> bool:
    sigs = set()
    for n in nodes:
        c = n.client(socket_timeout=5)
        if b"cluster_state:ok" not in c.execute_command("CLUSTER", "INFO"):
            return False
        text = c.execute_command("CLUSTER", "NODES").decode()
        lines = [ln for ln in text.splitlines() if "handshake" not in ln]
        if len(lines) != len(nodes):
            return False
        sigs.add(_signature(text))
    return len(sigs) == 1


def form_once(kind: str, count: int, workdir: Path) -> float:
    make = redis_server if kind == "real" else slotgate_node
    nodes = [make(workdir, cluster=True) for _ in range(count)]
    try:
        for n in nodes:
            n.start()
        step = 16384 // count
        for i, n in enumerate(nodes):
            last = 16383 if i == count - 1 else (i + 1) * step - 1
            c = n.client()
            c.execute_command("CLUSTER", "ADDSLOTSRANGE", i * step, last)
            c.execute_command("CLUSTER", "SET-CONFIG-EPOCH", i + 1)
        t0 = time.monotonic()
        for n in nodes[1:]:
            n.client().execute_command("CLUSTER", "MEET", "127.0.0.1", nodes[0].port)
        while not _formed(nodes):
            if time.monotonic() - t0 > 120:
                raise TimeoutError(f"{kind}: no cluster after 120 s")
            time.sleep(0.05)
        return time.monotonic() - t0
    finally:
        for n in nodes:
            n.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    for kind in ("real", "ours"):
        times = []
        for _ in range(args.rounds):
            with tempfile.TemporaryDirectory() as d:
                times.append(form_once(kind, args.nodes, Path(d)))
        print(f"{kind}: {args.nodes} nodes formed in median {statistics.median(times):.2f} s "
              f"(min {min(times):.2f}, max {max(times):.2f}, {args.rounds} rounds)")


if __name__ == "__main__":
    main()
