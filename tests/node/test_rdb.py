"""node/persistence/rdb.py against a real redis-server 7.0: its DUMP payloads decode to what it holds, ours
RESTORE into it and read back identically, and broken payloads fail with its exact errors."""

from __future__ import annotations

import math
import os
import random
import struct
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from slotgate.node.persistence import lzf, rdb
from tests.support import ManagedProcess

# --- helpers ------------------------------------------------------------------------------


@pytest.fixture
def r(redis_standalone: ManagedProcess) -> Iterator[redis.Redis]:
    client = redis_standalone.client()
    client.flushall()
    try:
        yield client
    finally:
        client.flushall()
        client.close()


def zrange_all(r: redis.Redis, key: str) -> list[tuple[bytes, float]]:
    got: Any = r.zrange(key, 0, -1, withscores=True)
    return list(got)


def read_back(r: redis.Redis, key: str) -> tuple[str, Any]:
    """What the real server holds at ``key``, in rdb.py's value model."""
    kind = r.type(key).decode()  # type: ignore[union-attr]
    readers: dict[str, Any] = {
        "string": lambda: r.get(key),
        "list": lambda: r.lrange(key, 0, -1),
        "set": lambda: set(r.smembers(key)),
        "hash": lambda: r.hgetall(key),
        "zset": lambda: [(m, float(s)) for m, s in zrange_all(r, key)],
    }
    return kind, readers[kind]()


def dump_of(r: redis.Redis, key: str) -> bytes:
    payload = r.dump(key)
    assert isinstance(payload, bytes)
    return payload


def with_footer(body: bytes, version: int = rdb.RDB_VERSION) -> bytes:
    b = body + version.to_bytes(2, "little")
    return b + rdb.crc64(b).to_bytes(8, "little")


def restore(r: redis.Redis, key: str, payload: bytes) -> str:
    r.delete(key)
    try:
        return str(r.execute_command("RESTORE", key, 0, payload).decode())
    except redis.ResponseError as exc:
        return "ERR " + str(exc) if not str(exc).startswith(("ERR", "BUSYKEY")) else str(exc)


def rdb_string(s: bytes) -> bytes:
    return rdb._len_bytes(len(s)) + s


def crc64_bitwise(data: bytes) -> int:
    """The CRC from its definition, one bit at a time (reflected Jones polynomial)."""
    poly = int(f"{0xAD93D23594C935A9:064b}"[::-1], 2)
    crc = 0
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ poly if crc & 1 else crc >> 1
    return crc


# --- CRC64 --------------------------------------------------------------------------------


def test_crc64_check_value() -> None:
    assert rdb.crc64(b"123456789") == 0xE9C6D914C4B8D9CA


def test_crc64_matches_bitwise_definition_at_every_length() -> None:
    data = os.urandom(300)
    for n in range(0, 300, 7):
        assert rdb.crc64(data[:n]) == crc64_bitwise(data[:n])
    # incremental use continues a running CRC
    assert rdb.crc64(data[100:], rdb.crc64(data[:100])) == crc64_bitwise(data)


def test_crc64_matches_real_dump_footers(r: redis.Redis) -> None:
    r.set("s", "hello world")
    payload = dump_of(r, "s")
    assert rdb.crc64(payload[:-8]) == int.from_bytes(payload[-8:], "little")


# --- real DUMP → our decoder --------------------------------------------------------------

