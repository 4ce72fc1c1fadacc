"""``--workers 2`` is still one server to its clients: MONITOR shows every worker's clients,
CLIENT PAUSE / UNPAUSE hold and release every worker's clients, CLIENT LIST and CLIENT KILL
reach every worker's clients (proxy/front/siblings.py), against a real redis-server cluster."""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.proxy.test_workers import parse_info, start_workers
from tests.support import ManagedProcess, RawClient, wait_until


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory,
            real_cluster: list[ManagedProcess]) -> Iterator[ManagedProcess]:
    proxy, _ = start_workers(tmp_path_factory.mktemp("workers-one"),
                             [n.port for n in real_cluster[:2]])
    try:
        yield proxy
    finally:
        proxy.stop()


def _pid(c: RawClient) -> int:
    return int(parse_info(c.call("INFO", "proxy"))["process_id"])  # (INFO server's is one)


@pytest.fixture
def pair(workers: ManagedProcess) -> Iterator[tuple[RawClient, RawClient]]:
    """Two clients of the proxy, on different workers."""
    first = RawClient(workers.port)
    first_pid = _pid(first)
    extra: list[RawClient] = []
    try:
        for _ in range(200):
            c = RawClient(workers.port)
            if _pid(c) != first_pid:
                break
            extra.append(c)
        else:
            pytest.fail("no connection reached the second worker")
        for e in extra:
            e.close()
        extra = []
        try:
            yield first, c
        finally:
            c.close()
    finally:
        first.close()
        for e in extra:
            e.close()


def _client_id(c: RawClient) -> int:
    return int(c.call("CLIENT", "ID")[1:-2])


def test_a_monitor_sees_the_clients_of_every_worker(
        pair: tuple[RawClient, RawClient]) -> None:
    watcher, other = pair  # the monitor on one worker, the client on the other
    run = uuid.uuid4().hex[:6]
    assert watcher.call("MONITOR") == b"+OK\r\n"
    try:
        # The other worker learns of the monitor through its supervisor: poll until a line
        # arrives, then every later request of that client is shown, in order.
        def seen() -> bool:
            other.call("ECHO", f"probe{run}")
            return not watcher.nothing_pending(0.2)

        wait_until(seen, 10, "the other worker's requests never reached the monitor")
        other.call("SET", f"mon{run}", "v")
        other.call("GET", f"mon{run}")
        other.call("DEL", f"mon{run}")
        lines = []
        while not lines or b'"DEL"' not in lines[-1]:
            lines.append(watcher.read(timeout_s=10))
        shown = [line.split(b"] ", 1)[1] for line in lines if b"probe" not in line]
        assert shown == [f'"SET" "mon{run}" "v"\r\n'.encode(), f'"GET" "mon{run}"\r\n'.encode(),
                         f'"DEL" "mon{run}"\r\n'.encode()]
        # The address is the client's, as its own worker saw it.
        port = other.sock.getsockname()[1]
        assert f"[0 127.0.0.1:{port}] ".encode() in lines[-1]
    finally:
        watcher.call("RESET")


def test_client_pause_holds_the_clients_of_every_worker(
        pair: tuple[RawClient, RawClient]) -> None:
    a, b = pair
    key = f"pause{uuid.uuid4().hex[:6]}"
    assert a.call("CLIENT", "PAUSE", "100000", "WRITE") == b"+OK\r\n"
    try:
        # Once CLIENT PAUSE answered, the other worker holds writes too; reads still go.
        assert b.call("GET", key) == b"$-1\r\n"
        b.send("SET", key, "v")
        assert b.nothing_pending(0.5)
    finally:
        assert a.call("CLIENT", "UNPAUSE") == b"+OK\r\n"
    assert b.read(10) == b"+OK\r\n"
    # An unpause from the other worker ends a pause made on this one.
    assert a.call("CLIENT", "PAUSE", "100000", "WRITE") == b"+OK\r\n"
    a.send("DEL", key)
    assert a.nothing_pending(0.5)
    assert b.call("GET", key) == b"$1\r\nv\r\n"
    assert b.call("CLIENT", "UNPAUSE") == b"+OK\r\n"
    assert a.read(10) == b":1\r\n"


def test_client_pause_all_holds_every_request_of_every_worker(
        pair: tuple[RawClient, RawClient]) -> None:
    a, b = pair
    assert a.call("CLIENT", "PAUSE", "800", "ALL") == b"+OK\r\n"
    b.send("PING")
    assert b.nothing_pending(0.3)
    assert b.read(10) == b"+PONG\r\n"  # when the timeout ends


