"""Geo commands on our node vs a real redis-server 7.0: raw reply bytes, RESP2 and RESP3.

Scores (the 52-bit hashes), GEOHASH strings, decoded coordinates, distances and the order of
search results must be the same bytes; so must every validation error. A random set of points
with a fixed seed is searched by many random GEOSEARCH / GEORADIUS queries.
"""

from __future__ import annotations

import random
import shlex
import socket
from pathlib import Path

import hiredis
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.node.diff import Case, Pair, check_cases, run_argvs
from tests.node.types_gen import GENERIC_CMDS, GEO_CMDS, ZSET_CMDS, ZSET_LEX
from tests.support import RawClient, node_and_redis, slotgate_node, wait_until

CITIES = ("GEOADD g 13.361389 38.115556 Palermo 15.087269 37.502669 Catania "
          "12.496366 41.902782 Rome 2.349014 48.864716 Paris -0.127758 51.507351 London "
          "-73.935242 40.730610 NewYork 139.691711 35.689487 Tokyo 151.209296 -33.868820 Sydney "
          "-179.9 10 West 179.9 10 East 0 85.05112878 North 0 -85.05112878 South "
          "180 0 Anti -180 0 AntiW 0 0 Null")

CASES = [
    Case("geoadd replies and scores", [
        "GEOADD g 13.361389 38.115556 Palermo 15.087269 37.502669 Catania",
        "ZRANGE g 0 -1 WITHSCORES",
        "GEOADD g 13.361389 38.115556 Palermo",
        "GEOADD g CH 13.4 38.1 Palermo 1 1 New",
        "GEOADD g NX 13.5 38.1 Palermo 2 2 New2",
        "GEOADD g XX 13.5 38.1 Palermo 3 3 New3",
        "GEOADD g XX CH 13.6 38.1 Palermo",
        "GEOADD g CH NX 13.6 38.1 Palermo",
        "GEOADD g NX XX 1 1 a",
        "GEOADD g 1 1",
        "GEOADD g 1 1 a 2",
        "GEOADD g CH XX",
        "GEOADD g nx ch ch",
        "GEOADD g 200 100 a",
        "GEOADD g 1 100 a",
        "GEOADD g 180.0000001 0 a",
        "GEOADD g 0 85.05112879 a",
        "GEOADD g 1 1 ok 200 1 bad",
        "GEOADD g abc 1 a",
        "GEOADD g 1 abc a",
        "GEOADD g inf 1 a",
        "GEOADD g -inf 1 a",
        "GEOADD g nan 1 a",
        "GEOADD g 1e400 1 a",
        'GEOADD g " 1" 1 a',
        "GEOADD g",
        "GEOADD g 1",
        "ZRANGE g 0 -1 WITHSCORES",
        "SET s x",
        "GEOADD s 1 1 a",
        "OBJECT ENCODING g",
    ]),
    Case("poles, antimeridian, zero", [
        CITIES,
        "ZRANGE g 0 -1 WITHSCORES",
        "GEOPOS g West East North South Anti AntiW Null nope",
        "GEOHASH g West East North South Anti AntiW Null nope",
        "GEODIST g West East",
        "GEODIST g North South km",
        "GEODIST g Anti AntiW",
        "GEODIST g Null Null",
        "GEORADIUS g 180 0 100 km WITHCOORD WITHDIST WITHHASH",
        "GEORADIUS g -180 0 100 km WITHDIST ASC",
        "GEORADIUS g 179.95 10 50 km WITHDIST",
        "GEORADIUS g 0 85 500 km WITHDIST WITHCOORD",
        "GEORADIUS g 0 -85 500 km WITHDIST WITHCOORD",
        "GEORADIUS g 0 0 0 m WITHDIST",
        "GEOSEARCH g FROMLONLAT 0 0 BYBOX 0 0 m WITHDIST",
        "GEOSEARCH g FROMMEMBER Null BYRADIUS 0 m",
        "GEOSEARCH g FROMLONLAT 0 85 BYBOX 40000 40000 km WITHDIST ASC",
        "GEOSEARCH g FROMLONLAT 179 -85 BYBOX 1 50000 km WITHDIST DESC",
        "GEOSEARCH g FROMLONLAT -179.9 10 BYBOX 100 100 km WITHCOORD",
        "GEOSEARCH g FROMLONLAT 179.99 0 BYRADIUS 1e9 km COUNT 5 WITHDIST",
        "GEOSEARCH g FROMLONLAT 0 0 BYBOX 1e-300 1e-300 m",
        "GEOSEARCH g FROMLONLAT 0 0 BYRADIUS inf m",
        "GEOSEARCH g FROMLONLAT 0 0 BYBOX inf 1 m",
        "GEOSEARCH g FROMLONLAT 0 0 BYRADIUS 1e308 km COUNT 3",
        "GEOSEARCH g FROMMEMBER North BYRADIUS 100 km WITHDIST",
        # near-antipodal pairs whose haversine term rounds just above 1 before its sqrt
        "GEOADD n -18.053894023807374 -6.2380536189379825 a 161.94610597619263 "
        "6.2380536189379825 b -162.69219697123876 2.6402178390037534 c 17.307803028761242 "
        "-2.6402178390037534 d",
        "GEODIST n a b", "GEODIST n c d km",
        "GEOSEARCH n FROMMEMBER a BYRADIUS 30000 km WITHDIST DESC",
        "GEOSEARCH g FROMMEMBER South BYBOX 100 100 km WITHDIST",
    ]),
    Case("geopos geohash geodist", [
        CITIES,
        "GEOPOS g Palermo Catania nope",
        "GEOPOS g",
        "GEOPOS nokey a b",
        "GEOHASH g Palermo Catania Tokyo Sydney nope",
        "GEOHASH g",
        "GEOHASH nokey a",
        "GEODIST g Palermo Catania",
        "GEODIST g Palermo Catania m",
        "GEODIST g Palermo Catania KM",
        "GEODIST g Palermo Catania ft",
        "GEODIST g Palermo Catania Mi",
        "GEODIST g Palermo Catania yd",
        "GEODIST g Palermo Catania km extra",
        "GEODIST g Palermo nope",
        "GEODIST g nope Palermo",
        "GEODIST nokey a b",
        "GEODIST nokey a b yd",
        "GEODIST g Paris NewYork mi",
        "GEODIST g Tokyo Sydney",
        "ZADD z 1.5 frac -1 neg 1e300 huge",
        "GEOPOS z frac neg huge",
        "GEOHASH z frac neg",
        "SET s x",
        "GEOPOS s a",
        "GEOHASH s a",
        "GEODIST s a b",
        "GEODIST s a b km",
    ]),
    Case("georadius options", [
        CITIES,
        "GEORADIUS g 15 37 200 km",
        "GEORADIUS g 15 37 200 km ASC",
        "GEORADIUS g 15 37 200 km DESC",
        "GEORADIUS g 15 37 2000 km WITHDIST WITHCOORD WITHHASH ASC",
        "GEORADIUS g 15 37 2000 km WITHHASH WITHDIST",
        "GEORADIUS g 15 37 2000 km COUNT 2",
        "GEORADIUS g 15 37 2000 km COUNT 2 DESC",
        "GEORADIUS g 15 37 2000 km COUNT 1 ANY",
        "GEORADIUS g 15 37 2000 km COUNT 2 ANY ASC",
        "GEORADIUS g 15 37 2000 km ANY",
        "GEORADIUS g 15 37 2000 km COUNT 0",
        "GEORADIUS g 15 37 2000 km COUNT -1",
        "GEORADIUS g 15 37 2000 km COUNT abc",
        "GEORADIUS g 15 37 2000 km COUNT",
        "GEORADIUS g 15 37 2000 km BOGUS",
        "GEORADIUS g 15 37 -1 km",
        "GEORADIUS g 15 37 abc km",
        "GEORADIUS g 15 37 1 yards",
        "GEORADIUS g 200 37 1 km",
        "GEORADIUS g 15 37 200 mi WITHDIST",
        "GEORADIUS g 15 37 200000 ft WITHDIST",
        "GEORADIUS g 15 37 50000 km WITHDIST",
        "GEORADIUS g 15 37 1e10 km COUNT 3 WITHDIST",
        "GEORADIUS nokey 15 37 200 km",
        "GEORADIUS nokey 15 37 200 km STORE dst",
        "GEORADIUSBYMEMBER g Palermo 200 km WITHDIST",
        "GEORADIUSBYMEMBER g Palermo 2000 km WITHCOORD COUNT 3 DESC",
        "GEORADIUSBYMEMBER g nope 200 km",
        "GEORADIUSBYMEMBER nokey nope -5 yards",
        "GEORADIUSBYMEMBER nokey nope 5 km STORE dst WITHDIST",
        "GEORADIUSBYMEMBER g Palermo -5 km",
        "GEORADIUS_RO g 15 37 200 km WITHDIST",
        "GEORADIUS_RO g 15 37 200 km STORE dst",
        "GEORADIUSBYMEMBER_RO g Palermo 200 km",
        "GEORADIUSBYMEMBER_RO g Palermo 200 km STOREDIST dst",
        "geoRadius g 15 37 200 KM withdist",
        "SET s x",
        "GEORADIUS s 15 37 200 km",
        "GEORADIUS s 200 37 200 km",
        "GEORADIUSBYMEMBER s a 200 km",
    ]),
    Case("georadius store", [
        CITIES,
        "GEORADIUS g 15 37 2000 km STORE dst",
        "ZRANGE dst 0 -1 WITHSCORES",
        "OBJECT ENCODING dst",
        "GEORADIUS g 15 37 2000 km STOREDIST dst2",
        "ZRANGE dst2 0 -1 WITHSCORES",
        "GEORADIUS g 15 37 2000 km STOREDIST dst3 COUNT 2 DESC",
        "ZRANGE dst3 0 -1 WITHSCORES",
        "GEORADIUS g 15 37 2000 km STORE dst4 STOREDIST dst5",
        "EXISTS dst4 dst5",
        "GEORADIUS g 15 37 1 m STORE dst",
        "EXISTS dst",
        "GEORADIUS g 15 37 2000 km STORE dst WITHDIST",
        "GEORADIUS g 15 37 2000 km STORE dst WITHCOORD",
        "GEORADIUS g 15 37 2000 km STORE",
        "GEORADIUSBYMEMBER g Rome 1000 mi STORE dst6",
        "ZRANGE dst6 0 -1 WITHSCORES",
        "GEOPOS dst6 Rome",
        "SET s x",
        "GEORADIUS g 15 37 2000 km STORE s",
        "TYPE s",
    ]),
    Case("geosearch options and errors", [
        CITIES,
        "GEOSEARCH g FROMLONLAT 15 37 BYRADIUS 200 km",
        "GEOSEARCH g FROMMEMBER Palermo BYRADIUS 2000 km ASC WITHDIST",
        "GEOSEARCH g FROMMEMBER Palermo BYBOX 400 400 km ASC WITHCOORD WITHDIST WITHHASH",
        "GEOSEARCH g FROMLONLAT 0 45 BYBOX 3000 2000 km DESC WITHDIST",
        "GEOSEARCH g FROMLONLAT 0 45 BYBOX 3000 2000 km COUNT 2",
        "GEOSEARCH g FROMLONLAT 0 45 BYBOX 3000 2000 km COUNT 2 ANY",
        "GEOSEARCH g FROMLONLAT 0 45 BYBOX 3000 2000 km COUNT 2 ANY DESC",
        "GEOSEARCH g FROMLONLAT 0 45 BYBOX 3000 2000 km ANY",
        "GEOSEARCH g BYRADIUS 10 km FROMLONLAT 15 37",
        "GEOSEARCH g FROMLONLAT 15 37",
        "GEOSEARCH g BYRADIUS 10 km",
        "GEOSEARCH g FROMMEMBER Palermo FROMLONLAT 15 37 BYRADIUS 10 km",
        "GEOSEARCH g FROMLONLAT 15 37 FROMMEMBER Palermo BYRADIUS 10 km",
        "GEOSEARCH g FROMLONLAT 15 37 BYRADIUS 10 km BYBOX 1 1 km",
        "GEOSEARCH g FROMLONLAT 15 37 BYBOX 1 1 km BYRADIUS 10 km",
        "GEOSEARCH g FROMMEMBER nope BYRADIUS 10 km",
        "GEOSEARCH g FROMLONLAT 15 37 BYRADIUS -1 km",
        "GEOSEARCH g FROMLONLAT 15 37 BYRADIUS x km",
        "GEOSEARCH g FROMLONLAT 15 37 BYBOX -1 1 km",
        "GEOSEARCH g FROMLONLAT 15 37 BYBOX x 1 km",
        "GEOSEARCH g FROMLONLAT 15 37 BYBOX 1 x km",
        "GEOSEARCH g FROMLONLAT 15 37 BYBOX 1 1 parsec",
        "GEOSEARCH g FROMLONLAT 15 37 BYBOX 1 1",
        "GEOSEARCH g FROMLONLAT 15 BYRADIUS 10 km",
        "GEOSEARCH g FROMLONLAT 15 95 BYRADIUS 10 km",
        "GEOSEARCH g FROMLONLAT 15 37 BYRADIUS 10 km STORE dst",
        "GEOSEARCH g FROMLONLAT 15 37 BYRADIUS 10 km STOREDIST",
        "GEOSEARCH g FROMLONLAT 15 37 BYRADIUS 10 km COUNT 0",
        "geosearch g fromlonlat 15 37",
        "GeoSearch g byradius 1 km",
        "GEOSEARCH nokey FROMMEMBER x BYRADIUS 10 km",
        "GEOSEARCH nokey FROMLONLAT 15 37 BYRADIUS 10 km",
        "GEOSEARCH nokey FROMLONLAT 15 37",
        "SET s x",
        "GEOSEARCH s FROMLONLAT 15 37 BYRADIUS 10 km",
    ]),
    Case("geosearchstore", [
        CITIES,
        "GEOSEARCHSTORE dst g FROMLONLAT 15 37 BYRADIUS 2000 km",
        "ZRANGE dst 0 -1 WITHSCORES",
        "GEOSEARCHSTORE dst g FROMLONLAT 15 37 BYRADIUS 2000 km STOREDIST",
        "ZRANGE dst 0 -1 WITHSCORES",
        "GEOSEARCHSTORE dst g FROMMEMBER Rome BYBOX 2000 2000 km COUNT 2 STOREDIST",
        "ZRANGE dst 0 -1 WITHSCORES",
        "GEOSEARCHSTORE dst g FROMLONLAT 15 37 BYRADIUS 2000 km WITHDIST",
        "GEOSEARCHSTORE dst g FROMLONLAT 15 37 BYRADIUS 2000 km STORE x",
        "GEOSEARCHSTORE dst g FROMLONLAT 15 37",
        "geosearchstore dst g byradius 1 km",
        "GEOSEARCHSTORE dst g FROMLONLAT 15 37 BYRADIUS 1 m",
        "EXISTS dst",
        "GEOSEARCHSTORE dst nokey FROMLONLAT 15 37 BYRADIUS 1 m",
        "SET dst x",
        "GEOSEARCHSTORE dst nokey FROMLONLAT 15 37 BYRADIUS 1 m",
        "EXISTS dst",
        "GEOSEARCHSTORE g g FROMLONLAT 15 37 BYRADIUS 300 km",
        "ZRANGE g 0 -1 WITHSCORES",
    ]),
    Case("stored encodings", [
        CITIES,
        "CONFIG SET zset-max-listpack-entries 3",
        "GEOSEARCHSTORE dst g FROMLONLAT 15 37 BYRADIUS 2000 km",
        "OBJECT ENCODING dst",
        "GEOSEARCHSTORE dst g FROMLONLAT 15 37 BYRADIUS 2000 km COUNT 3",
        "OBJECT ENCODING dst",
        "GEORADIUS g 15 37 2000 km STOREDIST dst2",
        "OBJECT ENCODING dst2",
        "ZRANGE dst2 0 -1 WITHSCORES",
        "CONFIG SET zset-max-listpack-entries 128",
        "GEOADD long 1 1 " + "m" * 70,
        "OBJECT ENCODING long",
        "GEORADIUS long 1 1 1 km STORE dst3",
        "OBJECT ENCODING dst3",
        "GEOADD long 1 1 short",
        "GEOSEARCHSTORE dst4 long FROMLONLAT 1 1 BYRADIUS 1 km COUNT 1 DESC",
        "ZRANGE dst4 0 -1 WITHSCORES",
        "MULTI",
        "GEOADD g 1 2 Tx",
        "GEOSEARCH g FROMMEMBER Tx BYRADIUS 1 m WITHCOORD",
        "GEOPOS g Tx",
        "EXEC",
        "DEBUG DIGEST-VALUE g dst dst2 dst3 long",
        "TTL dst",
        "EXPIRE dst 100",
        "GEOSEARCHSTORE dst g FROMLONLAT 15 37 BYRADIUS 2000 km",
        "TTL dst",
    ]),
    Case("keys of the geo commands", [
        "COMMAND GETKEYS GEORADIUS g 1 1 10 km STORE d STOREDIST e",
        "COMMAND GETKEYS GEORADIUS g 1 1 10 km",
        "COMMAND GETKEYS GEOSEARCHSTORE d g FROMLONLAT 1 1 BYRADIUS 1 km",
        "COMMAND GETKEYS GEORADIUSBYMEMBER g m 1 km STOREDIST x COUNT 1",
        "COMMAND GETKEYS GEORADIUSBYMEMBER_RO g m 1 km",
        "COMMAND GETKEYS GEOADD g 1 1 m",
        "COMMAND GETKEYS GEOSEARCH g FROMMEMBER m BYBOX 1 1 km",
        "COMMAND INFO GEOADD GEORADIUS GEOSEARCHSTORE",
    ]),
    Case("wrong arity", [
        "GEOADD", "GEODIST g a", "GEOHASH", "GEOPOS", "GEORADIUS g 1 1 1",
        "GEORADIUSBYMEMBER g a 1", "GEOSEARCH g", "GEOSEARCHSTORE a b",
        "GEORADIUS_RO g 1 1 1", "GEORADIUSBYMEMBER_RO g a 1",
    ]),
]


