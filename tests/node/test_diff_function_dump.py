"""FUNCTION DUMP / FUNCTION RESTORE against redis-server 7.0: the same payload bytes (both
servers with ``rdbcompression no``, so Redis does not LZF the library code), every restore
policy and error, and payloads moved between the two servers in both directions."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from slotgate.node.persistence import rdb
from tests.node.diff import Pair, run_argvs
from tests.support import RawClient, node_and_redis


def _lib(name: str, fn: str, ret: str = "1") -> bytes:
    return (f"#!lua name={name}\nredis.register_function('{fn}', "
            f"function(keys, args) return {ret} end)").encode()


def _payload(body: bytes, version: int = rdb.RDB_VERSION) -> bytes:
    data = body + version.to_bytes(2, "little")
    return data + rdb.crc64(data).to_bytes(8, "little")


def _s(v: bytes) -> bytes:
    return rdb._string_bytes(v)


L1, L1B, L2 = _lib("lib1", "f1"), _lib("lib1", "g1", "3"), _lib("lib2", "f1", "2")
BIG = b"#!lua name=big\n" + b"local x = 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'\n" * 20 + \
    b"redis.register_function('big', function() return x end)"
PAYLOADS = {
    "one": _payload(b"\xf5" + _s(L1)),
    "other name": _payload(b"\xf5" + _s(L1B)),
    "function collision": _payload(b"\xf5" + _s(L2)),
    "empty": _payload(b""),
    "wrong type": _payload(b"\x00" + _s(b"x")),
    "bad code": _payload(b"\xf5" + _s(b"#!lua name=x\nthis is bad")),
    "no metadata": _payload(b"\xf5" + _s(b"return 1")),
    "no functions": _payload(b"\xf5" + _s(b"#!lua name=x\nreturn 1")),
    "library twice": _payload(b"\xf5" + _s(L1) + b"\xf5" + _s(L1)),
    "function twice": _payload(b"\xf5" + _s(L1) + b"\xf5" + _s(L2)),
    "truncated": _payload(b"\xf5\x40"),
    "truncated code": _payload(b"\xf5\x40\x49abc"),
    "opcode only": _payload(b"\xf5"),
    "later version": _payload(b"\xf5" + _s(L1), rdb.RDB_VERSION + 1),
    "bad checksum": _payload(b"\xf5" + _s(L1))[:-1] + b"\x00",
    "too short": b"abc",
    "pre-GA": _payload(b"\xf6" + _s(b"pg") + _s(b"LUA") + b"\x01" + _s(b"desc")
                       + _s(b"redis.register_function('pgf', function() return 7 end)")),
    "pre-GA no description": _payload(b"\xf6" + _s(b"pg") + _s(b"LUA") + b"\x00"
                                      + _s(b"redis.register_function('pgf', function() end)")),
    "pre-GA bad code": _payload(b"\xf6" + _s(b"x") + _s(b"LUA") + b"\x00" + _s(b"code")),
    "pre-GA engine short": _payload(b"\xf6" + _s(b"x")),
    "pre-GA no indicator": _payload(b"\xf6" + _s(b"x") + b"\x0a"),
    "pre-GA description short": _payload(b"\xf6" + _s(b"x") + _s(b"LUA") + _s(b"desc")),
    "pre-GA blob short": _payload(b"\xf6" + _s(b"x") + _s(b"LUA")),
}
POLICIES: list[list[bytes]] = [[], [b"APPEND"], [b"replace"], [b"FLUSH"]]
LIST = [b"FUNCTION", b"LIST", b"WITHCODE"]
# one library per listing (Redis lists several in hash-table order), then the counts
LISTINGS = [[*LIST, b"LIBRARYNAME", name] for name in (b"lib1", b"lib2", b"pg", b"x")] + [
    [b"FUNCTION", b"STATS"]]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    with node_and_redis(tmp_path_factory.mktemp("fdump"), ["--rdbcompression", "no"]) as procs:
        yield Pair(procs["ours"].port, procs["real"].port)


@pytest.mark.parametrize("proto", [2, 3])
def test_restore_policies_and_errors_match_redis(pair: Pair, proto: int) -> None:
    steps: list[list[bytes]] = []
    for policy in POLICIES:
        for payload in PAYLOADS.values():
            steps += [[b"FUNCTION", b"FLUSH"], [b"FUNCTION", b"LOAD", L1],
                      [b"FUNCTION", b"RESTORE", payload, *policy], *LISTINGS,
                      [b"FCALL", b"f1", b"0"]]
    steps += [[b"FUNCTION", b"RESTORE", PAYLOADS["one"], b"bad"],
              [b"FUNCTION", b"RESTORE", PAYLOADS["one"], b"FLUSH", b"x"],
              [b"FUNCTION", b"RESTORE"], [b"FUNCTION", b"DUMP", b"x"],
              [b"FUNCTION", b"RESTORE", PAYLOADS["pre-GA"], b"FLUSH"], [b"FCALL", b"pgf", b"0"]]
    problems = run_argvs(pair, steps, proto)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("proto", [2, 3])
def test_dump_bytes_match_redis(pair: Pair, proto: int) -> None:
    steps = [[b"FUNCTION", b"FLUSH"], [b"FUNCTION", b"DUMP"], [b"FUNCTION", b"LOAD", L1],
             [b"FUNCTION", b"DUMP"], [b"FUNCTION", b"LOAD", b"REPLACE", L1B],
             [b"FUNCTION", b"DUMP"], [b"FUNCTION", b"FLUSH"], [b"FUNCTION", b"LOAD", BIG],
             [b"FUNCTION", b"DUMP"]]
    problems = run_argvs(pair, steps, proto)
    assert not problems, "\n".join(problems)


def _list(conn: RawClient) -> bytes:
    return conn.call(*LIST)


@pytest.mark.parametrize("direction", ["ours to real", "real to ours"])
def test_dump_restores_on_the_other_server(tmp_path: Path, direction: str) -> None:
    """Default ``rdbcompression yes``: a long library's code is LZF-compressed, by both
    servers alike (the same bytes while one library is loaded: with more, Redis' order is
    its dict's)."""
    with node_and_redis(tmp_path) as procs:
        ours, real = RawClient(procs["ours"].port), RawClient(procs["real"].port)
        src, dst = (ours, real) if direction == "ours to real" else (real, ours)
        try:
            for conn in (ours, real):
                conn.call("FUNCTION", "LOAD", BIG)
            assert ours.call("FUNCTION", "DUMP") == real.call("FUNCTION", "DUMP")
            assert b"\xf5\xc3" in ours.call("FUNCTION", "DUMP")
            for conn in (ours, real):
                conn.call("FUNCTION", "FLUSH")
            for code in (L2, BIG):
                assert src.call("FUNCTION", "LOAD", code) == b"$%d\r\n" % len(
                    code.split(b"name=")[1].split(b"\n")[0]) + code.split(b"name=")[1].split(
                    b"\n")[0] + b"\r\n"
            payload = src.call("FUNCTION", "DUMP")
            body = payload[payload.index(b"\r\n") + 2:-2]
            assert dst.call("FUNCTION", "RESTORE", body) == b"+OK\r\n"
            assert dst.call("FCALL", "big", "0") == src.call("FCALL", "big", "0")
            for conn in (src, dst):
                conn.call("FUNCTION", "DELETE", "lib2")
            assert _list(dst) == _list(src) != b"*0\r\n"
            assert dst.call("FUNCTION", "RESTORE", body) == b"-ERR Library big already exists\r\n"
        finally:
            ours.close()
            real.close()
