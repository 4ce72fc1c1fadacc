"""The operator's cluster commands beyond create/check/info: reshard, rebalance, fix,
add-node, del-node, failover, call, with redis-cli --cluster's semantics. Each takes parsed
arguments and a ``say`` for its report lines; ``cli.py`` only wires arguments to them."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TextIO

import hiredis

from slotgate.proxy.ops.admin import (
    Address,
    AdminError,
    Credentials,
    NodeClient,
    cluster_nodes,
    parse_info,
)
from slotgate.proxy.ops.metrics import parse_slots_json
from slotgate.proxy.ops.open_slots import finish_open_slots
from slotgate.proxy.ops.reshard import (
    ClusterView,
    MoveOptions,
    Progress,
    cover_uncovered_slots,
    node_address,
    run_moves,
)
from slotgate.proxy.ops.reshard_plan import (
    Move,
    needs_rebalance,
    parse_weights,
    plan_by_traffic,
    plan_rebalance,
    plan_reshard,
    traffic_loads,
    traffic_unbalanced,
)
from slotgate.proxy.routing.functions import groups, libraries

Say = Callable[[str], None]


@dataclass(frozen=True)
class Execution:
    """How a plan is carried out: for real, or printed only (--dry-run / --simulate)."""

    opts: MoveOptions
    dry_run: bool
    stream: TextIO | None = None  # progress; stderr when None
    every_slots: int = 50
    confirm: Callable[[], bool] | None = None  # asked after the plan is shown (no --yes)


def _print_plan(moves: Sequence[Move], view: ClusterView, say: Say) -> None:
    pairs: dict[tuple[str, str], list[int]] = {}
    for mv in moves:
        pairs.setdefault((mv.source, mv.target), []).append(mv.slot)
    for (s, t), slots in pairs.items():
        say(f"Moving {len(slots)} slots from {view.by_id(s).addr} to {view.by_id(t).addr} "
            f"(slots {_ranges(slots)})")


def _ranges(slots: Sequence[int]) -> str:
    out: list[str] = []
    start = prev = None
    for s in sorted(slots):
        if prev is not None and s == prev + 1:
            prev = s
            continue
        if start is not None:
            out.append(f"{start}-{prev}" if start != prev else f"{start}")
        start = prev = s
    if start is not None:
        out.append(f"{start}-{prev}" if start != prev else f"{start}")
    return ",".join(out)


def _execute(view: ClusterView, moves: Sequence[Move], ex: Execution, what: str, say: Say) -> int:
    _print_plan(moves, view, say)
    if ex.dry_run:
        say(f"[OK] dry run: {len(moves)} slots would move; nothing moved")
        return 0
    if ex.confirm is not None and not ex.confirm():
        say("*** Aborting: nothing moved")
        return 1
    run_moves(view, moves, ex.opts, Progress(what, len(moves), ex.stream, ex.every_slots))
    say(f"[OK] {len(moves)} slots moved")
    return 0


def _resume(view: ClusterView, ex: Execution, say: Say) -> None:
    """A reshard cut short leaves open slots: they are finished before any new plan."""
    if ex.dry_run:
        return
    if finish_open_slots(view, ex.opts, say):
        view.load()


def reshard(entry: Address, auth: Credentials, sources: str, target: str, slots: int,
            ex: Execution, say: Say) -> int:
    view = ClusterView(entry, auth).load()
    try:
        _resume(view, ex, say)
        dst = view.by_id(target)
        if sources == "all":
            src_ids = [m.id for m in view.masters() if m.id != dst.id]
        else:
            src_ids = [view.by_id(s.strip()).id for s in sources.split(",") if s.strip()]
        moves = plan_reshard(view.slots_by_master(), src_ids, dst.id, slots)
        return _execute(view, moves, ex, "reshard", say)
    finally:
        view.close()


def _weighed_masters(view: ClusterView, weights: Sequence[str], use_empty: bool,
                     ex: Execution, say: Say) -> tuple[dict[str, list[int]], list[str],
                                                    dict[str, float]]:
    """Open slots finished, then (slots by master, the masters rebalanced, their weights)."""
    _resume(view, ex, say)
    slots = view.slots_by_master()
    ids = [i for i, s in slots.items() if s or use_empty]
    return slots, ids, parse_weights(weights, ids)


def rebalance(entry: Address, auth: Credentials, weights: Sequence[str], use_empty: bool,
              threshold_pct: float, ex: Execution, say: Say) -> int:
    view = ClusterView(entry, auth).load()
    try:
        slots, ids, w = _weighed_masters(view, weights, use_empty, ex, say)
        if not needs_rebalance({i: slots[i] for i in ids}, w, threshold_pct):
            say(f"*** No rebalancing needed! All nodes are within the {threshold_pct:g}% "
                "threshold.")
            return 0
        return _execute(view, plan_rebalance(slots, w), ex, "rebalance", say)
    finally:
        view.close()


@dataclass(frozen=True)
class TrafficSource:
    """Where ``rebalance --by-traffic`` reads the per-slot request counts: the metrics
    listeners (HOST:PORT) of the proxies in front of the cluster, each one's /slots summed;
    with ``window_s`` > 0, two reads that far apart (their difference: recent traffic),
    else the counts since each proxy started."""

    proxies: Sequence[Address]
    window_s: float = 0.0
    timeout_s: float = 5.0

    def read_once(self) -> list[int]:
        total = [0] * 16384
        for host, port in self.proxies:
            url = f"http://{host}:{port}/slots"
            try:
                with urllib.request.urlopen(url, timeout=self.timeout_s) as resp:  # noqa: S310
                    counts = parse_slots_json(resp.read())
            except (urllib.error.URLError, OSError, ValueError) as exc:
                raise AdminError(f"reading the per-slot request counts from {url}: "
                                 f"{getattr(exc, 'reason', exc)}") from exc
            for slot, n in enumerate(counts):
                total[slot] += n
        return total

    def read(self) -> list[int]:
        first = self.read_once()
        if self.window_s <= 0:
            return first
        time.sleep(self.window_s)
        return [max(b - a, 0) for a, b in zip(first, self.read_once(), strict=True)]


def _shares(loads: dict[str, int], view: ClusterView) -> str:
    total = sum(loads.values()) or 1
    return ", ".join(f"{view.by_id(m).addr} {100 * n / total:.1f}%" for m, n in loads.items())


def rebalance_by_traffic(entry: Address, auth: Credentials, traffic: TrafficSource,
                         weights: Sequence[str], use_empty: bool, threshold_pct: float,
                         ex: Execution, say: Say) -> int:
    """As ``rebalance``, each slot weighed by the requests the proxies routed to it."""
    counts = traffic.read()
    view = ClusterView(entry, auth).load()
    try:
        slots, ids, w = _weighed_masters(view, weights, use_empty, ex, say)
        loads = traffic_loads(slots, counts, ids)
        say(f">>> {sum(loads.values())} requests counted by {len(traffic.proxies)} "
            f"prox{'y' if len(traffic.proxies) == 1 else 'ies'}; traffic now: "
            f"{_shares(loads, view)}")
        if sum(loads.values()) == 0:
            say("*** No traffic counted: nothing to weigh the slots by.")
            return 0
        if not traffic_unbalanced(loads, w, threshold_pct):
            say(f"*** No rebalancing needed! All nodes are within the {threshold_pct:g}% "
                "threshold.")
            return 0
        moves = plan_by_traffic(slots, counts, w, threshold_pct)
        after = dict(loads)
        for mv in moves:
            after[mv.source] -= counts[mv.slot]
            after[mv.target] += counts[mv.slot]
        say(f">>> traffic after the plan: {_shares(after, view)}")
        return _execute(view, moves, ex, "rebalance", say)
    finally:
        view.close()


def fix(entry: Address, auth: Credentials, opts: MoveOptions, say: Say) -> int:
    view = ClusterView(entry, auth).load()
    try:
        opened = finish_open_slots(view, opts, say)
        view.load()
        covered = cover_uncovered_slots(view, opts, say)
        copied = sync_functions(view, say)
        say(f"[OK] {opened} open slots finished, {covered} uncovered slots assigned, "
            f"function libraries copied to {copied} masters")
        return 0
    finally:
        view.close()


def sync_functions(view: ClusterView, say: Say) -> int:
    """Give every master with slots the function libraries of the largest group of masters
    that agree (what the proxy's FUNCTION LIST needs); returns how many masters changed."""
    masters = {m.addr: m for m in view.masters()
               if any(not t.startswith("[") for t in m.slots)}
    found = groups({addr: libraries(view.client(m).check("FUNCTION", "LIST", "WITHCODE"))
                    for addr, m in masters.items()})
    if len(found) < 2:
        return 0
    source = masters[found[0][0]]
    dump = view.client(source).check("FUNCTION", "DUMP")
    assert isinstance(dump, bytes)
    changed = [addr for group in found[1:] for addr in group]
    for addr in changed:
        say(f">>> Copying the function libraries of {source.addr} to {addr}")
        view.client(masters[addr]).check("FUNCTION", "RESTORE", dump, "FLUSH")
    return len(changed)


def _wait(pred: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            raise AdminError(f"{what} within {timeout_s:g}s")
        time.sleep(0.1)


def add_node(new: Address, existing: Address, auth: Credentials, as_replica: bool,
             master_id: str | None, say: Say, timeout_s: float = 60.0) -> int:
    view = ClusterView(existing, auth).load()
    try:
        master = None
        if as_replica:
            if master_id:
                master = view.by_id(master_id)
            else:  # the master with the fewest replicas, as redis-cli picks it
                masters = view.masters()
                if not masters:
                    raise AdminError("the cluster has no master to replicate")
                master = min(masters, key=lambda m: sum(
                    1 for r in view.replicas() if r.master_id == m.id))
        with NodeClient(new, auth=auth) as c:
            if parse_info(c.text("INFO", "cluster")).get("cluster_enabled") != "1":
                raise AdminError(f"{new[0]}:{new[1]} is not configured as a cluster node")
            if len(cluster_nodes(c)) != 1 or int(c.check("DBSIZE")) != 0:  # type: ignore[call-overload]
                raise AdminError(f"{new[0]}:{new[1]} is not empty (it knows other nodes or "
                                 "holds keys)")
            my_id = c.text("CLUSTER", "MYID")
            say(f">>> Send CLUSTER MEET to node {new[0]}:{new[1]} to make it join the cluster.")
            c.check("CLUSTER", "MEET", existing[0], existing[1])
            if master is not None:
                _wait(lambda: any(ln.id == master.id for ln in cluster_nodes(c)), timeout_s,
                      "the new node did not learn its master")
                say(f">>> Configure node as replica of {master.addr}.")
                c.check("CLUSTER", "REPLICATE", master.id)
        with NodeClient(existing, auth=auth) as e:
            role = "slave" if master is not None else "master"
            _wait(lambda: any(ln.id == my_id and role in ln.flags for ln in cluster_nodes(e)),
                  timeout_s, f"the cluster did not learn the new node as a {role}")
        with NodeClient(new, auth=auth) as c:  # it serves (and can import) once it knows the slots
            _wait(lambda: parse_info(c.text("CLUSTER", "INFO")).get("cluster_state") == "ok",
                  timeout_s, "the new node did not reach cluster_state:ok")
        say("[OK] New node added correctly.")
        return 0
    finally:
        view.close()


def del_node(entry: Address, auth: Credentials, node_id: str, say: Say) -> int:
    view = ClusterView(entry, auth).load()
    try:
        gone = view.by_id(node_id)
        if gone.slots and any(not t.startswith("[") for t in gone.slots):
            raise AdminError(f"node {gone.addr} is not empty! Reshard data away and try again.")
        others = [ln for ln in view.lines if ln.id != gone.id and "fail" not in ln.flags]
        masters = [m for m in view.masters() if m.id != gone.id]
        for r in view.replicas():
            if r.master_id == gone.id and masters:  # its replicas follow another master
                new_master = min(masters, key=lambda m: sum(
                    1 for x in view.replicas() if x.master_id == m.id))
                say(f">>> {r.addr} will replicate {new_master.addr}")
                view.client(r).check("CLUSTER", "REPLICATE", new_master.id)
        say(">>> Sending CLUSTER FORGET messages to the cluster...")
        for ln in others:
            view.client(ln).check("CLUSTER", "FORGET", gone.id)
        say(">>> Sending CLUSTER RESET SOFT to the deleted node.")
        view.client(gone).call("CLUSTER", "RESET", "SOFT")
        say("[OK] Node removed from the cluster.")
        return 0
    finally:
        view.close()


def failover(replica: Address, auth: Credentials, mode: str | None, say: Say,
             timeout_s: float = 60.0) -> int:
    with NodeClient(replica, auth=auth) as c:
        role = parse_info(c.text("INFO", "replication")).get("role")
        if role != "slave":
            raise AdminError(f"{replica[0]}:{replica[1]} is not a replica (role {role})")
        c.check("CLUSTER", "FAILOVER", *([mode.upper()] if mode else []))
        say(f">>> CLUSTER FAILOVER{' ' + mode.upper() if mode else ''} sent to "
            f"{replica[0]}:{replica[1]}")
        _wait(lambda: parse_info(c.text("INFO", "replication")).get("role") == "master",
              timeout_s, "the replica did not become a master")
    say(f"[OK] {replica[0]}:{replica[1]} is now a master")
    return 0


def _render(reply: object) -> str:
    if isinstance(reply, bytes):
        return reply.decode(errors="replace")
    if isinstance(reply, list):
        return "\n".join(_render(r) for r in reply)
    if isinstance(reply, hiredis.ReplyError):
        return f"(error) {reply}"
    return str(reply)


def call(entry: Address, auth: Credentials, command: Sequence[str], only: str | None,
         say: Say) -> int:
    """``command`` on every node (or only masters / only replicas); 1 if any node refused."""
    view = ClusterView(entry, auth).load()
    failed = False
    try:
        say(f">>> Calling {' '.join(command)}")
        for ln in view.lines:
            if "fail" in ln.flags or "noaddr" in ln.flags or "handshake" in ln.flags:
                continue
            role = "master" if "master" in ln.flags else "replica"
            if only is not None and only != role:
                continue
            reply = view.client(ln).call(*command)
            failed |= isinstance(reply, hiredis.ReplyError)
            host, port = node_address(ln, entry[0])
            say(f"{host}:{port}: {_render(reply)}")
        return 1 if failed else 0
    finally:
        view.close()
