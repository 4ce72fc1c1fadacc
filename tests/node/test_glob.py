"""Glob patterns on the node against redis-server 7.0: KEYS, *SCAN MATCH, PUBSUB CHANNELS,
PSUBSCRIBE, CONFIG GET (nocase); and no pattern may stall the node (issue 12)."""

from __future__ import annotations

import random
import time

from tests.node.diff import Pair, _parse, norm_pairs, norm_scan, norm_sorted, show_difference
from tests.support import RawClient

KEYS = [
    b"", b"a", b"b", b"c", b"ab", b"abc", b"aab", b"ba", b"-", b"]", b"[", b"\\", b"^", b"_",
    b"*", b"?", b"A", b"B", b"Z", b"z", b"`", b"\xff", b"\x80", b"\x00", b"a\\", b"azb",
    b"ad", b"acd", b"aXb", b"abb", b"a]", b"a-", b"a^", b"h\\llo", b"x*y", b"foo", b"fab",
]
TRICKY = [
    b"", b"**", b"?", b"a*", b"*a", b"a*b", b"*a*", b"a?c", b"[abc]", b"[^abc]", b"[a-c]",
    b"[c-a]", b"[^c-a]", b"[a-]", b"[-a]", b"[]", b"[^]", b"[]a]", b"[", b"[^", b"[a", b"[a-",
    b"[\\", b"[\\]", b"[\\]]", b"[a\\-z]", b"\\", b"a\\", b"\\*", b"\\?", b"\\[", b"\\a", b"a[",
    b"*[", b"[*]", b"[?]", b"[[]", b"[Z-a]", b"[A-z]", b"[a-\xff]", b"[\x80-\x7f]", b"\xff*",
    b"[^\\]", b"a*?*b", b"*?", b"?*", b"[ab]*[cd]", b"A*", b"[A-C]", b"h\\\\llo", b"x\\*y",
    b"*\\", b"[^]]", b"[]-a]", b"f[o-a]?", b"*[^a]*",
]


def _random_patterns(n: int) -> list[bytes]:
    rng = random.Random(12)
    return [bytes(rng.choice(b"ab*?[]^-\\Az") for _ in range(rng.randint(1, 9)))
            for _ in range(n)]


def _random_keys(n: int) -> list[bytes]:
    rng = random.Random(21)
    return [bytes(rng.choice(b"ab*?[]^-\\Az") for _ in range(rng.randint(1, 6)))
            for _ in range(n)]


def _both(pair: Pair, commands: list[list[bytes]]) -> tuple[list[bytes], list[bytes]]:
    ours, real = pair.connect()
    try:
        return ours.pipeline(commands), real.pipeline(commands)
    finally:
        ours.close()
        real.close()


def _mismatches(commands: list[list[bytes]], ours: list[bytes], real: list[bytes],
                norm: object) -> list[str]:
    return [f"{c!r}: {show_difference(norm(o), norm(r))}"  # type: ignore[operator]
            for c, o, r in zip(commands, ours, real, strict=True) if norm(o) != norm(r)]  # type: ignore[operator]


def test_keys_patterns_as_redis(diff_pair: Pair) -> None:
    setup = [[b"MSET", *[x for k in KEYS + _random_keys(150) for x in (k, b"1")]]]
    commands = setup + [[b"KEYS", p] for p in TRICKY + _random_patterns(600)]
    ours, real = _both(diff_pair, commands)
    assert _mismatches(commands, ours, real, norm_sorted) == []
    assert sum(r not in (b"*0\r\n",) for r in real[1:]) > 100  # the corpus does match things


def test_scan_match_as_redis(diff_pair: Pair) -> None:
    members = [x for k in KEYS if k for x in (b"1", k)]
    setup = [[b"MSET", *[x for k in KEYS for x in (k, b"1")]],
             [b"HSET", b"h", *[x for k in KEYS for x in (k, b"1")]],
             [b"SADD", b"s", *KEYS], [b"ZADD", b"z", *members]]
    commands = setup + [[cmd, *key, b"0", b"MATCH", p, b"COUNT", b"1000"]
                        for p in TRICKY + _random_patterns(100)
                        for cmd, key in ((b"SCAN", []), (b"HSCAN", [b"h"]), (b"SSCAN", [b"s"]),
                                         (b"ZSCAN", [b"z"]))]
    ours, real = _both(diff_pair, commands)
    assert _mismatches(commands, ours, real, norm_scan) == []


def test_config_get_patterns_nocase_as_redis(diff_pair: Pair) -> None:
    """CONFIG GET matches without case; compared on the names both servers know."""
    ours, real = _both(diff_pair, [[b"CONFIG", b"GET", b"*"]])
    known = set(_parse(ours[0])[::2]) & set(_parse(real[0])[::2])  # type: ignore[index]
    patterns = [b"MAX*", b"*MEMORY*", b"[M-N]*", b"[m-n]*", b"[Z-a]*", b"[^A-L]*", b"?A*",
                b"*-[P-T]*", b"[A-z]*", b"appendONLY", b"\\A*", b"[\\A]*", b"*[", b"*[^"]
    commands = [[b"CONFIG", b"GET", p] for p in patterns]
    ours, real = _both(diff_pair, commands)

    def known_only(raw: bytes) -> bytes:
        flat = _parse(raw)
        assert isinstance(flat, list)
        return b" ".join(sorted(k for k in flat[::2] if k in known))

    assert _mismatches(commands, ours, real, known_only) == []
    assert known_only(real[patterns.index(b"[Z-a]*")]) == b""  # swapped, then lowered: empty
    assert known_only(ours[0]) != b""
    # A name without glob characters: looked up without case, answered as given.
    commands = [[b"CONFIG", b"GET", b"appendONLY"], [b"CONFIG", b"GET", b"MAXMEMORY", b"maxmemory"],
                [b"CONFIG", b"GET", b"maxmemory", b"max*ory"], [b"CONFIG", b"GET", b"nosuch"]]
    ours, real = _both(diff_pair, commands)
    assert _mismatches(commands, ours, real, norm_pairs) == []


