"""Process fixtures' building blocks: free loopback ports, managed subprocesses.

Every process started here is stopped by PID (SIGTERM, then SIGKILL after a grace period).
Cluster nodes need both ``port`` and ``port + 10000`` free and below the kernel's ephemeral
range (32768+), so cluster ports are drawn from 20000..22700.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import redis

CLUSTER_BUS_PORT_OFFSET = 10000
CLUSTER_PORT_RANGE = (20000, 22700)
PLAIN_PORT_RANGE = (12000, 19000)
_rng = random.Random(os.getpid() ^ time.time_ns())
_handed_out: set[int] = set()

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
REDIS_CLI = shutil.which("redis-cli") or "/usr/bin/redis-cli"


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(cluster: bool = False) -> int:
    """A loopback port that is free now (and, for ``cluster``, whose bus port is free too)."""
    lo, hi = CLUSTER_PORT_RANGE if cluster else PLAIN_PORT_RANGE
    for _ in range(2000):
        port = _rng.randrange(lo, hi)
        if port in _handed_out:
            continue
        if not _port_free(port):
            continue
        if cluster and not _port_free(port + CLUSTER_BUS_PORT_OFFSET):
            continue
        _handed_out.add(port)
        return port
    raise RuntimeError("no free loopback port found")


def wait_until(cond: Callable[[], object], timeout_s: float = 10.0, what: str = "") -> None:
    """Poll ``cond`` every 50 ms until it is true; AssertionError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what or cond}")


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a running process (a zombie, exited but not yet reaped, is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_for_port(port: int, timeout_s: float = 10.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port} after {timeout_s}s")


class ManagedProcess:
    """A subprocess that listens on ``port``; ``stop()`` ends it by PID."""

    def __init__(self, argv: Sequence[str], port: int, cwd: Path, log_name: str) -> None:
        self.argv = list(argv)
        self.port = port
        self.cwd = cwd
        self.log_path = cwd / log_name
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 15.0) -> ManagedProcess:
        self.cwd.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(
            self.argv, cwd=self.cwd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        log.close()
        try:
            wait_for_port(self.port, timeout_s, self.proc)
        except Exception:
            self.stop()
            raise
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace_s: float = 5.0) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        try:
            os.kill(proc.pid, signal.SIGCONT)
            os.kill(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(5)

    def kill(self) -> None:
        """kill -9, for fault tests."""
        if self.alive():
            assert self.proc is not None
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def client(self, **kw: object) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, **kw)  # type: ignore[arg-type]


def redis_server(workdir: Path, *, cluster: bool = False, extra: Sequence[str] = ()) -> ManagedProcess:
    """A real redis-server on a free loopback port (not yet started)."""
    port = free_port(cluster=cluster)
    d = workdir / f"redis-{port}"
    argv = [
        REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
        "--dir", str(d), "--daemonize", "no", "--enable-debug-command", "yes",
    ]
    if cluster:
        argv += ["--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{port}.conf",
                 "--cluster-node-timeout", "2000"]
    argv += list(extra)
    return ManagedProcess(argv, port, d, "redis.log")


def redis_cli(*args: str, timeout_s: float = 120.0, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run the real redis-cli with ``args`` and return the finished process (text mode)."""
    return subprocess.run(
        [REDIS_CLI, *args], capture_output=True, text=True, timeout=timeout_s, check=check,
        stdin=subprocess.DEVNULL,
    )


def create_cluster(nodes: Sequence[ManagedProcess], replicas: int = 1, timeout_s: float = 60.0) -> None:
    """Form a cluster of started nodes with the real ``redis-cli --cluster create``."""
    addrs = [f"127.0.0.1:{n.port}" for n in nodes]
    redis_cli("--cluster", "create", *addrs, "--cluster-replicas", str(replicas), "--cluster-yes",
              timeout_s=timeout_s)
    wait_cluster_ok(nodes, timeout_s=timeout_s)


def wait_cluster_ok(nodes: Sequence[ManagedProcess], timeout_s: float = 60.0) -> None:
    """Wait until every node reports cluster_state:ok and all agree on slot coverage."""
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        ok = True
        for n in nodes:
            try:
                info = n.client(socket_timeout=2).execute_command("CLUSTER", "INFO")
            except redis.RedisError as exc:
                ok, last = False, str(exc)
                break
            text = info.decode() if isinstance(info, bytes) else str(info)
            if "cluster_state:ok" not in text:
                ok, last = False, text
                break
        if ok:
            return
        time.sleep(0.1)
    raise TimeoutError(f"cluster not ok after {timeout_s}s: {last[:200]}")


def slotgate_proxy(workdir: Path, seeds: Sequence[int | str], extra: Sequence[str] = ()) -> ManagedProcess:
    """The slotgate proxy as a real subprocess (``python -m proxy``), not yet started.

    ``seeds`` are ports on 127.0.0.1 or ``host:port`` strings.
    """
    import sys

    port = free_port()
    argv = [sys.executable, "-m", "proxy", "--listen", f"127.0.0.1:{port}"]
    for seed in seeds:
        argv += ["--seed", seed if isinstance(seed, str) else f"127.0.0.1:{seed}"]
    argv += list(extra)
    return ManagedProcess(argv, port, workdir / f"proxy-{port}", "proxy.log")


def slotgate_node(workdir: Path, *, port: int | None = None, cluster: bool = False,
                  extra: Sequence[str] = ()) -> ManagedProcess:
    """Our bundled node (``python -m node``) on a free loopback port, not yet started.

    Its ``--dir`` is ``workdir/node-<port>`` (kept across restarts of the same port, so a
    ManagedProcess can be started again to test recovery). ``extra`` are more
    ``--directive value`` words.
    """
    import sys

    port = port if port is not None else free_port(cluster=cluster)
    d = workdir / f"node-{port}"
    argv = [sys.executable, "-m", "node", "--port", str(port), "--bind", "127.0.0.1",
            "--dir", str(d), "--save", ""]
    if cluster:
        argv += ["--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{port}.conf",
                 "--cluster-node-timeout", "2000"]
    argv += list(extra)
    return ManagedProcess(argv, port, d, "node.log")


def start_nodes(workdir: Path, count: int, *, cluster: bool = True,
                extra: Sequence[str] = ()) -> list[ManagedProcess]:
    """Start ``count`` of our nodes (cluster-enabled by default) on free cluster ports (all
    or none, see :func:`start_all`)."""
    return start_all([slotgate_node(workdir, cluster=cluster, extra=extra) for _ in range(count)])


def start_all(procs: list[ManagedProcess]) -> list[ManagedProcess]:
    """Start every process in ``procs``, in order; if one fails to start, the ones already
    started are stopped (by PID) and the error re-raised."""
    started: list[ManagedProcess] = []
    try:
        for p in procs:
            p.start()
            started.append(p)
    except BaseException:
        for p in started:
            p.stop()
        raise
    return procs
