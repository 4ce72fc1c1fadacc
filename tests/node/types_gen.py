"""Hypothesis strategies for random command sequences over lists, hashes, sets and sorted
sets (plus a few generic commands that create wrong types and delete keys).

``command()`` draws one argv (a list of str) whose reply is deterministic on Redis 7.0, so it
can be compared byte for byte with another server; ``UNORDERED`` names the commands whose
reply order Redis leaves to its hashtable (compare those sorted). A random-sequence test of
another module can mix these into its own strategy with ``st.one_of(...)``.
"""

from __future__ import annotations

from hypothesis import strategies as st

KEYS = st.sampled_from(["k1", "k2", "k3", "{k}4"])
ELEMS = st.sampled_from(["a", "b", "c", "1", "2", "10", "-3", "x" * 70])
# Hash fields/values stay short, so hashes keep the listpack encoding and Redis' field order
# is defined (hashtable conversion is covered by test_types_hashes.py).
SHORT = st.sampled_from(["a", "b", "c", "1", "2", "10", "-3"])
INTS = st.integers(min_value=-4, max_value=6).map(str)
SCORES = st.sampled_from(["0", "1", "1.5", "-2", "0.1", "inf", "-inf", "1e20", "3", "abc"])
SIDES = st.sampled_from(["LEFT", "RIGHT"])
SCORE_BOUNDS = st.sampled_from(["-inf", "+inf", "0", "(1", "1.5", "(3", "abc", "2"])
LEX_BOUNDS = st.sampled_from(["-", "+", "[a", "(b", "[c", "(1", "x"])

UNORDERED = frozenset({"smembers", "sinter", "sunion", "sdiff"})


def _cmd(*parts: st.SearchStrategy[object]) -> st.SearchStrategy[list[str]]:
    def flatten(values: tuple[object, ...]) -> list[str]:
        out: list[str] = []
        for v in values:
            if isinstance(v, list):
                out.extend(str(x) for x in v)
            else:
                out.append(str(v))
        return out

    return st.tuples(*parts).map(flatten)


def _lit(s: str) -> st.SearchStrategy[str]:
    return st.just(s)


def _elems(min_size: int = 1, elems: st.SearchStrategy[str] = ELEMS
           ) -> st.SearchStrategy[list[str]]:
    return st.lists(elems, min_size=min_size, max_size=4)


def _pairs(values: st.SearchStrategy[str], elems: st.SearchStrategy[str] = ELEMS
           ) -> st.SearchStrategy[list[str]]:
    return st.lists(st.tuples(values, elems), min_size=1, max_size=3).map(
        lambda ps: [x for p in ps for x in p])


def _keys(n_min: int = 1) -> st.SearchStrategy[list[str]]:
    return st.lists(KEYS, min_size=n_min, max_size=3)


def _numkeys() -> st.SearchStrategy[list[str]]:
    return _keys().map(lambda ks: [str(len(ks)), *ks])


LIST_CMDS = [
    _cmd(st.sampled_from(["LPUSH", "RPUSH", "LPUSHX", "RPUSHX"]), KEYS, _elems()),
    _cmd(st.sampled_from(["LPOP", "RPOP"]), KEYS),
    _cmd(st.sampled_from(["LPOP", "RPOP"]), KEYS, INTS),
    _cmd(_lit("LLEN"), KEYS),
    _cmd(_lit("LRANGE"), KEYS, INTS, INTS),
    _cmd(_lit("LINDEX"), KEYS, INTS),
    _cmd(_lit("LSET"), KEYS, INTS, ELEMS),
    _cmd(_lit("LINSERT"), KEYS, st.sampled_from(["BEFORE", "AFTER"]), ELEMS, ELEMS),
    _cmd(_lit("LREM"), KEYS, INTS, ELEMS),
    _cmd(_lit("LTRIM"), KEYS, INTS, INTS),
    _cmd(_lit("LPOS"), KEYS, ELEMS, st.sampled_from([[], ["RANK", "-1"], ["COUNT", "0"],
                                                      ["RANK", "2", "COUNT", "2"],
                                                      ["MAXLEN", "3"]])),
    _cmd(_lit("LMOVE"), KEYS, KEYS, SIDES, SIDES),
    _cmd(_lit("RPOPLPUSH"), KEYS, KEYS),
    _cmd(_lit("LMPOP"), _numkeys(), SIDES, st.sampled_from([[], ["COUNT", "2"]])),
    _cmd(_lit("BLPOP"), _keys(), _lit("0.01")),
]

