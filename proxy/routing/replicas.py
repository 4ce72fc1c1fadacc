"""Replica reads: which node serves a read-only request, from what the proxy measured.

    every check interval ─▶ ROLE on each master and replica (a control connection each)
        master  ─▶ its replication offset, kept as (time, offset) samples
        replica ─▶ link state, processed offset; lag = how long ago the master first held a
                   byte the replica has not processed (from the samples)
        both    ─▶ round trip, as an EWMA (``nearest``)
    a read for slot s ─▶ choose(policy, master of s, its replicas, states) ─▶ a node

Pure part: ``NodeState``, ``lag_s`` and ``choose`` (values in, a node out). Thin trio shell:
``ReplicaReads`` runs the checks and owns the states; the session asks it per read.

A replica is a candidate when its last check succeeded within ``stale_after_s`` (a stopped
or dead replica stops answering and drops out after that), its link to the master is up,
its lag is at most ``max_replica_lag_ms`` and, for a client with read-your-writes, its
processed offset has reached the offset of the client's last write to that shard
(``offsets.py``). Every policy falls back to the master when no replica is a candidate.
The master itself is only ever skipped by ``prefer-master`` when its checks fail.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import hiredis
import trio

from slotgate.protocol.resp import encode_command
from slotgate.proxy.backend.auth import BackendAuthError
from slotgate.proxy.backend.connections import BackendError, DirectConnection
from slotgate.proxy.ops.metrics import ProxyMetrics
from slotgate.proxy.ops.settings import ProxySettings
from slotgate.proxy.routing.topology import Topology

log = logging.getLogger("slotgate.replicas")

ROLE = encode_command(b"ROLE")
EWMA_WEIGHT = 0.2  # of the newest round trip in the average
HISTORY_SAMPLES = 512  # master offset samples kept per master (the lag's memory)
UNKNOWN_RTT_S = 1e9


@dataclass
class NodeState:
    """What the last checks of one node showed."""

    checked_s: float = -1e9  # trio time of the last successful check
    rtt_s: float = UNKNOWN_RTT_S  # EWMA of the check's round trip
    role: str = ""
    offset: int = -1  # master: master_repl_offset; replica: processed offset (-1: unknown)
    link_up: bool = False  # replica: its link to the master is "connected"
    # master only: (trio time, offset) samples, oldest first
    history: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=HISTORY_SAMPLES))


def lag_s(replica_offset: int, replica_checked_s: float,
          history: Sequence[tuple[float, int]]) -> float:
    """How long before ``replica_checked_s`` the master already held a byte beyond
    ``replica_offset``: 0 when the replica had everything the master was last seen with;
    the age of the oldest sample when even that one is ahead (the lag is at least that)."""
    if not history or replica_offset >= history[-1][1]:
        return 0.0
    for when_s, offset in history:
        if offset > replica_offset:
            return max(replica_checked_s - when_s, 0.0)
    return 0.0


def candidate(state: NodeState | None, now_s: float, stale_after_s: float, max_lag_s: float,
              master: NodeState | None, need_offset: int) -> bool:
    """Whether a replica whose checks showed ``state`` may serve a read now."""
    if state is None or now_s - state.checked_s > stale_after_s:
        return False
    if state.role != "slave" or not state.link_up or state.offset < need_offset:
        return False
    if master is not None and lag_s(state.offset, state.checked_s, master.history) > max_lag_s:
        return False
    return True


def fit_replicas(replicas: Sequence[str], states: dict[str, NodeState], master: str,
                 now_s: float, stale_after_s: float, max_lag_s: float) -> list[str]:
    """The replicas of ``master`` that may serve reads now (before read-your-writes)."""
    mstate = states.get(master)
    return [r for r in replicas
            if candidate(states.get(r), now_s, stale_after_s, max_lag_s, mstate, -1)]


def choose(policy: str, master: str, fit: Sequence[str], states: dict[str, NodeState],
           master_ok: bool, need_offset: int, turn: int) -> str:
    """The node for one read: ``master`` or one of the ``fit`` replicas (``turn`` spreads
    reads over them round-robin). ``need_offset``: the offset the read needs a replica to
    have processed (-1: none); ``master_ok``: the master's checks succeed."""
    if need_offset >= 0:
        fit = [r for r in fit if states[r].offset >= need_offset]
    if not fit or policy == "master":
        return master
    if policy == "prefer-master":
        return master if master_ok else fit[turn % len(fit)]
    if policy == "nearest":
        best = master
        mstate = states.get(master)
        best_rtt = mstate.rtt_s if mstate is not None else UNKNOWN_RTT_S
        for r in fit:
            if states[r].rtt_s < best_rtt:
                best, best_rtt = r, states[r].rtt_s
        return best
    return fit[turn % len(fit)]  # replica, prefer-replica


def parse_role(reply: object) -> tuple[str, int, bool]:
    """(role, offset, link up) from a decoded ROLE reply; raises ValueError if unreadable."""
    if not isinstance(reply, list) or not reply or not isinstance(reply[0], bytes):
        raise ValueError(f"unexpected ROLE reply {reply!r}")
    role = reply[0].decode()
    if role == "master":
        return role, int(reply[1]), True
    if role == "slave" and len(reply) >= 5:
        return role, int(reply[4]), reply[3] == b"connected"
    raise ValueError(f"unexpected ROLE reply {reply!r}")


