"""node/types/geohash.py and geo.py's pqsort as pure functions (the byte-level agreement with
redis-server is tests/node/test_types_geo.py's)."""

from __future__ import annotations

import math
import random

from slotgate.node.types import geo
from slotgate.node.types import geohash as gh
from slotgate.node.types.geo import pqsort
from slotgate.node.types.zset import ZSet


def test_table_decoder_equals_the_cell_decoder() -> None:
    """decode_score's unrolled table path gives the same doubles as geohashDecode's steps,
    for hashes, fractional, negative, huge and infinite scores."""
    rng = random.Random(5)
    scores = ([rng.uniform(0, 2**52) for _ in range(5000)]
              + [float(rng.randrange(2**54)) for _ in range(5000)]
              + [rng.uniform(-1e20, 1e20) for _ in range(2000)]
              + [0.0, -0.0, 1.5, -1.0, 2.0**63, 2.0**64, 3.0 * 2**62, math.inf, -math.inf])
    assert [s for s in scores if gh._decode(s) != gh._decode_score_slow(s)] == []
    assert [s for s in scores if gh.decode_score(s) != gh._decode_score_slow(s)] == []


def test_encode_decode_round_trip_and_known_scores() -> None:
    # GEOADD Sicily 13.361389 38.115556 "Palermo": ZSCORE is 3479099956230698 on Redis
    assert gh.score_of(13.361389, 38.115556) == 3479099956230698
    lon, lat = gh.decode_score(3479099956230698.0)
    assert abs(lon - 13.361389) < 1e-5 and abs(lat - 38.115556) < 1e-5
    assert gh.hash_string(3479099956230698.0) == b"sqc8b49rny0"
    assert gh.encode(180.0000001, 0) is None and gh.encode(0, 85.06) is None


def test_search_cells_cover_the_radius() -> None:
    """Every point within the radius lies in one of the cells scanned."""
    rng = random.Random(3)
    for _ in range(200):
        lon, lat = rng.uniform(-180, 180), rng.uniform(-80, 80)
        shape = gh.Shape(lon, lat, 1.0, 10 ** rng.uniform(2, 6))
        cells = [c for c in gh.areas_by_shape(shape) if c != gh.ZERO]
        ranges = [gh.score_range(c) for c in cells]
        for _ in range(50):
            plon = max(-180.0, min(180.0, lon + rng.uniform(-1, 1) * 5))
            plat = max(-85.0, min(85.0, lat + rng.uniform(-1, 1) * 5))
            score = gh.score_of(plon, plat)
            if gh.distance_if_within(shape, *gh.decode_score(score)) is not None:
                assert any(lo <= score < hi for lo, hi in ranges)


def test_within_test_equals_distance_if_within() -> None:
    rng = random.Random(4)
    shape = gh.Shape(2.35, 48.86, 1000.0, 300.0)
    test = gh.within_test(shape)
    for _ in range(2000):
        lon, lat = rng.uniform(-5, 10), rng.uniform(44, 53)
        assert test(lon, lat) == gh.distance_if_within(shape, lon, lat)


