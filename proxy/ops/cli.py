"""``slotgate``: the operator command.

    slotgate up [--port 7777] [--masters 3] [--replicas 1] [--data-dir DIR]
                [--node-base-port 7000] [--metrics 127.0.0.1:9479] [--host 127.0.0.1]
    slotgate cluster create HOST:PORT ... [--cluster-replicas N]
    slotgate cluster check HOST:PORT
    slotgate cluster info HOST:PORT
    slotgate cluster reshard | rebalance | fix | add-node | del-node | failover | call | import ...
        (cluster_args.py: arguments; cluster_cmds.py: the commands)

``up`` is the embedded default: it starts bundled nodes (``python -m slotgate.node``) on loopback, each
in ``DATA_DIR/node-<port>``, forms the cluster (or rejoins the one already in DATA_DIR), starts
the proxy with metrics, prints where to connect, and on Ctrl-C / SIGTERM stops the proxy and
then every node, by PID. A child that dies on its own stops the whole stack with status 1.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from slotgate.proxy.ops import checklist
from slotgate.proxy.ops.admin import (
    AdminError,
    Credentials,
    NodeClient,
    check_cluster,
    cluster_converged,
    cluster_nodes,
    create_cluster,
    parse_info,
)
from slotgate.proxy.ops.cluster_args import ACTIONS as CLUSTER_ACTIONS
from slotgate.proxy.ops.cluster_args import add_actions
from slotgate.proxy.ops.cluster_args import address_arg as _address
from slotgate.proxy.ops.cluster_args import count_arg as _positive
from slotgate.proxy.ops.cluster_args import run as run_cluster_action

CLUSTER_BUS_PORT_OFFSET = 10000


def _non_negative(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return int(text)


def _port(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"expected a port 1..65535, got {text!r}")
    return int(text)


def arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="slotgate", description="slotgate operator command")
    sub = p.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="start bundled nodes + proxy on loopback (the embedded default)")
    up.add_argument("--host", default="127.0.0.1", help="address the nodes and proxy bind to")
    up.add_argument("--port", type=_port, default=7777, help="proxy port (default 7777)")
    up.add_argument("--masters", type=_positive, default=3, help="masters (default 3, at least 3)")
    up.add_argument("--replicas", type=_non_negative, default=1,
                    help="replicas per master (default 1)")
    up.add_argument("--node-base-port", type=_port, default=7000,
                    help="first node port; nodes use consecutive ports and port+10000 for the bus")
    up.add_argument("--data-dir", type=Path, default=Path("slotgate-data"),
                    help="where nodes keep data and nodes.conf (default ./slotgate-data)")
    up.add_argument("--metrics", type=_address, default=("127.0.0.1", 9479),
                    help="HOST:PORT for /metrics and /healthz (default 127.0.0.1:9479)")
    up.add_argument("--node-timeout-ms", type=_positive, default=5000,
                    help="cluster-node-timeout of the bundled nodes (default 5000)")

    cl = sub.add_parser("cluster", help="cluster administration")
    clsub = cl.add_subparsers(dest="action", required=True)
    cr = clsub.add_parser("create", help="form a cluster of empty nodes")
    cr.add_argument("nodes", nargs="+", type=_address)
    cr.add_argument("--cluster-replicas", type=_non_negative, default=0)
    ck = clsub.add_parser("check", help="check slot coverage and agreement")
    ck.add_argument("node", type=_address)
    ck.add_argument("--bigkey-bytes", type=_positive, default=checklist.BIGKEY_BYTES,
                    help="a string longer than this is a big key")
    ck.add_argument("--bigkey-items", type=_positive, default=checklist.BIGKEY_ITEMS,
                    help="a list/hash/set/zset/stream with more items is a big key")
    ck.add_argument("--bigkey-sample", type=_non_negative, default=checklist.BIGKEY_SAMPLE,
                    help="keys sampled per master for big and hot keys (SCAN)")
    ck.add_argument("--hotkey-freq", type=_positive, default=checklist.HOTKEY_FREQ,
                    help="OBJECT FREQ at or above this is a hot key (needs an LFU "
                         f"maxmemory-policy; default {checklist.HOTKEY_FREQ})")
    inf = clsub.add_parser("info", help="masters, their slots and keys")
    inf.add_argument("node", type=_address)
    add_actions(clsub)
    for action in (cr, ck, inf):
        action.add_argument("--user", help="ACL user to log in to the nodes as (AUTH user pass)")
        action.add_argument("--password", default=os.environ.get(NODE_PASSWORD_ENV),
                            help=f"the nodes' password (default: ${NODE_PASSWORD_ENV})")
    return p


NODE_PASSWORD_ENV = "SLOTGATE_NODE_PASSWORD"


def _auth(ns: argparse.Namespace) -> Credentials:
    if ns.password is None:
        if ns.user is not None:
            raise AdminError("--user needs --password")
        return None
    return ns.user, ns.password


class _Stop(Exception):
    pass


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop(signum)


def _start(argv: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)  # Ctrl-C reaches us only; we stop them


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


def up(ns: argparse.Namespace) -> int:
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
    procs: list[subprocess.Popen[bytes]] = []
    previous = {s: signal.signal(s, _raise_stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        for port in ports:
            d = data_dir / f"node-{port}"
            argv = [sys.executable, "-m", "slotgate.node", "--port", str(port), "--bind", ns.host,
                    "--dir", str(d), "--cluster-enabled", "yes",
                    "--cluster-config-file", "nodes.conf",
                    "--cluster-node-timeout", str(ns.node_timeout_ms),
                    "--logfile", str(d / "node.log")]
            procs.append(_start(argv, d / "stdout.log"))
        addrs = [(ns.host, p) for p in ports]
        for addr, proc, port in zip(addrs, procs, ports, strict=True):
            _wait_listening(addr, proc, data_dir / f"node-{port}" / "stdout.log")
        with NodeClient(addrs[0]) as first:
            known = int(parse_info(first.text("CLUSTER", "INFO")).get("cluster_known_nodes", "1"))
        if known == 1:
            print(f"Forming a cluster of {ns.masters} masters x {ns.replicas} replicas in {data_dir}")
            create_cluster(addrs, replicas=ns.replicas)
        else:
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
        plog = data_dir / "proxy.log"
        pargv = [sys.executable, "-m", "slotgate.proxy", "--listen", f"{ns.host}:{ns.port}",
                 "--metrics", f"{ns.metrics[0]}:{ns.metrics[1]}"]
        for a in addrs:
            pargv += ["--seed", f"{a[0]}:{a[1]}"]
        proxy = _start(pargv, plog)
        procs.insert(0, proxy)  # stopped first, so in-flight requests still reach the nodes
        _wait_listening((ns.host, ns.port), proxy, plog)
        print(f"slotgate is up: connect to {ns.host}:{ns.port} "
              f"(e.g. redis-cli -p {ns.port}); metrics at "
              f"http://{ns.metrics[0]}:{ns.metrics[1]}/metrics; "
              f"nodes on {ports[0]}-{ports[-1]}; data in {data_dir}. Ctrl-C stops.", flush=True)
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
        for s, h in previous.items():
            signal.signal(s, h)


def cluster(ns: argparse.Namespace) -> int:
    try:
        auth = _auth(ns)
        if ns.action in CLUSTER_ACTIONS:
            return run_cluster_action(ns, auth)
        if ns.action == "create":
            create_cluster(ns.nodes, replicas=ns.cluster_replicas, auth=auth)
            print("[OK] cluster formed")
            return 0
        if ns.action == "check":
            problems = check_cluster(ns.node, auth)
            for p in problems:
                print(f"[ERR] {p}")
            if not problems:
                print("[OK] All nodes agree about slots configuration.")
                print("[OK] All 16384 slots covered.")
            sampling = checklist.Sampling(ns.bigkey_sample, ns.bigkey_bytes, ns.bigkey_items,
                                          ns.hotkey_freq)
            facts = checklist.gather(ns.node, auth, sampling)
            for finding in checklist.judge(facts):
                print(f"[WARNING] {finding}")
            return 1 if problems else 0  # warnings alone leave the exit status 0
        with NodeClient(ns.node, auth=auth) as c:
            for ln in cluster_nodes(c):
                if "master" in ln.flags and ln.slots:
                    host, _, port = ln.addr.rpartition(":")
                    with NodeClient((host or ns.node[0], int(port)), auth=auth) as m:
                        keys = m.check("DBSIZE")
                    print(f"{ln.addr} ({ln.id[:8]}...) -> {keys} keys | slots {' '.join(ln.slots)}")
        return 0
    except AdminError as exc:
        print(f"slotgate cluster {ns.action}: {exc}", file=sys.stderr)
        return 1


def main(argv: Sequence[str] | None = None) -> int:
    ns = arg_parser().parse_args(argv)
    if ns.command == "up":
        return up(ns)
    return cluster(ns)


if __name__ == "__main__":
    sys.exit(main())
