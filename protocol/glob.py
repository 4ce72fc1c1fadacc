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

The match itself is one compiled regex that cannot backtrack far: the star-free segments
are fixed-width; the first is anchored at the start, the last (after ``.*``) at the end, and
each middle one is found at its leftmost place and never reconsidered, an atomic group
``(?>.*?S)`` (leftmost is never worse for what follows: the argument behind Redis' own
``skipLongerMatches``). That is O(len(pattern) * len(subject)) at worst, and no recursion.
"""

from __future__ import annotations

import re
from functools import lru_cache

_STAR = None  # a star run, among the tokens
_MAX_NESTING = 1000  # stringmatchlen_impl: "if (nesting > 1000) return 0"
_UPPER = range(ord("A"), ord("Z") + 1)


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
            out.append(frozenset(range(256)))
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
            out.append(frozenset(range(256)).difference(members) if negate
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
    return b"[" + b"".join(b"\\x%02x" % c for c in sorted(accepted)) + b"]"


class Glob:
    """A compiled pattern: ``matches(subject)`` answers as ``stringmatchlen`` would."""

    __slots__ = ("pattern", "_rx", "_find", "_empty")

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
        if nesting > _MAX_NESTING:
            body = b"(?!)"
        else:
            # (?>.*?S): S at its leftmost place from here on, never reconsidered.
            body = _seq_rx(segments[0]) + b"".join(_leftmost_rx(s) for s in segments[1:-1])
            if stars:
                body += b".*" + _seq_rx(segments[-1])
        self._rx = re.compile(body, re.DOTALL)
        self._find = self._rx.fullmatch
        if nesting <= _MAX_NESTING and len(segments) == 3 and not segments[0] and not segments[2]:
            # "*X*" (common): X anywhere, as a plain search for X, much faster.
            self._find = re.compile(_seq_rx(segments[1]), re.DOTALL).search
        # Only the empty pattern matches the empty subject (even "*" does not).
        self._empty = not pattern

    def matches(self, subject: bytes) -> bool:
        return self._find(subject) is not None if subject else self._empty


def _seq_rx(seg: list[frozenset[int]]) -> bytes:
    return b"".join(_class_rx(t) for t in seg)


def _leftmost_rx(seg: list[frozenset[int]]) -> bytes:
    """The segment at its leftmost place from here on, never reconsidered."""
    if len(seg) == 1 and 0 < len(seg[0]) < 256:  # one class S: "[^S]*S", a faster form
        return b"(?>" + _class_rx(frozenset(range(256)).difference(seg[0])) + b"*" + _class_rx(seg[0]) + b")"
    return b"(?>.*?" + _seq_rx(seg) + b")"


@lru_cache(maxsize=512)
def compile_glob(pattern: bytes, nocase: bool = False) -> Glob:
    return Glob(pattern, nocase)


def glob_match(pattern: bytes, subject: bytes, nocase: bool = False) -> bool:
    """True when ``subject`` matches the Redis glob ``pattern`` (as ``stringmatchlen``)."""
    return compile_glob(pattern, nocase).matches(subject)
