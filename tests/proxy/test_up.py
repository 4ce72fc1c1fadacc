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


@pytest.mark.parametrize("replicas", [1])
def test_up_serves_whole_cluster_and_stops_everything(tmp_path: Path, replicas: int) -> None:
    n_nodes = 3 * (1 + replicas)
    base = _consecutive_cluster_ports(n_nodes)
    port, metrics = free_port(), free_port()
    argv = [sys.executable, "-m", "slotgate.proxy.ops.cli", "up", "--node-base-port", str(base),
            "--port", str(port), "--metrics", f"127.0.0.1:{metrics}", "--data-dir",
            str(tmp_path / "data"), "--replicas", str(replicas), "--node-timeout-ms", "2000"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=tmp_path)
    children: list[int] = []
    try:
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
        children = _children(proc.pid)
        assert len(children) == n_nodes + 1  # nodes + proxy

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
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        for c in children:
            if pid_alive(c):
                os.kill(c, signal.SIGKILL)
