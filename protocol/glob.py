"""Redis glob patterns (KEYS, SCAN MATCH, CONFIG GET, PUBSUB, COMMAND LIST, ACL key and channel
patterns): ``* ? [abc] [^a-z] \\x``.

Mirrors ``stringmatchlen`` (Redis 7.0 util.c) without its exponential worst case.

Redis' matcher reads the pattern the same way whatever the subject is, so a pattern is first
cut into tokens: a star run, or one position matching a set of bytes (a literal, ``?``, an
escape, a class). Every byte set is computed by evaluating Redis' own class logic for each of
the 256 bytes, which keeps its quirks exactly:

- ``[`` without ``]`` is a class running to the end of the pattern; ``[]`` matches nothing,
  ``[^]`` anything; ``[a-]`` is the range from ``]`` to ``a``;
- ranges compare *signed* chars and are swapped when reversed (``[z-a]``), and under nocase
  are swapped first, lowered afterwards (``[Z-a]`` then matches nothing);
- an escaped byte inside a class ignores nocase; a ``\\`` that ends the pattern (or a
  class) is a literal backslash;
- an empty subject matches only the empty pattern (so ``*`` does not match ``""``; KEYS and
  SCAN short-circuit a lone ``*`` before matching, as Redis does);
- more than 1000 star runs before the last token: Redis' recursion gives up at nesting 1000,
  so such a pattern matches no non-empty subject.

The match itself cannot backtrack far: the star-free segments are fixed-width; the first is
matched at the start of the subject, the last at its end, and each middle one is searched for
at its leftmost place after the one before and never reconsidered (leftmost is never worse for
what follows: the argument behind Redis' own ``skipLongerMatches``). That is one regex search
per segment, O(len(pattern) * len(subject)) at worst, and no recursion. Segments are compiled
once and shared by every pattern that has them (a 256-byte pattern of 128 ``*a`` compiles one
regex, ``a``); a position that accepts no byte (``[]``) makes the pattern match nothing at once.
tests/node/test_glob_worst.py holds 50 worst cases of 256 bytes to 10 ms against 1 KB keys.
"""

from __future__ import annotations

import re
from functools import lru_cache

_STAR = None  # a star run, among the tokens
_MAX_NESTING = 1000  # stringmatchlen_impl: "if (nesting > 1000) return 0"
_UPPER = range(ord("A"), ord("Z") + 1)
_ANY = frozenset(range(256))


def _lower(c: int) -> int:
    """C ``tolower`` in the C locale (Redis sets only LC_COLLATE)."""
    return c + 32 if c in _UPPER else c


def _signed(c: int) -> int:
    return c - 256 if c >= 128 else c


def _literal(c: int, nocase: bool) -> frozenset[int]:
    if nocase and _lower(c) != c:
        return frozenset((c, _lower(c)))
    if nocase and c in range(ord("a"), ord("z") + 1):
        return frozenset((c, c - 32))
    return frozenset((c,))


def _tokens(p: bytes, nocase: bool) -> list[frozenset[int] | None]:
    """The pattern as Redis walks it: ``_STAR`` for a star run, else the bytes one position
    accepts. Follows stringmatchlen's pattern pointer step by step."""
    out: list[frozenset[int] | None] = []
    i, n = 0, len(p)
    while i < n:
        ch = p[i]
        if ch == 0x2A:  # '*'
            while i + 1 < n and p[i + 1] == 0x2A:
                i += 1
            out.append(_STAR)
        elif ch == 0x3F:  # '?'
            out.append(_ANY)
        elif ch == 0x5B:  # '['
            i += 1
            negate = i < n and p[i] == 0x5E  # '^'
            if negate:
                i += 1
            members: set[int] = set()
            while True:
                if i < n and p[i] == 0x5C and n - i >= 2:  # '\\x': exact, never nocase
                    i += 1
                    members.add(p[i])
                elif i < n and p[i] == 0x5D:  # ']'
                    break
                elif i >= n:  # unterminated: the class ends with the pattern
                    i -= 1
                    break
                elif n - i >= 3 and p[i + 1] == 0x2D:  # 'a-z'
                    start, end = _signed(p[i]), _signed(p[i + 2])
                    if start > end:
                        start, end = end, start
                    if nocase:
                        start, end = _lower(start & 0xFF), _lower(end & 0xFF)
                        start, end = _signed(start), _signed(end)
                        members.update(c for c in range(256)
                                       if start <= _signed(_lower(c)) <= end)
                    else:
                        members.update(c for c in range(256) if start <= _signed(c) <= end)
                    i += 2
                else:
                    members.update(_literal(p[i], nocase))
                i += 1
            out.append(_ANY.difference(members) if negate
                       else frozenset(members))
        else:
            if ch == 0x5C and n - i >= 2:  # '\\x'; a final '\\' is itself
                i += 1
            out.append(_literal(p[i], nocase))
        i += 1
    return out


