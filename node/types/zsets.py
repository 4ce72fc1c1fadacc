"""Sorted-set commands, part one: ZADD ZINCRBY ZCARD ZCOUNT ZLEXCOUNT ZSCORE ZMSCORE ZRANK
ZREVRANK ZREM, the ZRANGE family (ZRANGE BYSCORE/BYLEX/REV/LIMIT, ZRANGEBYSCORE,
ZREVRANGEBYSCORE, ZRANGEBYLEX, ZREVRANGEBYLEX, ZREVRANGE, ZRANGESTORE), ZREMRANGEBY*,
ZRANDMEMBER and ZSCAN. Set algebra and pops are in zsetops.py.

Values are ``node.zset.ZSet``. ``big`` mirrors Redis' listpack -> skiplist conversion
(``zset-max-listpack-entries`` / ``-value``, one-way). Scores are doubles printed like Redis 7.0
(``%.17g``, ``inf``/``-inf``): bulk strings in RESP2, ``,`` doubles in RESP3, where
WITHSCORES replies become [member, score] pairs.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from slotgate.node.commands.registry import command
from slotgate.node.commands.replies import EMPTY_ARRAY, ZERO
from slotgate.node.commands.util import parse_int
from slotgate.node.core.errors import NOT_FLOAT, SYNTAX, WRONGTYPE, CommandError
from slotgate.node.core.keyspace import NOTIFY_GENERIC, NOTIFY_ZSET, register_type
from slotgate.node.types.typeutil import (
    Match,
    bulks,
    collection_scan,
    delete_emptied,
    index_range,
    mix_digest,
    parse_random_count,
    random_positions,
    remove_members,
    scan_items,
    typed_lookups,
    xor_digest,
)
from slotgate.node.types.zset import (
    ZSet,
    lex_ordered,
    lex_range,
    lex_walk,
    parse_lex_bound,
    parse_score_bound,
    score_range,
    strtod,
)
from slotgate.protocol.resp import format_double

if TYPE_CHECKING:
    from slotgate.node.core.client import Client

MINMAX_NOT_FLOAT = "ERR min or max is not a float"
MINMAX_NOT_LEX = "ERR min or max not valid string range item"
NAN_RESULT = "ERR resulting score is not a number (NaN)"
XX_NX = "ERR XX and NX options at the same time are not compatible"
GT_LT_NX = "ERR GT, LT, and/or NX options at the same time are not compatible"
INCR_PAIR = "ERR INCR option supports a single increment-element pair"
LIMIT_RANK = ("ERR syntax error, LIMIT is only supported in combination with either BYSCORE or "
              "BYLEX")
WITHSCORES_LEX = "ERR syntax error, WITHSCORES not supported in combination with BYLEX"

B = TypeVar("B")  # one end of a score or lex range

# zset-max-listpack-entries / -value, refreshed from the config by every write
LIMITS = {"entries": 128, "value": 64}


def limits(c: Client) -> tuple[int, int]:
    values = c.server.config.values
    e = LIMITS["entries"] = values["zset-max-listpack-entries"]
    v = LIMITS["value"] = values["zset-max-listpack-value"]
    return e, v


def _digest(z: ZSet) -> bytes:
    d = bytearray(20)
    for score, member in z.entries:
        e = bytearray(20)
        mix_digest(e, member)
        mix_digest(e, format_double(score))
        xor_digest(d, bytes(e))
    return bytes(d)


register_type(ZSet, b"zset", lambda z: b"skiplist" if z.big else b"listpack", _digest,
              lambda z: z.copy())


def new_zset(pairs: list[tuple[bytes, float]]) -> ZSet:
    """A stored result (ZUNIONSTORE, RESTORE...): listpack unless too long or too wide."""
    big = len(pairs) > LIMITS["entries"] or any(len(m) > LIMITS["value"] for m, _ in pairs)
    if not big:  # a listpack stores -0 as the integer 0
        pairs = [(m, 0.0 if s == 0.0 else s) for m, s in pairs]
    z = ZSet.from_pairs(pairs)
    z.big = big
    return z


def rdb_adapters() -> list[tuple[type, str, Callable[..., object], Callable[..., object]]]:
    """DUMP/RESTORE: a sorted set travels as ``list[(member, score)]`` in order."""
    return [(ZSet, "zset", lambda z: [(m, s) for s, m in z.entries], new_zset)]


get_zset, get_zset_read = typed_lookups(ZSet)


_INF = float("inf")


def parse_score(arg: bytes, err: str = NOT_FLOAT) -> float:
    """getDoubleFromObject: strtod without leading space; overflow/underflow are errors."""
    try:
        x = float(arg)
    except ValueError:
        pass
    else:  # the common case: a plain finite non-zero number
        if 0.0 < abs(x) < _INF and b"_" not in arg and not arg[:1].isspace() \
                and not arg[-1:].isspace():
            return x
    if not arg or arg[:1].isspace():
        raise CommandError(err)
    y = strtod(arg)
    if y is None or y != y:
        raise CommandError(err)
    if y in (_INF, -_INF) and b"inf" not in arg.lower():
        raise CommandError(err)  # ERANGE overflow
    if y == 0.0 and any(ch in b"123456789" for ch in arg.lower().split(b"e")[0]):
        raise CommandError(err)  # ERANGE underflow to zero
    return y


def dbl(c: Client, x: float) -> bytes:
    """addReplyDouble."""
    s = format_double(x)
    if c.resp == 3:
        return b",%s\r\n" % s
    return b"$%d\r\n%s\r\n" % (len(s), s)


def emit(c: Client, entries: list[tuple[float, bytes]], withscores: bool) -> bytes:
    """A range reply: members, or (WITHSCORES) flat member/score in RESP2, pairs in RESP3."""
    if not withscores:
        return bulks([m for _, m in entries])
    parts = []
    if c.resp == 3:
        parts.append(b"*%d\r\n" % len(entries))
        for s, m in entries:
            parts.append(b"*2\r\n$%d\r\n%s\r\n,%s\r\n" % (len(m), m, format_double(s)))
    else:
        parts.append(b"*%d\r\n" % (2 * len(entries)))
        for s, m in entries:
            f = format_double(s)
            parts.append(b"$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(m), m, len(f), f))
    return b"".join(parts)


# --- ZADD / ZINCRBY -------------------------------------------------------------------------

_ZADD_OPTS = {b"nx": "nx", b"xx": "xx", b"ch": "ch", b"incr": "incr", b"gt": "gt", b"lt": "lt"}


def zadd_generic(c: Client, argv: list[bytes], incr: bool) -> bytes:
    opts = set()
    idx = 2
    n = len(argv)
    while idx < n:
        o = _ZADD_OPTS.get(argv[idx].lower())
        if o is None:
            break
        opts.add(o)
        idx += 1
    if "incr" in opts:
        incr = True
    nx, xx, gt, lt = "nx" in opts, "xx" in opts, "gt" in opts, "lt" in opts
    pairs = n - idx
    if pairs % 2 or not pairs:
        raise CommandError(SYNTAX)
    pairs //= 2
    if nx and xx:
        raise CommandError(XX_NX)
    if (gt and nx) or (lt and nx) or (gt and lt):
        raise CommandError(GT_LT_NX)
    if incr and pairs > 1:
        raise CommandError(INCR_PAIR)
    scores = [parse_score(argv[idx + 2 * j]) for j in range(pairs)]
    db = c.db
    key = argv[1]
    z = db.lookup(key)
    if z is not None and type(z) is not ZSet:
        raise CommandError(WRONGTYPE)
    max_entries, max_value = limits(c)
    if z is None:
        if xx:
            return c.null_bulk if incr else ZERO
        z = ZSet()
        z.big = pairs > max_entries or max(len(argv[idx + 2 * j + 1]) for j in range(pairs)) > max_value
        db.set(key, z)
    added = updated = processed = 0
    score = 0.0
    sc = z.scores
    for j in range(pairs):
        score = scores[j]
        member = argv[idx + 2 * j + 1]
        if score == 0.0 and not z.big:
            score = 0.0  # a listpack stores -0 as the integer 0
        cur = sc.get(member)
        if cur is not None:
            if nx:
                continue
            if incr:
                score += cur
                if score != score:
                    raise CommandError(NAN_RESULT)
            if (lt and score >= cur) or (gt and score <= cur):
                continue
            processed += 1
            if score != cur:
                z.update(member, cur, score)
                updated += 1
        elif not xx:
            if not z.big and (len(sc) + 1 > max_entries or len(member) > max_value):
                z.big = True
            z.insert(member, score)
            added += 1
            processed += 1
    if added or updated:
        c.ks.dirty += added + updated
        db.modified(key)
        db.signal_ready(key)
        db.notify(NOTIFY_ZSET, b"zincr" if incr else b"zadd", key)
    if incr:
        return dbl(c, score) if processed else c.null_bulk
    return b":%d\r\n" % (added + updated if "ch" in opts else added)


@command("zadd")
def zadd(c: Client, argv: list[bytes]) -> bytes:
    if len(argv) != 4 or argv[2].lower() in _ZADD_OPTS:
        return zadd_generic(c, argv, False)
    # Fast path: one score/member pair, no options, existing key.
    score = parse_score(argv[2])
    db = c.db
    key = argv[1]
    z = db.lookup(key)
    if z is None:
        return zadd_generic(c, argv, False)
    if type(z) is not ZSet:
        raise CommandError(WRONGTYPE)
    member = argv[3]
    scores = z.scores
    cur = scores.get(member)
    if cur is None:
        if not z.big:
            values = c.server.config.values
            if (len(scores) + 1 > values["zset-max-listpack-entries"]
                    or len(member) > values["zset-max-listpack-value"]):
                z.big = True
            elif score == 0.0:
                score = 0.0  # a listpack stores -0 as the integer 0
        z.insert(member, score)
        added = 1
    else:
        if score == 0.0 and not z.big:
            score = 0.0
        if score == cur:
            return ZERO
        z.update(member, cur, score)
        added = 0
    c.ks.dirty += 1
    db.modified(key)
    db.signal_ready(key)
    db.notify(NOTIFY_ZSET, b"zadd", key)
    return b":%d\r\n" % added


@command("zincrby")
def zincrby(c: Client, argv: list[bytes]) -> bytes:
    return zadd_generic(c, argv, True)


# --- simple reads ---------------------------------------------------------------------------


@command("zcard")
def zcard(c: Client, argv: list[bytes]) -> bytes:
    z = get_zset_read(c.db, argv[1])
    return b":%d\r\n" % (len(z) if z is not None else 0)


def score_bounds(a: bytes, b: bytes) -> tuple[tuple[float, bool], tuple[float, bool]]:
    lo, hi = parse_score_bound(a), parse_score_bound(b)
    if lo is None or hi is None:
        raise CommandError(MINMAX_NOT_FLOAT)
    return lo, hi


def lex_bounds(a: bytes, b: bytes) -> tuple[tuple[int, bytes], tuple[int, bytes]]:
    lo, hi = parse_lex_bound(a), parse_lex_bound(b)
    if lo is None or hi is None:
        raise CommandError(MINMAX_NOT_LEX)
    return lo, hi


def _count(c: Client, argv: list[bytes], bounds: Callable[[bytes, bytes], tuple[B, B]],
           range_of: Callable[[ZSet, B, B], tuple[int, int]]) -> bytes:
    """ZCOUNT/ZLEXCOUNT: the range is checked before the key is looked up."""
    lo, hi = bounds(argv[2], argv[3])
    z = get_zset_read(c.db, argv[1])
    if z is None:
        return ZERO
    start, stop = range_of(z, lo, hi)
    return b":%d\r\n" % (stop - start)


@command("zcount")
def zcount(c: Client, argv: list[bytes]) -> bytes:
    return _count(c, argv, score_bounds, score_range)


@command("zlexcount")
def zlexcount(c: Client, argv: list[bytes]) -> bytes:
    return _count(c, argv, lex_bounds, lex_range)


@command("zscore")
def zscore(c: Client, argv: list[bytes]) -> bytes:
    z = get_zset_read(c.db, argv[1])
    s = z.scores.get(argv[2]) if z is not None else None
    return c.null_bulk if s is None else dbl(c, s)


@command("zmscore")
def zmscore(c: Client, argv: list[bytes]) -> bytes:
    z = get_zset_read(c.db, argv[1])
    members = argv[2:]
    out = [b"*%d\r\n" % len(members)]
    for m in members:
        s = z.scores.get(m) if z is not None else None
        out.append(c.null_bulk if s is None else dbl(c, s))
    return b"".join(out)


def _rank(c: Client, argv: list[bytes], rev: bool) -> bytes:
    z = get_zset_read(c.db, argv[1])
    if z is None:
        return c.null_bulk
    r = z.rank(argv[2])
    if r is None:
        return c.null_bulk
    return b":%d\r\n" % (len(z) - 1 - r if rev else r)


@command("zrank")
def zrank(c: Client, argv: list[bytes]) -> bytes:
    return _rank(c, argv, False)


@command("zrevrank")
def zrevrank(c: Client, argv: list[bytes]) -> bytes:
    return _rank(c, argv, True)


@command("zrem")
def zrem(c: Client, argv: list[bytes]) -> bytes:
    return remove_members(c, argv, get_zset, ZSet.delete, NOTIFY_ZSET, b"zrem")


# --- the ZRANGE family ----------------------------------------------------------------------

AUTO, RANK, SCORE, LEX = 0, 1, 2, 3


def rank_slice(z: ZSet, start: int, end: int, rev: bool) -> list[tuple[float, bytes]]:
    n = len(z)
    r = index_range(start, end, n)
    if r is None:
        return []
    start, end = r
    if rev:
        out = z.entries.slice(n - 1 - end, n - start)
        out.reverse()
        return out
    return z.entries.slice(start, end + 1)


def _window(z: ZSet, start: int, stop: int, rev: bool, offset: int, limit: int
            ) -> list[tuple[float, bytes]]:
    """Positions [start, stop) in the requested direction, after LIMIT offset count."""
    if offset < 0 or limit == 0:
        return []
    if rev:
        hi = stop - offset
        lo = start if limit < 0 else max(start, hi - limit)
        out = z.entries.slice(lo, hi) if hi > lo else []
        out.reverse()
        return out
    lo = start + offset
    hi = stop if limit < 0 else min(stop, lo + limit)
    return z.entries.slice(lo, hi) if hi > lo else []


def zrange_generic(c: Client, argv: list[bytes], first: int, store: bool, rangetype: int,
                   rev: bool | None) -> tuple[list[tuple[float, bytes]], bool] | None:
    """genericZrangeCommand: (entries, withscores), or None when the source key is missing."""
    withscores = False
    offset, limit = 0, -1
    n = len(argv)
    j = first + 3
    while j < n:
        a = argv[j].lower()
        left = n - j - 1
        if not store and a == b"withscores":
            withscores = True
        elif a == b"limit" and left >= 2:
            offset = parse_int(argv[j + 1])
            limit = parse_int(argv[j + 2])
            j += 2
        elif rev is None and a == b"rev":
            rev = True
        elif rangetype == AUTO and a == b"bylex":
            rangetype = LEX
        elif rangetype == AUTO and a == b"byscore":
            rangetype = SCORE
        else:
            raise CommandError(SYNTAX)
        j += 1
    rev = bool(rev)
    if rangetype == AUTO:
        rangetype = RANK
    if limit != -1 and rangetype == RANK:  # "LIMIT n -1" passes (Redis tests the count only)
        raise CommandError(LIMIT_RANK)
    if withscores and rangetype == LEX:
        raise CommandError(WITHSCORES_LEX)
    a_min, a_max = argv[first + 1], argv[first + 2]
    if rev and rangetype != RANK:
        a_min, a_max = a_max, a_min
    if rangetype == RANK:
        start, end = parse_int(a_min), parse_int(a_max)
    elif rangetype == SCORE:
        lo, hi = score_bounds(a_min, a_max)
    else:
        llo, lhi = lex_bounds(a_min, a_max)
    z = get_zset_read(c.db, argv[first])
    if z is None:
        return None
    if rangetype == RANK:
        return rank_slice(z, start, end, rev), withscores
    if rangetype == SCORE:
        s0, s1 = score_range(z, lo, hi)
    elif lex_ordered(z):
        s0, s1 = lex_range(z, llo, lhi)
    else:  # scores differ: Redis' walk, which an offset can carry past an out-of-range member
        return lex_walk(z, llo, lhi, bool(rev), offset, limit), withscores
    return _window(z, s0, s1, rev, offset, limit), withscores


def _zrange_reply(c: Client, argv: list[bytes], rangetype: int, rev: bool | None) -> bytes:
    r = zrange_generic(c, argv, 1, False, rangetype, rev)
    if r is None:
        return EMPTY_ARRAY
    return emit(c, r[0], r[1])


@command("zrange")
def zrange(c: Client, argv: list[bytes]) -> bytes:
    return _zrange_reply(c, argv, AUTO, None)


@command("zrevrange")
def zrevrange(c: Client, argv: list[bytes]) -> bytes:
    return _zrange_reply(c, argv, RANK, True)


@command("zrangebyscore")
def zrangebyscore(c: Client, argv: list[bytes]) -> bytes:
    return _zrange_reply(c, argv, SCORE, False)


@command("zrevrangebyscore")
def zrevrangebyscore(c: Client, argv: list[bytes]) -> bytes:
    return _zrange_reply(c, argv, SCORE, True)


@command("zrangebylex")
def zrangebylex(c: Client, argv: list[bytes]) -> bytes:
    return _zrange_reply(c, argv, LEX, False)


@command("zrevrangebylex")
def zrevrangebylex(c: Client, argv: list[bytes]) -> bytes:
    return _zrange_reply(c, argv, LEX, True)


def store_result(c: Client, dst: bytes, entries: list[tuple[float, bytes]], event: bytes) -> int:
    """Store a computed zset at ``dst`` (or delete ``dst`` when empty); returns its size."""
    db = c.db
    if entries:
        limits(c)
        db.set(dst, new_zset([(m, s) for s, m in entries]))
        db.notify(NOTIFY_ZSET, event, dst)
        c.ks.dirty += 1
    elif db.delete(dst):
        db.notify(NOTIFY_GENERIC, b"del", dst)
        c.ks.dirty += 1
    return len(entries)


@command("zrangestore")
def zrangestore(c: Client, argv: list[bytes]) -> bytes:
    r = zrange_generic(c, argv, 2, True, AUTO, None)
    entries = r[0] if r is not None else []
    return b":%d\r\n" % store_result(c, argv[1], entries, b"zrangestore")


# --- ZREMRANGEBY* ---------------------------------------------------------------------------


def _zremrange(c: Client, argv: list[bytes], kind: int, event: bytes) -> bytes:
    if kind == RANK:
        start, end = parse_int(argv[2]), parse_int(argv[3])
    elif kind == SCORE:
        lo, hi = score_bounds(argv[2], argv[3])
    else:
        llo, lhi = lex_bounds(argv[2], argv[3])
    db = c.db
    key = argv[1]
    z = get_zset(db, key)
    if z is None:
        return ZERO
    if kind == RANK:
        victims = rank_slice(z, start, end, False)
    else:
        s0, s1 = score_range(z, lo, hi) if kind == SCORE else lex_range(z, llo, lhi)
        victims = z.entries.slice(s0, s1)
    for _, m in victims:
        z.delete(m)
    if victims:
        db.notify(NOTIFY_ZSET, event, key)
        if not z:
            delete_emptied(db, key)
        db.modified(key)
        c.ks.dirty += len(victims)
    return b":%d\r\n" % len(victims)


@command("zremrangebyrank")
def zremrangebyrank(c: Client, argv: list[bytes]) -> bytes:
    return _zremrange(c, argv, RANK, b"zremrangebyrank")


@command("zremrangebyscore")
def zremrangebyscore(c: Client, argv: list[bytes]) -> bytes:
    return _zremrange(c, argv, SCORE, b"zremrangebyscore")


@command("zremrangebylex")
def zremrangebylex(c: Client, argv: list[bytes]) -> bytes:
    return _zremrange(c, argv, LEX, b"zremrangebylex")


# --- ZRANDMEMBER ----------------------------------------------------------------------------


@command("zrandmember")
def zrandmember(c: Client, argv: list[bytes]) -> bytes:
    if len(argv) == 2:
        z = get_zset_read(c.db, argv[1])
        if z is None:
            return c.null_bulk
        m = z.entries[random.randrange(len(z))][1]
        return b"$%d\r\n%s\r\n" % (len(m), m)
    n, withscores = parse_random_count(argv, b"withscores")
    z = get_zset_read(c.db, argv[1])
    if z is None or n == 0:
        return EMPTY_ARRAY
    size = len(z)
    if n >= size:  # the whole zset, walked from the tail as Redis does
        return emit(c, list(z.entries.iter_back_from(size - 1)), withscores)
    return emit(c, z.entries.pick(random_positions(size, n, z.big)), withscores)


# --- ZSCAN ----------------------------------------------------------------------------------


def _zscan_page(z: ZSet, cursor: int, count: int, match: Match | None
                ) -> tuple[int, list[bytes]]:
    nxt, page = scan_items(cursor, count, z.big, lambda: list(z.entries))
    flat: list[bytes] = []
    scores = z.scores
    for _, m in page:
        if match is not None and not match(m):
            continue
        cur = scores.get(m)
        if cur is None:
            continue
        flat.append(m)
        flat.append(format_double(cur))
    return nxt, flat


@command("zscan")
def zscan(c: Client, argv: list[bytes]) -> bytes:
    return collection_scan(c, argv, get_zset_read, _zscan_page)
