"""The sorted-set value: a dict member -> score plus an ordered index of (score, member).

Redis orders elements by score, then by member bytes (memcmp, shorter prefix first) — exactly
Python's ordering of ``(float, bytes)`` tuples. The index is a chunked sorted list (sorted
chunks of at most ``2 * LOAD`` tuples and each chunk's last element): insert and delete cost
a bisect plus a memmove inside one chunk, rank and positional access sum the chunk lengths in
front (C-speed ``sum(map(len, ...))``). That keeps every operation cheap up to millions of
elements without a pure-Python skiplist's per-node overhead.

Pure data structure: no I/O, no Redis replies (those live in node/types/zsets.py).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterator
from itertools import islice
from operator import itemgetter

Entry = tuple[float, bytes]

LOAD = 256  # target chunk size (elements)
_score_of = itemgetter(0)
_member_of = itemgetter(1)


class SortedEntries:
    """A sorted list of ``(score, member)`` with positional access."""

    __slots__ = ("_lists", "_maxes", "_len")

    def __init__(self) -> None:
        self._lists: list[list[Entry]] = []
        self._maxes: list[Entry] = []
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def add(self, e: Entry) -> None:
        maxes = self._maxes
        if not maxes:
            self._lists.append([e])
            maxes.append(e)
            self._len = 1
            return
        i = bisect_left(maxes, e)
        if i == len(maxes):
            i -= 1
            lst = self._lists[i]
            lst.append(e)
            maxes[i] = e
        else:
            lst = self._lists[i]
            insort(lst, e)
        self._len += 1
        if len(lst) > 2 * LOAD:
            half = lst[LOAD:]
            del lst[LOAD:]
            maxes[i] = lst[-1]
            self._lists.insert(i + 1, half)
            maxes.insert(i + 1, half[-1])

    def remove(self, e: Entry) -> None:
        """Remove ``e`` (which must be present)."""
        maxes = self._maxes
        i = bisect_left(maxes, e)
        lst = self._lists[i]
        j = bisect_left(lst, e)
        del lst[j]
        self._len -= 1
        if not lst:
            del self._lists[i]
            del maxes[i]
        elif j == len(lst):
            maxes[i] = lst[-1]

    def _loc(self, pos: int) -> tuple[int, int]:
        """Chunk index and offset of position ``pos`` (0 <= pos < len)."""
        if pos < len(self._lists[0]):
            return 0, pos
        for i, lst in enumerate(self._lists):
            n = len(lst)
            if pos < n:
                return i, pos
            pos -= n
        raise IndexError(pos)

    def _pos(self, i: int, j: int) -> int:
        return sum(map(len, self._lists[:i])) + j if i else j

    def __getitem__(self, pos: int) -> Entry:
        if pos < 0:
            pos += self._len
        i, j = self._loc(pos)
        return self._lists[i][j]

    def pick(self, positions: list[int]) -> list[Entry]:
        """The entries at ``positions`` (any order, repeats allowed), in that order: one walk
        over the chunks in position order instead of a chunk scan per position."""
        out: list[Entry] = [None] * len(positions)  # type: ignore[list-item]
        lists = self._lists
        i = base = 0
        end = len(lists[0]) if lists else 0
        for k in sorted(range(len(positions)), key=positions.__getitem__):
            p = positions[k]
            while p >= end:
                base = end
                i += 1
                end += len(lists[i])
            out[k] = lists[i][p - base]
        return out

    def index(self, e: Entry) -> int:
        """Rank (0-based) of ``e``, which must be present."""
        i = bisect_left(self._maxes, e)
        return self._pos(i, bisect_left(self._lists[i], e))

    def bisect_left(self, e: Entry) -> int:
        """Number of entries < ``e``."""
        maxes = self._maxes
        i = bisect_left(maxes, e)
        if i == len(maxes):
            return self._len
        return self._pos(i, bisect_left(self._lists[i], e))

    def score_left(self, score: float) -> int:
        """Number of entries with score < ``score``."""
        maxes = self._maxes
        i = bisect_left(maxes, score, key=_score_of)
        if i == len(maxes):
            return self._len
        return self._pos(i, bisect_left(self._lists[i], score, key=_score_of))

    def score_right(self, score: float) -> int:
        """Number of entries with score <= ``score``."""
        maxes = self._maxes
        i = bisect_right(maxes, score, key=_score_of)
        if i == len(maxes):
            return self._len
        return self._pos(i, bisect_right(self._lists[i], score, key=_score_of))

    def member_left(self, member: bytes) -> int:
        """Entries ordered before ``member`` (meaningful when all scores are equal)."""
        maxes = self._maxes
        i = bisect_left(maxes, member, key=_member_of)
        if i == len(maxes):
            return self._len
        return self._pos(i, bisect_left(self._lists[i], member, key=_member_of))

    def member_right(self, member: bytes) -> int:
        maxes = self._maxes
        i = bisect_right(maxes, member, key=_member_of)
        if i == len(maxes):
            return self._len
        return self._pos(i, bisect_right(self._lists[i], member, key=_member_of))

    def iter_from(self, pos: int) -> Iterator[Entry]:
        """Entries from position ``pos`` forwards."""
        if pos >= self._len:
            return
        i, j = self._loc(pos)
        lists = self._lists
        yield from islice(lists[i], j, None)
        for lst in islice(lists, i + 1, None):
            yield from lst

    def iter_back_from(self, pos: int) -> Iterator[Entry]:
        """Entries from position ``pos`` backwards."""
        if pos < 0:
            return
        i, j = self._loc(pos)
        lists = self._lists
        lst = lists[i]
        for k in range(j, -1, -1):
            yield lst[k]
        for k in range(i - 1, -1, -1):
            yield from reversed(lists[k])

    def slice(self, start: int, stop: int) -> list[Entry]:
        """Entries ``[start, stop)`` in order."""
        if start >= stop or start >= self._len:
            return []
        i, j = self._loc(start)
        lists = self._lists
        need = stop - start
        out = lists[i][j : j + need]  # whole chunks are copied at C speed
        need -= len(out)
        last = len(lists) - 1
        while need > 0 and i < last:
            i += 1
            chunk = lists[i][:need]
            out += chunk
            need -= len(chunk)
        return out

    def __iter__(self) -> Iterator[Entry]:
        for lst in self._lists:
            yield from lst

    def pop_first(self) -> Entry:
        lst = self._lists[0]
        e = lst.pop(0)
        self._len -= 1
        if not lst:
            del self._lists[0]
            del self._maxes[0]
        return e

    def pop_last(self) -> Entry:
        lst = self._lists[-1]
        e = lst.pop()
        self._len -= 1
        if not lst:
            del self._lists[-1]
            del self._maxes[-1]
        else:
            self._maxes[-1] = lst[-1]
        return e


class ZSet:
    """A sorted set: ``scores`` (member -> score) and ``entries`` (ordered (score, member)).
    ``big`` is True once Redis would use the skiplist encoding (one-way, as in Redis)."""

    __slots__ = ("scores", "entries", "big")

    def __init__(self) -> None:
        self.scores: dict[bytes, float] = {}
        self.entries = SortedEntries()
        self.big = False

    def __len__(self) -> int:
        return len(self.scores)

    def insert(self, member: bytes, score: float) -> None:
        """Add a member that is not present."""
        self.scores[member] = score
        self.entries.add((score, member))

    def update(self, member: bytes, old: float, new: float) -> None:
        self.scores[member] = new
        ent = self.entries
        ent.remove((old, member))
        ent.add((new, member))

    def delete(self, member: bytes) -> bool:
        score = self.scores.pop(member, None)
        if score is None:
            return False
        self.entries.remove((score, member))
        return True

    def rank(self, member: bytes) -> int | None:
        score = self.scores.get(member)
        if score is None:
            return None
        return self.entries.index((score, member))

    def pop_min(self) -> Entry:
        e = self.entries.pop_first()
        del self.scores[e[1]]
        return e

    def pop_max(self) -> Entry:
        e = self.entries.pop_last()
        del self.scores[e[1]]
        return e

    def copy(self) -> ZSet:
        z = ZSet()
        z.scores = dict(self.scores)
        src, dst = self.entries, z.entries
        dst._lists = [lst[:] for lst in src._lists]
        dst._maxes = src._maxes[:]
        dst._len = src._len
        z.big = self.big
        return z

    @classmethod
    def from_pairs(cls, pairs: list[tuple[bytes, float]]) -> ZSet:
        z = cls()
        for m, s in pairs:
            old = z.scores.get(m)
            if old is None:
                z.insert(m, s)
            elif old != s:
                z.update(m, old, s)
        return z


# --- range specifications (Redis' zrangespec / zlexrangespec) ---------------------------------

_C_SPACE = b" \t\n\v\f\r"


def strtod(text: bytes) -> float | None:
    """C ``strtod`` over the whole argument: leading whitespace allowed, nothing may follow
    the number, and an empty string reads as 0 (``eptr`` is then at the terminator). None when
    the text is not entirely a number. NaN is the caller's to reject."""
    body = text.lstrip(_C_SPACE)
    if not body:
        return 0.0 if not text else None
    if body[-1:] in (b" ", b"\t", b"\n", b"\v", b"\f", b"\r") or b"_" in body:
        return None
    try:
        return float(body)
    except ValueError:
        pass
    lower = body.lower()
    if b"0x" in lower[:3]:
        try:
            return float.fromhex(body.decode("ascii"))
        except (ValueError, UnicodeDecodeError):
            return None
    return None