BIG_INT = 2**63 - 1
SHAPES: dict[str, list[tuple[str | bytes, ...]]] = {
    # strings: raw, int8/16/32 encodings, beyond 32 bits, non-canonical, binary, compressible
    "str_small": [("SET", "{k}", "hello")],
    "str_empty": [("SET", "{k}", "")],
    "str_int8": [("SET", "{k}", "-100")],
    "str_int16": [("SET", "{k}", "30000")],
    "str_int32": [("SET", "{k}", "-2000000000")],
    "str_int64": [("SET", "{k}", str(BIG_INT))],
    "str_leading_zero": [("SET", "{k}", "007")],
    "str_binary": [("SET", "{k}", "\x00\xff\r\n")],
    "str_lzf": [("SET", "{k}", "abcabcabc" * 50)],
    "str_lzf_long": [("SET", "{k}", "0123456789abcdef" * 5000)],
    "str_incompressible": [("SET", "{k}", os.urandom(300).hex())],
    "str_14bit_len": [("SET", "{k}", os.urandom(5000))],
    "str_32bit_len": [("SET", "{k}", os.urandom(70000))],
    # lists: one listpack node with every int width, many nodes, big elements, compressed nodes
    "list_small": [("RPUSH", "{k}", "a", "1", "-1", "127", "128", "-4096", "4096", "32767",
                    "-32769", "8388607", "8388608", "2147483648", str(BIG_INT), "x" * 63,
                    "y" * 64, "z" * 4096)],
    "list_many": [("RPUSH", "{k}", *[f"item-{i}" for i in range(1000)])],
    "list_big_elems": [("RPUSH", "{k}", "a" * 10000, "b", "c" * 20000)],
    "list_compressed": [("CONFIG", "SET", "list-compress-depth", "1"),
                        ("RPUSH", "{k}", *[f"element-number-{i:06d}" for i in range(3000)]),
                        ("CONFIG", "SET", "list-compress-depth", "0")],
    # sets: intsets of each width, plain sets (strings, >512 ints)
    "set_intset16": [("SADD", "{k}", "1", "2", "-3")],
    "set_intset32": [("SADD", "{k}", "1", "100000")],
    "set_intset64": [("SADD", "{k}", "1", str(BIG_INT), str(-BIG_INT - 1))],
    "set_plain": [("SADD", "{k}", "a", "b", "1")],
    "set_big_ints": [("SADD", "{k}", *[str(i) for i in range(600)])],
    "set_big": [("SADD", "{k}", *[f"m{i}" for i in range(2000)])],
    # hashes: listpack, plain by entry count and by value size
    "hash_small": [("HSET", "{k}", "f", "v", "n", "12", "neg", "-70000", "e", "")],
    "hash_many": [("HSET", "{k}", *[x for i in range(300) for x in (f"f{i}", f"v{i}")])],
    "hash_big_value": [("HSET", "{k}", "f", "v" * 65, "g", "1")],
    # zsets: listpack, skiplist, fractional and infinite scores
    "zset_small": [("ZADD", "{k}", "1.5", "a", "2", "b", "-inf", "c", "inf", "d",
                    "0.1", "e", "-3", "f", "1e300", "g", "-0", "h")],
    "zset_many": [("ZADD", "{k}", *[x for i in range(500) for x in (str(i / 7), f"m{i}")])],
    "zset_big_member": [("ZADD", "{k}", "1", "m" * 65, "inf", "x", "-inf", "y", "0.3", "z")],
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_real_dump_decodes_to_real_value(r: redis.Redis, shape: str) -> None:
    for cmd in SHAPES[shape]:
        r.execute_command(*cmd)
    payload = dump_of(r, "{k}")
    kind, value = rdb.load(payload)
    assert (kind, value) == read_back(r, "{k}")


def test_shapes_cover_every_type_real_7_0_emits(r: redis.Redis) -> None:
    seen = set()
    for cmds in SHAPES.values():
        r.flushall()
        for cmd in cmds:
            r.execute_command(*cmd)
        seen.add(dump_of(r, "{k}")[0])
    assert seen == {rdb.T_STRING, rdb.T_LIST_QUICKLIST_2, rdb.T_SET_INTSET, rdb.T_SET,
                    rdb.T_HASH_LISTPACK, rdb.T_HASH, rdb.T_ZSET_LISTPACK, rdb.T_ZSET_2}


def test_real_dump_of_long_string_is_lzf_and_decodes(r: redis.Redis) -> None:
    r.set("s", b"abc" * 1000)
    payload = dump_of(r, "s")
    assert payload[1] == 0xC3  # RDB_ENC_LZF
    assert rdb.load(payload) == ("string", b"abc" * 1000)


def _lzf_candidates(rnd: random.Random, count: int) -> list[bytes]:
    """Strings of random bytes with back references of every length and distance, and at
    every rate: some do not compress at all, many about as much as Redis' limit demands."""
    values = []
    for i in range(count):
        n = rnd.randint(21, 400)
        alphabet = rnd.randint(2, 256)
        rate = rnd.choice((0.003, 0.01, 0.03, 0.08))
        out = bytearray()
        while len(out) < n:
            if out and rnd.random() < rate:
                start = rnd.randrange(len(out))
                out += out[start:start + rnd.randint(3, 300)]
            else:
                out.append(rnd.randrange(alphabet))
        values.append(bytes(out[:n]) if i % 2 else bytes(out))
    return values


def test_lzf_output_is_redis_at_every_size_limit(r: redis.Redis) -> None:
    """Our DUMP of a string is redis-server's: for strings of every kind, and for many whose
    compressed form is within a few bytes of the limit (4 bytes shorter than the string: the
    compressor gives up at its own conservative checks of the room left)."""
    rnd = random.Random(3)
    values = _lzf_candidates(rnd, 300)
    edge = []
    while len(edge) < 300:
        for v in _lzf_candidates(rnd, 200):
            packed = lzf.lzf_compress(v, 2 * len(v) + 64)  # room enough: no limit reached
            if packed is not None and abs(len(packed) - (len(v) - 4)) <= 4:
                edge.append(v)
    pipe = r.pipeline(transaction=False)
    for i, v in enumerate(values + edge):
        pipe.set(f"s{i}", v)
        pipe.dump(f"s{i}")
    theirs = pipe.execute()[1::2]
    raw = [0, 0]
    for i, (v, payload) in enumerate(zip(values + edge, theirs, strict=True)):
        assert rdb.dump("string", v) == payload, v
        raw[i >= len(values)] += payload[1] != rdb.ENC_LZF
    assert 50 < raw[0] < 250 and 50 < raw[1] < 250  # both outcomes, many times


# --- our dump → real RESTORE --------------------------------------------------------------

OUR_VALUES: list[tuple[str, rdb.Value]] = [
    ("string", b""), ("string", b"x"), ("string", b"-128"), ("string", b"32767"),
    ("string", b"-2147483648"), ("string", b"2147483648"), ("string", b"+1"), ("string", b"01"),
    ("string", os.urandom(20000)),
    ("list", [b"a"]), ("list", [b"%d" % i for i in range(-70000, 70000, 37)]),
    ("list", [b"q" * 9000, b"", b"r" * 70000, b"s"]),
    ("list", [os.urandom(50) for _ in range(2000)]),
    ("set", {b"1", b"-2", b"3"}), ("set", {b"1", b"%d" % BIG_INT}), ("set", {b"a", b"1"}),
    ("set", {b"%d" % i for i in range(513)}), ("set", {os.urandom(8) for _ in range(700)}),
    ("hash", {b"f": b"v", b"n": b"1"}), ("hash", {b"f": b"v" * 100}),
    ("hash", {b"f%d" % i: b"%d" % i for i in range(129)}),
    ("zset", [(b"a", 1.0), (b"b", -math.inf), (b"c", math.inf), (b"d", 0.1), (b"e", -0.0)]),
    ("zset", [(b"m%d" % i, i / 3) for i in range(200)]),
    ("zset", [(b"x" * 100, 2.5), (b"y", 1e-300)]),
]


@pytest.mark.parametrize(("kind", "value"), OUR_VALUES,
                         ids=[f"{k}-{i}" for i, (k, _) in enumerate(OUR_VALUES)])
def test_our_dump_restores_into_real_server(r: redis.Redis, kind: str, value: rdb.Value) -> None:
    assert restore(r, "{k}", rdb.dump(kind, value)) == "OK"
    got_kind, got = read_back(r, "{k}")
    want = sorted(value, key=lambda ms: (ms[1], ms[0])) if kind == "zset" else value
    assert (got_kind, got) == (kind, want)
    # and the server's own DUMP of it decodes back to the same value
    assert rdb.load(dump_of(r, "{k}")) == (kind, want)


@pytest.mark.parametrize("compression", ["yes", "no"])
def test_our_dump_is_byte_identical_where_real_redis_is_deterministic(
        r: redis.Redis, compression: str) -> None:
    """Fresh values' encodings are fully determined: compare bytes, with ``rdbcompression``
    on (strings and blobs over 20 bytes LZF-compressed when that saves 4 bytes) and off."""
    r.config_set("rdbcompression", compression)
    rdb.LZF["on"] = compression == "yes"
    noise = random.Random(7).randbytes(300)
    try:
        cases: list[tuple[tuple[str, ...], str, rdb.Value]] = [
            (("SET", "{k}", "hello"), "string", b"hello"),
            (("SET", "{k}", "123"), "string", b"123"),
            (("SET", "{k}", "-40000"), "string", b"-40000"),
            (("SET", "{k}", "9" * 15), "string", b"9" * 15),
            (("SET", "{k}", "z" * 400), "string", b"z" * 400),
            (("RPUSH", "{k}", "a", "5", "-9000", "x" * 100), "list", [b"a", b"5", b"-9000",
                                                                       b"x" * 100]),
            (("SADD", "{k}", "5", "-1", "70000"), "set", {b"5", b"-1", b"70000"}),
            (("HSET", "{k}", "f", "v", "g", "42"), "hash", {b"f": b"v", b"g": b"42"}),
            (("ZADD", "{k}", "1.5", "a", "2", "b", "inf", "c", "-0", "d", "0.1", "e",
              "1e15", "f", "4503599627370496", "g", "1e20", "h", "-4503599627370495", "i",
              "-1e-300", "j"), "zset",
             [(b"i", -4503599627370495.0), (b"j", -1e-300), (b"d", -0.0), (b"e", 0.1),
              (b"a", 1.5), (b"b", 2.0), (b"f", 1e15), (b"g", 4503599627370496.0),
              (b"h", 1e20), (b"c", math.inf)]),
            (("SET", "{k}", "abcdefghij" * 2), "string", b"abcdefghij" * 2),  # 20: never
            (("SET", "{k}", "a" * 21), "string", b"a" * 21),
            (("SET", "{k}", noise), "string", noise),  # does not shrink: raw
            (("SET", "{k}", noise[:40] * 2), "string", noise[:40] * 2),
            (("SET", "{k}", "0123456789abcdef" * 5000), "string", b"0123456789abcdef" * 5000),
            (("RPUSH", "{k}", *[f"item:{i}" for i in range(3000)], "y" * 9000), "list",
             [b"item:%d" % i for i in range(3000)] + [b"y" * 9000]),
            (("SADD", "{k}", *range(0, 4000, 9)), "set", {b"%d" % i for i in range(0, 4000, 9)}),
            (("HSET", "{k}", "field", "v" * 60, "other", "w" * 30), "hash",
             {b"field": b"v" * 60, b"other": b"w" * 30}),
            (("ZADD", "{k}", *[x for i in range(100) for x in (str(i / 7), f"member:{i}")]),
             "zset", [(b"member:%d" % i, i / 7) for i in range(100)]),
            (("ZADD", "{k}", "1", "m" * 80, "2", "n" * 90), "zset",
             [(b"m" * 80, 1.0), (b"n" * 90, 2.0)]),
        ]
        for cmd, kind, value in cases:
            r.delete("{k}")
            r.execute_command(*cmd)
            if lzf.COMPILED or kind != "string" or len(value) <= rdb.PURE_LZF_MAX_BYTES:
                assert rdb.dump(kind, value) == dump_of(r, "{k}"), cmd
            else:  # pure Python writes a long string raw: still Redis' value
                assert rdb.load(dump_of(r, "{k}")) == (kind, value)
    finally:
        r.config_set("rdbcompression", "yes")
        rdb.LZF["on"] = True


@given(st.lists(st.binary(max_size=30) | st.integers(-(2**63), 2**63 - 1).map(lambda i: b"%d" % i),
                min_size=1, max_size=60))
@settings(max_examples=200, deadline=None)
def test_pure_round_trip_of_every_kind(items: list[bytes]) -> None:
    assert rdb.load(rdb.dump("string", items[0])) == ("string", items[0])
    assert rdb.load(rdb.dump("list", items)) == ("list", items)
    assert rdb.load(rdb.dump("set", set(items))) == ("set", set(items))
    h = dict(zip(items, reversed(items), strict=True))
    assert rdb.load(rdb.dump("hash", h)) == ("hash", h)
    z = sorted({m: float(i) / 3 for i, m in enumerate(items)}.items(), key=lambda x: (x[1], x[0]))
    assert rdb.load(rdb.dump("zset", z)) == ("zset", z)


# --- legacy encodings a 7.0 server still loads (crafted here, checked by the real server) --


def ziplist(items: list[bytes]) -> bytes:
    """A minimal ziplist writer (strings only, plus the 4-bit immediate ints)."""
    body = bytearray()
    prev = 0
    for it in items:
        entry = bytearray(bytes((prev,)) if prev < 254 else b"\xfe" + prev.to_bytes(4, "little"))
        if it.isdigit() and len(it) == 1 and int(it) <= 12:
            entry.append(0xF1 + int(it))
        elif len(it) < 64:
            entry += bytes((len(it),)) + it
        elif len(it) < 16384:
            entry += bytes((0x40 | (len(it) >> 8), len(it) & 0xFF)) + it
        else:
            entry += b"\x80" + len(it).to_bytes(4, "big") + it
        prev = len(entry)
        body += entry
    total = 10 + len(body) + 1
    tail = 10 + len(body) - prev if items else 10
    return (total.to_bytes(4, "little") + tail.to_bytes(4, "little")
            + len(items).to_bytes(2, "little") + body + b"\xff")


LEGACY: list[tuple[str, bytes]] = [
    ("list_ziplist", bytes((rdb.T_LIST_ZIPLIST,)) + rdb_string(ziplist([b"a", b"7", b"x" * 300]))),
    ("quicklist_v1", bytes((rdb.T_LIST_QUICKLIST,)) + b"\x02"
     + rdb_string(ziplist([b"a", b"b"])) + rdb_string(ziplist([b"c", b"1"]))),
    ("hash_ziplist", bytes((rdb.T_HASH_ZIPLIST,)) + rdb_string(ziplist([b"f", b"v", b"g", b"3"]))),
    ("zset_ziplist", bytes((rdb.T_ZSET_ZIPLIST,)) + rdb_string(ziplist([b"a", b"1.5", b"b", b"2"]))),
    ("zset_v1", bytes((rdb.T_ZSET,)) + b"\x03" + rdb_string(b"a") + b"\x031.5"
     + rdb_string(b"b") + b"\xfe" + rdb_string(b"c") + b"\xff"),
    ("list_plain", bytes((rdb.T_LIST,)) + b"\x02" + rdb_string(b"a") + rdb_string(b"bb")),
    ("hash_zipmap", bytes((rdb.T_HASH_ZIPMAP,)) + rdb_string(
        b"\x02" + b"\x01f\x01\x00v" + b"\x02gg\x03\x02xyz\x00\x00" + b"\xff")),
]


@pytest.mark.parametrize("body", [b for _, b in LEGACY], ids=[n for n, _ in LEGACY])
def test_legacy_encodings_decode_like_the_real_server_loads_them(r: redis.Redis,
                                                                  body: bytes) -> None:
    payload = with_footer(body)
    assert restore(r, "{k}", payload) == "OK"
    assert rdb.load(payload) == read_back(r, "{k}")


# --- broken payloads: the same answer as the real server ----------------------------------


def _broken_payloads() -> list[tuple[str, bytes]]:
    good = rdb.dump("string", b"hello")
    lp = rdb.dump("list", [b"a", b"b"])
    crc_of = with_footer
    return [
        ("empty", b""),
        ("nine_bytes", b"\x00" * 9),
        ("crc_flipped", good[:-1] + bytes((good[-1] ^ 1,))),
        ("body_flipped", good[:3] + bytes((good[3] ^ 0x20,)) + good[4:]),
        ("crc_zero", good[:-8] + b"\x00" * 8),
        ("version_11", crc_of(rdb.encode_object("string", b"x"), version=11)),
        ("version_0", crc_of(rdb.encode_object("string", b"x"), version=0)),
        ("unknown_type", crc_of(b"\x7f\x01a")),
        ("stream_type", crc_of(b"\x0f\x00")),
        ("module_type", crc_of(b"\x07\x00")),
        ("empty_list", crc_of(b"\x01\x00")),
        ("empty_quicklist", crc_of(b"\x12\x00")),
        ("bad_quicklist_container", crc_of(b"\x12\x01\x03\x01a")),
        ("empty_set", crc_of(b"\x02\x00")),
        ("dup_set", crc_of(b"\x02\x02\x01a\x01a")),
        ("dup_hash_small", crc_of(b"\x04\x02\x01a\x01x\x01a\x01y")),
        ("dup_hash_big", crc_of(b"\x04\x81\x01" + b"".join(
            rdb_string(b"f%d" % (i % 128)) + rdb_string(b"v") for i in range(129)))),
        ("dup_hash_listpack", crc_of(b"\x10" + rdb_string(rdb.listpack_encode([b"a", b"1",
                                                                             b"a", b"2"])))),
        ("nan_zset2", crc_of(b"\x05\x01\x01a" + struct.pack("<d", math.nan))),
        ("dup_zset2", crc_of(b"\x05\x02\x01a" + struct.pack("<d", 1) + b"\x01a"
                             + struct.pack("<d", 2))),
        ("string_reads_into_footer", crc_of(b"\x00\x05ab")),
        ("trailing_garbage_ignored", crc_of(b"\x00\x01aXYZ")),
        ("bad_len_prefix", crc_of(b"\x00\x82")),
        ("bad_string_encoding", crc_of(b"\x00\xc7")),
        ("lzf_length_mismatch", crc_of(b"\x00\xc3\x04\x09\x02abc")),
        ("listpack_bad_total", crc_of(lp[:-10][:3] + b"\x00" + lp[:-10][4:])),
        ("intset_bad_width", crc_of(b"\x0b\x0a\x03\x00\x00\x00\x01\x00\x00\x00\x01\x00")),
        ("intset_count_mismatch", crc_of(b"\x0b\x0a\x02\x00\x00\x00\x02\x00\x00\x00\x01\x00")),
    ]


BROKEN = _broken_payloads()
# A 7.0 server with sanitize-dump-payload no loads a small hash with a repeated field as a
# listpack holding both entries (a corrupt value); we refuse such payloads instead.
DIVERGES = {"dup_hash_small", "dup_hash_listpack"}


@pytest.mark.parametrize(("name", "payload"), BROKEN, ids=[n for n, _ in BROKEN])
def test_broken_payloads_answer_like_real_restore(r: redis.Redis, name: str,
                                                  payload: bytes) -> None:
    real = restore(r, "{k}", payload)
    ours: tuple[str, Any]
    try:
        ours = ("OK", rdb.load(payload))
    except rdb.RdbError as exc:
        ours = (str(exc), None)
    if name in DIVERGES:
        assert (real, ours) == ("OK", (rdb.ERR_BAD_FORMAT, None))
        assert r.hlen("{k}") == 2  # the real server kept both copies of the field
    elif real == "OK":
        assert ours == ("OK", read_back(r, "{k}"))
    else:
        assert real in (rdb.ERR_FOOTER, rdb.ERR_BAD_FORMAT)
        assert ours == (real, None)


def test_crc_checked_before_body(r: redis.Redis) -> None:
    """Garbage with a wrong CRC is a checksum error, never a format error."""
    payload = b"\x7f" * 40
    assert restore(r, "{k}", payload) == rdb.ERR_FOOTER
    with pytest.raises(rdb.RdbError, match="^ERR DUMP payload version or checksum are wrong$"):
        rdb.load(payload)


@given(st.binary(min_size=1, max_size=80))
@settings(max_examples=300, deadline=None)
def test_random_bodies_never_raise_anything_but_rdb_errors(body: bytes) -> None:
    try:
        kind, _ = rdb.load(with_footer(body))
    except rdb.RdbError as exc:
        assert str(exc) in (rdb.ERR_FOOTER, rdb.ERR_BAD_FORMAT)
    else:
        assert kind in ("string", "list", "set", "hash", "zset")
