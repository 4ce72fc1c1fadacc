"""Geo commands (Redis' geo.c): GEOADD GEODIST GEOHASH GEOPOS, GEOSEARCH GEOSEARCHSTORE, and
GEORADIUS GEORADIUSBYMEMBER with their _RO forms.

A geo set is a sorted set whose scores are 52-bit geohashes (node/types/geohash.py holds the
arithmetic). GEOADD is ZADD with computed scores: it replicates as ``zadd`` and fires ``zadd``
events, as in Redis. Searches scan the score ranges of up to 9 cells, filter by exact
distance, then sort (or not) as georadiusGeneric does (a radius search for the COUNT closest
opens the cells nearest first instead, measuring only members that may be among them, and
falls back to the scan when it cannot prove the same answer: ``_nearest``); the STORE forms
write a sorted set whose scores are the hashes, or the distances (STOREDIST), and fire
``georadiusstore`` / ``geosearchstore``. Replies print distances with ``%.4f`` (bulk strings,
RESP3 too) and coordinates as Redis' addReplyHumanLongDouble.
"""

from __future__ import annotations

import heapq
import math
from itertools import pairwise
from math import isnan
from typing import TYPE_CHECKING

from slotgate.node.commands.registry import command
from slotgate.node.commands.replies import EMPTY_ARRAY, ZERO
from slotgate.node.commands.util import parse_int
from slotgate.node.core.errors import NOT_FLOAT, SYNTAX, CommandError
from slotgate.node.core.keyspace import NOTIFY_GENERIC
from slotgate.node.types import geohash as gh
from slotgate.node.types.zset import ZSet
from slotgate.node.types.zsets import get_zset_read, parse_score, store_result, zadd_generic

if TYPE_CHECKING:
    from slotgate.node.core.client import Client

UNIT = "ERR unsupported unit provided. please use M, KM, FT, MI"
RADIUS_NEGATIVE = "ERR radius cannot be negative"
BOX_NEGATIVE = "ERR height or width cannot be negative"
NEED_RADIUS = "ERR need numeric radius"
NEED_WIDTH = "ERR need numeric width"
NEED_HEIGHT = "ERR need numeric height"
COUNT_POSITIVE = "ERR COUNT must be > 0"
BAD_MEMBER = "ERR could not decode requested zset member"
ANY_NEEDS_COUNT = "ERR the ANY argument requires COUNT argument"
STORE_WITH = "ERR %s is not compatible with WITHDIST, WITHHASH and WITHCOORD options"
ONE_FROM = "ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for %s"
ONE_BY = "ERR exactly one of BYRADIUS and BYBOX can be specified for %s"
BAD_PAIR = "ERR invalid longitude,latitude pair %f,%f"  # C's %f: six decimals

UNITS = {b"m": 1.0, b"km": 1000.0, b"ft": 0.3048, b"mi": 1609.34}


def _unit(arg: bytes) -> float:
    u = UNITS.get(arg.lower())
    if u is None:
        raise CommandError(UNIT)
    return u


def _lonlat(lon_arg: bytes, lat_arg: bytes) -> tuple[float, float]:
    """extractLongLatOrReply."""
    lon = parse_score(lon_arg, NOT_FLOAT)
    lat = parse_score(lat_arg, NOT_FLOAT)
    if not (gh.LONG_MIN <= lon <= gh.LONG_MAX and gh.LAT_MIN <= lat <= gh.LAT_MAX):
        raise CommandError(BAD_PAIR % (lon, lat))
    return lon, lat


def _distance_arg(num: bytes, unit: bytes) -> tuple[float, float]:
    """extractDistanceOrReply: (radius, meters per unit)."""
    r = parse_score(num, NEED_RADIUS)
    if r < 0:
        raise CommandError(RADIUS_NEGATIVE)
    return r, _unit(unit)