def parse_score_bound(arg: bytes) -> tuple[float, bool] | None:
    """One side of a score range: ``(x`` exclusive or ``x`` inclusive -> (value, exclusive).
    Redis' strtod reads the argument as a C string: a NUL byte ends it."""
    arg = arg.partition(b"\0")[0]
    excl = arg[:1] == b"("
    x = strtod(arg[1:] if excl else arg)
    if x is None or x != x:
        return None
    return x, excl


def score_range(z: ZSet, lo: tuple[float, bool], hi: tuple[float, bool]) -> tuple[int, int]:
    """Positions [start, stop) of the entries inside a score range (may be empty)."""
    ent = z.entries
    lo_v, lo_x = lo
    hi_v, hi_x = hi
    start = ent.score_right(lo_v) if lo_x else ent.score_left(lo_v)
    stop = ent.score_left(hi_v) if hi_x else ent.score_right(hi_v)
    return start, max(start, stop)


# A lex bound: (kind, value) with kind 0 = "-" (minus infinity), 1 = "+" (plus infinity),
# 2 = inclusive, 3 = exclusive.
LexBound = tuple[int, bytes]


def parse_lex_bound(arg: bytes) -> LexBound | None:
    if arg == b"-":
        return 0, b""
    if arg == b"+":
        return 1, b""
    if arg[:1] == b"[":
        return 2, arg[1:]
    if arg[:1] == b"(":
        return 3, arg[1:]
    return None


