"""The fuzzers of tests/fuzz/ for longer than CI gives them: each target with many more
generated examples (SLOTGATE_FUZZ_EXAMPLES), on the kept corpus and its mutations.

    python bench/fuzz.py                      # 20,000 examples a target
    python bench/fuzz.py --examples 200000 -k rdb

A failure prints hypothesis' smallest failing input: add it to tests/fuzz/corpus/<target>/
and write a regression test beside the target's (the corpus entry alone keeps it found).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--examples", type=int, default=20_000)
    ap.add_argument("-k", default="", help="pytest -k expression (e.g. rdb, bus, resp, config)")
    args = ap.parse_args(argv)
    env = dict(os.environ, SLOTGATE_FUZZ_EXAMPLES=str(args.examples))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/fuzz",
           "--durations=0"]
    if args.k:
        cmd += ["-k", args.k]
    return subprocess.run(cmd, cwd=ROOT, env=env, check=False).returncode


if __name__ == "__main__":
    raise SystemExit(main())
