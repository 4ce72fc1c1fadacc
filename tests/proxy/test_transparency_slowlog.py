"""The proxy's own SLOWLOG and its directives (proxy/front/slowlog.py, own_config.py): the same
script to a standalone redis-server and to a proxy of this module's own compares equal, RESP2
and RESP3, once the fields that must differ are set aside (ids, times, durations; the proxy
adds `` node=<master>`` to the client-name field of a request a master served)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import hiredis
import pytest

from tests.conftest import ClusterBackend
from tests.support import ManagedProcess, RawClient, proxy_and_redis

PROTOCOLS = [2, 3]


@pytest.fixture(scope="module")
def pair(cluster_backend: ClusterBackend, tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[dict[str, ManagedProcess]]:
    with proxy_and_redis(tmp_path_factory.mktemp("slowlog"), cluster_backend.ports[:2]) as procs:
        yield procs


def _parse(raw: bytes) -> Any:
    reader = hiredis.Reader()
    reader.feed(raw)
    return reader.gets()


def _pairs(raw: bytes) -> object:
    """CONFIG GET's pairs, in no particular order (a server's order is its dict's)."""
    parsed = _parse(raw)
    items = parsed.items() if isinstance(parsed, dict) else zip(parsed[::2], parsed[1::2],
                                                                strict=True)
    return raw[:1], sorted(items)


def _entries(raw: bytes, addr: bytes, nodes: set[bytes]) -> list[object]:
    """SLOWLOG GET's entries with what must differ set aside: [args, is the client's addr,
    client name without the node]; the node, if any, must be a cluster node."""
    out: list[object] = []
    for _id, when, took_us, args, who, name in _parse(raw):
        assert isinstance(when, int) and isinstance(took_us, int) and took_us >= 0
        m = re.fullmatch(rb"(.*?) ?node=(\S+)", name)
        if m is not None:
            assert m[2] in nodes, name
            name = m[1]
        out.append([args, who == addr, name])
    return out


def _script(port: int, proto: int, nodes: set[bytes]) -> list[object]:
    with RawClient(port) as c:
        if proto == 3:
            c.call("HELLO", "3")
        addr = re.search(rb"addr=(\S+)", c.call("CLIENT", "INFO"))[1]  # type: ignore[index]
        out: list[object] = [
            c.call("CONFIG", "SET", "slowlog-max-len", "abc"),
            c.call("CONFIG", "SET", "slowlog-log-slower-than", "-2"),
            c.call("CONFIG", "SET", "slowlog-max-len", "-1"),
            c.call("CONFIG", "SET", "slowlog-max-len", "5", "slowlog-max-len", "6"),
            c.call("CONFIG", "SET", "slowlog-max-len", "6", "slowlog-log-slower-than", "0"),
            c.call("CONFIG", "GET", "slowlog-max-len"),
            _pairs(c.call("CONFIG", "GET", "slowlog-log-slower-than", "slowlog-max-len")),
            _pairs(c.call("CONFIG", "GET", "slowlog*", "maxmemory-policy")),
            c.call("SLOWLOG", "RESET"),
            c.call("SLOWLOG", "LEN"),  # the RESET itself
            c.call("SADD", "{sl}k", *[f"m{i}" for i in range(40)]),
            c.call("SET", "{sl}big", "v" * 200),
            c.call("CLIENT", "SETNAME", "sl-client"),
            c.call("AUTH", "nobody", "secret"),
            c.call("DEL", "{sl}k", "{sl}big"),
            c.call("SLOWLOG", "LEN"),
        ]
        out.append(_entries(c.call("SLOWLOG", "GET"), addr, nodes))
        out.append(_entries(c.call("SLOWLOG", "GET", "2"), addr, nodes))
        out += [
            c.call("SLOWLOG", "GET", "0"),
            c.call("SLOWLOG", "GET", "-2"),
            c.call("SLOWLOG", "GET", "x"),
            c.call("SLOWLOG", "GET", "1", "2"),
            c.call("SLOWLOG", "LEN", "x"),
            c.call("CONFIG", "SET", "slowlog-log-slower-than", "-1"),
            c.call("SLOWLOG", "RESET"),
            c.call("GET", "{sl}k"),
            c.call("SLOWLOG", "LEN"),  # nothing logged while off
            c.call("CONFIG", "SET", "slowlog-log-slower-than", "10000", "slowlog-max-len", "128"),
        ]
        return out


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_slowlog_and_its_directives_are_one_servers(pair: dict[str, ManagedProcess],
                                                    cluster_backend: ClusterBackend,
                                                    proto: int) -> None:
    nodes = {b"127.0.0.1:%d" % p for p in cluster_backend.ports}
    got = {name: _script(server.port, proto, nodes) for name, server in pair.items()}
    assert got["proxy"] == got["real"]


def test_slowlog_names_the_master_that_served_a_request(pair: dict[str, ManagedProcess],
                                                        cluster_backend: ClusterBackend) -> None:
    with RawClient(pair["proxy"].port) as c:
        assert c.call("CONFIG", "SET", "slowlog-log-slower-than", "0") == b"+OK\r\n"
        try:
            c.call("SLOWLOG", "RESET")
            c.call("GET", "{sl}node")
            entries = _parse(c.call("SLOWLOG", "GET", "1"))
        finally:
            c.call("CONFIG", "SET", "slowlog-log-slower-than", "10000")
    assert entries[0][3] == [b"GET", b"{sl}node"]
    assert entries[0][5] in {b"node=127.0.0.1:%d" % p for p in cluster_backend.ports}
