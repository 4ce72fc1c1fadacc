"""Cluster mode wired into the server: state + engine + transport + routing + INFO.

``install(server)`` (called by the server when cluster-enabled is yes) loads or creates
``nodes.conf`` (locked for the process lifetime), builds the engine, and plugs into the
server's hooks: ``cluster_route`` (routing.py), ``info_sections["cluster"]`` and a start hook
that runs the bus transport and the 100 ms cron. Settings are read live from the server's
config, so CONFIG SET of cluster directives takes effect on the next use. Replication follows
the cluster role through the engine's ``set_master`` / ``repl_offset`` hooks, which
node/cluster/failover_shell.py fills (its cron also starts replication for a replica
restarted from nodes.conf).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from slotgate.node.cluster import bus, failover_shell, nodesconf
from slotgate.node.cluster.failover import Failover
from slotgate.node.cluster.failover_shell import NodeReplication
from slotgate.node.cluster.gossip import CRON_INTERVAL_MS, Engine, Hooks
from slotgate.node.cluster.routing import DOWN_STATE, DOWN_UNBOUND, Router
from slotgate.node.cluster.state import (
    CLUSTER_BUS_PORT_OFFSET,
    TODO_FSYNC,
    TODO_SAVE,
    TODO_UPDATE_STATE,
    ClusterState,
    Node,
    random_name,
)
from slotgate.node.cluster.transport import Transport
from slotgate.node.commands import pubsub
from slotgate.protocol.slots import key_slot

if TYPE_CHECKING:
    from slotgate.node.core.server import Server

log = logging.getLogger("node.cluster")


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class ServerSettings:
    """The engine's ``Settings`` read from the server's live config."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.cfg = server.config

    @property
    def node_timeout_ms(self) -> int:
        return int(self.cfg.get("cluster-node-timeout"))

    @property
    def link_sendbuf_limit_bytes(self) -> int:
        return int(self.cfg.get("cluster-link-sendbuf-limit"))

    @property
    def port(self) -> int:
        return int(self.cfg.get("cluster-announce-port")) or self.server.port

    @property
    def bus_port(self) -> int:
        """The port the bus listens on."""
        return int(self.cfg.get("cluster-port")) or self.server.port + CLUSTER_BUS_PORT_OFFSET

    @property
    def cport(self) -> int:
        return int(self.cfg.get("cluster-announce-bus-port")) or self.bus_port

    @property
    def pport(self) -> int:
        return 0

    @property
    def announce_ip(self) -> str:
        return str(self.cfg.get("cluster-announce-ip"))

    @property
    def hostname(self) -> str:
        return str(self.cfg.get("cluster-announce-hostname"))

    @property
    def require_full_coverage(self) -> bool:
        return bool(self.cfg.get("cluster-require-full-coverage"))

    @property
    def allow_replica_migration(self) -> bool:
        return bool(self.cfg.get("cluster-allow-replica-migration"))

    @property
    def replica_no_failover(self) -> bool:
        return bool(self.cfg.get("cluster-replica-no-failover"))