@pytest.mark.parametrize("proto", [2, 3])
def test_geo_commands(diff_pair: Pair, proto: int) -> None:
    assert check_cases(diff_pair, CASES, proto) == []


def _random_points(rng: random.Random, n: int) -> list[list[bytes]]:
    """GEOADD lines for ``n`` points: clusters around a few centres plus uniform ones, and
    a few duplicates of positions (ties in distance)."""
    centres = [(13.4, 38.1), (-0.1, 51.5), (179.5, -16.5), (0.0, 84.0), (2.35, 48.86)]
    out: list[list[bytes]] = []
    for i in range(n):
        if i % 3 == 0:
            lon, lat = rng.uniform(-180, 180), rng.uniform(-85.05, 85.05)
        else:
            clon, clat = rng.choice(centres)
            lon = max(-180.0, min(180.0, clon + rng.gauss(0, 2)))
            lat = max(-85.05, min(85.05, clat + rng.gauss(0, 1)))
        out.append([b"GEOADD", b"pts", b"%.6f" % lon, b"%.6f" % lat, b"m%d" % i])
    out.append([b"GEOADD", b"pts", b"13.400000", b"38.100000", b"dupA", b"13.400000",
                b"38.100000", b"dupB", b"13.400000", b"38.100000", b"dupC"])
    return out