def lex_ordered(z: ZSet) -> bool:
    """True when the score order is also the member order: all scores equal (the documented
    use of the lex commands), so a lex range can be found by bisecting."""
    ent = z.entries
    return len(ent) == 0 or ent[0][0] == ent[len(ent) - 1][0]


def lex_gte_min(member: bytes, lo: LexBound) -> bool:
    """zslLexValueGteMin: ``member`` is at or above the lower bound."""
    kind, v = lo
    return kind == 0 or (kind == 2 and member >= v) or (kind == 3 and member > v)


def lex_lte_max(member: bytes, hi: LexBound) -> bool:
    """zslLexValueLteMax: ``member`` is at or below the upper bound."""
    kind, v = hi
    return kind == 1 or (kind == 2 and member <= v) or (kind == 3 and member < v)


def _lex_maybe_nonempty(z: ZSet, lo: LexBound, hi: LexBound) -> bool:
    """zzlIsInLexRange: False for a range that is empty by its bounds (min above max, or equal
    with an exclusive or infinite end), or when the last element (in score order) is below
    min or the first is above max."""
    (lk, lv), (hk, hv) = lo, hi
    if lk == 1 or hk == 0:  # min "+" or max "-": above every max / below every min
        return False
    if lk == 2 and hk == 2:
        if lv > hv:
            return False
    elif lk != 0 and hk != 1 and lv >= hv:  # an exclusive end: equal bounds are empty too
        return False
    ent = z.entries
    n = len(ent)
    return n > 0 and lex_gte_min(ent[n - 1][1], lo) and lex_lte_max(ent[0][1], hi)


