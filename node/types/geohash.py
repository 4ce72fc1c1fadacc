"""The geohash arithmetic of Redis 7.0 (geohash.c, geohash_helper.c), pure functions.

A position is a 52-bit integer: latitude and longitude each scaled to 26 bits over Redis' own
ranges (longitude ±180, latitude ±85.05112878, the Web-Mercator limit) and interleaved, latitude
on the even bits, longitude on the odd ones. The sorted-set score of a geo member is that integer.

A radius or box search (``areas_by_shape``) picks a step (bits per axis) from the radius, takes
the cell of the centre at that step and its 8 neighbours, drops the neighbours that the search
area cannot reach, and scans each remaining cell's score range. Every float operation is done in
the order the C code does it, so decoded coordinates and distances equal Redis' bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

STEP_MAX = 26  # bits per axis: 52-bit scores
LONG_MIN, LONG_MAX = -180.0, 180.0
LAT_MIN, LAT_MAX = -85.05112878, 85.05112878
EARTH_RADIUS_M = 6372797.560856  # the quadratic mean radius Redis uses
MERCATOR_MAX_M = 20037726.37
D_R = math.pi / 180.0

_NAN = float("nan")
_U64 = (1 << 64) - 1
_EVEN = 0x5555555555555555
_ODD = 0xAAAAAAAAAAAAAAAA

Range = tuple[float, float]  # (min, max)
WGS84: tuple[Range, Range] = ((LONG_MIN, LONG_MAX), (LAT_MIN, LAT_MAX))
STANDARD: tuple[Range, Range] = ((-180.0, 180.0), (-90.0, 90.0))  # GEOHASH's strings


class Bits(NamedTuple):
    """A cell: ``bits`` (2 * ``step`` interleaved bits). ``Bits(0, 0)`` is Redis' GZERO."""

    bits: int
    step: int


ZERO = Bits(0, 0)


def _cos(x: float) -> float:
    """C's cos: NaN for an infinite argument (Python raises)."""
    return math.cos(x) if math.isfinite(x) else _NAN


def _asin(x: float) -> float:
    """C's asin: NaN outside [-1, 1] (rounding can put a haversine term just above 1)."""
    return math.asin(x) if -1.0 <= x <= 1.0 else _NAN


def _spread(v: int) -> int:
    """The 32 bits of ``v`` moved to the even positions of a 64-bit word (interleave64)."""
    v &= 0xFFFFFFFF
    v = (v | (v << 16)) & 0x0000FFFF0000FFFF
    v = (v | (v << 8)) & 0x00FF00FF00FF00FF
    v = (v | (v << 4)) & 0x0F0F0F0F0F0F0F0F
    v = (v | (v << 2)) & 0x3333333333333333
    return (v | (v << 1)) & _EVEN


def _squash(v: int) -> int:
    """The even bits of ``v`` packed into 32 bits (deinterleave64's half)."""
    v &= _EVEN
    v = (v | (v >> 1)) & 0x3333333333333333
    v = (v | (v >> 2)) & 0x0F0F0F0F0F0F0F0F
    v = (v | (v >> 4)) & 0x00FF00FF00FF00FF
    v = (v | (v >> 8)) & 0x0000FFFF0000FFFF
    return (v | (v >> 16)) & 0x00000000FFFFFFFF


def encode(lon: float, lat: float, step: int = STEP_MAX,
           ranges: tuple[Range, Range] = WGS84) -> Bits | None:
    """geohashEncode: None where Redis returns 0 (outside the indexable area or the ranges)."""
    if not (LONG_MIN <= lon <= LONG_MAX and LAT_MIN <= lat <= LAT_MAX):
        return None
    (lo_min, lo_max), (la_min, la_max) = ranges
    if not (la_min <= lat <= la_max and lo_min <= lon <= lo_max):
        return None
    lat_offset = (lat - la_min) / (la_max - la_min) * float(1 << step)
    lon_offset = (lon - lo_min) / (lo_max - lo_min) * float(1 << step)
    # (uint32_t) casts of the offsets: truncation toward zero
    return Bits(_spread(int(lat_offset)) | (_spread(int(lon_offset)) << 1), step)


