"""Random argument vectors for the node's commands, drawn from the command table, sent to our
node and to redis-server 7.0 side by side: the error texts must match, the reply types must
match, and no command of ours may take 100 times Redis' time on the same input (above a floor
of 20 ms, below which timing is noise).

    python bench/fuzz_commands.py                     # 3,000 commands, seed 1
    python bench/fuzz_commands.py --commands 20000 --seed 7 --only zadd,zrange

Arguments come from a small alphabet (the keys of every type, created before and again every
200 commands; numbers huge, negative and odd; glob patterns; the option words commands take),
so that most vectors reach past the argument checks. Commands that block, subscribe, change
the connection or the server's configuration, or stop it are left out. Prints the mismatches
grouped by command, with one input each, and the slowest ratios.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from slotgate.protocol.commands import COMMANDS  # noqa: E402
from tests.support import RawClient, node_and_redis  # noqa: E402

SKIP_FLAGS = {"blocking", "admin", "pubsub", "noscript", "no_multi", "loading"}
SKIP = {"shutdown", "monitor", "multi", "exec", "discard", "watch", "unwatch", "client",
        "hello", "auth", "reset", "quit", "select", "swapdb", "move", "sync", "psync",
        "replicaof", "slaveof", "failover", "cluster", "debug", "wait", "readonly",
        "readwrite", "asking", "function", "script", "eval", "evalsha", "eval_ro",
        "evalsha_ro", "fcall", "fcall_ro", "config", "acl", "save", "bgsave",
        "bgrewriteaof", "latency", "memory", "object", "module", "command", "info", "time",
        "lastsave", "randomkey", "spop", "srandmember", "hrandfield", "zrandmember",
        "scan", "sscan", "hscan", "zscan", "keys", "dbsize", "flushall", "flushdb", "role",
        "echo", "ping", "lolwut", "pfselftest", "pfdebug", "migrate", "restore-asking",
        "xautoclaim", "xclaim", "xinfo", "xadd", "xsetid", "xgroup", "xreadgroup", "xread",
        "xpending", "xack", "psetex", "setex", "expire", "pexpire", "expireat", "pexpireat",
        "getex", "sort", "sort_ro"}
KEYS = [b"s", b"n", b"l", b"h", b"S", b"z", b"b", b"missing", b"x"]
NUMBERS = [b"0", b"1", b"-1", b"2", b"10", b"100", b"-100", b"9223372036854775807",
           b"-9223372036854775808", b"9223372036854775808", b"4294967296", b"1.5", b"-0",
           b"inf", b"-inf", b"+inf", b"nan", b"1e308", b"(1", b"[a", b"-", b"+", b"", b"abc"]
PATTERNS = [b"*", b"?", b"[a-z]", b"*a*b*c*", b"\\", b"[", b"a*"]
WORDS = [b"EX", b"PX", b"EXAT", b"NX", b"XX", b"GT", b"LT", b"CH", b"INCR", b"KEEPTTL",
         b"GET", b"WITHSCORES", b"LIMIT", b"COUNT", b"MATCH", b"TYPE", b"BYSCORE", b"BYLEX",
         b"REV", b"STORE", b"ASC", b"DESC", b"ALPHA", b"BY", b"REPLACE", b"LEFT", b"RIGHT",
         b"BEFORE", b"AFTER", b"WITHVALUES", b"RANK", b"MAXLEN", b"AGGREGATE", b"SUM", b"MIN",
         b"MAX", b"WEIGHTS", b"IDX", b"LEN", b"MINMATCHLEN", b"WITHMATCHLEN", b"BIT", b"BYTE",
         b"OVERFLOW", b"WRAP", b"SAT", b"FAIL", b"u8", b"i16", b"#0", b"AND", b"OR", b"XOR",
         b"NOT", b"DB", b"IDLETIME", b"FREQ", b"ABSTTL", b"WITHCOORD", b"WITHDIST", b"M",
         b"KM", b"FROMMEMBER", b"FROMLONLAT", b"BYRADIUS", b"BYBOX", b"ANY", b"STOREDIST"]
SEED_KEYS = [
    ("SET", b"s", b"hello world"), ("SET", b"n", b"42"), ("RPUSH", b"l", b"a", b"b", b"1"),
    ("HSET", b"h", b"f", b"v", b"n", b"1"), ("SADD", b"S", b"a", b"1", b"b"),
    ("ZADD", b"z", b"1", b"a", b"2.5", b"b", b"-1", b"c"), ("SETBIT", b"b", b"100", b"1"),
]
FLOOR_S = 0.020
RATIO_MAX = 100.0


def vector(rng: random.Random, name: str, arity: int) -> list[bytes]:
    want = arity - 1 if arity > 0 else -arity - 1 + rng.choice((0, 0, 1, 2, 3, 5))
    if rng.random() < 0.1:
        want = max(0, want + rng.choice((-1, 1)))  # the wrong arity now and then
    out = [name.encode()]
    for i in range(want):
        pool = rng.choice((KEYS, NUMBERS, WORDS, PATTERNS)) if i else KEYS
        out.append(rng.choice(pool))
    return out


def frame_kind(reply: bytes) -> bytes:
    return reply[:1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--commands", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", default="", help="comma-separated command names")
    args = ap.parse_args(argv)
    only = {n for n in args.only.lower().split(",") if n}
    names = sorted(n.decode() for n, c in COMMANDS.items()
                   if not (c.flags & SKIP_FLAGS) and n.decode() not in SKIP
                   and (not only or n.decode() in only))
    rng = random.Random(args.seed)
    mismatches: dict[str, list[tuple[list[bytes], bytes, bytes]]] = defaultdict(list)
    slow: list[tuple[float, float, list[bytes]]] = []
    errors = 0
    with tempfile.TemporaryDirectory(prefix="sg-fuzzcmd-") as d, \
            node_and_redis(Path(d)) as pair:
        clients = {k: RawClient(p.port, timeout_s=60) for k, p in pair.items()}
        for i in range(args.commands):
            if i % 200 == 0:
                for c in clients.values():
                    c.call("FLUSHALL")
                    for cmd in SEED_KEYS:
                        c.call(*cmd)
            name = rng.choice(names)
            vec = vector(rng, name, COMMANDS[name.encode()].arity)
            replies, took = {}, {}
            for k, c in clients.items():
                t0 = time.perf_counter()
                replies[k] = c.call(*vec)
                took[k] = time.perf_counter() - t0
            ours, real = replies["ours"], replies["real"]
            errors += real.startswith(b"-")
            if (frame_kind(ours) != frame_kind(real)
                    or (real.startswith(b"-") and ours != real)):
                mismatches[name].append((vec, ours[:120], real[:120]))
            if took["ours"] > FLOOR_S and took["ours"] > RATIO_MAX * took["real"]:
                slow.append((took["ours"], took["real"], vec))
        for c in clients.values():
            c.close()
    print(f"{args.commands} commands over {len(names)} names, seed {args.seed}: "
          f"{sum(map(len, mismatches.values()))} mismatches in {len(mismatches)} commands, "
          f"{len(slow)} over {RATIO_MAX:.0f}x Redis' time; {errors} of Redis' replies errors")
    for name, cases in sorted(mismatches.items(), key=lambda kv: -len(kv[1])):
        vec, ours, real = cases[0]
        print(f"  {name} x{len(cases)}: {b' '.join(vec)!r}\n    ours {ours!r}\n    real {real!r}")
    for ours_s, real_s, vec in sorted(slow, reverse=True)[:10]:
        print(f"  slow: {ours_s * 1000:.1f} ms vs {real_s * 1000:.2f} ms: {b' '.join(vec)!r}")
    return 1 if mismatches or slow else 0


if __name__ == "__main__":
    raise SystemExit(main())
