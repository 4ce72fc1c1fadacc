"""MODULE, LOLWUT and OBJECT HELP: identical raw replies to redis-server 7.0 (LOLWUT's drawings
are random: their size, line count and caption are compared)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.node.diff import Case, Pair, check_cases
from tests.support import RawClient, node_and_redis

CASES = [
    Case("module", ["MODULE LIST", "MODULE HELP", "MODULE LOAD /nonexist.so",
                    "MODULE LOAD /x.so a b", "MODULE LOADEX /x.so CONFIG a b ARGS c",
                    "MODULE UNLOAD foo", "MODULE FOO", "MODULE", "MODULE LIST x",
                    "MODULE UNLOAD", "MODULE UNLOAD a b", "MODULE LOAD"]),
    Case("object help", ["OBJECT HELP", "OBJECT HELP x", "OBJECT help"]),
    Case("lolwut version line", [
        "LOLWUT", "LOLWUT VERSION", "LOLWUT foo", "LOLWUT VERSION 1", "LOLWUT VERSION 7",
        "LOLWUT VERSION 99", "LOLWUT VERSION -1",
        "LOLWUT 10 20", "LOLWUT VERSION x", "LOLWUT VERSION 5 x", "LOLWUT VERSION 6 1 x",
        "LOLWUT VERSION 5 1 1 1 9", "LOLWUT VERSION 6 2 1",
        "LOLWUT VERSION 6 1 1"]),
]


@pytest.mark.parametrize("proto", [2, 3])
def test_module_lolwut_object_help(diff_pair: Pair, proto: int) -> None:
    assert check_cases(diff_pair, CASES, proto) == []


def _shape(raw: bytes) -> tuple[int, int, bytes]:
    """(byte length, lines, caption) of a LOLWUT reply."""
    body = raw.split(b"\r\n", 1)[1]
    return len(body), body.count(b"\n"), body.rsplit(b"\n", 3)[-2]


@pytest.mark.parametrize("args", [["5"], ["5", "0"], ["5", "20", "3", "4"], ["5", "1001", "201", "2"],
                                  ["5", "33", "7", "9"], ["4294967301", "1", "1"]])
def test_lolwut_schotter_shape(diff_pair: Pair, args: list[str]) -> None:
    ours, real = diff_pair.connect(3)
    with ours, real:
        a = ours.call("LOLWUT", "VERSION", *args)
        b = real.call("LOLWUT", "VERSION", *args)
    assert a[:1] == b[:1] == b"="
    assert _shape(a) == _shape(b)


def test_module_load_when_enabled(tmp_path: Path) -> None:
    with node_and_redis(tmp_path, ["--enable-module-command", "yes"]) as procs:
        replies = []
        for side in ("ours", "real"):
            with RawClient(procs[side].port) as c:
                replies.append([c.call("MODULE", "LOAD", "/nonexist.so"),
                                c.call("MODULE", "LOADEX", "/x.so", "FOO"),
                                c.call("MODULE", "UNLOAD", "foo"), c.call("MODULE", "LIST")])
        assert replies[0] == replies[1]
        assert replies[0][0].startswith(b"-ERR Error loading")