def _box_arg(w_arg: bytes, h_arg: bytes, unit: bytes) -> tuple[float, float, float]:
    """extractBoxOrReply: (width, height, meters per unit)."""
    w = parse_score(w_arg, NEED_WIDTH)
    h = parse_score(h_arg, NEED_HEIGHT)
    if h < 0 or w < 0:
        raise CommandError(BOX_NEGATIVE)
    return w, h, _unit(unit)


def _member_pos(z: ZSet, member: bytes) -> tuple[float, float]:
    score = z.scores.get(member)
    if score is None:
        raise CommandError(BAD_MEMBER)
    return gh.decode_score(score)


def _human(c: Client, x: float) -> bytes:
    """addReplyHumanLongDouble: ``%.17Lf`` trimmed; a bulk in RESP2, a double in RESP3.
    A coordinate is a double, which a long double holds exactly, so Python's correctly
    rounded ``%.17f`` of it is the same text (protocol/resp.py's format_long_double is the
    general, slower way)."""
    s = human_text(x)
    if c.resp == 3:
        return b",%s\r\n" % s
    return b"$%d\r\n%s\r\n" % (len(s), s)


def human_text(x: float) -> bytes:
    """A coordinate's text as ``_human`` sends it (``%.17f`` trimmed, ``-0`` as ``0``)."""
    s = (b"%.17f" % x).rstrip(b"0").rstrip(b".")
    return b"0" if s == b"-0" else s


def _dist(d: float) -> bytes:
    """addReplyDoubleDistance: ``%.4f`` as a bulk string in every protocol."""
    # A NaN distance would print as glibc prints x86's default NaN, "-nan" (not seen from
    # redis-server: the haversine term's sqrt rounds back to 1 where it exceeds 1).
    s = b"%.4f" % d if d == d else b"-nan"
    return b"$%d\r\n%s\r\n" % (len(s), s)


# --- GEOADD GEODIST GEOHASH GEOPOS ----------------------------------------------------------

@command("geoadd")
def geoadd(c: Client, argv: list[bytes]) -> bytes:
    idx = 2
    n = len(argv)
    nx = xx = False
    while idx < n:
        opt = argv[idx].lower()
        if opt == b"nx":
            nx = True
        elif opt == b"xx":
            xx = True
        elif opt != b"ch":
            break
        idx += 1
    if (n - idx) % 3 or (nx and xx):
        raise CommandError(SYNTAX)
    zargv = [b"zadd", *argv[1:idx]]
    for j in range(idx, n, 3):
        lon, lat = _lonlat(argv[j], argv[j + 1])
        zargv += [b"%d" % gh.score_of(lon, lat), argv[j + 2]]
    dirty = c.ks.dirty
    reply = zadd_generic(c, zargv, False)
    if c.ks.dirty != dirty:
        c.propagate_as = [zargv]  # replicas and the AOF see the ZADD, as in Redis
    return reply


@command("geodist")
def geodist(c: Client, argv: list[bytes]) -> bytes:
    to_m = 1.0
    if len(argv) == 5:
        to_m = _unit(argv[4])
    elif len(argv) > 5:
        raise CommandError(SYNTAX)
    z = get_zset_read(c.db, argv[1])
    if z is None:
        return c.null_bulk
    s1 = z.scores.get(argv[2])
    s2 = z.scores.get(argv[3])
    if s1 is None or s2 is None:
        return c.null_bulk
    lon1, lat1 = gh.decode_score(s1)
    lon2, lat2 = gh.decode_score(s2)
    return _dist(gh.distance(lon1, lat1, lon2, lat2) / to_m)


@command("geohash")
def geohash(c: Client, argv: list[bytes]) -> bytes:
    z = get_zset_read(c.db, argv[1])
    parts = [b"*%d\r\n" % (len(argv) - 2)]
    for member in argv[2:]:
        score = z.scores.get(member) if z is not None else None
        if score is None:
            parts.append(c.null_bulk)
        else:
            parts.append(b"$11\r\n%s\r\n" % gh.hash_string(score))
    return b"".join(parts)