class ReplicaReads:
    """Checks every node of the slot map each ``replica_check_interval_ms`` while a read policy
    other than ``master`` is set, and picks the node of each read (``choose``)."""

    def __init__(self, settings: ProxySettings, metrics: ProxyMetrics, topology: Topology) -> None:
        self.settings = settings
        self.metrics = metrics
        self.topology = topology
        self.states: dict[str, NodeState] = {}
        self._conns: dict[str, DirectConnection] = {}
        self._inflight: set[str] = set()
        self._fit: dict[str, list[str]] = {}  # master -> replicas fit for reads (_judge)
        self._masters_down: set[str] = set()
        self._turn = 0
        self.checks = 0  # completed check rounds (tests wait for one)

    # --- the read path -----------------------------------------------------------------------
    def node_for(self, master: str, need_offset: int, read_from: str) -> str:
        fit = self._fit.get(master)
        if not fit:
            return master
        self._turn += 1
        return choose(read_from, master, fit, self.states,
                      master not in self._masters_down, need_offset, self._turn)

    def _judge(self) -> None:
        """Which replicas may serve reads, which masters fail their checks: once per check
        interval, not per read."""
        s = self.settings
        now = trio.current_time()
        stale_after_s = max(3 * s.replica_check_interval_ms / 1000, 0.5)
        max_lag_s = s.max_replica_lag_ms / 1000
        slot_map = self.topology.slot_map
        fit: dict[str, list[str]] = {}
        down: set[str] = set()
        for master in slot_map.masters:
            fit[master] = fit_replicas(self._replicas(master), self.states, master, now,
                                       stale_after_s, max_lag_s)
            mstate = self.states.get(master)
            if mstate is not None and now - mstate.checked_s > stale_after_s:
                down.add(master)
        self._fit = fit
        self._masters_down = down

    # --- the checks --------------------------------------------------------------------------
    def _replicas(self, master: str) -> list[str]:
        """``master``'s replicas: all but those the cluster reports failed (CLUSTER SHARDS), or
        those CLUSTER SLOTS lists."""
        slot_map = self.topology.slot_map
        return slot_map.unfailed_replicas.get(master) or slot_map.replicas.get(master, [])

    def _nodes(self) -> list[str]:
        masters = self.topology.slot_map.masters
        return list(masters) + [r for m in masters for r in self._replicas(m)]

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start a check of every node each interval (a node whose check is still running,
        a stopped one, is not asked again meanwhile, and holds up no other node's)."""
        task_status.started()
        try:
            async with trio.open_nursery() as nursery:
                while True:
                    s = self.settings
                    interval_s = s.replica_check_interval_ms / 1000
                    if s.replica_reads_anywhere():
                        nodes = self._nodes()
                        for node in nodes:
                            if node not in self._inflight:
                                self._inflight.add(node)
                                nursery.start_soon(self._check, node, interval_s)
                        for gone in set(self.states) - set(nodes) - self._inflight:
                            del self.states[gone]
                            await self._drop(gone)
                    await trio.sleep(interval_s)
                    self._judge()
                    self.checks += 1
        finally:
            with trio.CancelScope(shield=True):
                for node in list(self._conns):
                    await self._drop(node)

    async def _check(self, node: str, interval_s: float) -> None:
        """One ROLE round trip to ``node``; on success its state is updated."""
        try:
            await self._check_once(node, interval_s)
        finally:
            self._inflight.discard(node)

    async def _check_once(self, node: str, interval_s: float) -> None:
        s = self.settings
        timeout_s = max(interval_s * 3, s.connect_timeout_ms / 1000)
        start = time.perf_counter()
        try:
            with trio.fail_after(timeout_s):
                conn = self._conns.get(node)
                if conn is None or conn.closed:
                    conn = self._conns[node] = await DirectConnection.open(node, 2, s, self.metrics)
                    start = time.perf_counter()
                frames = await conn.roundtrip(ROLE, 1)
        except (OSError, BackendError, BackendAuthError, trio.TooSlowError) as exc:
            log.debug("replica check of %s failed: %s", node, exc)
            await self._drop(node)
            return
        rtt_s = time.perf_counter() - start
        reader = hiredis.Reader()
        reader.feed(frames[0][1])
        try:
            role, offset, link_up = parse_role(reader.gets())
        except ValueError as exc:
            log.debug("replica check of %s: %s", node, exc)
            return
        now = trio.current_time()
        state = self.states.get(node)
        if state is None:
            state = self.states[node] = NodeState(rtt_s=rtt_s)
        else:
            state.rtt_s += (rtt_s - state.rtt_s) * EWMA_WEIGHT
        state.checked_s = now
        state.role = role
        state.offset = offset
        state.link_up = link_up
        if role == "master":
            state.history.append((now, offset))

    async def _drop(self, node: str) -> None:
        conn = self._conns.pop(node, None)
        if conn is not None:
            await conn.aclose()
