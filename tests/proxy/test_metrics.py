"""proxy/ops/metrics.py: the Prometheus export, /metrics and /healthz, the CLI's health probe and
SIGHUP reload, against a real proxy process in front of each cluster backend."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from bisect import bisect_left
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from slotgate.protocol.slots import SLOT_COUNT
from slotgate.proxy.front.latency import LEVELS_S
from slotgate.proxy.ops.metrics import COMMAND_BUCKETS_S, MetricsServer, PrometheusMetrics
from slotgate.proxy.ops.tally import bucket
from slotgate.proxy.routing.topology import SlotMap
from tests.conftest import ClusterBackend
from tests.support import ManagedProcess, free_port, slotgate_proxy, wait_until

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    """Exposition text -> {(sample name, sorted labels): value}, parsed by prometheus-client."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


# --- the export itself (no processes) -------------------------------------------------------

def test_families_names_and_zero_series() -> None:
    m = PrometheusMetrics(process_metrics=False)
    text = m.render().decode()
    assert "_created" not in text
    samples = parse(text)
    families = {f.name: f.type for f in text_string_to_metric_families(text)}
    assert families == {
        "slotgate_commands": "counter", "slotgate_command_duration_seconds": "histogram",
        "slotgate_redirects": "counter", "slotgate_upstream_connection_events": "counter",
        "slotgate_topology_refreshes": "counter",
        "slotgate_topology_refresh_duration_seconds": "histogram",
        "slotgate_slots_covered": "gauge", "slotgate_slot_map_version": "gauge",
        "slotgate_nodes": "gauge", "slotgate_connected_clients": "gauge",
        "slotgate_client_connections": "counter", "slotgate_fanout_requests": "counter",
        "slotgate_fanout_subrequests": "counter", "slotgate_unknown_fate_writes": "counter",
        "slotgate_protocol_errors": "counter", "slotgate_backend_auth_failures": "counter",
        "slotgate_failovers": "counter", "slotgate_cluster_node_online": "gauge",
        "slotgate_replica_lag_bytes": "gauge", "slotgate_client_auth_failures": "counter",
        "slotgate_tls_handshake_failures": "counter",
        "slotgate_policy_reads": "counter", "slotgate_durable_waits": "counter",
    }
    # Counters are exposed with _total.
    assert ("slotgate_unknown_fate_writes_total", ()) in samples
    # Labelled series exist at 0 before any event: every command in the table, every reason.
    assert value(samples, "slotgate_commands_total", command="get", result="ok") == 0
    assert value(samples, "slotgate_commands_total", command="other", result="error") == 0
    assert value(samples, "slotgate_topology_refreshes_total", reason="moved", outcome="ok") == 0
    assert value(samples, "slotgate_nodes", role="replica") == 0
    assert value(samples, "slotgate_client_auth_failures_total", reason="disabled_user") == 0


def test_labels_stay_bounded() -> None:
    m = PrometheusMetrics(process_metrics=False)
    m.command("get", "ok", 0.0002)
    m.command("config|get", "ok", 0.0002)
    m.command("GET", "ok", 0.0002)  # another spelling of a known name
    for i in range(50):
        m.command(f"nosuch{i}", "error", 0.0001)  # names outside the table
    m.command("get", "weird-result", 0.0001)
    m.redirect("MOVED", "10.0.0.1:7000")
    m.redirect("SOMETHING", "10.0.0.1:7000")
    m.upstream("10.0.0.2:7000", "connected")
    samples = parse(m.render().decode())
    assert value(samples, "slotgate_commands_total", command="get", result="ok") == 2
    assert value(samples, "slotgate_commands_total", command="get", result="error") == 1
    assert value(samples, "slotgate_commands_total", command="config", result="ok") == 1
    assert value(samples, "slotgate_commands_total", command="other", result="error") == 50
    commands = {dict(lbl)["command"] for n, lbl in samples if n == "slotgate_commands_total"}
    assert not any(c.startswith("nosuch") or c != c.lower() or "|" in c for c in commands)
    assert value(samples, "slotgate_redirects_total", kind="moved", node="10.0.0.1:7000") == 1
    assert value(samples, "slotgate_redirects_total", kind="other", node="10.0.0.1:7000") == 1
    # A node seen anywhere gets all its series, at 0 where nothing happened.
    assert value(samples, "slotgate_redirects_total", kind="ask", node="10.0.0.2:7000") == 0
    assert value(samples, "slotgate_upstream_connection_events_total",
                 node="10.0.0.1:7000", event="lost") == 0
    # The INFO section's counters keep working.
    assert m.total("redirect", "MOVED") == 1 and m.commands_total == 54


