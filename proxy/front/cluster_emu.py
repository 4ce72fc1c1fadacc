"""Cluster emulation: the proxy answers CLUSTER SLOTS, SHARDS, NODES, INFO and MYID as a Redis
Cluster whose nodes are the proxies, so a cluster-aware client (redis-py ``RedisCluster``,
``redis-cli -c``) pointed at the proxy sends everything to the proxy and never meets a MOVED.

    cluster_emulation.enabled ─▶ layout(proxies, me): each proxy a master of an even share of
        the 16384 slots (one proxy: all of them) ─▶ the replies, in Redis 7.0.15's shapes

Every proxy answers every slot (it routes behind the scenes), so the share a client believes
each proxy owns only spreads the clients' connections over the proxies. A proxy's node id is
derived from its announced address, so every proxy and every worker names the others alike.
The announced address is ``cluster_emulation.announce``, else the address the client
connected to. COUNTKEYSINSLOT and GETKEYSINSLOT go to the slot's real master; ASKING,
READONLY and READWRITE are answered ``+OK``. With emulation off, the introspection commands
go to one master (the real cluster's view) and the others are refused as before.

Pure part: ``layout`` and the reply builders (values in, frames out); ``route`` is the thin
route function ``front/routes.py`` calls for the rows named ``cluster``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from slotgate.protocol.commands import CommandInfo
from slotgate.protocol.resp import OK, array, bulk, integer, map_header, verbatim
from slotgate.protocol.slots import SLOT_COUNT
from slotgate.proxy import errors
from slotgate.proxy.routing.redirect import error_frame

if TYPE_CHECKING:
    from slotgate.proxy.front.routes import RouteSession

Address = tuple[str, int]
CLUSTER_BUS_PORT_OFFSET = 10000  # the bus port Redis derives from a node's port
INVALID_SLOT = "ERR Invalid slot"
INVALID_SLOT_OR_COUNT = "ERR Invalid slot or number of keys"
NOT_INTEGER = "ERR value is not an integer or out of range"
_LONG_MAX = 2**63 - 1


@dataclass(frozen=True)
class EmuNode:
    """One proxy as an emulated cluster master owning slots ``first``..``last``."""

    host: str
    port: int
    id: str
    first: int
    last: int


def node_id(host: str, port: int) -> str:
    """40 lowercase hex characters, the same for an address in every proxy and worker."""
    return hashlib.sha1(f"slotgate-proxy {host}:{port}".encode()).hexdigest()  # noqa: S324 - a name, not security


def layout(proxies: list[Address], me: Address) -> tuple[list[EmuNode], EmuNode]:
    """The emulated cluster: ``proxies`` (``me`` added first when missing), slots shared out
    evenly in list order; and the node that is ``me``."""
    addrs = list(proxies) if me in proxies else [me, *proxies]
    n = len(addrs)
    nodes = [EmuNode(h, p, node_id(h, p), i * SLOT_COUNT // n, (i + 1) * SLOT_COUNT // n - 1)
             for i, (h, p) in enumerate(addrs)]
    return nodes, nodes[addrs.index(me)]


def _bus_port(port: int) -> int:
    bus = port + CLUSTER_BUS_PORT_OFFSET
    return bus if bus < 65536 else 0


def slots_reply(nodes: list[EmuNode], proto: int) -> bytes:
    """CLUSTER SLOTS: ``[first, last, [ip, port, id, {}]]`` per node (7.0's 4-field entry)."""
    return array(
        array((integer(n.first), integer(n.last),
               array((bulk(n.host), integer(n.port), bulk(n.id), map_header(0, proto)))))
        for n in nodes)


def shards_reply(nodes: list[EmuNode], proto: int) -> bytes:
    """CLUSTER SHARDS: one shard per node: ``{slots: [first, last], nodes: [{id, port, ip,
    endpoint, role, replication-offset, health}]}``."""
    out = []
    for n in nodes:
        node = (map_header(7, proto) + bulk("id") + bulk(n.id) + bulk("port") + integer(n.port)
                + bulk("ip") + bulk(n.host) + bulk("endpoint") + bulk(n.host)
                + bulk("role") + bulk("master") + bulk("replication-offset") + integer(0)
                + bulk("health") + bulk("online"))
        out.append(map_header(2, proto) + bulk("slots") + array((integer(n.first), integer(n.last)))
                   + bulk("nodes") + array((node,)))
    return array(out)


def nodes_text(nodes: list[EmuNode], me: EmuNode) -> str:
    """CLUSTER NODES: one line per node, ``myself`` marked, each ending in a newline."""
    lines = []
    for n in nodes:
        flags = "myself,master" if n is me else "master"
        lines.append(f"{n.id} {n.host}:{n.port}@{_bus_port(n.port)} {flags} - 0 0 0 connected "
                     f"{n.first}-{n.last}\n")
    return "".join(lines)


def info_text(nodes: list[EmuNode], slots_ok: int) -> str:
    """CLUSTER INFO: ``ok`` while the proxy's slot map covers every slot, else ``fail`` (the
    uncovered slots counted as failed)."""
    fields = (
        ("cluster_state", "ok" if slots_ok == SLOT_COUNT else "fail"),
        ("cluster_slots_assigned", SLOT_COUNT),
        ("cluster_slots_ok", slots_ok),
        ("cluster_slots_pfail", 0),
        ("cluster_slots_fail", SLOT_COUNT - slots_ok),
        ("cluster_known_nodes", len(nodes)),
        ("cluster_size", len(nodes)),
        ("cluster_current_epoch", 0),
        ("cluster_my_epoch", 0),
        ("cluster_stats_messages_sent", 0),
        ("cluster_stats_messages_received", 0),
        ("total_cluster_links_buffer_limit_exceeded", 0),
    )
    return "".join(f"{k}:{v}\r\n" for k, v in fields)


def _parse_long(raw: bytes) -> int | None:
    """Redis' getLongLongFromObject: an optional minus and digits, no leading zeros."""
    digits = raw[1:] if raw[:1] == b"-" else raw
    if not digits.isdigit() or (len(digits) > 1 and digits[:1] == b"0") or len(raw) > 20:
        return None
    n = int(raw)
    return n if -_LONG_MAX - 1 <= n <= _LONG_MAX else None


def slot_argument(argv: list[bytes]) -> int | str:
    """COUNTKEYSINSLOT slot / GETKEYSINSLOT slot count: the slot, or Redis' error text."""
    slot = _parse_long(argv[2])
    if slot is None:
        return NOT_INTEGER
    if len(argv) == 3:  # COUNTKEYSINSLOT
        return slot if 0 <= slot < SLOT_COUNT else INVALID_SLOT
    count = _parse_long(argv[3])
    if count is None:
        return NOT_INTEGER
    return slot if 0 <= slot < SLOT_COUNT and count >= 0 else INVALID_SLOT_OR_COUNT


def _me(s: RouteSession) -> Address:
    announce = s.settings.cluster_announce
    if announce is not None:
        return announce
    host, _, port = s.local_address.rpartition(":")
    return host, int(port)


def _answer(s: RouteSession, argv: list[bytes], name: str) -> bytes | None:
    """The emulated reply, or None when the request goes to a node."""
    if name == "asking":
        return OK
    if name in ("cluster|countkeysinslot", "cluster|getkeysinslot"):
        slot = slot_argument(argv)
        if isinstance(slot, str):
            return error_frame(slot)
        s.send_single(argv, slot, True, name)
        return None
    nodes, me = layout(s.settings.cluster_proxies, _me(s))
    if name == "cluster|slots":
        return slots_reply(nodes, s.proto)
    if name == "cluster|shards":
        return shards_reply(nodes, s.proto)
    if name == "cluster|nodes":
        return verbatim(nodes_text(nodes, me), proto=s.proto)
    if name == "cluster|info":
        covered = sum(1 for o in s.router.topology.owners if o is not None)
        return verbatim(info_text(nodes, covered), proto=s.proto)
    return bulk(me.id)  # cluster|myid


# With emulation off: what each row did before it existed (to one master, or refused).
_WHEN_OFF_TO_A_MASTER = frozenset({"cluster|slots", "cluster|shards", "cluster|nodes",
                                   "cluster|info", "cluster|myid"})


def route(s: RouteSession, argv: list[bytes], info: CommandInfo) -> None:
    """The ``cluster`` route: emulated when ``cluster_emulation.enabled``, else as before."""
    if s.settings.cluster_emulation:
        reply = _answer(s, argv, info.name)
        if reply is not None:
            s.reply(info.name, reply)
    elif info.name in _WHEN_OFF_TO_A_MASTER:
        s.send_single(argv, s.any_slot, "readonly" in info.flags, info.name)
    else:
        s.reply(info.name, error_frame(errors.NOT_SUPPORTED.format(name=info.name)))