def test_pubsub_patterns_as_redis(diff_pair: Pair) -> None:
    """PUBSUB CHANNELS with a pattern, and PSUBSCRIBE then PUBLISH receiver counts."""
    channels = [k for k in KEYS if k]
    patterns = TRICKY[1:] + _random_patterns(60)
    out: dict[int, list[bytes]] = {}
    for port in (diff_pair.ours_port, diff_pair.real_port):
        with RawClient(port) as sub, RawClient(port) as psub, RawClient(port) as c:
            sub.call_frames(b"SUBSCRIBE", *channels, frames=len(channels))
            psub.call_frames(b"PSUBSCRIBE", *patterns, frames=len(patterns))
            replies = [norm_sorted(c.call(b"PUBSUB", b"CHANNELS", p)) for p in patterns]
            replies += [c.call(b"PUBLISH", ch, b"m") for ch in [*channels, b""]]
            out[port] = replies
    assert out[diff_pair.ours_port] == out[diff_pair.real_port]


# -- no stall -----------------------------------------------------------------------------------
STALL_PATTERNS = [
    b"a" + b"*a" * 40 + b"b",
    b"*a" * 700 + b"*b",
    b"*a" * 1001,  # beyond Redis' nesting limit: matches nothing
    (b"*a" * 1000)[:1999],
    b"*" * 1500 + b"a" * 5 + b"?*" * 600 + b"[b]",
]
ANSWER_S = 10.0  # generous: the contract is "answers at all while others are served"


def _long_keys() -> list[bytes]:
    return [b"a" * n for n in (50, 400, 999, 1000, 1001, 1500, 2500, 4000)] + [b"a" * 1200 + b"b"]


def test_keys_with_many_stars_does_not_stall(diff_pair: Pair) -> None:
    keys = _long_keys()
    for port in (diff_pair.ours_port, diff_pair.real_port):
        with RawClient(port) as c:
            c.call(b"FLUSHALL")
            c.call(b"MSET", *[x for k in keys for x in (k, b"1")])
    for pattern in STALL_PATTERNS:
        with RawClient(diff_pair.real_port) as real:
            want = norm_sorted(real.call(b"KEYS", pattern))
        with RawClient(diff_pair.ours_port) as c, RawClient(diff_pair.ours_port) as other:
            c.send(b"KEYS", pattern)
            time.sleep(0.05)  # KEYS is read first
            other.send(b"PING")
            assert other.read(timeout_s=ANSWER_S) == b"+PONG\r\n", pattern[:40]
            assert norm_sorted(c.read(timeout_s=ANSWER_S)) == want, pattern[:40]


def test_psubscribe_with_many_stars_does_not_stall(diff_pair: Pair) -> None:
    channel = b"a" * 3000
    counts = []
    for port in (diff_pair.ours_port, diff_pair.real_port):
        with RawClient(port) as psub, RawClient(port) as c, RawClient(port) as other:
            psub.call_frames(b"PSUBSCRIBE", *STALL_PATTERNS, frames=len(STALL_PATTERNS))
            c.send(b"PUBLISH", channel, b"m")
            time.sleep(0.05)
            other.send(b"PING")
            assert other.read(timeout_s=ANSWER_S) == b"+PONG\r\n"
            counts.append(c.read(timeout_s=ANSWER_S))
            c.send(b"PUBSUB", b"CHANNELS", STALL_PATTERNS[0])
            counts.append(c.read(timeout_s=ANSWER_S))
    assert counts[:2] == counts[2:]


def test_command_list_filterby_pattern_nocase_as_redis(diff_pair: Pair) -> None:
    """COMMAND LIST FILTERBY PATTERN matches without case; compared on the commands both know."""
    ours, real = _both(diff_pair, [[b"COMMAND", b"LIST"]])
    known = set(_parse(ours[0])) & set(_parse(real[0]))  # type: ignore[arg-type]
    patterns = [b"G*", b"*SCAN", b"[Z-a]*", b"[x-Z]*", b"?[^A-S]*", b"config|*", b"*|[G]et",
                b"h\\*", b"*[", b"[", b"*RANGE*", b"*e*e*", b"x[A-z]*"]
    commands = [[b"COMMAND", b"LIST", b"FILTERBY", b"PATTERN", p] for p in patterns]
    ours, real = _both(diff_pair, commands)

    def known_only(raw: bytes) -> bytes:
        names = _parse(raw)
        assert isinstance(names, list)
        return b" ".join(sorted(n for n in names if n in known))

    assert _mismatches(commands, ours, real, known_only) == []
    assert known_only(real[0]) != b""