def _random_queries(rng: random.Random, n: int) -> list[list[bytes]]:
    units = [b"m", b"km", b"mi", b"ft"]
    scale = {b"m": 1.0, b"km": 1e-3, b"mi": 1 / 1609.34, b"ft": 1 / 0.3048}
    out: list[list[bytes]] = []
    for _ in range(n):
        unit = rng.choice(units)
        meters = 10 ** rng.uniform(2, 7.3)
        if rng.random() < 0.4:
            clon, clat = rng.choice([(13.4, 38.1), (-0.1, 51.5), (179.9, -16.5), (0.0, 84.0)])
            lon = max(-180.0, min(180.0, clon + rng.gauss(0, 1)))
            lat = max(-85.05, min(85.05, clat + rng.gauss(0, 0.5)))
        else:
            lon, lat = rng.uniform(-180, 180), rng.uniform(-85.05, 85.05)
        frm = ([b"FROMMEMBER", b"m%d" % rng.randrange(500)] if rng.random() < 0.3
               else [b"FROMLONLAT", b"%.6f" % lon, b"%.6f" % lat])
        if rng.random() < 0.5:
            by = [b"BYRADIUS", b"%.3f" % (meters * scale[unit]), unit]
        else:
            by = [b"BYBOX", b"%.3f" % (meters * scale[unit] * rng.uniform(0.3, 2)),
                  b"%.3f" % (meters * scale[unit] * rng.uniform(0.3, 2)), unit]
        opts: list[bytes] = [b"WITHDIST", b"WITHHASH", b"WITHCOORD"]
        rng.shuffle(opts)
        opts = opts[: rng.randrange(4)]
        r = rng.random()
        if r < 0.3:
            opts.append(rng.choice([b"ASC", b"DESC"]))
        if rng.random() < 0.3:
            opts += [b"COUNT", b"%d" % rng.randrange(1, 30)]
            if rng.random() < 0.3:
                opts.append(b"ANY")
        out.append([b"GEOSEARCH", b"pts", *frm, *by, *opts])
        if rng.random() < 0.2:  # the same search by the older commands and the store forms
            if frm[0] == b"FROMLONLAT" and by[0] == b"BYRADIUS":
                out.append([b"GEORADIUS", b"pts", frm[1], frm[2], by[1], by[2], *opts])
            dist = [b"STOREDIST"] if rng.random() < 0.5 else []
            store = [o for o in opts if not o.startswith(b"WITH")]
            out.append([b"GEOSEARCHSTORE", b"dst", b"pts", *frm, *by, *store, *dist])
            out.append([b"ZRANGE", b"dst", b"0", b"-1", b"WITHSCORES"])
    return out


