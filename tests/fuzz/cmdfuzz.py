"""Random argument vectors drawn from the command table (protocol/commands.json), run on our node
and on redis-server 7.0 from the same starting keyspace, compared for the reply's class (an
error or not) and for time: ours may not take more than ``TIME_RATIO`` times Redis' time on the
same vector (above an absolute floor, re-measured before it counts). Our node's CPU for each
vector and its peak RSS are held to tests/fuzz/bounds.py's bounds too.

A vector is built two ways: along the command's documented arguments (tokens, optional parts,
repeats; integers and doubles from boundary values, strings from values and glob patterns),
or as a random argc around the arity with words from every pool. Keys come from a small pool
holding one key of each type, so wrong types are common.

Left out: commands that block, change the server or the connection (admin, pub/sub modes,
MULTI and WATCH, scripting, CLIENT, CONFIG, MIGRATE, WAIT ...), and huge counts for the
commands where Redis itself does work in proportion to the count (SETRANGE/SETBIT offsets,
negative RANDMEMBER counts: see docs/COMPATIBILITY.md).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any

from slotgate.protocol import commands
from tests.fuzz import bounds
from tests.support import RawClient

GROUPS = {"string", "list", "set", "sorted-set", "hash", "stream", "bitmap", "hyperloglog", "geo",
          "generic"}
SKIP_FLAGS = {"admin", "blocking", "noscript", "pubsub"}
SKIP_NAMES = {"wait", "migrate", "object|help", "xinfo|help", "xgroup|help"}
# Redis does work in proportion to these commands' numbers (memory or picks): small numbers only.
SMALL_NUMBERS_ONLY = {"setrange", "setbit", "bitfield", "bitfield_ro", "srandmember",
                      "zrandmember", "hrandfield", "getrange", "substr"}
TIME_RATIO = 100
TIME_FLOOR_S = 0.02  # below this, a ratio is noise (one scheduling slice on a loaded machine)
RETRIES = 3  # a slow vector is re-run this often; the fastest run counts

KEYS = ["s", "n", "l", "h", "st", "z", "x", "p", "g", "missing", "{s}2"]
SETUP = [
    ["FLUSHALL"],
    ["SET", "s", "hello"], ["SET", "n", "42"],
    ["RPUSH", "l", "a", "b", "c", "1", "2"],
    ["HSET", "h", "f", "v", "g", "1", "n", "2.5"],
    ["SADD", "st", "a", "b", "1", "2", "3"],
    ["ZADD", "z", "1", "a", "2", "b", "2.5", "c", "-inf", "m"],
    ["XADD", "x", "1-1", "f", "v"], ["XADD", "x", "2-1", "f", "w"],
    ["XGROUP", "CREATE", "x", "grp", "0"],
    ["PFADD", "p", "a", "b", "c"],
    ["GEOADD", "g", "13.361389", "38.115556", "palermo", "15.087269", "37.502669", "catania"],
]
SMALL_INTS = ["0", "1", "-1", "2", "3", "10", "-5", "100"]
HUGE_INTS = ["9223372036854775807", "-9223372036854775808", "9223372036854775808",
             "4294967296", "2147483648", "-2147483649", "1000000000", "-100000000", "18446744073709551615"]
DOUBLES = ["0.5", "-1.5", "inf", "-inf", "+inf", "nan", "1e308", "1e309", "(1", "(inf", "[a", "-", "+",
           "1.7976931348623157e308", "0x10", " 1"]
STRINGS = ["", "a", "abc", "v", "f", "1-1", "0-0", "$", ">", "*", "grp", "palermo", "m", "\x00\xff",
           "x" * 100]
PATTERNS = ["*", "?", "[a-", "[^a]*", "\\", "*a*a*a*a*a*a*a*a*b", "h*", "[", "*[*"]


@dataclass
class Result:
    """What a run found: the vectors run, and the problems (class or time)."""

    vectors: int = 0
    class_mismatches: list[str] = field(default_factory=list)
    slow: list[str] = field(default_factory=list)
    error_text_mismatches: list[str] = field(default_factory=list)
    worst_ratio: tuple[float, str] = (0.0, "")
    bounds: list[str] = field(default_factory=list)  # vectors past tests/fuzz/bounds.py's bounds
    slowest_cpu_s: float = 0.0  # our node's CPU for one vector, the most seen
    rss_growth_bytes: int = 0  # our node's peak RSS above its start


def fuzzable() -> list[commands.CommandInfo]:
    out = []
    for name, info in sorted(commands.ALL_COMMANDS.items()):
        if info.subcommands or info.group not in GROUPS or info.flags & SKIP_FLAGS:
            continue
        if name.decode() in SKIP_NAMES:
            continue
        out.append(info)
    return out


def _strip(v: Any) -> Any:
    return v[1:] if isinstance(v, str) and v[:1] in "$+" else v


def _flags(arg: dict[str, Any]) -> set[str]:
    raw = arg.get("flags", {})
    items = raw.get("~", []) if isinstance(raw, dict) else raw
    return {_strip(f) for f in items}


def _value(kind: str, small: bool, rng: random.Random) -> str:
    if kind == "key":
        return rng.choice(KEYS)
    if kind == "integer":
        return rng.choice(SMALL_INTS if small or rng.random() < 0.6 else HUGE_INTS)
    if kind == "double":
        return rng.choice(DOUBLES + SMALL_INTS)
    if kind == "pattern":
        return rng.choice(PATTERNS)
    return rng.choice(STRINGS + SMALL_INTS + PATTERNS[:2])


def _walk(args: list[dict[str, Any]], small: bool, rng: random.Random, out: list[str]) -> None:
    for arg in args:
        flags = _flags(arg)
        if "optional" in flags and rng.random() < 0.5:
            continue
        for _ in range(rng.randint(1, 3) if "multiple" in flags else 1):
            token = _strip(arg.get("token"))
            if token:
                out.append(token)
            kind = _strip(arg.get("type", "$string"))
            name = _strip(arg.get("name", ""))
            if kind == "pure-token":
                continue
            if kind == "oneof":
                _walk([rng.choice(arg["arguments"])], small, rng, out)
            elif kind == "block":
                _walk(arg["arguments"], small, rng, out)
            else:
                out.append(_value("pattern" if "pattern" in name else kind, small, rng))


def vector(info: commands.CommandInfo, rng: random.Random) -> list[str]:
    """One argument vector for ``info``'s command."""
    head = info.name.split("|")
    small = head[0] in SMALL_NUMBERS_ONLY
    if rng.random() < 0.7:
        out = list(head)
        doc = commands._RAW_DOCS.get(info.name, {})
        _walk(doc.get("arguments", []), small, rng, out)
        return out
    argc = abs(info.arity) + (rng.randint(-1, 4) if info.arity < 0 else rng.choice((0, 0, 0, -1, 1)))
    out = list(head)
    pools = ["key", "integer", "double", "string", "pattern"]
    tokens = _tokens(info.name)
    while len(out) < max(argc, len(head)):
        if tokens and rng.random() < 0.3:
            out.append(rng.choice(tokens))
        else:
            out.append(_value(rng.choice(pools), small, rng))
    return out


