"""The worst-case glob patterns of issue 12's pattern-matching figure: 50 patterns of up to 256
bytes (many ``*``, nested and unterminated ``[ ]``, backslashes, ``?`` runs, long literal
prefixes before a ``*``), and the keys of up to 1 KB they run against. Used by
tests/node/test_glob_worst.py and bench/bench_glob.py, which time them with ``best_times``."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence

from tests.support import RawArg, RawClient

PATTERN_MAX_BYTES = 256
KEY_MAX_BYTES = 1024


def _fill(unit: bytes, tail: bytes = b"") -> bytes:
    """``unit`` repeated to fill PATTERN_MAX_BYTES with ``tail`` at the end."""
    n = (PATTERN_MAX_BYTES - len(tail)) // len(unit)
    return unit * n + tail


def worst_keys() -> list[bytes]:
    rng = random.Random(12)
    n = KEY_MAX_BYTES
    return [
        b"a" * n, b"a" * (n - 1) + b"b", b"ab" * (n // 2), b"a" * (n // 2) + b"b" * (n // 2),
        b"\\" * n, b"[" * n, b"*" * n, b"?" * n, b"]" * n, b"^" * n, b"[a]" * (n // 3),
        b"a*" * (n // 2), b"aab" * (n // 3), b"\xff" * n, b"A" * n,
        bytes(rng.choice(b"ab") for _ in range(n)),
        bytes(rng.choice(b"ab*?[]^-\\") for _ in range(n)),
        bytes(rng.randrange(256) for _ in range(n)),
        b"a" * 255, b"a" * 256 + b"b", b"b" + b"a" * (n - 1), b"x",
    ]


def worst_patterns() -> list[bytes]:
    rng = random.Random(21)
    out = [
        # many stars between single bytes, failing or matching at the very end
        _fill(b"*a"), _fill(b"a*"), _fill(b"*a", b"*b"), _fill(b"*a", b"*c"), _fill(b"*a", b"b"),
        _fill(b"*?"), _fill(b"?*"), _fill(b"*?", b"c"), _fill(b"**a"), _fill(b"*ab"),
        _fill(b"*aab"), _fill(b"*a*b"), _fill(b"*a?"), _fill(b"*x"), _fill(b"*b", b"*a"),
        # stars before classes, escapes and nothing-matching classes
        _fill(b"*[a]"), _fill(b"*[^b]"), _fill(b"*[a-z]"), _fill(b"*[ab]", b"c"),
        _fill(b"*[^]"), _fill(b"*[]"), _fill(b"*\\a"), _fill(b"*\\*"), _fill(b"*\\"),
        _fill(b"*[\\]]"), _fill(b"*[[]"), _fill(b"*[a-]"),
        # nested and unterminated classes, backslash runs
        b"[" * 256, _fill(b"[[a"), _fill(b"[[]"), _fill(b"[^"), b"\\" * 256, _fill(b"[\\]"),
        _fill(b"[a-b]*"), b"*" + _fill(b"[")[1:],
        # ? runs, long literal prefixes and suffixes around a star
        b"?" * 255 + b"*", b"*" + b"?" * 254 + b"b", b"a" * 200 + b"*" + b"a" * 55,
        b"a" * 254 + b"*b", b"*" + b"a" * 254 + b"b", b"a" * 127 + b"*" + b"a" * 127 + b"c",
        b"*" * 128 + b"a" * 127 + b"b", b"a" * 128 + b"*" * 127 + b"c",
        b"?" * 128 + b"*" * 64 + b"?" * 63 + b"b",
    ]
    alphabet = b"ab*?[]^-\\"
    while len(out) < 50:  # random mixes of everything above, star-heavy
        out.append(bytes(rng.choice(alphabet + b"**") for _ in range(PATTERN_MAX_BYTES)))
    assert len(out) == len(set(out)) == 50
    assert all(len(p) <= PATTERN_MAX_BYTES for p in out)
    return out


def flush_pattern_cache(c: RawClient) -> None:
    """Push every timed pattern out of the server's cache of compiled patterns (512 of them,
    protocol/glob.py), so that a try pays for compiling its pattern again."""
    c.pipeline([[b"KEYS", b"cache-flush:%d" % i] for i in range(600)])
    c.call(b"PING")  # the aftermath of the pipeline (its writer task) not in the first timing


def best_times(c: RawClient, commands: Sequence[Sequence[RawArg]], tries: int,
               check: Callable[[int, bytes], None] | None = None) -> list[float]:
    """Each command's best round-trip time in seconds over ``tries`` rounds of all of them, the
    compiled-pattern cache flushed before each round; ``check(i, reply)`` sees every reply."""
    best = [float("inf")] * len(commands)
    for _ in range(tries):
        flush_pattern_cache(c)
        for i, cmd in enumerate(commands):
            t0 = time.perf_counter()
            reply = c.call(*cmd)
            best[i] = min(best[i], time.perf_counter() - t0)
            if check is not None:
                check(i, reply)
    return best