HASH_CMDS = [
    _cmd(_lit("HSET"), KEYS, _pairs(SHORT, SHORT)),
    _cmd(_lit("HSETNX"), KEYS, SHORT, SHORT),
    _cmd(st.sampled_from(["HGET", "HSTRLEN", "HEXISTS"]), KEYS, SHORT),
    _cmd(_lit("HMGET"), KEYS, _elems(1, SHORT)),
    _cmd(_lit("HDEL"), KEYS, _elems(1, SHORT)),
    _cmd(st.sampled_from(["HLEN", "HKEYS", "HVALS", "HGETALL"]), KEYS),
    _cmd(_lit("HINCRBY"), KEYS, SHORT, INTS),
    _cmd(_lit("HINCRBYFLOAT"), KEYS, SHORT, st.sampled_from(["0.1", "-1.5", "3", "abc"])),
    _cmd(_lit("HRANDFIELD"), KEYS, st.sampled_from(["0", "50"]),
         st.sampled_from([[], ["WITHVALUES"]])),
]

SET_CMDS = [
    _cmd(st.sampled_from(["SADD", "SREM"]), KEYS, _elems()),
    _cmd(st.sampled_from(["SMEMBERS", "SCARD"]), KEYS),
    _cmd(_lit("SISMEMBER"), KEYS, ELEMS),
    _cmd(_lit("SMISMEMBER"), KEYS, _elems()),
    _cmd(_lit("SMOVE"), KEYS, KEYS, ELEMS),
    _cmd(st.sampled_from(["SINTER", "SUNION", "SDIFF"]), _keys()),
    _cmd(st.sampled_from(["SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE"]), KEYS, _keys()),
    _cmd(_lit("SINTERCARD"), _numkeys(), st.sampled_from([[], ["LIMIT", "1"]])),
]

# Lex ranges: defined by Redis only when all scores are equal (see GEO_CMDS' test).
ZSET_LEX = _cmd(st.sampled_from(["ZLEXCOUNT", "ZRANGEBYLEX", "ZREVRANGEBYLEX", "ZREMRANGEBYLEX"]),
                KEYS, LEX_BOUNDS, LEX_BOUNDS)

ZSET_CMDS = [
    _cmd(_lit("ZADD"), KEYS, st.sampled_from([[], ["NX"], ["XX"], ["GT", "CH"], ["LT"],
                                              ["INCR"], ["XX", "INCR"]]), _pairs(SCORES)),
    _cmd(_lit("ZINCRBY"), KEYS, SCORES, ELEMS),
    _cmd(st.sampled_from(["ZSCORE", "ZRANK", "ZREVRANK"]), KEYS, ELEMS),
    _cmd(_lit("ZMSCORE"), KEYS, _elems()),
    _cmd(_lit("ZREM"), KEYS, _elems()),
    _cmd(_lit("ZCARD"), KEYS),
    _cmd(st.sampled_from(["ZCOUNT", "ZRANGEBYSCORE", "ZREVRANGEBYSCORE", "ZREMRANGEBYSCORE"]),
         KEYS, SCORE_BOUNDS, SCORE_BOUNDS),
    ZSET_LEX,
    _cmd(st.sampled_from(["ZRANGE", "ZREVRANGE", "ZREMRANGEBYRANK"]), KEYS, INTS, INTS),
    _cmd(_lit("ZRANGE"), KEYS, SCORE_BOUNDS, SCORE_BOUNDS,
         st.sampled_from([["BYSCORE"], ["BYSCORE", "REV"], ["BYSCORE", "LIMIT", "1", "2"],
                          ["BYSCORE", "WITHSCORES"]])),
    _cmd(_lit("ZRANGE"), KEYS, INTS, INTS, st.sampled_from([["WITHSCORES"], ["REV"]])),
    _cmd(_lit("ZRANGESTORE"), KEYS, KEYS, INTS, INTS),
    _cmd(st.sampled_from(["ZUNION", "ZINTER", "ZDIFF"]), _numkeys(),
         st.sampled_from([[], ["WITHSCORES"]])),
    _cmd(st.sampled_from(["ZUNIONSTORE", "ZINTERSTORE"]), KEYS, _numkeys(),
         st.sampled_from([[], ["AGGREGATE", "MAX"], ["AGGREGATE", "MIN"]])),
    _cmd(_lit("ZINTERCARD"), _numkeys()),
    _cmd(st.sampled_from(["ZPOPMIN", "ZPOPMAX"]), KEYS, st.sampled_from([[], ["2"]])),
    _cmd(_lit("ZMPOP"), _numkeys(), st.sampled_from(["MIN", "MAX"]),
         st.sampled_from([[], ["COUNT", "2"]])),
    _cmd(_lit("BZPOPMIN"), _keys(), _lit("0.01")),
]

