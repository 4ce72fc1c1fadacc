"""The soak: a mixed workload through the proxy for a long time (an hour by default) on bundled
nodes (3 masters, 3 replicas), with a fault every few minutes, sampling the RSS of every
process and the request latency, checking that no acknowledged write is lost, and plotting
memory and latency over time.

    .venv/bin/python bench/soak.py [--minutes 60] [--fault-every-s 150] [--out bench/soak]

Writes ``OUT.json`` (every sample, every fault, every epoch's verdict) and ``OUT.png`` (the
plot; matplotlib, the optional ``bench`` dependency). The run stops by itself and stops every
process it started, by PID (also on SIGINT/SIGTERM).

The workload: client threads, each the only writer of its keys: registers (SET, GET, and
MSET/MGET of three registers in different slots), counters (INCR), hash fields (HSET/HGET)
and lists (RPUSH of unique values, LLEN); a publisher and a subscriber on one channel. The
proxy runs with ``writes.durable_writes: 1``: a write is acknowledged once a replica has it,
so a master killed with -9 must lose none of them. Time is cut into epochs, one per fault:
each epoch uses keys of its own; once its fault has healed and the cluster is whole again,
the epoch's keys are read back and its history judged (tests/history.py; lists: every
acknowledged push is there), then its keys are deleted, so the data set stays the same size
and any memory growth is the processes' own.

The faults, in turn: kill -9 of a master (restarted once its replica took over), SIGSTOP of a
replica for 8 s, 30 slots moved between two masters under load (``slotgate cluster
reshard``), a manual failover (CLUSTER FAILOVER on a replica).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis  # noqa: E402
from redis.backoff import NoBackoff  # noqa: E402
from redis.exceptions import RedisClusterException  # noqa: E402
from redis.retry import Retry  # noqa: E402

from tests.history import Op, Recorder, Status, check  # noqa: E402
from tests.support import (  # noqa: E402
    ManagedProcess,
    create_cluster,
    free_port,
    rss_bytes,
    slotgate_node,
    wait_until,
)

WORKERS = 4
REGISTERS = 12  # per worker and epoch
COUNTERS = 3
HASHES = 2
FIELDS = 8
LISTS = 2
OP_PAUSE_S = 0.02
NODE_TIMEOUT_MS = 2000
STOP_HOLD_S = 8.0
MOVE_SLOTS = 30
CHANNEL = "soak:events"
PROXY_YAML = """\
listen: "127.0.0.1:{port}"
seeds:
{seeds}
backend:
  command_timeout: "2s"
retry:
  deadline: "5s"
writes:
  durable_writes: 1
  durable_timeout: "1s"
