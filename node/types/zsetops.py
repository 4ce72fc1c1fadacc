"""Sorted-set commands, part two: ZUNION ZINTER ZDIFF and their STORE forms (WEIGHTS,
AGGREGATE, WITHSCORES; plain sets count as members of score 1), ZINTERCARD, ZPOPMIN ZPOPMAX
ZMPOP and the blocking BZPOPMIN BZPOPMAX BZMPOP.

The pops' arguments, first-key search and blocking are blocking.py's, shared with the lists.
Served blocking pops replicate as ZPOPMIN/ZPOPMAX (with the count for BZMPOP), as Redis 7.0
rewrites them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from slotgate.node.commands.registry import command
from slotgate.node.commands.replies import EMPTY_ARRAY
from slotgate.node.commands.util import parse_int
from slotgate.node.core.errors import SYNTAX, WRONGTYPE, CommandError
from slotgate.node.core.keyspace import NOTIFY_ZSET
from slotgate.node.types.blocking import block_mpop, block_pop, mpop
from slotgate.node.types.sets import RSet
from slotgate.node.types.typeutil import delete_emptied, parse_positive
from slotgate.node.types.zset import ZSet
from slotgate.node.types.zsets import emit, get_zset, parse_score, store_result
from slotgate.protocol.resp import format_double

if TYPE_CHECKING:
    from slotgate.node.core.client import Client
    from slotgate.node.core.keyspace import Database

WEIGHT_NOT_FLOAT = "ERR weight value is not a float"
LIMIT_NEGATIVE = "ERR LIMIT can't be negative"
UNION, INTER, DIFF = 0, 1, 2
_NAMES = {UNION: "union", INTER: "inter", DIFF: "diff"}


def _aggregate(mode: bytes, a: float, b: float) -> float:
    if mode == b"sum":
        r = a + b
        return 0.0 if r != r else r
    if mode == b"min":
        return b if b < a else a
    return b if b > a else a


def _setop(c: Client, argv: list[bytes], op: int, numkeys_idx: int, store: bool,
           card_only: bool) -> tuple[list[tuple[float, bytes]], bool, int]:
    """zunionInterDiffGenericCommand: (sorted result entries, withscores, LIMIT)."""
    name = argv[0].decode("utf-8", "replace").lower()
    setnum = parse_int(argv[numkeys_idx])
    if setnum < 1:
        raise CommandError(f"ERR at least 1 input key is needed for '{name}' command")
    if setnum > len(argv) - (numkeys_idx + 1):
        raise CommandError(SYNTAX)
    db = c.db
    srcs: list[ZSet | RSet | None] = []
    j = numkeys_idx + 1
    for _ in range(setnum):
        v = db.lookup(argv[j]) if store else db.lookup_read(argv[j])
        if v is not None and type(v) is not ZSet and type(v) is not RSet:
            raise CommandError(WRONGTYPE)
        srcs.append(v)
        j += 1
    weights = [1.0] * setnum
    mode = b"sum"
    withscores = False
    limit = 0
    n = len(argv)
    while j < n:
        left = n - j
        a = argv[j].lower()
        if op != DIFF and not card_only and left >= setnum + 1 and a == b"weights":
            j += 1
            for i in range(setnum):
                weights[i] = parse_score(argv[j], WEIGHT_NOT_FLOAT)
                j += 1
        elif op != DIFF and not card_only and left >= 2 and a == b"aggregate":
            mode = argv[j + 1].lower()
            if mode not in (b"sum", b"min", b"max"):
                raise CommandError(SYNTAX)
            j += 2
        elif left >= 1 and not store and not card_only and a == b"withscores":
            withscores = True
            j += 1
        elif card_only and left >= 2 and a == b"limit":
            limit = parse_positive(argv[j + 1], LIMIT_NEGATIVE)
            j += 2
        else:
            raise CommandError(SYNTAX)

    def items(v: ZSet | RSet | None) -> dict[bytes, float]:
        if v is None:
            return {}
        if isinstance(v, ZSet):
            return v.scores
        return dict.fromkeys(v, 1.0)

    def weighted(x: float, w: float) -> float:
        r = w * x
        return 0.0 if r != r else r

    maps = [items(v) for v in srcs]
    result: dict[bytes, float] = {}
    if op == DIFF:
        first, rest = maps[0], maps[1:]
        result = {m: s for m, s in first.items() if not any(m in o for o in rest)}
    else:
        order = sorted(range(setnum), key=lambda i: len(maps[i]))
        if op == INTER:
            if any(not maps[i] for i in order):
                order = []
            if order:
                i0, others = order[0], order[1:]
                for m, s in maps[i0].items():
                    score = weighted(s, weights[i0])
                    for i in others:
                        other = maps[i].get(m)
                        if other is None:
                            break
                        score = _aggregate(mode, score, weighted(other, weights[i]))
                    else:
                        result[m] = score
                        if card_only and limit and len(result) >= limit:
                            break
        else:
            for i in order:
                w = weights[i]
                for m, s in maps[i].items():
                    score = weighted(s, w)
                    cur = result.get(m)
                    result[m] = score if cur is None else _aggregate(mode, cur, score)
    entries = sorted((s, m) for m, s in result.items()) if not card_only else []
    return entries, withscores, len(result)


def _setop_reply(c: Client, argv: list[bytes], op: int) -> bytes:
    entries, withscores, _ = _setop(c, argv, op, 1, False, False)
    return emit(c, entries, withscores)


def _setop_store(c: Client, argv: list[bytes], op: int) -> bytes:
    entries, _, _ = _setop(c, argv, op, 2, True, False)
    return b":%d\r\n" % store_result(c, argv[1], entries, b"z%sstore" % _NAMES[op].encode())


@command("zunion")
def zunion(c: Client, argv: list[bytes]) -> bytes:
    return _setop_reply(c, argv, UNION)


@command("zinter")
def zinter(c: Client, argv: list[bytes]) -> bytes:
    return _setop_reply(c, argv, INTER)


@command("zdiff")
def zdiff(c: Client, argv: list[bytes]) -> bytes:
    return _setop_reply(c, argv, DIFF)


@command("zunionstore")
def zunionstore(c: Client, argv: list[bytes]) -> bytes:
    return _setop_store(c, argv, UNION)


@command("zinterstore")
def zinterstore(c: Client, argv: list[bytes]) -> bytes:
    return _setop_store(c, argv, INTER)


@command("zdiffstore")
def zdiffstore(c: Client, argv: list[bytes]) -> bytes:
    return _setop_store(c, argv, DIFF)


@command("zintercard")
def zintercard(c: Client, argv: list[bytes]) -> bytes:
    _, _, n = _setop(c, argv, INTER, 1, False, True)
    return b":%d\r\n" % n


# --- pops -----------------------------------------------------------------------------------


def _pop(c: Client, db: Database, key: bytes, z: ZSet, use_max: bool, count: int
         ) -> list[tuple[float, bytes]]:
    pop = z.pop_max if use_max else z.pop_min
    out = [pop() for _ in range(min(count, len(z)))]
    db.notify(NOTIFY_ZSET, b"zpopmax" if use_max else b"zpopmin", key)
    if not z:
        delete_emptied(db, key)
    db.modified(key)
    c.ks.dirty += len(out)
    return out


def _flat(c: Client, entries: list[tuple[float, bytes]]) -> bytes:
    """member, score, member, score... (ZPOPMIN without count, BZPOPMIN after the key)."""
    parts = []
    for s, m in entries:
        f = format_double(s)
        parts.append(b"$%d\r\n%s\r\n" % (len(m), m))
        parts.append(b",%s\r\n" % f if c.resp == 3 else b"$%d\r\n%s\r\n" % (len(f), f))
    return b"".join(parts)


def _zpop(c: Client, argv: list[bytes], use_max: bool) -> bytes:
    if len(argv) > 3:
        raise CommandError(SYNTAX)
    count = -1
    if len(argv) == 3:
        count = parse_positive(argv[2])
    db = c.db
    key = argv[1]
    z = get_zset(db, key)  # the type is checked before a count of 0 answers (as Redis)
    if z is None or count == 0:
        return EMPTY_ARRAY
    entries = _pop(c, db, key, z, use_max, max(count, 1))
    if count == -1:
        return b"*%d\r\n" % (2 * len(entries)) + _flat(c, entries)
    return emit(c, entries, True)


@command("zpopmin")
def zpopmin(c: Client, argv: list[bytes]) -> bytes:
    return _zpop(c, argv, False)


@command("zpopmax")
def zpopmax(c: Client, argv: list[bytes]) -> bytes:
    return _zpop(c, argv, True)


def _bzpop(c: Client, argv: list[bytes], use_max: bool) -> bytes:
    name = b"ZPOPMAX" if use_max else b"ZPOPMIN"

    def pop(bc: Client, db: Database, key: bytes, z: ZSet) -> bytes:
        entries = _pop(bc, db, key, z, use_max, 1)
        bc.propagate_as = [[name, key]]
        return b"*3\r\n$%d\r\n%s\r\n" % (len(key), key) + _flat(bc, entries)

    return block_pop(c, argv, ZSet, get_zset, pop)


@command("bzpopmin")
def bzpopmin(c: Client, argv: list[bytes]) -> bytes:
    return _bzpop(c, argv, False)


@command("bzpopmax")
def bzpopmax(c: Client, argv: list[bytes]) -> bytes:
    return _bzpop(c, argv, True)


_MIN_MAX = {b"min": False, b"max": True}  # ZMPOP's words -> from the top


def _mpop(use_max: bool, count: int) -> Callable[[Client, Database, bytes, ZSet], bytes]:
    def pop(c: Client, db: Database, key: bytes, z: ZSet) -> bytes:
        entries = _pop(c, db, key, z, use_max, count)
        c.propagate_as = [[b"ZPOPMAX" if use_max else b"ZPOPMIN", key, b"%d" % len(entries)]]
        parts = [b"*2\r\n$%d\r\n%s\r\n*%d\r\n" % (len(key), key, len(entries))]
        for s, m in entries:
            f = format_double(s)
            sc = b",%s\r\n" % f if c.resp == 3 else b"$%d\r\n%s\r\n" % (len(f), f)
            parts.append(b"*2\r\n$%d\r\n%s\r\n%s" % (len(m), m, sc))
        return b"".join(parts)

    return pop


@command("zmpop")
def zmpop(c: Client, argv: list[bytes]) -> bytes:
    return mpop(c, argv, _MIN_MAX, get_zset, _mpop)


@command("bzmpop")
def bzmpop(c: Client, argv: list[bytes]) -> bytes:
    return block_mpop(c, argv, _MIN_MAX, ZSet, get_zset, _mpop)