def test_pqsort_puts_the_requested_positions_in_order() -> None:
    rng = random.Random(6)
    for n in (1, 5, 7, 8, 40, 41, 300):
        for count in {1, 2, n // 2 or 1, n}:
            pts = [(float(rng.randrange(50)), 0.0, 0.0, 0.0, b"m%d" % i) for i in range(n)]
            for sign in (1, -1):
                a = list(pts)
                pqsort(a, sign, 0, count - 1)
                want = sorted(p[0] for p in pts)
                if sign < 0:
                    want.reverse()
                assert [p[0] for p in a[:count]] == want[:count]
                assert sorted(a) == sorted(pts)


def _move(h: gh.Bits, axis_odd: bool, d: int) -> gh.Bits:
    """geohash_move_x (odd bits) / geohash_move_y (even bits), one call as in geohash.c."""
    mine, other = (gh._ODD, gh._EVEN) if axis_odd else (gh._EVEN, gh._ODD)
    shift = 64 - h.step * 2
    a, b = h.bits & mine, h.bits & other
    zz = other >> shift
    a = (a + (zz + 1)) if d > 0 else ((a | zz) - (zz + 1))
    return gh.Bits((a & (mine >> shift)) | b, h.step)


def test_neighbours_equal_redis_step_by_step_moves() -> None:
    rng = random.Random(1)
    for _ in range(5000):
        h = gh.encode(rng.uniform(-180, 180), rng.uniform(-85, 85), rng.randint(1, 26))
        assert h is not None
        east, west = _move(h, True, 1), _move(h, True, -1)
        assert gh.neighbours(h) == {
            "north": _move(h, False, 1), "south": _move(h, False, -1), "east": east,
            "west": west, "north_east": _move(east, False, 1), "north_west": _move(west, False, 1),
            "south_east": _move(east, False, -1), "south_west": _move(west, False, -1),
        }


def test_coordinate_text_equals_format_long_double() -> None:
    """geo.py prints coordinates with %.17f: the same text as the general long-double
    formatter for every double it can meet."""
    from slotgate.node.types.geo import human_text
    from slotgate.protocol.resp import format_long_double

    rng = random.Random(1)
    values = [gh.decode_score(float(rng.randrange(2**52)))[i] for _ in range(5000)
              for i in (0, 1)] + [0.0, -0.0, 180.0, -180.0, 85.05112878, 1e-20, -5e-18]
    for x in values:
        assert human_text(x) == format_long_double(x)


def _scan_nearest(z: ZSet, shape: gh.Shape, cells: list[gh.Bits], count: int) -> list:
    """What the plain scan and georadiusGeneric's COUNT sort return (geo._georadius)."""
    found = geo._points_in(z, shape, cells, 0)
    if count >= len(found):
        found.sort(key=geo._dist_of)
    elif len({p[0] for p in found}) == len(found):
        found.sort(key=geo._dist_of)
    else:
        pqsort(found, 1, 0, count - 1)
    return found[:count]


def test_nearest_first_search_equals_the_scan() -> None:
    """geo._nearest, when it answers, returns exactly what the scan and sort return: clusters
    of every spread, runs of equal positions (ties), the poles and the antimeridian; and it
    answers often enough to matter."""
    rng = random.Random(21)
    answered = 0
    for trial in range(1500):
        z = ZSet()
        clon, clat = rng.uniform(-180, 180), rng.uniform(-85, 85)
        if trial % 5 == 1:
            clon = rng.choice([-179.99, 179.99])
        elif trial % 5 == 2:
            clat = rng.choice([84.99, -84.99])
        spread = 10 ** rng.uniform(-4, 1)
        pts: list[tuple[float, float]] = []
        for i in range(rng.choice([5, 40, 300])):
            if trial % 5 == 3 and pts and rng.random() < 0.3:
                lon, lat = rng.choice(pts)
            else:
                lon = min(max(clon + rng.gauss(0, spread), -180.0), 180.0)
                lat = min(max(clat + rng.gauss(0, spread), -85.05), 85.05)
            pts.append((lon, lat))
            z.insert(b"m%d" % i, float(gh.score_of(lon, lat)))
        lon = min(max(clon + rng.gauss(0, spread), -180.0), 180.0)
        lat = min(max(clat + rng.gauss(0, spread), -85.0), 85.0)
        shape = gh.Shape(lon, lat, 1.0, spread * 111_000 * 10 ** rng.uniform(-1.5, 0.7))
        cells = gh.areas_by_shape(shape)
        count = rng.choice([1, 2, 10, 50])
        got = geo._nearest(z, shape, cells, count)
        if got is not None:
            answered += 1
            assert got == _scan_nearest(z, shape, cells, count), trial
    assert answered > 300
