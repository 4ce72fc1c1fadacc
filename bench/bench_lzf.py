"""LZF speed (node/persistence/lzf.py's compressor, rdb_blobs.py's decompressor): MB/s of input
compressed and of output decompressed, on compressible and incompressible inputs of 1 KB, 12 KB
and 1 MB, as Redis calls it (room for the string less 4 bytes), in the build that runs and in
pure Python (SLOTGATE_COMPILE=0, in a child process), CPU time of this process.

    .venv/bin/python bench/bench_lzf.py [--seconds 0.5] [--before DIR]
    .venv/bin/python bench/bench_lzf.py --save [--rounds 3]

``--before DIR`` adds the same figures for another tree (its own ``.venv``), run alike.
``--save``: the wall time of SAVE on one node holding DEBUG POPULATE 200000 plus 20,000
hashes of 10 fields (listpacks of ~330 bytes) and 1,000 dense HyperLogLogs, with
``rdbcompression no`` (nothing compressed: as before compression) and ``yes``, alternated;
then DEBUG RELOAD (a SAVE and a load of the file).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIZES = {"1KB": 1024, "12KB": 12 * 1024, "1MB": 1 << 20}


def inputs() -> dict[str, bytes]:
    rnd = random.Random(1)
    text = b"".join(b"user:%d session=%d last-seen=%d; " % (i, rnd.randrange(1000), i * 37)
                    for i in range(40000))
    return {"compressible": text[:1 << 20], "incompressible": rnd.randbytes(1 << 20)}


def _rate(fn: object, nbytes: int, seconds: float) -> float:
    call = fn  # type: ignore[assignment]
    reps, spent = 0, 0.0
    start = time.process_time()
    while spent < seconds:
        call()  # type: ignore[operator]
        reps += 1
        spent = time.process_time() - start
    return reps * nbytes / spent / 1e6


def measure(seconds: float) -> dict[str, object]:
    """This process' figures: {build, rows: [[input, size, compress MB/s, decompress MB/s,
    ratio]]}."""
    sys.path.insert(0, str(Path.cwd()))
    from slotgate.build import BUILD
    from slotgate.node.persistence import lzf
    from slotgate.node.persistence.rdb_blobs import lzf_decompress

    rows = []
    for name, data in inputs().items():
        for label, size in SIZES.items():
            src = data[:size]
            packed = lzf.lzf_compress(src, len(src) - 4)
            c = _rate(lambda src=src: lzf.lzf_compress(src, len(src) - 4), size, seconds)
            d = (_rate(lambda p=packed, n=size: lzf_decompress(p, n), size, seconds)
                 if packed is not None else None)
            ratio = len(packed) / size if packed is not None else None
            rows.append([name, label, round(c, 1), d and round(d, 1), ratio and round(ratio, 3)])
    return {"build": "compiled" if lzf.COMPILED else "pure", "describe": BUILD.describe(),
            "rows": rows}


def run_child(python: str, tree: Path, seconds: float, pure: bool) -> dict[str, object]:
    env = dict(os.environ, SLOTGATE_COMPILE="0") if pure else dict(os.environ)
    out = subprocess.run([python, str(Path(__file__).resolve()), "--child",
                          "--seconds", str(seconds)], cwd=tree, env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def save_times(rounds: int) -> None:
    import tempfile

    from tests.support import slotgate_node

    with tempfile.TemporaryDirectory() as d:
        node = slotgate_node(Path(d), extra=["--enable-debug-command", "yes"])
        node.start()
        try:
            c = node.client()
            c.execute_command("DEBUG", "POPULATE", "200000")
            pipe = c.pipeline(transaction=False)
            for i in range(20000):
                pipe.hset(f"h:{i}", mapping={f"field{j}": f"some value {i * j} of {i}"
                                             for j in range(10)})
            for i in range(1000):
                pipe.pfadd(f"hll:{i}", *[f"e{i}:{j}" for j in range(3000)])
            pipe.execute()
            print(f"keys {c.dbsize()}")
            for _ in range(rounds):
                for setting in ("no", "yes"):
                    c.config_set("rdbcompression", setting)
                    t0 = time.monotonic()
                    c.save()
                    dt = time.monotonic() - t0
                    size = sum(p.stat().st_size for p in node.cwd.rglob("*.rdb"))
                    t0 = time.monotonic()
                    c.execute_command("DEBUG", "RELOAD")  # a SAVE and a load of the file
                    reload_s = time.monotonic() - t0
                    print(f"rdbcompression {setting}: SAVE {dt:.2f} s, file {size / 1e6:.1f} MB,"
                          f" DEBUG RELOAD {reload_s:.2f} s")
        finally:
            node.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=0.5, help="CPU seconds per figure")
    ap.add_argument("--before", type=Path, help="another tree to measure alike")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--save", action="store_true", help="SAVE times instead (see above)")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if args.save:
        sys.path.insert(0, str(ROOT))
        save_times(args.rounds)
        return
    if args.child:
        print(json.dumps(measure(args.seconds)))
        return
    runs = [("this tree", run_child(sys.executable, ROOT, args.seconds, False)),
            ("this tree, pure", run_child(sys.executable, ROOT, args.seconds, True))]
    if args.before:
        python = str(args.before / ".venv" / "bin" / "python")
        runs.append(("before", run_child(python, args.before, args.seconds, False)))
    print("| tree | build | input | size | compress MB/s | decompress MB/s | compressed/size |")
    print("|---|---|---|---|---|---|---|")
    for label, res in runs:
        for name, size, c, d, ratio in res["rows"]:  # type: ignore[union-attr]
            print(f"| {label} | {res['build']} | {name} | {size} | {c} | "
                  f"{d if d is not None else '-'} | {ratio if ratio is not None else 'raw'} |")


if __name__ == "__main__":
    main()
