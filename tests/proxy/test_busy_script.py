"""A long script on one master, through the proxy, against a cluster of real redis-servers and
one of our bundled nodes (the same tests, each module fixture once per kind).

The other masters' slots stay served, SCRIPT KILL through the proxy reaches the busy master on
a connection of its own and ends the script, the script's client gets Redis' own killed-script
error, requests to the busy master wait (``-BUSY`` is retried) instead of failing, and no node
connection is declared dead although the script outlives the backend command timeout.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slotgate.protocol.slots import key_slot
from tests.proxy.test_backend_auth import metrics
from tests.support import (
    ManagedProcess,
    RawClient,
    create_cluster,
    free_port,
    redis_server,
    running,
    slotgate_node,
    slotgate_proxy,
    start_all,
    wait_until,
)

LOOP = b"while true do end"
WRITE_THEN_LOOP = b"redis.call('set', KEYS[1], 'w') while true do end"
COMMAND_TIMEOUT_S = 1.0


class Setup:
    def __init__(self, nodes: list[ManagedProcess], proxy: ManagedProcess,
                 metrics_port: int) -> None:
        self.nodes = nodes
        self.proxy = proxy
        self.metrics_port = metrics_port
        self.keys: dict[int, bytes] = {}  # node port -> a key that master owns
        ranges = RawClient(nodes[0].port).call("CLUSTER", "SLOTS")
        owners = _slot_owners(ranges)
        for i in range(10000):
            key = b"k%d" % i
            port = owners(key_slot(key))
            self.keys.setdefault(port, key)
            if len(self.keys) == len(nodes):
                break


def _slot_owners(raw: bytes) -> object:
    import hiredis

    reader = hiredis.Reader()
    reader.feed(raw)
    table = [(int(r[0]), int(r[1]), int(r[2][1])) for r in reader.gets()]

    def owner(slot: int) -> int:
        return next(port for lo, hi, port in table if lo <= slot <= hi)

    return owner


@pytest.fixture(scope="module", params=["real", "ours"])
def busy(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Setup]:
    work: Path = tmp_path_factory.mktemp("busy")
    start = redis_server if request.param == "real" else slotgate_node
    nodes = [start(work, cluster=True, extra=["--busy-reply-threshold", "100"])
             for _ in range(3)]
    procs: list[ManagedProcess] = []
    try:
        procs.extend(start_all(nodes))
        create_cluster(nodes, replicas=0)
        cfg = work / "proxy.yaml"
        cfg.write_text(f"backend:\n  command_timeout: {int(COMMAND_TIMEOUT_S * 1000)}ms\n")
        metrics_port = free_port()
        proxy = slotgate_proxy(work, [n.port for n in nodes],
                               ["--config", str(cfg), "--metrics", f"127.0.0.1:{metrics_port}"])
        procs.append(proxy)
        proxy.start()
        yield Setup(nodes, proxy, metrics_port)
    finally:
        for p in procs:
            p.stop()


def _busy(port: int) -> bool:
    c = RawClient(port, timeout_s=5)
    try:
        return c.call("PING").startswith(b"-BUSY ")
    finally:
        c.close()


def _dead_connection_events(port: int) -> float:
    return sum(v for (name, labels), v in metrics(port).items()
               if name == "slotgate_upstream_connection_events_total"
               and dict(labels).get("event") in ("lost", "timeout"))


def _killed_error_direct(node: ManagedProcess) -> bytes:
    """What redis-server itself sends the client of a looping script killed by SCRIPT KILL."""
    runner = RawClient(node.port)
    runner.send("EVAL", LOOP, "0")
    wait_until(lambda: _busy(node.port), timeout_s=10)
    assert RawClient(node.port).call("SCRIPT", "KILL") == b"+OK\r\n"
    return runner.read()


def test_notbusy_when_no_master_is_busy(busy: Setup) -> None:
    direct = RawClient(busy.nodes[0].port).call("SCRIPT", "KILL")
    assert direct.startswith(b"-NOTBUSY")
    assert RawClient(busy.proxy.port).call("SCRIPT", "KILL") == direct
    direct = RawClient(busy.nodes[0].port).call("FUNCTION", "KILL")
    assert RawClient(busy.proxy.port).call("FUNCTION", "KILL") == direct


def test_looping_script_killed_through_proxy(busy: Setup) -> None:
    busy_node, *others = busy.nodes
    expected_error = _killed_error_direct(busy_node)
    dead_before = _dead_connection_events(busy.metrics_port)
    key = busy.keys[busy_node.port]
    RawClient(busy.proxy.port).call("SET", key, "before")

    runner = RawClient(busy.proxy.port)
    runner.send("EVAL", LOOP, "1", key)
    wait_until(lambda: _busy(busy_node.port), timeout_s=10)
    # A request for the busy master's slot: answered after the kill, not failed.
    waiter = RawClient(busy.proxy.port)
    waiter.send("GET", key)

    # The other masters' slots keep being served, longer than the backend command timeout.
    client = RawClient(busy.proxy.port, timeout_s=5)
    served = 0
    until = time.monotonic() + 3 * COMMAND_TIMEOUT_S
    while time.monotonic() < until:
        for n in others:
            other_key = busy.keys[n.port]
            assert client.call("SET", other_key, "v") == b"+OK\r\n"
            assert client.call("GET", other_key) == b"$1\r\nv\r\n"
            served += 2
        time.sleep(0.01)
    assert served > 0
    assert _busy(busy_node.port)  # still looping

    killer = RawClient(busy.proxy.port, timeout_s=10)
    t0 = time.monotonic()
    assert killer.call("SCRIPT", "KILL") == b"+OK\r\n"
    killed = runner.read(timeout_s=10)
    elapsed_s = time.monotonic() - t0
    print(f"SCRIPT KILL through the proxy ended the script in {elapsed_s * 1000:.1f} ms")
    assert elapsed_s < 5.0
    assert killed == expected_error
    assert waiter.read(timeout_s=10) == b"$6\r\nbefore\r\n"
    assert RawClient(busy.proxy.port).call("SCRIPT", "KILL").startswith(b"-NOTBUSY")
    assert _dead_connection_events(busy.metrics_port) == dead_before


def test_busy_master_requests_wait_and_kill(busy: Setup) -> None:
    """A script started on the master itself: the proxy's requests to it get ``-BUSY`` on its
    shared connection; they wait (retried) instead of failing, and the proxy's SCRIPT KILL,
    on a connection of its own, ends the script."""
    node = busy.nodes[2]
    key = busy.keys[node.port]
    RawClient(busy.proxy.port).call("SET", key, "here")
    dead_before = _dead_connection_events(busy.metrics_port)
    runner = RawClient(node.port)
    runner.send("EVAL", LOOP, "0")
    wait_until(lambda: _busy(node.port), timeout_s=10)
    waiter = RawClient(busy.proxy.port)
    waiter.send("GET", key)
    assert waiter.nothing_pending(wait_s=2 * COMMAND_TIMEOUT_S)  # waiting, not failed
    t0 = time.monotonic()
    assert RawClient(busy.proxy.port, timeout_s=10).call("SCRIPT", "KILL") == b"+OK\r\n"
    assert runner.read(timeout_s=10).startswith(b"-ERR ")
    assert waiter.read(timeout_s=10) == b"$4\r\nhere\r\n"
    print(f"direct script killed through the proxy in {(time.monotonic() - t0) * 1000:.1f} ms")
    assert _dead_connection_events(busy.metrics_port) == dead_before


def test_silent_busy_node_is_not_declared_dead(busy: Setup) -> None:
    """A script started on the node itself with a busy threshold above the command timeout:
    the node answers nobody for a while, a GET waits on the shared connection longer than
    the command timeout, and the probe on a connection of its own (answered ``-BUSY`` once the
    threshold passes) keeps the connection alive."""
    node = busy.nodes[0]
    key = busy.keys[node.port]
    RawClient(busy.proxy.port).call("SET", key, "quiet")
    admin = RawClient(node.port)
    assert admin.call("CONFIG", "SET", "busy-reply-threshold", "1600") == b"+OK\r\n"
    dead_before = _dead_connection_events(busy.metrics_port)
    runner = RawClient(node.port)
    try:
        runner.send("EVAL", LOOP, "0")
        time.sleep(0.1)
        waiter = RawClient(busy.proxy.port)
        waiter.send("GET", key)
        wait_until(lambda: _busy(node.port), timeout_s=10)
        assert RawClient(busy.proxy.port, timeout_s=10).call("SCRIPT", "KILL") == b"+OK\r\n"
        assert runner.read(timeout_s=10).startswith(b"-ERR ")
        assert waiter.read(timeout_s=10) == b"$5\r\nquiet\r\n"
        assert _dead_connection_events(busy.metrics_port) == dead_before
    finally:
        RawClient(node.port).call("CONFIG", "SET", "busy-reply-threshold", "100")


LOOP_LIBRARY = ("#!lua name=busylib\n"
                "redis.register_function('busyloop', function(keys, args) while true do end end)")
_DURATION = re.compile(rb"(duration_ms\r\n):\d+\r\n")


def _stats_while_busy(port: int, node_port: int, keys: list[str]) -> list[bytes]:
    """FUNCTION STATS (RESP2, RESP3) while a function loops on the server at ``node_port``,
    then FUNCTION KILL and STATS again; the running time masked."""
    seen = []
    with RawClient(port) as admin, RawClient(port) as runner, RawClient(port) as c3:
        seen.append(admin.call("FUNCTION", "LOAD", LOOP_LIBRARY))
        try:
            runner.send("FCALL", "busyloop", str(len(keys)), *keys)
            wait_until(lambda: _busy(node_port), timeout_s=10)
            c3.call("HELLO", "3")
            for c in (admin, c3):
                seen.append(_DURATION.sub(rb"\1:<ms>\r\n", c.call("FUNCTION", "STATS")))
            seen.append(admin.call("FUNCTION", "KILL"))
            seen.append(runner.read(timeout_s=10))
            seen.append(admin.call("FUNCTION", "STATS"))
        finally:
            seen.append(admin.call("FUNCTION", "DELETE", "busylib"))
    return seen


def test_function_stats_while_busy_matches_standalone(
        busy: Setup, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The busy master's running function shows in the proxy's FUNCTION STATS, as in one
    server's; the libraries counted once."""
    node = busy.nodes[0]
    key = busy.keys[node.port].decode()
    alone = redis_server(tmp_path_factory.mktemp("stats-alone"),
                         extra=["--busy-reply-threshold", "100"])
    with running(alone):
        want = _stats_while_busy(alone.port, alone.port, [key])
    assert b"busyloop" in want[1] and b"busyloop" in want[2]
    assert _stats_while_busy(busy.proxy.port, node.port, [key]) == want


def test_writing_script_is_unkillable(busy: Setup) -> None:
    """Last in the module: it ends the busy master with SHUTDOWN NOSAVE."""
    node = busy.nodes[1]
    runner = RawClient(busy.proxy.port)
    runner.send("EVAL", WRITE_THEN_LOOP, "1", busy.keys[node.port])
    wait_until(lambda: _busy(node.port), timeout_s=10)
    try:
        through_proxy = RawClient(busy.proxy.port, timeout_s=10).call("SCRIPT", "KILL")
        assert through_proxy.startswith(b"-UNKILLABLE")
        assert RawClient(node.port).call("SCRIPT", "KILL") == through_proxy
    finally:
        stopper = RawClient(node.port)
        stopper.send("SHUTDOWN", "NOSAVE")
        assert node.proc is not None
        node.proc.wait(timeout=10)
