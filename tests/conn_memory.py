"""Measuring a server's memory per idle client connection (bench/bench_conn_memory.py and
tests/proxy/test_conn_memory.py): idle connections opened in batches and waited for until
``INFO clients`` counts them, VmRSS from /proc before and after."""

from __future__ import annotations

import resource
import socket
import time
from pathlib import Path

from tests.support import ManagedProcess

BASELINE_CONNECTIONS = 20


def raise_nofile(needed: int) -> None:
    """Soft RLIMIT_NOFILE up to the hard limit; refuse a run the hard limit cannot hold."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise OSError(f"RLIMIT_NOFILE hard limit {hard} < {needed} needed")
    if soft != resource.RLIM_INFINITY and soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def vm_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def connected_clients(port: int) -> int:
    """``connected_clients`` of INFO clients, not counting the connection that asks."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"*2\r\n$4\r\nINFO\r\n$7\r\nclients\r\n")
        data = b""
        while b"connected_clients:" not in data or not data.endswith(b"\r\n"):
            chunk = s.recv(65536)
            if not chunk:
                raise RuntimeError("server closed the INFO connection")
            data += chunk
    line = data.split(b"connected_clients:", 1)[1].split(b"\r\n", 1)[0]
    return int(line) - 1


def open_idle(port: int, count: int, batch: int = 256,
              timeout_s: float = 120) -> list[socket.socket]:
    """``count`` idle connections to ``port`` (nothing sent), each accepted (counted by INFO)
    before this returns; the caller closes them."""
    before = connected_clients(port)
    socks: list[socket.socket] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(socks) < count:
            for _ in range(min(batch, count - len(socks))):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(s)
                s.connect(("127.0.0.1", port))
            while connected_clients(port) < before + len(socks):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"port {port}: {connected_clients(port) - before} of "
                                       f"{len(socks)} connections accepted")
                time.sleep(0.01)
    except BaseException:
        for s in socks:
            s.close()
        raise
    return socks


def settle_rss_kib(pid: int, settle_s: float = 0.3, timeout_s: float = 10) -> int:
    """VmRSS once two reads ``settle_s`` apart agree within 1 % (the server is idle)."""
    deadline = time.monotonic() + timeout_s
    last = vm_rss_kib(pid)
    while True:
        time.sleep(settle_s)
        now = vm_rss_kib(pid)
        if abs(now - last) <= last // 100 or time.monotonic() > deadline:
            return now
        last = now


def per_connection_bytes(proc: ManagedProcess, count: int, batch: int = 256) -> float:
    """RSS growth of ``proc`` (started) per idle connection, in bytes, over ``count`` idle
    connections opened after ``BASELINE_CONNECTIONS`` (what a server allocates once for its
    first clients is not counted)."""
    base = open_idle(proc.port, BASELINE_CONNECTIONS, batch)
    try:
        rss0 = settle_rss_kib(proc.pid)
        socks = open_idle(proc.port, count, batch)
        try:
            rss1 = settle_rss_kib(proc.pid)
        finally:
            for s in socks:
                s.close()
    finally:
        for s in base:
            s.close()
    return (rss1 - rss0) * 1024 / count
