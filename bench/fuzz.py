"""Long fuzz runs of the input targets in tests/fuzz/targets.py (CI runs a few hundred examples
of each; this runs minutes): mutations of the kept corpus, random bytes and (config) random
YAML documents. An input that fails is written to tests/fuzz/corpus/<target>/finding-<hash>
(replayed by tests/fuzz from then on) and printed; the run goes on.

    python bench/fuzz.py --target resp --minutes 10
    python bench/fuzz.py --target all --minutes 2
    python bench/fuzz.py --write-seeds        # rewrite the seed-* files
    python bench/fuzz.py --target rdb --minutes 5 --engine atheris

``--engine atheris`` (``pip install atheris``; not a dependency) runs libFuzzer's
coverage-guided loop over one target instead, starting from a copy of the kept corpus; a crash
input is written to the target's corpus folder as ``finding-<hash>`` by libFuzzer's
``-artifact_prefix`` and the process stops there.

Every input runs within tests/fuzz/bounds.py's bounds (CPU time and memory allocated, in
proportion to its size); one past them is a finding like any other. Prints per target:
examples run, examples per second, findings, the slowest input's CPU time, the highest memory
peak of one input, the process' peak RSS.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import resource
import sys
import time
import traceback
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TARGET_NAMES = ("resp", "framer", "config", "bus", "rdb")  # tests/fuzz/targets.py's TARGETS
if "atheris" not in sys.argv:  # under atheris the targets are imported instrumented (below)
    from tests.fuzz import bounds, targets


def _input(target: str, seeds: list[bytes], rng: random.Random) -> bytes:
    roll = rng.random()
    if target == "config" and roll < 0.4:
        return targets.random_config(rng)
    if roll < 0.1:
        return rng.randbytes(rng.randint(0, 600))
    return targets.mutate(rng.choice(seeds), rng, rounds=rng.choice((2, 4, 8)))


def run(target: str, seconds: float, seed: int, keep: bool) -> int:
    fn = targets.TARGETS[target]
    seeds = targets.corpus(target)
    rng = random.Random(seed)
    findings = 0
    stats = bounds.Stats()
    # traced for the whole run: started and stopped per input (as in CI's short runs), the
    # process' RSS grows by tens of MB a minute (the fuzzer's own work traced costs little here)
    tracemalloc.start()
    for data in seeds:
        bounds.run_bounded(fn, data)
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        data = _input(target, seeds, rng)
        try:
            bounds.run_bounded(fn, data, stats)
        except Exception:  # noqa: BLE001 - every failure is a finding to keep and show
            findings += 1
            name = f"finding-{hashlib.sha1(data).hexdigest()[:12]}"
            print(f"{target}: FINDING {name}: {data[:200]!r}")
            traceback.print_exc(limit=6)
            if keep:
                (targets.CORPUS_DIR / target / name).write_bytes(data)
    took = time.monotonic() - t0
    tracemalloc.stop()
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{target}: {stats.inputs} examples in {took:.0f} s ({stats.inputs / took:.0f}/s), "
          f"{findings} findings; slowest input {stats.slowest_s * 1000:.1f} ms of CPU, highest "
          f"peak {stats.peak_bytes / 1e6:.2f} MB allocated by one input; process peak RSS "
          f"{rss_mb:.0f} MB", flush=True)
    return findings


def run_atheris(target: str, seconds: float) -> None:
    import shutil
    import tempfile

    import atheris

    global targets
    with atheris.instrument_imports(include=["slotgate", "tests"]):  # our code only: fast start
        from tests.fuzz import targets
    fn = targets.TARGETS[target]
    work = Path(tempfile.mkdtemp(prefix=f"fuzz-{target}-"))
    try:
        for p in (targets.CORPUS_DIR / target).iterdir():
            shutil.copy(p, work / p.name)
        argv = [sys.argv[0], str(work), f"-max_total_time={int(seconds)}",
                f"-artifact_prefix={targets.CORPUS_DIR / target}/finding-", "-max_len=65536"]
        atheris.Setup(argv, fn)
        atheris.Fuzz()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="all", choices=["all", *TARGET_NAMES])
    ap.add_argument("--minutes", type=float, default=1.0, help="per target")
    ap.add_argument("--seed", type=int, default=None, help="random seed (default: the time)")
    ap.add_argument("--no-keep", action="store_true", help="do not write findings to the corpus")
    ap.add_argument("--engine", choices=["random", "atheris"], default="random")
    ap.add_argument("--write-seeds", action="store_true", help="rewrite the seed-* files and stop")
    args = ap.parse_args()
    if args.write_seeds:
        targets.write_seeds()
        return
    if args.engine == "atheris":
        if args.target == "all":
            ap.error("--engine atheris runs one --target")
        run_atheris(args.target, args.minutes * 60)
        return
    seed = args.seed if args.seed is not None else int(time.time())
    print(f"seed {seed}")
    names = list(targets.TARGETS) if args.target == "all" else [args.target]
    total = sum(run(name, args.minutes * 60, seed, not args.no_keep) for name in names)
    sys.exit(1 if total else 0)


if __name__ == "__main__":
    main()