def test_client_list_and_kill_reach_every_worker(
        pair: tuple[RawClient, RawClient]) -> None:
    a, b = pair
    id_a, id_b = _client_id(a), _client_id(b)
    listed = a.call("CLIENT", "LIST").decode()
    ids = [int(line.split(" ", 1)[0][3:]) for line in listed.split("\r\n", 1)[1].splitlines()
           if line.startswith("id=")]
    assert id_a in ids and id_b in ids
    assert ids == sorted(ids)
    assert f"id={id_a} " in listed and "cmd=client|list" in listed
    only_b = a.call("CLIENT", "LIST", "ID", str(id_b)).decode()
    assert only_b.count("id=") == 1 and f"id={id_b} " in only_b
    assert a.call("CLIENT", "KILL", "ID", str(id_b)) == b":1\r\n"
    assert b.read_until_closed() == b""
    assert a.call("CLIENT", "KILL", "ID", str(id_b)) == b":0\r\n"
    # The old form: an address on the other worker, then one that is nowhere.
    with RawClient(a.sock.getpeername()[1]) as c:
        assert c.call("PING") == b"+PONG\r\n"  # (accepted by its worker)
        addr = f"127.0.0.1:{c.sock.getsockname()[1]}"
        assert a.call("CLIENT", "KILL", addr) == b"+OK\r\n"
        assert c.read_until_closed() == b""
    assert a.call("CLIENT", "KILL", addr) == b"-ERR No such client\r\n"


def test_client_unblock_reaches_a_client_of_another_worker(
        pair: tuple[RawClient, RawClient]) -> None:
    a, b = pair
    id_b = _client_id(b)
    key = f"unb{uuid.uuid4().hex[:6]}"
    b.send("BLPOP", key, "0")

    def unblocked(how: str) -> bool:
        # (1 once the node has the BLPOP blocked: until then there is nothing to unblock)
        return a.call("CLIENT", "UNBLOCK", str(id_b), how) == b":1\r\n"

    wait_until(lambda: unblocked("TIMEOUT"), 10, "the BLPOP never unblocked")
    assert b.read(10) == b"*-1\r\n"
    assert a.call("CLIENT", "UNBLOCK", str(id_b)) == b":0\r\n"
    b.send("BLPOP", key, "0")
    wait_until(lambda: unblocked("ERROR"), 10, "the BLPOP never unblocked")
    assert b.read(10) == b"-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n"


def test_info_counts_the_clients_of_every_worker(pair: tuple[RawClient, RawClient]) -> None:
    """INFO clients sums every worker's: a client blocked on the other worker counts in
    blocked_clients (what job runners wait for), connected_clients is CLIENT LIST's count."""
    a, b = pair
    key = f"infob{uuid.uuid4().hex[:6]}"

    def clients() -> dict[str, str]:
        return parse_info(a.call("INFO", "clients"))

    assert clients()["blocked_clients"] == "0"
    b.send("BLPOP", key, "0")
    wait_until(lambda: clients()["blocked_clients"] == "1", 10, "the blocked client counted")
    listed = a.call("CLIENT", "LIST").decode().count("id=")
    assert int(clients()["connected_clients"]) == listed >= 2
    # Pipelined after INFO, a request's reply still comes after INFO's.
    a.send("INFO", "clients")
    a.send("PING")
    assert a.read(10).startswith(b"$")
    assert a.read(10) == b"+PONG\r\n"
    assert b.nothing_pending(0.1)
    b.close()  # (the BLPOP ends with its client)


def _numbers(value: str) -> dict[str, float]:
    """``calls=3,usec=12,...`` -> its numbers."""
    return {k: float(v) for k, v in (part.split("=") for part in value.split(","))}


