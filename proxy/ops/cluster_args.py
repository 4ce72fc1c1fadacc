"""The arguments of ``slotgate cluster reshard | rebalance | fix | add-node | del-node |
failover | call | import`` and their dispatch to ``cluster_cmds.py``. Options carry redis-cli
--cluster's names too (``--cluster-from`` as well as ``--from`` ...), so scripts port as is."""

from __future__ import annotations

import argparse
import os
import ssl
import sys
from collections.abc import Callable

from slotgate.proxy.ops import admin, cluster_cmds, importer
from slotgate.proxy.ops.admin import AdminError, Credentials
from slotgate.proxy.ops.reshard import MoveOptions
from slotgate.proxy.ops.reshard_plan import PlanError
from slotgate.proxy.ops.settings import parse_address

NODE_PASSWORD_ENV = "SLOTGATE_NODE_PASSWORD"
ACTIONS = ("reshard", "rebalance", "fix", "add-node", "del-node", "failover", "call", "import")


def address_arg(text: str) -> tuple[str, int]:
    """argparse type: host:port (cli.py uses it too)."""
    try:
        return parse_address(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def count_arg(text: str) -> int:
    """argparse type: a whole number >= 1 (cli.py uses it too)."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(text)


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number per second >= 0, got {text!r}")
    return value


def _moving(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pipeline", "--cluster-pipeline", type=count_arg, default=10,
                   help="keys per GETKEYSINSLOT/MIGRATE round (default 10)")
    p.add_argument("--timeout", "--cluster-timeout", type=count_arg, default=60000,
                   help="MIGRATE timeout in milliseconds (default 60000)")
    p.add_argument("--replace", "--cluster-replace", action="store_true",
                   help="MIGRATE with REPLACE (a key already on the target is overwritten)")
    p.add_argument("--rate", type=_rate, default=0.0,
                   help="at most this many slots per second (default: no limit)")
    p.add_argument("--progress-every", type=count_arg, default=50,
                   help="when stderr is not a terminal: a progress line every N slots")


def _credentials(p: argparse.ArgumentParser) -> None:
    p.add_argument("--user", help="ACL user to log in to the nodes as (AUTH user pass)")
    p.add_argument("--password", default=os.environ.get(NODE_PASSWORD_ENV),
                   help=f"the nodes' password (default: ${NODE_PASSWORD_ENV})")
    tls_flags(p)


def tls_flags(p: argparse.ArgumentParser) -> None:
    """redis-cli's TLS flags: every node connection of the command uses TLS."""
    p.add_argument("--tls", action="store_true", help="connect to the nodes with TLS")
    p.add_argument("--cacert", help="CA certificates to verify the nodes with (PEM)")
    p.add_argument("--cert", help="client certificate to present to the nodes (PEM)")
    p.add_argument("--key", help="its private key (PEM)")
    p.add_argument("--sni", help="the name the nodes' certificates must hold (default: the host)")
    p.add_argument("--insecure", action="store_true", help="do not verify the nodes' certificates")


def use_tls(ns: argparse.Namespace) -> None:
    """The TLS flags into ``admin.TLS``; raises ``AdminError`` for unusable files."""
    if not ns.tls:
        return
    ctx = ssl.create_default_context(cafile=ns.cacert)
    if ns.insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    try:
        if ns.cert is not None:
            ctx.load_cert_chain(ns.cert, ns.key)
    except (OSError, ssl.SSLError) as exc:
        raise AdminError(f"--cert/--key: cannot load: {exc}") from exc
    admin.TLS.context, admin.TLS.server_name = ctx, ns.sni


def add_actions(clsub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    rs = clsub.add_parser("reshard", help="move slots to one master (resumes cut-short moves)")
    rs.add_argument("node", type=address_arg)
    rs.add_argument("--from", "--cluster-from", dest="source", required=True,
                    help="source node ids, comma-separated, or 'all'")
    rs.add_argument("--to", "--cluster-to", dest="target", required=True, help="target node id")
    rs.add_argument("--slots", "--cluster-slots", type=count_arg, required=True,
                    help="how many slots to move")
    rs.add_argument("--yes", "--cluster-yes", action="store_true", help="do not ask to confirm")
    rs.add_argument("--dry-run", action="store_true", help="print the plan, move nothing")
    _moving(rs)
    rb = clsub.add_parser("rebalance", help="even the slots out among masters, by weight")
    rb.add_argument("node", type=address_arg)
    rb.add_argument("--weight", "--cluster-weight", action="append", default=[],
                    metavar="NODE_ID=W", help="a master's weight (default 1); repeatable")
    rb.add_argument("--use-empty-masters", "--cluster-use-empty-masters", action="store_true",
                    help="masters without slots receive some too")
    rb.add_argument("--threshold", "--cluster-threshold", type=_rate, default=2.0,
                    help="act only when a master is more than this percent off (default 2)")
    rb.add_argument("--simulate", "--cluster-simulate", "--dry-run", dest="dry_run",
                    action="store_true", help="print the plan, move nothing")
    rb.add_argument("--by-traffic", dest="traffic", action="append", default=[],
                    type=address_arg, metavar="PROXY_METRICS_HOST:PORT",
                    help="weigh slots by the requests a proxy counted per slot (its /slots "
                         "beside /metrics); repeat for several proxies")
    rb.add_argument("--traffic-window", type=_rate, default=0.0, metavar="SECONDS",
                    help="with --by-traffic: count only the requests of the next SECONDS "
                         "(default: since each proxy started)")
    _moving(rb)
    fx = clsub.add_parser("fix", help="finish open slots, give uncovered slots an owner")
    fx.add_argument("node", type=address_arg)
    _moving(fx)
    an = clsub.add_parser("add-node", help="join an empty node to the cluster")
    an.add_argument("new", type=address_arg)
    an.add_argument("existing", type=address_arg)
    an.add_argument("--cluster-slave", "--cluster-replica", dest="replica", action="store_true",
                    help="join as a replica (of --cluster-master-id, else the master with the "
                         "fewest replicas)")
    an.add_argument("--cluster-master-id", dest="master_id")
    dn = clsub.add_parser("del-node", help="remove a node that owns no slots")
    dn.add_argument("node", type=address_arg)
    dn.add_argument("node_id")
    fo = clsub.add_parser("failover", help="CLUSTER FAILOVER on a replica")
    fo.add_argument("node", type=address_arg, help="the replica to promote")
    mode = fo.add_mutually_exclusive_group()
    mode.add_argument("--force", dest="mode", action="store_const", const="force")
    mode.add_argument("--takeover", dest="mode", action="store_const", const="takeover")
    ca = clsub.add_parser("call", help="run a command on every node")
    ca.add_argument("node", type=address_arg)
    ca.add_argument("cmd", nargs=argparse.REMAINDER, help="the command and its arguments")
    only = ca.add_mutually_exclusive_group()
    only.add_argument("--only-masters", "--cluster-only-masters", dest="only",
                      action="store_const", const="master")
    only.add_argument("--only-replicas", "--cluster-only-replicas", dest="only",
                      action="store_const", const="replica")
    im = clsub.add_parser("import", help="copy or move a standalone server's keys into the "
                          "cluster")
    im.add_argument("node", type=address_arg)
    im.add_argument("--from", "--cluster-from", dest="source", type=address_arg, required=True,
                    help="HOST:PORT of the standalone server to read (its db 0)")
    im.add_argument("--copy", "--cluster-copy", action="store_true",
                    help="leave the keys on the source (default: they are moved)")
    im.add_argument("--replace", "--cluster-replace", action="store_true",
                    help="overwrite keys the cluster already holds (default: stop at the first)")
    im.add_argument("--from-user", "--cluster-from-user", dest="from_user",
                    help="ACL user to log in to the source as")
    im.add_argument("--from-password", "--from-pass", "--cluster-from-pass",
                    dest="from_password", help="the source's password")
    im.add_argument("--pipeline", "--cluster-pipeline", type=count_arg, default=100,
                    help="keys per MIGRATE (default 100)")
    im.add_argument("--timeout", "--cluster-timeout", type=count_arg, default=60000,
                    help="MIGRATE timeout in milliseconds (default 60000)")
    im.add_argument("--rate", type=_rate, default=0.0,
                    help="at most this many keys per second (default: no limit)")
    im.add_argument("--progress-every", type=count_arg, default=1000,
                    help="when stderr is not a terminal: a progress line every N keys")
    for action in (rs, rb, fx, an, dn, fo, ca, im):
        _credentials(action)


def _ask_yes() -> bool:
    print("Do you want to proceed with the proposed plan (type 'yes' to accept): ", end="",
          flush=True)
    return sys.stdin.readline().strip() == "yes"


def _options(ns: argparse.Namespace) -> MoveOptions:
    return MoveOptions(ns.pipeline, ns.timeout, ns.replace, ns.rate)


def _execution(ns: argparse.Namespace, confirm: Callable[[], bool] | None) -> cluster_cmds.Execution:
    return cluster_cmds.Execution(_options(ns), ns.dry_run, None, ns.progress_every, confirm)


def run(ns: argparse.Namespace, auth: Credentials) -> int:
    say = print
    try:
        if ns.action == "reshard":
            return cluster_cmds.reshard(ns.node, auth, ns.source, ns.target, ns.slots,
                                        _execution(ns, None if ns.yes else _ask_yes), say)
        if ns.action == "rebalance" and ns.traffic:
            return cluster_cmds.rebalance_by_traffic(
                ns.node, auth, cluster_cmds.TrafficSource(ns.traffic, ns.traffic_window),
                ns.weight, ns.use_empty_masters, ns.threshold, _execution(ns, None), say)
        if ns.action == "rebalance":
            return cluster_cmds.rebalance(ns.node, auth, ns.weight, ns.use_empty_masters,
                                          ns.threshold, _execution(ns, None), say)
        if ns.action == "fix":
            return cluster_cmds.fix(ns.node, auth, _options(ns), say)
        if ns.action == "add-node":
            return cluster_cmds.add_node(ns.new, ns.existing, auth, ns.replica, ns.master_id, say)
        if ns.action == "del-node":
            return cluster_cmds.del_node(ns.node, auth, ns.node_id, say)
        if ns.action == "failover":
            return cluster_cmds.failover(ns.node, auth, ns.mode, say)
        if ns.action == "import":
            if ns.from_user is not None and ns.from_password is None:
                raise AdminError("--from-user needs --from-password")
            source_auth = None if ns.from_password is None else (ns.from_user, ns.from_password)
            return importer.import_keys(ns.node, auth, ns.source, source_auth, importer.ImportOptions(
                ns.copy, ns.replace, ns.pipeline, ns.timeout, ns.rate, ns.progress_every), say)
        flags = {"--only-masters": "master", "--cluster-only-masters": "master",
                 "--only-replicas": "replica", "--cluster-only-replicas": "replica"}
        only = ns.only
        for w in ns.cmd:  # the flags may follow the command words too
            only = flags.get(w, only)
        cmd = [w for w in ns.cmd if w not in flags]
        if not cmd:
            raise AdminError("call needs a command")
        return cluster_cmds.call(ns.node, auth, cmd, only, say)
    except (AdminError, PlanError) as exc:
        print(f"slotgate cluster {ns.action}: {exc}", file=sys.stderr)
        return 1
