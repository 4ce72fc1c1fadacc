"""The node's glob matcher against a slow, line-by-line port of Redis 7.0's stringmatchlen."""

from __future__ import annotations

import random
import sys
import time

import pytest

from slotgate.protocol.glob import compile_glob, glob_match


def _c(b: int) -> int:
    """A byte as C's (signed) char."""
    return b - 256 if b >= 128 else b


def _tolower(c: int) -> int:
    return c + 32 if ord("A") <= c <= ord("Z") else c


def reference(pattern: bytes, string: bytes, nocase: bool = False) -> bool:
    """util.c stringmatchlen_impl, pointer for pointer: recursion on '*', skipLongerMatches,
    the nesting limit, and reads of the terminating NUL (as sds strings have one)."""
    pat = pattern + b"\0"
    s = string + b"\0"
    skip = [False]

    def impl(p: int, plen: int, q: int, slen: int, nesting: int) -> bool:
        if nesting > 1000:
            return False
        while plen and slen:
            ch = pat[p]
            if ch == ord("*"):
                while plen and pat[p + 1] == ord("*"):
                    p += 1
                    plen -= 1
                if plen == 1:
                    return True
                while slen:
                    if impl(p + 1, plen - 1, q, slen, nesting + 1):
                        return True
                    if skip[0]:
                        return False
                    q += 1
                    slen -= 1
                skip[0] = True
                return False
            elif ch == ord("?"):
                q += 1
                slen -= 1
            elif ch == ord("["):
                p += 1
                plen -= 1
                negate = pat[p] == ord("^")
                if negate:
                    p += 1
                    plen -= 1
                match = False
                while True:
                    if pat[p] == ord("\\") and plen >= 2:
                        p += 1
                        plen -= 1
                        if pat[p] == s[q]:
                            match = True
                    elif pat[p] == ord("]"):
                        break
                    elif plen == 0:
                        p -= 1
                        plen += 1
                        break
                    elif plen >= 3 and pat[p + 1] == ord("-"):
                        start, end, c = _c(pat[p]), _c(pat[p + 2]), _c(s[q])
                        if start > end:
                            start, end = end, start
                        if nocase:
                            start, end, c = _tolower(start), _tolower(end), _tolower(c)
                        p += 2
                        plen -= 2
                        if start <= c <= end:
                            match = True
                    elif not nocase:
                        if pat[p] == s[q]:
                            match = True
                    elif _tolower(pat[p]) == _tolower(s[q]):
                        match = True
                    p += 1
                    plen -= 1
                if negate:
                    match = not match
                if not match:
                    return False
                q += 1
                slen -= 1
            else:
                if ch == ord("\\") and plen >= 2:
                    p += 1
                    plen -= 1
                if not nocase:
                    if pat[p] != s[q]:
                        return False
                elif _tolower(pat[p]) != _tolower(s[q]):
                    return False
                q += 1
                slen -= 1
            p += 1
            plen -= 1
            if slen == 0:
                while pat[p] == ord("*"):
                    p += 1
                    plen -= 1
                break
        return plen == 0 and slen == 0

    return impl(0, len(pattern), 0, len(string), 0)


TRICKY = [
    b"", b"*", b"**", b"?", b"a", b"a*", b"*a", b"a*b", b"*a*", b"a?c", b"[abc]", b"[^abc]",
    b"[a-c]", b"[c-a]", b"[^c-a]", b"[a-]", b"[-a]", b"[]", b"[^]", b"[]a]", b"[", b"[^",
    b"[a", b"[a-", b"[\\", b"[\\]", b"[\\]]", b"[a\\-z]", b"\\", b"a\\", b"\\*", b"\\?",
    b"\\[", b"\\a", b"a[", b"*[", b"[*]", b"[?]", b"[[]", b"[Z-a]", b"[A-z]", b"[a-\xff]",
    b"[\x80-\x7f]", b"\xff*", b"[^\\]", b"a*?*b", b"*?", b"?*", b"[ab]*[cd]", b"A*", b"[A-C]",
]
SUBJECTS = [
    b"", b"a", b"b", b"c", b"ab", b"abc", b"aab", b"ba", b"-", b"]", b"[", b"\\", b"^", b"_",
    b"*", b"?", b"A", b"B", b"Z", b"z", b"`", b"\xff", b"\x80", b"\x00", b"a\\", b"azb",
    b"ad", b"acd", b"aXb", b"abb",
]


@pytest.mark.parametrize("nocase", [False, True])
def test_tricky_patterns_as_redis(nocase: bool) -> None:
    for pattern in TRICKY:
        for subject in SUBJECTS:
            assert glob_match(pattern, subject, nocase) == reference(pattern, subject, nocase), (
                pattern, subject, nocase)


def test_random_patterns_as_redis() -> None:
    rng = random.Random(12)
    alphabet = b"ab*?[]^-\\A"
    for _ in range(20000):
        pattern = bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 10)))
        subject = bytes(rng.choice(b"abA-]^\\*[") for _ in range(rng.randint(0, 8)))
        nocase = rng.random() < 0.3
        assert glob_match(pattern, subject, nocase) == reference(pattern, subject, nocase), (
            pattern, subject, nocase)


def test_nesting_limit_as_redis() -> None:
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(10000)
    try:
        for stars in (999, 1000, 1001):
            for tail in (b"", b"*"):
                pattern = b"*a" * stars + tail
                for subject in (b"a" * stars, b"a" * (stars + 3)):
                    assert glob_match(pattern, subject) == reference(pattern, subject), (
                        stars, tail, len(subject))
    finally:
        sys.setrecursionlimit(old)


def test_exponential_patterns_stay_fast() -> None:
    """Patterns that make a backtracking matcher take minutes answer in milliseconds."""
    subject = b"a" * 5000
    for pattern in (b"a" + b"*a" * 40 + b"b", b"*a" * 900 + b"*b", (b"*a?" * 700) + b"[b]",
                    b"*" * 3000 + b"a" * 10 + b"*" * 3000 + b"b"):
        g = compile_glob(pattern)
        t0 = time.monotonic()
        assert not g.matches(subject)
        assert time.monotonic() - t0 < 1.0, pattern[:40]
