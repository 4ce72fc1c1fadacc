"""Replies that describe the cluster: CLUSTER INFO, SLOTS, SHARDS, LINKS, HELP."""

from __future__ import annotations

from typing import TYPE_CHECKING

from slotgate.node.cluster import bus
from slotgate.node.cluster.state import SLOT_COUNT, Node
from slotgate.protocol.resp import array_header, bulk, integer, map_header

if TYPE_CHECKING:
    from slotgate.node.cluster.node import ClusterNode

__all__ = ["HELP_LINES", "info_text", "links_reply", "shards_reply", "slots_reply"]


def info_text(cn: ClusterNode) -> str:
    st = cn.state
    assigned = ok = pfail = fail = 0
    for n in st.slots:
        if n is None:
            continue
        assigned += 1
        if n.flags & bus.F_FAIL:
            fail += 1
        elif n.flags & bus.F_PFAIL:
            pfail += 1
        else:
            ok += 1
    master = st.master_of_myself()
    rows = [
        ("cluster_state", "ok" if st.state == bus.STATE_OK else "fail"),
        ("cluster_slots_assigned", assigned), ("cluster_slots_ok", ok),
        ("cluster_slots_pfail", pfail), ("cluster_slots_fail", fail),
        ("cluster_known_nodes", len(st.nodes)), ("cluster_size", st.size),
        ("cluster_current_epoch", st.current_epoch), ("cluster_my_epoch", master.config_epoch),
    ]
    for direction, counts in (("sent", st.stats_sent), ("received", st.stats_received)):
        for t, count in enumerate(counts):
            if count:
                rows.append((f"cluster_stats_messages_{bus.TYPE_NAMES[t]}_{direction}", count))
        rows.append((f"cluster_stats_messages_{direction}", sum(counts)))
    rows.append(("total_cluster_links_buffer_limit_exceeded", cn.engine.links_limit_exceeded))
    return "".join(f"{k}:{v}\r\n" for k, v in rows)


