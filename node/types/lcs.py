"""LCS (Redis 7.0's t_string.c lcsCommand) on bit-parallel rows instead of a table of cells.

Redis fills a (len(a)+1) x (len(b)+1) table of uint32 and walks back from its corner; it refuses
when the table would pass ``proto-max-bulk-len`` bytes. Filled cell by cell in Python that table
took minutes at sizes Redis allows (a 10 KB string against itself: 100 M cells), with the node
answering nobody. Here one row of the table is an int of bits, the row's steps (bit j-1 clear:
LCS(i, j) = LCS(i, j-1) + 1), computed for all j at once (Allison-Dix / Hyyrö's bit-parallel
LCS: ``V' = (V + (V & M[ch])) | (V - (V & M[ch]))``). The walk back reads the same LCS(i, j)
values Redis' table holds, so it takes the same path and gives the same string and ranges.

Rows are kept for the shorter string (its length + 1 ints, as wide as the longer one): the
table's information in an eighth of a byte per cell. The walk back costs one Python step per
character of the two strings, and LEN one mask per distinct character of the shorter string as
wide as the longer (Redis allows a 1-byte string against 67 MB): ours refuses beyond
``WALK_MAX`` / ``LEN_MAX`` characters in all (docs/COMPATIBILITY.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slotgate.node.commands.registry import command
from slotgate.node.commands.util import parse_int
from slotgate.node.core.errors import SYNTAX, CommandError
from slotgate.protocol.resp import array_header, bulk, integer, map_header

if TYPE_CHECKING:
    from slotgate.node.core.client import Client

NOT_STRINGS = "ERR The specified keys must contain string values"
BOTH_LEN_IDX = "ERR If you want both the length and indexes, please just use IDX."
TABLE_TOO_BIG = "ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len"
# Our own bounds, in characters of both strings together: each keeps the worst case well under
# a second. The walk back (IDX, or the string itself) is one Python step per character; LEN
# builds one bit mask per distinct character of the shorter string, as wide as the longer.
WALK_MAX = 250_000
LEN_MAX = 16_000_000
WALK_TOO_LONG = (f"ERR LCS with IDX or returning the string is limited to {WALK_MAX} "
                 "characters in both strings together on this server")
LEN_TOO_LONG = (f"ERR LCS is limited to {LEN_MAX} characters in both strings together on "
                "this server")

def _char_masks(s: bytes, chars: set[int]) -> dict[int, int]:
    """For each byte value in ``chars``: an int whose bit k is set where s[k] is that byte."""
    masks: dict[int, int] = {}
    rev = s[::-1]  # int(..., 2) reads its most significant digit first
    for ch in chars:
        table = bytearray(b"0" * 256)
        table[ch] = ord("1")
        digits = rev.translate(table)
        masks[ch] = int(digits, 2) if digits else 0
    return masks


def lcs_rows(short: bytes, long: bytes) -> list[int]:
    """rows[i]: bit j-1 set where LCS(short[:i], long[:j]) == LCS(short[:i], long[:j-1])."""
    full = (1 << len(long)) - 1
    masks = _char_masks(long, set(short))
    v = full
    rows = [v]
    for ch in short:
        u = v & masks[ch]
        v = ((v + u) | (v - u)) & full
        rows.append(v)
    return rows


class _Table:
    """LCS(i, j) of a (i) against b (j), read from the bit rows of the shorter string: for rows
    over a, LCS(i, j) = j - (set bits of row i below bit j); for rows over b, the transpose.
    The walk back asks for ever smaller columns of at most two neighbouring rows at a time,
    so each row's last count is kept and moved down bit by bit (O(1) a step)."""

    def __init__(self, a: bytes, b: bytes) -> None:
        self.a_rows = len(a) <= len(b)
        short, long = (a, b) if self.a_rows else (b, a)
        nbytes = (len(long) + 7) // 8
        rows = lcs_rows(short, long)
        self.total = len(long) - rows[-1].bit_count()
        self.rows = [r.to_bytes(nbytes, "little") for r in rows]
        self.last: dict[int, tuple[int, int]] = {}  # row -> (bits counted, set bits among them)

    def _below(self, r: int, k: int) -> int:
        """Set bits of row ``r`` below bit ``k``."""
        row = self.rows[r]
        seen = self.last.get(r)
        if seen is not None and 0 <= seen[0] - k <= 64:
            k0, n = seen
            while k0 > k:
                k0 -= 1
                n -= row[k0 >> 3] >> (k0 & 7) & 1
        else:
            n = int.from_bytes(row[: k >> 3], "little").bit_count()
            if k & 7:
                n += (row[k >> 3] & ((1 << (k & 7)) - 1)).bit_count()
        self.last[r] = (k, n)
        return n

    def at(self, i: int, j: int) -> int:
        if self.a_rows:
            return j - self._below(i, j)
        return i - self._below(j, i)


