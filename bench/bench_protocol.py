"""Micro-benchmarks for protocol/: request parsing, reply framing, key_slot.

Each case runs next to a baseline doing the bare minimum on the same bytes in the same run
(plain ``hiredis.Reader``, plain ``binascii.crc_hqx``), and prints the ratio.

    .venv/bin/python bench/bench_protocol.py [--quick]
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from binascii import crc_hqx
from collections.abc import Callable

import hiredis

from slotgate.protocol.resp import ReplyFramer, RequestReader, encode_command
from slotgate.protocol.slots import key_slot


def best_ns_per_op(fn: Callable[[], object], ops_per_call: int, min_time_s: float) -> float:
    """Best of 5 rounds, each looping ``fn`` for about ``min_time_s / 5``."""
    loops = 1
    while True:  # calibrate
        t0 = time.perf_counter()
        for _ in range(loops):
            fn()
        dt = time.perf_counter() - t0
        if dt > 0.02:
            break
        loops *= 4
    loops = max(1, int(loops * (min_time_s / 5) / dt))
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(loops):
            fn()
        best = min(best, time.perf_counter() - t0)
    return best / loops / ops_per_call * 1e9


# -- request parsing ---------------------------------------------------------------------------


def hiredis_requests(chunks: list[bytes]) -> Callable[[], object]:
    """Baseline: hiredis alone, no limits, no inline commands, no checks."""
    return _hiredis_loop(hiredis.Reader(), chunks)


def ours_requests(chunks: list[bytes],
                  make: Callable[[], RequestReader] = RequestReader) -> Callable[[], object]:
    reader = make()

    def run() -> list[list[bytes]]:
        out = []
        for c in chunks:
            reader.feed(c)
            out.extend(reader.get_requests())
        return out

    return run


def _exact_only() -> RequestReader:
    reader = RequestReader()
    reader.use_hiredis = False  # an instance setting: compiled classes cannot be subclassed
    return reader


# -- reply framing -----------------------------------------------------------------------------


def hiredis_replies(chunks: list[bytes]) -> Callable[[], object]:
    """Baseline: hiredis building Python objects (what framing avoids)."""
    return _hiredis_loop(hiredis.Reader(), chunks)


def _hiredis_loop(reader: hiredis.Reader, chunks: list[bytes]) -> Callable[[], object]:
    def run() -> list[object]:
        out = []
        for c in chunks:
            reader.feed(c)
            got = reader.gets()
            while got is not False:
                out.append(got)
                got = reader.gets()
        return out

    return run


def ours_frames(chunks: list[bytes]) -> Callable[[], object]:
    framer = ReplyFramer()

    def run() -> list[tuple[int, bytes]]:
        out = []
        for c in chunks:
            framer.feed(c)
            out.extend(framer.frames())
        return out

    return run


def split(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="shorter rounds (noisier)")
    args = ap.parse_args()
    min_time_s = 0.3 if args.quick else 1.0

    set16 = b"".join(encode_command("SET", f"key:{i:06d}", f"value-{i:06d}") for i in range(16))
    get1 = encode_command("GET", "key:000001")
    plus_inf = b"".join(encode_command("ZADD", "z", "+inf", f"m{i}") for i in range(16))
    inline16 = b"".join(b"SET key:%06d value-%06d\r\n" % (i, i) for i in range(16))
    big_req = encode_command("SET", "k", b"x" * (1 << 20))
    bulk16 = b"$3\r\nbar\r\n" * 16
    ok16 = b"+OK\r\n" * 16
    nested16 = (b"*3\r\n$3\r\nfoo\r\n:42\r\n*2\r\n$1\r\na\r\n$1\r\nb\r\n") * 16
    big_bulk = b"$%d\r\n%s\r\n" % (1 << 20, b"x" * (1 << 20))
    keys = [f"user:{i}:profile".encode() for i in range(100)] + [b"{user1000}.following"] * 4

    rows: list[tuple[str, str, float, str, float]] = []

    def case(name: str, unit: str, ours: Callable[[], object], base_name: str,
             base: Callable[[], object] | None, ops: int) -> None:
        ours_ns = best_ns_per_op(ours, ops, min_time_s)
        base_ns = best_ns_per_op(base, ops, min_time_s) if base else float("nan")
        rows.append((name, unit, ours_ns, base_name, base_ns))

    case("requests: 16 pipelined SET per feed", "ns/request", ours_requests([set16]),
         "hiredis.Reader", hiredis_requests([set16]), 16)
    case("requests: 1 GET per feed", "ns/request", ours_requests([get1]),
         "hiredis.Reader", hiredis_requests([get1]), 1)
    case("requests: 16 SET per feed, exact parser only", "ns/request",
         ours_requests([set16], _exact_only), "hiredis.Reader", hiredis_requests([set16]), 16)
    case("requests: 16 ZADD '+inf' per feed (slow path)", "ns/request", ours_requests([plus_inf]),
         "hiredis.Reader", hiredis_requests([plus_inf]), 16)
    case("requests: 16 inline SET per feed", "ns/request", ours_requests([inline16]),
         "-", None, 16)
    case("requests: 1 MiB SET in 64 KiB chunks", "us/request", ours_requests(split(big_req, 65536)),
         "hiredis.Reader", hiredis_requests(split(big_req, 65536)), 1)
    case("requests: 16 SET fed in 7-byte chunks", "ns/request", ours_requests(split(set16, 7)),
         "hiredis.Reader", hiredis_requests(split(set16, 7)), 16)
    case("replies: 16 x $3 bar per feed", "ns/frame", ours_frames([bulk16]),
         "hiredis.Reader", hiredis_replies([bulk16]), 16)
    case("replies: 16 x +OK per feed", "ns/frame", ours_frames([ok16]),
         "hiredis.Reader", hiredis_replies([ok16]), 16)
    case("replies: 16 nested arrays per feed", "ns/frame", ours_frames([nested16]),
         "hiredis.Reader", hiredis_replies([nested16]), 16)
    case("replies: 1 MiB bulk in 64 KiB chunks", "us/frame", ours_frames(split(big_bulk, 65536)),
         "hiredis.Reader", hiredis_replies(split(big_bulk, 65536)), 1)
    case("replies: 1 MiB bulk in 1 KiB chunks", "us/frame", ours_frames(split(big_bulk, 1024)),
         "hiredis.Reader", hiredis_replies(split(big_bulk, 1024)), 1)
    case("key_slot (104 keys, 4 with hash tag)", "ns/key", lambda: [key_slot(k) for k in keys],
         "crc_hqx(key) & 16383", lambda: [crc_hqx(k, 0) & 16383 for k in keys], len(keys))

    print(f"# python {platform.python_version()} hiredis {hiredis.__version__} "
          f"on {platform.machine()}; best of 5 rounds; ratio = ours / baseline")
    print("| case | ours | baseline | baseline time | ratio |")
    print("|---|---:|---|---:|---:|")
    for name, unit, ours_ns, base_name, base_ns in rows:
        scale = 1e3 if unit.startswith("us") else 1.0
        ratio = f"{ours_ns / base_ns:.2f}x" if base_ns == base_ns else "-"
        base = f"{base_ns / scale:.0f} {unit}" if base_ns == base_ns else "-"
        print(f"| {name} | {ours_ns / scale:.0f} {unit} | {base_name} | {base} | {ratio} |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