def _class_rx(accepted: frozenset[int]) -> bytes:
    if len(accepted) == 256:
        return b"."
    if not accepted:
        return b"[^\\x00-\\xff]"
    if len(accepted) == 1:
        return re.escape(bytes(accepted))
    # runs of consecutive bytes as ranges: a short class compiles fast (a negated class of
    # 255 bytes spelled out byte by byte made a 256-byte pattern take 50 ms to compile)
    out = []
    run_start = prev = -2
    for c in [*sorted(accepted), 999]:
        if c != prev + 1:
            if run_start >= 0:
                out.append(b"\\x%02x" % run_start if run_start == prev
                           else b"\\x%02x-\\x%02x" % (run_start, prev))
            run_start = c
        prev = c
    return b"[" + b"".join(out) + b"]"


class Glob:
    """A compiled pattern: ``matches(subject)`` answers as ``stringmatchlen`` would."""

    __slots__ = ("pattern", "_never", "_stars", "_head", "_head_bytes", "_middles", "_tail",
                 "_tail_bytes")

    def __init__(self, pattern: bytes, nocase: bool = False) -> None:
        self.pattern = pattern
        tokens = _tokens(pattern, nocase)
        segments: list[list[frozenset[int]]] = [[]]
        for t in tokens:
            if t is _STAR:
                segments.append([])
            else:
                segments[-1].append(t)
        stars = len(segments) - 1
        # A final star run never recurses; every other one adds one level of nesting.
        nesting = stars - (1 if tokens and tokens[-1] is _STAR else 0)
        # a position that accepts no byte (``[]``) can never be matched
        self._never = nesting > _MAX_NESTING or any(t is not _STAR and not t for t in tokens)
        self._stars = stars > 0
        head, tail = segments[0], segments[-1] if stars else []
        self._head = _segment_rx(_seq_rx(head)).match if head else None
        self._head_bytes = len(head)
        self._middles = [_segment_rx(_seq_rx(seg)).search for seg in segments[1:-1]]
        self._tail = _segment_rx(_seq_rx(tail)).match if tail else None
        self._tail_bytes = len(tail)

    def matches(self, subject: bytes) -> bool:
        if not subject:
            return not self.pattern  # only the empty pattern matches it (not even "*")
        if self._never:
            return False
        n = len(subject)
        if not self._stars:  # one fixed-width segment: the whole subject
            return n == self._head_bytes and (self._head is None or self._head(subject) is not None)
        # The segments have fixed widths: the first starts the subject, the last ends it, and
        # each one between is placed at its leftmost place after the one before and never
        # reconsidered (leftmost is never worse for what follows: the argument behind Redis'
        # own ``skipLongerMatches``). One search per segment: O(len(pattern) * len(subject)).
        pos = self._head_bytes
        end = n - self._tail_bytes
        if pos > end or (self._head is not None and self._head(subject) is None):
            return False
        for search in self._middles:
            m = search(subject, pos, end)
            if m is None:
                return False
            pos = m.end()
        return self._tail is None or self._tail(subject, end) is not None


def _seq_rx(seg: list[frozenset[int]]) -> bytes:
    """A fixed-width run of positions; repeats of one position as ``x{n}``."""
    out = []
    i = 0
    while i < len(seg):
        j = i
        while j + 1 < len(seg) and (seg[j + 1] is seg[i] or seg[j + 1] == seg[i]):
            j += 1
        rx = _class_rx(seg[i])
        out.append(rx if j == i else rx + b"{%d}" % (j - i + 1))
        i = j + 1
    return b"".join(out)


@lru_cache(maxsize=4096)
def _segment_rx(rx: bytes) -> re.Pattern[bytes]:
    """One segment's regex, shared by every pattern that has the segment."""
    return re.compile(rx, re.DOTALL)


@lru_cache(maxsize=512)
def compile_glob(pattern: bytes, nocase: bool = False) -> Glob:
    return Glob(pattern, nocase)


def glob_match(pattern: bytes, subject: bytes, nocase: bool = False) -> bool:
    """True when ``subject`` matches the Redis glob ``pattern`` (as ``stringmatchlen``)."""
    return compile_glob(pattern, nocase).matches(subject)


@lru_cache(maxsize=4096)
def _compile_held(pattern: bytes) -> Glob:
    return Glob(pattern)


def held_glob_match(pattern: bytes, subject: bytes) -> bool:
    """``glob_match`` for the patterns a server holds (ACL key and channel patterns), from a
    cache of their own: patterns that clients send (KEYS, SCAN MATCH) cannot push them out,
    so an ACL check does not compile its user's patterns again."""
    return _compile_held(pattern).matches(subject)
