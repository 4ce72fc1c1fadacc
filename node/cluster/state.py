"""This node's view of the cluster: nodes, flags, slots, epochs, open (migrating/importing) slots.

Sans-IO. ``ClusterState`` holds the data and the small operations every other module uses
(bind a slot, make a node a replica, describe a node as CLUSTER NODES does). Changes that must
reach ``nodes.conf`` set ``todo`` bits (``TODO_SAVE``, ``TODO_FSYNC``, ``TODO_UPDATE_STATE``);
the shell runs them once per event-loop step, before replies or bus messages go out (Redis'
clusterBeforeSleep), see node/cluster/node.py.

Times are unix milliseconds from an injected clock (gossip carries them as seconds, and a real
Redis compares them with its own wall clock).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from slotgate.node.cluster import bus
from slotgate.node.cluster.bus import (
    F_FAIL,
    F_HANDSHAKE,
    F_MASTER,
    F_MIGRATE_TO,
    F_MYSELF,
    F_NOADDR,
    F_NOFAILOVER,
    F_PFAIL,
    F_SLAVE,
)

SLOT_COUNT = 16384
CLUSTER_BUS_PORT_OFFSET = 10000

TODO_SAVE = 1
TODO_FSYNC = 2
TODO_UPDATE_STATE = 4

# CLUSTER NODES flag words, in Redis' fixed order
FLAG_WORDS: tuple[tuple[int, str], ...] = (
    (F_MYSELF, "myself"), (F_MASTER, "master"), (F_SLAVE, "slave"), (F_PFAIL, "fail?"),
    (F_FAIL, "fail"), (F_HANDSHAKE, "handshake"), (F_NOADDR, "noaddr"),
    (F_NOFAILOVER, "nofailover"),
)
FLAG_BY_WORD = {word: bit for bit, word in FLAG_WORDS}


def random_name() -> bytes:
    """A fresh 40-char lowercase hex node id."""
    return os.urandom(20).hex().encode()


def valid_name(name: bytes) -> bool:
    return len(name) == 40 and all(ch in b"0123456789abcdefghijklmnopqrstuvwxyz" for ch in name)


class Node:
    """One cluster node as this node knows it (``clusterNode``)."""

    __slots__ = (
        "name", "flags", "ip", "port", "cport", "pport", "hostname", "slots", "numslots",
        "slaveof", "replicas", "config_epoch", "ping_sent", "pong_received", "data_received",
        "fail_time", "voted_time", "repl_offset", "ctime", "link", "inbound_link",
        "fail_reports", "last_in_ping_gossip", "orphaned_time", "_ranges",
    )

    def __init__(self, name: bytes, flags: int, now_ms: int) -> None:
        self.name = name
        self.flags = flags
        self.ip = ""
        self.port = 0
        self.cport = 0
        self.pport = 0
        self.hostname = ""
        self.slots = bytearray(bus.SLOTS_BYTES)
        self.numslots = 0
        self.slaveof: Node | None = None
        self.replicas: list[Node] = []
        self.config_epoch = 0
        self.ping_sent = 0
        self.pong_received = 0
        self.data_received = 0
        self.fail_time = 0
        self.voted_time = 0
        self.repl_offset = 0
        self.ctime = now_ms
        self.link: Any = None  # outbound link (node/cluster/gossip.py Link)
        self.inbound_link: Any = None
        self.fail_reports: dict[bytes, int] = {}  # reporter name -> time (ms)
        self.last_in_ping_gossip = 0
        self.orphaned_time = 0
        self._ranges: list[str] | None = None  # slot_tokens(), cached

    def slot_tokens(self) -> list[str]:
        """The ``N`` / ``A-B`` tokens of this node's slots (cached until they change)."""
        if self._ranges is None:
            self._ranges = [str(a) if a == b else f"{a}-{b}"
                            for a, b in bus.bitmap_ranges(self.slots)] if self.numslots else []
        return self._ranges

    # flags --------------------------------------------------------------------------------
    @property
    def is_master(self) -> bool:
        return bool(self.flags & F_MASTER)

    @property
    def is_replica(self) -> bool:
        return bool(self.flags & F_SLAVE)

    @property
    def in_handshake(self) -> bool:
        return bool(self.flags & F_HANDSHAKE)

    @property
    def failed(self) -> bool:
        return bool(self.flags & F_FAIL)

    @property
    def timed_out(self) -> bool:
        return bool(self.flags & F_PFAIL)

    @property
    def has_addr(self) -> bool:
        return not self.flags & F_NOADDR

    def flags_text(self) -> str:
        words = [w for bit, w in FLAG_WORDS if self.flags & bit]
        return ",".join(words) if words else "noflags"

    def __repr__(self) -> str:
        return f"<Node {self.name[:8].decode()} {self.flags_text()} {self.ip}:{self.port}>"