"""
UNKNOWN_FATE = ("may or may not have been applied", "slotgate: write applied on")


def judge(exc: BaseException) -> Status:
    """An error reply means the write did not run, except the proxy's unknown-fate and
    not-durable errors; a timeout or a lost connection: unknown."""
    if isinstance(exc, redis.ResponseError) and not any(s in str(exc) for s in UNKNOWN_FATE):
        return "fail"
    return "info"


def unknown(exc: BaseException) -> Status:
    """MSET across slots: an error may follow a part of it."""
    return "info"


# -- the cluster ----------------------------------------------------------------------------------
class Cluster:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        extra = ["--cluster-node-timeout", str(NODE_TIMEOUT_MS)]
        self.nodes = [slotgate_node(workdir, cluster=True, extra=extra) for _ in range(6)]
        self.proxy: ManagedProcess | None = None

    def start(self) -> None:
        for n in self.nodes:
            n.start()
        create_cluster(self.nodes, replicas=1)
        self.wait_healthy(120)
        port = free_port()
        d = self.workdir / "proxy"
        d.mkdir(parents=True, exist_ok=True)
        seeds = "".join(f"  - 127.0.0.1:{n.port}\n" for n in self.nodes)
        (d / "proxy.yaml").write_text(PROXY_YAML.format(port=port, seeds=seeds.rstrip("\n")))
        self.proxy = ManagedProcess([sys.executable, "-m", "slotgate.proxy", "--config",
                                     str(d / "proxy.yaml")], port, d, "proxy.log").start()

    def stop(self) -> None:
        for p in [*self.nodes, *([self.proxy] if self.proxy else [])]:
            p.stop()

    def processes(self) -> dict[str, ManagedProcess]:
        out = {f"node {n.port}": n for n in self.nodes}
        if self.proxy is not None:
            out["proxy"] = self.proxy
        return out

    def by_port(self, port: int) -> ManagedProcess:
        return next(n for n in self.nodes if n.port == port)

    def view(self) -> list[list[str]]:
        """CLUSTER NODES from the first live node that answers."""
        for n in self.nodes:
            if not n.alive():
                continue
            try:
                text = n.client(socket_timeout=2).execute_command("CLUSTER", "NODES").decode()
            except (redis.RedisError, OSError):
                continue
            return [line.split() for line in text.splitlines()]
        raise RuntimeError("no node answers")

    def masters(self) -> dict[int, list[int]]:
        """master port -> its replicas' ports (connected, not failed)."""
        view = self.view()
        port = {f[0]: int(f[1].split(":")[1].split("@")[0]) for f in view}
        out: dict[int, list[int]] = {port[f[0]]: [] for f in view
                                     if "master" in f[2] and "fail" not in f[2] and len(f) > 8}
        for f in view:
            if "slave" in f[2] and "fail" not in f[2] and port.get(f[3]) in out:
                out[port[f[3]]].append(port[f[0]])
        return out

    def node_id(self, port: int) -> str:
        return self.by_port(port).client(socket_timeout=2).execute_command(
            "CLUSTER", "MYID").decode()

    def healthy(self) -> bool:
        """Every node up with cluster_state ok, three masters with one replica each, every
        replica's link up, every node agreeing on who owns what."""
        views = set()
        for n in self.nodes:
            c = n.client(socket_timeout=2)
            try:
                if b"cluster_state:ok" not in c.execute_command("CLUSTER", "INFO"):
                    return False
                info = c.info("replication")
                if info["role"] == "slave" and info.get("master_link_status") != "up":
                    return False
                text = c.execute_command("CLUSTER", "NODES").decode()
            finally:
                c.close()
            views.add(tuple(sorted(
                " ".join([f[0], "master" if "master" in f[2] else f[3], *f[8:]])
                for f in (line.split() for line in text.splitlines()))))
        if len(views) != 1:
            return False
        masters = self.masters()
        return len(masters) == 3 and all(len(r) == 1 for r in masters.values())

    def wait_healthy(self, timeout_s: float) -> float:
        t0 = time.monotonic()
        wait_until(self.healthy, timeout_s, "a whole cluster", interval_s=0.5,
                   ignore=(redis.RedisError, OSError, RuntimeError))
        return time.monotonic() - t0


# -- the faults -----------------------------------------------------------------------------------
def kill_master(cluster: Cluster, rng: random.Random) -> str:
    masters = cluster.masters()
    victim = rng.choice(sorted(masters))
    replica = masters[victim][0]
    node = cluster.by_port(victim)
    node.kill()
    wait_until(lambda: replica in cluster.masters(), 60, "the replica taking over",
               interval_s=0.2, ignore=(redis.RedisError, OSError, RuntimeError))
    node.start()
    return f"kill -9 master {victim} (replica {replica} took over; restarted)"


def stop_replica(cluster: Cluster, rng: random.Random) -> str:
    replicas = sorted(r for rs in cluster.masters().values() for r in rs)
    victim = cluster.by_port(rng.choice(replicas))
    os.kill(victim.pid, signal.SIGSTOP)
    try:
        time.sleep(STOP_HOLD_S)  # the fault lasts this long
    finally:
        os.kill(victim.pid, signal.SIGCONT)
    return f"SIGSTOP replica {victim.port} for {STOP_HOLD_S:.0f} s"


def move_slots(cluster: Cluster, rng: random.Random) -> str:
    src, dst = rng.sample(sorted(cluster.masters()), 2)
    argv = [str(Path(sys.executable).parent / "slotgate"), "cluster", "reshard",
            f"127.0.0.1:{src}", "--from", cluster.node_id(src), "--to", cluster.node_id(dst),
            "--slots", str(MOVE_SLOTS), "--yes"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL, check=False)
    tail = (done.stderr or done.stdout).strip().splitlines()[-1:] if done.returncode else []
    return f"{MOVE_SLOTS} slots moved {src} -> {dst} (exit {done.returncode}{': ' if tail else ''}" \
        f"{tail[0] if tail else ''})"


