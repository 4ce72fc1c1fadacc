"""Open slots settled: what ``slotgate cluster fix`` (and reshard or rebalance, before a new
plan) does with the slots a move left MIGRATING or IMPORTING.

A failover may have changed the nodes a move left the slot open on. Cut off during a move, the
target's replica takes its place: it holds the keys already moved (they were replicated) but
not the IMPORTING state (that is never replicated), the source still has the slot MIGRATING
to the old target, and the old target comes back as a replica (dropping its own open slots)
or not at all. So the views of the nodes themselves count, not one node's CLUSTER NODES
(which lags behind a failover), and each open slot is settled like this:

- its destination is the node the slot is open towards (the importing master, or the
  migrating master's peer); a peer that is a replica now stands for the master it follows;
  a peer that does not answer and has no visible successor gives way to the one master
  other than the owner holding keys of the slot; with none of those, the owner keeps it;
- every other master holding keys of the slot hands them to the destination, the owner last
  and with REPLACE: a key on both sides is a MIGRATE whose reply was lost, after which the
  clients kept writing to the owner's copy, so that copy wins;
- the destination becomes the owner everywhere, and the slot is closed (STABLE) on every
  master still showing it open.

redis-cli --cluster fix, in that state, counts the promoted replica as a second owner (it has
keys), picks whichever of the two has more keys and, at a key on both sides, stops (unless
--cluster-replace) with the slot already given to the new owner but still MIGRATING on the
source towards a replica.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from slotgate.proxy.ops.admin import AdminError, NodeLine, cluster_nodes
from slotgate.proxy.ops.reshard import (
    OPEN_SLOT,
    ClusterView,
    MoveOptions,
    assign_everywhere,
    migrate_keys,
)
from slotgate.proxy.ops.reshard_plan import parse_slot_tokens

GONE_FLAGS = frozenset({"fail", "noaddr", "handshake"})


@dataclass
class Survey:
    """What every reachable node says of itself (its ``myself`` line), by node id."""

    own: dict[str, NodeLine]

    def masters(self) -> list[NodeLine]:
        return sorted((ln for ln in self.own.values() if "master" in ln.flags),
                      key=lambda ln: ln.id)

    def stand_in(self, node_id: str) -> str | None:
        """The master that now serves for ``node_id``: itself while it is a master, the master
        it follows once it is a replica; None for a node that does not answer."""
        seen: set[str] = set()
        while node_id not in seen:
            seen.add(node_id)
            line = self.own.get(node_id)
            if line is None:
                return None
            if "master" in line.flags:
                return node_id
            node_id = line.master_id
        return None


def survey(view: ClusterView) -> Survey:
    own: dict[str, NodeLine] = {}
    for ln in view.lines:
        if ln.flags & GONE_FLAGS:
            continue
        try:
            lines = cluster_nodes(view.client(ln))
        except AdminError:
            if parse_slot_tokens(ln.slots):
                raise  # a master that serves slots must answer
            continue  # down or restarting, and owns nothing: it holds nothing to settle
        mine = [x for x in lines if "myself" in x.flags]
        if mine:
            own[mine[0].id] = mine[0]
    _check_settled(own)
    return Survey(own)


def _check_settled(own: dict[str, NodeLine]) -> None:
    """Two masters claiming one slot in their own views: a failed-over master back from a cut
    that has not yet learned it was replaced. Settling a slot towards it would hand keys to a
    node about to become a replica (and drop them with its data set), so not now."""
    claimed: dict[int, NodeLine] = {}
    for m in sorted(own.values(), key=lambda ln: ln.id):
        if "master" not in m.flags:
            continue
        for slot in parse_slot_tokens(m.slots):
            other = claimed.setdefault(slot, m)
            if other is not m:
                raise AdminError(f"{other.addr} and {m.addr} both claim slot {slot}: the "
                                 "cluster is still settling after a failover; run this again "
                                 "once it has")


def open_slots(masters: list[NodeLine]) -> dict[int, list[tuple[NodeLine, str, str]]]:
    """slot -> [(master, ">" migrating or "<" importing, peer id)] from the masters' own lines."""
    out: dict[int, list[tuple[NodeLine, str, str]]] = {}
    for m in masters:
        for tok in m.slots:
            found = OPEN_SLOT.match(tok)
            if found:
                out.setdefault(int(found[1]), []).append((m, found[2], found[3]))
    return out


