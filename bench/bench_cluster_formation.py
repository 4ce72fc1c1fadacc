"""How long N nodes take to form a cluster: ours vs real redis-server 7.0.

For each kind, start N cluster-enabled nodes on free loopback ports, give each 1/N of the slots
and a distinct config epoch (as redis-cli --cluster create does), wait ``--settle-s``, send
every node but the first ``CLUSTER MEET <first>``, and time from the first MEET until every
node knows all N nodes (no handshake left) and shows the same slot signature ("converged"),
and until every node also reports ``cluster_state:ok`` ("ok"). Rounds alternate between the
kinds so both see the same machine load.

Why ``--phase-jitter-s``: every node pings one random peer on every 10th run of its 100 ms
cron, so once a second at a phase fixed by its start time. redis-server nodes start within
~0.2 s of each other, so with a fixed settle their once-a-second pings always land at the same
point after the MEET (with 2.5 s, about 0.2 s after it: right after the handshakes, the best
place; bench/RESULTS.md has real's medians at other settles). Each round therefore adds the
same random 0..jitter seconds to the settle of both kinds, so the MEET falls at a uniformly
random phase of the nodes' cron; and ``--stagger-s`` pauses a random 0..stagger seconds before
each node's start, so the ten phases are independent of each other for both kinds (ours take
~1 s each to start and were spread anyway; redis-server's were bunched). ``--stagger-s 0
--phase-jitter-s 0`` is the setup used before 2026-11-29.

Why ``--settle-s``: a master that has no slots counts itself in the minority, and after the
2 s a master waits from start-up (CLUSTER_WRITABLE_DELAY) it holds ``ok`` back until the rejoin
delay (node timeout, 2 s here) has passed since it last was in the minority. A node that gets
its slots within 2 s of its start never starts that clock; one configured later does. So with
``--settle-s 0`` the result depends on how fast each kind starts up; with a settle longer than
both delays (default 2.5 s) the time measured is gossip convergence alone.

    .venv/bin/python bench/bench_cluster_formation.py [--nodes 10] [--rounds 3] [--settle-s 2.5]
        [--phase-jitter-s 1.0] [--stagger-s 1.0] [--kinds real,ours] [--seed N]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import redis

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


def _status(clients: list[redis.Redis]) -> tuple[bool, bool]:
    """(converged, converged and every node ok)."""
    sigs = set()
    all_ok = True
    for c in clients:
        text = c.execute_command("CLUSTER", "NODES").decode()
        lines = [ln for ln in text.splitlines() if "handshake" not in ln]
        if len(lines) != len(clients):
            return False, False
        sigs.add(_signature(text))
        if all_ok and b"cluster_state:ok" not in c.execute_command("CLUSTER", "INFO"):
            all_ok = False
    converged = len(sigs) == 1
    return converged, converged and all_ok


def form_once(kind: str, count: int, workdir: Path, settle_s: float,
              timeout_s: float = 120.0, stagger_s: float = 0.0,
              rng: random.Random | None = None) -> tuple[float, float]:
    """Seconds from the first MEET until (converged, ok). Each node is started after a random
    0..stagger_s pause (its cron phase then owes nothing to the previous node's start)."""
    make = redis_server if kind == "real" else slotgate_node
    rng = rng or random.Random()
    nodes: list[ManagedProcess] = []
    try:
        for _ in range(count):
            time.sleep(rng.random() * stagger_s)
            n = make(workdir, cluster=True)  # the port is picked right before the start
            nodes.append(n)
            n.start()
            _check_is_ours(n)
        clients = [n.client(socket_timeout=5) for n in nodes]
        step = 16384 // count
        for i, c in enumerate(clients):
            last = 16383 if i == count - 1 else (i + 1) * step - 1
            c.execute_command("CLUSTER", "ADDSLOTSRANGE", i * step, last)
            c.execute_command("CLUSTER", "SET-CONFIG-EPOCH", i + 1)
        time.sleep(settle_s)
        t0 = time.monotonic()
        for c in clients[1:]:
            c.execute_command("CLUSTER", "MEET", "127.0.0.1", nodes[0].port)
        converged_s: float | None = None
        while True:
            t = time.monotonic() - t0
            if t > timeout_s:
                views = "\n".join(f"--- {n.port}:\n" + c.execute_command("CLUSTER", "NODES").decode()
                                  + c.execute_command("CLUSTER", "INFO").decode()[:40]
                                  for n, c in zip(nodes, clients, strict=True))
                raise TimeoutError(f"{kind}: no cluster after {timeout_s} s\n{views}")
            converged, ok = _status(clients)
            if converged and converged_s is None:
                converged_s = t
            if ok:
                return (converged_s if converged_s is not None else t), t
            time.sleep(0.02)
    finally:
        for n in nodes:
            n.stop()


def _check_is_ours(n: ManagedProcess) -> None:
    """The port answers for the process just started, not for another one that took the free
    port meanwhile on this shared machine (RuntimeError: the round is started again)."""
    info = n.client(socket_timeout=5).info("server")
    if int(info["process_id"]) != n.pid:
        raise RuntimeError(f"port {n.port} is served by pid {info['process_id']}, not {n.pid}")


def _summary(values: list[float]) -> str:
    return (f"median {statistics.median(values):.2f} s (min {min(values):.2f}, "
            f"max {max(values):.2f})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--settle-s", type=float, default=2.5,
                    help="seconds between configuring the nodes and the first MEET")
    ap.add_argument("--phase-jitter-s", type=float, default=1.0,
                    help="each round adds the same random 0..this to both kinds' settle")
    ap.add_argument("--stagger-s", type=float, default=1.0,
                    help="pause a random 0..this before starting each node (independent phases)")
    ap.add_argument("--kinds", default="real,ours", help="which kinds to run, in round order")
    ap.add_argument("--seed", type=int, default=None, help="seed of the per-round jitter")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    results: dict[str, list[tuple[float, float]]] = {k: [] for k in args.kinds.split(",")}
    settles: list[float] = []
    for _ in range(args.rounds):
        settle_s = args.settle_s + rng.random() * args.phase_jitter_s
        settles.append(settle_s)
        for kind in results:
            results[kind].append(_form_retrying(kind, args.nodes, settle_s, args.stagger_s, rng))
    print(f"settle per round (s): {[round(s, 2) for s in settles]}")
    for kind, runs in results.items():
        print(f"{kind}: {args.nodes} nodes, settle {args.settle_s} s + 0..{args.phase_jitter_s} "
              f"s, {args.rounds} rounds: converged {_summary([r[0] for r in runs])}; "
              f"ok {_summary([r[1] for r in runs])}")
        print(f"  rounds (converged/ok): {[(round(a, 2), round(b, 2)) for a, b in runs]}")


def _form_retrying(kind: str, count: int, settle_s: float, stagger_s: float,
                   rng: random.Random, attempts: int = 3) -> tuple[float, float]:
    """form_once; a node that could not start (its free port taken meanwhile by another
    process on this shared machine) means a new attempt with new ports."""
    for attempt in range(attempts):
        with tempfile.TemporaryDirectory() as d:
            try:
                return form_once(kind, count, Path(d), settle_s, stagger_s=stagger_s, rng=rng)
            except RuntimeError as e:
                if attempt == attempts - 1:
                    raise
                print(f"{kind}: start failed ({e}); again", file=sys.stderr)
    raise AssertionError("unreachable")


if __name__ == "__main__":
    main()
