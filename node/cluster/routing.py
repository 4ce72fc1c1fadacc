"""Which node serves a request (Redis' getNodeByQuery), as the server's ``cluster_route`` hook.

Hot path: the dispatcher routes on its fast path (node/core/dispatch.py) with two tables made
here: ``server.cluster_keypos`` -- per command 0 (no keys: always runs), the argv index of
its only key (GET, SET, HSET...), or -1 (several or movable keys: ``keys_here`` decides) --
and ``server.cluster_slots``, a ``bytearray`` of 16384 flags marking the slots that can be
served without any further thought (mine, not migrating or importing, and the cluster state
is ok). The flags are rebuilt on first use after ``ClusterState.generation`` moves (until
then every keyed command takes the full path). ``route`` is the full path, for requests
outside that fast case (and for ASKING, MULTI/EXEC, READONLY on a replica, open slots); it
mirrors Redis step by step:

    first key -> slot; unbound -> CLUSTERDOWN Hash slot not served
    other keys in another slot -> CROSSSLOT
    open slot: count missing keys (db 0)
    state not ok -> CLUSTERDOWN (reads may run with cluster-allow-reads-when-down)
    MIGRATE on an open slot -> local
    migrating and keys missing -> TRYAGAIN (some present) or ASK (none present)
    importing and ASKING (or an ``asking``-flagged command) -> local, or TRYAGAIN when a
      multi-key request misses keys
    READONLY client on a replica of the owner, not a write -> local
    owner is not me -> MOVED
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from slotgate.node.cluster import bus
from slotgate.protocol import commands as pc
from slotgate.protocol import errors
from slotgate.protocol.resp import error
from slotgate.protocol.slots import key_slot

if TYPE_CHECKING:
    from slotgate.node.cluster.node import ClusterNode
    from slotgate.node.cluster.state import Node
    from slotgate.node.commands.registry import Command
    from slotgate.node.core.client import Client

CROSSSLOT = error(errors.CROSSSLOT)
TRYAGAIN = b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n"
DOWN_STATE = b"-CLUSTERDOWN The cluster is down\r\n"
DOWN_RO_STATE = b"-CLUSTERDOWN The cluster is down and only accepts read commands\r\n"
DOWN_UNBOUND = error(errors.SLOT_NOT_SERVED)

KeyFn = Callable[[Sequence[bytes]], list[int]]
_SHARD_PUBSUB = frozenset({"spublish", "ssubscribe", "sunsubscribe"})


def _key_fn(full_name: str) -> KeyFn | None:
    info = pc.lookup_name(full_name)
    if info is None:
        return None
    if full_name in _SHARD_PUBSUB:  # their channels are "not_key" key specs: routed all the same
        return info._keys_all
    if not (info.has_keys or info.movable):
        return None
    return info._keys


def _single_key_index(full_name: str) -> int:
    """The argv index of the only key of commands with exactly one fixed key (GET, SET,
    HSET...), else 0. For commands without movable keys the legacy (first, last, step) range
    is exact; arity was checked before routing, so the index exists."""
    info = pc.lookup_name(full_name)
    if (info is None or info.movable or full_name in _SHARD_PUBSUB
            or info.first_key <= 0 or info.last_key != info.first_key):
        return 0
    return info.first_key


# bitmap byte -> the 8 one-byte flags of its slots (LSB first)
_BYTE_FLAGS = tuple(bytes((b >> i) & 1 for i in range(8)) for b in range(256))
_NOTHING_FAST = bytes(16384)  # while the table is stale: every keyed command takes the full path


class Router:
    """``route(c, cmd, argv) -> error reply | None`` for one cluster node, and the tables
    the dispatcher's fast path reads (``server.cluster_keypos``, ``server.cluster_slots``,
    ``server.cluster_keys_here``)."""

    def __init__(self, cn: ClusterNode) -> None:
        self.cn = cn
        self.st = cn.state
        self.server = cn.server
        self._stale = True
        self._fast: bytes | bytearray = _NOTHING_FAST
        self._keyfns: dict[str, KeyFn | None] = {}
        self._single: dict[str, int] = {}  # command -> index of its only key (0: not such)
        self._asking_cmds = frozenset({"restore-asking"})
        self.keypos: dict[Command, int] = {}
        self._cmd_keyfns: dict[Command, KeyFn] = {}  # the keypos -1 commands' key finders
        for cmd in set(cn.server.table.values()):
            name = cmd.full_name
            idx = _single_key_index(name)
            fn = self._keyfn(name)
            self.keypos[cmd] = idx if idx else (-1 if fn is not None else 0)
            if not idx and fn is not None:
                self._cmd_keyfns[cmd] = fn
        self.st.on_change = self.invalidate
        self.server.cluster_slots = _NOTHING_FAST

    def invalidate(self) -> None:
        """The state moved: the fast table is rebuilt at the next routed command."""
        self._stale = True
        self.server.cluster_slots = _NOTHING_FAST

    def _refresh(self) -> bytes | bytearray:
        st = self.st
        if st.state == bus.STATE_OK:
            # myself's bitmap marks exactly the slots bound to me (state.py keeps both)
            fast = bytearray(b"".join([_BYTE_FLAGS[b] for b in st.myself.slots]))
            for slot in st.migrating:
                fast[slot] = 0
            for slot in st.importing:
                fast[slot] = 0
        else:
            fast = bytearray(16384)
        self._fast = fast
        self._stale = False
        self.server.cluster_slots = fast
        return fast

    def _keyfn(self, name: str) -> KeyFn | None:
        keyfns = self._keyfns
        if name in keyfns:
            return keyfns[name]
        fn = keyfns[name] = _key_fn(name)
        return fn

    def keys_here(self, cmd: Command, argv: list[bytes]) -> bool:
        """For a command with several or movable keys (keypos -1): True when it can run
        without routing (no keys, or all in one slot served here)."""
        fn = self._cmd_keyfns.get(cmd)
        if fn is None:
            fn = self._keyfn(cmd.full_name)
            if fn is None:
                return True
        pos = fn(argv)
        if not pos:
            return True
        fast = self._refresh() if self._stale else self._fast
        slot = key_slot(argv[pos[0]])
        if not fast[slot]:
            return False
        for i in pos[1:]:
            if key_slot(argv[i]) != slot:
                return False
        return True

    def route(self, c: Client, cmd: Command, argv: list[bytes]) -> bytes | None:
        name = cmd.full_name
        if c.in_exec:
            return None  # queued commands were checked together at EXEC
        idx = self._single.get(name)
        if idx is None:
            idx = self._single[name] = _single_key_index(name)
        if idx:  # the common case: one key at a fixed place
            fast = self._refresh() if self._stale else self._fast
            if not c.asking and fast[key_slot(argv[idx])]:
                return None
            return self._full(c, cmd, [(cmd, argv)])
        fn = self._keyfn(name)
        if fn is None:
            if name != "exec" or not c.multi:
                return None
            reply = self._full(c, cmd, c.multi)
            if reply is not None:  # a redirect at EXEC discards the transaction
                c.discard_multi()
            return reply
        if not c.asking and self.keys_here(cmd, argv):
            return None
        return self._full(c, cmd, [(cmd, argv)])

    def _full(self, c: Client, cmd: Command,
              reqs: list[tuple[Command, list[bytes]]]) -> bytes | None:
        st = self.st
        me = st.myself
        db0 = c.ks.dbs[0]
        first: bytes | None = None
        slot = 0
        owner: Node | None = None
        migrating = importing = multiple = False
        missing = existing = 0
        is_write = cmd.write
        is_shard_pubsub = False
        for q_cmd, q_argv in reqs:
            qname = q_cmd.full_name
            qfn = self._keyfn(qname)
            if qfn is None:
                continue
            if q_cmd.write:
                is_write = True
            if qname in _SHARD_PUBSUB:
                is_shard_pubsub = True
            for i in qfn(q_argv):
                key = q_argv[i]
                this_slot = key_slot(key)
                if first is None:
                    first = key
                    slot = this_slot
                    owner = st.slots[slot]
                    if owner is None:
                        return self._redirect_error(c, DOWN_UNBOUND)
                    if owner is me and slot in st.migrating:
                        migrating = True
                    elif slot in st.importing:
                        importing = True
                else:
                    if this_slot != slot:
                        return self._redirect_error(c, CROSSSLOT)
                    if not multiple and key != first:
                        multiple = True
                if (migrating or importing) and not is_shard_pubsub:
                    if db0.lookup(key) is None:
                        missing += 1
                    else:
                        existing += 1
        if owner is None:
            return None
        if st.state != bus.STATE_OK:
            cfg = self.cn.server.config
            if is_shard_pubsub:
                if not cfg.get("cluster-allow-pubsubshard-when-down"):
                    return self._redirect_error(c, DOWN_STATE)
            elif not cfg.get("cluster-allow-reads-when-down"):
                return self._redirect_error(c, DOWN_STATE)
            elif is_write:
                return self._redirect_error(c, DOWN_RO_STATE)
        if (migrating or importing) and cmd.full_name == "migrate":
            return None
        if migrating and missing:
            if existing:
                return self._redirect_error(c, TRYAGAIN)
            return self._redirect_error(c, self.cn.redirect(b"ASK", slot, st.migrating[slot]))
        if importing and (c.asking or cmd.full_name in self._asking_cmds):
            if multiple and missing:
                return self._redirect_error(c, TRYAGAIN)
            return None
        if ((c.readonly or is_shard_pubsub) and not is_write and me.is_replica
                and me.slaveof is owner):
            return None
        if owner is not me:
            return self._redirect_error(c, self.cn.redirect(b"MOVED", slot, owner))
        return None

    def _redirect_error(self, c: Client, reply: bytes) -> bytes:
        if c.asking and c.multi is None:
            c.set_asking(False)  # the ASKING flag lasts one command, even a rejected one
        return reply