def _area(h: Bits, ranges: tuple[Range, Range] = WGS84
          ) -> tuple[float, float, float, float]:
    """geohashDecode: the cell as (lon_min, lon_max, lat_min, lat_max)."""
    (lo_min, lo_max), (la_min, la_max) = ranges
    ilat = _squash(h.bits)
    ilon = _squash(h.bits >> 1)
    cells = float(1 << h.step)
    lat_scale = la_max - la_min
    lon_scale = lo_max - lo_min
    return (lo_min + (ilon * 1.0 / cells) * lon_scale,
            lo_min + ((ilon + 1) * 1.0 / cells) * lon_scale,
            la_min + (ilat * 1.0 / cells) * lat_scale,
            la_min + ((ilat + 1) * 1.0 / cells) * lat_scale)


def score_to_bits(score: float) -> int:
    """The C cast ``(uint64_t)score`` as x86-64 gcc compiles it: below 2**63 a signed
    conversion (0x8000000000000000 when out of range, two's complement when negative), from
    2**63 on a conversion of ``score - 2**63`` with the top bit flipped (0 from 2**64 and inf)."""
    if 0.0 <= score < 4503599627370496.0 * 4:  # the usual: a hash below 2**54
        return int(score)
    if score < 2.0**63:
        if score > -(2.0**63):
            return int(score) & _U64
        return 1 << 63
    if score < 2.0**64:
        return int(score)
    return 0


# deinterleave64 by table: a 16-bit chunk -> its 8 even bits | its 8 odd bits << 32, made from
# the same table of 8-bit chunks (4 bits each way): 30 times faster than squashing all 65,536
# (0.6 s of the node's start-up otherwise)
_SQUASH8 = [_squash(v) | (_squash(v >> 1) << 32) for v in range(1 << 8)]
_SQUASH16 = [_SQUASH8[v & 0xFF] | (_SQUASH8[v >> 8] << 4) for v in range(1 << 16)]
_CELLS = float(1 << STEP_MAX)
_LAT_SCALE = LAT_MAX - LAT_MIN
_LON_SCALE = LONG_MAX - LONG_MIN


DECODED: dict[float, tuple[float, float]] = {}  # score -> position, a pure function's memo
DECODED_MAX = 1 << 16  # entries; emptied when full


def decode_score(score: float) -> tuple[float, float]:
    """decodeGeohash: (longitude, latitude) of a member's score, the centre of its cell,
    clamped to the indexable area. (``_area`` at step 26, unrolled and remembered: searches
    call this for every candidate.)"""
    pos = DECODED.get(score)
    if pos is None:
        pos = _decode(score)
        if len(DECODED) >= DECODED_MAX:
            DECODED.clear()
        DECODED[score] = pos
    return pos


def _decode(score: float) -> tuple[float, float]:
    bits = score_to_bits(score)
    t = _SQUASH16
    acc = (t[bits & 0xFFFF] | (t[(bits >> 16) & 0xFFFF] << 8) | (t[(bits >> 32) & 0xFFFF] << 16)
           | (t[bits >> 48] << 24))
    ilat = acc & 0xFFFFFFFF
    ilon = acc >> 32
    lon = ((LONG_MIN + (ilon * 1.0 / _CELLS) * _LON_SCALE)
           + (LONG_MIN + ((ilon + 1) * 1.0 / _CELLS) * _LON_SCALE)) / 2
    lat = ((LAT_MIN + (ilat * 1.0 / _CELLS) * _LAT_SCALE)
           + (LAT_MIN + ((ilat + 1) * 1.0 / _CELLS) * _LAT_SCALE)) / 2
    if lon > LONG_MAX:
        lon = LONG_MAX
    elif lon < LONG_MIN:
        lon = LONG_MIN
    if lat > LAT_MAX:
        lat = LAT_MAX
    elif lat < LAT_MIN:
        lat = LAT_MIN
    return lon, lat


def _decode_score_slow(score: float) -> tuple[float, float]:
    """The same through ``_area`` (kept for the unit check that the two agree)."""
    lo_min, lo_max, la_min, la_max = _area(Bits(score_to_bits(score), STEP_MAX))
    lon = min(max((lo_min + lo_max) / 2, LONG_MIN), LONG_MAX)
    lat = min(max((la_min + la_max) / 2, LAT_MIN), LAT_MAX)
    return lon, lat


