"""The slot map (16384 slots -> master + replicas) and the task that keeps it fresh.

Pure part: ``SlotMap`` and the parsers ``slot_map_from_shards`` / ``slot_map_from_slots``
(decoded replies in, a map out). Thin trio shell: ``Topology`` asks any reachable node
(known masters first, then the seeds, then replicas) for ``CLUSTER SHARDS`` (falling back to
``CLUSTER SLOTS`` on servers without it) and swaps in the new map.

Refreshes happen periodically, at start-up, after MOVED (the router patches that one slot at
once), and when a backend connection dies. Requests are debounced: at most one refresh runs
at a time, at least ``topology_refresh_min_gap_ms`` apart; requests arriving meanwhile fold
into one more refresh afterwards. The proxy serves whatever the map covers while some nodes
are unreachable; requests for unknown slots are retried by the router until their deadline.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import hiredis
import trio

from slotgate.eventcore.backoff import backoff_ms
from slotgate.protocol.resp import encode_command
from slotgate.protocol.slots import SLOT_COUNT
from slotgate.proxy.backend.auth import login
from slotgate.proxy.ops.metrics import ProxyMetrics
from slotgate.proxy.ops.settings import ProxySettings
from slotgate.proxy.ops.tls import open_node_stream

log = logging.getLogger("slotgate.topology")

MAX_SUCCESSORS = 1024


@dataclass
class SlotMap:
    """Who serves each slot. ``owners[slot]`` is the master's ``host:port`` or None."""

    owners: list[str | None] = field(default_factory=lambda: [None] * SLOT_COUNT)
    replicas: dict[str, list[str]] = field(default_factory=dict)
    # Masters that own slots, ordered by the first slot they own: stable across failovers
    # (the promoted replica takes the same place), which SCAN cursors rely on.
    masters: list[str] = field(default_factory=list)
    # The first slot of each of ``masters``: fan-out sends "to the owner of this slot", so a
    # failover between planning and sending still reaches the shard.
    first_slots: list[int] = field(default_factory=list)
    # From CLUSTER SHARDS only (CLUSTER SLOTS tells neither): every member's role and health
    # as the cluster reports them ("online", "fail", "loading"), failed members included, and
    # each online replica's master and replication lag behind it in bytes (offsets as gossiped).
    members: dict[str, tuple[str, str]] = field(default_factory=dict)
    replica_lag_bytes: dict[str, tuple[str, int]] = field(default_factory=dict)
    # From CLUSTER SHARDS: every replica not reported failed, "loading" ones included (Redis
    # 7.0 reports a replica "loading" while its gossiped offset is 0, e.g. before any write);
    # replica reads judge them by checks of their own (routing/replicas.py).
    unfailed_replicas: dict[str, list[str]] = field(default_factory=dict)

    def covered(self) -> int:
        return sum(1 for o in self.owners if o is not None)


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _pairs(flat: Sequence[Any]) -> dict[str, Any]:
    """A RESP2 flattened map (or a RESP3 dict) -> dict with str keys."""
    if isinstance(flat, dict):
        return {_text(k): v for k, v in flat.items()}
    return {_text(flat[i]): flat[i + 1] for i in range(0, len(flat) - 1, 2)}


def _finish(owners: list[str | None], replicas: dict[str, list[str]]) -> SlotMap:
    first_slot: dict[str, int] = {}
    for slot, owner in enumerate(owners):
        if owner is not None and owner not in first_slot:
            first_slot[owner] = slot
    masters = sorted(first_slot, key=first_slot.__getitem__)
    return SlotMap(owners, replicas, masters, [first_slot[m] for m in masters])


def promoted(old: SlotMap, new: SlotMap) -> list[str]:
    """Masters of ``new`` that were replicas in ``old``: failovers the proxy has seen."""
    was_replica = {r for reps in old.replicas.values() for r in reps}
    return [m for m in new.masters if m in was_replica and m not in old.masters]


def replaced(old: SlotMap, new: SlotMap) -> dict[str, str]:
    """Failovers from ``old`` to ``new``: each former master -> the replica of its own that
    took its place (its replication offsets continue there, PSYNC2)."""
    master_of = {r: m for m, reps in old.replicas.items() for r in reps}
    return {master_of[m]: m for m in promoted(old, new) if m in master_of}


def _node_address(node: dict[str, Any], default_host: str, tls: bool = False) -> str:
    """``host:port`` of a CLUSTER SHARDS node entry; ``tls``: its TLS port first (a node with
    both lists both)."""
    host = _text(node.get("endpoint") or b"")
    if not host or host == "?":
        host = _text(node.get("ip") or b"") or default_host
    if tls:
        port = node.get("tls-port") or node.get("port") or 0
    else:
        port = node.get("port") or node.get("tls-port") or 0
    return f"{host}:{int(port)}"


