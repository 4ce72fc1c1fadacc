"""SORT / SORT_RO without I/O: Redis 7.0's sortCommandGeneric as values in, values out.

Shared by the node (which looks the patterns up in its own keyspace) and the proxy (which
fetches what the patterns name from the masters of their slots)::

    parse(argv)            the options, or the error text Redis answers (in argv order)
    pattern_target(p, e)   the key (and hash field) pattern ``p`` names for element ``e``
    order(args, kind, elements, by_values)
                           the elements the reply is made of, in order (LIMIT applied), or the
                           conversion error

Redis' rules mirrored here: BY without ``*`` means no sorting (the collection's own order: a
list's, a sorted set's by score; DESC walks it backwards; a set keeps its iteration order,
except with STORE, where it is sorted ALPHA so that replicas agree); numeric sorting reads
each value with strtod (a value it cannot read fails the whole command, even outside LIMIT);
equal scores compare the elements byte-wise; ALPHA with BY puts missing values first; DESC
negates every comparison.
"""

from __future__ import annotations

import math
import re
from functools import cmp_to_key
from typing import NamedTuple

from slotgate.protocol.errors import NOT_INTEGER, SYNTAX
from slotgate.protocol.resp import string2ll

SCORE_ERR = "ERR One or more scores can't be converted into double"
BY_DENIED = "ERR BY option of SORT denied in Cluster mode."
GET_DENIED = "ERR GET option of SORT denied in Cluster mode."
BY_ACL = "ERR BY option of SORT denied due to insufficient ACL permissions."
GET_ACL = "ERR GET option of SORT denied due to insufficient ACL permissions."
_C_SPACE = b" \t\n\v\f\r"
_DEC = re.compile(rb"[+-]?(\d+\.?\d*([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?|inf(inity)?|nan)",
                  re.IGNORECASE)
_HEXF = re.compile(rb"[+-]?0[xX]([0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)([pP][+-]?\d+)?")


class SortArgs(NamedTuple):
    """SORT's options as Redis holds them after parsing."""

    desc: bool
    alpha: bool
    dontsort: bool  # BY without '*'
    sortby: bytes | None
    limit_start: int
    limit_count: int
    store: bytes | None
    gets: list[bytes]

    @property
    def needs_lookups(self) -> bool:
        """BY with a real pattern, or any GET: what a cluster node refuses."""
        return bool(self.gets) or (self.sortby is not None and not self.dontsort)


def parse(argv: list[bytes], readonly: bool, cluster: bool = False,
          reads_every_key: bool = True) -> SortArgs | str:
    """SORT's options (argv[2:]), or the first error in argv order; ``cluster`` refuses BY
    patterns and GET as a cluster node does; without ``reads_every_key`` (the user's ACL
    lets it read every key) they are refused too."""
    desc = alpha = dontsort = False
    limit_start, limit_count = 0, -1
    sortby: bytes | None = None
    store: bytes | None = None
    gets: list[bytes] = []
    j = 2
    n = len(argv)
    while j < n:
        opt = argv[j].lower()
        left = n - j - 1
        if opt == b"asc":
            desc = False
        elif opt == b"desc":
            desc = True
        elif opt == b"alpha":
            alpha = True
        elif opt == b"limit" and left >= 2:
            first = string2ll(argv[j + 1])
            second = string2ll(argv[j + 2])
            if first is None or second is None:
                return NOT_INTEGER
            limit_start, limit_count = first, second
            j += 2
        elif opt == b"store" and left >= 1 and not readonly:
            store = argv[j + 1]
            j += 1
        elif opt == b"by" and left >= 1:
            sortby = argv[j + 1]
            if b"*" not in sortby.split(b"\0", 1)[0]:
                dontsort = True
            elif cluster:
                return BY_DENIED
            elif not reads_every_key:
                return BY_ACL
            j += 1
        elif opt == b"get" and left >= 1:
            if cluster:
                return GET_DENIED
            if not reads_every_key:
                return GET_ACL
            gets.append(argv[j + 1])
            j += 1
        else:
            return SYNTAX
        j += 1
    return SortArgs(desc, alpha, dontsort, sortby, limit_start, limit_count, store, gets)