def score_of(lon: float, lat: float) -> int:
    """GEOADD's score: the 52-bit hash of a valid position."""
    h = encode(lon, lat)
    assert h is not None, "position validated by the caller"
    return h.bits


_ALPHABET = b"0123456789bcdefghjkmnpqrstuvwxyz"


def hash_string(score: float) -> bytes:
    """GEOHASH: the position re-encoded over the standard ranges as 11 base32 characters
    (52 bits give 10.4 characters; the 11th is always '0', as in Redis)."""
    lon, lat = decode_score(score)
    h = encode(lon, lat, STEP_MAX, STANDARD)
    bits = h.bits if h is not None else 0
    out = bytearray(_ALPHABET[(bits >> (52 - (i + 1) * 5)) & 0x1F] for i in range(10))
    out.append(_ALPHABET[0])
    return bytes(out)


# --- neighbours ------------------------------------------------------------------------------

def neighbours(h: Bits) -> dict[str, Bits]:
    """geohashNeighbors: the 8 cells around ``h`` (wrapping around at the range edges). Each
    axis is moved once (geohash_move_x / _move_y) and the moves combined: a diagonal is the
    move in x followed by the move in y, as in Redis."""
    shift = 64 - h.step * 2
    x = h.bits & _ODD
    y = h.bits & _EVEN
    zz = _EVEN >> shift  # fills the other axis' bits so that the carry runs through them
    x_mask = _ODD >> shift
    east = (x + (zz + 1)) & x_mask
    west = ((x | zz) - (zz + 1)) & x_mask
    zz = _ODD >> shift
    y_mask = _EVEN >> shift
    north = (y + (zz + 1)) & y_mask
    south = ((y | zz) - (zz + 1)) & y_mask
    step = h.step
    return {
        "north": Bits(x | north, step), "south": Bits(x | south, step),
        "east": Bits(east | y, step), "west": Bits(west | y, step),
        "north_east": Bits(east | north, step), "north_west": Bits(west | north, step),
        "south_east": Bits(east | south, step), "south_west": Bits(west | south, step),
    }


# --- search areas ----------------------------------------------------------------------------

def estimate_steps(range_m: float, lat: float) -> int:
    """geohashEstimateStepsByRadius."""
    if range_m == 0:
        return 26
    step = 1
    while range_m < MERCATOR_MAX_M:
        range_m *= 2
        step += 1
    step -= 2  # make sure the range is included in most of the base cases
    if lat > 66 or lat < -66:  # wider cells towards the poles
        step -= 1
        if lat > 80 or lat < -80:
            step -= 1
    return max(1, min(26, step))


class Shape(NamedTuple):
    """GeoShape: a centre, and a radius or a box (width, height), in ``unit_m`` units."""

    lon: float
    lat: float
    unit_m: float
    radius: float | None = None
    width: float = 0.0
    height: float = 0.0


def bounding_box(s: Shape) -> tuple[float, float, float, float]:
    """geohashBoundingBox: (min_lon, min_lat, max_lon, max_lat)."""
    height = s.unit_m * (s.radius if s.radius is not None else s.height / 2)
    width = s.unit_m * (s.radius if s.radius is not None else s.width / 2)
    lat_delta = (height / EARTH_RADIUS_M) / D_R
    long_delta_top = (width / EARTH_RADIUS_M / _cos((s.lat + lat_delta) * D_R)) / D_R
    long_delta_bottom = (width / EARTH_RADIUS_M / _cos((s.lat - lat_delta) * D_R)) / D_R
    delta = long_delta_bottom if s.lat < 0 else long_delta_top
    return s.lon - delta, s.lat - lat_delta, s.lon + delta, s.lat + lat_delta


_ORDER = ("north", "south", "east", "west", "north_east", "north_west", "south_east",
          "south_west")


