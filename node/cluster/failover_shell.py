"""Failover wired into the running node: replication follows the cluster role, offsets reach
the bus header, and a master can pause writes for a manual failover.

``install(cn)`` (called by node/cluster/node.py) creates the ``Failover`` of
node/cluster/failover.py, attaches it to the engine (``Engine.ext``) and fills the engine's
replication hooks:

- ``hooks.set_master(node)``: ``start_replication(node.ip, node.port)`` (CLUSTER REPLICATE,
  slot rebinding, UPDATE, replica migration); ``hooks.set_master(None)``: stop replication
  (promotion: new replid, the old one kept as replid2 for partial resyncs).
- ``hooks.repl_offset``: the processed offset, carried in every bus header (CLUSTER SLOTS
  hides replicas whose known offset is 0).

Write pause (manual failover, master side): write commands from clients are parked, not
refused, while the pause lasts (Redis postpones them too). When it ends (failover done, or
timed out) each parked command runs again from the top, so after a completed failover it is
answered with a MOVED to the new master.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from slotgate.node.cluster.failover import Failover
from slotgate.node.core import dispatch
from slotgate.node.core.client import BLOCKED
from slotgate.node.replication import master as replication

if TYPE_CHECKING:
    from slotgate.node.cluster.node import ClusterNode
    from slotgate.node.cluster.state import Node
    from slotgate.node.commands.registry import Command
    from slotgate.node.core.client import Client
    from slotgate.node.replication.master import Replication

log = logging.getLogger("node.cluster")


class Settings:
    """FailoverSettings from the server's live config."""

    def __init__(self, cn: ClusterNode) -> None:
        self.cfg = cn.server.config

    @property
    def node_timeout_ms(self) -> int:
        return int(self.cfg.get("cluster-node-timeout"))

    @property
    def replica_validity_factor(self) -> int:
        return int(self.cfg.get("cluster-replica-validity-factor"))

    @property
    def repl_ping_replica_period_s(self) -> int:
        return int(self.cfg.get("repl-ping-replica-period"))

    @property
    def replica_no_failover(self) -> bool:
        return bool(self.cfg.get("cluster-replica-no-failover"))

    @property
    def migration_barrier(self) -> int:
        return int(self.cfg.get("cluster-migration-barrier"))

    @property
    def allow_replica_migration(self) -> bool:
        return bool(self.cfg.get("cluster-allow-replica-migration"))


def _never_serve(c: Client, db: object, key: bytes) -> bytes | None:
    return None


class NodeReplication:
    """ReplicationPort over node/replication/master.py plus the client write pause."""

    def __init__(self, cn: ClusterNode, repl: Replication) -> None:
        self.cn = cn
        self.server = cn.server
        self.repl = repl
        self.paused_until_ms = 0
        self.parked: list[tuple[Client, Command, list[bytes], bool]] = []

    # -- ReplicationPort ---------------------------------------------------------------------
    def offset(self) -> int:
        return self.repl.repl_offset()

    def data_age_ms(self) -> int:
        link = self.repl.link
        if link is None:
            return 0
        now = time.monotonic()
        if link.state == "connected":
            return int((now - link.last_io) * 1000) if link.last_io else 0
        return int((now - link.down_since) * 1000)

    def replicating_from(self) -> tuple[str, int] | None:
        if self.repl.role != "slave":
            return None
        return (self.repl.master_host, self.repl.master_port)

    def set_master(self, node: Node | None) -> None:
        """The engine's ``hooks.set_master``."""
        repl = self.repl
        if node is None:
            if repl.role == "slave":
                repl.stop_replication()
            return
        if not node.ip or not node.port or self.server.nursery is None:
            return  # the cron retries once the address is known and the server runs
        if repl.role == "slave" and (repl.master_host, repl.master_port) == (node.ip, node.port):
            return
        fo = self.cn.failover
        if fo is not None:
            fo.reset_manual()
        repl.start_replication(node.ip, node.port)

    def pause_writes(self, until_ms: int) -> None:
        self.paused_until_ms = until_ms
        self.server.add_command_check(self.check_pause, first=True)
        log.warning("Clients write-paused for the manual failover.")

    def unpause_writes(self) -> None:
        if not self.paused_until_ms:
            return
        self.paused_until_ms = 0
        self.server.remove_command_check(self.check_pause)
        parked, self.parked = self.parked, []
        for c, cmd, argv, multi_error in parked:
            st = c.blocked
            if st is None or st.argv is not argv or c.killed:
                continue
            c.unblock(None)
            c.multi_error = multi_error
            reply = dispatch.process_command(c, cmd, argv)
            if reply is not BLOCKED:
                c.out.append(reply)
                c.wake()
        if parked:
            log.warning("Write pause ended; %d postponed commands ran.", len(parked))

    # -- the pause -----------------------------------------------------------------------------
    def check_pause(self, c: Client, cmd: Command, argv: list[bytes]) -> bytes | None:
        """A command check: park client writes while paused (masters and replicas' own
        streams are never paused)."""
        if not self.paused_until_ms:
            return None
        if c.is_master or c.is_replica:
            return None
        if c.multi is not None and cmd.full_name != "exec":
            return None  # queuing changes nothing; EXEC is what waits
        write = cmd.write or (cmd.full_name == "exec" and bool(c.multi)
                              and any(q.write for q, _ in c.multi or ()))
        if not write or c.in_exec:
            return None
        if self.cn.clock_ms() >= self.paused_until_ms:
            self.unpause_writes()
            return None
        self.parked.append((c, cmd, argv, c.multi_error))
        return c.block([], 0, _never_serve, argv)


def install(cn: ClusterNode) -> Failover:
    """Attach failover to ``cn`` (its engine, hooks and INFO)."""
    repl = replication.get(cn.server)
    port = NodeReplication(cn, repl)
    fo = Failover(cn.engine, Settings(cn), port)
    cn.engine.ext = fo
    cn.hooks.repl_offset = repl.repl_offset
    cn.hooks.set_master = port.set_master
    cn.failover = fo
    cn.failover_port = port
    return fo
