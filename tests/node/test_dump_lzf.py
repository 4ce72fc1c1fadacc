"""DUMP payloads with LZF, against redis-server 7.0.15: every string and blob longer than 20
bytes is compressed as ``rdbSaveRawString`` does (when that saves 4 bytes), so sparse and dense
HyperLogLogs, geo sets (listpack and skiplist), plain strings and the other types' listpacks
DUMP to the same bytes on both servers, with ``rdbcompression yes`` and ``no``; each server
restores the other's payload to a value that DUMPs the same again."""

from __future__ import annotations

import random

import pytest

from tests.node.diff import Pair

_RND = random.Random(11)
_NOISE = _RND.randbytes(200)  # does not shrink by 4 bytes: written raw


def _geo(n: int, name: str) -> list[str]:
    args = ["GEOADD", "k"]
    for i in range(n):
        args += [str(-179 + (i * 7.31) % 358), str(-84 + (i * 3.77) % 168), name % i]
    return args


CASES: dict[str, list[list[str | bytes]]] = {
    "hll_sparse_small": [["PFADD", "k", "a", "b", "c"]],
    "hll_sparse": [["PFADD", "k", *[f"e{i}" for i in range(900)]]],
    "hll_dense": [["PFADD", "k", *[f"e{i}" for i in range(5000)]]],
    "geo_listpack": [_geo(40, "p%d")],
    "geo_skiplist": [_geo(300, "a-place-with-a-long-name-%d")],
    "string_21": [["SET", "k", "a" * 21]],
    "string_20": [["SET", "k", "a" * 20]],
    "string_text": [["SET", "k", "the same words again and again, " * 40]],
    "string_noise": [["SET", "k", _NOISE]],
    "string_noise_twice": [["SET", "k", _NOISE[:30] * 2]],
    "list": [["RPUSH", "k", *[f"item:{i}" for i in range(2500)], "z" * 300]],
    "intset": [["SADD", "k", *[str(i * 3) for i in range(400)]]],
    "hash_listpack": [["HSET", "k", *[f"field{i % 50}" if j == 0 else f"value-{i}"
                                      for i in range(50) for j in range(2)]]],
    "zset_listpack": [["ZADD", "k", *[x for i in range(60) for x in (str(i / 3), f"m{i}")]]],
}
RAW = {"hll_sparse_small", "string_20", "string_noise"}  # too short, or does not shrink


def _body(reply: bytes) -> bytes:
    assert reply.startswith(b"$"), reply
    return reply[reply.index(b"\r\n") + 2:-2]


@pytest.mark.parametrize("compression", ["yes", "no"])
@pytest.mark.parametrize("case", list(CASES))
def test_dump_is_redis_bytes_and_restores_both_ways(diff_pair: Pair, case: str,
                                                    compression: str) -> None:
    ours, real = diff_pair.connect()
    try:
        for conn in (ours, real):
            conn.call("CONFIG", "SET", "rdbcompression", compression)
            for cmd in CASES[case]:
                conn.call(*cmd)
        mine, theirs = _body(ours.call("DUMP", "k")), _body(real.call("DUMP", "k"))
        assert mine == theirs
        if compression == "yes" and case not in RAW:
            assert b"\xc3" in mine  # something was compressed
        assert ours.call("RESTORE", "r", "0", theirs) == b"+OK\r\n"
        assert real.call("RESTORE", "r", "0", mine) == b"+OK\r\n"
        assert ours.call("DUMP", "r") == real.call("DUMP", "r") == ours.call("DUMP", "k")
    finally:
        for conn in (ours, real):
            conn.call("CONFIG", "SET", "rdbcompression", "yes")
            conn.close()


def test_our_compressed_payloads_load_where_redis_writes_raw(diff_pair: Pair) -> None:
    """A payload compressed on one side restores on a server running ``rdbcompression no``."""
    ours, real = diff_pair.connect()
    try:
        ours.call(*CASES["hll_dense"][0])
        payload = _body(ours.call("DUMP", "k"))
        real.call("CONFIG", "SET", "rdbcompression", "no")
        assert real.call("RESTORE", "k", "0", payload) == b"+OK\r\n"
        assert ours.call("GET", "k") == real.call("GET", "k")
    finally:
        real.call("CONFIG", "SET", "rdbcompression", "yes")
        for conn in (ours, real):
            conn.close()

