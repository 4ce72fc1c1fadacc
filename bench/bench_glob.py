"""Worst-case glob patterns: our node beside redis-server 7.0 in the same run.

The 50 patterns of up to 256 bytes and the keys of up to 1 KB of tests/node/glob_worst.py, run
as KEYS, SCAN MATCH, PUBLISH to a subscriber of all 50 patterns, and ACL DRYRUN for a user whose
key patterns they are. Each command's time is its best round trip over ``--tries`` rounds (the
servers' compiled-pattern caches flushed before each round); the worst of those per family is
printed for both servers, then the slowest patterns on ours.

    .venv/bin/python bench/bench_glob.py [--tries 3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.node.glob_worst import best_times, worst_keys, worst_patterns  # noqa: E402
from tests.support import RawArg, RawClient, node_and_redis  # noqa: E402

SHOW_SLOWEST = 5
SHOWN_ARG = {"KEYS": 1, "SCAN MATCH": 3, "PUBLISH (50 patterns subscribed)": 1,
             "ACL DRYRUN (50 key patterns)": 4}  # the pattern or key of each family's commands


def families(patterns: list[bytes], keys: list[bytes]) -> dict[str, list[list[RawArg]]]:
    return {
        "KEYS": [[b"KEYS", p] for p in patterns],
        "SCAN MATCH": [[b"SCAN", b"0", b"MATCH", p, b"COUNT", b"1000"] for p in patterns],
        "PUBLISH (50 patterns subscribed)": [[b"PUBLISH", k, b"m"] for k in keys],
        "ACL DRYRUN (50 key patterns)": [[b"ACL", b"DRYRUN", b"globber", b"GET", k] for k in keys],
    }


def measure(port: int, patterns: list[bytes], keys: list[bytes],
            tries: int) -> dict[str, list[float]]:
    with RawClient(port) as c, RawClient(port) as sub:
        c.call(b"FLUSHALL")
        c.call(b"MSET", *[x for k in keys for x in (k, b"1")])
        c.call(b"ACL", b"SETUSER", b"globber", b"on", b"nopass", b"+@all",
               *[b"~" + p for p in patterns])
        sub.call_frames(b"PSUBSCRIBE", *patterns, frames=len(patterns))
        return {name: best_times(c, cmds, tries)
                for name, cmds in families(patterns, keys).items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tries", type=int, default=3, help="rounds; each command's best is kept")
    args = ap.parse_args()
    patterns, keys = worst_patterns(), worst_keys()
    with tempfile.TemporaryDirectory() as tmp, node_and_redis(Path(tmp)) as procs:
        seen = {name: measure(p.port, patterns, keys, args.tries) for name, p in procs.items()}
    print(f"{len(patterns)} patterns (<= {max(map(len, patterns))} bytes), {len(keys)} keys "
          f"(<= {max(map(len, keys))} bytes); best of {args.tries} per command, in ms")
    print(f"{'family':<36}{'ours worst':>12}{'redis worst':>13}{'ours mean':>11}{'redis mean':>12}")
    for fam in seen["ours"]:
        o, r = seen["ours"][fam], seen["real"][fam]
        print(f"{fam:<36}{max(o) * 1e3:>12.2f}{max(r) * 1e3:>13.2f}"
              f"{sum(o) / len(o) * 1e3:>11.2f}{sum(r) / len(r) * 1e3:>12.2f}")
    for fam, cmds in families(patterns, keys).items():
        o, r = seen["ours"][fam], seen["real"][fam]
        print(f"slowest on ours, {fam}:")
        for i in sorted(range(len(o)), key=lambda i: -o[i])[:SHOW_SLOWEST]:
            arg = cmds[i][SHOWN_ARG[fam]]
            shown = arg[:40] if isinstance(arg, bytes) else arg
            print(f"  {o[i] * 1e3:6.2f} ms (redis {r[i] * 1e3:5.2f}) {shown!r}")


if __name__ == "__main__":
    main()