def test_replies_counted_once_whatever_the_reads() -> None:
    """Replies without an error are added into the tables when these are read: every read
    sees each reply once, never twice; split requests are counted the same way."""
    m = PrometheusMetrics(process_metrics=False)
    m.command("get", "ok", 0.0001)
    m.command("get", "ok", 0.0002)
    m.fanout(3)
    for _ in range(2):  # a second read adds nothing
        samples = parse(m.render().decode())
        assert value(samples, "slotgate_commands_total", command="get", result="ok") == 2
        assert value(samples, "slotgate_fanout_requests_total") == 1
        assert value(samples, "slotgate_fanout_subrequests_total") == 3
    m.command("get", "ok", 0.0001)
    samples = parse(m.render().decode())
    assert value(samples, "slotgate_commands_total", command="get", result="ok") == 3
    assert value(samples, "slotgate_command_duration_seconds_count") == 3
    assert m.command_seconds[("get", "ok")] == pytest.approx(0.0004)


def test_latency_histogram_buckets() -> None:
    m = PrometheusMetrics(process_metrics=False)
    assert COMMAND_BUCKETS_S[0] < 0.0001  # sub-millisecond resolution
    for latency_s in (0.0001, 0.0001, 0.0003, 0.002, 30.0):
        m.command("get", "ok", latency_s)
    samples = parse(m.render().decode())

    def bucket(le: str) -> float:
        return value(samples, "slotgate_command_duration_seconds_bucket", le=le)

    assert bucket("0.0001") == 2  # "le" is inclusive
    assert bucket("0.00025") == 2
    assert bucket("0.0005") == 3
    assert bucket("0.0025") == 4
    assert bucket("10.0") == 4
    assert bucket("+Inf") == 5
    assert value(samples, "slotgate_command_duration_seconds_count") == 5
    assert value(samples, "slotgate_command_duration_seconds_sum") == pytest.approx(30.0025)


@given(st.floats(0, 20, allow_nan=False) | st.sampled_from(COMMAND_BUCKETS_S + (0.0, 10.0)))
def test_bucket_is_bisect_left(latency_s: float) -> None:
    """The compiled scan the hot path uses in place of bisect_left, over the exporter's
    buckets and the LATENCY histogram's levels."""
    assert bucket(COMMAND_BUCKETS_S, latency_s) == bisect_left(COMMAND_BUCKETS_S, latency_s)
    assert bucket(tuple(LEVELS_S), latency_s) == bisect_left(LEVELS_S, latency_s)


def test_topology_gauges_read_the_slot_map() -> None:
    m = PrometheusMetrics(process_metrics=False)

    class Topo:
        version = 7
        slot_map = SlotMap(owners=["a:1"] * 100 + [None] * (SLOT_COUNT - 100),
                           replicas={"a:1": ["b:1", "c:1"]}, masters=["a:1"])

    m.topology = Topo()
    samples = parse(m.render().decode())
    assert value(samples, "slotgate_slots_covered") == 100
    assert value(samples, "slotgate_slot_map_version") == 7
    assert value(samples, "slotgate_nodes", role="master") == 1
    assert value(samples, "slotgate_nodes", role="replica") == 2
    assert value(samples, "slotgate_redirects_total", kind="moved", node="c:1") == 0


async def http_raw(port: int, request: bytes) -> bytes:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(request)
        data = b""
        while chunk := await stream.receive_some(65536):
            data += chunk
    return data