def _node_entry(cn: ClusterNode, n: Node, proto: int) -> bytes:
    kind = cn.server.config.get("cluster-preferred-endpoint-type")
    if kind == "ip":
        first = bulk(n.ip.encode())
    elif kind == "hostname":
        first = bulk((n.hostname or "?").encode())
    else:
        first = b"$-1\r\n" if proto == 2 else b"_\r\n"
    extra: list[bytes] = []
    if kind != "ip":
        extra += [bulk(b"ip"), bulk(n.ip.encode())]
    if kind != "hostname" and n.hostname:
        extra += [bulk(b"hostname"), bulk(n.hostname.encode())]
    return (array_header(4) + first + integer(n.port) + bulk(n.name)
            + map_header(len(extra) // 2, proto) + b"".join(extra))


def _replica_available(cn: ClusterNode, n: Node) -> bool:
    """isReplicaAvailable: not failed, and a known offset (myself: my own)."""
    if n.failed:
        return False
    offset = cn.hooks.repl_offset() if n is cn.state.myself else n.repl_offset
    return offset != 0


def slots_reply(cn: ClusterNode, proto: int) -> bytes:
    """clusterReplyMultiBulkSlots: slots 0..16383 in order, one entry per run of one owner."""
    st = cn.state
    entries: list[bytes] = []
    owners = st.slots
    start = 0
    while start < SLOT_COUNT:
        n = owners[start]
        end = start
        while end + 1 < SLOT_COUNT and owners[end + 1] is n:
            end += 1
        if n is not None:
            replicas = [r for r in n.replicas if _replica_available(cn, r)]
            parts = [array_header(3 + len(replicas)), integer(start), integer(end),
                     _node_entry(cn, n, proto)]
            parts += [_node_entry(cn, r, proto) for r in replicas]
            entries.append(b"".join(parts))
        start = end + 1
    return array_header(len(entries)) + b"".join(entries)


def _shard_node(cn: ClusterNode, n: Node, proto: int) -> bytes:
    kind = cn.server.config.get("cluster-preferred-endpoint-type")
    if kind == "ip":
        endpoint = n.ip
    elif kind == "hostname":
        endpoint = n.hostname or "?"
    else:
        endpoint = ""
    fields: list[bytes] = [bulk(b"id"), bulk(n.name), bulk(b"port"), integer(n.port),
                           bulk(b"ip"), bulk(n.ip.encode()), bulk(b"endpoint"),
                           bulk(endpoint.encode())]
    if n.hostname:
        fields += [bulk(b"hostname"), bulk(n.hostname.encode())]
    offset = n.repl_offset if n is not cn.state.myself else cn.hooks.repl_offset()
    if n.failed:
        health = b"fail"
    elif n.is_replica and offset == 0:
        health = b"loading"
    else:
        health = b"online"
    fields += [bulk(b"role"), bulk(b"master" if n.is_master else b"replica"),
               bulk(b"replication-offset"), integer(offset), bulk(b"health"), bulk(health)]
    return map_header(len(fields) // 2, proto) + b"".join(fields)


def shards_reply(cn: ClusterNode, proto: int) -> bytes:
    st = cn.state
    masters = [n for n in st.nodes.values() if n.is_master]
    out = [array_header(len(masters))]
    for m in masters:
        pairs = bus.bitmap_ranges(m.slots)
        out.append(map_header(2, proto))
        out.append(bulk(b"slots") + array_header(2 * len(pairs)))
        out.extend(integer(s) + integer(e) for s, e in pairs)
        members = [m, *m.replicas]
        out.append(bulk(b"nodes") + array_header(len(members)))
        out.extend(_shard_node(cn, n, proto) for n in members)
    return b"".join(out)


def links_reply(cn: ClusterNode, proto: int) -> bytes:
    st = cn.state
    entries: list[bytes] = []
    for n in st.nodes.values():
        if n is st.myself:
            continue
        for link in (n.link, n.inbound_link):
            if link is None:
                continue
            used = link.buffered_bytes
            entries.append(b"".join([
                map_header(6, proto),
                bulk(b"direction"), bulk(b"from" if link.inbound else b"to"),
                bulk(b"node"), bulk(n.name),
                bulk(b"create-time"), integer(link.ctime),
                bulk(b"events"), bulk(b"rw" if used else b"r"),
                bulk(b"send-buffer-allocated"), integer(max(used, 0)),
                bulk(b"send-buffer-used"), integer(used),
            ]))
    return array_header(len(entries)) + b"".join(entries)


HELP_LINES = (
    'CLUSTER <subcommand> [<arg> [value] [opt] ...]. Subcommands are:',
    'ADDSLOTS <slot> [<slot> ...]',
    '    Assign slots to current node.',
    'ADDSLOTSRANGE <start slot> <end slot> [<start slot> <end slot> ...]',
    '    Assign slots which are between <start-slot> and <end-slot> to current node.',
    'BUMPEPOCH',
    '    Advance the cluster config epoch.',
    'COUNT-FAILURE-REPORTS <node-id>',
    '    Return number of failure reports for <node-id>.',
    'COUNTKEYSINSLOT <slot>',
    '    Return the number of keys in <slot>.',
    'DELSLOTS <slot> [<slot> ...]',
    '    Delete slots information from current node.',
    'DELSLOTSRANGE <start slot> <end slot> [<start slot> <end slot> ...]',
    '    Delete slots information which are between <start-slot> and <end-slot> from current node.',
    'FAILOVER [FORCE|TAKEOVER]',
    '    Promote current replica node to being a master.',
    'FORGET <node-id>',
    '    Remove a node from the cluster.',
    'GETKEYSINSLOT <slot> <count>',
    '    Return key names stored by current node in a slot.',
    'FLUSHSLOTS',
    '    Delete current node own slots information.',
    'INFO',
    '    Return information about the cluster.',
    'KEYSLOT <key>',
    '    Return the hash slot for <key>.',
    'MEET <ip> <port> [<bus-port>]',
    '    Connect nodes into a working cluster.',
    'MYID',
    '    Return the node id.',
    'NODES',
    '    Return cluster configuration seen by node. Output format:',
    '    <id> <ip:port> <flags> <master> <pings> <pongs> <epoch> <link> <slot> ...',
    'REPLICATE <node-id>',
    '    Configure current node as replica to <node-id>.',
    'RESET [HARD|SOFT]',
    '    Reset current node (default: soft).',
    'SET-CONFIG-EPOCH <epoch>',
    '    Set config epoch of current node.',
    'SETSLOT <slot> (IMPORTING <node-id>|MIGRATING <node-id>|STABLE|NODE <node-id>)',
    '    Set slot state.',
    'REPLICAS <node-id>',
    '    Return <node-id> replicas.',
    'SAVECONFIG',
    '    Force saving cluster configuration on disk.',
    'SLOTS',
    '    Return information about slots range mappings. Each range is made of:',
    '    start, end, master and replicas IP addresses, ports and ids',
    'SHARDS',
    '    Return information about slot range mappings and the nodes associated with them.',
    'LINKS',
    '    Return information about all network links between this node and its peers.',
    '    Output format is an array where each array element is a map containing attributes of a link',
    'HELP',
    '    Prints this help.',
)
