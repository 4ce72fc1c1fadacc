"""Long runs of the command fuzzer (tests/fuzz/cmdfuzz.py): random argument vectors from the
command table on our node and on redis-server 7.0, compared for the reply class, the error
text and the time (ours at most 100x Redis' on the same vector, above a 20 ms floor).

    python bench/fuzz_commands.py --vectors 20000
    python bench/fuzz_commands.py --vectors 2000 --seed 5

Prints the vectors run, every mismatch and slow vector, and the worst time ratio seen.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fuzz import cmdfuzz  # noqa: E402
from tests.support import RawClient, node_and_redis  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vectors", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=None, help="random seed (default: the time)")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else int(time.time())
    print(f"seed {seed}; {len(cmdfuzz.fuzzable())} commands", flush=True)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as d, node_and_redis(Path(d)) as procs:
        with RawClient(procs["ours"].port) as ours, RawClient(procs["real"].port) as real:
            res = cmdfuzz.run(ours, real, args.vectors, seed)
    print(f"{res.vectors} vectors in {time.monotonic() - t0:.0f} s; worst time ratio "
          f"{res.worst_ratio[0]:.1f}: {res.worst_ratio[1]}; slowest vector "
          f"{res.slowest_cpu_s * 1000:.0f} ms of our node's CPU; its peak RSS "
          f"+{res.rss_growth_bytes / 1e6:.1f} MB")
    for title, rows in (("reply class differs", res.class_mismatches), ("slow", res.slow),
                        ("error text differs", res.error_text_mismatches),
                        ("past the bounds", res.bounds)):
        print(f"{title}: {len(rows)}")
        for row in rows:
            print(f"  {row}")
    sys.exit(1 if res.class_mismatches or res.slow or res.error_text_mismatches or res.bounds else 0)


if __name__ == "__main__":
    main()