class ClusterState:
    """The whole view (``clusterState``) plus the operations on it."""

    def __init__(self, myself: Node, clock_ms: Callable[[], int]) -> None:
        self.clock_ms = clock_ms
        self.myself = myself
        self.nodes: dict[bytes, Node] = {myself.name: myself}
        self.current_epoch = 0
        self.last_vote_epoch = 0
        self.state = bus.STATE_FAIL
        self.size = 0  # masters with at least one slot
        self.slots: list[Node | None] = [None] * SLOT_COUNT
        self.unbound = SLOT_COUNT  # slots bound to no node (``None`` in ``slots``)
        self.migrating: dict[int, Node] = {}  # slot -> target
        self.importing: dict[int, Node] = {}  # slot -> source
        self.blacklist: dict[bytes, int] = {}  # forgotten name -> expiry (unix s)
        self.todo = 0
        self.stats_sent = [0] * bus.TYPE_COUNT
        self.stats_received = [0] * bus.TYPE_COUNT
        self.stats_pfail_nodes = 0
        self.pings_sent = 0  # clusterSendPing calls, marks gossip picks
        # Routing caches (node/cluster/routing.py) follow ``generation``, which moves whenever
        # slot ownership, open slots, the cluster state or a role changes; ``on_change`` runs
        # at each move (the router drops its "served here" table).
        self.on_change: Callable[[], None] = _noop
        # ``on_slot_left(slot)``: a slot served by my shard (my own or my master's) was unbound
        # (clusterDelSlot): its shard channels are dropped (node.py sends the sunsubscribes)
        self.on_slot_left: Callable[[int], None] = _noop_slot
        self._generation = 0

    @property
    def generation(self) -> int:
        return self._generation

    @generation.setter
    def generation(self, value: int) -> None:
        self._generation = value
        self.on_change()

    def changed(self, todo: int) -> None:
        self.todo |= todo
        self.generation += 1

    # nodes -------------------------------------------------------------------------------
    def lookup(self, name: bytes) -> Node | None:
        return self.nodes.get(name)

    def add_node(self, node: Node) -> None:
        self.nodes[node.name] = node

    def del_node(self, node: Node) -> list[Any]:
        """clusterDelNode: unbind its slots, drop its reports and replicas links. Returns the
        links the caller must close."""
        for slot in [s for s, n in self.importing.items() if n is node]:
            del self.importing[slot]
        for slot in [s for s, n in self.migrating.items() if n is node]:
            del self.migrating[slot]
        for slot in range(SLOT_COUNT):
            if self.slots[slot] is node:
                self.slots[slot] = None
                self.unbound += 1
        for other in self.nodes.values():
            if other is not node:
                other.fail_reports.pop(node.name, None)
        self.nodes.pop(node.name, None)
        if node.slaveof is not None and node in node.slaveof.replicas:
            node.slaveof.replicas.remove(node)
        for r in node.replicas:
            if r.slaveof is node:
                r.slaveof = None
        links = [lk for lk in (node.link, node.inbound_link) if lk is not None]
        node.link = None
        node.inbound_link = None
        self.changed(TODO_UPDATE_STATE)
        return links

    def rename_node(self, node: Node, new_name: bytes) -> None:
        self.nodes.pop(node.name, None)
        node.name = new_name
        self.nodes[new_name] = node

    def blacklist_add(self, name: bytes, now_s: int, ttl_s: int = 60) -> None:
        self.blacklist_cleanup(now_s)
        self.blacklist[name] = now_s + ttl_s

    def blacklist_cleanup(self, now_s: int) -> None:
        for name in [n for n, exp in self.blacklist.items() if exp < now_s]:
            del self.blacklist[name]

    def blacklisted(self, name: bytes, now_s: int) -> bool:
        self.blacklist_cleanup(now_s)
        return name in self.blacklist

    # slots -------------------------------------------------------------------------------
    def add_slot(self, node: Node, slot: int) -> bool:
        if self.slots[slot] is not None:
            return False
        bus.bitmap_set(node.slots, slot)
        node.numslots += 1
        node._ranges = None
        self.slots[slot] = node
        self.unbound -= 1
        self.generation += 1
        return True

    def del_slot(self, slot: int) -> bool:
        n = self.slots[slot]
        if n is None:
            return False
        me = self.myself
        if n is me or me in n.replicas:
            self.on_slot_left(slot)
        bus.bitmap_clear(n.slots, slot)
        n.numslots -= 1
        n._ranges = None
        self.slots[slot] = None
        self.unbound += 1
        self.generation += 1
        return True

    def del_node_slots(self, node: Node) -> int:
        deleted = 0
        for slot in bus.bitmap_slots(node.slots):
            self.del_slot(slot)
            deleted += 1
        return deleted

    def master_of_myself(self) -> Node:
        me = self.myself
        return me.slaveof if me.is_replica and me.slaveof is not None else me

    # roles -------------------------------------------------------------------------------
    def set_node_as_master(self, n: Node) -> None:
        """clusterSetNodeAsMaster."""
        if n.is_master:
            return
        if n.slaveof is not None:
            if n in n.slaveof.replicas:
                n.slaveof.replicas.remove(n)
            if n is not self.myself:
                n.flags |= F_MIGRATE_TO
        n.flags &= ~F_SLAVE
        n.flags |= F_MASTER
        n.slaveof = None
        self.changed(TODO_SAVE | TODO_UPDATE_STATE)

    def set_replica_of(self, n: Node, master: Node) -> None:
        """Record ``n`` as a replica of ``master`` (role and slot ownership, no data)."""
        if n.is_master:
            self.del_node_slots(n)
            n.flags &= ~(F_MASTER | F_MIGRATE_TO)
            n.flags |= F_SLAVE
        if n.slaveof is not master:
            if n.slaveof is not None and n in n.slaveof.replicas:
                n.slaveof.replicas.remove(n)
            add_replica(master, n)
            n.slaveof = master
        self.changed(TODO_SAVE | TODO_UPDATE_STATE)

    def max_config_epoch(self) -> int:
        return max((n.config_epoch for n in self.nodes.values()), default=0)

    # description -------------------------------------------------------------------------
    def describe(self, node: Node, port: int | None = None, cport: int | None = None) -> str:
        """One CLUSTER NODES line, without the trailing newline (clusterGenNodeDescription)."""
        p = node.port if port is None else port
        cp = node.cport if cport is None else cport
        addr = f"{node.ip}:{p}@{cp}"
        if node.hostname:
            addr += "," + node.hostname
        master = node.slaveof.name.decode() if node.slaveof is not None else "-"
        epoch = node.config_epoch
        if node.is_replica and node.slaveof is not None:
            epoch = node.slaveof.config_epoch
        link = "connected" if node.link is not None or node.flags & F_MYSELF else "disconnected"
        parts = [node.name.decode(), addr, node.flags_text(), master, str(node.ping_sent),
                 str(node.pong_received), str(epoch), link]
        if node.numslots:
            parts.extend(node.slot_tokens())
        if node.flags & F_MYSELF:
            for slot in sorted(set(self.migrating) | set(self.importing)):
                if slot in self.migrating:
                    parts.append(f"[{slot}->-{self.migrating[slot].name.decode()}]")
                else:
                    parts.append(f"[{slot}-<-{self.importing[slot].name.decode()}]")
        return " ".join(parts)

    def nodes_text(self, skip_handshake: bool = False,
                   myself_ports: tuple[int, int] | None = None) -> str:
        lines = []
        for n in self.nodes.values():
            if skip_handshake and n.in_handshake:
                continue
            if n is self.myself and myself_ports is not None:
                lines.append(self.describe(n, *myself_ports))
            else:
                lines.append(self.describe(n))
        return "".join(line + "\n" for line in lines)


def add_replica(master: Node, n: Node) -> None:
    """clusterNodeAddSlave: ``master.replicas`` stays sorted by node name, so every node lists
    a shard's replicas (CLUSTER SLOTS, SHARDS) in the same order."""
    if n not in master.replicas:
        master.replicas.append(n)
        master.replicas.sort(key=_by_name)


def _by_name(n: Node) -> bytes:
    return n.name


def _noop_slot(slot: int) -> None:
    pass


def _noop() -> None:
    return None