def _walk_back(c: Client, a: bytes, b: bytes, getidx: bool, withmatchlen: bool,
               minmatchlen: int) -> bytes:
    """Redis' walk from LCS(len(a), len(b)) back to a border, step for step: the string, and
    with IDX the matching ranges (the longest last)."""
    t = _Table(a, b)
    alen = len(a)
    total = t.total
    idx = total
    result = bytearray(total)
    ranges: list[bytes] = []
    arange_start, arange_end, brange_start, brange_end = alen, 0, 0, 0
    i, jj = alen, len(b)
    while i > 0 and jj > 0:
        emit = False
        if a[i - 1] == b[jj - 1]:
            result[idx - 1] = a[i - 1]
            if arange_start == alen:
                arange_start = arange_end = i - 1
                brange_start = brange_end = jj - 1
            elif arange_start == i and brange_start == jj:
                arange_start -= 1
                brange_start -= 1
            else:
                emit = True
            if arange_start == 0 or brange_start == 0:
                emit = True
            idx -= 1
            i -= 1
            jj -= 1
        else:
            if t.at(i - 1, jj) > t.at(i, jj - 1):
                i -= 1
            else:
                jj -= 1
            if arange_start != alen:
                emit = True
        if emit:
            match_len = arange_end - arange_start + 1
            if getidx and (minmatchlen == 0 or match_len >= minmatchlen):
                item = (array_header(3 if withmatchlen else 2)
                        + b"*2\r\n" + integer(arange_start) + integer(arange_end)
                        + b"*2\r\n" + integer(brange_start) + integer(brange_end))
                if withmatchlen:
                    item += integer(match_len)
                ranges.append(item)
            arange_start = alen
    if getidx:
        return (map_header(2, c.resp) + bulk(b"matches") + array_header(len(ranges))
                + b"".join(ranges) + bulk(b"len") + integer(total))
    return bulk(bytes(result))


@command("lcs")
def lcs(c: Client, argv: list[bytes]) -> bytes:
    db = c.db
    oa, ob = db.lookup_read(argv[1]), db.lookup_read(argv[2])
    if (oa is not None and type(oa) is not bytes) or (ob is not None and type(ob) is not bytes):
        raise CommandError(NOT_STRINGS)
    a: bytes = oa or b""
    b: bytes = ob or b""
    getlen = getidx = withmatchlen = False
    minmatchlen = 0
    j = 3
    while j < len(argv):
        opt = argv[j].lower()
        more = len(argv) - 1 - j
        if opt == b"idx":
            getidx = True
        elif opt == b"len":
            getlen = True
        elif opt == b"withmatchlen":
            withmatchlen = True
        elif opt == b"minmatchlen" and more:
            minmatchlen = max(0, parse_int(argv[j + 1]))
            j += 1
        else:
            raise CommandError(SYNTAX)
        j += 1
    if getidx and getlen:
        raise CommandError(BOTH_LEN_IDX)
    alen, blen = len(a), len(b)
    if (alen + 1) * (blen + 1) * 4 > int(c.server.config.get("proto-max-bulk-len")):
        raise CommandError(TABLE_TOO_BIG)
    computelcs = getidx or not getlen
    if computelcs and alen + blen > WALK_MAX:
        raise CommandError(WALK_TOO_LONG)
    if alen + blen > LEN_MAX:
        raise CommandError(LEN_TOO_LONG)
    if not computelcs:
        short, long = (a, b) if alen <= blen else (b, a)
        return integer(len(long) - lcs_rows(short, long)[-1].bit_count())
    return _walk_back(c, a, b, getidx, withmatchlen, minmatchlen)