LONLAT = st.sampled_from([["13.36", "38.11"], ["15.08", "37.50"], ["0", "0"], ["180", "0"],
                          ["-179.99", "85.05"], ["13.5", "38.2"], ["200", "1"], ["1", "x"]])
UNITS = st.sampled_from(["m", "km", "mi", "ft", "yd"])
DISTS = st.sampled_from(["0", "1", "150", "300", "20000", "1e6", "-1", "x"])
GEO_OPTS = st.lists(st.sampled_from([["WITHDIST"], ["WITHHASH"], ["WITHCOORD"], ["ASC"],
                                     ["DESC"], ["COUNT", "1"], ["COUNT", "2", "ANY"], ["ANY"],
                                     ["COUNT", "0"]]), max_size=3).map(
    lambda os: [x for o in os for x in o])
STORE_OPTS = st.lists(st.sampled_from([["ASC"], ["DESC"], ["COUNT", "2"], ["STOREDIST"],
                                       ["COUNT", "1", "ANY"]]), max_size=2).map(
    lambda os: [x for o in os for x in o])
GEO_FROM = st.one_of(_cmd(_lit("FROMMEMBER"), ELEMS), _cmd(_lit("FROMLONLAT"), LONLAT))
GEO_BY = st.one_of(_cmd(_lit("BYRADIUS"), DISTS, UNITS), _cmd(_lit("BYBOX"), DISTS, DISTS, UNITS))

# Geo commands (geo sets are sorted sets: mix with ZSET_CMDS to search odd scores too).
GEO_CMDS = [
    _cmd(_lit("GEOADD"), KEYS, st.sampled_from([[], ["NX"], ["XX"], ["CH"], ["XX", "CH"]]),
         st.lists(st.tuples(LONLAT, ELEMS), min_size=1, max_size=3).map(
             lambda ps: [x for lonlat, m in ps for x in (*lonlat, m)])),
    _cmd(_lit("GEODIST"), KEYS, ELEMS, ELEMS, st.sampled_from([[], ["km"], ["yd"]])),
    _cmd(st.sampled_from(["GEOHASH", "GEOPOS"]), KEYS, _elems()),
    _cmd(_lit("GEOSEARCH"), KEYS, GEO_FROM, GEO_BY, GEO_OPTS),
    _cmd(_lit("GEOSEARCHSTORE"), KEYS, KEYS, GEO_FROM, GEO_BY, STORE_OPTS),
    _cmd(st.sampled_from(["GEORADIUS", "GEORADIUS_RO"]), KEYS, LONLAT, DISTS, UNITS, GEO_OPTS),
    _cmd(st.sampled_from(["GEORADIUSBYMEMBER", "GEORADIUSBYMEMBER_RO"]), KEYS, ELEMS, DISTS,
         UNITS, GEO_OPTS),
    _cmd(_lit("GEORADIUS"), KEYS, LONLAT, DISTS, UNITS, st.sampled_from(["STORE", "STOREDIST"]),
         KEYS, STORE_OPTS.map(lambda o: [x for x in o if x != "STOREDIST"])),
]

GENERIC_CMDS = [
    _cmd(_lit("SET"), KEYS, ELEMS),
    _cmd(st.sampled_from(["DEL", "TYPE", "EXISTS"]), KEYS),
    _cmd(_lit("OBJECT"), _lit("ENCODING"), KEYS),
]


def command() -> st.SearchStrategy[list[str]]:
    """One command of any collection type (or a generic one)."""
    return st.one_of(*LIST_CMDS, *HASH_CMDS, *SET_CMDS, *ZSET_CMDS, *GENERIC_CMDS)