@pytest.mark.parametrize("proto", [2, 3])
def test_random_searches(diff_pair: Pair, proto: int) -> None:
    rng = random.Random(7007 + proto)
    argvs = _random_points(rng, 500) + [[b"ZRANGE", b"pts", b"0", b"-1", b"WITHSCORES"]]
    argvs += _random_queries(rng, 400)
    assert run_argvs(diff_pair, argvs, proto) == []


def test_extreme_searches(diff_pair: Pair) -> None:
    """Centres on the poles' limits and the antimeridian, radii and boxes from 1e-300 m to
    infinity, in every unit: the same replies."""
    rng = random.Random(12)
    coords = ["0", "180", "-180", "179.9999999", "-179.9999999", "85.05112878", "-85.05112878",
              "85", "-85", "45", "1e-300", "-0", "66.5", "80.1"]
    dists = ["0", "1e-300", "1", "1000", "1e5", "1e6", "5e6", "2e7", "4e7", "1e10", "1e300",
             "inf", "1e-5"]
    units = ["m", "km", "mi", "ft"]
    opts = [[], ["WITHDIST"], ["WITHCOORD", "WITHHASH"], ["COUNT", "3"], ["COUNT", "2", "ANY"],
            ["DESC", "COUNT", "8"], ["ASC"]]
    argvs = [CITIES.split(), *_random_points(random.Random(3), 500)]
    for _ in range(1500):
        if rng.random() < 0.5:
            by = ["BYRADIUS", rng.choice(dists), rng.choice(units)]
        else:
            by = ["BYBOX", rng.choice(dists), rng.choice(dists), rng.choice(units)]
        argvs.append(["GEOSEARCH", rng.choice(["g", "pts"]), "FROMLONLAT", rng.choice(coords),
                      rng.choice(coords), *by, *rng.choice(opts)])
    encoded = [[w if isinstance(w, bytes) else w.encode() for w in argv] for argv in argvs]
    assert run_argvs(diff_pair, encoded, 2) == []