def failover(cluster: Cluster, rng: random.Random) -> str:
    masters = cluster.masters()
    master = rng.choice(sorted(masters))
    replica = masters[master][0]
    cluster.by_port(replica).client(socket_timeout=5).execute_command("CLUSTER", "FAILOVER")
    wait_until(lambda: replica in cluster.masters(), 60, "the manual failover",
               interval_s=0.2, ignore=(redis.RedisError, OSError, RuntimeError))
    return f"CLUSTER FAILOVER on replica {replica} of {master}"


FAULTS: list[Callable[[Cluster, random.Random], str]] = [
    kill_master, stop_replica, move_slots, failover]


# -- the workload ---------------------------------------------------------------------------------
@dataclass
class Epoch:
    number: int
    rec: Recorder = field(default_factory=Recorder)
    pushed: dict[str, list[str]] = field(default_factory=dict)  # list -> acknowledged values


class Workload:
    def __init__(self, proxy_port: int, seed: int) -> None:
        self.port = proxy_port
        self.seed = seed
        self.stop = threading.Event()
        self.epoch = Epoch(0)
        self.at_epoch = [0] * WORKERS
        self.lock = threading.Lock()
        self.latencies_s: list[float] = []  # acknowledged operations since the last sample
        self.errors = 0
        self.published = 0
        self.received = 0
        self.threads = [threading.Thread(target=self._work, args=(p,), name=f"w{p}", daemon=True)
                        for p in range(WORKERS)]
        self.threads += [threading.Thread(target=self._publish, daemon=True),
                         threading.Thread(target=self._subscribe, daemon=True)]

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=10, socket_connect_timeout=2,
                           retry=Retry(NoBackoff(), 0))

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)

    def next_epoch(self) -> Epoch:
        """A new epoch; the old one once every worker has left it."""
        old = self.epoch
        self.epoch = Epoch(old.number + 1)
        wait_until(lambda: all(e == self.epoch.number for e in self.at_epoch), 60,
                   "every worker in the new epoch")
        return old

    def take_window(self) -> tuple[list[float], int]:
        with self.lock:
            lat, self.latencies_s = self.latencies_s, []
            errors, self.errors = self.errors, 0
        return lat, errors

    def _timed(self, epoch: Epoch, p: int, kind: str, key: str, value: object,
               call: Callable[[], object], how: Callable[[BaseException], Status] = judge,
               ) -> tuple[Status, Any]:
        """``call()`` timed and recorded in the epoch's history (reads, increments and pushes
        record the reply); its status and reply."""
        start = time.monotonic()
        status: Status = "ok"
        try:
            reply = call()
        except Exception as exc:  # every failure is part of the history
            reply, status = None, how(exc)
        end = time.monotonic()
        got = value if kind == "write" else reply
        epoch.rec.add(Op(p, kind, key, got, start, end, status))  # type: ignore[arg-type]
        self._count(status, end - start)
        return status, reply

    def _count(self, status: Status, elapsed_s: float) -> None:
        with self.lock:
            if status == "ok":
                self.latencies_s.append(elapsed_s)
            else:
                self.errors += 1

    def _work(self, p: int) -> None:
        rng = random.Random(self.seed * 100 + p)
        c = self.client()
        seq = 0
        while not self.stop.is_set():
            epoch = self.epoch
            self.at_epoch[p] = epoch.number
            e = epoch.number
            regs = [f"r:{e}:{p}:{i}" for i in range(REGISTERS)]
            seq += 1
            value = f"{p}-{seq}"
            roll = rng.random()
            try:
                if roll < 0.3:
                    key = rng.choice(regs)
                    self._timed(epoch, p, "write", key, value, partial(c.set, key, value))
                elif roll < 0.5:
                    key = rng.choice(regs + [f"c:{e}:{p}:{i}" for i in range(COUNTERS)])
                    self._timed(epoch, p, "read", key, None, partial(c.get, key))
                elif roll < 0.6:
                    key = f"c:{e}:{p}:{rng.randrange(COUNTERS)}"
                    self._timed(epoch, p, "incr", key, None, partial(c.incr, key))
                elif roll < 0.7:
                    h, f = f"h:{e}:{p}:{rng.randrange(HASHES)}", f"f{rng.randrange(FIELDS)}"
                    if rng.random() < 0.6:
                        self._timed(epoch, p, "write", f"{h}/{f}", value,
                                    partial(c.hset, h, f, value))
                    else:
                        self._timed(epoch, p, "read", f"{h}/{f}", None, partial(c.hget, h, f))
                elif roll < 0.8:
                    key = f"l:{e}:{p}:{rng.randrange(LISTS)}"
                    if self._push(epoch, p, c, key, value):
                        epoch.pushed.setdefault(key, []).append(value)
                elif roll < 0.9:
                    keys = rng.sample(regs, 3)
                    values = [f"{value}.{i}" for i in range(3)]
                    self._many(epoch, p, "write", keys, values,
                               partial(c.mset, dict(zip(keys, values, strict=True))), unknown)
                else:
                    keys = rng.sample(regs, 3)
                    self._many(epoch, p, "read", keys, None, partial(c.mget, keys), judge)
            except Exception as exc:  # noqa: BLE001 - a bug of this driver: logged, work goes on
                print(f"worker {p}: {exc!r}", flush=True)
            time.sleep(OP_PAUSE_S)
        c.close()

    def _push(self, epoch: Epoch, p: int, c: redis.Redis, key: str, value: str) -> bool:
        status, _ = self._timed(epoch, p, "list", key, value, partial(c.rpush, key, value))
        return status == "ok"

    def _many(self, epoch: Epoch, p: int, kind: str, keys: list[str], values: list[str] | None,
              call: Callable[[], Any], how: Callable[[BaseException], Status]) -> None:
        """One multi-key command, recorded as one operation per key."""
        start = time.monotonic()
        try:
            reply = call()
            status: Status = "ok"
        except Exception as exc:  # every failure is part of the history
            reply, status = None, how(exc)
        end = time.monotonic()
        for i, key in enumerate(keys):
            got = values[i] if values is not None else (reply[i] if reply is not None else None)
            epoch.rec.add(Op(p, kind, key, got, start, end, status))  # type: ignore[arg-type]
        self._count(status, end - start)

    def _publish(self) -> None:
        c = self.client()
        while not self.stop.is_set():
            try:
                c.publish(CHANNEL, str(self.published))
                self.published += 1
            except (redis.RedisError, OSError):
                pass
            time.sleep(0.05)
        c.close()

    def _subscribe(self) -> None:
        while not self.stop.is_set():
            ps = self.client().pubsub()
            try:
                ps.subscribe(CHANNEL)
                while not self.stop.is_set():
                    msg = ps.get_message(timeout=1.0)
                    if msg and msg["type"] == "message":
                        self.received += 1
            except (redis.RedisError, OSError):
                time.sleep(0.5)
            finally:
                ps.close()


