"""How long a node takes to serve again: from the process start to its port accepting
connections (listening) and to its first ``+PONG`` (``-LOADING`` does not count), for our node
and redis-server, in the same run.

Each case starts a cluster-enabled node with ``appendonly yes``:

- ``empty``: a fresh data directory;
- ``N keys``: the same node restarted with N keys in its AOF (written before, then SIGTERM),
  as each node of the `cascading-restarts` scenario is.

and, for our node, with its bytecode not cached (``cold``: every module compiled from source,
as with ``PYTHONDONTWRITEBYTECODE=1`` and no ``__pycache__``) and cached (``warm``: what an
installed package has). ``--busy N`` runs N busy-looping processes meanwhile (a loaded
machine). ``--cluster``: instead, a master of a three-master cluster (``N`` keys) stopped
with SIGTERM and started again: seconds to stop, then from the start to listening, to the
first PONG and to serving a key of its slots again (Redis' start-up delay before a master
serves included). ``--before DIR`` also runs the node from another tree (put on PYTHONPATH), for a
before/after in one run. Medians of ``--runs`` starts, the cases interleaved. Everything started is stopped by PID.

    .venv/bin/python bench/node_startup.py [--runs 5] [--keys 2000] [--busy 0] [--before DIR]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support import free_port  # noqa: E402

POLL_S = 0.005


def _ping(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"PING\r\n")
        return s.recv(64)


def _wait(proc: subprocess.Popen[bytes], port: int, started: float) -> tuple[float, float]:
    """(seconds to listening, seconds to the first +PONG) since ``started``."""
    listening = None
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the node exited with {proc.returncode}")
        try:
            reply = _ping(port)
        except OSError:
            time.sleep(POLL_S)
            continue
        now = time.monotonic()
        if listening is None:
            listening = now - started
        if reply.startswith(b"+PONG"):
            return listening, now - started
        time.sleep(POLL_S)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def _argv(kind: str, port: int, d: Path) -> list[str]:
    words = ["--port", str(port), "--bind", "127.0.0.1", "--dir", str(d), "--save", "",
             "--appendonly", "yes", "--cluster-enabled", "yes", "--cluster-config-file",
             "nodes.conf"]
    if kind == "redis":
        return ["redis-server", *words]
    return [sys.executable, "-m", "slotgate.node", *words]


def _env(tree: Path | None, pycache: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if tree is not None:
        env["PYTHONPATH"] = str(tree.resolve())
    if pycache is None:  # cold: nothing cached, nothing written
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="cold-pyc-")
    else:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(pycache)
    return env


def one_start(kind: str, tree: Path | None, pycache: Path | None, keys: int,
              work: Path) -> tuple[float, float]:
    d = Path(tempfile.mkdtemp(dir=work))
    port = free_port(cluster=True)
    env = _env(tree, pycache)
    try:
        if keys:
            proc = subprocess.Popen(_argv(kind, port, d), cwd=d, env=env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                _wait(proc, port, time.monotonic())
                with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
                    cmds = b"".join(b"*3\r\n$3\r\nSET\r\n$%d\r\nk:%d\r\n$3\r\nval\r\n"
                                    % (len(b"k:%d" % i), i) for i in range(keys))
                    s.sendall(cmds)
                    got = b""
                    while got.count(b"\r\n") < keys:
                        got += s.recv(65536)
            finally:
                _stop(proc)
        started = time.monotonic()
        proc = subprocess.Popen(_argv(kind, port, d), cwd=d, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            return _wait(proc, port, started)
        finally:
            _stop(proc)
    finally:
        shutil.rmtree(d, ignore_errors=True)
        if pycache is None:
            shutil.rmtree(env["PYTHONPYCACHEPREFIX"], ignore_errors=True)


def _call(port: int, *words: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%s\r\n" % (len(w), w)
                                                       for w in words))
        return s.recv(65536)


def cluster_restart(kind: str, tree: Path | None, pycache: Path | None, keys: int,
                    work: Path) -> tuple[float, float, float, float]:
    """Three masters (AOF on), ``keys`` keys; the first master stopped with SIGTERM and started
    again: (seconds to stop, to listening, to the first +PONG, to serving a key of its slots
    again), the last three from the new start."""
    env = _env(tree, pycache)
    ports = [free_port(cluster=True) for _ in range(3)]
    dirs = [Path(tempfile.mkdtemp(dir=work)) for _ in ports]
    argvs = [_argv(kind, p, d) + ["--cluster-node-timeout", "2000"] for p, d in zip(ports, dirs, strict=True)]
    procs = [subprocess.Popen(a, cwd=d, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for a, d in zip(argvs, dirs, strict=True)]
    try:
        for proc, port in zip(procs, ports, strict=True):
            _wait(proc, port, time.monotonic())
        share = 16384 // 3
        for i, port in enumerate(ports):
            hi = 16383 if i == 2 else (i + 1) * share - 1
            _call(port, b"CLUSTER", b"ADDSLOTSRANGE", b"%d" % (i * share), b"%d" % hi)
        for port in ports[1:]:
            _call(ports[0], b"CLUSTER", b"MEET", b"127.0.0.1", b"%d" % port)
        key = b"k:0"  # slot 4468... owned by the first master unless told otherwise
        while not all(b"cluster_state:ok" in _call(p, b"CLUSTER", b"INFO") for p in ports):
            time.sleep(0.05)
        mine = [b"k:%d" % i for i in range(keys * 3)]
        owned = [k for k in mine if _call(ports[0], b"SET", k, b"v").startswith(b"+OK")][:keys]
        key = owned[0]
        t0 = time.monotonic()
        _stop(procs[0])
        stop_s = time.monotonic() - t0
        started = time.monotonic()
        procs[0] = subprocess.Popen(argvs[0], cwd=dirs[0], env=env, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
        listen_s, pong_s = _wait(procs[0], ports[0], started)
        while True:
            try:
                if _call(ports[0], b"GET", key).startswith(b"$1\r\nv"):
                    break
            except OSError:
                pass
            time.sleep(POLL_S)
        return stop_s, listen_s, pong_s, time.monotonic() - started
    finally:
        for proc in procs:
            _stop(proc)
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)
        if pycache is None:
            shutil.rmtree(env["PYTHONPYCACHEPREFIX"], ignore_errors=True)


def _burn() -> None:
    while True:
        pass


def _cluster_table(rows: list[tuple[str, str, str, Path | None, Path | None, int]], runs: int,
                   keys: int, work: Path) -> int:
    print("| node | bytecode | stop s | listening s | first PONG s | serving its keys s |")
    print("|---|---|---|---|---|---|")
    cases = [r for r in rows if r[5] == keys]
    got: dict[int, list[tuple[float, float, float, float]]] = {i: [] for i in range(len(cases))}
    for _ in range(runs):
        for i, (_name, kind, _cache, tree, pyc, _keys) in enumerate(cases):
            got[i].append(cluster_restart(kind, tree, pyc, keys, work))
    for i, (name, _kind, cache, _tree, _pyc, _keys) in enumerate(cases):
        med = [statistics.median(g[j] for g in got[i]) for j in range(4)]
        print(f"| {name} | {cache} | " + " | ".join(f"{m:.2f}" for m in med) + " |", flush=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--keys", type=int, default=2000, help="keys in the AOF of the restart case")
    ap.add_argument("--busy", type=int, default=0, help="busy-looping processes meanwhile")
    ap.add_argument("--before", type=Path, default=None, help="another tree's node")
    ap.add_argument("--cluster", action="store_true",
                    help="a master of a 3-master cluster restarted: stop, listen, PONG, serving")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="node-startup-"))
    burners = [multiprocessing.Process(target=_burn, daemon=True) for _ in range(args.busy)]
    for b in burners:
        b.start()
    try:
        targets: list[tuple[str, str, Path | None]] = [("ours", "node", None)]
        if args.before is not None:
            targets.insert(0, ("before", "node", args.before))
        print(f"load average {os.getloadavg()[0]:.1f}, busy {args.busy}, runs {args.runs}, "
              "medians")
        rows: list[tuple[str, str, str, Path | None, Path | None, int]] = []
        for name, kind, tree in targets:
            warm = work / f"pyc-{name}"
            one_start(kind, tree, warm, 0, work)  # fills the bytecode cache
            for cache, pyc in (("cold", None), ("warm", warm)):
                for keys in (0, args.keys):
                    rows.append((name, kind, cache, tree, pyc, keys))
        rows += [("redis-server", "redis", "-", None, work / "unused", k) for k in (0, args.keys)]
        if args.cluster:
            return _cluster_table(rows, args.runs, args.keys, work)
        print("| node | bytecode | data | listening s | first PONG s |")
        print("|---|---|---|---|---|")
        got: dict[int, list[tuple[float, float]]] = {i: [] for i in range(len(rows))}
        for _ in range(args.runs):  # interleaved: a drift of the machine's load hits every row
            for i, (_name, kind, _cache, tree, pyc, keys) in enumerate(rows):
                got[i].append(one_start(kind, tree, pyc, keys, work))
        for i, (name, _kind, cache, _tree, _pyc, keys) in enumerate(rows):
            listen = statistics.median(g[0] for g in got[i])
            pong = statistics.median(g[1] for g in got[i])
            data = f"{keys} keys in the AOF" if keys else "empty"
            print(f"| {name} | {cache} | {data} | {listen:.2f} | {pong:.2f} |", flush=True)
    finally:
        for b in burners:
            b.terminate()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
