"""``slotgate up`` / ``slotgate down``: the embedded default, a whole cluster and its proxy on
one machine.

``up`` starts the nodes (bundled ``python -m slotgate.node``, or real ``redis-server`` with
``--backend redis-server``) on loopback, each in ``DATA_DIR/node-<port>``, forms the cluster
(or rejoins the one already in DATA_DIR), starts the proxy with metrics, prints a summary of
where everything is, and on Ctrl-C / SIGTERM stops the proxy and then every node, by PID. A
child that dies on its own stops the whole stack with status 1.

Every run records its PIDs in the data directory: ``slotgate-up.pid`` (the ``up`` process) and
``slotgate-up.children`` (one ``pid starttime role`` line per node and the proxy; the start
time, from /proc, tells a PID that was reused since apart). ``up --detach`` starts the same
``up`` in the background (its own session, output in ``DATA_DIR/up.log``), waits until it is
up and returns; ``down`` stops it: SIGTERM to the ``up`` process, which stops its children,
then any recorded child still running (the ``up`` process was killed) by its own PID.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from slotgate.proxy.ops.admin import (
    AdminError,
    NodeClient,
    cluster_converged,
    create_cluster,
    parse_info,
)

CLUSTER_BUS_PORT_OFFSET = 10000
BACKENDS = ("bundled", "redis-server")
PID_FILE = "slotgate-up.pid"
CHILDREN_FILE = "slotgate-up.children"
DETACHED_LOG = "up.log"
UP_LINE = "slotgate is up"
DETACH_TIMEOUT_S = 180.0   # a detached run must be up within this
DOWN_TIMEOUT_S = 60.0      # `down` waits this long for the run to stop before killing


class _Stop(Exception):
    pass


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop(signum)


def _start_time(pid: int) -> str | None:
    """The process' start time (clock ticks since boot) from /proc, None if it is gone or a
    zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else fields[19]


class PidRecord:
    """The PIDs of one run, kept in its data directory."""

    def __init__(self, data_dir: Path) -> None:
        self.pid_file = data_dir / PID_FILE
        self.children_file = data_dir / CHILDREN_FILE

    def running(self) -> int | None:
        """The PID of a live ``up`` recorded here, else None."""
        try:
            pid_text, _, started = self.pid_file.read_text().partition(" ")
            pid = int(pid_text)
        except (OSError, ValueError):
            return None
        return pid if _start_time(pid) == started.strip() else None

    def claim(self) -> None:
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        self.pid_file.write_text(f"{os.getpid()} {_start_time(os.getpid())}\n")
        self.children_file.write_text("")

    def add_child(self, pid: int, role: str) -> None:
        with open(self.children_file, "a") as f:
            f.write(f"{pid} {_start_time(pid)} {role}\n")

    def live_children(self) -> list[tuple[int, str]]:
        """(pid, role) of every recorded child still running (the same process, not a PID
        reused since)."""
        out = []
        try:
            lines = self.children_file.read_text().splitlines()
        except OSError:
            return []
        for line in lines:
            parts = line.split()
            if len(parts) == 3 and parts[0].isdigit() and _start_time(int(parts[0])) == parts[1]:
                out.append((int(parts[0]), parts[2]))
        return out

    def clear(self) -> None:
        for f in (self.pid_file, self.children_file):
            f.unlink(missing_ok=True)


def _start(argv: list[str], log_path: Path, record: PidRecord, role: str) -> subprocess.Popen[bytes]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL,
                                start_new_session=True)  # Ctrl-C reaches us only; we stop them
    record.add_child(proc.pid, role)
    return proc


def _wait_listening(addr: tuple[str, int], proc: subprocess.Popen[bytes], log: Path,
                    timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise AdminError(f"process for {addr[0]}:{addr[1]} exited ({proc.returncode}):\n{tail}")
        try:
            NodeClient(addr, timeout_s=0.5).close()
            return
        except AdminError:
            time.sleep(0.05)
    raise AdminError(f"nothing listening on {addr[0]}:{addr[1]} after {timeout_s:g}s")


def _stop_all(procs: Sequence[subprocess.Popen[bytes]], grace_s: float = 10.0) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)