def test_nearest_count_searches_on_dense_sets(diff_pair: Pair) -> None:
    """COUNT searches nearest first (geo.py's ``_nearest``, which measures only the cells
    that can hold the closest) on dense clusters, with runs of equal positions and points a
    few metres apart: the same members, order, distances and coordinates as Redis."""
    rng = random.Random(4242)
    argvs: list[list[bytes]] = []
    centres = [(2.35, 48.85), (-179.95, 0.0), (0.0, 84.9), (13.4, -38.1)]
    for k, (clon, clat) in enumerate(centres):
        for i in range(600):
            spread = 0.5 if i % 5 else 0.0005
            lon = max(-180.0, min(180.0, clon + rng.uniform(-spread, spread)))
            lat = max(-85.05, min(85.05, clat + rng.uniform(-spread, spread)))
            argvs.append([b"GEOADD", b"pts", b"%.6f" % lon, b"%.6f" % lat, b"c%d:%d" % (k, i)])
        for j in range(4):  # the same position several times: ties in distance
            argvs.append([b"GEOADD", b"pts", b"%.6f" % clon, b"%.6f" % clat, b"t%d:%d" % (k, j)])
    for _ in range(300):
        clon, clat = rng.choice(centres)
        lon = max(-180.0, min(180.0, clon + rng.gauss(0, 0.2)))
        lat = max(-85.05, min(85.05, clat + rng.gauss(0, 0.2)))
        radius = b"%.3f" % (10 ** rng.uniform(0, 2.2))
        count = b"%d" % rng.choice([1, 2, 3, 5, 10, 30])
        opts = rng.choice([[], [b"WITHDIST"], [b"WITHCOORD", b"WITHDIST", b"WITHHASH"]])
        if rng.random() < 0.5:
            argvs.append([b"GEOSEARCH", b"pts", b"FROMLONLAT", b"%.6f" % lon, b"%.6f" % lat,
                          b"BYRADIUS", radius, b"km", b"COUNT", count, *opts])
        else:
            argvs.append([b"GEORADIUS", b"pts", b"%.6f" % lon, b"%.6f" % lat, radius, b"km",
                          b"ASC", b"COUNT", count, *opts])
    assert run_argvs(diff_pair, argvs, 2) == []


