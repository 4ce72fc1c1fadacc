"""Random command sequences for the differential tests, by family.

``FAMILIES`` maps a family name to a list of hypothesis strategies, each drawing one argv
(list of str) whose reply is deterministic on Redis 7.0 given the same prior commands (or is
made comparable by ``diff.NORMALIZER_BY_COMMAND``). To add your type: append a family here
(or ``FAMILIES["mytype"] = [...]`` from your module) and it joins ``command()``.

Rules for generators: small key space (collisions are the point: wrong types, overwrites);
no relative expiry shorter than seconds (both servers must agree whether a key is still
alive); absolute expiries in the past are fine (deterministic deletion).
"""

from __future__ import annotations

from hypothesis import strategies as st

from tests.node import types_gen

KEYS = st.sampled_from(["k1", "k2", "k3", "{k}4"])
VALUES = st.sampled_from(["", "a", "abc", "1", "-7", "10", "3.5", "9223372036854775807",
                          "0x10", " 1", "1e3", "x" * 50, "\x00\xff"])
SMALL = st.integers(min_value=-8, max_value=12).map(str)
OFFSETS = st.integers(min_value=0, max_value=80).map(str)
BITS = st.sampled_from(["0", "1", "2", "x"])


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


def _opt(*choices: list[str]) -> st.SearchStrategy[list[str]]:
    return st.sampled_from([[], *choices])


SET_OPTS = st.lists(st.sampled_from(["NX", "XX", "GET", "KEEPTTL", "EX", "100", "PX", "100000",
                                     "EXAT", "1", "PXAT", "99999999999000", "EX", "-1"]),
                    max_size=4)

STRING_CMDS = [
    _cmd(_lit("SET"), KEYS, VALUES),
    _cmd(_lit("SET"), KEYS, VALUES, SET_OPTS),
    _cmd(st.sampled_from(["GET", "STRLEN", "GETDEL", "INCR", "DECR"]), KEYS),
    _cmd(st.sampled_from(["SETNX", "GETSET", "APPEND"]), KEYS, VALUES),
    _cmd(_lit("SETEX"), KEYS, st.sampled_from(["100", "0", "-1", "x"]), VALUES),
    _cmd(_lit("PSETEX"), KEYS, st.sampled_from(["100000", "0"]), VALUES),
    _cmd(_lit("MGET"), st.lists(KEYS, min_size=1, max_size=4)),
    _cmd(st.sampled_from(["MSET", "MSETNX"]),
         st.lists(st.tuples(KEYS, VALUES), min_size=1, max_size=3).map(
             lambda ps: [x for p in ps for x in p])),
    _cmd(_lit("GETEX"), KEYS, _opt(["EX", "100"], ["PERSIST"], ["PXAT", "1"], ["EX", "0"],
                                  ["FOO"])),
    _cmd(st.sampled_from(["GETRANGE", "SUBSTR"]), KEYS, SMALL, SMALL),
    _cmd(_lit("SETRANGE"), KEYS, st.sampled_from(["0", "1", "5", "-1", "30"]), VALUES),
    _cmd(st.sampled_from(["INCRBY", "DECRBY"]), KEYS,
         st.sampled_from(["1", "-5", "100", "x", "9223372036854775807"])),
    _cmd(_lit("INCRBYFLOAT"), KEYS, st.sampled_from(["0.1", "-2.5", "1e3", "abc", "3"])),
]