def judge_epoch(cluster: Cluster, epoch: Epoch) -> dict[str, Any]:
    """The epoch's history checked against its keys as they are now; then the keys deleted."""
    ops = epoch.rec.snapshot()
    rc = redis.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port, socket_timeout=5)
    try:
        keys = {op.key for op in ops}
        final: dict[str, object] = {}
        for key in keys:
            if key.startswith("h:"):
                h, f = key.split("/")
                final[key] = rc.hget(h, f)
            elif not key.startswith("l:"):
                final[key] = rc.get(key)
        lists_lost = 0
        for key, values in epoch.pushed.items():
            there = set(rc.lrange(key, 0, -1))
            lists_lost += sum(v.encode() not in there for v in values)
        counters = [k for k in keys if k.startswith("c:")]
        history = [op for op in ops if op.kind != "list"]
        report = check(history, final, counters, linearizability=False)
        names = {k.split("/")[0] for k in keys}
        for name in names:
            rc.delete(name)
    finally:
        rc.close()
    return {"epoch": epoch.number, "operations": len(ops), "acknowledged": report.acknowledged,
            "refused": report.failed, "unknown": report.unknown, "lost": len(report.lost),
            "lost_list_pushes": lists_lost, "stale": len(report.stale),
            "never_written": len(report.never_written),
            "lost_examples": [f"{op.key}={op.value}" for op in report.lost[:5]]}