def _destination(slot: int, marks: list[tuple[NodeLine, str, str]], sv: Survey,
                 owner: str | None, holders: list[str]) -> str:
    towards: set[str] = set()
    for m, arrow, peer in marks:
        target = m.id if arrow == "<" else sv.stand_in(peer)
        if target is not None:
            towards.add(target)
    if len(towards) > 1:
        raise AdminError(f"slot {slot} is open towards several nodes ({sorted(towards)}); "
                         "fix it by hand with CLUSTER SETSLOT")
    if towards:
        return towards.pop()
    others = [h for h in holders if h != owner]
    if len(others) > 1:
        raise AdminError(f"slot {slot}'s keys are on several masters besides its owner "
                         f"({others}); fix it by hand with CLUSTER SETSLOT")
    if others:
        return others[0]
    if owner is None:
        raise AdminError(f"slot {slot} is open but has no owner and no keys anywhere; "
                         "fix it by hand with CLUSTER SETSLOT")
    return owner


def _seen_owner(view: ClusterView, node: NodeLine, slot: int) -> str | None:
    """The owner of ``slot`` as ``node`` sees it."""
    for ln in cluster_nodes(view.client(node)):
        if slot in parse_slot_tokens(ln.slots):
            return ln.id
    return None


def _settle(view: ClusterView, slot: int, marks: list[tuple[NodeLine, str, str]], sv: Survey,
            opts: MoveOptions, say: Callable[[str], None]) -> None:
    masters = {m.id: m for m in sv.masters()}
    claims = [m.id for m in masters.values() if slot in parse_slot_tokens(m.slots)]
    seen_owner = next((ln.id for ln in view.lines if ln.id in masters
                       and slot in parse_slot_tokens(ln.slots)), None)
    owner = seen_owner if seen_owner is not None else next(iter(claims), None)
    holders = [i for i, m in masters.items()
               if int(view.client(m).check("CLUSTER", "COUNTKEYSINSLOT", slot)) > 0]  # type: ignore[call-overload]
    dst = masters[_destination(slot, marks, sv, owner, holders)]
    # the owner's copies go last, so they win over any other copy of a key
    sources = sorted((masters[h] for h in holders if h != dst.id),
                     key=lambda m: (m.id == owner, m.id))
    say(f">>> Finishing open slot {slot}: to {dst.addr} from "
        f"{', '.join(s.addr for s in sources) or 'nobody'}")
    if sources and dst.id != owner:
        if owner is not None and _seen_owner(view, dst, slot) not in masters:
            # the destination lost track of the owner (a source that became a replica gave
            # up its slots in its peers' views, and an importing slot is not reassigned by
            # gossip): without an owner it answers CLUSTERDOWN to the keys brought to it
            view.client(dst).call("CLUSTER", "SETSLOT", slot, "NODE", owner)
        view.client(dst).call("CLUSTER", "SETSLOT", slot, "IMPORTING", sources[-1].id)
    for src in sources:
        view.client(src).call("CLUSTER", "SETSLOT", slot, "MIGRATING", dst.id)  # owner only
        migrate_keys(view, src, dst, slot, MoveOptions(opts.pipeline, opts.timeout_ms,
                                                        replace=True))
    assign_everywhere(view, slot, dst, first=[dst])
    for m in survey(view).masters():  # what SETSLOT NODE left open (a peer now a replica)
        if any((found := OPEN_SLOT.match(tok)) and int(found[1]) == slot for tok in m.slots):
            view.client(m).check("CLUSTER", "SETSLOT", slot, "STABLE")


def finish_open_slots(view: ClusterView, opts: MoveOptions, say: Callable[[str], None]) -> int:
    """Settle every slot some master has MIGRATING or IMPORTING; returns how many."""
    opened = open_slots(survey(view).masters())
    for slot in sorted(opened):
        sv = survey(view)  # afresh: settling a slot changes the nodes' lines
        marks = open_slots(sv.masters()).get(slot)
        if marks:
            _settle(view, slot, marks, sv, opts, say)
    return len(opened)