def test_random_searches_find_points(diff_pair: Pair) -> None:
    """The random queries are not all empty: the comparison above compares results."""
    rng = random.Random(7009)
    c = RawClient(diff_pair.ours_port)
    try:
        c.call("FLUSHALL")
        for argv in _random_points(rng, 500):
            c.call(*argv)
        replies = [c.call(*argv) for argv in _random_queries(rng, 100)
                   if argv[0] == b"GEOSEARCH"]
    finally:
        c.close()
    assert sum(1 for r in replies if not r.startswith(b"*0\r\n")) > len(replies) // 3


# Geo sets under the generated keys, with the generated members 10-200 km apart: searches
# of the generated sequences find something.
GEO_SEED = [[b"GEOADD", key, *[w for j, m in enumerate(
    [b"a", b"b", b"c", b"1", b"2", b"10", b"-3", b"x" * 70]) for w in (
    b"%.4f" % (13.36 + 0.4 * j * (k + 1) % 2.5), b"%.4f" % (38.11 - 0.3 * j % 1.7), m)]]
    for k, key in enumerate([b"k1", b"k2", b"{k}4"])]


# Lex ranges over members of different scores (every geo set) are left out: our node's answer
# differs from Redis' there (docs/COMPATIBILITY.md, Geo).
_NOT_LEX = [c for c in ZSET_CMDS if c is not ZSET_LEX]


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(proto=st.sampled_from([2, 3]),
       cmds=st.lists(st.one_of(*GEO_CMDS, *GEO_CMDS, *_NOT_LEX, *GENERIC_CMDS), min_size=1,
                     max_size=40))
def test_random_sequences_with_geo(diff_pair: Pair, proto: int, cmds: list[list[str]]) -> None:
    """Geo commands mixed with sorted-set and generic ones (odd scores, wrong types, missing
    keys): the same reply bytes."""
    argvs = GEO_SEED + [[w.encode() for w in argv] for argv in cmds]
    assert run_argvs(diff_pair, argvs, proto) == []


def test_cluster_mode_slots_of_store_keys(tmp_path: Path) -> None:
    """In cluster mode the STORE key counts: CROSSSLOT unless it shares the source's slot."""
    lines = ["GEOADD {a}g 1 1 m", "GEORADIUS {a}g 1 1 10 km STORE b",
             "GEORADIUS {a}g 1 1 10 km STORE {a}b", "GEORADIUS {a}g 1 1 10 km STOREDIST b",
             "GEOSEARCHSTORE b {a}g FROMLONLAT 1 1 BYRADIUS 1 km",
             "GEOSEARCHSTORE {a}b {a}g FROMLONLAT 1 1 BYRADIUS 1 km STOREDIST",
             "GEORADIUSBYMEMBER {a}g m 10 km STORE b", "GEORADIUS_RO {a}g 1 1 10 km",
             "GEOSEARCH b FROMLONLAT 1 1 BYRADIUS 1 km"]
    with node_and_redis(tmp_path, cluster=True) as procs:
        out: dict[str, list[bytes]] = {}
        for side in ("ours", "real"):
            c = RawClient(procs[side].port)
            try:
                c.call("CLUSTER", "ADDSLOTSRANGE", "0", "16383")
                wait_until(lambda c=c: b"cluster_state:ok" in c.call("CLUSTER", "INFO") or None)
                out[side] = [c.call(*line.split()) for line in lines]
            finally:
                c.close()
    assert out["ours"] == out["real"]
    assert out["real"][1].startswith(b"-CROSSSLOT") and out["real"][2] == b":1\r\n"