KEY_CMDS = [
    _cmd(st.sampled_from(["DEL", "UNLINK", "EXISTS", "TOUCH"]), st.lists(KEYS, min_size=1, max_size=3)),
    _cmd(st.sampled_from(["TYPE", "PERSIST", "EXPIRETIME", "PEXPIRETIME", "TTL", "PTTL"]), KEYS),
    _cmd(st.sampled_from(["RENAME", "RENAMENX"]), KEYS, KEYS),
    _cmd(_lit("COPY"), KEYS, KEYS, _opt(["REPLACE"], ["DB", "1"], ["DB", "1", "REPLACE"])),
    _cmd(st.sampled_from(["EXPIRE", "PEXPIRE"]), KEYS,
         st.sampled_from(["100", "100000", "0", "-1", "x"]), _opt(["NX"], ["XX"], ["GT"], ["LT"])),
    _cmd(st.sampled_from(["EXPIREAT", "PEXPIREAT"]), KEYS,
         st.sampled_from(["1", "99999999999", "99999999999000"]), _opt(["GT"], ["LT"])),
    _cmd(_lit("OBJECT"), _lit("ENCODING"), KEYS),  # REFCOUNT counts Redis-internal references
    _cmd(_lit("KEYS"), st.sampled_from(["*", "k*", "?1", "{*", "[k]2"])),
    _cmd(_lit("DBSIZE")),
    _cmd(_lit("MOVE"), KEYS, st.sampled_from(["1", "0"])),
    _cmd(_lit("SWAPDB"), st.sampled_from(["0", "1"]), st.sampled_from(["0", "1"])),
    _cmd(st.sampled_from(["SORT", "SORT_RO"]), KEYS,
         _opt(["ALPHA"], ["DESC"], ["LIMIT", "1", "2"], ["ALPHA", "DESC", "LIMIT", "0", "1"],
              ["BY", "nosort"], ["BY", "nosort", "DESC"])),
    _cmd(_lit("SORT"), KEYS, _lit("ALPHA"), _lit("STORE"), KEYS),
    _cmd(_lit("LCS"), KEYS, KEYS, _opt(["LEN"], ["IDX"], ["IDX", "WITHMATCHLEN"])),
]

BITMAP_CMDS = [
    _cmd(_lit("SETBIT"), KEYS, OFFSETS, BITS),
    _cmd(_lit("GETBIT"), KEYS, OFFSETS),
    _cmd(_lit("BITCOUNT"), KEYS, _opt(["0", "-1"], ["1", "3"], ["-2", "-1"], ["0", "10", "BIT"],
                                      ["3", "20", "BIT"], ["-5", "-1", "BIT"], ["0"])),
    _cmd(_lit("BITPOS"), KEYS, BITS, _opt(["0"], ["1", "2"], ["-1"], ["2", "-1", "BIT"],
                                          ["0", "5", "BIT"], ["7", "9", "BIT"], ["1", "1"])),
    _cmd(_lit("BITOP"), st.sampled_from(["AND", "OR", "XOR", "NOT"]), KEYS,
         st.lists(KEYS, min_size=1, max_size=3)),
    _cmd(_lit("BITFIELD"), KEYS, st.lists(st.sampled_from([
        ["GET", "u4", "0"], ["GET", "i8", "#1"], ["SET", "u8", "8", "255"],
        ["SET", "i5", "3", "-3"], ["INCRBY", "u2", "100", "1"], ["INCRBY", "i8", "0", "100"],
        ["OVERFLOW", "SAT"], ["OVERFLOW", "FAIL"], ["OVERFLOW", "WRAP"], ["GET", "u64", "0"],
        ["GET", "i64", "3"]]), min_size=1, max_size=3).map(lambda xs: [y for x in xs for y in x])),
    _cmd(_lit("BITFIELD_RO"), KEYS, _lit("GET"), st.sampled_from(["u8", "i3", "u63"]), OFFSETS),
]

TRANSACTION_CMDS = [
    _cmd(_lit("MULTI")),
    _cmd(_lit("EXEC")),
    _cmd(_lit("DISCARD")),
    _cmd(_lit("WATCH"), st.lists(KEYS, min_size=1, max_size=2)),
    _cmd(_lit("UNWATCH")),
]

# HyperLogLog: small element pools, and now and then a batch large enough to go dense
HLL_ELEMENTS = st.lists(st.integers(min_value=0, max_value=3000).map(str), max_size=8)
HLL_BATCH = st.integers(min_value=0, max_value=9).map(
    lambda seed: [f"b{seed}-{i}" for i in range(700)])
HLL_CMDS = [
    _cmd(_lit("PFADD"), KEYS, HLL_ELEMENTS),
    _cmd(_lit("PFADD"), KEYS, HLL_BATCH),
    _cmd(_lit("PFCOUNT"), st.lists(KEYS, min_size=1, max_size=3)),
    _cmd(_lit("PFMERGE"), KEYS, st.lists(KEYS, max_size=3)),
    _cmd(_lit("PFDEBUG"), st.sampled_from(["ENCODING", "DECODE", "TODENSE", "GETREG", "x"]),
         KEYS),
]

# Streams: explicit ids only (a generated id is the clock's), groups and consumers from small
# pools; never BLOCK. XPENDING and XINFO replies carry clock readings: the "times" normalizer.
XIDS = st.sampled_from(["0", "0-1", "1", "1-1", "1-*", "2-0", "3-5", "5", "5-*", "9-9", "-", "+",
                        "$", ">", "x", "(1-1", "18446744073709551615-18446744073709551615"])