def areas_by_shape(s: Shape) -> list[Bits]:
    """geohashCalculateAreasByShapeWGS84: the centre cell and its 8 neighbours in Redis' scan
    order (centre, N, S, E, W, NE, NW, SE, SW), the useless ones as ``ZERO``."""
    min_lon, min_lat, max_lon, max_lat = bounding_box(s)
    if s.radius is not None:
        radius_m = s.radius
    else:
        radius_m = math.sqrt((s.width / 2) * (s.width / 2) + (s.height / 2) * (s.height / 2))
    radius_m *= s.unit_m
    steps = estimate_steps(radius_m, s.lat)
    h = encode(s.lon, s.lat, steps)
    assert h is not None, "centre validated by the caller"
    nb = neighbours(h)
    # The estimated step can leave the search area sticking out of the 3x3 block near a cell's
    # edge: then one step coarser.
    north, south = _area(nb["north"]), _area(nb["south"])
    east, west = _area(nb["east"]), _area(nb["west"])
    if (north[3] < max_lat or south[2] > min_lat or east[1] < max_lon
            or west[0] > min_lon) and steps > 1:
        steps -= 1
        h = encode(s.lon, s.lat, steps)
        assert h is not None
        nb = neighbours(h)
    area = _area(h)
    if steps >= 2:  # exclude the neighbours the area cannot reach
        if area[2] < min_lat:
            nb["south"] = nb["south_west"] = nb["south_east"] = ZERO
        if area[3] > max_lat:
            nb["north"] = nb["north_east"] = nb["north_west"] = ZERO
        if area[0] < min_lon:
            nb["west"] = nb["south_west"] = nb["north_west"] = ZERO
        if area[1] > max_lon:
            nb["east"] = nb["south_east"] = nb["north_east"] = ZERO
    return [h] + [nb[name] for name in _ORDER]


def score_range(h: Bits) -> tuple[int, int]:
    """scoresOfGeoHashBox: the scores [min, max) of the members inside cell ``h``."""
    shift = 52 - h.step * 2
    return (h.bits << shift) & _U64, ((h.bits + 1) << shift) & _U64


def distance(lon1: float, lat1: float, lon2: float, lat2: float) -> float:
    """geohashGetDistance: haversine on Redis' Earth radius, in meters."""
    lat1r = lat1 * D_R
    lon1r = lon1 * D_R
    lat2r = lat2 * D_R
    lon2r = lon2 * D_R
    u = math.sin((lat2r - lat1r) / 2)
    v = math.sin((lon2r - lon1r) / 2)
    a = u * u + math.cos(lat1r) * math.cos(lat2r) * v * v
    return 2.0 * EARTH_RADIUS_M * _asin(math.sqrt(a))


def distance_if_within(s: Shape, lon: float, lat: float) -> float | None:
    """geoAppendIfWithinShape's test: the distance from the centre, or None when outside."""
    if s.radius is not None:
        d = distance(s.lon, s.lat, lon, lat)
        return None if d > s.radius * s.unit_m else d
    # geohashGetDistanceIfInRectangle
    lon_distance = distance(lon, lat, s.lon, lat)
    lat_distance = distance(lon, lat, lon, s.lat)
    if lon_distance > s.width * s.unit_m / 2 or lat_distance > s.height * s.unit_m / 2:
        return None
    return distance(s.lon, s.lat, lon, lat)


def within_test(s: Shape) -> Callable[[float, float], float | None]:
    """``distance_if_within`` for one shape, with the centre's terms computed once (the same
    float operations in the same order: the same results)."""
    if s.radius is None:
        return lambda lon, lat: distance_if_within(s, lon, lat)
    limit_m = s.radius * s.unit_m
    lat1r = s.lat * D_R
    lon1r = s.lon * D_R
    cos1 = math.cos(lat1r)
    sin, cos, asin, sqrt = math.sin, math.cos, math.asin, math.sqrt
    two_r = 2.0 * EARTH_RADIUS_M

    def test(lon: float, lat: float) -> float | None:
        lat2r = lat * D_R
        u = sin((lat2r - lat1r) / 2)
        v = sin((lon * D_R - lon1r) / 2)
        r = sqrt(u * u + cos1 * cos(lat2r) * v * v)
        d = two_r * (asin(r) if r <= 1.0 else _NAN)  # _asin inlined
        return None if d > limit_m else d

    return test


# -- bounds for a nearest-first search -------------------------------------------------------
# A cell at step s is (ilat, ilon), each index over 2**s equal slices of Redis' ranges; its
# children at step s + 1 are (2 ilat + b0, 2 ilon + b1) for the child bits b1 b0, and their
# score ranges split the parent's in that order.
_LAT_MIN_R = LAT_MIN * D_R
_LON_MIN_R = LONG_MIN * D_R
_CELL_LAT_R = [(LAT_MAX - LAT_MIN) * D_R / (1 << s) for s in range(STEP_MAX + 1)]
_CELL_LON_R = [(LONG_MAX - LONG_MIN) * D_R / (1 << s) for s in range(STEP_MAX + 1)]
_SLACK_R = 1e-12  # ~6 um: far above the rounding of any decoded position or cell edge


