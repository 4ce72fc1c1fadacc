"""``--workers N``: a supervisor and N proxy processes on one address (SO_REUSEPORT), against a
real redis-server cluster. Every process is a real one; every one is stopped by PID."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from slotgate.protocol.slots import key_slot
from tests.conftest import ClusterBackend
from tests.proxy.test_redirects import slot_owner
from tests.support import (
    ManagedProcess,
    RawClient,
    free_port,
    pid_alive,
    slotgate_proxy,
    wait_blocked,
    wait_until,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def seeds(real_cluster: list[ManagedProcess]) -> list[int]:
    return [n.port for n in real_cluster[:2]]


def start_workers(tmp_path: Path, seeds: list[int], workers: int = 2) -> tuple[ManagedProcess, int]:
    metrics_port = free_port()
    proxy = slotgate_proxy(tmp_path, seeds, ["--workers", str(workers),
                                             "--metrics", f"127.0.0.1:{metrics_port}"])
    proxy.start(timeout_s=60)  # the first worker listens
    wait_until(lambda: f"({workers} workers)" in proxy.log_text(), 60, "workers not all ready")
    return proxy, metrics_port


def info_proxy(port: int) -> dict[str, str]:
    with RawClient(port) as c:
        return parse_info(c.call("INFO", "proxy"))


def parse_info(frame: bytes) -> dict[str, str]:
    body = frame.split(b"\r\n", 1)[1].decode()
    return dict(line.split(":", 1) for line in body.splitlines() if ":" in line)


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def scrape(metrics_port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - loopback test server
        text = resp.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[s.name, tuple(sorted(s.labels.items()))] = s.value
    return out


def total(samples: dict, name: str) -> float:
    return sum(v for (n, _), v in samples.items() if n == name)


def worker_pids_seen(port: int, connections: int = 40) -> set[int]:
    return {int(info_proxy(port)["process_id"]) for _ in range(connections)}


def test_connections_spread_over_workers_and_all_work(
    seeds: list[int], tmp_path: Path, cleanup: list[ManagedProcess]
) -> None:
    proxy, metrics_port = start_workers(tmp_path, seeds)
    cleanup.append(proxy)
    tag = uuid.uuid4().hex[:6]
    keys = [f"w{tag}:{i}" for i in range(20)]
    assert len({key_slot(k.encode()) for k in keys}) > 10  # spread over the slots (and masters)
    clients = [RawClient(proxy.port) for _ in range(40)]
    sent = 0
    try:
        pids, ids = set(), []
        for i, c in enumerate(clients):
            info = parse_info(c.call("INFO", "proxy"))
            pids.add(int(info["process_id"]))
            assert info["workers"] == "2"
            ids.append(int(c.call("CLIENT", "ID")[1:-2]))
            key = keys[i % len(keys)]
            assert c.call("SET", key, f"v{i}") == b"+OK\r\n"
            assert c.call("GET", key) == f"${len(f'v{i}')}\r\nv{i}\r\n".encode()
            sent += 4
        # Cross-slot MGET from connections on either worker sees every worker's writes.
        expected = b"*20\r\n" + b"".join(b"$3\r\nv%d\r\n" % (20 + i) for i in range(20))
        for c in clients[:10]:
            assert c.call("MGET", *keys) == expected
            sent += 1
        assert clients[0].call("DEL", *keys) == b":20\r\n"
        sent += 1
        # Both workers took connections; CLIENT ID is unique across them.
        assert len(pids) == 2, pids
        assert all(parent_of(pid) == proxy.pid for pid in pids)
        assert len(set(ids)) == len(ids)
        # The merged /metrics: commands summed over the workers, clients summed, the slot map
        # (the same cluster in each worker) not summed.
        samples = scrape(metrics_port)
        assert total(samples, "slotgate_commands_total") == sent
        assert total(samples, "slotgate_command_duration_seconds_count") == sent
        assert samples["slotgate_connected_clients", ()] == 40
        assert samples["slotgate_slots_covered", ()] == 16384
        assert samples["slotgate_workers", ()] == 2
        assert samples["slotgate_worker_scrape_errors_total", ()] == 0
        assert samples["process_cpu_seconds_total", ()] > 0
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/healthz", timeout=10) as r:  # noqa: S310
            assert r.status == 200
            assert r.read().decode().startswith("ok: 2 workers")
    finally:
        for c in clients:
            c.close()


def test_a_killed_worker_is_started_again(
    seeds: list[int], tmp_path: Path, cleanup: list[ManagedProcess]
) -> None:
    proxy, metrics_port = start_workers(tmp_path, seeds)
    cleanup.append(proxy)
    before = worker_pids_seen(proxy.port)
    assert len(before) == 2
    victim = min(before)
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: not pid_alive(victim), 10, "the killed worker is still there")
    # Connections made once it is gone work (those it had not accepted yet were reset), and
    # soon reach a new second worker too.
    wait_until(lambda: (seen := worker_pids_seen(proxy.port, 20)) and victim not in seen
             and len(seen) == 2, 30, "no replacement worker took connections")
    assert proxy.alive()
    with RawClient(proxy.port) as c:
        assert c.call("SET", "afterkill", "1") == b"+OK\r\n"
    samples = scrape(metrics_port)
    assert samples["slotgate_worker_restarts_total", ()] == 1
    assert samples["slotgate_workers", ()] == 2
    assert "exited unexpectedly with status -9" in proxy.log_text()


def test_sigterm_stops_every_worker(
    seeds: list[int], tmp_path: Path, cleanup: list[ManagedProcess]
) -> None:
    proxy, _ = start_workers(tmp_path, seeds, workers=3)
    cleanup.append(proxy)
    pids = worker_pids_seen(proxy.port, 60)
    assert len(pids) == 3
    os.kill(proxy.pid, signal.SIGTERM)
    assert proxy.proc is not None
    assert proxy.proc.wait(20) == 0
    assert [pid for pid in pids if pid_alive(pid)] == []


def test_a_second_signal_stops_at_once_and_orphans_nothing(
    seeds: list[int], real_cluster: list[ManagedProcess], tmp_path: Path,
    cleanup: list[ManagedProcess]
) -> None:
    proxy, _ = start_workers(tmp_path, seeds)
    cleanup.append(proxy)
    pids = worker_pids_seen(proxy.port)
    assert len(pids) == 2
    owner = slot_owner(ClusterBackend("real", real_cluster), key_slot(b"q-nothing"))
    with RawClient(proxy.port) as c:
        # A blocking command in flight keeps its worker stopping (it runs to its end); the
        # second signal, forwarded, gives it up: every worker is gone well before its 20 s.
        c.send_raw(b"*3\r\n$5\r\nBLPOP\r\n$9\r\nq-nothing\r\n$2\r\n20\r\n")
        wait_blocked(owner.port, 1)
        started = time.monotonic()
        os.kill(proxy.pid, signal.SIGTERM)
        time.sleep(0.3)  # the scenario: a while after the first signal, still stopping
        assert proxy.alive()
        os.kill(proxy.pid, signal.SIGINT)
        assert c.read_until_closed() == b""
        assert proxy.proc is not None
        assert proxy.proc.wait(15) == 0
        assert time.monotonic() - started < 5
    assert [pid for pid in pids if pid_alive(pid)] == []


def test_workers_stop_when_the_supervisor_is_killed(
    seeds: list[int], tmp_path: Path, cleanup: list[ManagedProcess]
) -> None:
    proxy, _ = start_workers(tmp_path, seeds)
    cleanup.append(proxy)
    pids = worker_pids_seen(proxy.port)
    assert len(pids) == 2
    proxy.kill()
    wait_until(lambda: not any(pid_alive(pid) for pid in pids), 15, f"orphaned workers {pids}")


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "slotgate.proxy", *args], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL, cwd=REPO)


@pytest.mark.parametrize("value", ["0", "65", "two", "-1"])
def test_bad_workers_flag_is_a_config_error(value: str) -> None:
    bad = run_cli("--seed", "127.0.0.1:7000", "--workers", value, "--check-config")
    assert bad.returncode == 2
    shown = value if value.isdigit() else f'"{value}"'
    assert bad.stderr == f"config error: --workers: expected a whole number from 1 to 64, got {shown}\n"


@pytest.mark.parametrize(("value", "shown"), [("0", "0"), ("100", "100"), ('"2"', '"2"'),
                                                ("1.5", "1.5"), ("true", "true")])
def test_bad_workers_in_the_file_is_a_config_error(tmp_path: Path, value: str, shown: str) -> None:
    path = tmp_path / "proxy.yaml"
    path.write_text(f'seeds: ["127.0.0.1:7000"]\nworkers: {value}\n')
    bad = run_cli("--config", str(path))
    assert bad.returncode == 2
    assert bad.stderr == f"config error: workers: expected a whole number from 1 to 64, got {shown}\n"


def test_workers_flag_overrides_the_file(tmp_path: Path) -> None:
    path = tmp_path / "proxy.yaml"
    path.write_text('seeds: ["127.0.0.1:7000"]\nworkers: 4\n')
    assert "workers: 4" in run_cli("--config", str(path), "--check-config").stdout.splitlines()
    ok = run_cli("--config", str(path), "--workers", "3", "--check-config")
    assert ok.returncode == 0
    assert "workers: 3" in ok.stdout.splitlines()


def test_address_in_use_fails_to_start_with_a_clear_message() -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = run_cli("--listen", f"127.0.0.1:{taken.getsockname()[1]}",
                       "--seed", "127.0.0.1:1", "--workers", "2")
    assert busy.returncode == 1
    assert busy.stderr.splitlines()[-1] == "slotgate-proxy: [Errno 98] Address already in use"
    assert "Traceback" not in busy.stderr



def test_a_worker_that_does_not_answer_is_left_out_and_counted(
    seeds: list[int], tmp_path: Path, cleanup: list[ManagedProcess]
) -> None:
    proxy, metrics_port = start_workers(tmp_path, seeds)
    cleanup.append(proxy)
    by_pid: dict[int, int] = {}  # worker pid -> commands sent to it
    for _ in range(30):
        with RawClient(proxy.port) as c:
            pid = int(parse_info(c.call("INFO", "proxy"))["process_id"])
            assert c.call("PING") == b"+PONG\r\n"
            by_pid[pid] = by_pid.get(pid, 0) + 2
    assert len(by_pid) == 2
    assert total(scrape(metrics_port), "slotgate_commands_total") == sum(by_pid.values())
    frozen, running = sorted(by_pid)
    os.kill(frozen, signal.SIGSTOP)
    try:
        samples = scrape(metrics_port)
        assert total(samples, "slotgate_commands_total") == by_pid[running]
        assert samples["slotgate_worker_scrape_errors_total", ()] == 1
        with pytest.raises(urllib.error.HTTPError) as exc:
            urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/healthz", timeout=10)  # noqa: S310
        assert exc.value.code == 503
        assert "worker" in exc.value.read().decode()
    finally:
        os.kill(frozen, signal.SIGCONT)
    samples = scrape(metrics_port)
    assert total(samples, "slotgate_commands_total") == sum(by_pid.values())
    assert samples["slotgate_worker_scrape_errors_total", ()] == 1


def test_one_worker_is_one_plain_process(
    seeds: list[int], tmp_path: Path, cleanup: list[ManagedProcess]
) -> None:
    proxy = slotgate_proxy(tmp_path, seeds, ["--workers", "1"]).start()
    cleanup.append(proxy)
    info = info_proxy(proxy.port)
    assert (int(info["process_id"]), info["worker_index"], info["workers"]) == (proxy.pid, "0", "1")
    with RawClient(proxy.port) as a, RawClient(proxy.port) as b:
        ids = [int(c.call("CLIENT", "ID")[1:-2]) for c in (a, b)]
    assert ids[1] == ids[0] + 1  # one sequence, as before workers existed
    children = [p for p in Path("/proc").glob("[0-9]*") if p.name != str(proxy.pid)
                and pid_alive(int(p.name)) and parent_of(int(p.name)) == proxy.pid]
    assert children == []


def test_merging_sums_counters_and_picks_gauges_deliberately() -> None:
    from slotgate.proxy.ops.metrics_merge import merge_expositions

    def text(commands: int, clients: int, covered: int, start: float) -> str:
        return (
            "# HELP slotgate_commands_total c\n# TYPE slotgate_commands_total counter\n"
            f'slotgate_commands_total{{command="get",result="ok"}} {commands}\n'
            "# HELP slotgate_connected_clients g\n# TYPE slotgate_connected_clients gauge\n"
            f"slotgate_connected_clients {clients}\n"
            "# HELP slotgate_slots_covered g\n# TYPE slotgate_slots_covered gauge\n"
            f"slotgate_slots_covered {covered}\n"
            "# HELP process_start_time_seconds g\n# TYPE process_start_time_seconds gauge\n"
            f"process_start_time_seconds {start}\n"
            "# HELP h h\n# TYPE h histogram\n"
            f'h_bucket{{le="1.0"}} {commands}\nh_bucket{{le="+Inf"}} {commands}\n'
            f"h_sum {commands / 10}\nh_count {commands}\n"
        )

    merged = merge_expositions([text(3, 2, 16384, 100.0), text(4, 5, 16000, 50.0)]).decode()
    samples = {}
    for family in text_string_to_metric_families(merged):
        for s in family.samples:
            samples[s.name, tuple(sorted(s.labels.items()))] = s.value
    assert samples["slotgate_commands_total", (("command", "get"), ("result", "ok"))] == 7
    assert samples["slotgate_connected_clients", ()] == 7
    assert samples["slotgate_slots_covered", ()] == 16384
    assert samples["process_start_time_seconds", ()] == 50.0
    assert samples["h_bucket", (("le", "+Inf"),)] == 7
    assert samples["h_count", ()] == 7
    assert "# TYPE slotgate_commands_total counter" in merged


def test_a_worker_that_keeps_dying_is_restarted_with_backoff(
    seeds: list[int], tmp_path: Path, cleanup: list[ManagedProcess]
) -> None:
    import re

    proxy, metrics_port = start_workers(tmp_path, seeds)
    cleanup.append(proxy)

    def pid_of(index: int, after: int = 0) -> int:
        found = re.findall(rf"worker {index} ready \(pid (\d+)\)", proxy.log_text())
        return int(found[-1]) if len(found) > after else 0

    for kills in range(3):
        pid = pid_of(1, kills)
        assert pid and pid_alive(pid)
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda k=kills: pid_of(1, k + 1), 20, "worker 1 not started again")
    delays = re.findall(r"worker 1 exited unexpectedly with status -9; starting it again in "
                        r"([\d.]+) s", proxy.log_text())
    assert delays == ["0.1", "0.2", "0.4"]
    assert scrape(metrics_port)["slotgate_worker_restarts_total", ()] == 3
    assert len(worker_pids_seen(proxy.port)) == 2


def test_sighup_is_forwarded_to_every_worker(
    seeds: list[int], tmp_path: Path, cleanup: list[ManagedProcess]
) -> None:
    config = tmp_path / "proxy.yaml"
    config.write_text("retry:\n  deadline: 10s\n")
    proxy = slotgate_proxy(tmp_path, seeds, ["--workers", "2", "--config", str(config)])
    proxy.start(timeout_s=60)
    cleanup.append(proxy)
    wait_until(lambda: "(2 workers)" in proxy.log_text(), 60, "workers not all ready")
    config.write_text("retry:\n  deadline: 20s\n")
    os.kill(proxy.pid, signal.SIGHUP)
    for index in (0, 1):
        wait_until(lambda i=index: f"worker-{i} proxy.config: reload: applied retry.deadline"
                 in proxy.log_text(), 10, f"worker {index} did not reload")
    assert proxy.alive()