@command("geopos")
def geopos(c: Client, argv: list[bytes]) -> bytes:
    z = get_zset_read(c.db, argv[1])
    parts = [b"*%d\r\n" % (len(argv) - 2)]
    for member in argv[2:]:
        score = z.scores.get(member) if z is not None else None
        if score is None:
            parts.append(c.null_array)
        else:
            lon, lat = gh.decode_score(score)
            parts.append(b"*2\r\n" + _human(c, lon) + _human(c, lat))
    return b"".join(parts)


# --- the searches ---------------------------------------------------------------------------

# georadiusGeneric's flags
COORDS, MEMBER, NOSTORE, SEARCH, SEARCHSTORE = 1, 2, 4, 8, 16

Point = tuple[float, float, float, float, bytes]  # dist_m, score, lon, lat, member


def _dist_of(p: Point) -> float:
    return p[0]


def _points_in(z: ZSet, shape: gh.Shape, cells: list[gh.Bits], limit: int) -> list[Point]:
    """membersOfAllNeighbors: (dist_m, score, lon, lat, member) in scan order; with ``limit``
    (ANY) the scan stops once that many were found."""
    found: list[Point] = []
    entries = z.entries
    known = gh.DECODED.get  # decode_score's memo, read inline (the hot loop)
    decode = gh.decode_score
    within = gh.within_test(shape)
    radius_only = shape.radius is not None and not limit
    last: gh.Bits | None = None
    for i, cell in enumerate(cells):
        if cell == gh.ZERO:
            continue
        # Huge radii can make neighbours coincide: skip a cell equal to the last scanned one
        # (Redis never compares against the centre cell, index 0).
        if last is not None and cell == last:
            continue
        if found and limit and len(found) >= limit:
            break
        lo, hi = gh.score_range(cell)
        if radius_only:  # no limit: the cell's members at once, tested in one loop
            gh.within_radius(shape, entries.slice(entries.score_left(float(lo)),
                                                  entries.score_left(float(hi))), found)
            if i:
                last = cell
            continue
        for score, member in entries.iter_from(entries.score_left(float(lo))):
            if not score < hi:
                break
            lon, lat = known(score) or decode(score)
            d = within(lon, lat)
            if d is not None:
                found.append((d, score, lon, lat, member))
            if found and limit and len(found) >= limit:
                break
        if i:
            last = cell
    return found


# The nearest-first search's limits: cells of at most LEAF_MEMBERS members are measured, larger
# ones split in four; searches with cells coarser than NEAREST_MIN_STEP (~5.6 degrees of
# longitude and up) take the plain scan.
LEAF_MEMBERS = 24
NEAREST_MIN_STEP = 6
_MARGIN_M = 1e-6  # far above the float error of a distance (a few nm)


