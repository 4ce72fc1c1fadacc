"""CLUSTER subcommands, ASKING, READONLY, READWRITE (Redis 7.0 clusterCommand).

Each subcommand is one registered handler (``cluster|<sub>``); the dispatcher checks arity and
unknown subcommands. A handler that changes the cluster view marks the work Redis does in
clusterBeforeSleep (state update, nodes.conf save with or without fsync); the server runs it
before any client output is written (``ClusterNode.before_reply``), so the reply never goes
out before the save, the commands after it in the same pipelined batch see the state as
Redis' do, and a batch of changes saves once. Replies and errors are the
exact texts of a real 7.0 node. Replies that describe nodes come from node/cluster/views.py.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from slotgate.node.cluster import failure, views
from slotgate.node.cluster.state import (
    SLOT_COUNT,
    TODO_FSYNC,
    TODO_SAVE,
    TODO_UPDATE_STATE,
    ClusterState,
    Node,
    random_name,
)
from slotgate.node.commands import server_cmds
from slotgate.node.commands.registry import command
from slotgate.node.commands.replies import OK
from slotgate.node.commands.util import parse_int
from slotgate.node.core.errors import SYNTAX, CommandError, wrong_args
from slotgate.protocol.resp import array_header, bulk, integer, simple, verbatim
from slotgate.protocol.slots import key_slot

if TYPE_CHECKING:
    from slotgate.node.cluster.node import ClusterNode
    from slotgate.node.core.client import Client

log = logging.getLogger("node.cluster")

DISABLED = "ERR This instance has cluster support disabled"
INVALID_SLOT = "ERR Invalid or out of range slot"
SETSLOT_SYNTAX = "ERR Invalid CLUSTER SETSLOT action or number of arguments. Try CLUSTER HELP"


def cluster_of(c: Client) -> ClusterNode:
    cn = c.server.cluster
    if cn is None:
        raise CommandError(DISABLED)
    return cn


def _done(cn: ClusterNode, todo: int) -> bytes:
    cn.state.changed(todo)  # state update and save run before the reply is written
    return OK


def _slot(arg: bytes) -> int:
    """getSlotOrReply."""
    try:
        n = parse_int(arg)
    except CommandError:
        raise CommandError(INVALID_SLOT) from None
    if not 0 <= n < SLOT_COUNT:
        raise CommandError(INVALID_SLOT)
    return n


def _node_arg(st: ClusterState, arg: bytes, err: str = "ERR Unknown node %s") -> Node:
    n = st.lookup(arg)
    if n is None:
        raise CommandError(err % arg.decode("utf-8", "replace"))
    return n


# -- read-only views ---------------------------------------------------------------------------
@command("cluster|info")
def cluster_info(c: Client, argv: list[bytes]) -> bytes:
    cn = cluster_of(c)
    return verbatim(views.info_text(cn).encode(), "txt", c.resp)


@command("cluster|nodes")
def cluster_nodes(c: Client, argv: list[bytes]) -> bytes:
    cn = cluster_of(c)
    return verbatim(cn.state.nodes_text().encode(), "txt", c.resp)


@command("cluster|slots")
def cluster_slots(c: Client, argv: list[bytes]) -> bytes:
    return views.slots_reply(cluster_of(c), c.resp)


@command("cluster|shards")
def cluster_shards(c: Client, argv: list[bytes]) -> bytes:
    return views.shards_reply(cluster_of(c), c.resp)


@command("cluster|links")
def cluster_links(c: Client, argv: list[bytes]) -> bytes:
    return views.links_reply(cluster_of(c), c.resp)


@command("cluster|myid")
def cluster_myid(c: Client, argv: list[bytes]) -> bytes:
    return bulk(cluster_of(c).state.myself.name)


@command("cluster|keyslot")
def cluster_keyslot(c: Client, argv: list[bytes]) -> bytes:
    cluster_of(c)
    return integer(key_slot(argv[2]))


@command("cluster|countkeysinslot")
def cluster_countkeysinslot(c: Client, argv: list[bytes]) -> bytes:
    cluster_of(c)
    slot = parse_int(argv[2])
    if not 0 <= slot < SLOT_COUNT:
        raise CommandError("ERR Invalid slot")
    return integer(c.ks.dbs[0].count_keys_in_slot(slot))


@command("cluster|getkeysinslot")
def cluster_getkeysinslot(c: Client, argv: list[bytes]) -> bytes:
    cluster_of(c)
    slot = parse_int(argv[2])
    maxkeys = parse_int(argv[3])
    if not 0 <= slot < SLOT_COUNT or maxkeys < 0:
        raise CommandError("ERR Invalid slot or number of keys")
    keys: list[bytes] = []
    for key in c.ks.dbs[0].keys_in_slot(slot):
        if len(keys) >= maxkeys:
            break
        keys.append(key)
    return array_header(len(keys)) + b"".join(bulk(k) for k in keys)


@command("cluster|count-failure-reports")
def cluster_count_failure_reports(c: Client, argv: list[bytes]) -> bytes:
    cn = cluster_of(c)
    n = _node_arg(cn.state, argv[2])
    return integer(failure.failure_reports_count(n, cn.settings.node_timeout_ms, cn.clock_ms()))


def _replicas(c: Client, argv: list[bytes]) -> bytes:
    cn = cluster_of(c)
    n = _node_arg(cn.state, argv[2])
    if n.is_replica:
        raise CommandError("ERR The specified node is not a master")
    return array_header(len(n.replicas)) + b"".join(
        bulk(cn.state.describe(r).encode()) for r in n.replicas)


command("cluster|replicas")(_replicas)
command("cluster|slaves")(_replicas)


@command("cluster|help")
def cluster_help(c: Client, argv: list[bytes]) -> bytes:
    return array_header(len(views.HELP_LINES)) + b"".join(simple(x) for x in views.HELP_LINES)


# -- slots -------------------------------------------------------------------------------------
def _slots_change(c: Client, argv: list[bytes], delete: bool, ranges: bool) -> bytes:
    cn = cluster_of(c)
    st = cn.state
    if ranges and len(argv) % 2 == 1:
        raise CommandError(wrong_args(argv[0].decode().lower() + "|" + argv[1].decode().lower()))
    seen = bytearray(SLOT_COUNT)
    wanted: list[int] = []

    def check(slot: int) -> None:
        if delete and st.slots[slot] is None:
            raise CommandError(f"ERR Slot {slot} is already unassigned")
        if not delete and st.slots[slot] is not None:
            raise CommandError(f"ERR Slot {slot} is already busy")
        if seen[slot]:
            raise CommandError(f"ERR Slot {slot} specified multiple times")
        seen[slot] = 1
        wanted.append(slot)

    if ranges:
        for j in range(2, len(argv), 2):
            start, end = _slot(argv[j]), _slot(argv[j + 1])
            if start > end:
                raise CommandError(
                    f"ERR start slot number {start} is greater than end slot number {end}")
            for slot in range(start, end + 1):
                check(slot)
    else:
        for arg in argv[2:]:
            check(_slot(arg))
    me = st.myself
    for slot in wanted:
        st.importing.pop(slot, None)
        if delete:
            st.del_slot(slot)
        else:
            st.add_slot(me, slot)
    return _done(cn, TODO_SAVE | TODO_UPDATE_STATE)


@command("cluster|addslots")
def cluster_addslots(c: Client, argv: list[bytes]) -> bytes:
    return _slots_change(c, argv, delete=False, ranges=False)


@command("cluster|delslots")
def cluster_delslots(c: Client, argv: list[bytes]) -> bytes:
    return _slots_change(c, argv, delete=True, ranges=False)


@command("cluster|addslotsrange")
def cluster_addslotsrange(c: Client, argv: list[bytes]) -> bytes:
    return _slots_change(c, argv, delete=False, ranges=True)


@command("cluster|delslotsrange")
def cluster_delslotsrange(c: Client, argv: list[bytes]) -> bytes:
    return _slots_change(c, argv, delete=True, ranges=True)


@command("cluster|flushslots")
def cluster_flushslots(c: Client, argv: list[bytes]) -> bytes:
    cn = cluster_of(c)
    if c.ks.dbs[0].size():
        raise CommandError("ERR DB must be empty to perform CLUSTER FLUSHSLOTS.")
    cn.state.del_node_slots(cn.state.myself)
    return _done(cn, TODO_SAVE | TODO_UPDATE_STATE)


def _setslot_migrating(cn: ClusterNode, c: Client, slot: int, argv: list[bytes]) -> None:
    st = cn.state
    if st.slots[slot] is not st.myself:
        raise CommandError(f"ERR I'm not the owner of hash slot {slot}")
    n = _node_arg(st, argv[4], "ERR I don't know about node %s")
    if n.is_replica:
        raise CommandError("ERR Target node is not a master")
    st.migrating[slot] = n


def _setslot_importing(cn: ClusterNode, c: Client, slot: int, argv: list[bytes]) -> None:
    st = cn.state
    if st.slots[slot] is st.myself:
        raise CommandError(f"ERR I'm already the owner of hash slot {slot}")
    n = _node_arg(st, argv[4], "ERR I don't know about node %s")
    if n.is_replica:
        raise CommandError("ERR Target node is not a master")
    st.importing[slot] = n


def _setslot_stable(cn: ClusterNode, c: Client, slot: int, argv: list[bytes]) -> None:
    cn.state.migrating.pop(slot, None)
    cn.state.importing.pop(slot, None)


def _setslot_node(cn: ClusterNode, c: Client, slot: int, argv: list[bytes]) -> None:
    st = cn.state
    me = st.myself
    n = _node_arg(st, argv[4])
    if n.is_replica:
        raise CommandError("ERR Target node is not a master")
    nkeys = c.ks.dbs[0].count_keys_in_slot(slot)
    if st.slots[slot] is me and n is not me and nkeys:
        raise CommandError(f"ERR Can't assign hashslot {slot} to a different node while I "
                           "still hold keys for this hash slot.")
    if nkeys == 0:
        st.migrating.pop(slot, None)
    was_mine = st.slots[slot] is me
    st.del_slot(slot)
    st.add_slot(n, slot)
    if was_mine and n is not me and me.numslots == 0 \
            and c.server.config.get("cluster-allow-replica-migration"):
        log.info("Configuration change detected. Reconfiguring myself as a replica of %s",
                 n.name.decode())
        cn.engine.set_my_master(n)
        st.changed(TODO_SAVE | TODO_UPDATE_STATE | TODO_FSYNC)
    if n is me and slot in st.importing:
        if cn.engine.bump_epoch_without_consensus():
            log.info("configEpoch updated after importing slot %d", slot)
        del st.importing[slot]
        cn.engine.broadcast_pong()


_SETSLOT = {
    b"migrating": (5, _setslot_migrating),
    b"importing": (5, _setslot_importing),
    b"stable": (4, _setslot_stable),
    b"node": (5, _setslot_node),
}


@command("cluster|setslot")
def cluster_setslot(c: Client, argv: list[bytes]) -> bytes:
    cn = cluster_of(c)
    if cn.state.myself.is_replica:
        raise CommandError("ERR Please use SETSLOT only with masters.")
    slot = _slot(argv[2])
    spec = _SETSLOT.get(argv[3].lower())
    if spec is None or spec[0] != len(argv):
        raise CommandError(SETSLOT_SYNTAX)
    spec[1](cn, c, slot, argv)
    return _done(cn, TODO_SAVE | TODO_UPDATE_STATE)


# -- membership --------------------------------------------------------------------------------
@command("cluster|meet")
def cluster_meet(c: Client, argv: list[bytes]) -> bytes:
    cn = cluster_of(c)
    if len(argv) > 5:
        raise CommandError(wrong_args("cluster|meet"))
    try:
        port = parse_int(argv[3])
    except CommandError:
        raise CommandError(
            f"ERR Invalid TCP base port specified: {argv[3].decode('utf-8', 'replace')}") from None
    if len(argv) == 5:
        try:
            cport = parse_int(argv[4])
        except CommandError:
            raise CommandError(
                f"ERR Invalid TCP bus port specified: {argv[4].decode('utf-8', 'replace')}"
            ) from None
    else:
        cport = port + 10000
    ip = argv[2].decode("utf-8", "replace")
    if not cn.engine.start_handshake(ip, port, cport):
        raise CommandError(
            f"ERR Invalid node address specified: {ip}:{argv[3].decode('utf-8', 'replace')}")
    return _done(cn, TODO_SAVE)


@command("cluster|forget")
def cluster_forget(c: Client, argv: list[bytes]) -> bytes:
    cn = cluster_of(c)
    st = cn.state
    n = _node_arg(st, argv[2])
    if n is st.myself:
        raise CommandError("ERR I tried hard but I can't forget myself...")
    if st.myself.is_replica and st.myself.slaveof is n:
        raise CommandError("ERR Can't forget my master!")
    cn.engine.forget(n)
    return _done(cn, TODO_SAVE | TODO_UPDATE_STATE)


@command("cluster|replicate")
def cluster_replicate(c: Client, argv: list[bytes]) -> bytes:
    cn = cluster_of(c)
    st = cn.state
    n = _node_arg(st, argv[2])
    me = st.myself
    if n is me:
        raise CommandError("ERR Can't replicate myself")
    if n.is_replica:
        raise CommandError("ERR I can only replicate a master, not a replica.")
    if me.is_master and (me.numslots or c.ks.dbs[0].size()):
        raise CommandError("ERR To set a master the node must be empty and without assigned "
                           "slots.")
    cn.engine.set_my_master(n)
    return _done(cn, TODO_SAVE | TODO_UPDATE_STATE)


@command("cluster|reset")
def cluster_reset(c: Client, argv: list[bytes]) -> bytes:
    cn = cluster_of(c)
    hard = False
    if len(argv) == 3:
        mode = argv[2].lower()
        if mode == b"hard":
            hard = True
        elif mode != b"soft":
            raise CommandError(SYNTAX)
    elif len(argv) > 3:
        raise CommandError(wrong_args("cluster|reset"))
    st = cn.state
    me = st.myself
    if me.is_master and c.db.size():
        raise CommandError(
            "ERR CLUSTER RESET can't be called with master nodes containing keys")
    if me.is_replica:
        st.set_node_as_master(me)
        cn.hooks.set_master(None)
        c.ks.flushall()
    st.migrating.clear()
    st.importing.clear()
    for slot in range(SLOT_COUNT):
        st.del_slot(slot)
    for n in list(st.nodes.values()):
        if n is not me:
            for lk in st.del_node(n):
                cn.engine.free_link(lk)
    if hard:
        st.current_epoch = 0
        st.last_vote_epoch = 0
        me.config_epoch = 0
        log.info("configEpoch set to 0 via CLUSTER RESET HARD")
        st.rename_node(me, random_name())
        log.info("Node hard reset, now I'm %s", me.name.decode())
    return _done(cn, TODO_SAVE | TODO_UPDATE_STATE | TODO_FSYNC)


# -- epochs / config ---------------------------------------------------------------------------
@command("cluster|saveconfig")
def cluster_saveconfig(c: Client, argv: list[bytes]) -> bytes:
    cn = cluster_of(c)
    try:
        cn.save(True)
    except OSError as e:
        raise CommandError(f"ERR error saving the cluster node config: {e.strerror}") from None
    return OK


@command("cluster|set-config-epoch")
def cluster_set_config_epoch(c: Client, argv: list[bytes]) -> bytes:
    cn = cluster_of(c)
    st = cn.state
    epoch = parse_int(argv[2])
    if epoch < 0:
        raise CommandError(f"ERR Invalid config epoch specified: {epoch}")
    if len(st.nodes) > 1:
        raise CommandError("ERR The user can assign a config epoch only when the node does not "
                           "know any other node.")
    if st.myself.config_epoch != 0:
        raise CommandError("ERR Node config epoch is already non-zero")
    st.myself.config_epoch = epoch
    log.info("configEpoch set to %d via CLUSTER SET-CONFIG-EPOCH", epoch)
    st.current_epoch = max(st.current_epoch, epoch)
    return _done(cn, TODO_SAVE | TODO_UPDATE_STATE | TODO_FSYNC)


@command("cluster|bumpepoch")
def cluster_bumpepoch(c: Client, argv: list[bytes]) -> bytes:
    cn = cluster_of(c)
    bumped = cn.engine.bump_epoch_without_consensus()
    cn.state.changed(TODO_SAVE | TODO_FSYNC)  # saved before the reply is written
    word = "BUMPED" if bumped else "STILL"
    return simple(f"{word} {cn.state.myself.config_epoch}")


@command("cluster|failover")
def cluster_failover(c: Client, argv: list[bytes]) -> bytes:
    cn = cluster_of(c)
    st = cn.state
    force = takeover = False
    if len(argv) == 3:
        opt = argv[2].lower()
        if opt == b"force":
            force = True
        elif opt == b"takeover":
            takeover = True
        else:
            raise CommandError(SYNTAX)
    elif len(argv) > 3:
        raise CommandError(SYNTAX)
    me = st.myself
    if me.is_master:
        raise CommandError("ERR You should send CLUSTER FAILOVER to a replica")
    master = me.slaveof
    if master is None:
        raise CommandError("ERR I'm a replica but my master is unknown to me")
    if not force and not takeover and (master.failed or master.link is None):
        raise CommandError("ERR Master is down or failed, please use CLUSTER FAILOVER FORCE")
    fo = cn.failover
    assert fo is not None  # set with cluster mode (node/cluster/failover_shell.py)
    fo.manual_failover(force=force, takeover=takeover)
    return _done(cn, TODO_SAVE | TODO_UPDATE_STATE | TODO_FSYNC)


# -- per-connection flags ----------------------------------------------------------------------
@command("asking")
def asking(c: Client, argv: list[bytes]) -> bytes:
    cluster_of(c)
    c.set_asking(True)
    return OK


@command("readonly")
def readonly(c: Client, argv: list[bytes]) -> bytes:
    cluster_of(c)
    c.readonly = True
    return OK


@command("readwrite")
def readwrite(c: Client, argv: list[bytes]) -> bytes:
    cluster_of(c)
    c.readonly = False
    return OK


def _debug_drop_cluster_packet_filter(c: Client, argv: list[bytes]) -> bytes:
    cn = cluster_of(c)
    if len(argv) != 3:
        raise CommandError(wrong_args("debug|drop-cluster-packet-filter"))
    cn.engine.drop_filter = parse_int(argv[2])
    return OK


server_cmds.DEBUG_SUBCOMMANDS[b"drop-cluster-packet-filter"] = _debug_drop_cluster_packet_filter
