"""Building and sending cluster bus messages (clusterBuildMessageHdr, clusterSendPing and
friends), the sending half of the engine in node/cluster/gossip.py.

The header always describes myself as the cluster sees me: a replica announces its master's
slots and configEpoch. A PING/PONG/MEET carries gossip about ``max(3, nodes // 10)`` random
other nodes (never myself, handshake or address-less nodes, or disconnected slotless ones;
each at most once), then every PFAIL node, then the hostname extension.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from slotgate.node.cluster import bus
from slotgate.node.cluster.bus import Message
from slotgate.node.cluster.state import ClusterState, Node

if TYPE_CHECKING:
    from slotgate.node.cluster.gossip import Hooks, Link, Settings


class Messenger:
    """Message construction and fan-out over the links the state knows."""

    st: ClusterState
    cfg: Settings
    hooks: Hooks
    clock_ms: Callable[[], int]
    rng: random.Random
    ext: Any  # failover extension (header mflags), see gossip.Engine.ext

    def header(self, mtype: int) -> Message:
        """clusterBuildMessageHdr."""
        st = self.st
        me = st.myself
        master = st.master_of_myself()
        cfg = self.cfg
        flags = me.flags
        return Message(
            type=mtype, sender=me.name, current_epoch=st.current_epoch,
            config_epoch=master.config_epoch, offset=self.hooks.repl_offset(),
            myslots=bytes(master.slots),
            slaveof=me.slaveof.name if me.slaveof is not None else bus.NULL_NAME,
            myip=cfg.announce_ip, port=cfg.port, cport=cfg.cport, pport=cfg.pport,
            flags=flags, state=st.state,
            mflags=self.ext.header_mflags() if self.ext is not None else b"\0\0\0",
        )

    def _gossip_entry(self, n: Node) -> bus.Gossip:
        return bus.Gossip(n.name, n.ping_sent // 1000, n.pong_received // 1000, n.ip, n.port,
                          n.cport, n.flags, n.pport)

    def send(self, link: Link, m: Message) -> None:
        if 0 <= m.type < bus.TYPE_COUNT:
            self.st.stats_sent[m.type] += 1
        link.send(bus.encode(m))

    def send_ping(self, link: Link, mtype: int) -> None:
        """clusterSendPing: header + gossip about some random nodes + all PFAIL nodes."""
        st = self.st
        nodes = list(st.nodes.values())
        freshnodes = len(nodes) - 2
        wanted = max(3, len(nodes) // 10)
        wanted = min(wanted, freshnodes)
        if link.node is not None and mtype == bus.PING:
            link.node.ping_sent = self.clock_ms()
        m = self.header(mtype)
        st.pings_sent += 1
        mark = st.pings_sent
        maxiter = wanted * 3
        picked: list[Node] = []
        while freshnodes > 0 and len(picked) < wanted and maxiter > 0:
            maxiter -= 1
            this = self.rng.choice(nodes)
            if this is st.myself or this.flags & bus.F_PFAIL:
                continue
            if this.flags & (bus.F_HANDSHAKE | bus.F_NOADDR) or (
                    this.link is None and this.numslots == 0):
                freshnodes -= 1
                continue
            if this.last_in_ping_gossip == mark:
                continue
            this.last_in_ping_gossip = mark
            picked.append(this)
            freshnodes -= 1
        pfail_wanted = st.stats_pfail_nodes
        if pfail_wanted:
            for n in nodes:
                if n.flags & (bus.F_HANDSHAKE | bus.F_NOADDR) or not n.flags & bus.F_PFAIL:
                    continue
                picked.append(n)
                pfail_wanted -= 1
                if pfail_wanted == 0:
                    break
        m.gossip = [self._gossip_entry(n) for n in picked]
        m.hostname = self.cfg.hostname or None
        self.send(link, m)

    def broadcast(self, m: Message) -> None:
        """Send to every connected, non-handshake node."""
        data = bus.encode(m)
        for n in self.st.nodes.values():
            if n.link is None or n.flags & (bus.F_MYSELF | bus.F_HANDSHAKE):
                continue
            self.st.stats_sent[m.type] += 1
            n.link.send(data)

    def broadcast_pong(self) -> None:
        for n in list(self.st.nodes.values()):
            if n.link is None or n.flags & (bus.F_MYSELF | bus.F_HANDSHAKE):
                continue
            self.send_ping(n.link, bus.PONG)

    def send_fail(self, name: bytes) -> None:
        m = self.header(bus.FAIL)
        m.fail_name = name
        self.broadcast(m)

    def send_update(self, link: Link | None, node: Node) -> None:
        if link is None:
            return
        m = self.header(bus.UPDATE)
        m.update_epoch = node.config_epoch
        m.update_name = node.name
        m.update_slots = bytes(node.slots)
        self.send(link, m)

    def publish(self, channel: bytes, message: bytes, shard: bool) -> None:
        """Propagate a PUBLISH (all nodes) or SPUBLISH (my shard) over the bus."""
        m = self.header(bus.PUBLISHSHARD if shard else bus.PUBLISH)
        m.channel, m.message = channel, message
        if not shard:
            self.broadcast(m)
            return
        master = self.st.master_of_myself()
        data = bus.encode(m)
        for n in [master, *master.replicas]:
            if n is self.st.myself or n.link is None:
                continue
            self.st.stats_sent[m.type] += 1
            n.link.send(data)