def judge_safely(cluster: Cluster, epoch: Epoch) -> dict[str, Any]:
    """:func:`judge_epoch`, its failure reported (the final reads retried for a minute)."""
    try:
        return wait_until(lambda: judge_epoch(cluster, epoch), 60, "the epoch's final reads",
                          interval_s=1.0, ignore=(redis.RedisError, RedisClusterException, OSError))
    except AssertionError as exc:
        return {"epoch": epoch.number, "operations": 0, "acknowledged": 0, "refused": 0,
                "unknown": 0, "lost": 0, "lost_list_pushes": 0, "stale": 0,
                "never_written": 0, "error": str(exc)}


# -- sampling, the run, the plot ----------------------------------------------------------------
def percentile_ms(values_s: list[float], pct: int) -> float | None:
    if not values_s:
        return None
    ordered = sorted(values_s)
    return round(ordered[min(len(ordered) - 1, len(ordered) * pct // 100)] * 1000, 2)


class Sampler:
    def __init__(self, cluster: Cluster, load: Workload, every_s: float, t0: float) -> None:
        self.cluster, self.load, self.every_s, self.t0 = cluster, load, every_s, t0
        self.samples: list[dict[str, Any]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(self.every_s):
            lat, errors = self.load.take_window()
            rss: dict[str, float | None] = {}
            pids: dict[str, int | None] = {}
            for name, proc in self.cluster.processes().items():
                try:
                    rss[name] = round(rss_bytes(proc.pid) / 2**20, 2) if proc.alive() else None
                    pids[name] = proc.pid if proc.alive() else None
                except (OSError, AssertionError):
                    rss[name] = pids[name] = None
            self.samples.append({
                "t_s": round(time.monotonic() - self.t0, 1), "ops": len(lat), "errors": errors,
                "ops_per_s": round(len(lat) / self.every_s, 1),
                "p50_ms": percentile_ms(lat, 50), "p99_ms": percentile_ms(lat, 99),
                "rss_mb": rss, "pid": pids})


def growth(samples: list[dict[str, Any]], warmup_s: float = 120.0) -> dict[str, Any]:
    """Per process: its RSS (MB) at the start and end of its longest-lived incarnation
    (a node killed and restarted is a new one), past its first ``warmup_s``, the slope of a
    least-squares line over that span (MB per hour) and the span (minutes)."""
    out = {}
    names = {name for s in samples for name in s["rss_mb"]}
    for name in sorted(names):
        lives: dict[int, list[tuple[float, float]]] = {}
        for s in samples:
            pid, mb = s["pid"].get(name), s["rss_mb"].get(name)
            if pid and mb:
                lives.setdefault(pid, []).append((s["t_s"], mb))
        spans = [[(t, mb) for t, mb in pts if t >= pts[0][0] + warmup_s]
                 for pts in lives.values()]
        span = max(spans, key=len, default=[])
        if len(span) < 5:
            continue
        xs, ys = zip(*span, strict=True)
        slope = statistics.linear_regression(xs, ys).slope * 3600
        out[name] = {"start_mb": ys[0], "end_mb": ys[-1], "max_mb": max(ys),
                     "slope_mb_per_h": round(slope, 2), "span_min": round((xs[-1] - xs[0]) / 60, 1),
                     "incarnations": len(lives)}
    return out


def plot(result: dict[str, Any], png: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = result["samples"]
    t_min = [s["t_s"] / 60 for s in samples]
    fig, (mem, lat, rate) = plt.subplots(3, 1, figsize=(11, 9), sharex=True)
    for name in samples[-1]["rss_mb"] if samples else []:
        mem.plot(t_min, [s["rss_mb"].get(name) for s in samples], label=name, linewidth=1)
    mem.set_ylabel("RSS (MB)")
    mem.legend(fontsize=7, ncol=4, loc="upper left")
    lat.plot(t_min, [s["p50_ms"] for s in samples], label="p50", linewidth=1)
    lat.plot(t_min, [s["p99_ms"] for s in samples], label="p99", linewidth=1)
    lat.set_yscale("log")
    lat.set_ylabel("latency (ms), acknowledged ops")
    lat.legend(fontsize=8, loc="upper left")
    rate.plot(t_min, [s["ops_per_s"] for s in samples], label="acknowledged ops/s", linewidth=1)
    rate.plot(t_min, [s["errors"] / result["sample_every_s"] for s in samples],
              label="errors/s", linewidth=1)
    rate.set_ylabel("per second")
    rate.set_xlabel("minutes")
    rate.legend(fontsize=8, loc="upper left")
    for f in result["faults"]:
        for ax in (mem, lat, rate):
            ax.axvline(f["t_s"] / 60, color="grey", alpha=0.35, linewidth=0.8)
    mem.set_title(f"slotgate soak: proxy + 3 masters + 3 replicas, {result['minutes']} min, "
                  f"{len(result['faults'])} faults (grey lines)", fontsize=10)
    fig.tight_layout()
    fig.savefig(png, dpi=90)
    plt.close(fig)


def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    rng = random.Random(args.seed)
    cluster = Cluster(workdir)
    result: dict[str, Any] = {"minutes": args.minutes, "fault_every_s": args.fault_every_s,
                              "sample_every_s": args.sample_every_s, "faults": [],
                              "epochs": [], "samples": []}
    stopping = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        cluster.start()
        assert cluster.proxy is not None
        load = Workload(cluster.proxy.port, args.seed)
        t0 = time.monotonic()
        end_s = t0 + args.minutes * 60
        sampler = Sampler(cluster, load, args.sample_every_s, t0)
        load.start()
        sampler.thread.start()
        fault_no = 0
        try:
            while time.monotonic() < end_s and not stopping.is_set():
                if stopping.wait(min(args.fault_every_s, max(0.0, end_s - time.monotonic()))):
                    break
                if time.monotonic() >= end_s:
                    break
                fault = FAULTS[fault_no % len(FAULTS)]
                fault_no += 1
                at = round(time.monotonic() - t0, 1)
                try:
                    what = fault(cluster, rng)
                    healed = round(cluster.wait_healthy(180), 1)
                except Exception as exc:  # noqa: BLE001 - the run goes on, the failure is reported
                    what, healed = f"{fault.__name__} failed: {exc!r}", -1.0
                    try:
                        cluster.wait_healthy(180)
                    except AssertionError:
                        pass
                entry = {"t_s": at, "fault": what, "healthy_after_s": healed}
                result["faults"].append(entry)
                verdict = judge_safely(cluster, load.next_epoch())
                result["epochs"].append(verdict)
                print(json.dumps({**entry, **verdict}), flush=True)
                result["samples"] = sampler.samples
                Path(args.out + ".json").write_text(json.dumps(result, indent=1))
        finally:
            sampler.stop.set()
            sampler.thread.join(10)
            load.finish()
        result["epochs"].append(judge_safely(cluster, load.epoch))
        result["samples"] = sampler.samples
        result["published"], result["received"] = load.published, load.received
    finally:
        cluster.stop()
    samples = result["samples"]
    result["growth"] = growth(samples)
    lat50 = [s["p50_ms"] for s in samples if s["p50_ms"] is not None]
    lat99 = [s["p99_ms"] for s in samples if s["p99_ms"] is not None]
    result["summary"] = {
        "acknowledged": sum(e["acknowledged"] for e in result["epochs"]),
        "lost": sum(e["lost"] + e["lost_list_pushes"] for e in result["epochs"]),
        "stale": sum(e["stale"] for e in result["epochs"]),
        "never_written": sum(e["never_written"] for e in result["epochs"]),
        "median_p50_ms": statistics.median(lat50) if lat50 else None,
        "median_p99_ms": statistics.median(lat99) if lat99 else None,
        "worst_p99_ms": max(lat99, default=None),
    }
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--fault-every-s", type=float, default=150.0)
    ap.add_argument("--sample-every-s", type=float, default=5.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "soak"),
                    help="OUT.json and OUT.png are written")
    ap.add_argument("--plot-only", action="store_true", help="redraw OUT.png from OUT.json")
    args = ap.parse_args()
    if args.plot_only:
        plot(json.loads(Path(args.out + ".json").read_text()), Path(args.out + ".png"))
        return
    with tempfile.TemporaryDirectory(prefix="soak-") as d:
        result = run(args, Path(d))
    Path(args.out + ".json").write_text(json.dumps(result, indent=1))
    print(json.dumps({"summary": result["summary"], "growth": result["growth"],
                      "published": result.get("published"), "received": result.get("received")},
                     indent=1), flush=True)
    plot(result, Path(args.out + ".png"))


if __name__ == "__main__":
    main()
