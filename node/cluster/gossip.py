"""The cluster bus protocol engine (sans-IO): MEET/PING/PONG, gossip, FAIL, UPDATE, cron.

Flow::

    transport (trio) ──bytes──▶ Engine.on_message(link, data) ──▶ state changes, replies
                                                                   queued on links (Link.send)
    every 100 ms ───────────▶ Engine.cron()    ──▶ connect() requests, PINGs, PFAIL
    after each step ────────▶ Engine.before_sleep() ──▶ update state, save nodes.conf

A ``Link`` is a queue of outgoing bytes plus what the transport knows about its socket; the
transport drains ``link.out`` when ``link.wake()`` is called and calls ``on_link_closed``.
Time (unix ms) and randomness are injected, so the schedule runs under a mock clock.
"""

from __future__ import annotations

import ipaddress
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from slotgate.node.cluster import bus, failure
from slotgate.node.cluster.bus import Message
from slotgate.node.cluster.messages import Messenger
from slotgate.node.cluster.state import (
    CLUSTER_BUS_PORT_OFFSET,
    TODO_FSYNC,
    TODO_SAVE,
    TODO_UPDATE_STATE,
    ClusterState,
    Node,
    add_replica,
    random_name,
)

log = logging.getLogger("node.cluster")

CRON_INTERVAL_MS = 100
LINK_BASE_BYTES = 1024 + 128  # a link's receive buffer and its own record, as Redis counts
BLACKLIST_TTL_S = 60


class Settings(Protocol):
    """The live configuration the engine reads (CONFIG SET takes effect at once)."""

    @property
    def node_timeout_ms(self) -> int: ...
    @property
    def port(self) -> int: ...  # announced client port
    @property
    def cport(self) -> int: ...  # announced bus port
    @property
    def pport(self) -> int: ...
    @property
    def announce_ip(self) -> str: ...
    @property
    def hostname(self) -> str: ...
    @property
    def require_full_coverage(self) -> bool: ...
    @property
    def allow_replica_migration(self) -> bool: ...
    @property
    def link_sendbuf_limit_bytes(self) -> int: ...  # 0: no limit


@dataclass
class FixedSettings:
    """``Settings`` that never change: for driving an engine without a server (tests, the
    formation simulation in bench/)."""

    node_timeout_ms: int
    port: int
    cport: int
    pport: int = 0
    announce_ip: str = ""
    hostname: str = ""
    require_full_coverage: bool = True
    allow_replica_migration: bool = True
    link_sendbuf_limit_bytes: int = 0


class Link:
    """One bus connection: outgoing queue + socket facts (filled in by the transport)."""

    __slots__ = ("node", "inbound", "ctime", "out", "wake", "closed", "local_ip", "peer_ip",
                 "send_bytes", "inflight_bytes")

    def __init__(self, node: Node | None, inbound: bool, now_ms: int) -> None:
        self.node = node
        self.inbound = inbound
        self.ctime = now_ms
        self.out: list[bytes] = []
        self.wake: Callable[[], None] = _noop
        self.closed = False
        self.local_ip = ""
        self.peer_ip = ""
        self.send_bytes = 0  # queued in ``out``
        self.inflight_bytes = 0  # taken by the transport's writer, not yet through the socket

    @property
    def buffered_bytes(self) -> int:
        """The link's send buffer: what Redis' link sndbuf would hold."""
        return self.send_bytes + self.inflight_bytes

    def send(self, data: bytes) -> None:
        if self.closed:
            return
        self.out.append(data)
        self.send_bytes += len(data)
        self.wake()


def _noop() -> None:
    return None


class Hooks:
    """What the engine asks of the rest of the node (keyspace, replication, pub/sub, I/O)."""

    def __init__(self) -> None:
        self.connect: Callable[[Link], None] = lambda link: None
        self.close: Callable[[Link], None] = lambda link: None
        self.count_keys_in_slot: Callable[[int], int] = lambda slot: 0
        self.delete_keys_in_slot: Callable[[int], int] = lambda slot: 0
        self.repl_offset: Callable[[], int] = lambda: 0
        self.set_master: Callable[[Node | None], None] = lambda node: None
        self.publish: Callable[[bytes, bytes, bool], None] = lambda ch, msg, shard: None
        self.save: Callable[[bool], None] = lambda fsync: None


