"""`slotgate up`, the embedded default: bundled nodes + proxy on loopback, one command."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import redis

from tests.support import _port_free, during, free_port, pid_alive, wait_until


def _consecutive_cluster_ports(n: int) -> int:
    for _ in range(200):
        base = free_port(cluster=True)
        if all(_port_free(base + i) and _port_free(base + i + 10000) for i in range(n)):
            return base
    raise RuntimeError("no run of free cluster ports")


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    return [int(x) for x in out.stdout.split()]


UP = [sys.executable, "-m", "slotgate.proxy.ops.cli"]


def read_until_up(proc: subprocess.Popen[str]) -> list[str]:
    """``up``'s output up to its "slotgate is up" line (asserted to come)."""
    lines = []
    assert proc.stdout is not None
    for _ in during(90, interval_s=0):
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith("slotgate is up"):
            break
    assert any(ln.startswith("slotgate is up") for ln in lines), "".join(lines)
    return lines


def kill_leftovers(proc: subprocess.Popen[str], children: list[int]) -> None:
    """After a failed test: the up process and what it started, killed by PID."""
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)
    for c in children:
        if pid_alive(c):
            os.kill(c, signal.SIGKILL)


def _up_args(tmp_path: Path, replicas: int, backend: str) -> tuple[list[str], int, int]:
    n_nodes = 3 * (1 + replicas)
    base = _consecutive_cluster_ports(n_nodes)
    port, metrics = free_port(), free_port()
    return (["up", "--node-base-port", str(base), "--port", str(port), "--metrics",
             f"127.0.0.1:{metrics}", "--data-dir", str(tmp_path / "data"), "--replicas",
             str(replicas), "--node-timeout-ms", "2000", "--backend", backend], port, metrics)


@pytest.mark.parametrize("backend", ["bundled", "redis-server"])
def test_up_serves_whole_cluster_and_stops_everything(tmp_path: Path, backend: str) -> None:
    replicas = 1
    n_nodes = 3 * (1 + replicas)
    words, port, metrics = _up_args(tmp_path, replicas, backend)
    argv = [*UP, *words]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=tmp_path)
    children: list[int] = []
    try:
        lines = read_until_up(proc)
        assert proc.stdout is not None
        for _ in range(5):  # the rest of the summary
            lines.append(proc.stdout.readline())
        text = "".join(lines)
        data = tmp_path / "data"
        assert f"proxy     127.0.0.1:{port}" in text and f"data dir  {data}" in text, text
        assert f"http://127.0.0.1:{metrics}/metrics" in text and "Ctrl-C" in text
        assert f"nodes     {backend}: 3 masters x 1 replicas" in text
        children = _children(proc.pid)
        assert len(children) == n_nodes + 1  # nodes + proxy
        exe = "redis-server" if backend == "redis-server" else "slotgate.node"
        assert sum(exe in Path(f"/proc/{c}/cmdline").read_text() for c in children) == n_nodes
        recorded = (data / "slotgate-up.children").read_text().split()
        assert sorted(recorded[0::3], key=int) == sorted(str(c) for c in children)

        r = redis.Redis(port=port, socket_timeout=5)
        keys = [f"key:{i}".encode() for i in range(300)]
        for k in keys:
            assert r.set(k, k[::-1])
        assert [v for v in r.mget(keys)] == [k[::-1] for k in keys]  # cross-slot MGET
        assert r.dbsize() == len(keys)
        assert r.delete(*keys) == len(keys)

        with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/healthz", timeout=5) as resp:
            assert resp.status == 200
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=5) as resp:
            assert b"slotgate_" in resp.read()

        # Impatient operators press Ctrl-C twice: the second must not orphan any child.
        proc.send_signal(signal.SIGINT)
        time.sleep(0.05)  # the scenario: a second Ctrl-C a moment after the first
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
        wait_until(lambda: not any(pid_alive(c) for c in children), 10,
                   lambda: f"no child left: {[c for c in children if pid_alive(c)]}",
                   interval_s=0.1)
        assert [c for c in children if pid_alive(c)] == []
    finally:
        kill_leftovers(proc, children)


def test_up_detach_then_down(tmp_path: Path) -> None:
    words, port, metrics = _up_args(tmp_path, 0, "bundled")
    data = tmp_path / "data"
    started: list[int] = []
    try:
        out = subprocess.run([*UP, *words, "--detach"], capture_output=True, text=True,
                             timeout=180, cwd=tmp_path)
        assert out.returncode == 0, out.stdout + out.stderr
        assert out.stdout.startswith("slotgate is up") and "detached  pid " in out.stdout
        assert f"slotgate down --data-dir {data}" in out.stdout
        up_pid = int((data / "slotgate-up.pid").read_text().split()[0])
        started = [up_pid] + [int(w) for w in
                              (data / "slotgate-up.children").read_text().split()[0::3]]
        assert len(started) == 1 + 3 + 1 and all(pid_alive(p) for p in started)
        r = redis.Redis(port=port, socket_timeout=5)
        assert r.set("k", "v") and r.get("k") == b"v"
        r.close()
        again = subprocess.run([*UP, *words], capture_output=True, text=True, timeout=60)
        assert again.returncode == 1 and "already running" in again.stderr

        down = subprocess.run([*UP, "down", "--data-dir", str(data)], capture_output=True,
                              text=True, timeout=120)
        assert down.returncode == 0 and f"slotgate up (pid {up_pid})" in down.stdout, down
        assert [p for p in started if pid_alive(p)] == []
        assert not (data / "slotgate-up.pid").exists()
        quiet = subprocess.run([*UP, "down", "--data-dir", str(data)], capture_output=True,
                               text=True, timeout=60)
        assert quiet.returncode == 0 and "nothing running" in quiet.stdout

        # the up process killed outright: down stops the children it left, by their PIDs
        out = subprocess.run([*UP, *words, "--detach"], capture_output=True, text=True,
                             timeout=180, cwd=tmp_path)
        assert out.returncode == 0, out.stdout + out.stderr
        up_pid = int((data / "slotgate-up.pid").read_text().split()[0])
        started = [up_pid] + [int(w) for w in
                              (data / "slotgate-up.children").read_text().split()[0::3]]
        os.kill(up_pid, signal.SIGKILL)
        wait_until(lambda: not pid_alive(up_pid), 10, "the up process gone")
        down = subprocess.run([*UP, "down", "--data-dir", str(data)], capture_output=True,
                              text=True, timeout=120)
        assert down.returncode == 0 and "proxy (pid " in down.stdout, down
        assert down.stdout.count("node:") == 3
        assert [p for p in started if pid_alive(p)] == []
    finally:
        for p in started:
            if pid_alive(p):
                os.kill(p, signal.SIGKILL)


def test_up_backend_redis_server_not_installed(tmp_path: Path) -> None:
    words, _, _ = _up_args(tmp_path, 0, "redis-server")
    out = subprocess.run([*UP, *words], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PATH": str(tmp_path)})
    assert out.returncode == 2, out.stdout + out.stderr
    assert "redis-server is not installed" in out.stderr
    assert not (tmp_path / "data" / "slotgate-up.pid").exists()
