"""``slotgate``: the operator command.

    slotgate up [--port 7777] [--masters 3] [--replicas 1] [--data-dir DIR]
                [--node-base-port 7000] [--metrics 127.0.0.1:9479] [--host 127.0.0.1]
                [--backend bundled|redis-server] [--detach]
    slotgate down [--data-dir DIR]
    slotgate cluster create HOST:PORT ... [--cluster-replicas N]
    slotgate cluster check HOST:PORT
    slotgate cluster info HOST:PORT
    slotgate cluster reshard | rebalance | fix | add-node | del-node | failover | call | import ...
        (cluster_args.py: arguments; cluster_cmds.py: the commands)

``up`` is the embedded default and ``down`` stops a detached one (up.py).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path

from slotgate import BUILD
from slotgate.proxy.ops import checklist
from slotgate.proxy.ops import up as up_cmd
from slotgate.proxy.ops.admin import (
    AdminError,
    Credentials,
    NodeClient,
    check_cluster,
    cluster_nodes,
    create_cluster,
)
from slotgate.proxy.ops.cluster_args import ACTIONS as CLUSTER_ACTIONS
from slotgate.proxy.ops.cluster_args import add_actions, tls_flags, use_tls
from slotgate.proxy.ops.cluster_args import address_arg as _address
from slotgate.proxy.ops.cluster_args import count_arg as _positive
from slotgate.proxy.ops.cluster_args import run as run_cluster_action


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
    p.add_argument("--version", action="version",
                   version=f"slotgate {version('slotgate')}, {BUILD.describe()}",
                   help="the version, and whether the compiled build is loaded")
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
                    help="cluster-node-timeout of the nodes (default 5000)")
    up.add_argument("--backend", choices=up_cmd.BACKENDS, default="bundled",
                    help="the nodes: bundled (python -m slotgate.node, the default) or "
                         "redis-server (real Redis, when installed)")
    up.add_argument("--detach", action="store_true",
                    help="run in the background once up; stop with slotgate down")
    up.add_argument("--detached-child", action="store_true", help=argparse.SUPPRESS)
    dn = sub.add_parser("down", help="stop a slotgate up (detached or not) by its recorded PIDs")
    dn.add_argument("--data-dir", type=Path, default=Path("slotgate-data"),
                    help="the data directory the run uses (default ./slotgate-data)")

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
        tls_flags(action)
    return p


NODE_PASSWORD_ENV = "SLOTGATE_NODE_PASSWORD"


def _auth(ns: argparse.Namespace) -> Credentials:
    if ns.password is None:
        if ns.user is not None:
            raise AdminError("--user needs --password")
        return None
    return ns.user, ns.password


def cluster(ns: argparse.Namespace) -> int:
    try:
        auth = _auth(ns)
        use_tls(ns)
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
    words = list(sys.argv[1:] if argv is None else argv)
    ns = arg_parser().parse_args(words)
    if ns.command == "up":
        return up_cmd.up(ns, words)
    if ns.command == "down":
        return up_cmd.down(ns)
    return cluster(ns)


if __name__ == "__main__":
    sys.exit(main())