def strtod_score(raw: bytes) -> float | None:
    """The double strtod reads from the whole of ``raw`` (None: SORT's conversion error)."""
    raw = raw.split(b"\0", 1)[0]  # a C string ends at its first NUL
    if raw == b"":
        return 0.0  # strtod consumes nothing and stops at the terminating NUL: accepted
    body = raw.lstrip(_C_SPACE)
    if _HEXF.fullmatch(body):
        text = body.decode()
        if "p" not in text.lower():
            text += "p0"
        x = float.fromhex(text)
    elif _DEC.fullmatch(body):
        x = float(body)
    else:
        return None
    if math.isnan(x):
        return None
    low = body.lower().lstrip(b"+-")
    if math.isinf(x) and not low.startswith(b"inf"):
        return None  # overflow: ERANGE
    if x == 0.0 or abs(x) < 2.2250738585072014e-308:
        mantissa = low[2:].split(b"p")[0] if low.startswith(b"0x") else low.split(b"e")[0]
        if re.search(rb"[1-9a-f]" if low.startswith(b"0x") else rb"[1-9]", mantissa):
            return None  # underflow: ERANGE
    return x


# What a pattern names for one element: the element itself (``#``), nothing (no ``*``: the
# lookup is always nil), or a key and, for ``key->field``, a hash field.
ELEMENT = "#"


class Target(NamedTuple):
    key: bytes
    field: bytes | None


def pattern_target(pattern: bytes, element: bytes) -> Target | str | None:
    """lookupKeyByPattern's key: ``#`` is the element (``ELEMENT``); ``pre*post`` a string
    key; ``pre*post->field`` a hash field; no ``*`` nothing (None). The pattern is a C string
    there: what follows a NUL is not searched."""
    if pattern == b"#":
        return ELEMENT
    cstr = pattern.split(b"\0", 1)[0]
    star = cstr.find(b"*")
    if star == -1:
        return None
    arrow = cstr.find(b"->", star + 1)
    field = None
    end = len(pattern)
    if arrow != -1 and arrow + 2 < len(cstr):
        field = pattern[arrow + 2 :]
        end = arrow
    return Target(pattern[:star] + element + pattern[star + 1 : end], field)


def limits(args: SortArgs, length: int) -> tuple[int, int]:
    """LIMIT clamped as Redis does: (start, end), end inclusive; end < start when empty."""
    start = max(args.limit_start, 0)
    end = length - 1 if args.limit_count < 0 else start + args.limit_count - 1
    if start >= length:
        start, end = length - 1, length - 2
    if end >= length:
        end = length - 1
    return start, end


def effective(args: SortArgs, kind: bytes) -> SortArgs:
    """A set with no sorting asked for, stored: sorted ALPHA by its elements instead."""
    if args.dontsort and kind == b"set" and args.store is not None:
        return args._replace(dontsort=False, alpha=True, sortby=None)
    return args


def order(args: SortArgs, kind: bytes, elements: list[bytes],
          by_values: list[bytes | None] | None) -> list[bytes] | str:
    """The chosen elements in reply order, or ``SCORE_ERR``. ``args`` is ``effective``'s;
    ``kind`` is b"list", b"set" or b"zset" (a missing key: an empty list); ``elements`` in
    the collection's own order (a sorted set's by score); ``by_values`` the BY pattern's value
    for each element (None: missing), when ``args`` sorts by a pattern."""
    start, end = limits(args, len(elements))
    if args.dontsort:
        if kind == b"set":
            return elements[start : end + 1] if end >= start else []
        walk = elements[::-1] if args.desc else elements
        return walk[start : end + 1] if end >= start else []
    vector = elements
    by = by_values if args.sortby is not None else None
    scores: list[float] = [0.0] * len(vector)
    conversion_error = False
    if not args.alpha:
        for i, el in enumerate(vector):
            byval = el if by is None else by[i]
            if byval is None:
                continue
            x = strtod_score(byval)
            if x is None:
                conversion_error = True
            else:
                scores[i] = x
    if conversion_error:
        return SCORE_ERR
    # Byte order: strcoll in the C locale, and compareStringObjects with STORE.
    if args.store is None:
        def text(x: bytes) -> bytes:
            return x.split(b"\0", 1)[0]
    else:
        def text(x: bytes) -> bytes:
            return x
    alpha, desc = args.alpha, args.desc

    def cmp(a: int, b: int) -> int:
        if not alpha:
            if scores[a] != scores[b]:
                r = 1 if scores[a] > scores[b] else -1
            else:
                r = (vector[a] > vector[b]) - (vector[a] < vector[b])
        elif by is not None:
            x, y = by[a], by[b]
            if x is None or y is None:
                r = 0 if x is y else (-1 if x is None else 1)
            else:
                tx, ty = text(x), text(y)
                r = (tx > ty) - (tx < ty)
        else:
            tx, ty = text(vector[a]), text(vector[b])
            r = (tx > ty) - (tx < ty)
        return -r if desc else r

    idxs = sorted(range(len(vector)), key=cmp_to_key(cmp))
    return [vector[i] for i in idxs[start : end + 1]] if end >= start else []