class Engine(Messenger):
    """One node's cluster bus logic over a ``ClusterState``."""

    def __init__(self, state: ClusterState, settings: Settings, hooks: Hooks,
                 clock_ms: Callable[[], int], rng: random.Random) -> None:
        self.st = state
        self.cfg = settings
        self.hooks = hooks
        self.clock_ms = clock_ms
        self.rng = rng
        self.iteration = 0
        self.tracker = failure.StateTracker()
        self.drop_filter = -1  # DEBUG DROP-CLUSTER-PACKET-FILTER (-2: all)
        # failover (node/cluster/failover.py): auth requests/acks, MFSTART, mflags, cron
        self.ext: Any = None
        self.links_limit_exceeded = 0
        self._new_nodes: list[Node] = []  # learned this pass (gossip, MEET): linked in before_sleep

    # -- links -----------------------------------------------------------------------------
    def accept(self, peer_ip: str, local_ip: str) -> Link:
        link = Link(None, True, self.clock_ms())
        link.peer_ip, link.local_ip = peer_ip, local_ip
        return link

    def free_link(self, link: Link) -> None:
        """freeClusterLink: forget it on its node and ask the transport to close it."""
        if link.closed:
            return
        link.closed = True
        n = link.node
        if n is not None:
            if n.link is link:
                n.link = None
            if n.inbound_link is link:
                n.inbound_link = None
        self.hooks.close(link)

    def _free_links_over_limit(self, node: Node, limit: int) -> None:
        """clusterNodeCronFreeLinkOnBufferLimitReached: a link whose send buffer passed
        cluster-link-sendbuf-limit is freed (the outbound one is reconnected by the cron)."""
        for link in (node.link, node.inbound_link):
            if link is not None and link.buffered_bytes > limit:
                log.warning("Freeing cluster link(%s node %s, used memory: %d) due to exceeding "
                            "send buffer memory limit.", "from" if link.inbound else "to",
                            node.name.decode(), link.buffered_bytes)
                self.free_link(link)
                self.links_limit_exceeded += 1

    def links_memory(self) -> int:
        """INFO's mem_cluster_links: each link's fixed part and its send buffer."""
        total = 0
        for n in self.st.nodes.values():
            for link in (n.link, n.inbound_link):
                if link is not None:
                    total += LINK_BASE_BYTES + link.buffered_bytes
        return total

    def on_link_closed(self, link: Link) -> None:
        """The transport lost the connection (or failed to connect)."""
        if link.closed:
            return
        link.closed = True
        n = link.node
        if n is not None:
            if n.link is link:
                n.link = None
            if n.inbound_link is link:
                n.inbound_link = None

    def _connect(self, node: Node) -> None:
        """Create the outbound link (clusterNodeCronHandleReconnect). The first PING/MEET
        goes out once the connection is up (``on_link_connected``); until then the link
        queues what the cron sends, so a node learned by gossip (pong_received 0) gets the
        cron's PING first and the connect handler's PING right after it, as in Redis."""
        link = Link(node, False, self.clock_ms())
        link.peer_ip = node.ip
        node.link = link
        self.hooks.connect(link)

    def on_link_connected(self, link: Link) -> None:
        """clusterLinkConnectHandler: the outbound connection is up, PING (or MEET) now."""
        node = link.node
        if link.closed or node is None or node.link is not link:
            return
        old_ping_sent = node.ping_sent
        self.send_ping(link, bus.MEET if node.flags & bus.F_MEET else bus.PING)
        if old_ping_sent:
            node.ping_sent = old_ping_sent  # keep the ping already in flight (PFAIL timing)
        node.flags &= ~bus.F_MEET

    # -- MEET (CLUSTER MEET) ---------------------------------------------------------------
    def start_handshake(self, ip: str, port: int, cport: int) -> bool:
        """clusterStartHandshake: False if the address is invalid."""
        try:
            addr = ipaddress.ip_address(ip)
        except ValueError:
            return False
        if not (0 < port <= 65535 and 0 < cport <= 65535):
            return False
        norm = str(addr)
        for n in self.st.nodes.values():
            if n.in_handshake and n.ip.lower() == norm.lower() and n.port == port \
                    and n.cport == cport:
                return True  # already in progress
        n = Node(random_name(), bus.F_HANDSHAKE | bus.F_MEET, self.clock_ms())
        n.ip, n.port, n.cport = norm, port, cport
        self.st.add_node(n)
        self.st.changed(TODO_SAVE)
        self._new_nodes.append(n)
        return True

    # -- receiving -------------------------------------------------------------------------
    def on_message(self, link: Link, data: bytes) -> None:
        """clusterProcessPacket for one whole message (framing done by the transport)."""
        try:
            m = bus.decode(data)
        except bus.BusError as e:
            log.warning("Dropping bad cluster bus message: %s", e)
            return
        st = self.st
        if 0 <= m.type < bus.TYPE_COUNT:
            st.stats_received[m.type] += 1
        if m.version != bus.VERSION:
            return
        if self.drop_filter == -2 or self.drop_filter == m.type:
            return
        now = self.clock_ms()
        sender = link.node if (link.node is not None and not link.node.in_handshake) \
            else st.lookup(m.sender)
        if sender is not None and link.inbound and sender.inbound_link is not link:
            # remember the inbound link of a known sender (CLUSTER LINKS)
            if m.type in (bus.PING, bus.MEET) and not sender.in_handshake:
                link.node = sender
                sender.inbound_link = link
        if sender is not None:
            sender.data_received = now
        if sender is not None and not sender.in_handshake:
            if m.current_epoch > st.current_epoch:
                st.current_epoch = m.current_epoch
                st.changed(TODO_SAVE | TODO_FSYNC)
            if m.config_epoch > sender.config_epoch:
                sender.config_epoch = m.config_epoch
                st.changed(TODO_SAVE | TODO_FSYNC)
            sender.repl_offset = m.offset
            if self.ext is not None:
                self.ext.on_sender_header(m, sender, now)
        handler = _HANDLERS.get(m.type)
        if handler is not None:
            handler(self, link, m, sender, now)

    def _on_ping_meet(self, link: Link, m: Message, sender: Node | None, now: int) -> None:
        st = self.st
        me = st.myself
        if (m.type == bus.MEET or not me.ip) and not self.cfg.announce_ip and link.local_ip:
            if me.ip != link.local_ip:
                me.ip = link.local_ip
                st.changed(TODO_SAVE)
        if sender is None and m.type == bus.MEET:
            n = Node(random_name(), bus.F_HANDSHAKE, now)
            n.ip = m.myip or link.peer_ip
            n.port, n.pport, n.cport = m.port, m.pport, m.cport
            st.add_node(n)
            st.changed(TODO_SAVE)
            self._new_nodes.append(n)
            self._process_gossip(m, None, now)
        self.send_ping(link, bus.PONG)
        self._on_config_message(link, m, sender, now)

    def _on_pong(self, link: Link, m: Message, sender: Node | None, now: int) -> None:
        self._on_config_message(link, m, sender, now)

    def _on_config_message(self, link: Link, m: Message, sender: Node | None,
                           now: int) -> None:
        """The PING/PONG/MEET part shared by all three: identity, roles, slots, gossip."""
        st = self.st
        timeout = self.cfg.node_timeout_ms
        ln = link.node if not link.inbound else None
        if ln is not None:
            if ln.in_handshake:
                if sender is not None:
                    # We already know this node: update its address, drop the handshake one.
                    if self._update_address(sender, link, m):
                        st.changed(TODO_SAVE | TODO_UPDATE_STATE)
                    for lk in st.del_node(ln):
                        self.free_link(lk)
                    return
                st.rename_node(ln, m.sender)
                log.info("Handshake with node %s completed.", m.sender.decode())
                ln.flags &= ~bus.F_HANDSHAKE
                ln.flags |= m.flags & (bus.F_MASTER | bus.F_SLAVE)
                st.changed(TODO_SAVE)
                ln.data_received = now
                # as in Redis, the sender was looked up before the rename: this PONG ends the
                # handshake only; roles, slots and gossip come with the next PING/PONG
            elif ln.name != m.sender:
                log.info("PONG contains mismatching sender ID. About node %s added %d ms ago, "
                         "having flags %d", ln.name.decode(), now - ln.ctime, ln.flags)
                ln.flags |= bus.F_NOADDR
                ln.ip, ln.port, ln.cport, ln.pport = "", 0, 0, 0
                self.free_link(link)
                st.changed(TODO_SAVE)
                return
        if sender is not None:
            sender.flags = (sender.flags & ~bus.F_NOFAILOVER) | (m.flags & bus.F_NOFAILOVER)
            if m.type == bus.PING and not sender.in_handshake \
                    and self._update_address(sender, link, m):
                st.changed(TODO_SAVE | TODO_UPDATE_STATE)
            if m.hostname is not None or m.mflags[0] & bus.MF_EXT_DATA:
                hostname = m.hostname or ""
                if sender.hostname != hostname:
                    sender.hostname = hostname
                    st.changed(TODO_SAVE)
        if ln is not None and m.type == bus.PONG:
            ln.pong_received = now
            ln.ping_sent = 0
            if ln.timed_out:
                ln.flags &= ~bus.F_PFAIL
                st.changed(TODO_UPDATE_STATE)
            elif ln.failed:
                failure.clear_failure_if_needed(st, ln, timeout, now)
        if sender is None:
            return
        # role switch
        if m.slaveof == bus.NULL_NAME:
            st.set_node_as_master(sender)
        else:
            master = st.lookup(m.slaveof)
            if sender.is_master:
                st.del_node_slots(sender)
                sender.flags &= ~(bus.F_MASTER | bus.F_MIGRATE_TO)
                sender.flags |= bus.F_SLAVE
                st.changed(TODO_SAVE | TODO_UPDATE_STATE)
            if master is not None and sender.slaveof is not master:
                if sender.slaveof is not None and sender in sender.slaveof.replicas:
                    sender.slaveof.replicas.remove(sender)
                add_replica(master, sender)
                sender.slaveof = master
                st.changed(TODO_SAVE)
        # slots
        sender_master = sender if sender.is_master else sender.slaveof
        dirty = sender_master is not None and bytes(sender_master.slots) != m.myslots
        if sender.is_master and dirty:
            self.update_slots_config_with(sender, m.config_epoch, m.myslots)
        if dirty:
            for slot in bus.bitmap_diff_slots(m.myslots, sender.slots):
                owner = st.slots[slot]
                if owner is sender or owner is None:
                    continue
                if owner.config_epoch > m.config_epoch:
                    log.debug("Node %s has old slots configuration, sending an UPDATE "
                              "message about %s", sender.name.decode(), owner.name.decode())
                    self.send_update(sender.link, owner)
                    break
        me = st.myself
        if me.is_master and sender.is_master and m.config_epoch == me.config_epoch:
            self.handle_epoch_collision(sender)
        self._process_gossip(m, sender, now)

    def _update_address(self, node: Node, link: Link, m: Message) -> bool:
        """nodeUpdateAddressIfNeeded."""
        if link is node.link:
            return False
        ip = m.myip or link.peer_ip
        if not ip:
            return False
        if node.ip == ip and node.port == m.port and node.cport == m.cport \
                and node.pport == m.pport:
            return False
        node.ip, node.port, node.cport, node.pport = ip, m.port, m.cport, m.pport
        if node.link is not None:
            self.free_link(node.link)
        node.flags &= ~bus.F_NOADDR
        log.info("Address updated for node %s, now %s:%d", node.name.decode(), ip, m.port)
        if self.st.myself.slaveof is node:
            self.hooks.set_master(node)
        return True

    def _process_gossip(self, m: Message, sender: Node | None, now: int) -> None:
        """clusterProcessGossipSection."""
        st = self.st
        timeout = self.cfg.node_timeout_ms
        for g in m.gossip:
            node = st.lookup(g.name)
            if node is not None:
                if sender is not None and sender.is_master and node is not st.myself:
                    if g.flags & (bus.F_FAIL | bus.F_PFAIL):
                        failure.add_failure_report(node, sender, now)
                        if failure.mark_failing_if_needed(st, node, timeout, now):
                            self.send_fail(node.name)
                    else:
                        failure.del_failure_report(node, sender)
                # (myself included: a real 7.0 shows a gossiped pong time on its own line)
                if (not g.flags & (bus.F_FAIL | bus.F_PFAIL) and node.ping_sent == 0
                        and failure.failure_reports_count(node, timeout, now) == 0):
                    pongtime = g.pong_received_s * 1000
                    if pongtime <= now + 500 and pongtime > node.pong_received:
                        node.pong_received = pongtime
                if (node.flags & (bus.F_FAIL | bus.F_PFAIL) and not g.flags & bus.F_NOADDR
                        and (node.ip != g.ip or node.port != g.port or node.cport != g.cport)):
                    if node.link is not None:
                        self.free_link(node.link)
                    node.ip, node.port, node.cport, node.pport = g.ip, g.port, g.cport, g.pport
                    node.flags &= ~bus.F_NOADDR
            elif (sender is not None and not g.flags & bus.F_NOADDR
                  and not st.blacklisted(g.name, now // 1000) and g.name != bus.NULL_NAME):
                node = Node(g.name, g.flags & ~bus.F_MYSELF, now)
                node.ip, node.port, node.cport, node.pport = g.ip, g.port, g.cport, g.pport
                st.add_node(node)
                st.changed(TODO_SAVE)
                self._new_nodes.append(node)

    def _on_fail(self, link: Link, m: Message, sender: Node | None, now: int) -> None:
        if sender is None:
            return
        failing = self.st.lookup(m.fail_name)
        if failing is not None and not failing.flags & (bus.F_FAIL | bus.F_MYSELF):
            log.info("FAIL message received from %s about %s", sender.name.decode(),
                     m.fail_name.decode())
            failing.flags |= bus.F_FAIL
            failing.fail_time = now
            failing.flags &= ~bus.F_PFAIL
            self.st.changed(TODO_SAVE | TODO_UPDATE_STATE)

    def _on_update(self, link: Link, m: Message, sender: Node | None, now: int) -> None:
        if sender is None:
            return
        n = self.st.lookup(m.update_name)
        if n is None or n.config_epoch >= m.update_epoch:
            return
        if n.is_replica:
            self.st.set_node_as_master(n)
        n.config_epoch = m.update_epoch
        self.st.changed(TODO_SAVE | TODO_FSYNC)
        self.update_slots_config_with(n, m.update_epoch, m.update_slots)

    def _on_ext(self, link: Link, m: Message, sender: Node | None, now: int) -> None:
        if self.ext is not None:
            self.ext.on_message(link, m, sender, now)

    def _on_publish(self, link: Link, m: Message, sender: Node | None, now: int) -> None:
        if sender is None:
            return
        self.hooks.publish(m.channel, m.message, m.type == bus.PUBLISHSHARD)

    # -- configuration changes -------------------------------------------------------------
    def update_slots_config_with(self, sender: Node, sender_epoch: int, slots: bytes) -> None:
        """clusterUpdateSlotsConfigWith: rebind slots claimed with a greater configEpoch."""
        st = self.st
        me = st.myself
        curmaster = st.master_of_myself()
        if sender is me:
            log.info("Discarding UPDATE message about myself.")
            return
        dirty_slots: list[int] = []
        newmaster: Node | None = None
        sender_slots = bus.bitmap_count(slots)
        migrated_our_slots = 0
        for slot in bus.bitmap_diff_slots(slots, sender.slots):  # the slots it has not yet
            owner = st.slots[slot]
            if owner is sender or slot in st.importing:
                continue
            if owner is None or owner.config_epoch < sender_epoch:
                if owner is me and sender is not me and self.hooks.count_keys_in_slot(slot):
                    dirty_slots.append(slot)
                if owner is curmaster:
                    newmaster = sender
                    migrated_our_slots += 1
                st.del_slot(slot)
                st.add_slot(sender, slot)
                st.changed(TODO_SAVE | TODO_FSYNC | TODO_UPDATE_STATE)
        if newmaster is not None and curmaster.numslots == 0 and (
                self.cfg.allow_replica_migration or sender_slots == migrated_our_slots):
            log.info("Configuration change detected. Reconfiguring myself as a replica of %s",
                     sender.name.decode())
            self.set_my_master(sender)
            st.changed(TODO_SAVE | TODO_FSYNC | TODO_UPDATE_STATE)
        elif dirty_slots:
            for slot in dirty_slots:
                self.hooks.delete_keys_in_slot(slot)

    def set_my_master(self, master: Node) -> None:
        """clusterSetMaster: myself becomes a replica of ``master`` (slots dropped)."""
        st = self.st
        me = st.myself
        if me.is_master:
            st.migrating.clear()
            st.importing.clear()
        st.set_replica_of(me, master)
        self.hooks.set_master(master)
        st.changed(TODO_SAVE | TODO_FSYNC | TODO_UPDATE_STATE)

    def handle_epoch_collision(self, sender: Node) -> None:
        """The master with the smaller id takes a new epoch."""
        st = self.st
        me = st.myself
        if sender.config_epoch != me.config_epoch or not sender.is_master or not me.is_master:
            return
        if sender.name <= me.name:
            return
        st.current_epoch += 1
        me.config_epoch = st.current_epoch
        st.changed(TODO_SAVE | TODO_FSYNC)
        log.info("WARNING: configEpoch collision with node %s. configEpoch set to %d",
                 sender.name.decode(), me.config_epoch)

    def bump_epoch_without_consensus(self) -> bool:
        st = self.st
        me = st.myself
        max_epoch = st.max_config_epoch()
        if me.config_epoch == 0 or me.config_epoch != max_epoch:
            st.current_epoch += 1
            me.config_epoch = st.current_epoch
            st.changed(TODO_SAVE | TODO_FSYNC)
            log.info("New configEpoch set to %d", me.config_epoch)
            return True
        return False

    # -- cron -------------------------------------------------------------------------------
    def cron(self) -> None:
        """clusterCron, every CRON_INTERVAL_MS."""
        st = self.st
        cfg = self.cfg
        timeout = cfg.node_timeout_ms
        self.iteration += 1
        now = self.clock_ms()
        handshake_timeout = max(timeout, 1000)
        st.stats_pfail_nodes = 0
        limit = cfg.link_sendbuf_limit_bytes
        for node in list(st.nodes.values()):
            if limit:
                self._free_links_over_limit(node, limit)
            if node.flags & (bus.F_MYSELF | bus.F_NOADDR):
                continue
            if node.flags & bus.F_PFAIL:
                st.stats_pfail_nodes += 1
            if node.in_handshake and now - node.ctime > handshake_timeout:
                for lk in st.del_node(node):
                    self.free_link(lk)
                st.changed(TODO_SAVE)
                continue
            if node.link is None:
                self._connect(node)
        if self.iteration % 10 == 0:
            candidates = list(st.nodes.values())
            min_node: Node | None = None
            for _ in range(5):
                this = self.rng.choice(candidates)
                if this.link is None or this.ping_sent != 0:
                    continue
                if this.flags & (bus.F_MYSELF | bus.F_HANDSHAKE):
                    continue
                if min_node is None or this.pong_received < min_node.pong_received:
                    min_node = this
            if min_node is not None:
                self.send_ping(min_node.link, bus.PING)
        update = False
        for node in list(st.nodes.values()):
            if node.flags & (bus.F_MYSELF | bus.F_NOADDR | bus.F_HANDSHAKE):
                continue
            ping_delay = now - node.ping_sent
            data_delay = now - node.data_received
            link = node.link
            if (link is not None and now - link.ctime > timeout and node.ping_sent
                    and ping_delay > timeout // 2 and data_delay > timeout // 2):
                self.free_link(link)
                link = None
            if link is not None and node.ping_sent == 0 \
                    and now - node.pong_received > timeout // 2:
                self.send_ping(link, bus.PING)
                continue
            if node.ping_sent == 0:
                continue
            if min(ping_delay, data_delay) > timeout:
                if not node.flags & (bus.F_PFAIL | bus.F_FAIL):
                    log.info("*** NODE %s possibly failing", node.name.decode())
                    node.flags |= bus.F_PFAIL
                    update = True
        if update or st.state == bus.STATE_FAIL:
            self.update_state()
        if self.ext is not None:
            self.ext.cron(now)

    def update_state(self) -> None:
        self.tracker.update(self.st, self.cfg.node_timeout_ms, self.cfg.require_full_coverage,
                            self.clock_ms())

    def before_sleep(self) -> None:
        """Run pending work: state update, then save (+fsync) — before replies go out."""
        st = self.st
        if self.ext is not None:
            self.ext.before_sleep()
        if self._new_nodes:
            self._link_new_nodes()
        if st.todo & TODO_UPDATE_STATE:
            self.update_state()
        if st.todo & TODO_SAVE:
            fsync = bool(st.todo & TODO_FSYNC)
            st.todo &= ~(TODO_SAVE | TODO_FSYNC)
            self.hooks.save(fsync)

    def _link_new_nodes(self) -> None:
        """Nodes learned in this pass (by gossip or CLUSTER MEET) get their outbound link now
        instead of at the next cron tick (up to 100 ms later), with what that tick would have
        queued on it: the PING to a node that never answered (not to one in handshake, whose
        MEET goes out when the connection is up). Same messages as the cron's, sooner."""
        new, self._new_nodes = self._new_nodes, []
        st = self.st
        now = self.clock_ms()
        half_timeout = self.cfg.node_timeout_ms // 2
        for node in new:
            if node.link is not None or st.nodes.get(node.name) is not node \
                    or node.flags & (bus.F_MYSELF | bus.F_NOADDR):
                continue
            self._connect(node)
            link = node.link
            if link is not None and not node.flags & bus.F_HANDSHAKE and node.ping_sent == 0 \
                    and now - node.pong_received > half_timeout:
                self.send_ping(link, bus.PING)

    # -- helpers for commands --------------------------------------------------------------
    def forget(self, node: Node) -> None:
        st = self.st
        st.blacklist_add(node.name, self.clock_ms() // 1000, BLACKLIST_TTL_S)
        for lk in st.del_node(node):
            self.free_link(lk)
        st.changed(TODO_SAVE | TODO_UPDATE_STATE)


def default_cport(port: int) -> int:
    return port + CLUSTER_BUS_PORT_OFFSET


_HANDLERS: dict[int, Callable[[Engine, Link, Message, Any, int], None]] = {
    bus.PING: Engine._on_ping_meet,
    bus.MEET: Engine._on_ping_meet,
    bus.PONG: Engine._on_pong,
    bus.FAIL: Engine._on_fail,
    bus.UPDATE: Engine._on_update,
    bus.PUBLISH: Engine._on_publish,
    bus.PUBLISHSHARD: Engine._on_publish,
    bus.FAILOVER_AUTH_REQUEST: Engine._on_ext,
    bus.FAILOVER_AUTH_ACK: Engine._on_ext,
    bus.MFSTART: Engine._on_ext,
}
