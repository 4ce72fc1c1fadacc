"""Multi-key commands across slots through the proxy, against the same commands in one slot.

Starts a 3-master cluster (real redis-servers, or our nodes with ``--nodes bundled``; no
replicas) and the proxy on free loopback ports. One client sends each case's commands one at
a time (``-P 1``), the cases alternating inside every round; reported per command: the
median wall time over the rounds, the proxy's CPU time and the masters' CPU time.

- ``sunionstore``: SUNIONSTORE of 3 sets of 100 members into a 4th key;
- ``rename``: RENAME of a 100-byte string to another key and back (each command one move);
- ``eval``: the same move as an EVAL script over its 2 KEYS (GET, SET, DEL);
- ``msetnx``: MSETNX of 2 fresh keys (untagged: two random slots, mostly on two masters);
- ``blpop``: an RPUSH of one element to the second of 2 lists, then BLPOP over both (the pop
  finds it at once: the first key empty, the second not); ``bzpopmin`` the same with ZADD.
  Through the proxy across slots each pop parks its element, then commits it (poppark.py).

Targets: ``xslot``: the keys without hash tags, in 4 (RENAME, EVAL, the pops: 2) different slots spread over
the masters, through the proxy; ``tagged``: the same commands on keys sharing one hash tag,
through the proxy; ``direct``: the tagged commands straight to their master.

    .venv/bin/python bench/bench_crossslot.py [--rounds 5] [--commands 2000] [--nodes real]

Everything started is stopped by PID.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_proxy import cpu_ns  # noqa: E402
from slotgate.protocol.slots import key_slot  # noqa: E402
from tests.support import (  # noqa: E402
    ManagedProcess,
    RawClient,
    create_cluster,
    redis_server,
    slotgate_node,
    slotgate_proxy,
)

MEMBERS = 100
_MOVE_SCRIPT = ("redis.call('SET', KEYS[2], redis.call('GET', KEYS[1])) "
                "return redis.call('DEL', KEYS[1])")


def spread_keys(n: int, owner_of: dict[int, int]) -> list[str]:
    """``n`` untagged keys in different slots, round-robin over the masters."""
    by_master: dict[int, list[str]] = {}
    i = 0
    while min((len(v) for v in by_master.values()), default=0) < n or len(by_master) < 3:
        key = f"xs:{i}"
        i += 1
        by_master.setdefault(owner_of[key_slot(key.encode())], []).append(key)
    lists = list(by_master.values())
    return [lists[j % len(lists)][j // len(lists)] for j in range(n)]


def setup(c: RawClient, keys: list[str]) -> None:
    for j, k in enumerate(keys[1:4]):
        c.call("DEL", k)
        c.call("SADD", k, *[f"m{j * 50 + m}" for m in range(MEMBERS)])


_serial = [0]


def run_case(c: RawClient, case: str, keys: list[str], n: int) -> None:
    if case == "sunionstore":
        argv = ["SUNIONSTORE", keys[0], keys[1], keys[2], keys[3]]
        for _ in range(n):
            c.call(*argv)
        return
    if case in ("blpop", "bzpopmin"):
        a, b = keys[6], keys[7]
        push = ["RPUSH", b, "x"] if case == "blpop" else ["ZADD", b, "1", "x"]
        for _ in range(n):
            c.call(*push)
            reply = c.call(case.upper(), a, b, "1")
            assert reply[:1] == b"*", reply
        return
    if case == "msetnx":  # fresh keys each time: all absent, MSETNX sets both (:1)
        tag = "{xs}" if keys[0].startswith("{xs}") else ""
        for _ in range(n):
            _serial[0] += 1
            a, b = f"{tag}xm:{_serial[0]}:a", f"{tag}xm:{_serial[0]}:b"
            reply = c.call("MSETNX", a, "v", b, "w")
            assert reply == b":1\r\n", reply
        return
    a, b = keys[4], keys[5]
    for i in range(n):
        pair = (a, b) if i % 2 == 0 else (b, a)
        if case == "eval":
            reply = c.call("EVAL", _MOVE_SCRIPT, "2", *pair)
            assert reply == b":1\r\n", reply
        else:
            reply = c.call("RENAME", *pair)
            assert reply == b"+OK\r\n", reply


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--commands", type=int, default=2000, help="per case, target and round")
    ap.add_argument("--nodes", choices=("real", "bundled"), default="real")
    ap.add_argument("--cases", default="sunionstore,rename,eval,blpop,bzpopmin")
    args = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-crossslot-"))
    if args.nodes == "real":
        nodes = [redis_server(workdir, cluster=True) for _ in range(3)]
    else:
        nodes = [slotgate_node(workdir, cluster=True) for _ in range(3)]
    proxy: ManagedProcess | None = None
    try:
        for node in nodes:
            node.start()
        create_cluster(nodes, replicas=0)
        proxy = slotgate_proxy(workdir, [nodes[0].port]).start()
        owner_of: dict[int, int] = {}
        for lo, hi, master, *_ in nodes[0].client().execute_command("CLUSTER", "SLOTS"):
            for s in range(lo, hi + 1):
                owner_of[s] = int(master[1])
        xkeys = spread_keys(8, owner_of)
        # RENAME across masters too.
        assert owner_of[key_slot(xkeys[4].encode())] != owner_of[key_slot(xkeys[5].encode())]
        assert owner_of[key_slot(xkeys[6].encode())] != owner_of[key_slot(xkeys[7].encode())]
        tkeys = [f"{{xs}}:{i}" for i in range(8)]
        tagged_port = owner_of[key_slot(b"xs")]
        ports = {"xslot": proxy.port, "tagged": proxy.port, "direct": tagged_port}
        keysets = {"xslot": xkeys, "tagged": tkeys, "direct": tkeys}
        clients = {t: RawClient(p) for t, p in ports.items()}
        for t, c in clients.items():
            if t != "direct":
                setup(c, keysets[t])
                c.call("SET", keysets[t][4], "v" * 100)
        node_pids = [n.pid for n in nodes]
        results: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
        for _ in range(args.rounds):
            for case in args.cases.split(","):
                for target in ("xslot", "tagged", "direct"):
                    c = clients[target]
                    p0, n0 = cpu_ns(proxy.pid), sum(cpu_ns(p) for p in node_pids)
                    t0 = time.perf_counter()
                    run_case(c, case, keysets[target], args.commands)
                    wall = time.perf_counter() - t0
                    p1, n1 = cpu_ns(proxy.pid), sum(cpu_ns(p) for p in node_pids)
                    k = args.commands
                    results.setdefault((case, target), []).append(
                        (wall / k * 1e6, (p1 - p0) / k / 1e3, (n1 - n0) / k / 1e3))
        print(f"nodes: {args.nodes}; {args.rounds} rounds x {args.commands} commands; "
              "medians, µs per command")
        print(f"{'case':<12} {'target':<7} {'wall':>8} {'proxy CPU':>10} {'masters CPU':>12}")
        for (case, target), rows in results.items():
            wall, pcpu, ncpu = (statistics.median(r[i] for r in rows) for i in range(3))
            print(f"{case:<12} {target:<7} {wall:8.1f} {pcpu:10.1f} {ncpu:12.1f}")
        for c in clients.values():
            c.close()
    finally:
        if proxy is not None:
            proxy.stop()
        for node in nodes:
            node.stop()


if __name__ == "__main__":
    main()