def _on_both(pair: Pair, *argv: bytes | str) -> tuple[bytes, bytes]:
    ours, real = RawClient(pair.ours_port), RawClient(pair.real_port)
    try:
        return ours.call(*argv), real.call(*argv)
    finally:
        ours.close()
        real.close()


def test_dump_restore_both_ways(diff_pair: Pair) -> None:
    """A geo set DUMPed by either server RESTOREs on the other with the same members,
    positions and search results."""
    ours, real = RawClient(diff_pair.ours_port), RawClient(diff_pair.real_port)
    try:
        for conn in (ours, real):
            conn.call("FLUSHALL")
            conn.call(*CITIES.split())
        d_ours = ours.call("DUMP", "g")
        d_real = real.call("DUMP", "g")
        assert d_ours == d_real  # the same listpack, LZF-compressed the same way
        payload = d_real[d_real.index(b"\r\n") + 2:-2]
        assert ours.call("RESTORE", "from_real", "0", payload) == b"+OK\r\n"
        payload = d_ours[d_ours.index(b"\r\n") + 2:-2]
        assert real.call("RESTORE", "from_ours", "0", payload) == b"+OK\r\n"
        q = ["GEOSEARCH", "{}", "FROMLONLAT", "10", "40", "BYRADIUS", "3000", "km", "WITHCOORD",
             "WITHDIST", "WITHHASH", "ASC"]
        a = ours.call(*[w.replace("{}", "from_real") for w in q])
        b = real.call(*[w.replace("{}", "from_ours") for w in q])
        assert a == b and a.startswith(b"*5\r\n")
        assert ours.call("GEOPOS", "from_real", "Sydney") == real.call("GEOPOS", "from_ours",
                                                                       "Sydney")
        assert ours.call("ZRANGE", "from_real", "0", "-1", "WITHSCORES") == \
            real.call("ZRANGE", "from_ours", "0", "-1", "WITHSCORES")
        # a skiplist-encoded geo set (more than 128 members) both ways too
        for conn in (ours, real):
            for i in range(200):
                conn.call("GEOADD", "big", str(i * 1.7 - 170), str(i * 0.8 - 80), f"p{i}")
        d_ours, d_real = ours.call("DUMP", "big"), real.call("DUMP", "big")
        assert ours.call("RESTORE", "big2", "0", d_real[d_real.index(b"\r\n") + 2:-2]) \
            == b"+OK\r\n"
        assert real.call("RESTORE", "big2", "0", d_ours[d_ours.index(b"\r\n") + 2:-2]) \
            == b"+OK\r\n"
        q2 = ["GEOSEARCH", "big2", "FROMLONLAT", "0", "0", "BYBOX", "9000", "9000", "km",
              "WITHDIST", "DESC", "COUNT", "50"]
        a, b = ours.call(*q2), real.call(*q2)
        assert a == b and a.startswith(b"*50\r\n")
        assert ours.call("OBJECT", "ENCODING", "big2") == real.call("OBJECT", "ENCODING", "big2")
    finally:
        ours.close()
        real.close()


def test_keyspace_events(diff_pair: Pair) -> None:
    """GEOADD fires zadd; the STORE forms fire georadiusstore / geosearchstore, or del."""
    seen: dict[str, list[bytes]] = {}
    for side, port in (("ours", diff_pair.ours_port), ("real", diff_pair.real_port)):
        c, sub = RawClient(port), RawClient(port)
        try:
            c.call("FLUSHALL")
            c.call("CONFIG", "SET", "notify-keyspace-events", "KEA")
            sub.call("PSUBSCRIBE", "__keyevent@0__:*")
            sub.call("SUBSCRIBE", "end")
            for line in (CITIES, "GEORADIUS g 15 37 2000 km STORE d1",
                         "GEORADIUSBYMEMBER g Rome 100 km STOREDIST d1",
                         "GEOSEARCHSTORE d2 g FROMLONLAT 15 37 BYRADIUS 2000 km",
                         "GEOSEARCHSTORE d2 g FROMLONLAT 15 37 BYRADIUS 1 m",
                         "GEOSEARCHSTORE d3 nokey FROMLONLAT 15 37 BYRADIUS 1 m",
                         "GEOADD g XX 1 1 nope", "GEOADD g CH 1 1 Rome"):
                c.call(*line.split())
            c.call("PUBLISH", "end", "x")
            c.call("CONFIG", "SET", "notify-keyspace-events", "")
            frames: list[bytes] = []
            while not frames or b"$3\r\nend\r\n$1\r\nx" not in frames[-1]:
                frames.append(sub.read())
            seen[side] = frames
        finally:
            c.close()
            sub.close()
    assert seen["ours"] == seen["real"]
    events = b"".join(seen["real"])
    assert b"georadiusstore" in events and b"geosearchstore" in events and b"zadd" in events