def node_argv(backend: str, port: int, host: str, node_dir: Path, timeout_ms: int) -> list[str]:
    """The command line of one node; both backends take redis.conf directives as flags."""
    if backend == "redis-server":
        exe = shutil.which("redis-server")
        if exe is None:
            raise AdminError("--backend redis-server: redis-server is not installed (not on "
                             "PATH). Install it (e.g. apt install redis-server) or leave out "
                             "--backend to run the bundled nodes.")
        head = [exe, "--daemonize", "no"]
    else:
        head = [sys.executable, "-m", "slotgate.node"]
    return [*head, "--port", str(port), "--bind", host, "--dir", str(node_dir),
            "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(timeout_ms), "--logfile", str(node_dir / "node.log")]


def summary(ns: argparse.Namespace, ports: Sequence[int], data_dir: Path) -> list[str]:
    m_host, m_port = ns.metrics
    stop = (f"slotgate down --data-dir {data_dir}" if ns.detached_child
            else f"Ctrl-C (or slotgate down --data-dir {data_dir} from another terminal)")
    return [
        f"{UP_LINE}: connect to {ns.host}:{ns.port} (e.g. redis-cli -p {ns.port})",
        f"  proxy     {ns.host}:{ns.port}, log {data_dir / 'proxy.log'}",
        f"  nodes     {ns.backend}: {ns.masters} masters x {ns.replicas} replicas on "
        f"{ns.host}:{ports[0]}-{ports[-1]} (cluster bus: port+{CLUSTER_BUS_PORT_OFFSET}), "
        f"each in {data_dir}/node-<port>",
        f"  data dir  {data_dir}",
        f"  metrics   http://{m_host}:{m_port}/metrics (also /healthz, /slots)",
        f"  stop      {stop}",
    ]


def _form_or_rejoin(ns: argparse.Namespace, addrs: list[tuple[str, int]], data_dir: Path) -> None:
    with NodeClient(addrs[0]) as first:
        known = int(parse_info(first.text("CLUSTER", "INFO")).get("cluster_known_nodes", "1"))
    if known == 1:
        print(f"Forming a cluster of {ns.masters} masters x {ns.replicas} replicas in {data_dir}")
        create_cluster(addrs, replicas=ns.replicas)
        return
    print(f"Rejoining the cluster kept in {data_dir}")
    clients = [NodeClient(a) for a in addrs]
    try:
        deadline = time.monotonic() + 60
        while not cluster_converged(clients):
            if time.monotonic() > deadline:
                raise AdminError("the existing cluster did not reach cluster_state:ok in 60s")
            time.sleep(0.2)
    finally:
        for c in clients:
            c.close()


def up(ns: argparse.Namespace, argv: Sequence[str]) -> int:
    total = ns.masters * (1 + ns.replicas)
    if ns.masters < 3:
        print("slotgate up: --masters must be at least 3 (a cluster needs a majority of masters)",
              file=sys.stderr)
        return 2
    ports = [ns.node_base_port + i for i in range(total)]
    if ports[-1] + CLUSTER_BUS_PORT_OFFSET > 65535:
        print("slotgate up: --node-base-port too high: bus ports (port+10000) exceed 65535",
              file=sys.stderr)
        return 2
    data_dir: Path = ns.data_dir.resolve()
    record = PidRecord(data_dir)
    other = record.running()
    if other is not None and other != os.getpid():
        print(f"slotgate up: already running in {data_dir} (pid {other}); stop it with "
              f"slotgate down --data-dir {data_dir}", file=sys.stderr)
        return 1
    try:
        argvs = [node_argv(ns.backend, p, ns.host, data_dir / f"node-{p}", ns.node_timeout_ms)
                 for p in ports]
    except AdminError as exc:
        print(f"slotgate up: {exc}", file=sys.stderr)
        return 2
    if ns.detach:
        return _detach(argv, data_dir, record)
    procs: list[subprocess.Popen[bytes]] = []
    previous = {s: signal.signal(s, _raise_stop) for s in (signal.SIGINT, signal.SIGTERM)}
    record.claim()
    try:
        for port, node in zip(ports, argvs, strict=True):
            procs.append(_start(node, data_dir / f"node-{port}" / "stdout.log", record,
                                f"node:{port}"))
        addrs = [(ns.host, p) for p in ports]
        for addr, proc, port in zip(addrs, procs, ports, strict=True):
            _wait_listening(addr, proc, data_dir / f"node-{port}" / "stdout.log")
        _form_or_rejoin(ns, addrs, data_dir)
        plog = data_dir / "proxy.log"
        pargv = [sys.executable, "-m", "slotgate.proxy", "--listen", f"{ns.host}:{ns.port}",
                 "--metrics", f"{ns.metrics[0]}:{ns.metrics[1]}"]
        for a in addrs:
            pargv += ["--seed", f"{a[0]}:{a[1]}"]
        proxy = _start(pargv, plog, record, "proxy")
        procs.insert(0, proxy)  # stopped first, so in-flight requests still reach the nodes
        _wait_listening((ns.host, ns.port), proxy, plog)
        print("\n".join(summary(ns, ports, data_dir)), flush=True)
        while True:
            for p in procs:
                if p.poll() is not None:
                    print(f"slotgate up: child pid {p.pid} exited with {p.returncode}; "
                          "stopping (logs in the data directory)", file=sys.stderr)
                    return 1
            time.sleep(0.5)
    except _Stop:
        print("Stopping slotgate ...", flush=True)
        return 0
    except AdminError as exc:
        print(f"slotgate up: {exc}", file=sys.stderr)
        return 1
    finally:
        # A second Ctrl-C while stopping must not orphan the children: signals are ignored
        # until every child is gone, then the caller's handlers come back.
        for s in previous:
            signal.signal(s, signal.SIG_IGN)
        _stop_all(procs)
        record.clear()
        for s, h in previous.items():
            signal.signal(s, h)


def _detach(argv: Sequence[str], data_dir: Path, record: PidRecord) -> int:
    """The same ``up`` in the background; returns once it is up (0) or has failed (1)."""
    words = [w for w in argv if w != "--detach"] + ["--detached-child"]
    data_dir.mkdir(parents=True, exist_ok=True)
    log = data_dir / DETACHED_LOG
    start_at = log.stat().st_size if log.exists() else 0
    with open(log, "ab") as out:
        child = subprocess.Popen([sys.executable, "-m", "slotgate.proxy.ops.cli", *words],
                                 stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 start_new_session=True)
    deadline = time.monotonic() + DETACH_TIMEOUT_S
    while time.monotonic() < deadline:
        with open(log, "rb") as f:
            f.seek(start_at)
            text = f.read().decode(errors="replace")
        if UP_LINE in text:
            print(text[text.index(UP_LINE):].rstrip("\n"))
            print(f"  detached  pid {child.pid}, output in {log}")
            return 0
        if child.poll() is not None:
            print(f"slotgate up --detach: the background run exited ({child.returncode}):\n"
                  f"{text[-2000:]}", file=sys.stderr)
            return 1
        time.sleep(0.1)
    print(f"slotgate up --detach: not up after {DETACH_TIMEOUT_S:g}s; stopping it (output in "
          f"{log})", file=sys.stderr)
    _stop_recorded(record, child.pid)
    return 1


def _wait_gone(pids: Sequence[int], timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [p for p in alive if _start_time(p) is not None]
    return alive


def _stop_recorded(record: PidRecord, up_pid: int | None) -> list[str]:
    """SIGTERM the ``up`` process (it stops its children), then any recorded child left, by
    PID; SIGKILL what outlives ``DOWN_TIMEOUT_S``. Returns what was stopped."""
    stopped = []
    if up_pid is not None:
        os.kill(up_pid, signal.SIGTERM)
        if _wait_gone([up_pid], DOWN_TIMEOUT_S):
            os.kill(up_pid, signal.SIGKILL)
        stopped.append(f"slotgate up (pid {up_pid})")
    left = record.live_children()
    for pid, role in left:
        os.kill(pid, signal.SIGTERM)
        stopped.append(f"{role} (pid {pid})")
    for pid in _wait_gone([p for p, _ in left], DOWN_TIMEOUT_S):
        os.kill(pid, signal.SIGKILL)
    record.clear()
    return stopped


def down(ns: argparse.Namespace) -> int:
    data_dir: Path = ns.data_dir.resolve()
    record = PidRecord(data_dir)
    up_pid = record.running()
    if up_pid is None and not record.live_children():
        record.clear()
        print(f"slotgate down: nothing running in {data_dir}")
        return 0
    stopped = _stop_recorded(record, up_pid)
    print(f"slotgate down: stopped {', '.join(stopped)}")
    return 0
