"""How the proxy handles each command: its ``route`` and, for fan-out, how replies ``merge``.

Most rows are derived from the generated table (``route_for``): keyed commands go to the shard
of their keys, keyless ones to any master, blocking ones to a dedicated connection, and Redis'
own ``request_policy`` / ``response_policy`` tips pick fan-out routes and merges. ``OVERRIDES``
is the short hand-written list where that default is wrong for a proxy.

Routes:

=============== ===============================================================================
``single``      every key must hash to one slot (else CROSSSLOT); sent to that slot's master.
                A movable-key command whose argv has no keys (``EVAL s 0``) goes to any master.
``keyless``     no keys: sent to any one master.
``split``       multi-key fan-out: keys grouped by slot, one sub-command per group, merged.
                The keys are the row's ``first_key`` with every ``step``-th argument after it
                (Redis' own legacy key range); each key carries its ``step - 1`` followers.
``all_masters`` sent to every master, replies merged.
``all_nodes``   sent to every node, replicas included, replies merged.
``proxy``       answered by the proxy itself (connection state, PING, COMMAND, KEYSLOT...).
``pubsub``      enters or leaves subscriber mode (SUBSCRIBE family).
``transaction`` MULTI / EXEC / DISCARD / WATCH / UNWATCH: pins the session to one shard.
``gather``      multi-key commands that cannot be split (SUNIONSTORE, ZINTER, BITOP, RENAME,
                LMOVE ...): keys in one slot go as ``single``; keys in several slots are
                copied next to one of them and the real command runs there
                (``proxy/routing/crossslot.py``).
``blocking``    may block (flag ``blocking``): single-slot, on a connection of its own.
``wait``        WAIT: on the client's own connection to the master of its last write
                (``proxy/front/wait.py``).
``functions``   FUNCTION LOAD/DELETE/FLUSH/RESTORE on every master, all or nothing; LIST/DUMP
                from one master once all agree; STATS combined (``proxy/routing/functions.py``).
``cluster``     CLUSTER SLOTS/SHARDS/NODES/INFO/MYID/COUNTKEYSINSLOT/GETKEYSINSLOT, ASKING:
                the proxies as a cluster with cluster emulation on, else as a keyless or an
                unsupported row (``proxy/front/cluster_emu.py``).
``guarded``     changes the nodes' credentials (CONFIG SET requirepass/masterauth/masteruser):
                refused unless the proxy allows admin commands, then sent to every node
                (``proxy/front/guard.py``).
``unsupported`` refused at lookup: the row's ``reason`` says why (server administration a
                proxy cannot sensibly forward, replies no merge can combine into one
                server's).
=============== ===============================================================================

Merges (``None`` when the route does not fan out):

=========== ==================================================================================
``mget``    values put back in the order of the client's keys (MGET).
``all_ok``  every part must succeed; reply with the (identical) success, else the first error.
``one_ok``  success if any part succeeds (SCRIPT KILL, FUNCTION KILL).
``sum``     integer sum (DEL, EXISTS, DBSIZE...).
``min``     integer minimum (WAIT).
``and``     element-wise logical AND of arrays of 0/1 (SCRIPT EXISTS).
``concat``  arrays concatenated (KEYS, SLOWLOG GET).
``scan``    one cursor walks the masters one after another (SCAN).
``info``    INFO: text sections combined by the proxy.
``any``     the first non-null reply (RANDOMKEY).
=========== ==================================================================================

Every merge named here is implemented by the proxy (``proxy/routing/splitter.py``, ``proxy/routing/fanout.py``;
a test holds the two lists equal). A fan-out command whose replies none of them combines
(Redis' ``response_policy:special`` without a row here, or a policy with no merge above) is an
``unsupported`` row, so the proxy refuses it before sending anything.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

ROUTES = frozenset({
    "single", "keyless", "split", "all_masters", "all_nodes", "proxy", "pubsub", "transaction",
    "blocking", "gather", "unsupported", "cluster", "guarded", "wait", "functions",
})
MERGES = frozenset({
    "mget", "all_ok", "one_ok", "sum", "and", "concat", "scan", "info", "any",
})
FAN_OUT_ROUTES = frozenset({"split", "all_masters", "all_nodes"})


class Row(NamedTuple):
    """How the proxy handles one command: ``route``, the fan-out ``merge`` (else None), and for
    an ``unsupported`` row the ``reason`` it is refused (documented in docs/COMMANDS.md)."""

    route: str
    merge: str | None = None
    reason: str | None = None


def _unsupported(reason: str) -> Row:
    return Row("unsupported", None, reason)


_PROXY = Row("proxy")
_PUBSUB = Row("pubsub")
_TRANSACTION = Row("transaction")
_KEYLESS = Row("keyless")
_CLUSTER = Row("cluster")
_GUARDED = Row("guarded")
_GATHER = Row("gather")
_NODE_ADMIN = _unsupported("administers one server: through the proxy it would reach one "
                           "arbitrary node of the cluster")
_REPLICATION = _unsupported("replication is set up per node, not through the proxy")
_REPLICATION_LINK = _unsupported("part of the replication protocol between nodes")
_NO_MERGE = _unsupported("no merge combines the nodes' replies into one server's")

# Keyed by full lower-case name (subcommands ``container|sub``). Wins over everything else.
OVERRIDES: dict[str, Row] = {
    # Multi-key commands split by slot.
    "mget": Row("split", "mget"),
    "mset": Row("split", "all_ok"),
    "del": Row("split", "sum"),
    "unlink": Row("split", "sum"),
    "exists": Row("split", "sum"),
    "touch": Row("split", "sum"),
    # Multi-key commands run across slots on copies next to one key (crossslot.py's SPECS).
    **dict.fromkeys(("sunionstore", "sinterstore", "sdiffstore", "zunionstore", "zinterstore",
                     "zdiffstore", "zrangestore", "bitop", "pfmerge", "geosearchstore",
                     "sunion", "sinter", "sdiff", "sintercard", "zunion", "zinter", "zdiff",
                     "zintercard", "pfcount", "lcs", "georadius", "georadiusbymember", "sort",
                     "copy", "rename", "renamenx", "lmove", "rpoplpush", "smove", "msetnx"),
                    _GATHER),
    # Pops over several keys: across slots, the first key with data in key order
    # (proxy/routing/blockmulti.py).
    "lmpop": _GATHER,
    "zmpop": _GATHER,
    # BY/GET patterns: fetched by the proxy, sorted there (proxy/routing/sortroute.py).
    "sort_ro": _GATHER,
    # SPUBLISH routes by the slot of its shard channel, which COMMAND GETKEYS does not report
    # as a key: use key_positions(argv, include_not_key=True).
    "spublish": Row("single"),
    # Answered by the proxy.
    "ping": _PROXY,
    "echo": _PROXY,
    "quit": _PROXY,
    "hello": _PROXY,
    "auth": _PROXY,
    "reset": _PROXY,
    "select": _PROXY,
    "readonly": _PROXY,
    "readwrite": _PROXY,
    "command": _PROXY,
    "client|setname": _PROXY,
    "client|getname": _PROXY,
    "client|id": _PROXY,
    "client|info": _PROXY,
    "client|list": _PROXY,
    "client|kill": _PROXY,
    "client|unblock": _PROXY,
    "client|no-evict": _PROXY,
    "client|reply": _PROXY,
    "client|tracking": _PROXY,
    "client|caching": _PROXY,
    "client|getredir": _PROXY,
    "client|trackinginfo": _PROXY,
    "client|pause": _PROXY,
    "client|unpause": _PROXY,
    "cluster|keyslot": _PROXY,
    # The proxy's own slow log (proxy/front/slowlog.py).
    "slowlog|get": _PROXY,
    "slowlog|len": _PROXY,
    "slowlog|reset": _PROXY,
    # The proxy's own latency monitor and histograms (proxy/front/latency.py).
    **dict.fromkeys(("latency|latest", "latency|history", "latency|reset", "latency|histogram",
                     "latency|doctor", "latency|graph", "latency|help"), _PROXY),
    "config|get": _PROXY,  # the proxy's own directives (proxy/front/own_config.py)
    # Static help texts and flag lookups: any master answers them exactly.
    "command|help": _KEYLESS,
    "command|getkeysandflags": _KEYLESS,
    # Would change the credentials the proxy itself logs in with (proxy/front/guard.py).
    "config|set": _GUARDED,
    # Fan-out to every master.
    "dbsize": Row("all_masters", "sum"),
    "keys": Row("all_masters", "concat"),
    "scan": Row("all_masters", "scan"),
    "flushall": Row("all_masters", "all_ok"),
    "flushdb": Row("all_masters", "all_ok"),
    "script|load": Row("all_masters", "all_ok"),
    "script|exists": Row("all_masters", "and"),
    "script|flush": Row("all_masters", "all_ok"),
    **dict.fromkeys(("function|load", "function|delete", "function|flush", "function|restore",
                     "function|list", "function|dump", "function|stats"), Row("functions")),
    "info": Row("all_masters", "info"),
    "randomkey": Row("all_masters", "any"),
    # Cluster introspection: the proxies as a cluster with cluster emulation on, else any
    # master's view (slot queries refused) (proxy/front/cluster_emu.py).
    "cluster|info": _CLUSTER,
    "cluster|nodes": _CLUSTER,
    "cluster|slots": _CLUSTER,
    "cluster|shards": _CLUSTER,
    "cluster|myid": _CLUSTER,
    "cluster|countkeysinslot": _CLUSTER,
    "cluster|getkeysinslot": _CLUSTER,
    "asking": _CLUSTER,
    "cluster|help": _KEYLESS,
    # Subscriber mode.
    "subscribe": _PUBSUB,
    "unsubscribe": _PUBSUB,
    "psubscribe": _PUBSUB,
    "punsubscribe": _PUBSUB,
    "ssubscribe": _PUBSUB,
    "sunsubscribe": _PUBSUB,
    # Transactions.
    "multi": _TRANSACTION,
    "exec": _TRANSACTION,
    "discard": _TRANSACTION,
    "watch": _TRANSACTION,
    "unwatch": _TRANSACTION,
    # Server administration and replication internals.
    "shutdown": _NODE_ADMIN,
    "debug": _NODE_ADMIN,
    "save": _NODE_ADMIN,
    "bgsave": _NODE_ADMIN,
    "bgrewriteaof": _NODE_ADMIN,
    "module": _NODE_ADMIN,
    "replicaof": _REPLICATION,
    "slaveof": _REPLICATION,
    "failover": _REPLICATION,
    "sync": _REPLICATION_LINK,
    "psync": _REPLICATION_LINK,
    "replconf": _REPLICATION_LINK,
    "monitor": _PROXY,
    "swapdb": _unsupported("a cluster has database 0 only"),
    "wait": Row("wait"),
}

# Commands that may keep a node busy for long (first word of the request, lower case; every
# command flagged ``blocking`` too): the backend command timeout never declares a node
# connection dead while the oldest request on it is one of these (proxy/backend/connections.py).
MAY_RUN_LONG = frozenset({
    "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro", "function", "script",
    "migrate", "debug", "keys", "scan", "save", "flushall", "flushdb",
})


def may_run_long(name: str, flags: Iterable[str]) -> bool:
    """Whether the command ``name`` (lower case, no subcommand) may keep a node busy long."""
    return name in MAY_RUN_LONG or "blocking" in flags


# Default for subcommands of these containers that have no row of their own.
CONTAINER_DEFAULTS: dict[str, Row] = {
    "command": _PROXY,
    "acl": _PROXY,  # the proxy's own users (proxy/front/auth.py)
    "cluster": _unsupported("one cluster node's own view or administration; the proxy "
                            "stands for the whole cluster"),
    "client": _unsupported("manages connections, and the proxy's node connections are shared "
                           "between its clients"),
}

_REQUEST_POLICY_ROUTES = {
    "all_shards": "all_masters",
    "all_nodes": "all_nodes",
    "multi_shard": "split",
}
# Only the policies the proxy can merge; any other (``special``, ``agg_max``...) makes the
# row ``unsupported`` unless OVERRIDES says otherwise (INFO).
_RESPONSE_POLICY_MERGES = {
    "all_succeeded": "all_ok",
    "one_succeeded": "one_ok",
    "agg_sum": "sum",
    "agg_logical_and": "and",
}


def _tip_value(tips: Iterable[str], prefix: str) -> str | None:
    for tip in tips:
        if tip.startswith(prefix):
            return tip[len(prefix):]
    return None


def route_for(name: str, flags: Iterable[str], tips: Iterable[str], has_keys: bool) -> Row:
    """The ``Row`` of the command ``name`` (lower case, ``container|sub``).

    Order: ``OVERRIDES``, then ``CONTAINER_DEFAULTS``, then flag ``blocking``, then the
    request/response policy tips, then keyed -> ``single`` / keyless -> ``keyless``.
    """
    row = OVERRIDES.get(name)
    if row is not None:
        return row
    container, _, sub = name.partition("|")
    if sub and container in CONTAINER_DEFAULTS:
        return CONTAINER_DEFAULTS[container]
    if "blocking" in flags:
        return Row("blocking")
    tips = tuple(tips)
    request = _tip_value(tips, "request_policy:")
    if request is not None:
        route = _REQUEST_POLICY_ROUTES.get(request)
        if route is None:
            return _unsupported(f"no generic way to route it (request_policy:{request})")
        response = _tip_value(tips, "response_policy:")
        if response is None:
            return Row(route, "concat")
        merge = _RESPONSE_POLICY_MERGES.get(response)
        return _NO_MERGE if merge is None else Row(route, merge)
    return Row("single") if has_keys else Row("keyless")
