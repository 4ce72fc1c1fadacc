"""Time of ``redis-cli --cluster reshard`` moving 1000 slots holding 20,000 keys between two of
three masters: ours vs real redis-server 7.0 (node timeout 2000 ms, keys ``key:<i>``).

    .venv/bin/python bench/bench_cluster_reshard.py [--slots 1000] [--keys 20000]
        [--value-bytes N] [--rdbcompression yes|no] [--only ours|real]

``--value-bytes``: values of N bytes of text (LZF-compressible) instead of ``v<i>``;
``--rdbcompression``: the nodes' setting (MIGRATE's DUMP payloads compressed or not).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from redis.cluster import RedisCluster  # noqa: E402

from tests.support import (  # noqa: E402
    ManagedProcess,
    redis_cli,
    redis_server,
    slotgate_node,
    wait_cluster_ok,
)


def _value(i: int, nbytes: int) -> str:
    if not nbytes:
        return f"v{i}"
    return (f"value {i} of the reshard bench; " * (nbytes // 20 + 1))[:nbytes]


def reshard_once(kind: str, slots: int, keys: int, workdir: Path, value_bytes: int = 0,
                 rdbcompression: str = "yes") -> float:
    make = redis_server if kind == "real" else slotgate_node
    nodes: list[ManagedProcess] = [make(workdir, cluster=True,
                                        extra=["--rdbcompression", rdbcompression])
                                   for _ in range(3)]
    try:
        for n in nodes:
            n.start()
        redis_cli("--cluster", "create", *[f"127.0.0.1:{n.port}" for n in nodes],
                  "--cluster-yes")
        wait_cluster_ok(nodes)
        time.sleep(2)
        rc = RedisCluster(host="127.0.0.1", port=nodes[0].port)
        pipe = rc.pipeline()
        for i in range(keys):
            pipe.set(f"key:{i}", _value(i, value_bytes))
        pipe.execute()
        rc.close()
        src, dst = (n.client().execute_command("CLUSTER", "MYID").decode() for n in nodes[:2])
        t0 = time.monotonic()
        redis_cli("--cluster", "reshard", f"127.0.0.1:{nodes[0].port}", "--cluster-from", src,
                  "--cluster-to", dst, "--cluster-slots", str(slots), "--cluster-yes",
                  timeout_s=900)
        elapsed = time.monotonic() - t0
        assert sum(int(n.client().dbsize()) for n in nodes) == keys
        return elapsed
    finally:
        for n in nodes:
            n.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--slots", type=int, default=1000)
    ap.add_argument("--keys", type=int, default=20000)
    ap.add_argument("--value-bytes", type=int, default=0)
    ap.add_argument("--rdbcompression", choices=("yes", "no"), default="yes")
    ap.add_argument("--only", choices=("real", "ours"))
    args = ap.parse_args()
    for kind in ("real", "ours"):
        if args.only and kind != args.only:
            continue
        with tempfile.TemporaryDirectory() as d:
            t = reshard_once(kind, args.slots, args.keys, Path(d), args.value_bytes,
                             args.rdbcompression)
        print(f"{kind}: reshard of {args.slots} slots with {args.keys} keys in {t:.2f} s")


if __name__ == "__main__":
    main()