def cell_min_term(lat1r: float, lon1r: float, cos12: float, ilat: int, ilon: int,
                  step: int) -> float:
    """A lower bound of the haversine term ``sin²(Δlat/2) + cos φ1 cos φ2 sin²(Δlon/2)``
    (what ``distance`` takes the arcsine of the root of) between the centre and any point of
    the cell, its edges widened by ``_SLACK_R``: sin² t >= t² - t⁴/3 on the nearest edge;
    ``cos12`` is at most cos φ1 cos φ2 for every point the search may meet (``min_cos``). The
    longitude term is 0 when the cell lies more than half a turn away (``distance`` does not
    wrap the difference)."""
    h = _CELL_LAT_R[step]
    w = _CELL_LON_R[step]
    lat_a = _LAT_MIN_R + ilat * h - _SLACK_R
    lon_a = _LON_MIN_R + ilon * w - _SLACK_R
    x = lat_a - lat1r
    if x < 0.0:
        x = lat1r - lat_a - h - 2 * _SLACK_R
        if x < 0.0:
            x = 0.0
    y = lon_a - lon1r
    if y < 0.0:
        y = lon1r - lon_a - w - 2 * _SLACK_R
        if y < 0.0:
            y = 0.0
    x *= 0.5
    y *= 0.5
    x *= x
    y *= y
    term = x - x * x / 3
    if max(abs(lon_a - lon1r), abs(lon_a + w + 2 * _SLACK_R - lon1r)) <= math.pi:
        term += cos12 * (y - y * y / 3)
    return term


def min_cos(lat1r: float, cells: list[Bits]) -> float:
    """cos φ1 times the least cosine of a latitude in ``cells`` (edges widened by
    ``_SLACK_R``, clamped at a quarter turn)."""
    worst = 0.0
    for cell in cells:
        h = _CELL_LAT_R[cell.step]
        lat_a = _LAT_MIN_R + _squash(cell.bits) * h
        worst = max(worst, abs(lat_a - _SLACK_R), abs(lat_a + h + _SLACK_R))
    return math.cos(lat1r) * math.cos(min(worst, math.pi / 2))


def cell_index(bits: int) -> tuple[int, int]:
    """(ilat, ilon) of a cell's interleaved bits."""
    return _squash(bits), _squash(bits >> 1)


# score -> (lon, lat, lat in radians, lon in radians, cos of the latitude): what the radius
# test needs of a member, each computed as ``distance`` computes it (a pure function's memo)
TRIG: dict[float, tuple[float, float, float, float, float]] = {}


def trig_of(score: float) -> tuple[float, float, float, float, float]:
    lon, lat = decode_score(score)
    lat_r = lat * D_R
    t = (lon, lat, lat_r, lon * D_R, math.cos(lat_r))
    if len(TRIG) >= DECODED_MAX:
        TRIG.clear()
    TRIG[score] = t
    return t


def within_radius(s: Shape, entries: list[tuple[float, bytes]],
                  out: list[tuple[float, float, float, float, bytes]]) -> None:
    """``distance_if_within`` of a radius shape over ``entries`` (score, member) in order:
    (dist_m, score, lon, lat, member) of those inside appended to ``out``. The same float
    operations in the same order as ``distance``, the member's terms from TRIG."""
    assert s.radius is not None
    limit_m = s.radius * s.unit_m
    lat1r = s.lat * D_R
    lon1r = s.lon * D_R
    cos1 = math.cos(lat1r)
    two_r = 2.0 * EARTH_RADIUS_M
    for score, member in entries:  # math.* called directly: compiled, each is one C call
        t = TRIG.get(score)
        lon, lat, lat2r, lon2r, cos2 = t if t is not None else trig_of(score)
        u = math.sin((lat2r - lat1r) / 2)
        v = math.sin((lon2r - lon1r) / 2)
        r = math.sqrt(u * u + cos1 * cos2 * v * v)
        d = two_r * (math.asin(r) if r <= 1.0 else _NAN)
        if not d > limit_m:
            out.append((d, score, lon, lat, member))

