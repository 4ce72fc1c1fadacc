"""Differential helpers for the collection-type tests: the same commands go to our node and
to a real redis-server 7.0 over raw sockets, and the raw reply bytes must be equal.

``Pair`` holds one raw connection to each server. ``script`` runs a list of command lines
(shell-quoted, as typed in redis-cli) in RESP2 or RESP3 and returns every line whose replies
differ, so a test asserts that list is empty and a failure shows all mismatches at once.
Replies whose order Redis leaves unspecified (a hashtable set's members) are compared with
``unordered``, which sorts the elements of an array reply.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Protocol

import hiredis
import pytest

from tests.node.diff import Pair as DiffPair
from tests.support import RawClient, wait_blocked


class HasPort(Protocol):
    """Anything with the server's port (a process fixture or an ``_Endpoint``)."""

    port: int


class _Endpoint:
    """A server as these helpers need it: its port."""

    def __init__(self, port: int) -> None:
        self.port = port


@pytest.fixture(scope="module")
def servers(diff_pair: DiffPair) -> dict[str, _Endpoint]:
    """Our node and a real redis-server: the shared differential fixture (tests/node/diff.py,
    started by tests/node/conftest.py), by port."""
    return {"ours": _Endpoint(diff_pair.ours_port), "real": _Endpoint(diff_pair.real_port)}


def parse(raw: bytes) -> object:
    reader = hiredis.Reader()
    reader.feed(raw)
    return reader.gets()


def _sorted_deep(v: object) -> object:
    if isinstance(v, list):
        return sorted((_sorted_deep(x) for x in v), key=repr)
    if isinstance(v, Exception):  # hiredis returns error replies as (incomparable) objects
        return ("error", str(v))
    return v


def unordered(raw: bytes) -> object:
    """A reply with the elements of every array sorted (for replies in hashtable order)."""
    return _sorted_deep(parse(raw))


class Pair:
    """One connection to each server, same protocol version."""

    def __init__(self, servers: Mapping[str, HasPort], proto: int = 2) -> None:
        self.real = RawClient(servers["real"].port)
        self.ours = RawClient(servers["ours"].port)
        self.proto = proto
        for c in (self.real, self.ours):
            if proto == 3:
                c.call("HELLO", "3")

    def both(self, *args: bytes | str | int) -> tuple[bytes, bytes]:
        return self.real.call(*args), self.ours.call(*args)

    def script(self, text: str, unordered_cmds: frozenset[str] = frozenset()) -> list[str]:
        """Run each non-empty, non-comment line; return descriptions of the mismatches."""
        diffs = []
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            args = [a.encode() for a in shlex.split(line)]
            real, ours = self.both(*args)
            if args[0].decode().lower() in unordered_cmds:
                same = unordered(real) == unordered(ours)
            else:
                same = real == ours
            if not same:
                diffs.append(f"RESP{self.proto} {line!r}: real {real[:200]!r} ours {ours[:200]!r}")
        return diffs

    def close(self) -> None:
        self.real.close()
        self.ours.close()


def flush(servers: Mapping[str, HasPort]) -> None:
    for name in ("real", "ours"):
        c = RawClient(servers[name].port)
        assert c.call("FLUSHALL") == b"+OK\r\n"
        c.close()


def run_script(servers: Mapping[str, HasPort], text: str,
               unordered_cmds: frozenset[str] = frozenset()) -> list[str]:
    """``text`` from empty databases, in RESP2 and then RESP3; all mismatches."""
    diffs = []
    for proto in (2, 3):
        flush(servers)
        p = Pair(servers, proto)
        try:
            diffs += p.script(text, unordered_cmds)
        finally:
            p.close()
    return diffs


# --- multi-client scenarios (blocking commands) ---------------------------------------------

Step = tuple[object, ...]


def scenario(port: int, steps: list[Step], proto: int = 2) -> list[tuple[int, bytes]]:
    """Run ``steps`` against one server with several clients; the replies, in order.

    Steps: ``("cmd", cid, *args)`` send and read the reply; ``("send", cid, *args)`` send
    only (a blocking command); ``("read", cid)`` read one pending reply;
    ``("blocked", n)`` wait until ``n`` clients are blocked; ``("flush",)`` FLUSHALL.
    """
    conns: dict[int, RawClient] = {}
    admin = RawClient(port)
    out: list[tuple[int, bytes]] = []

    def conn(cid: object) -> RawClient:
        assert isinstance(cid, int)
        if cid not in conns:
            conns[cid] = RawClient(port)
            if proto == 3:
                conns[cid].call("HELLO", "3")
        return conns[cid]

    try:
        for step in steps:
            kind = step[0]
            if kind == "cmd":
                out.append((int(step[1]), conn(step[1]).call(*step[2:])))  # type: ignore[arg-type]
            elif kind == "send":
                conn(step[1]).send(*step[2:])  # type: ignore[arg-type]
            elif kind == "read":
                out.append((int(step[1]), conn(step[1]).read()))  # type: ignore[call-overload]
            elif kind == "blocked":
                wait_blocked(admin, int(step[1]))  # type: ignore[call-overload]
            elif kind == "flush":
                admin.call("FLUSHALL")
            else:
                raise ValueError(f"unknown step {step!r}")
    finally:
        for c in conns.values():
            c.close()
        admin.close()
    return out


def compare_scenario(servers: Mapping[str, HasPort], steps: list[Step]) -> None:
    """The scenario's replies must be byte-identical on both servers, RESP2 and RESP3."""
    for proto in (2, 3):
        real = scenario(servers["real"].port, [("flush",), *steps], proto)
        ours = scenario(servers["ours"].port, [("flush",), *steps], proto)
        assert ours == real, f"RESP{proto}"