def _nearest(z: ZSet, shape: gh.Shape, cells: list[gh.Bits], count: int) -> list[Point] | None:
    """The ``count`` members closest to the centre of a radius search, ascending, exactly as
    ``_points_in`` and the COUNT sort would return them, without measuring every candidate:
    cells are opened nearest first (split in four while large, a lower bound of the distance
    for each), and the search stops once ``count`` + 1 members inside are measured and no
    unopened cell can hold anything as close as the ``count``-th. None when that cannot prove
    the answer (a tie at or before the ``count``-th, fewer than ``count`` + 1 inside, a NaN,
    a cell scanned twice): the caller then scans and sorts as Redis does."""
    live = [cell for cell in cells if cell != gh.ZERO]
    if not live or live[0].step < NEAREST_MIN_STEP or len(set(live)) != len(live):
        return None
    entries = z.entries
    lat1r = shape.lat * gh.D_R
    lon1r = shape.lon * gh.D_R
    cos12 = gh.min_cos(lat1r, live)
    bound = gh.cell_min_term
    heap: list[tuple[float, int, int, int, int, int, int, int]] = []
    for n, cell in enumerate(live):
        lo, hi = gh.score_range(cell)
        a, b = entries.score_left(float(lo)), entries.score_left(float(hi))
        if a < b:
            ilat, ilon = gh.cell_index(cell.bits)
            heap.append((bound(lat1r, lon1r, cos12, ilat, ilon, cell.step), n, cell.bits,
                         ilat, ilon, cell.step, a, b))
    heapq.heapify(heap)
    seq = len(heap)
    found: list[Point] = []
    limit_term = math.inf  # a cell whose bound is above this holds nothing close enough
    two_r = 2.0 * gh.EARTH_RADIUS_M
    while heap and heap[0][0] <= limit_term:
        _, _, bits, ilat, ilon, step, a, b = heapq.heappop(heap)
        if b - a <= LEAF_MEMBERS or step >= gh.STEP_MAX:
            was = len(found)
            gh.within_radius(shape, entries.slice(a, b), found)
            if len(found) > count and len(found) != was:
                found.sort()  # by distance (ties, if any, make the answer None below)
                d = found[count - 1][0]
                if isnan(d):
                    return None
                limit_term = ((d + _MARGIN_M) / two_r) ** 2 * (1 + 1e-9)
            continue
        step += 1
        shift = 52 - 2 * step
        for child in range(4):  # bit 0 a latitude bit, bit 1 a longitude bit
            cbits = bits << 2 | child
            cb = entries.score_left(float((cbits + 1) << shift)) if child < 3 else b
            if a < cb:
                clat, clon = 2 * ilat + (child & 1), 2 * ilon + (child >> 1)
                seq += 1
                heapq.heappush(heap, (bound(lat1r, lon1r, cos12, clat, clon, step), seq, cbits,
                                      clat, clon, step, a, cb))
            a = cb
    if len(found) <= count or any(isnan(p[0]) for p in found):
        return None
    dists = [p[0] for p in found[:count + 1]]
    if any(map(isnan, dists)) or any(x >= y for x, y in pairwise(dists)):
        return None
    return found[:count]