def lex_first(z: ZSet, lo: LexBound, hi: LexBound) -> int:
    """zzlFirstInLexRange: the position of the first element (from the head, in score order)
    at or above min, if it is also at or below max; else -1."""
    if not _lex_maybe_nonempty(z, lo, hi):
        return -1
    for pos, (_, m) in enumerate(z.entries):
        if lex_gte_min(m, lo):
            return pos if lex_lte_max(m, hi) else -1
    return -1


def lex_last(z: ZSet, lo: LexBound, hi: LexBound) -> int:
    """zzlLastInLexRange: the position of the first element from the tail at or below max,
    if it is also at or above min; else -1."""
    if not _lex_maybe_nonempty(z, lo, hi):
        return -1
    ent = z.entries
    pos = len(ent) - 1
    for _, m in ent.iter_back_from(pos):
        if lex_lte_max(m, hi):
            return pos if lex_gte_min(m, lo) else -1
        pos -= 1
    return -1


def lex_range(z: ZSet, lo: LexBound, hi: LexBound) -> tuple[int, int]:
    """Positions [start, stop) of what ZLEXCOUNT counts and ZREMRANGEBYLEX removes.

    When scores differ the member order is not the score order and Redis' answer is what its
    listpack walk gives (zzlFirstInLexRange, then onwards while at or below max): a run of
    consecutive elements, mirrored here for every encoding (see docs/COMPATIBILITY.md for the
    skiplist case, which depends on Redis' random node levels)."""
    if lex_ordered(z):
        return _lex_bisect(z, lo, hi)
    start = lex_first(z, lo, hi)
    if start < 0:
        return 0, 0
    stop = start
    for _, m in z.entries.iter_from(start):
        if not lex_lte_max(m, hi):
            break
        stop += 1
    return start, stop


def lex_walk(z: ZSet, lo: LexBound, hi: LexBound, rev: bool, offset: int, limit: int
             ) -> list[Entry]:
    """ZRANGEBYLEX / ZREVRANGEBYLEX as Redis' listpack walk (genericZrangebylexCommand): from
    the first element in range (the last, for rev), skip ``offset`` elements without testing
    them, then emit up to ``limit`` (negative: no limit) while each is at or below max (at or
    above min, for rev). Elements past the skipped ones are tested again, so with an offset
    the reply can resume after elements outside the range."""
    if offset < 0 or limit == 0:
        return []
    pos = lex_last(z, lo, hi) if rev else lex_first(z, lo, hi)
    if pos < 0:
        return []
    ent = z.entries
    out: list[Entry] = []
    if rev:
        for e in ent.iter_back_from(pos - offset):
            if len(out) == limit or not lex_gte_min(e[1], lo):
                break
            out.append(e)
    else:
        for e in ent.iter_from(pos + offset):
            if len(out) == limit or not lex_lte_max(e[1], hi):
                break
            out.append(e)
    return out


def _lex_bisect(z: ZSet, lo: LexBound, hi: LexBound) -> tuple[int, int]:
    """lex_range for a set whose score order is its member order: two bisections."""
    ent = z.entries
    n = len(ent)
    kind, v = lo
    if kind == 0:
        start = 0
    elif kind == 1:
        start = n
    else:
        start = ent.member_left(v) if kind == 2 else ent.member_right(v)
    kind, v = hi
    if kind == 0:
        stop = 0
    elif kind == 1:
        stop = n
    else:
        stop = ent.member_right(v) if kind == 2 else ent.member_left(v)
    return start, max(start, stop)
