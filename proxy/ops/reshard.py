"""Moving slots between masters: the executor half of ``slotgate cluster reshard``,
``rebalance`` and ``fix`` (the plans come from ``reshard_plan.py``).

One slot moves as redis-cli --cluster moves it:
  1. ``CLUSTER SETSLOT <slot> IMPORTING <source-id>`` on the target,
  2. ``CLUSTER SETSLOT <slot> MIGRATING <target-id>`` on the source,
  3. ``CLUSTER GETKEYSINSLOT <slot> <pipeline>`` + ``MIGRATE host port "" 0 <timeout> KEYS ...``
     until the source has no key left in the slot (clients meanwhile get ASK redirects),
  4. ``CLUSTER SETSLOT <slot> NODE <target-id>`` on the target, then the source, then every
     other master.

Killed between 1 and 4, a slot stays open (MIGRATING on the source, IMPORTING on the target).
``open_slots.finish_open_slots`` (run first by reshard, rebalance and fix) settles such
slots, failovers of their source or target included, so a re-run completes the work.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TextIO

import hiredis
from tqdm import tqdm

from slotgate.proxy.ops.admin import (
    Address,
    AdminError,
    Credentials,
    NodeClient,
    NodeLine,
    cluster_nodes,
)
from slotgate.proxy.ops.reshard_plan import Move, parse_slot_tokens

OPEN_SLOT = re.compile(r"^\[(\d+)-([<>])-([0-9a-f]+)\]$")
BUSYKEY = "BUSYKEY"
# A source that has just lost its last slot may already follow the target as a replica
# (Redis 7's replica migration) and refuses SETSLOT with this: done, as redis-cli takes it.
SETSLOT_ON_REPLICA = "Please use SETSLOT only with masters."


def node_address(line: NodeLine, fallback_host: str) -> Address:
    host, _, port = line.addr.rpartition(":")
    return (host or fallback_host, int(port))


@dataclass
class ClusterView:
    """The cluster as one node sees it, with a connection per node opened on demand."""

    entry: Address
    auth: Credentials = None
    lines: list[NodeLine] = field(default_factory=list)
    _clients: dict[str, NodeClient] = field(default_factory=dict)

    def load(self) -> ClusterView:
        with NodeClient(self.entry, auth=self.auth) as c:
            self.lines = cluster_nodes(c)
        return self

    def masters(self) -> list[NodeLine]:
        return [ln for ln in self.lines if "master" in ln.flags and "fail" not in ln.flags
                and "noaddr" not in ln.flags]

    def replicas(self) -> list[NodeLine]:
        return [ln for ln in self.lines if "slave" in ln.flags]

    def by_id(self, node_id: str) -> NodeLine:
        found = [ln for ln in self.lines if ln.id.startswith(node_id)] if node_id else []
        if len(found) != 1:
            raise AdminError(f"no single node with id {node_id!r} in the cluster")
        return found[0]

    def by_address(self, addr: Address) -> NodeLine:
        for ln in self.lines:
            if node_address(ln, self.entry[0]) == addr:
                return ln
        raise AdminError(f"{addr[0]}:{addr[1]} is not a node of this cluster")

    def slots_by_master(self) -> dict[str, list[int]]:
        return {m.id: parse_slot_tokens(m.slots) for m in self.masters()}

    def client(self, line: NodeLine) -> NodeClient:
        c = self._clients.get(line.id)
        if c is None:
            c = self._clients[line.id] = NodeClient(node_address(line, self.entry[0]),
                                                    timeout_s=30.0, auth=self.auth)
        return c

    def close(self) -> None:
        for c in self._clients.values():
            c.close()
        self._clients.clear()


class Progress:
    """Slots and keys moved, rate and ETA on stderr: a tqdm progress bar on a terminal, a
    line every ``every`` slots otherwise (logs, pipes, tests). With ``unit="keys"`` (import)
    the total, rate, ETA and ``every`` count keys instead."""

    def __init__(self, what: str, total_slots: int, stream: TextIO | None = None,
                 every_slots: int = 50, clock: Callable[[], float] = time.monotonic,
                 unit: str = "slots") -> None:
        self.what = what
        self.total = total_slots
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty()
        self.every = every_slots
        self.clock = clock
        self.unit = unit
        self.started = clock()
        self.slots = 0
        self.keys = 0
        self._next_line = every_slots
        # tqdm draws the bar, its rate and ETA on a terminal (a small, dependency-free library
        # that every Python operator knows; rich would bring a whole rendering stack)
        self._bar: tqdm | None = None
        if self.tty:
            self._bar = tqdm(total=total_slots, desc=what, unit=unit, file=self.stream,
                             dynamic_ncols=True, mininterval=0.2)

    def line(self) -> str:
        elapsed_s = max(self.clock() - self.started, 1e-6)
        done = self.keys if self.unit == "keys" else self.slots
        rate = done / elapsed_s
        eta = f"{max(self.total - done, 0) / rate:.0f}s" if rate > 0 else "?"
        if self.unit == "keys":
            return (f"{self.what}: {self.keys}/{self.total} keys moved, {rate:.1f} keys/s, "
                    f"ETA {eta}")
        return (f"{self.what}: {self.slots}/{self.total} slots, {self.keys} keys moved, "
                f"{rate:.1f} slots/s, ETA {eta}")

    def advance(self, keys: int, slots: int = 1) -> None:
        self.slots += slots
        self.keys += keys
        done = self.keys if self.unit == "keys" else self.slots
        if self._bar is not None:
            if self.unit == "slots":
                self._bar.set_postfix_str(f"{self.keys} keys moved", refresh=False)
            self._bar.update(keys if self.unit == "keys" else slots)
            return
        if done >= self._next_line or done == self.total:
            self.stream.write(self.line() + "\n")
            while self._next_line <= done:
                self._next_line += self.every
        self.stream.flush()

    def done(self) -> None:
        if self._bar is not None:
            self._bar.close()


@dataclass(frozen=True)
class MoveOptions:
    pipeline: int = 10
    timeout_ms: int = 60000
    replace: bool = False
    rate_slots_per_s: float = 0.0  # 0: as fast as the nodes go


def migrate_keys(view: ClusterView, src: NodeLine, dst: NodeLine, slot: int,
                  opts: MoveOptions) -> int:
    sc = view.client(src)
    host, port = node_address(dst, view.entry[0])
    auth_words: list[str] = []
    if view.auth is not None:
        user, password = view.auth
        auth_words = ["AUTH2", user, password] if user is not None else ["AUTH", password]
    moved = 0
    while True:
        keys = sc.check("CLUSTER", "GETKEYSINSLOT", slot, opts.pipeline)
        assert isinstance(keys, list)
        if not keys:
            return moved
        replace = ["REPLACE"] if opts.replace else []
        reply = sc.call("MIGRATE", host, port, "", 0, opts.timeout_ms, *replace, *auth_words,
                        "KEYS", *keys)
        if isinstance(reply, hiredis.ReplyError) and str(reply).startswith(BUSYKEY):
            # the target already holds a copy (a move cut short): the source's copy wins
            reply = sc.call("MIGRATE", host, port, "", 0, opts.timeout_ms, "REPLACE",
                            *auth_words, "KEYS", *keys)
        if isinstance(reply, hiredis.ReplyError):
            raise AdminError(f"MIGRATE of slot {slot} from {src.addr} to {dst.addr}: {reply}")
        moved += len(keys)


def move_slot(view: ClusterView, move: Move, opts: MoveOptions) -> int:
    """Carry one slot from ``move.source`` to ``move.target``; returns the keys moved."""
    src, dst = view.by_id(move.source), view.by_id(move.target)
    _check_target(view, src, dst)
    view.client(dst).check("CLUSTER", "SETSLOT", move.slot, "IMPORTING", src.id)
    view.client(src).check("CLUSTER", "SETSLOT", move.slot, "MIGRATING", dst.id)
    keys = migrate_keys(view, src, dst, move.slot, opts)
    assign_everywhere(view, move.slot, dst, first=(dst, src))
    return keys


def _owned(tokens: Sequence[str]) -> list[str]:
    return sorted(t for t in tokens if not t.startswith("["))


def _check_target(view: ClusterView, src: NodeLine, dst: NodeLine) -> None:
    """The target is the master the source knows, with the slots the source knows it has.
    A target cut off and replaced by its replica comes back believing it is still the master
    of its old slots until it hears otherwise: a slot given to it then (SETSLOT NODE bumps its
    config epoch) would keep it a master beside the replica that replaced it."""
    seen = next((ln for ln in cluster_nodes(view.client(src)) if ln.id == dst.id), None)
    own = next((ln for ln in cluster_nodes(view.client(dst)) if "myself" in ln.flags), None)
    if (seen is None or own is None or "master" not in own.flags or "master" not in seen.flags
            or seen.flags & {"fail", "fail?"} or _owned(seen.slots) != _owned(own.slots)):
        raise AdminError(f"{dst.addr} is not the master {src.addr} knows (failed over, or "
                         "still settling after a failover): the move stops here; "
                         "`slotgate cluster fix` finishes the open slot once it has settled")


def assign_everywhere(view: ClusterView, slot: int, owner: NodeLine,
                       first: Sequence[NodeLine]) -> None:
    order = list(first) + [m for m in view.masters() if m not in first]
    for m in order:
        try:
            reply = view.client(m).call("CLUSTER", "SETSLOT", slot, "NODE", owner.id)
        except AdminError:
            if m in first:
                raise
            continue  # a master that does not answer (down) learns it by gossip later
        if isinstance(reply, hiredis.ReplyError) and m in first:
            if m is not owner and SETSLOT_ON_REPLICA in str(reply):
                continue
            raise AdminError(f"{m.addr}: CLUSTER SETSLOT {slot} NODE: {reply}")
        # another master refusing (e.g. it still has a stale view) learns it by gossip


def run_moves(view: ClusterView, moves: Sequence[Move], opts: MoveOptions,
              progress: Progress) -> None:
    """Carry out ``moves`` in order, at most ``opts.rate_slots_per_s`` slots a second."""
    for i, mv in enumerate(moves):
        if opts.rate_slots_per_s > 0:
            due = progress.started + (i + 1) / opts.rate_slots_per_s  # never ahead of it
            wait_s = due - progress.clock()
            if wait_s > 0:
                time.sleep(wait_s)
        progress.advance(move_slot(view, mv, opts))
    progress.done()


def cover_uncovered_slots(view: ClusterView, opts: MoveOptions, say: Callable[[str], None]) -> int:
    """Give every slot no master owns to a master, as redis-cli's fix does: the master that
    holds the most keys of it (the others' keys are migrated to it), else the master with the
    fewest slots. Returns how many slots were covered."""
    owned = {s for slots in view.slots_by_master().values() for s in slots}
    uncovered = [s for s in range(16384) if s not in owned]
    masters = view.masters()
    if not masters:
        raise AdminError("no reachable master to give the uncovered slots to")
    counts = {m.id: len(parse_slot_tokens(m.slots)) for m in masters}
    for slot in uncovered:
        holding = {m.id: int(view.client(m).check("CLUSTER", "COUNTKEYSINSLOT", slot))  # type: ignore[call-overload]
                   for m in masters}
        with_keys = [i for i, n in holding.items() if n > 0]
        owner_id = (max(with_keys, key=lambda i: holding[i]) if with_keys
                    else min(counts, key=lambda i: (counts[i], i)))
        owner = view.by_id(owner_id)
        view.client(owner).check("CLUSTER", "ADDSLOTS", slot)
        counts[owner_id] += 1
        for other in with_keys:
            if other != owner_id:
                src = view.by_id(other)
                view.client(owner).call("CLUSTER", "SETSLOT", slot, "IMPORTING", src.id)
                view.client(src).call("CLUSTER", "SETSLOT", slot, "MIGRATING", owner.id)
                migrate_keys(view, src, owner, slot, MoveOptions(opts.pipeline,
                                                                  opts.timeout_ms, replace=True))
        assign_everywhere(view, slot, owner, first=[owner])
    if uncovered:
        say(f">>> Covered {len(uncovered)} slots")
    return len(uncovered)