def _replication_stream(port: int, writes: list[str]) -> list[list[bytes]]:
    """The commands a replica receives for ``writes``: a raw PSYNC, the snapshot skipped, the
    stream read until a marker SET; PING and SELECT left out."""
    rep = socket.create_connection(("127.0.0.1", port), timeout=10)
    c = RawClient(port)
    try:
        rep.sendall(b"PSYNC ? -1\r\n")
        buf = b""
        while b"\r\n" not in buf:
            buf += rep.recv(65536)
        assert buf.startswith(b"+FULLRESYNC"), buf
        buf = buf[buf.index(b"\r\n") + 2:]
        while True:  # newlines keep the link alive while the snapshot is made
            buf = buf.lstrip(b"\n")
            if b"\r\n" in buf:
                break
            buf += rep.recv(65536)
        size = int(buf[1:buf.index(b"\r\n")])
        buf = buf[buf.index(b"\r\n") + 2:]
        while len(buf) < size:
            buf += rep.recv(65536)
        buf = buf[size:]
        for line in writes:
            c.call(*shlex.split(line))
        c.call("SET", "marker", "end")
        reader = hiredis.Reader()
        reader.feed(buf)
        out: list[list[bytes]] = []
        while not out or out[-1] != [b"SET", b"marker", b"end"]:
            cmd = reader.gets()
            if cmd is False:
                reader.feed(rep.recv(65536))
                continue
            if cmd[0].upper() not in (b"PING", b"SELECT"):
                out.append(cmd)
        return out
    finally:
        rep.close()
        c.close()


def test_replication_stream_as_redis(diff_pair: Pair) -> None:
    """What a replica receives equals the real server's stream: GEOADD as ZADD with the
    computed scores (only when it changed something), the STORE forms as typed."""
    writes = [CITIES, "GEOADD g XX CH 13.5 38.2 Palermo", "GEOADD g NX 1 1 Palermo",
              "GEORADIUS g 15 37 2000 km STORE d COUNT 3 DESC",
              "GEORADIUS g 15 37 2000 km WITHDIST",
              "GEORADIUSBYMEMBER g Rome 3000 km STOREDIST d2",
              "GEOSEARCHSTORE e g FROMMEMBER Palermo BYBOX 900 900 km STOREDIST",
              "GEOSEARCHSTORE f g FROMLONLAT 15 37 BYRADIUS 1 m",
              "GEOSEARCHSTORE e g FROMLONLAT 15 37 BYRADIUS 1 m"]
    for conn in (RawClient(diff_pair.ours_port), RawClient(diff_pair.real_port)):
        conn.call("FLUSHALL")
        conn.close()
    ours = _replication_stream(diff_pair.ours_port, writes)
    real = _replication_stream(diff_pair.real_port, writes)
    assert ours == real
    assert real[0][0] == b"zadd" and len(real) == 7  # the no-ops left out, the marker in


def test_geo_sets_survive_a_restart_through_the_aof(tmp_path: Path) -> None:
    """The AOF holds GEOADD as ZADD and the STORE forms as typed: after a restart (and after
    BGREWRITEAOF) the node holds the same geo sets as before."""
    node = slotgate_node(tmp_path, extra=["--appendonly", "yes", "--appendfsync", "always"])
    node.start()
    try:
        c = RawClient(node.port)
        for line in (CITIES, "GEOADD g XX CH 13.5 38.2 Palermo",
                     "GEORADIUS g 15 37 2000 km STORE d COUNT 3 DESC",
                     "GEOSEARCHSTORE e g FROMMEMBER Palermo BYBOX 900 900 km STOREDIST"):
            c.call(*line.split())
        keys = ("g", "d", "e")
        before = [c.call("ZRANGE", k, "0", "-1", "WITHSCORES") for k in keys]
        assert all(b != b"*0\r\n" for b in before)
        c.close()
        node.stop()
        node.start()
        c = RawClient(node.port)
        assert [c.call("ZRANGE", k, "0", "-1", "WITHSCORES") for k in keys] == before
        assert c.call("BGREWRITEAOF").startswith(b"+")
        wait_until(lambda: b"aof_rewrite_in_progress:0" in c.call("INFO", "persistence") or None)
        c.close()
        node.stop()
        node.start()
        c = RawClient(node.port)
        assert [c.call("ZRANGE", k, "0", "-1", "WITHSCORES") for k in keys] == before
        c.close()
    finally:
        node.stop()