def _georadius(c: Client, argv: list[bytes], src_idx: int, flags: int) -> bytes:
    db = c.db
    z = get_zset_read(db, argv[src_idx])
    store_key: bytes | None = None
    storedist = False
    lon = lat = 0.0
    radius: float | None = None
    width = height = 0.0
    unit_m = 0.0
    if flags & COORDS:
        base = 6
        lon, lat = _lonlat(argv[2], argv[3])
        radius, unit_m = _distance_arg(argv[4], argv[5])
    elif flags & MEMBER:
        base = 5
        if z is not None:  # without a key Redis only parses the options
            lon, lat = _member_pos(z, argv[2])
            radius, unit_m = _distance_arg(argv[3], argv[4])
    else:
        base = 2
        if flags & SEARCHSTORE:
            base = 3
            store_key = argv[1]

    withdist = withhash = withcoord = any_ = False
    frommember = fromloc = byradius = bybox = False
    sort = 0  # 0 none, 1 asc, 2 desc
    count = 0
    search = bool(flags & SEARCH)
    may_store = not (flags & NOSTORE) and not search
    n = len(argv)
    i = base
    while i < n:
        arg = argv[i].lower()
        left = n - i - 1  # arguments after this one
        if arg == b"withdist":
            withdist = True
        elif arg == b"withhash":
            withhash = True
        elif arg == b"withcoord":
            withcoord = True
        elif arg == b"any":
            any_ = True
        elif arg == b"asc":
            sort = 1
        elif arg == b"desc":
            sort = 2
        elif arg == b"count" and left >= 1:
            count = parse_int(argv[i + 1])
            if count <= 0:
                raise CommandError(COUNT_POSITIVE)
            i += 1
        elif arg == b"store" and left >= 1 and may_store:
            store_key, storedist = argv[i + 1], False
            i += 1
        elif arg == b"storedist" and left >= 1 and may_store:
            store_key, storedist = argv[i + 1], True
            i += 1
        elif arg == b"storedist" and search and flags & SEARCHSTORE:
            storedist = True
        elif arg == b"frommember" and left >= 1 and search and not fromloc:
            if z is not None:
                lon, lat = _member_pos(z, argv[i + 1])
            frommember = True
            i += 1
        elif arg == b"fromlonlat" and left >= 2 and search and not frommember:
            lon, lat = _lonlat(argv[i + 1], argv[i + 2])
            fromloc = True
            i += 2
        elif arg == b"byradius" and left >= 2 and search and not bybox:
            radius, unit_m = _distance_arg(argv[i + 1], argv[i + 2])
            byradius = True
            i += 2
        elif arg == b"bybox" and left >= 3 and search and not byradius:
            width, height, unit_m = _box_arg(argv[i + 1], argv[i + 2], argv[i + 3])
            radius = None
            bybox = True
            i += 3
        else:
            raise CommandError(SYNTAX)
        i += 1

    if store_key is not None and (withdist or withhash or withcoord):
        what = "GEOSEARCHSTORE" if flags & SEARCHSTORE else "STORE option in GEORADIUS"
        raise CommandError(STORE_WITH % what)
    name = argv[0].decode("utf-8", "surrogateescape")
    if search and not (frommember or fromloc):
        raise CommandError(ONE_FROM % name)
    if search and not (byradius or bybox):
        raise CommandError(ONE_BY % name)
    if any_ and not count:
        raise CommandError(ANY_NEEDS_COUNT)

    if z is None:
        if store_key is None:
            return EMPTY_ARRAY
        if db.delete(store_key):
            db.notify(NOTIFY_GENERIC, b"del", store_key)
            c.ks.dirty += 1
        return ZERO

    if count and not sort and not any_:
        sort = 1  # COUNT means the closest ones
    shape = gh.Shape(lon, lat, unit_m, radius, width, height)
    cells = gh.areas_by_shape(shape)
    nearest = None
    if count and sort == 1 and not any_ and radius is not None:
        nearest = _nearest(z, shape, cells, count)
    found = nearest if nearest is not None else _points_in(z, shape, cells, count if any_ else 0)
    if not found and store_key is None:
        return EMPTY_ARRAY
    if sort and nearest is None:  # (the nearest search's answer is in order already)
        if not count or count >= len(found):
            # glibc's qsort is a stable merge sort: ties keep their scan order, both ways
            found.sort(key=(lambda p: p[0]) if sort == 1 else (lambda p: -p[0]))
        elif len(dists := {p[0] for p in found}) == len(found) and not any(map(isnan, dists)):
            # no two distances equal: the first `count` of any correct sort are the same
            pick = heapq.nsmallest if sort == 1 else heapq.nlargest
            found = pick(count, found, key=_dist_of)
        else:  # Redis' own partial quicksort, whose order of ties is its own
            pqsort(found, 1 if sort == 1 else -1, 0, count - 1)
    returned = found[:count] if count else found

    if store_key is None:
        opts = withdist + withhash + withcoord
        parts = [b"*%d\r\n" % len(returned)]
        for d, score, plon, plat, member in returned:
            if opts:
                parts.append(b"*%d\r\n" % (opts + 1))
            parts.append(b"$%d\r\n%s\r\n" % (len(member), member))
            if withdist:
                parts.append(_dist(d / unit_m))
            if withhash:
                parts.append(b":%d\r\n" % int(score))
            if withcoord:
                parts.append(b"*2\r\n" + _human(c, plon) + _human(c, plat))
        return b"".join(parts)

    event = b"geosearchstore" if search else b"georadiusstore"
    entries = [((d / unit_m) if storedist else score, member)
               for d, score, _lon, _lat, member in returned]
    entries.sort()
    stored = store_result(c, store_key, entries, event)
    if stored:
        c.ks.dirty += stored - 1  # Redis counts one change per stored member
    return b":%d\r\n" % stored