def _offset(node: dict[str, Any]) -> int | None:
    """A node's replication offset; None when absent or not a number (metrics only: a
    strange value must not cost the slot map)."""
    try:
        return int(node["replication-offset"])
    except (KeyError, TypeError, ValueError):
        return None


def slot_map_from_shards(reply: Sequence[Any], default_host: str, tls: bool = False) -> SlotMap:
    """Build a map from a decoded ``CLUSTER SHARDS`` reply (RESP2 or RESP3 shape); ``tls``:
    the nodes' TLS ports."""
    owners: list[str | None] = [None] * SLOT_COUNT
    replicas: dict[str, list[str]] = {}
    members: dict[str, tuple[str, str]] = {}
    lag: dict[str, tuple[str, int]] = {}
    unfailed: dict[str, list[str]] = {}
    for shard_raw in reply:
        shard = _pairs(shard_raw)
        nodes = [_pairs(n) for n in shard.get("nodes", [])]
        for n in nodes:
            members[_node_address(n, default_host, tls)] = (_text(n.get("role", b"")),
                                                       _text(n.get("health", b"")))
        masters = [n for n in nodes if _text(n.get("role", b"")) == "master"]
        if not masters:
            continue
        master = _node_address(masters[0], default_host, tls)
        online = [n for n in nodes
                  if _text(n.get("role", b"")) != "master" and _text(n.get("health", b"")) == "online"]
        replicas[master] = [_node_address(n, default_host, tls) for n in online]
        unfailed[master] = [_node_address(n, default_host, tls) for n in nodes
                            if _text(n.get("role", b"")) != "master"
                            and _text(n.get("health", b"")) != "fail"]
        master_offset = _offset(masters[0])
        for n in online:
            offset = _offset(n)
            if master_offset is not None and offset is not None:
                lag[_node_address(n, default_host, tls)] = (master, max(master_offset - offset, 0))
        ranges = shard.get("slots", [])
        for i in range(0, len(ranges) - 1, 2):
            for slot in range(int(ranges[i]), int(ranges[i + 1]) + 1):
                owners[slot] = master
    slot_map = _finish(owners, replicas)
    slot_map.members = members
    slot_map.replica_lag_bytes = lag
    slot_map.unfailed_replicas = unfailed
    return slot_map


def slot_map_from_slots(reply: Sequence[Any], default_host: str) -> SlotMap:
    """Build a map from a decoded ``CLUSTER SLOTS`` reply."""
    owners: list[str | None] = [None] * SLOT_COUNT
    replicas: dict[str, list[str]] = {}
    for entry in reply:
        start, end = int(entry[0]), int(entry[1])
        nodes = [f"{_text(n[0]) or default_host}:{int(n[1])}" for n in entry[2:]]
        if not nodes:
            continue
        replicas[nodes[0]] = nodes[1:]
        for slot in range(start, end + 1):
            owners[slot] = nodes[0]
    return _finish(owners, replicas)


class QueryError(Exception):
    """A node answered a topology query with an error reply."""


async def query_node(address: str, argv: Sequence[bytes | str], timeout_s: float,
                     settings: ProxySettings | None = None,
                     metrics: ProxyMetrics | None = None) -> Any:
    """Open a connection to ``address`` (logged in with ``settings``' credentials, if given),
    send one command, return the decoded reply.

    Raises ``OSError``/``trio.TooSlowError`` when unreachable or the node refuses the
    credentials (``BackendAuthError``), ``QueryError`` on an error reply.
    """
    with trio.fail_after(timeout_s):
        stream = await open_node_stream(address, settings)
        async with stream:
            if settings is not None and metrics is not None:
                await login(stream, address, settings, metrics)
            try:
                await stream.send_all(encode_command(*argv))
                reader = hiredis.Reader()
                while True:
                    data = await stream.receive_some(65536)
                    if not data:
                        raise OSError(f"{address} closed the connection")
                    reader.feed(data)
                    reply = reader.gets()
                    if reply is not False:
                        if isinstance(reply, hiredis.ReplyError):
                            raise QueryError(str(reply))
                        return reply
            except trio.BrokenResourceError as exc:  # reset by a node that just died
                raise OSError(f"{address}: {exc}") from exc