class ClusterNode:
    """Everything cluster mode adds to one server."""

    def __init__(self, server: Server, clock_ms: Callable[[], int] = wall_clock_ms,
                 rng: random.Random | None = None) -> None:
        self.server = server
        self.clock_ms = clock_ms
        self.settings = ServerSettings(server)
        path = str(server.config.get("cluster-config-file"))
        self.config_file = nodesconf.ConfigFile(path)
        self.config_file.lock()
        text = self.config_file.read()
        if text is None:
            me = Node(random_name(), bus.F_MYSELF | bus.F_MASTER, clock_ms())
            self.state = ClusterState(me, clock_ms)
            log.info("No cluster configuration found, I'm %s", me.name.decode())
            must_save = True
        else:
            self.state = nodesconf.load(text, path, clock_ms)
            log.info("Node configuration loaded, I'm %.40s", self.state.myself.name.decode())
            must_save = False
        hooks = Hooks()
        self.hooks = hooks
        self.engine = Engine(self.state, self.settings, hooks, clock_ms, rng or random.Random())
        self.transport: Transport | None = None
        hooks.save = self.save
        hooks.count_keys_in_slot = lambda slot: server.ks.dbs[0].count_keys_in_slot(slot)
        hooks.delete_keys_in_slot = self.delete_keys_in_slot
        hooks.publish = self._deliver_publish
        # hooks.set_master / hooks.repl_offset: node/cluster/failover_shell.py (install), which
        # also sets these two: elections and manual failover, and the replication port with
        # the write pause.
        self.failover: Failover | None = None
        self.failover_port: NodeReplication | None = None
        self.router = Router(self)
        self.refresh_myself()
        if must_save:
            self.save(True)
        # the data is loaded after the node starts listening: checked once it is in
        server.after_load.append(self._verify_after_load)

    def _verify_after_load(self) -> None:
        if self.verify_config_with_data():
            self.save(True)

    def verify_config_with_data(self) -> bool:
        """verifyClusterConfigWithData, after the data was loaded at start-up: keys in an
        unassigned slot -> claim it; keys in a slot of another node -> importing from it.
        Keys outside db 0 are fatal (ConfigFileError). True if the config changed."""
        st = self.state
        me = st.myself
        if me.is_replica:
            return False
        dbs = self.server.ks.dbs
        if any(db.size() for db in dbs[1:]):
            raise nodesconf.ConfigFileError(
                "You can't have keys in a DB different than DB 0 when in Cluster mode. Exiting.")
        db0 = dbs[0]
        changed = False
        for slot in sorted(db0.slots or {}):
            if not db0.count_keys_in_slot(slot):
                continue
            owner = st.slots[slot]
            if owner is me or slot in st.importing:
                continue
            changed = True
            if owner is None:
                log.warning("I have keys for unassigned slot %d. Taking responsibility for it.",
                            slot)
                st.add_slot(me, slot)
            else:
                log.warning("I have keys for slot %d, but the slot is assigned to another node. "
                            "Setting it to importing state.", slot)
                st.importing[slot] = owner
        if changed:
            st.generation += 1
        return changed

    # -- wiring --------------------------------------------------------------------------------
    def refresh_myself(self) -> None:
        """Announced ports and hostname of myself (clusterUpdateMyselfAnnouncedPorts)."""
        me = self.state.myself
        s = self.settings
        me.port, me.cport, me.pport = s.port, s.cport, s.pport
        me.hostname = s.hostname
        if s.announce_ip and me.ip != s.announce_ip:
            me.ip = s.announce_ip
            self.state.changed(TODO_SAVE)

    def save(self, fsync: bool) -> None:
        st = self.state
        try:
            self.config_file.save(nodesconf.render(st), fsync)
        except OSError as e:
            log.warning("Could not save the cluster config file: %s", e)
            raise

    def before_sleep(self) -> None:
        self.engine.before_sleep()

    def before_reply(self) -> None:
        """The server's hook before client output is written: pending work (state update,
        nodes.conf save and fsync) runs first, as in Redis' clusterBeforeSleep. Commands only
        mark it, so a pipelined batch of them saves once."""
        if self.state.todo:
            try:
                self.engine.before_sleep()
            except OSError:
                pass  # logged by save(); the next change tries again

    def delete_keys_in_slot(self, slot: int) -> int:
        db = self.server.ks.dbs[0]
        keys = list(db.keys_in_slot(slot))
        for key in keys:
            db.delete(key)
            self.server.ks.propagate(0, [b"DEL", key])
        return len(keys)

    def redirect_blocked_clients(self) -> None:
        """clusterRedirectBlockedClientIfNeeded, for every client blocked on keys: the cluster
        went down -> CLUSTERDOWN; the slot of its (first) key is unbound -> CLUSTERDOWN Hash
        slot not served; served by another node and not importing here -> MOVED."""
        server = self.server
        if not server.blocked_clients:
            return
        st = self.state
        me = st.myself
        for c in list(server.clients.values()):
            b = c.blocked
            if b is None or not b.keys:
                continue
            if st.state == bus.STATE_FAIL:
                c.unblock(DOWN_STATE)
                continue
            slot = key_slot(b.keys[0])
            owner = st.slots[slot]
            if c.readonly and me.is_replica and me.slaveof is owner and owner is not None:
                cmd = server.table.get(b.argv[0].lower()) if b.argv else None
                if cmd is not None and not cmd.write:
                    continue
            if owner is not me and slot not in st.importing:
                c.unblock(DOWN_UNBOUND if owner is None else self.redirect(b"MOVED", slot, owner))

    def _deliver_publish(self, channel: bytes, message: bytes, shard: bool) -> None:
        h = pubsub.hub(self.server)
        if shard:
            h.deliver_shard(channel, message)
        else:
            h.deliver(channel, message)

    def endpoint(self, node: Node) -> str:
        kind = self.server.config.get("cluster-preferred-endpoint-type")
        if kind == "hostname":
            return node.hostname or "?"
        if kind == "unknown-endpoint":
            return ""
        return node.ip

    def redirect(self, kind: bytes, slot: int, node: Node) -> bytes:
        return b"-%s %d %s:%d\r\n" % (kind, slot, self.endpoint(node).encode(), node.port)

    # -- run -----------------------------------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve the bus and run the cron until cancelled. OSError if the bus port is taken."""
        binds = str(self.server.config.get("bind")).split()
        transport = Transport(self.engine, binds, self.settings.bus_port, self.before_sleep)
        self.transport = transport
        self.hooks.connect = transport.connect
        self.hooks.close = transport.close
        self.server.blocked.services.append(transport.serve_while_blocked)
        self._hook_pubsub()
        async with trio.open_nursery() as nursery:
            await nursery.start(transport.run)
            self.refresh_myself()
            self.engine.update_state()
            task_status.started()
            while True:
                await trio.sleep(CRON_INTERVAL_MS / 1000)
                self.refresh_myself()
                self.engine.cron()
                self.before_sleep()
                self.redirect_blocked_clients()

    def _hook_pubsub(self) -> None:
        h = pubsub.hub(self.server)
        h.publish_hooks.append(self.engine.publish)
        self.state.on_slot_left = h.unsubscribe_shard_slot

    # -- INFO ----------------------------------------------------------------------------------
    def info_fields(self, server: Any) -> list[tuple[str, object]]:
        return [("cluster_enabled", 1)]

    def mark_changed(self, fsync: bool = False) -> None:
        self.state.changed(TODO_SAVE | TODO_UPDATE_STATE | (TODO_FSYNC if fsync else 0))


def install(server: Server) -> ClusterNode:
    """Turn cluster mode on for ``server`` (called from the server when cluster-enabled)."""
    cn = ClusterNode(server)
    server.cluster = cn
    failover_shell.install(cn)  # replication follows the role; elections; manual failover
    server.set_cluster_routing(cn.router.route, cn.router.keypos, cn.router.keys_here)
    server.before_reply = cn.before_reply
    server.info_sections["cluster"] = cn.info_fields
    server.background_tasks.append(cn.run)
    return cn
