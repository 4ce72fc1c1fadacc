"""Scripts in cluster mode, against real redis-server 7.0 in the same cluster layout.

Each side is a cluster of two masters (A: slots 0-8191, B: 8192-16383, full coverage not
required); slot 3300 (key ``b``) is being migrated from A to B. The same lines go to A on
both sides; replies are compared raw, with B's port written as ``PORTB``. Covered: declared
keys served elsewhere (MOVED), in a migrating slot (ASK, TRYAGAIN), across slots (CROSSSLOT),
undeclared keys on another node or in another slot than the declared ones (refused inside
the script, legacy scripts exempt from the slot rule), ``no-cluster`` and
``allow-cross-slot-keys``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.node.diff import show_difference, split_line
from tests.support import (
    ManagedProcess,
    RawClient,
    redis_server,
    running,
    slotgate_node,
    wait_cluster_ok,
    wait_until,
)

LINES = [
    "SET k3 y",  # k3: slot 4576 (on A); b and {b}1: slot 3300 (migrating, {b}1 present)
    "EVAL \"return redis.call('get','a')\" 1 a",  # a: slot 15495 (on B)
    "EVAL \"return 1\" 2 k3 c",
    "EVAL \"return redis.call('get','k3')\" 1 k3",
    "EVAL \"return redis.call('get','k3')\" 0",
    "EVAL \"return redis.call('get','c')\" 1 k3",
    "EVAL \"redis.call('get','k3') return redis.call('get','c')\" 0",
    "EVAL \"return redis.call('get','a')\" 0", "EVAL \"return redis.pcall('get','a')\" 0",
    "EVAL \"return redis.call('mget','k3','c')\" 0",
    "EVAL \"#!lua\nreturn redis.call('get','c')\" 1 k3",
    "EVAL \"#!lua\nredis.call('get','k3') return redis.call('get','c')\" 0",
    "EVAL \"#!lua flags=allow-cross-slot-keys\nreturn redis.call('get','c')\" 1 k3",
    "EVAL \"#!lua flags=allow-cross-slot-keys\nreturn redis.call('get','a')\" 1 k3",
    "EVAL \"#!lua flags=allow-cross-slot-keys\nreturn 1\" 2 k3 c",
    "EVAL \"#!lua flags=no-cluster\nreturn 1\" 0",
    "EVAL \"return redis.call('get','b')\" 1 b",  # migrating, missing: ASK
    "EVAL \"return redis.call('get','{b}1')\" 1 {b}1",  # migrating, present: served
    "EVAL \"return 1\" 2 {b}1 {b}2",  # some present: TRYAGAIN
    "EVAL \"return redis.call('get','b')\" 1 {b}1",
    "EVAL \"return redis.call('get','b')\" 0",
    "EVALSHA ffffffffffffffffffffffffffffffffffffffff 1 a",
    "EVAL_RO \"return redis.call('get','k3')\" 1 k3",
]


def _form(a: ManagedProcess, b: ManagedProcess) -> None:
    ca, cb = a.client(socket_timeout=5), b.client(socket_timeout=5)
    ca.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 8191)
    cb.execute_command("CLUSTER", "ADDSLOTSRANGE", 8192, 16383)
    ca.execute_command("CLUSTER", "MEET", "127.0.0.1", b.port)
    wait_cluster_ok([a, b])
    b_id = cb.execute_command("CLUSTER", "MYID").decode()
    # routing settled: A redirects B's keys (the bus may still be exchanging the first pings)
    wait_until(lambda: _moved(a.port), what="A redirects slot 15495 to B")
    ca.set("{b}1", "x")  # slot 3300, on A before the migration starts
    ca.execute_command("CLUSTER", "SETSLOT", 3300, "MIGRATING", b_id)


def _moved(port: int) -> bool:
    c = RawClient(port)
    try:
        return c.call("GET", "a").startswith(b"-MOVED 15495 ")
    finally:
        c.close()


def _pair(workdir: Path, ours: bool) -> tuple[ManagedProcess, ManagedProcess]:
    extra = ["--cluster-require-full-coverage", "no"]
    if ours:
        return (slotgate_node(workdir, cluster=True, extra=extra),
                slotgate_node(workdir, cluster=True, extra=extra))
    return redis_server(workdir, cluster=True, extra=extra), redis_server(workdir, cluster=True,
                                                                          extra=extra)


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[int, int]]]:
    workdir = tmp_path_factory.mktemp("script-cluster")
    ours, real = _pair(workdir, True), _pair(workdir, False)
    with running(*ours, *real):
        _form(*ours)
        _form(*real)
        yield {"ours": (ours[0].port, ours[1].port), "real": (real[0].port, real[1].port)}


@pytest.mark.parametrize("proto", [2, 3])
def test_cluster_key_checks_match_redis(clusters: dict[str, tuple[int, int]], proto: int) -> None:
    conns = {side: RawClient(ports[0]) for side, ports in clusters.items()}
    problems = []
    try:
        for c in conns.values():
            if proto == 3:
                c.call("HELLO", "3")
        for line in LINES:
            replies = {}
            for side, c in conns.items():
                raw = c.call(*split_line(line))
                replies[side] = raw.replace(str(clusters[side][1]).encode(), b"PORTB")
            if replies["ours"] != replies["real"]:
                problems.append(f"RESP{proto} {line!r}:\n      "
                                + show_difference(replies["ours"], replies["real"]))
    finally:
        for c in conns.values():
            c.close()
    assert not problems, "\n".join(problems)
