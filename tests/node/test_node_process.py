"""The node as a process, driven by real tools: start-up/shutdown, config errors (compared with
redis-server's own), port in use, maxclients, protocol errors, query-buffer limit, redis-py
(RESP2/RESP3), redis-cli, redis-benchmark, INFO field names."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from tests.support import (
    REDIS_SERVER,
    ManagedProcess,
    RawClient,
    free_port,
    redis_cli,
    slotgate_node,
    wait_until,
)

NODE = [sys.executable, "-m", "slotgate.node"]


def _fatal_block(text: str) -> str:
    """The FATAL CONFIG FILE ERROR block of a start-up output, trailing space trimmed."""
    start = text.find("*** FATAL CONFIG FILE ERROR")
    assert start != -1, text
    return "\n".join(line.rstrip() for line in text[start:].strip().splitlines())


@pytest.mark.parametrize("args", [
    ["--foo", "bar"],
    ["--maxclients", "abc"],
    ["--maxclients", "0"],
    ["--appendonly", "maybe"],
    ["--appendfsync", "sometimes"],
    ["--save", "1"],
    ["--maxmemory", "1x"],
    ["--loglevel", "loud"],
    ["--appendonly", "yes", "no"],
    ["--cluster-node-timeout", "-5"],
    ["--cluster-enabled", "perhaps"],
    ["--cluster-preferred-endpoint-type", "ipv9"],
    ["--min-replicas-to-write", "x"],
    ["--repl-backlog-size", "0"],
    ["--client-output-buffer-limit", "normal 0 0"],
    ["--hz"],
])
def test_bad_config_fails_like_redis(tmp_path: Path, args: list[str]) -> None:
    real = subprocess.run([REDIS_SERVER, "--port", "0", *args], capture_output=True, text=True,
                          timeout=20, cwd=tmp_path)
    ours = subprocess.run([*NODE, "--port", "0", *args], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    assert real.returncode == 1
    assert ours.returncode == 1
    assert _fatal_block(ours.stdout + ours.stderr) == _fatal_block(real.stdout + real.stderr)


def test_bad_config_file_line_reported(tmp_path: Path) -> None:
    conf = tmp_path / "bad.conf"
    conf.write_text("port 0\n# comment\nsave \"\"\nnot-a-directive 1\n")
    real = subprocess.run([REDIS_SERVER, str(conf)], capture_output=True, text=True, timeout=20)
    ours = subprocess.run([*NODE, str(conf)], capture_output=True, text=True, timeout=60)
    assert (real.returncode, ours.returncode) == (1, 1)
    assert _fatal_block(ours.stderr) == _fatal_block(real.stdout + real.stderr)


def test_start_logs_pid_ready_and_sigterm_exits_cleanly(tmp_path: Path) -> None:
    node = slotgate_node(tmp_path).start()
    try:
        assert f" PID: {node.pid}" in node.log_text()
        # (the port opens before the data is loaded; "Ready" is logged after, as Redis does)
        wait_until(lambda: "Ready to accept connections" in node.log_text(), 10,
                   lambda: f"no 'Ready to accept connections' in the log: {node.log_text()}")
        assert node.client().ping() is True
        assert node.proc is not None
        os.kill(node.pid, signal.SIGTERM)
        assert node.proc.wait(10) == 0
    finally:
        node.stop()


def test_config_file_and_cli_override(tmp_path: Path) -> None:
    port = free_port()
    conf = tmp_path / "node.conf"
    conf.write_text(f"port {port}\nbind 127.0.0.1\nmaxclients 77\nhz 20\nsave \"\"\n")
    node = ManagedProcess([*NODE, str(conf), "--hz", "30"], port, tmp_path, "n.log").start()
    try:
        r = node.client(decode_responses=True)
        assert r.config_get("maxclients") == {"maxclients": "77"}
        assert r.config_get("hz") == {"hz": "30"}
        r.config_set("maxclients", "88")
        r.config_rewrite()
        text = conf.read_text()
        assert "maxclients 88" in text and "hz 30" in text
    finally:
        node.stop()


def test_port_in_use_exits_1(tmp_path: Path) -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        res = subprocess.run([*NODE, "--port", str(port), "--bind", "127.0.0.1"],
                             capture_output=True, text=True, timeout=60, cwd=tmp_path)
    finally:
        holder.close()
    assert res.returncode == 1
    assert "Failed listening on port" in res.stdout + res.stderr


def test_maxclients(tmp_path: Path) -> None:
    node = slotgate_node(tmp_path, extra=["--maxclients", "2"]).start()
    try:
        a = socket.create_connection(("127.0.0.1", node.port), timeout=5)
        b = socket.create_connection(("127.0.0.1", node.port), timeout=5)
        for s in (a, b):
            s.sendall(b"PING\r\n")
            assert s.recv(100) == b"+PONG\r\n"
        c = socket.create_connection(("127.0.0.1", node.port), timeout=5)
        assert c.recv(100) == b"-ERR max number of clients reached\r\n"
        assert c.recv(100) == b""
        for s in (a, b, c):
            s.close()
    finally:
        node.stop()


@pytest.mark.parametrize("garbage", [b"*1\r\n$x\r\n", b"*abc\r\n", b'SET a "b\r\n',
                                     b"*2\r\n$3\r\nGET\r\n:1\r\n"])
def test_protocol_error_closes_only_that_connection(
        node_standalone: ManagedProcess, redis_standalone: ManagedProcess, garbage: bytes) -> None:
    replies = []
    for proc in (node_standalone, redis_standalone):
        with RawClient(proc.port, timeout_s=5) as c:
            c.send_raw(b"PING\r\n" + garbage)
            replies.append(c.read_until_closed())
        assert proc.client().ping() is True  # others unaffected
    assert replies[0] == replies[1]
    assert replies[0].startswith(b"+PONG\r\n-ERR Protocol error")


def test_query_buffer_limit_closes_connection(tmp_path: Path) -> None:
    node = slotgate_node(tmp_path, extra=["--client-query-buffer-limit", "1mb",
                                          "--proto-max-bulk-len", "8mb"]).start()
    try:
        s = socket.create_connection(("127.0.0.1", node.port), timeout=10)
        s.sendall(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4000000\r\n")
        closed = False
        try:
            for _ in range(100):
                s.sendall(b"x" * 65536)
        except (BrokenPipeError, ConnectionResetError):
            closed = True
        if not closed:
            s.settimeout(5)
            closed = s.recv(100) == b""
        s.close()
        assert closed
        assert node.client().ping() is True
    finally:
        node.stop()


def test_inline_and_pipelined(node_standalone: ManagedProcess) -> None:
    with RawClient(node_standalone.port, timeout_s=5) as c:
        c.send_raw(b"SET inl 'a b'\r\nGET inl\r\n\r\n*2\r\n$3\r\nGET\r\n$3\r\ninl\r\nDEL inl\r\n")
        want = b"+OK\r\n$3\r\na b\r\n$3\r\na b\r\n:1\r\n"
        data = b"".join(c.read_frames(4))
    assert data == want


@pytest.mark.parametrize("protocol", [2, 3])
def test_redis_py(node_standalone: ManagedProcess, protocol: int) -> None:
    r = redis.Redis(port=node_standalone.port, protocol=protocol, decode_responses=True)
    r.flushall()
    assert r.set("a", "1", ex=100) is True
    assert r.get("a") == "1"
    assert r.incr("a") == 2
    assert 0 < r.ttl("a") <= 100
    assert r.mset({"x": "1", "y": "2"}) is True
    assert r.mget("x", "y", "z") == ["1", "2", None]
    with r.pipeline(transaction=True) as p:
        p.set("t", "v").incr("n").get("t")
        assert p.execute() == [True, 1, "v"]
    info = r.info()
    assert info["redis_version"] == "7.0.15"
    assert r.info("keyspace")["db0"]["keys"] >= 4
    assert r.config_get("maxclients") == {"maxclients": "10000"}
    assert r.client_setname("me") is True and r.client_getname() == "me"
    assert r.dbsize() >= 4
    hello = r.execute_command("HELLO", protocol)
    if isinstance(hello, list):  # RESP2: a flat key/value array
        hello = dict(zip(hello[::2], hello[1::2], strict=True))
    assert hello["proto"] == protocol
    assert r.setbit("bits", 7, 1) == 0 and r.bitcount("bits") == 1
    assert r.incrbyfloat("f", 1.5) == 1.5
    r.close()


def test_redis_cli(node_standalone: ManagedProcess) -> None:
    port = str(node_standalone.port)
    assert redis_cli("-p", port, "PING").stdout.strip() == "PONG"
    assert redis_cli("-p", port, "SET", "cli", "v").stdout.strip() == "OK"
    assert redis_cli("-p", port, "GET", "cli").stdout.strip() == "v"
    info = redis_cli("-p", port, "INFO", "server").stdout
    assert "redis_version:7.0.15" in info
    assert redis_cli("-p", port, "--no-raw", "NOSUCH").stdout.startswith(
        "(error) ERR unknown command 'NOSUCH'")
    res = redis_cli("-p", port, "-3", "HELLO", "3")
    assert "proto" in res.stdout


def test_redis_benchmark_runs_clean(node_standalone: ManagedProcess) -> None:
    res = subprocess.run(
        ["redis-benchmark", "-p", str(node_standalone.port), "-t", "ping,set,get,incr,mset",
         "-q", "-n", "20000"], capture_output=True, text=True, timeout=300, check=True)
    out = res.stdout + res.stderr
    assert "ERR" not in out and "rror" not in out
    for name in ("PING_INLINE", "PING_MBULK", "SET", "GET", "INCR", "MSET"):
        assert f"{name}" in out
    assert out.count("requests per second") == 6


def _info_fields(text: str) -> dict[str, list[str]]:
    secs: dict[str, list[str]] = {}
    cur = ""
    for line in text.splitlines():
        if line.startswith("# "):
            cur = line[2:]
            secs[cur] = []
        elif ":" in line and cur:
            secs[cur].append(line.split(":", 1)[0])
    return secs


def test_info_sections_and_fields_match_redis(node_standalone: ManagedProcess,
                                              redis_standalone: ManagedProcess) -> None:
    ours = _info_fields(redis_cli("-p", str(node_standalone.port), "INFO", "everything").stdout)
    real = _info_fields(redis_cli("-p", str(redis_standalone.port), "INFO", "everything").stdout)
    assert list(ours) == list(real)
    for section in ("Server", "Clients", "Memory", "Persistence", "Stats", "Replication",
                    "CPU", "Cluster"):
        assert ours[section] == real[section], section


def test_active_expiry_removes_untouched_keys_and_breaks_watch(tmp_path: Path) -> None:
    node = slotgate_node(tmp_path, extra=["--hz", "50"]).start()
    try:
        r = node.client()
        watcher = node.client()
        pipe = watcher.pipeline(transaction=True)
        r.set("watched", "v", px=1500)
        pipe.watch("watched")  # WATCHed while it exists, however slow the machine is
        assert r.exists("watched") == 1
        for i in range(300):
            r.set(f"tmp:{i}", "v", px=100)
        r.set("keep", "v")
        wait_until(lambda: r.dbsize() <= 1, 10, "the short-lived keys to expire")
        assert r.dbsize() == 1  # only "keep": the others expired without being accessed
        assert r.info("stats")["expired_keys"] == 301
        pipe.multi()
        pipe.set("watched", "again")
        with pytest.raises(redis.WatchError):
            pipe.execute()
    finally:
        node.stop()
