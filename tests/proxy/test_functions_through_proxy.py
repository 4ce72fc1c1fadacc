"""FUNCTION through the proxy (proxy/routing/functions.py): LOAD/DELETE/FLUSH/RESTORE on every
master all or nothing, LIST/DUMP once the masters agree (``slotgate cluster fix`` makes them
agree), STATS combined; the same script to a standalone redis-server compares equal."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest

from tests.conftest import ClusterBackend
from tests.support import ManagedProcess, RawClient, redis_server, running

PROTOCOLS = [2, 3]
CLI = [sys.executable, "-m", "slotgate.proxy.ops.cli", "cluster"]


@pytest.fixture
def lib() -> str:
    """A library name of this test's own."""
    return "lib" + uuid.uuid4().hex[:8]


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    proc = redis_server(tmp_path_factory.mktemp("functions-standalone"))
    with running(proc):
        yield proc.port


def masters_of(backend: ClusterBackend) -> list[ManagedProcess]:
    return [n for n in backend.nodes if n.client().info("replication")["role"] == "master"]


def _code(lib: str, body: str = "return 1") -> str:
    return (f"#!lua name={lib}\n"
            f"redis.register_function('f_{lib}', function(keys, args) {body} end)")


def _has(master: ManagedProcess, lib: str) -> bool:
    with RawClient(master.port) as c:
        return c.call("FUNCTION", "LIST", "LIBRARYNAME", lib) not in (b"*0\r\n",)


def _delete_everywhere(backend: ClusterBackend, lib: str) -> None:
    for m in masters_of(backend):
        with RawClient(m.port) as c:
            c.call("FUNCTION", "DELETE", lib)


def _script(port: int, proto: int, lib: str) -> list[bytes]:
    with RawClient(port) as c:
        if proto == 3:
            c.call("HELLO", "3")
        return [
            c.call("FUNCTION", "LOAD", _code(lib)),
            c.call("FUNCTION", "LOAD", _code(lib)),  # already there: the refusal
            c.call("FUNCTION", "LIST", "LIBRARYNAME", lib),
            c.call("FUNCTION", "LIST", "WITHCODE", "LIBRARYNAME", lib),
            c.call("FCALL", f"f_{lib}", "1", "fn:{k}"),
            c.call("FUNCTION", "LOAD", "REPLACE", _code(lib, "return 2")),
            c.call("FCALL", f"f_{lib}", "0"),
            c.call("FUNCTION", "LOAD", "#!lua name=bad\nsyntax error here"),
            c.call("FUNCTION", "DELETE", lib),
            c.call("FUNCTION", "DELETE", lib),  # no such library
            c.call("FUNCTION", "LIST", "LIBRARYNAME", lib),
            c.call("FUNCTION", "RESTORE", "not a payload"),
        ]


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_load_list_delete_answer_as_one_server(slotgate: ManagedProcess, standalone: int,
                                               cluster_backend: ClusterBackend, lib: str,
                                               proto: int) -> None:
    try:
        got = {"proxy": _script(slotgate.port, proto, lib), "real": _script(standalone, proto, lib)}
    finally:
        _delete_everywhere(cluster_backend, lib)
    assert got["proxy"] == got["real"]
    assert got["real"][0] == b"$%d\r\n%s\r\n" % (len(lib), lib.encode())


def test_a_master_that_refuses_leaves_every_master_unchanged(
        slotgate: ManagedProcess, cluster_backend: ClusterBackend, lib: str) -> None:
    masters = masters_of(cluster_backend)
    other = "o" + lib
    try:
        with RawClient(masters[-1].port) as c:  # a library only the last master has
            assert c.call("FUNCTION", "LOAD", _code(lib, "return 'only'")).startswith(b"$")
        with RawClient(slotgate.port) as c:
            assert c.call("FUNCTION", "LOAD", _code(lib)) == (
                b"-ERR Library '%s' already exists\r\n" % lib.encode())
            assert [_has(m, lib) for m in masters] == [False] * (len(masters) - 1) + [True]
            assert c.call("FUNCTION", "LOAD", _code(other)).startswith(b"$")
            assert all(_has(m, other) for m in masters)
            # Missing on every master but the last: the last one's deletion is undone.
            assert c.call("FUNCTION", "DELETE", lib) == b"-ERR Library not found\r\n"
            assert [_has(m, lib) for m in masters] == [False] * (len(masters) - 1) + [True]
            assert all(_has(m, other) for m in masters)
            # The masters disagree: LIST and DUMP say which, cluster fix repairs it.
            for argv in (("FUNCTION", "LIST"), ("FUNCTION", "DUMP")):
                err = c.call(*argv)
                assert err.startswith(b"-ERR slotgate: the masters' function libraries differ (")
                assert b"127.0.0.1:%d)" % masters[-1].port in err
            done = subprocess.run([*CLI, "fix", f"127.0.0.1:{masters[0].port}"],
                                  capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stdout + done.stderr
            assert "function libraries copied to 1 masters" in done.stdout
            assert not _has(masters[-1], lib) and all(_has(m, other) for m in masters)
            assert c.call("FUNCTION", "LIST", "LIBRARYNAME", other).startswith(b"*1\r\n")
            assert c.call("FUNCTION", "DELETE", other) == b"+OK\r\n"
            assert not any(_has(m, other) for m in masters)
    finally:
        _delete_everywhere(cluster_backend, lib)
        _delete_everywhere(cluster_backend, other)


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_stats_answers_as_one_server(slotgate: ManagedProcess, standalone: int,
                                     cluster_backend: ClusterBackend, lib: str,
                                     proto: int) -> None:
    """The counts are those of the set most masters hold: one master with a library more
    (loaded on it directly) does not change them."""
    masters = masters_of(cluster_backend)
    assert len(masters) >= 3
    odd = "x" + lib

    def stats(port: int, odd_master: int | None) -> list[bytes]:
        with RawClient(port) as c:
            if proto == 3:
                c.call("HELLO", "3")
            c.call("FUNCTION", "LOAD", _code(lib))
            try:
                if odd_master is not None:
                    with RawClient(odd_master) as d:
                        assert d.call("FUNCTION", "LOAD", _code(odd)).startswith(b"$")
                return [c.call("FUNCTION", "STATS")]
            finally:
                c.call("FUNCTION", "DELETE", lib)
                if odd_master is not None:
                    with RawClient(odd_master) as d:
                        d.call("FUNCTION", "DELETE", odd)

    try:
        want = stats(standalone, None)
        for m in masters:
            assert stats(slotgate.port, m.port) == want
    finally:
        _delete_everywhere(cluster_backend, lib)
        _delete_everywhere(cluster_backend, odd)
