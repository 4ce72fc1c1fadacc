"""In-process cost of ``dispatch.run_requests`` per request (no sockets, no parsing): GET, SET
and a 3-key MGET in one slot, 16 requests per call, on a standalone node, a cluster-enabled
node that owns all slots, and both with a propagate hook installed (as when a replica is
attached). Best of 9 rounds of 32,000 requests.

    .venv/bin/python bench/bench_cluster_dispatch.py [TREE]

``TREE``: the source tree to import the node from (default: this one), e.g. a
``git archive REV node protocol | tar -x -C DIR`` of another revision.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TREE = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TREE))

from slotgate.node.core import dispatch  # noqa: E402
from slotgate.node.core.config import load  # noqa: E402
from slotgate.node.core.server import Server  # noqa: E402

PER_CALL = 16
ROUNDS = 9
REQUESTS = 32000


def make(cluster: bool, hook: bool) -> tuple[Server, Any]:
    args = ["--save", ""]
    if cluster:
        args += ["--cluster-enabled", "yes", "--cluster-config-file", f"n{time.time_ns()}.conf"]
    srv = Server(load(args))
    if cluster:
        from slotgate.node.cluster import bus

        assert srv.cluster is not None
        st = srv.cluster.state
        for slot in range(16384):
            st.add_slot(st.myself, slot)
        st.state = bus.STATE_OK
        st.generation += 1
    if hook:
        sink: list[list[bytes]] = []
        srv.add_propagate_hook(lambda db, argv: sink.append(argv))
    return srv, srv._new_client("127.0.0.1:1", "127.0.0.1:2")


def per_request_us(c: Any, request: list[bytes]) -> float:
    best = float("inf")
    for _ in range(ROUNDS):
        batches = [[list(request) for _ in range(PER_CALL)] for _ in range(REQUESTS // PER_CALL)]
        t0 = time.perf_counter()
        for batch in batches:
            dispatch.run_requests(c, batch)
            c.out.clear()
        best = min(best, (time.perf_counter() - t0) / REQUESTS)
    return best * 1e6


def main() -> None:
    os.chdir(tempfile.mkdtemp(prefix="bench-dispatch-"))
    requests = {"GET": [b"GET", b"key:1"], "SET": [b"SET", b"key:1", b"xxx"],
                "MGET 3 keys": [b"MGET", b"{t}a", b"{t}b", b"{t}c"]}
    print(f"tree: {TREE}")
    print("| node | " + " | ".join(requests) + " |")
    print("|---|" + "---:|" * len(requests))
    for label, cluster, hook in (("standalone", False, False), ("cluster", True, False),
                                 ("standalone + propagate hook", False, True),
                                 ("cluster + propagate hook", True, True)):
        _, c = make(cluster, hook)
        cells = [f"{per_request_us(c, req):.2f} µs" for req in requests.values()]
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