async def test_http_server_edges() -> None:
    """Bad requests get HTTP errors; a failing collector answers 500 and the server lives on."""
    m = PrometheusMetrics(process_metrics=False)
    port = free_port()
    async with trio.open_nursery() as nursery:
        await nursery.start(MetricsServer(m, "127.0.0.1", port).run)
        ok = await http_raw(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        assert ok.startswith(b"HTTP/1.1 200 OK\r\n") and b"slotgate_commands_total" in ok
        assert (await http_raw(port, b"garbage\r\n\r\n")).startswith(b"HTTP/1.1 400 ")
        huge = b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n"
        assert (await http_raw(port, huge)).startswith(b"HTTP/1.1 431 ")
        unhealthy = await http_raw(port, b"GET /healthz HTTP/1.0\r\n\r\n")
        assert unhealthy.startswith(b"HTTP/1.1 503 ")
        assert unhealthy.endswith(f"slots covered 0/{SLOT_COUNT}\n".encode())

        class Broken:
            @property
            def slot_map(self) -> None:
                raise RuntimeError("boom")

        m.topology = Broken()
        assert (await http_raw(port, b"GET /metrics HTTP/1.1\r\n\r\n")).startswith(
            b"HTTP/1.1 500 ")
        m.topology = None
        assert (await http_raw(port, b"GET /metrics HTTP/1.1\r\n\r\n")).startswith(
            b"HTTP/1.1 200 ")
        nursery.cancel_scope.cancel()


# --- a real proxy process -------------------------------------------------------------------

def get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


def wait_healthy(url: str, timeout_s: float = 20.0) -> str:
    last = [""]

    def healthy() -> str | None:
        try:
            status, _, body = get(url)
        except urllib.error.URLError as exc:  # not listening yet: the proxy port opens first
            last[0] = repr(exc)
            return None
        last[0] = f"{status} {body}"
        return body if status == 200 else None

    return wait_until(healthy, timeout_s, lambda: f"/healthz to be 200: {last[0]}",
                      interval_s=0.1)


class Running:
    def __init__(self, proc: ManagedProcess, metrics_port: int) -> None:
        self.proc = proc
        self.base = f"http://127.0.0.1:{metrics_port}"

    def scrape(self) -> Samples:
        status, ctype, body = get(self.base + "/metrics")
        assert status == 200 and ctype.startswith("text/plain"), (status, ctype)
        return parse(body)


@pytest.fixture(scope="module")
def proxy(cluster_backend: ClusterBackend,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    mport = free_port()
    proc = slotgate_proxy(tmp_path_factory.mktemp("proxy-metrics"), cluster_backend.ports[:1],
                          extra=["--metrics", f"127.0.0.1:{mport}"]).start()
    try:
        yield Running(proc, mport)
    finally:
        proc.stop()


def test_healthz_ready_and_topology_gauges(proxy: Running, cluster_backend: ClusterBackend) -> None:
    body = wait_healthy(proxy.base + "/healthz")
    assert body.startswith(f"ok: {SLOT_COUNT}/{SLOT_COUNT} slots")
    samples = proxy.scrape()
    assert value(samples, "slotgate_slots_covered") == SLOT_COUNT
    assert value(samples, "slotgate_nodes", role="master") == 3
    # Replicas count once they are in sync ("online" in CLUSTER SHARDS) and the map refreshed.
    def replicas_counted() -> bool:
        nonlocal samples
        samples = proxy.scrape()
        return value(samples, "slotgate_nodes", role="replica") == 3

    if value(samples, "slotgate_nodes", role="replica") != 3:
        wait_until(replicas_counted, 20, lambda: "3 replicas in slotgate_nodes, not "
                   f"{value(samples, 'slotgate_nodes', role='replica')}", interval_s=0.2)
    assert value(samples, "slotgate_topology_refreshes_total", reason="startup", outcome="ok") >= 1
    # Every cluster node has its series from the start.
    for n in cluster_backend.nodes:
        assert value(samples, "slotgate_redirects_total", kind="moved", node=f"127.0.0.1:{n.port}") >= 0
    # HEAD works; other paths and methods do not.
    req = urllib.request.Request(proxy.base + "/healthz", method="HEAD")
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.status == 200 and resp.read() == b""
    assert get(proxy.base + "/nope")[0] == 404
    req = urllib.request.Request(proxy.base + "/metrics", data=b"x", method="POST")
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(req, timeout=5)
    assert exc.value.code == 405


def test_counters_move(proxy: Running) -> None:
    wait_healthy(proxy.base + "/healthz")
    before = proxy.scrape()
    client = proxy.proc.client(socket_timeout=5, protocol=2)
    keys = [f"metrics-key-{i}" for i in range(20)]
    for k in keys:
        client.set(k, "v")
    for k in keys:
        assert client.get(k) == b"v"
    with pytest.raises(Exception, match="unknown command"):
        client.execute_command("NOSUCHCOMMAND")
    assert client.mget(keys) == [b"v"] * 20  # crosses slots: a fan-out
    during = proxy.scrape()
    client.close()

    def delta(name: str, **labels: str) -> float:
        return value(during, name, **labels) - value(before, name, **labels)

    assert delta("slotgate_commands_total", command="set", result="ok") == 20
    assert delta("slotgate_commands_total", command="get", result="ok") == 20
    assert delta("slotgate_commands_total", command="other", result="error") == 1
    assert delta("slotgate_commands_total", command="mget", result="ok") == 1
    assert delta("slotgate_command_duration_seconds_count") >= 42
    assert delta("slotgate_fanout_requests_total") == 1
    assert delta("slotgate_fanout_subrequests_total") >= 2
    assert delta("slotgate_client_connections_total") >= 1
    assert value(during, "slotgate_connected_clients") >= 1
    connected = sum(v for (n, lbl), v in during.items()
                    if n == "slotgate_upstream_connection_events_total"
                    and dict(lbl)["event"] == "connected")
    assert connected >= 3  # one pipelined connection per master at least
    assert "process_resident_memory_bytes" in {n for n, _ in during}


def test_protocol_errors_counted(proxy: Running) -> None:
    import socket

    before = value(proxy.scrape(), "slotgate_protocol_errors_total")
    with socket.create_connection(("127.0.0.1", proxy.proc.port), timeout=5) as s:
        s.sendall(b"*1\r\n$abc\r\n")
        assert s.recv(100).startswith(b"-ERR Protocol error")
    wait_until(lambda: value(proxy.scrape(), "slotgate_protocol_errors_total") != before, 5,
               "the protocol error counted")


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "slotgate.proxy", *args], capture_output=True, text=True,
                          timeout=30, stdin=subprocess.DEVNULL)