class Topology:
    """Owns the current ``SlotMap`` and the refresh task.

    The router reads ``topology.owners`` (a list indexed by slot) directly on its hot path.
    """

    def __init__(self, settings: ProxySettings, metrics: ProxyMetrics) -> None:
        self._settings = settings
        self._metrics = metrics
        self.slot_map = SlotMap()
        self.owners = self.slot_map.owners
        self.version = 0
        self._seeds = [f"{h}:{p}" for h, p in settings.seeds]
        self._wakeup = trio.Event()
        self._pending_reason = ""
        self._last_refresh_s = -1e9
        self.refreshed = trio.Event()  # set after every successful refresh (then replaced)
        self._failed_refreshes = 0  # in a row, for the backoff between them
        # Former master -> the replica that took its place, for the last MAX_SUCCESSORS
        # failovers seen (read-your-writes follows a client's writes there: readwrite.py).
        self.successors: dict[str, str] = {}

    @property
    def settings(self) -> ProxySettings:
        """The live settings (the /healthz probe logs in with their credentials)."""
        return self._settings

    # --- hot-path hooks (sync, cheap) ------------------------------------------------------
    def moved(self, slot: int, node: str) -> None:
        """A MOVED told us ``slot`` now lives at ``node``: patch it now, refresh soon."""
        self.owners[slot] = node
        self.request_refresh("moved")

    def request_refresh(self, reason: str) -> None:
        if not self._pending_reason:
            self._pending_reason = reason
        self._wakeup.set()

    async def refreshed_or(self, event: trio.Event) -> None:
        """Until the next successful refresh, or ``event``, whichever comes first."""
        refreshed = self.refreshed
        async with trio.open_nursery() as nursery:
            async def wait(e: trio.Event) -> None:
                await e.wait()
                nursery.cancel_scope.cancel()

            nursery.start_soon(wait, refreshed)
            nursery.start_soon(wait, event)

    # --- the refresher ---------------------------------------------------------------------
    def _candidates(self) -> list[str]:
        """Known masters, seeds, replicas; nodes that refused the proxy's login last."""
        seen: dict[str, None] = {}
        for addr in self.slot_map.masters + self._seeds:
            seen.setdefault(addr, None)
        for reps in self.slot_map.replicas.values():
            for addr in reps:
                seen.setdefault(addr, None)
        refusing = self._metrics.auth_refusing
        return sorted(seen, key=lambda addr: addr in refusing)

    async def refresh(self, reason: str) -> bool:
        """Fetch the map from the first node that answers; True if the map was replaced."""
        start = trio.current_time()
        timeout_s = self._settings.connect_timeout_ms / 1000 * 2
        for addr in self._candidates():
            host = addr.rpartition(":")[0]
            try:
                try:
                    reply = await query_node(addr, (b"CLUSTER", b"SHARDS"), timeout_s,
                                             self._settings, self._metrics)
                    new_map = slot_map_from_shards(reply, host, self._settings.backend_tls)
                except QueryError:
                    reply = await query_node(addr, (b"CLUSTER", b"SLOTS"), timeout_s,
                                             self._settings, self._metrics)
                    new_map = slot_map_from_slots(reply, host)
            except (OSError, trio.TooSlowError, QueryError, ValueError) as exc:
                log.debug("topology query to %s failed: %s", addr, exc)
                continue
            if not new_map.masters:
                continue  # a node that knows no slots (not joined yet): ask another one
            for node in promoted(self.slot_map, new_map):
                log.info("failover seen: %s is a master now", node)
                self._metrics.failover(node)
            for former, node in replaced(self.slot_map, new_map).items():
                self.successors.pop(former, None)
                self.successors[former] = node
                while len(self.successors) > MAX_SUCCESSORS:
                    del self.successors[next(iter(self.successors))]
            self.slot_map = new_map
            self.owners = new_map.owners
            self.version += 1
            self._last_refresh_s = trio.current_time()
            self._metrics.topology_refresh(reason, trio.current_time() - start, True)
            self.refreshed.set()
            self.refreshed = trio.Event()
            return True
        self._metrics.topology_refresh(reason, trio.current_time() - start, False)
        log.warning("topology refresh (%s): no node answered", reason)
        return False

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Initial refresh (may fail: we serve anyway), then refresh on request or periodically."""
        await self.refresh("startup")
        task_status.started()
        s = self._settings
        while True:
            with trio.move_on_after(s.topology_refresh_interval_ms / 1000):
                await self._wakeup.wait()
            gap_s = s.topology_refresh_min_gap_ms / 1000
            wait_s = self._last_refresh_s + gap_s - trio.current_time()
            if wait_s > 0:
                await trio.sleep(wait_s)
            reason = self._pending_reason or "periodic"
            self._pending_reason = ""
            self._wakeup = trio.Event()
            ok = await self.refresh(reason)
            self._failed_refreshes = 0 if ok else self._failed_refreshes + 1
            if not ok:
                # Keep a gap after failures too, growing as the nodes' connections' backoff
                # does: unreachable nodes or refused credentials are not hammered.
                backoff_s = backoff_ms(self._failed_refreshes - 1, s.reconnect_backoff_min_ms,
                                       s.reconnect_backoff_max_ms) / 1000
                self._last_refresh_s = trio.current_time() + max(0.0, backoff_s - gap_s)
