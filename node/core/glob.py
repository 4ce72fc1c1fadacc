"""Redis glob patterns (KEYS, SCAN MATCH, CONFIG GET, PUBSUB): ``* ? [abc] [^a-z] \\x``.

Translated once to a compiled bytes regex (cached), matched with ``fullmatch``.
"""

from __future__ import annotations

import re
from functools import lru_cache


@lru_cache(maxsize=512)
def _compile(pattern: bytes, nocase: bool) -> re.Pattern[bytes]:
    out = bytearray()
    i, n = 0, len(pattern)
    while i < n:
        ch = pattern[i : i + 1]
        if ch == b"*":
            while i + 1 < n and pattern[i + 1 : i + 2] == b"*":
                i += 1
            out += b".*"
        elif ch == b"?":
            out += b"."
        elif ch == b"\\" and i + 1 < n:
            i += 1
            out += re.escape(pattern[i : i + 1])
        elif ch == b"[":
            i += 1
            negate = i < n and pattern[i : i + 1] == b"^"
            if negate:
                i += 1
            items: list[bytes] = []
            while i < n and pattern[i : i + 1] != b"]":
                c = pattern[i : i + 1]
                if c == b"\\" and i + 1 < n:
                    i += 1
                    items.append(re.escape(pattern[i : i + 1]))
                elif i + 2 < n and pattern[i + 1 : i + 2] == b"-" and pattern[i + 2 : i + 3] != b"]":
                    lo, hi = pattern[i], pattern[i + 2]
                    if lo > hi:
                        lo, hi = hi, lo
                    items.append(re.escape(bytes([lo])) + b"-" + re.escape(bytes([hi])))
                    i += 2
                else:
                    items.append(re.escape(c))
                i += 1
            # Redis: an unterminated "[" ends the pattern with the class seen so far.
            body = b"".join(items)
            if not body:
                out += b"[^\\s\\S]" if not negate else b"[\\s\\S]"
            else:
                out += b"[" + (b"^" if negate else b"") + body + b"]"
        else:
            out += re.escape(ch)
        i += 1
    flags = re.DOTALL | (re.IGNORECASE if nocase else 0)
    return re.compile(bytes(out), flags)


def glob_match(pattern: bytes, subject: bytes, nocase: bool = False) -> bool:
    """True when ``subject`` matches the Redis glob ``pattern``."""
    if pattern == b"*":
        return True
    return _compile(pattern, nocase).fullmatch(subject) is not None


def compile_glob(pattern: bytes, nocase: bool = False) -> re.Pattern[bytes]:
    return _compile(pattern, nocase)