def test_check_health_cli(proxy: Running) -> None:
    wait_healthy(proxy.base + "/healthz")
    ok = run_cli("--check-health", proxy.base + "/healthz")
    assert ok.returncode == 0 and ok.stdout.startswith("200 ok:"), ok
    refused = run_cli("--check-health", f"http://127.0.0.1:{free_port()}/healthz")
    assert refused.returncode == 1 and "unhealthy" in refused.stdout, refused


def test_healthz_503_without_coverage(tmp_path: Path) -> None:
    """A proxy whose only seed is down covers no slot: 503, and the CLI probe says so."""
    mport = free_port()
    proc = slotgate_proxy(tmp_path, [f"127.0.0.1:{free_port(cluster=True)}"],
                          extra=["--metrics", f"127.0.0.1:{mport}"]).start()
    try:
        url = f"http://127.0.0.1:{mport}/healthz"
        wait_for_http(url)
        status, _, body = get(url)
        assert status == 503 and body.strip() == f"slots covered 0/{SLOT_COUNT}"
        probe = run_cli("--check-health", url)
        assert probe.returncode == 1 and probe.stdout.startswith("503 slots covered 0/"), probe
    finally:
        proc.stop()


def wait_for_http(url: str, timeout_s: float = 10.0) -> None:
    wait_until(lambda: get(url), timeout_s, f"an answer from {url}",
               ignore=(urllib.error.URLError,))


def wait_log(proc: ManagedProcess, pattern: str, timeout_s: float = 10.0) -> str:
    def found() -> str | None:
        text = proc.log_text()
        return text if re.search(pattern, text) else None

    return wait_until(found, timeout_s, lambda: f"{pattern!r} in log:\n{proc.log_text()[-2000:]}")


def test_sighup_reload_keeps_clients(cluster_backend: ClusterBackend, tmp_path: Path) -> None:
    port = free_port()
    seed = f"127.0.0.1:{cluster_backend.ports[0]}"
    cfg = tmp_path / "proxy.yaml"
    cfg.write_text(f'listen: "127.0.0.1:{port}"\nseeds: ["{seed}"]\nlog_level: info\n')
    proc = ManagedProcess([sys.executable, "-m", "slotgate.proxy", "--config", str(cfg)], port, tmp_path,
                          "proxy.log").start()
    try:
        client = proc.client(socket_timeout=5, protocol=2)
        assert client.set("reload-key", "1")
        # A reloadable change and a restart-only change.
        cfg.write_text(f'listen: "127.0.0.1:{free_port()}"\nseeds: ["{seed}"]\n'
                       'log_level: debug\nbackend:\n  command_timeout: 2s\n')
        os.kill(proc.pid, signal.SIGHUP)
        text = wait_log(proc, r"reload: applied")
        assert "reload: listen changed; it takes effect after a restart" in text
        assert re.search(r"reload: applied log_level, backend\.command_timeout", text)
        assert client.get("reload-key") == b"1"  # same connection, still served
        # A broken file is refused as a whole; the proxy keeps running.
        cfg.write_text("backend:\n  command_timeout: fast\n")
        os.kill(proc.pid, signal.SIGHUP)
        text = wait_log(proc, r"reload refused")
        assert 'config error: backend.command_timeout: expected a duration like "500ms" or "2s", got "fast"' in text
        assert client.get("reload-key") == b"1"
        assert proc.alive()
        client.close()
    finally:
        proc.stop()