def _tokens(name: str) -> list[str]:
    found: list[str] = []

    def walk(args: list[dict[str, Any]]) -> None:
        for a in args:
            if a.get("token"):
                found.append(_strip(a["token"]))
            walk(a.get("arguments", []))

    walk(commands._RAW_DOCS.get(name, {}).get("arguments", []))
    return found


def _reset(client: RawClient) -> None:
    client.pipeline(SETUP)


def _timed(client: RawClient, argv: list[str]) -> tuple[bytes, float]:
    t0 = time.perf_counter()
    reply = client.call(*argv)
    return reply, time.perf_counter() - t0


def _bound(res: Result, argv: list[str], cpu_s: float, grown: int) -> None:
    """Our node's CPU for one vector and its peak RSS so far, against tests/fuzz/bounds.py."""
    res.slowest_cpu_s = max(res.slowest_cpu_s, cpu_s)
    res.rss_growth_bytes = max(res.rss_growth_bytes, grown)
    if cpu_s > bounds.INPUT_BOUND_S or grown > bounds.LIVE_RSS_GROWTH_BYTES:
        res.bounds.append(f"{' '.join(argv)[:200]}: {cpu_s:.2f} s of CPU, peak RSS "
                          f"{grown / 1e6:.0f} MB above the start")


def _pid(client: RawClient) -> int:
    info = client.call("INFO", "server").decode()
    return int(info.split("process_id:", 1)[1].split()[0])


def run(ours: RawClient, real: RawClient, n: int, seed: int) -> Result:
    rng = random.Random(seed)
    table = fuzzable()
    res = Result()
    pid = _pid(ours)
    start_rss = bounds.peak_rss_bytes(pid)
    for _ in range(n):
        argv = vector(rng.choice(table), rng)
        res.vectors += 1
        _reset(ours)
        _reset(real)
        cpu0 = bounds.cpu_s(pid)
        o_reply, o_s = _timed(ours, argv)
        _bound(res, argv, bounds.cpu_s(pid) - cpu0, bounds.peak_rss_bytes(pid) - start_rss)
        r_reply, r_s = _timed(real, argv)
        shown = " ".join(repr(a) if " " in a or not a.isprintable() else a for a in argv)
        if (o_reply[:1] == b"-") != (r_reply[:1] == b"-"):
            res.class_mismatches.append(f"{shown}: ours {o_reply[:120]!r}, redis {r_reply[:120]!r}")
        elif o_reply[:1] == b"-" and o_reply != r_reply:
            res.error_text_mismatches.append(f"{shown}: ours {o_reply[:120]!r}, redis {r_reply[:120]!r}")
        if o_s > TIME_FLOOR_S and o_s > TIME_RATIO * r_s:
            for _ in range(RETRIES):  # re-measure: the fastest of each side counts
                _reset(ours)
                _reset(real)
                o_s = min(o_s, _timed(ours, argv)[1])
                r_s = min(r_s, _timed(real, argv)[1])
            if o_s > TIME_FLOOR_S and o_s > TIME_RATIO * r_s:
                res.slow.append(f"{shown}: ours {o_s * 1000:.1f} ms, redis {r_s * 1000:.2f} ms")
        ratio = o_s / max(r_s, 1e-6)
        if ratio > res.worst_ratio[0]:
            res.worst_ratio = (ratio, f"{shown} ({o_s * 1000:.2f} ms vs {r_s * 1000:.2f} ms)")
    return res
