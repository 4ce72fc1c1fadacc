"""In-process CPU per request of the optional ``bench_node.py`` writes, through
``dispatch.run_requests`` (no sockets, no parsing): SET of random keys, ``XADD stream:bench *
f v:N`` and ``PFADD hll:bench e:N`` with N random below 1,000,000; and ``incr``, ``get``,
``lpush``, ``hset`` as ``redis-benchmark -t`` sends them without ``-r`` (one key each:
``INCR counter:__rand_int__``, a GET of the key SET first, ...), 16 requests per call,
``--requests`` per round into an emptied keyspace (so PFADD goes through its sparse phase and
its promotion as in the socket benchmark), the median and best of ``--rounds`` rounds. The
requests are made before the clock starts and frozen out of the garbage collector's view.
The build that loads is the one ``import slotgate`` chooses (``SLOTGATE_COMPILE=0``: pure).

    .venv/bin/python bench/bench_dispatch_types.py [--tree DIR] [--tests set,xadd,pfadd]
        [--requests 20000] [--rounds 7]

``--tree DIR``: import the node from another source tree (e.g. a worktree of another commit,
compiled in place with its ``hatch_build.py``).
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1])
ap.add_argument("--tests", default="set,xadd,pfadd")
ap.add_argument("--requests", type=int, default=20000)
ap.add_argument("--rounds", type=int, default=7)
ARGS = ap.parse_args()
sys.path.insert(0, str(ARGS.tree.resolve()))

from slotgate import BUILD  # noqa: E402
from slotgate.node.core import dispatch  # noqa: E402
from slotgate.node.core.config import load  # noqa: E402
from slotgate.node.core.server import Server  # noqa: E402

PER_CALL = 16
# redis-benchmark's own requests (-t incr,get,lpush,hset, no -r): the same key every time
FIXED = {
    "incr": (b"INCR", b"counter:__rand_int__"),
    "get": (b"GET", b"key:__rand_int__"),
    "lpush": (b"LPUSH", b"mylist", b"xxx"),
    "hset": (b"HSET", b"myhash", b"element:__rand_int__", b"xxx"),
}


def requests(kind: str, n: int, rng: random.Random) -> list[list[bytes]]:
    out = []
    for _ in range(n):
        r = b"%d" % rng.randrange(1_000_000)
        if kind == "set":
            out.append([b"SET", b"key:" + r, b"xxx"])
        elif kind == "xadd":
            out.append([b"XADD", b"stream:bench", b"*", b"f", b"v:" + r])
        elif kind == "pfadd":
            out.append([b"PFADD", b"hll:bench", b"e:" + r])
        elif kind in FIXED:
            # fresh bytes (no cached hash, no shared identity), as the request reader makes
            out.append([bytes(bytearray(a)) for a in FIXED[kind]])
        else:
            raise SystemExit(f"unknown test {kind!r}")
    return out


def main() -> None:
    os.chdir(tempfile.mkdtemp(prefix="bench-dispatch-types-"))
    srv = Server(load(["--save", ""]))
    c = srv._new_client("127.0.0.1:1", "127.0.0.1:2")
    rng = random.Random(1)
    n = ARGS.requests
    print(f"tree {ARGS.tree}: {'compiled' if BUILD.compiled else 'pure Python'}")
    for kind in ARGS.tests.split(","):
        per_req: list[float] = []
        for _ in range(ARGS.rounds):
            reqs = requests(kind, n, rng)
            batches = [reqs[i:i + PER_CALL] for i in range(0, n, PER_CALL)]
            dispatch.run_requests(c, [[b"FLUSHALL"], [b"SET", b"key:__rand_int__", b"xxx"]])
            c.out.clear()
            gc.collect()
            gc.freeze()
            t0 = time.process_time()
            for batch in batches:
                dispatch.run_requests(c, batch)
                c.out.clear()
            per_req.append((time.process_time() - t0) / n * 1e6)
            gc.unfreeze()
        print(f"{kind}: median {statistics.median(per_req):.2f} µs/request, "
              f"best {min(per_req):.2f}")


if __name__ == "__main__":
    main()
