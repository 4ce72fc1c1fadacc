"""Test building blocks: free loopback ports, managed subprocesses, the raw RESP client, and
the waits that stand in for sleeps.

Every process started here is stopped by PID (SIGTERM, then SIGKILL after a grace period).
Cluster nodes need both ``port`` and ``port + 10000`` free and below the kernel's ephemeral
range (32768+), so cluster ports are drawn from 20000..22700.

Tests do not sleep to synchronise: they wait for what they need to be true
(:func:`wait_until`, :func:`wait_blocked`), or observe for a fixed window (:func:`during`)
when the window itself is the scenario. A ``time.sleep`` left in a test is part of the
scenario (a key's expiry, a server held busy) and says so in a comment.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import redis

from slotgate.protocol.resp import ReplyFramer, encode_command

CLUSTER_BUS_PORT_OFFSET = 10000
CLUSTER_PORT_RANGE = (20000, 22700)
PLAIN_PORT_RANGE = (12000, 19000)
_rng = random.Random(os.getpid() ^ time.time_ns())
_handed_out: set[int] = set()
T = TypeVar("T")

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


def _worker_share(lo: int, hi: int) -> tuple[int, int]:
    """This test process's part of ``[lo, hi)``: with pytest-xdist (``-n N``) each worker
    draws from a slice of its own, so two workers never hand out the same port."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if not worker.startswith("gw") or count <= 1:
        return lo, hi
    index = int(worker[2:]) % count
    width = (hi - lo) // count
    return lo + index * width, lo + (index + 1) * width


def free_port(cluster: bool = False) -> int:
    """A loopback port that is free now (and, for ``cluster``, whose bus port is free too)."""
    lo, hi = _worker_share(*(CLUSTER_PORT_RANGE if cluster else PLAIN_PORT_RANGE))
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


def during(duration_s: float, interval_s: float = 0.05) -> Iterator[None]:
    """An observation window: yields at once, then every ``interval_s`` until ``duration_s``
    has passed. For a scenario that is tried or must hold for a while; to wait for a
    condition, use :func:`wait_until`."""
    end = time.monotonic() + duration_s
    while True:
        yield
        if time.monotonic() >= end:
            return
        time.sleep(interval_s)