def pqsort(a: list[Point], sign: int, lrange: int, rrange: int) -> None:
    """Redis' pqsort.c (NetBSD's qsort, Bentley & McIlroy, made partial): sorts ``a`` by
    distance (``sign`` 1 ascending, -1 descending) so that positions ``lrange..rrange`` hold
    what a full sort would put there. Ported step by step: which tie lands where depends on
    every swap."""

    def cmp(i: int, j: int) -> int:
        x, y = a[i][0], a[j][0]
        return sign * ((x > y) - (x < y))

    def swap(i: int, j: int) -> None:
        a[i], a[j] = a[j], a[i]

    def vecswap(i: int, j: int, n: int) -> None:
        for k in range(n):
            swap(i + k, j + k)

    def med3(i: int, j: int, k: int) -> int:
        if cmp(i, j) < 0:
            return j if cmp(j, k) < 0 else (k if cmp(i, k) < 0 else i)
        return j if cmp(j, k) > 0 else (i if cmp(i, k) < 0 else k)

    def outside(lo: int, n: int) -> bool:
        hi = lo + n - 1
        return (lrange < lo and rrange < lo) or (lrange > hi and rrange > hi)

    def run(lo: int, n: int) -> None:
        while True:
            if n < 7:  # insertion sort
                for pm in range(lo + 1, lo + n):
                    pl = pm
                    while pl > lo and cmp(pl - 1, pl) > 0:
                        swap(pl, pl - 1)
                        pl -= 1
                return
            pm = lo + n // 2
            if n > 7:
                pl, pn = lo, lo + n - 1
                if n > 40:
                    d = n // 8
                    pl = med3(pl, pl + d, pl + 2 * d)
                    pm = med3(pm - d, pm, pm + d)
                    pn = med3(pn - 2 * d, pn - d, pn)
                pm = med3(pl, pm, pn)
            swap(lo, pm)
            pa = pb = lo + 1
            pc = pd = lo + n - 1
            while True:
                while pb <= pc:
                    r = cmp(pb, lo)
                    if r > 0:
                        break
                    if r == 0:
                        swap(pa, pb)
                        pa += 1
                    pb += 1
                while pb <= pc:
                    r = cmp(pc, lo)
                    if r < 0:
                        break
                    if r == 0:
                        swap(pc, pd)
                        pd -= 1
                    pc -= 1
                if pb > pc:
                    break
                swap(pb, pc)
                pb += 1
                pc -= 1
            pn = lo + n
            r = min(pa - lo, pb - pa)
            vecswap(lo, pb - r, r)
            r = min(pd - pc, pn - pd - 1)
            vecswap(pb, pn - r, r)
            r = pb - pa
            if r > 1 and not outside(lo, r):
                run(lo, r)
            r = pd - pc
            if r > 1:
                lo, n = pn - r, r
                if not outside(lo, n):
                    continue
            return

    run(0, len(a))


@command("georadius")
def georadius(c: Client, argv: list[bytes]) -> bytes:
    return _georadius(c, argv, 1, COORDS)


@command("georadiusbymember")
def georadiusbymember(c: Client, argv: list[bytes]) -> bytes:
    return _georadius(c, argv, 1, MEMBER)


@command("georadius_ro")
def georadius_ro(c: Client, argv: list[bytes]) -> bytes:
    return _georadius(c, argv, 1, COORDS | NOSTORE)


@command("georadiusbymember_ro")
def georadiusbymember_ro(c: Client, argv: list[bytes]) -> bytes:
    return _georadius(c, argv, 1, MEMBER | NOSTORE)


@command("geosearch")
def geosearch(c: Client, argv: list[bytes]) -> bytes:
    return _georadius(c, argv, 1, SEARCH)


@command("geosearchstore")
def geosearchstore(c: Client, argv: list[bytes]) -> bytes:
    return _georadius(c, argv, 2, SEARCH | SEARCHSTORE)