def test_info_stats_are_the_whole_proxys(pair: tuple[RawClient, RawClient]) -> None:
    """INFO server, stats, commandstats, errorstats and latencystats through either worker
    are every worker's: counters summed, one server's identity."""
    a, b = pair
    key = f"infos{uuid.uuid4().hex[:6]}"

    def info(c: RawClient) -> dict[str, str]:
        return parse_info(c.call("INFO", "everything"))

    before = info(a)
    assert a.call("SET", key, "v") == b"+OK\r\n"
    for _ in range(3):
        assert a.call("ECHO", "x") == b"$1\r\nx\r\n"
    for _ in range(20):
        assert b.call("ECHO", "x") == b"$1\r\nx\r\n"
    for _ in range(4):
        assert b.call("STRLEN", key) == b":1\r\n"  # (b's worker alone runs STRLEN)
    assert a.call("LPUSH", key, "x").startswith(b"-WRONGTYPE ")
    for _ in range(2):
        assert b.call("LPUSH", key, "x").startswith(b"-WRONGTYPE ")
    after_a, after_b = info(a), info(b)

    def delta(field: str, part: str | None = None) -> float:
        if part is None:
            return float(after_a[field]) - float(before.get(field, 0))
        was = _numbers(before[field])[part] if field in before else 0
        return _numbers(after_a[field])[part] - was

    assert delta("cmdstat_echo", "calls") == 23
    assert delta("cmdstat_strlen", "calls") == 4
    assert delta("cmdstat_lpush", "failed_calls") == 3
    assert delta("errorstat_WRONGTYPE", "count") == 3
    assert delta("total_error_replies") >= 3
    assert delta("total_commands_processed") >= 31
    assert "latency_percentiles_usec_strlen" in after_a
    # Through either worker: the same totals and the same server.
    for field in ("cmdstat_echo", "cmdstat_strlen", "errorstat_WRONGTYPE",
                  "total_connections_received", "rejected_connections", "run_id",
                  "total_error_replies"):
        assert after_a[field] == after_b[field], field
    servers = [parse_info(c.call("INFO", "server")) for c in pair]  # (# Proxy has its own pid)
    assert servers[0]["process_id"] == servers[1]["process_id"] in {str(_pid(a)), str(_pid(b))}
    assert int(after_b["total_commands_processed"]) > int(after_a["total_commands_processed"])
    assert int(after_a["total_connections_received"]) >= int(after_a["connected_clients"]) >= 2
    # CPU: at least both workers' (read first: it only grows); 1/100 s ticks in /proc.
    ticks_s = [sum(int(x) for x in Path(f"/proc/{_pid(c)}/stat").read_text()
                   .rsplit(")", 1)[1].split()[11:13]) / os.sysconf("SC_CLK_TCK") for c in pair]
    cpu = parse_info(a.call("INFO", "cpu"))
    assert float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]) >= sum(ticks_s) - 0.03
    a.call("DEL", key)


def test_tracking_redirect_to_a_client_of_another_worker(
        workers: ManagedProcess, pair: tuple[RawClient, RawClient]) -> None:
    a, b = pair  # a tracks, its invalidations go to b (RESP2, subscribed), on the other worker
    key = f"trw{uuid.uuid4().hex[:6]}"
    id_b = _client_id(b)
    assert b.call("SUBSCRIBE", "__redis__:invalidate").startswith(b"*3\r\n$9\r\nsubscribe")
    assert a.call("CLIENT", "TRACKING", "ON", "REDIRECT", str(id_b)) == b"+OK\r\n"
    assert a.call("CLIENT", "GETREDIR") == b":%d\r\n" % id_b
    try:
        assert a.call("GET", key) == b"$-1\r\n"
        with RawClient(workers.port) as w:
            assert w.call("SET", key, "v") == b"+OK\r\n"
            assert b.read(10) == (b"*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n"
                                  b"*1\r\n$%d\r\n%s\r\n" % (len(key), key.encode()))
            # No such client on any worker: Redis' error, the redirect unchanged.
            assert a.call("CLIENT", "TRACKING", "ON", "REDIRECT", "999999") == (
                b"-ERR The client ID you want redirect to does not exist\r\n")
            # The target gone: the next invalidation finds the redirect broken.
            b.close()
            # (Once its worker has seen it go: an invalidation sent before that still finds
            # the client there, and no later one would come.)
            wait_until(lambda: b"id=%d " % id_b not in a.call("CLIENT", "LIST"), 10,
                       "the redirect's target gone from CLIENT LIST")
            assert a.call("GET", key) == b"$1\r\nv\r\n"
            assert w.call("DEL", key) == b":1\r\n"
            wait_until(lambda: b"broken_redirect" in a.call("CLIENT", "TRACKINGINFO"), 10,
                       "the broken redirect noticed")
    finally:
        a.call("CLIENT", "TRACKING", "OFF")


def test_a_worker_started_again_during_a_pause_holds_its_clients(
        workers: ManagedProcess, pair: tuple[RawClient, RawClient]) -> None:
    """Last in the module: it kills a worker. The supervisor starts it again; told of the
    pause on, it holds its clients' writes until CLIENT UNPAUSE."""
    a, b = pair
    pid_a, pid_b = _pid(a), _pid(b)
    key = f"restart{uuid.uuid4().hex[:6]}"
    assert a.call("CLIENT", "PAUSE", "60000", "WRITE") == b"+OK\r\n"
    try:
        os.kill(pid_b, signal.SIGKILL)  # a worker of this test's own proxy
        fresh: list[RawClient] = []

        def on_new_worker() -> bool:
            c = RawClient(workers.port)
            try:
                if _pid(c) not in (pid_a, pid_b):
                    fresh.append(c)
                    return True
            except (OSError, TimeoutError):
                pass
            c.close()
            return False

        wait_until(on_new_worker, 60, "a connection to the worker started again")
        c = fresh[0]
        try:
            c.send("SET", key, "v")
            assert c.nothing_pending(0.5)  # held
            assert a.call("CLIENT", "UNPAUSE") == b"+OK\r\n"
            assert c.read(10) == b"+OK\r\n"
            assert c.call("DEL", key) == b":1\r\n"
        finally:
            c.close()
    finally:
        a.call("CLIENT", "UNPAUSE")