XFIELDS = st.lists(st.sampled_from(["a", "b", "1", "x" * 30]), min_size=1, max_size=4).map(
    lambda fs: [w for f in fs for w in (f, f)])
XGROUP_NAMES = st.sampled_from(["g1", "g2"])
XCONSUMERS = st.sampled_from(["c1", "c2", "c3"])
XTRIM_OPTS = st.sampled_from([[], ["MAXLEN", "2"], ["MAXLEN", "~", "1"], ["MINID", "3"],
                              ["MINID", "~", "5", "LIMIT", "10"], ["MAXLEN", "=", "0"],
                              ["NOMKSTREAM"], ["LIMIT", "1"]])
STREAM_CMDS = [
    _cmd(_lit("XADD"), KEYS, XTRIM_OPTS, XIDS, XFIELDS),
    _cmd(st.sampled_from(["XRANGE", "XREVRANGE"]), KEYS, XIDS, XIDS,
         _opt(["COUNT", "2"], ["COUNT", "0"])),
    _cmd(_lit("XLEN"), KEYS),
    _cmd(_lit("XDEL"), KEYS, st.lists(XIDS, min_size=1, max_size=3)),
    _cmd(_lit("XTRIM"), KEYS, XTRIM_OPTS),
    _cmd(_lit("XSETID"), KEYS, XIDS, _opt(["ENTRIESADDED", "9"], ["MAXDELETEDID", "1-1"])),
    _cmd(_lit("XREAD"), _opt(["COUNT", "1"]), _lit("STREAMS"), KEYS, XIDS),
    _cmd(_lit("XGROUP"), _lit("CREATE"), KEYS, XGROUP_NAMES, XIDS,
         _opt(["MKSTREAM"], ["ENTRIESREAD", "2"])),
    _cmd(_lit("XGROUP"), _lit("SETID"), KEYS, XGROUP_NAMES, XIDS),
    _cmd(_lit("XGROUP"), st.sampled_from(["CREATECONSUMER", "DELCONSUMER"]), KEYS,
         XGROUP_NAMES, XCONSUMERS),
    _cmd(_lit("XGROUP"), _lit("DESTROY"), KEYS, XGROUP_NAMES),
    _cmd(_lit("XREADGROUP"), _lit("GROUP"), XGROUP_NAMES, XCONSUMERS,
         _opt(["COUNT", "1"], ["NOACK"]), _lit("STREAMS"), KEYS, XIDS),
    _cmd(_lit("XACK"), KEYS, XGROUP_NAMES, st.lists(XIDS, min_size=1, max_size=2)),
    _cmd(_lit("XPENDING"), KEYS, XGROUP_NAMES, _opt(["-", "+", "5"], ["-", "+", "5", "c1"])),
    _cmd(_lit("XCLAIM"), KEYS, XGROUP_NAMES, XCONSUMERS, _lit("0"), XIDS,
         _opt(["JUSTID"], ["FORCE"], ["RETRYCOUNT", "3"], ["LASTID", "9-9"])),
    _cmd(_lit("XAUTOCLAIM"), KEYS, XGROUP_NAMES, XCONSUMERS, _lit("0"), XIDS,
         _opt(["COUNT", "1"], ["JUSTID"])),
    _cmd(_lit("XINFO"), st.sampled_from(["STREAM", "GROUPS"]), KEYS),
    _cmd(_lit("XINFO"), _lit("CONSUMERS"), KEYS, XGROUP_NAMES),
]

FAMILIES: dict[str, list[st.SearchStrategy[list[str]]]] = {
    "streams": STREAM_CMDS,
    "strings": STRING_CMDS,
    "keys": KEY_CMDS,
    "bitmaps": BITMAP_CMDS,
    "transactions": TRANSACTION_CMDS,
    "lists": types_gen.LIST_CMDS,
    "hashes": types_gen.HASH_CMDS,
    "sets": types_gen.SET_CMDS,
    "zsets": types_gen.ZSET_CMDS,
    "hll": HLL_CMDS,
}


def command(*families: str) -> st.SearchStrategy[list[str]]:
    """One command from ``families`` (default: all)."""
    names = families or tuple(FAMILIES)
    return st.one_of(*[s for n in names for s in FAMILIES[n]])