def wait_until(cond: Callable[[], T | None], timeout_s: float = 10.0,
               what: str | Callable[[], str] = "", interval_s: float = 0.05,
               ignore: tuple[type[BaseException], ...] = ()) -> T:
    """Poll ``cond`` every ``interval_s`` until it returns something true, and return that.

    An exception of a type in ``ignore`` counts as "not yet" (a node that is restarting);
    any other propagates. After ``timeout_s``, AssertionError naming ``what`` (a callable is
    asked then, to show the state the wait ended in) and the last ignored exception.
    """
    last: BaseException | None = None
    for _ in during(timeout_s, interval_s):
        try:
            value = cond()
        except ignore as exc:
            last = exc
            continue
        if value:
            return value
    text = what() if callable(what) else what or cond
    raise AssertionError(f"timed out after {timeout_s}s waiting for {text}"
                         + (f" (last: {last!r})" if last is not None else ""))


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a running process (a zombie, exited but not yet reaped, is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def rss_bytes(pid: int) -> int:
    """The resident set size of process ``pid`` (VmRSS in /proc/PID/status), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def wait_for_port(port: int, timeout_s: float = 10.0, proc: subprocess.Popen | None = None) -> None:
    """Until something accepts connections on ``port``; RuntimeError at once if ``proc``
    exits first."""

    def listening() -> bool:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return True
        except OSError:
            return False

    wait_until(listening, timeout_s, f"a listener on 127.0.0.1:{port}", interval_s=0.02)


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
    """Run the real redis-cli with ``args`` and return the finished process (text mode). With
    ``check``, a failure names redis-cli's own output (what a failed ``--cluster`` step said)."""
    done = subprocess.run(
        [REDIS_CLI, *args], capture_output=True, text=True, timeout=timeout_s, check=False,
        stdin=subprocess.DEVNULL,
    )
    if check and done.returncode:
        raise AssertionError(f"redis-cli {' '.join(args)} exited {done.returncode}:\n"
                             f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return done


def create_cluster(nodes: Sequence[ManagedProcess], replicas: int = 1, timeout_s: float = 60.0) -> None:
    """Form a cluster of started nodes with the real ``redis-cli --cluster create``."""
    addrs = [f"127.0.0.1:{n.port}" for n in nodes]
    redis_cli("--cluster", "create", *addrs, "--cluster-replicas", str(replicas), "--cluster-yes",
              timeout_s=timeout_s)
    wait_cluster_ok(nodes, timeout_s=timeout_s)


def wait_cluster_ok(nodes: Sequence[ManagedProcess], timeout_s: float = 60.0) -> None:
    """Wait until every node reports cluster_state:ok and all agree on slot coverage."""

    last = [""]

    def all_ok() -> bool:
        for n in nodes:
            info = n.client(socket_timeout=2).execute_command("CLUSTER", "INFO")
            last[0] = info.decode() if isinstance(info, bytes) else str(info)
            if "cluster_state:ok" not in last[0]:
                return False
        return True

    wait_until(all_ok, timeout_s, lambda: f"cluster_state:ok on every node ({last[0][:200]})",
               interval_s=0.1, ignore=(redis.RedisError,))


def nodes_lines(n: ManagedProcess) -> list[list[str]]:
    """``n``'s CLUSTER NODES, one list of fields per node."""
    text = n.client(socket_timeout=5).execute_command("CLUSTER", "NODES").decode()
    return [line.split() for line in text.splitlines()]


def signature(n: ManagedProcess) -> str:
    """redis-cli's clusterManagerGetConfigSignature: id:sorted slot tokens, per node with slots."""
    parts = []
    for f in nodes_lines(n):
        slots = sorted(t for t in f[8:] if not t.startswith("["))
        if slots:
            parts.append(f[0] + ":" + ",".join(slots))
    return "|".join(sorted(parts))


def slotgate_proxy(workdir: Path, seeds: Sequence[int | str], extra: Sequence[str] = ()) -> ManagedProcess:
    """The slotgate proxy as a real subprocess (``python -m slotgate.proxy``), not yet started.

    ``seeds`` are ports on 127.0.0.1 or ``host:port`` strings.
    """
    import sys

    port = free_port()
    argv = [sys.executable, "-m", "slotgate.proxy", "--listen", f"127.0.0.1:{port}"]
    for seed in seeds:
        argv += ["--seed", seed if isinstance(seed, str) else f"127.0.0.1:{seed}"]
    argv += list(extra)
    return ManagedProcess(argv, port, workdir / f"proxy-{port}", "proxy.log")


@contextmanager
def child_env(**values: str) -> Iterator[None]:
    """``os.environ`` with ``values`` set meanwhile: a process started inside inherits them
    (e.g. ``SLOTGATE_COMPILE="0"``: the pure-Python build of this tree)."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, old in saved.items():
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old


def in_tree(proc: ManagedProcess, tree: Path) -> ManagedProcess:
    """``proc`` run from another revision's source tree (put on PYTHONPATH by the caller): its
    ``-m`` target as that tree names it, ``slotgate.node`` since the one-import-name layout,
    ``node`` before it (else the installed tree's code would run instead)."""
    i = proc.argv.index("-m") + 1
    if not (tree / "slotgate").is_dir():
        proc.argv[i] = proc.argv[i].removeprefix("slotgate.")
    return proc


def slotgate_node(workdir: Path, *, port: int | None = None, cluster: bool = False,
                  extra: Sequence[str] = ()) -> ManagedProcess:
    """Our bundled node (``python -m slotgate.node``) on a free loopback port, not yet started.

    Its ``--dir`` is ``workdir/node-<port>`` (kept across restarts of the same port, so a
    ManagedProcess can be started again to test recovery). ``extra`` are more
    ``--directive value`` words.
    """
    import sys

    port = port if port is not None else free_port(cluster=cluster)
    d = workdir / f"node-{port}"
    argv = [sys.executable, "-m", "slotgate.node", "--port", str(port), "--bind", "127.0.0.1",
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


@contextmanager
def running(*procs: ManagedProcess) -> Iterator[None]:
    """Start ``procs`` (all or none, see :func:`start_all`) for the duration of the block; each
    is stopped by PID when it ends."""
    start_all(list(procs))
    try:
        yield
    finally:
        for p in procs:
            p.stop()


@contextmanager
def node_and_redis(workdir: Path, extra: Sequence[str] = (), *,
                   cluster: bool = False) -> Iterator[dict[str, ManagedProcess]]:
    """Our node and a real redis-server 7.0 side by side, for differential tests: both started
    with the same ``extra`` directives and the DEBUG command enabled, as ``{"ours": ...,
    "real": ...}``; both stopped (by PID) when the block ends."""
    procs = {
        "ours": slotgate_node(workdir, cluster=cluster,
                              extra=["--enable-debug-command", "yes", *extra]),
        "real": redis_server(workdir, cluster=cluster, extra=extra),
    }
    with running(*procs.values()):
        # redis-server listens before it has read its ACL file and data: a reply to PING
        # (even -LOADING) says start-up is over, so a test may change those files now.
        for proc in procs.values():
            wait_until(lambda p=proc: _answers_ping(p.port), 15, f"{proc} answering PING",
                       ignore=(OSError,))
        yield procs


@contextmanager
def proxy_and_redis(workdir: Path, seeds: Sequence[int]) -> Iterator[dict[str, ManagedProcess]]:
    """A proxy in front of ``seeds`` and a standalone redis-server, both this caller's own
    (for transparency tests), as ``{"proxy": ..., "real": ...}``; stopped by PID after."""
    procs = {"proxy": slotgate_proxy(workdir, seeds), "real": redis_server(workdir)}
    with running(*procs.values()):
        yield procs


def replica_in_sync(master_port: int, replica_port: int) -> bool:
    """The replica's link is up and the master lists it at the master's own offset."""
    with RawClient(master_port) as m, RawClient(replica_port) as r:
        mi, ri = m.call("INFO", "replication"), r.call("INFO", "replication")
    if b"master_link_status:up" not in ri:
        return False
    offset = mi.split(b"master_repl_offset:")[1].split(b"\r\n")[0]
    return b"offset=%s," % offset in mi


def _answers_ping(port: int) -> bool:
    with RawClient(port) as c:
        return bool(c.call("PING"))


# -- the raw client ------------------------------------------------------------------------------
RawArg = bytes | str | int | float


class RawClient:
    """A blocking RESP client over a plain socket, for byte-exact tests.

    Commands go out as clients encode them (or as any bytes, ``send_raw``, for malformed or
    inline input); replies come back as raw frames, the bytes exactly as the server sent
    them, with no client-side conversion. ``timeout_s`` bounds every socket operation.
    """

    def __init__(self, port: int, timeout_s: float = 20.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        self.timeout_s = timeout_s
        self.framer = ReplyFramer()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, *args: RawArg) -> None:
        """One command; its reply is left to ``read``."""
        self.sock.sendall(encode_command(*args))

    def read(self, timeout_s: float | None = None) -> bytes:
        """The next reply frame; TimeoutError after ``timeout_s`` (default: the client's)."""
        if timeout_s is not None:
            self.sock.settimeout(timeout_s)
        try:
            while (frame := self.framer.next_frame()) is None:
                data = self.sock.recv(1 << 16)
                if not data:
                    raise ConnectionError("server closed the connection")
                self.framer.feed(data)
        finally:
            if timeout_s is not None:
                self.sock.settimeout(self.timeout_s)
        return frame[1]

    def read_frames(self, n: int) -> list[bytes]:
        return [self.read() for _ in range(n)]

    def call(self, *args: RawArg) -> bytes:
        """Send one command, return its reply frame."""
        self.send(*args)
        return self.read()

    def call_frames(self, *args: RawArg, frames: int = 1) -> list[bytes]:
        """Send one command that answers with ``frames`` frames (SUBSCRIBE a b: two)."""
        self.send(*args)
        return self.read_frames(frames)

    def pipeline(self, commands: Iterable[Sequence[RawArg]]) -> list[bytes]:
        """Send every command in one write, then read one reply frame each."""
        data = [encode_command(*c) for c in commands]
        self.sock.sendall(b"".join(data))
        return self.read_frames(len(data))

    def nothing_pending(self, wait_s: float = 0.1) -> bool:
        """No reply (not even part of one) is buffered or arrives within ``wait_s``."""
        if self.framer.buffered_bytes():
            return False
        self.sock.settimeout(wait_s)
        try:
            self.framer.feed(self.sock.recv(1 << 16))
        except TimeoutError:
            return True
        finally:
            self.sock.settimeout(self.timeout_s)
        return False

    def read_until_closed(self) -> bytes:
        """Everything the server sends until it closes the connection (bytes already
        buffered first)."""
        chunks = []
        while (frame := self.framer.next_frame()) is not None:
            chunks.append(frame[1])
        while data := self.sock.recv(1 << 16):
            chunks.append(data)
        return b"".join(chunks)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def blocked_clients(client: RawClient | redis.Redis) -> int:
    """``blocked_clients`` of the server's INFO clients."""
    if isinstance(client, RawClient):
        text = client.call("INFO", "clients").decode()
        return int(text.split("blocked_clients:", 1)[1].split("\r\n", 1)[0])
    return int(client.info("clients")["blocked_clients"])


def wait_blocked(client_or_port: int | RawClient | redis.Redis, n: int,
                 timeout_s: float = 10.0) -> None:
    """Until the server's INFO clients shows exactly ``n`` blocked clients: the blocking
    commands sent have reached the server and wait there (or, for 0, none waits any more).
    ``client_or_port`` is a connection to ask on, or the port to open one to."""
    if isinstance(client_or_port, int):
        with RawClient(client_or_port) as client:
            wait_blocked(client, n, timeout_s)
        return
    wait_until(lambda: blocked_clients(client_or_port) == n, timeout_s,
               lambda: f"{n} blocked clients (now {blocked_clients(client_or_port)})",
               interval_s=0.01)
