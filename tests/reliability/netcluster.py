"""A Redis Cluster whose every node has a network namespace of its own (tests/netns.py), so
faults cut real links: six nodes (three masters, one replica each), bundled ("ours") or
redis-server 7.0 ("real"), each on port 7000 (bus 17000) of its own address and announcing it
(cluster-announce-ip), so the cluster bus and replication cross the bridge. Three more
namespaces: ``proxy`` (the slotgate proxy, when started), ``client`` (the workload) and
``ctl`` (the test's own queries and the probes), none of which a scenario cuts off unless it
says so.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import redis

from tests.netns import Network, enter_netns
from tests.support import REDIS_CLI, REDIS_SERVER, wait_until

NODE_PORT = 7000
BUS_PORT = 17000
PROXY_PORT = 6379
SLOW_DELAY_MS = 200
SMALL_DISK_MB = 4
ROOT = Path(__file__).resolve().parents[2]
NODES = tuple(f"n{i}" for i in range(1, 7))
KINDS = ("ours", "real")
T = TypeVar("T")


# Where the bundled nodes keep their bytecode. An installed package has it (pip compiles it),
# but a source tree run with PYTHONDONTWRITEBYTECODE=1 has none: every start would compile the
# whole node first (seconds under load), which is not what a node's restart costs.
PYCACHE = Path(tempfile.gettempdir()) / "slotgate-netcluster-pycache"


def node_argv(kind: str, address: str, workdir: Path, node_timeout_ms: int,
              extra: Sequence[str]) -> list[str]:
    program = [REDIS_SERVER] if kind == "real" else [
        "env", "-u", "PYTHONDONTWRITEBYTECODE", f"PYTHONPYCACHEPREFIX={PYCACHE}",
        sys.executable, "-m", "slotgate.node"]
    return [*program, "--port", str(NODE_PORT), "--bind", address, "--dir", str(workdir),
            "--save", "", "--appendonly", "no", "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", str(node_timeout_ms),
            "--cluster-announce-ip", address, "--protected-mode", "no", *extra]


class NetCluster:
    def __init__(self, net: Network, kind: str, workdir: Path, *, node_timeout_ms: int = 2000,
                 extra: Sequence[str] = (), relayed: Sequence[str] = (),
                 small_disk: Sequence[str] = ()) -> None:
        self.net = net
        self.small_disk = set(small_disk)  # nodes whose directory is a small tmpfs of their own
        self.ballast: list[Path] = []  # files filling a small disk
        self.relayed = set(relayed)  # nodes behind a delaying relay (slowlink.py)
        self.relays: dict[str, int] = {}  # node -> the relay's PID
        self.kind = kind
        self.workdir = workdir
        self.node_timeout_ms = node_timeout_ms
        self.extra = list(extra)
        for service in (*NODES, "proxy", "client", "ctl"):
            net.add(service, None)
        net.write_hosts()
        self.ctl = ThreadPoolExecutor(4, "ctl", initializer=enter_netns, initargs=(net.ns("ctl"),))
        self.proxy_address = ""
        self.proxy: subprocess.Popen[bytes] | None = None
        self.proxy_yaml = ""
        self.nodes: dict[str, subprocess.Popen[bytes]] = {}
        self.argvs: dict[str, list[str]] = {}
        self.reshard: subprocess.Popen[bytes] | None = None  # start_reshard's CLI

    # -- reaching nodes (from the ctl namespace) ------------------------------------------------
    def in_ctl(self, fn: Callable[..., T], *args: Any, timeout_s: float = 60.0) -> T:
        return self.ctl.submit(fn, *args).result(timeout_s)

    def ask(self, node: str, *command: object, timeout_s: float = 2.0) -> Any:
        """One command sent to ``node`` directly (from the ctl namespace)."""
        def call() -> Any:
            c = redis.Redis(host=self.net.address(node), port=NODE_PORT,
                            socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
            try:
                return c.execute_command(*command)
            finally:
                c.close()
        return self.in_ctl(call)

    def by_address(self) -> dict[str, str]:
        return {self.net.address(n): n for n in NODES}

    def nodes_view(self, node: str) -> list[list[str]]:
        """``node``'s CLUSTER NODES, a list of fields per line."""
        text = self.ask(node, "CLUSTER", "NODES").decode()
        return [line.split() for line in text.splitlines()]

    def masters(self, node: str = "n1") -> dict[str, list[str]]:
        """As ``node`` sees it: master service -> its replica services (failed ones too)."""
        view = self.nodes_view(node)
        names = {f[0]: self.by_address()[f[1].split(":")[0]] for f in view}
        out: dict[str, list[str]] = {names[f[0]]: [] for f in view if "master" in f[2] and len(f) > 8}
        for f in view:
            if "slave" in f[2] and f[3] in names and names[f[3]] in out:
                out[names[f[3]]].append(names[f[0]])
        return out

    def slots_of(self, node: str) -> set[int]:
        """The slots ``node`` serves, as it sees itself."""
        mine = next(f for f in self.nodes_view(node) if "myself" in f[2])
        out: set[int] = set()
        for token in mine[8:]:
            if not token.startswith("["):
                lo, _, hi = token.partition("-")
                out.update(range(int(lo), int(hi or lo) + 1))
        return out

    def role(self, node: str) -> str:
        return self.ask(node, "ROLE")[0].decode()

    # -- life cycle -----------------------------------------------------------------------------
    def start(self) -> None:
        for node in NODES:
            d = self.workdir / node
            d.mkdir(parents=True, exist_ok=True)
            address = self.net.address(node)
            argv = node_argv(self.kind, address, d, self.node_timeout_ms, self.extra)
            if node in self.relayed:
                argv[argv.index("--bind") + 1] = "127.0.0.1"
                self.relays[node] = self.net.start(self.net.ns(node), [
                    sys.executable, "-m", "tests.reliability.slowlink",
                    "--listen", f"{address}:{NODE_PORT}", "--to", f"127.0.0.1:{NODE_PORT}",
                    "--listen", f"{address}:{BUS_PORT}", "--to", f"127.0.0.1:{BUS_PORT}",
                    "--delay-ms", str(SLOW_DELAY_MS)], cwd=ROOT, log=d / "relay.log").pid
            if node in self.small_disk:
                # a tmpfs in the node's own mount namespace (ip netns exec makes one): gone
                # with the process, seen from outside through /proc/PID/root
                argv = ["sh", "-c", f'mount -t tmpfs -o size={SMALL_DISK_MB}m tmpfs "$0" && '
                        'exec "$@"', str(d), *argv]
            self.argvs[node] = argv
            self.nodes[node] = self.net.start(self.net.ns(node), argv, cwd=d, log=d / "node.log")
        for node in NODES:
            wait_until(partial(self.ask, node, "PING"), 90, f"{node} answering",
                       ignore=(redis.RedisError, OSError))
        addrs = [f"{self.net.address(n)}:{NODE_PORT}" for n in NODES]
        r = self.net.run(self.net.ns("ctl"), [REDIS_CLI, "--cluster", "create", *addrs,
                                               "--cluster-replicas", "1", "--cluster-yes"],
                         timeout_s=120)
        assert "All 16384 slots covered" in r.stdout, r.stdout + r.stderr
        self.wait_healthy(60)

    def healthy(self) -> bool:
        """Every node: cluster_state ok, the same three masters with the same slots (each
        with one replica in sync), no node flagged failing."""
        views = []
        for node in NODES:
            if b"cluster_state:ok" not in self.ask(node, "CLUSTER", "INFO"):
                return False
            view = self.nodes_view(node)
            if any("fail" in f[2] or f[7] != "connected" for f in view):
                return False
            views.append(sorted((f[0], f[2].replace("myself,", ""), f[3], *f[8:]) for f in view))
            info = self.ask(node, "INFO", "replication")
            if info["role"] == "slave" and (info.get("master_link_status") != "up"
                                            or info.get("master_sync_in_progress")):
                return False
        masters = self.masters()
        return all(v == views[0] for v in views) and len(masters) == 3 \
            and all(len(r) == 1 for r in masters.values())

    def wait_healthy(self, timeout_s: float) -> float:
        """Seconds until :meth:`healthy`."""
        t0 = _now()
        wait_until(self.healthy, timeout_s, "a healthy cluster", interval_s=0.2,
                   ignore=(redis.RedisError, OSError, KeyError))
        return _now() - t0

    def start_proxy(self, extra_yaml: str = "") -> str:
        """The slotgate proxy in its namespace, seeded with every node; its address."""
        d = self.workdir / "proxy"
        d.mkdir(parents=True, exist_ok=True)
        address = self.net.address("proxy")
        seeds = "".join(f"  - {self.net.address(n)}:{NODE_PORT}\n" for n in NODES)
        (d / "proxy.yaml").write_text(
            f'listen: "{address}:{PROXY_PORT}"\nseeds:\n{seeds}' + extra_yaml)
        self.proxy_yaml = extra_yaml
        self.proxy = self.net.start(self.net.ns("proxy"), [
            sys.executable, "-m", "slotgate.proxy", "--config", str(d / "proxy.yaml")],
            cwd=d, log=d / "proxy.log")

        def answers() -> bool:
            c = redis.Redis(host=address, port=PROXY_PORT, socket_timeout=2)
            try:
                return c.set("proxy:ready", "1") is True
            finally:
                c.close()

        wait_until(lambda: self.in_ctl(answers), 30, "the proxy serving",
                   ignore=(redis.RedisError, OSError))
        self.proxy_address = address
        return address

    def restart(self, node: str) -> None:
        """``node`` stopped (SIGTERM: it saves what its persistence settings say) and started
        again on the same directory, until it answers."""
        proc = self.nodes[node]
        proc.terminate()
        proc.wait(60)
        self.net.procs.remove(proc)
        d = self.workdir / node
        self.nodes[node] = self.net.start(self.net.ns(node), self.argvs[node], cwd=d,
                                          log=d / "node.log")
        wait_until(partial(self.ask, node, "PING"), 90, f"{node} answering again",
                   ignore=(redis.RedisError, OSError))

    def restart_proxy(self) -> None:
        """SIGTERM to the proxy (it drains, then exits), and the same proxy started again."""
        assert self.proxy is not None
        self.proxy.terminate()
        self.proxy.wait(30)
        self.net.procs.remove(self.proxy)
        self.start_proxy(self.proxy_yaml)

    def slow(self, node: str, on: bool) -> None:
        """``node``'s replies (and bus messages) leave ``SLOW_DELAY_MS`` late, or on time again:
        netem where the kernel has it, else the relay the node was started behind."""
        if node in self.relays:
            os.kill(self.relays[node], signal.SIGUSR1 if on else signal.SIGUSR2)
        elif on:
            self.net.delay(node, SLOW_DELAY_MS)

    def start_reshard(self, source: str, target: str, slots: int, rate: int) -> None:
        """``slotgate cluster reshard`` of ``slots`` slots from ``source`` to ``target`` (at
        most ``rate`` a second, MIGRATE timeout 2 s), started in the ctl namespace; it runs
        on while the caller does what it wants to it (:meth:`finish_reshard`)."""
        ids = {n: self.ask(n, "CLUSTER", "MYID").decode() for n in (source, target)}
        d = self.workdir / "reshard"
        d.mkdir(parents=True, exist_ok=True)
        self.reshard = self.net.start(self.net.ns("ctl"), [
            str(Path(sys.executable).parent / "slotgate"), "cluster", "reshard",
            f"{self.net.address(source)}:{NODE_PORT}", "--from", ids[source], "--to",
            ids[target], "--slots", str(slots), "--rate", str(rate), "--timeout", "2000",
            "--yes"], cwd=d, log=d / "reshard.log")
        wait_until(lambda: "Moving " in (d / "reshard.log").read_text(errors="replace"), 60,
                   "the reshard under way", interval_s=0.1)

    def finish_reshard(self) -> str:
        """The reshard waited for (stopped after 30 s), then ``slotgate cluster fix`` run
        until it exits 0 (an election may still be under way at first); what both printed."""
        proc = self.reshard
        assert proc is not None
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.terminate()
            proc.wait(10)
        d = self.workdir / "reshard"
        fixer = [str(Path(sys.executable).parent / "slotgate"), "cluster", "fix",
                 f"{self.net.address('n1')}:{NODE_PORT}"]

        def fixed() -> bool:
            r = self.net.run(self.net.ns("ctl"), fixer, timeout_s=120, cwd=d)
            with open(d / "fix.log", "a") as log:
                log.write(r.stdout + r.stderr + f"exit {r.returncode}\n")
            return r.returncode == 0

        def last_words() -> str:
            lines = (d / "fix.log").read_text(errors="replace").strip().splitlines()
            return "slotgate cluster fix exiting 0; it said: " + " / ".join(lines[-3:])

        wait_until(fixed, 120, last_words, interval_s=1.0)
        return (d / "reshard.log").read_text(errors="replace") + (d / "fix.log").read_text()

    def fill_disk(self, node: str) -> None:
        """``node``'s small disk filled up (a ballast file written until ENOSPC)."""
        path = Path(f"/proc/{self.nodes[node].pid}/root") / str(self.workdir / node).lstrip("/")
        ballast = path / "ballast"
        self.ballast.append(ballast)
        with open(ballast, "wb") as f:
            try:
                while True:
                    f.write(bytes(1 << 16))
                    f.flush()
            except OSError:
                pass  # full

    def heal(self) -> None:
        for ballast in self.ballast:
            ballast.unlink(missing_ok=True)
        self.ballast.clear()
        self.net.heal()
        for node in self.relays:
            self.slow(node, False)

    def close(self) -> None:
        self.ctl.shutdown(wait=False, cancel_futures=True)


def _now() -> float:
    import time
    return time.monotonic()
