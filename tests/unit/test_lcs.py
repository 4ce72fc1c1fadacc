"""node/types/lcs.py in-process: the bit-parallel rows give every LCS(i, j) of Redis' table,
and the walk back gives the string and ranges of the walk over a table filled cell by cell
(the reply bytes themselves are checked against redis-server in tests/node/test_bounded_costs.py)."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

from slotgate.node.types import lcs


def _table(a: bytes, b: bytes) -> list[list[int]]:
    t = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            t[i][j] = (t[i - 1][j - 1] + 1 if a[i - 1] == b[j - 1]
                       else max(t[i - 1][j], t[i][j - 1]))
    return t


def _walk(a: bytes, b: bytes, t: list[list[int]]) -> tuple[bytes, list[tuple[int, ...]]]:
    """Redis' walk back over a filled table: the string and the (a0, a1, b0, b1) ranges."""
    alen = len(a)
    i, j = alen, len(b)
    out = bytearray()
    ranges: list[tuple[int, ...]] = []
    a0 = alen
    a1 = b0 = b1 = 0
    while i > 0 and j > 0:
        emit = False
        if a[i - 1] == b[j - 1]:
            out.append(a[i - 1])
            if a0 == alen:
                a0 = a1 = i - 1
                b0 = b1 = j - 1
            elif a0 == i and b0 == j:
                a0 -= 1
                b0 -= 1
            else:
                emit = True
            if a0 == 0 or b0 == 0:
                emit = True
            i -= 1
            j -= 1
        else:
            if t[i - 1][j] > t[i][j - 1]:
                i -= 1
            else:
                j -= 1
            if a0 != alen:
                emit = True
        if emit:
            ranges.append((a0, a1, b0, b1))
            a0 = alen
    return bytes(reversed(out)), ranges


def _strings(rng: random.Random) -> tuple[bytes, bytes]:
    alphabet = rng.choice([b"ab", b"abc", b"acgt", bytes(range(256))])
    na, nb = rng.randrange(0, 40), rng.randrange(0, 40)
    a = bytes(rng.choice(alphabet) for _ in range(na))
    b = bytes(rng.choice(alphabet) for _ in range(nb))
    if rng.random() < 0.3 and a:  # shared runs make long ranges
        b = a[rng.randrange(len(a)):] + b
    return a, b


def test_every_cell_of_the_table_from_the_rows() -> None:
    rng = random.Random(7)
    for _ in range(300):
        a, b = _strings(rng)
        want = _table(a, b)
        t = lcs._Table(a, b)
        assert t.total == want[len(a)][len(b)]
        for i in range(len(a), -1, -1):  # the walk's order: columns downwards
            for j in range(len(b), -1, -1):
                assert t.at(i, j) == want[i][j], (a, b, i, j)


def _reply(a: bytes, b: bytes, idx: bool) -> bytes:
    c: Any = SimpleNamespace(resp=2)
    return lcs._walk_back(c, a, b, idx, False, 0)


def test_the_walk_back_is_the_table_walk() -> None:
    rng = random.Random(8)
    for _ in range(400):
        a, b = _strings(rng)
        s, ranges = _walk(a, b, _table(a, b))
        assert _reply(a, b, False) == b"$%d\r\n%s\r\n" % (len(s), s)
        got = _reply(a, b, True)
        for r in ranges:
            assert b"*2\r\n:%d\r\n:%d\r\n*2\r\n:%d\r\n:%d\r\n" % r in got
        assert got.count(b"*2\r\n*2\r\n") == len(ranges)
