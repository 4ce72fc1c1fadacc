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
``all_masters`` sent to every master, replies merged.
``all_nodes``   sent to every node, replicas included, replies merged.
``proxy``       answered by the proxy itself (connection state, PING, COMMAND, KEYSLOT...).
``pubsub``      enters or leaves subscriber mode (SUBSCRIBE family).
``transaction`` MULTI / EXEC / DISCARD / WATCH / UNWATCH: pins the session to one shard.
``blocking``    may block (flag ``blocking``): single-slot, on a connection of its own.
``unsupported`` admin commands a proxy cannot sensibly forward: answered with an error.
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
``special`` command-specific (Redis' ``response_policy:special``); the proxy decides.
=========== ==================================================================================
"""

from __future__ import annotations

from collections.abc import Iterable

ROUTES = frozenset({
    "single", "keyless", "split", "all_masters", "all_nodes", "proxy", "pubsub", "transaction",
    "blocking", "unsupported",
})
MERGES = frozenset({
    "mget", "all_ok", "one_ok", "sum", "min", "max", "and", "or", "concat", "scan", "info",
    "any", "special",
})

Row = tuple[str, str | None]

_PROXY: Row = ("proxy", None)
_UNSUPPORTED: Row = ("unsupported", None)
_PUBSUB: Row = ("pubsub", None)
_TRANSACTION: Row = ("transaction", None)
_KEYLESS: Row = ("keyless", None)

# Keyed by full lower-case name (subcommands ``container|sub``). Wins over everything else.
OVERRIDES: dict[str, Row] = {
    # Multi-key commands split by slot.
    "mget": ("split", "mget"),
    "mset": ("split", "all_ok"),
    "del": ("split", "sum"),
    "unlink": ("split", "sum"),
    "exists": ("split", "sum"),
    "touch": ("split", "sum"),
    # Atomic across its keys: cannot be split, so cross-slot gets CROSSSLOT.
    "msetnx": ("single", None),
    # SPUBLISH routes by the slot of its shard channel, which COMMAND GETKEYS does not report
    # as a key: use key_positions(argv, include_not_key=True).
    "spublish": ("single", None),
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
    "cluster|keyslot": _PROXY,
    # Static help texts and flag lookups: any master answers them exactly.
    "command|help": _KEYLESS,
    "command|getkeysandflags": _KEYLESS,
    # Fan-out to every master.
    "dbsize": ("all_masters", "sum"),
    "keys": ("all_masters", "concat"),
    "scan": ("all_masters", "scan"),
    "flushall": ("all_masters", "all_ok"),
    "flushdb": ("all_masters", "all_ok"),
    "script|load": ("all_masters", "all_ok"),
    "script|exists": ("all_masters", "and"),
    "script|flush": ("all_masters", "all_ok"),
    "info": ("all_masters", "info"),
    "randomkey": ("all_masters", "any"),
    # Cluster introspection a client may read from any master.
    "cluster|info": _KEYLESS,
    "cluster|nodes": _KEYLESS,
    "cluster|slots": _KEYLESS,
    "cluster|shards": _KEYLESS,
    "cluster|myid": _KEYLESS,
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
    "shutdown": _UNSUPPORTED,
    "monitor": _UNSUPPORTED,
    "replicaof": _UNSUPPORTED,
    "slaveof": _UNSUPPORTED,
    "failover": _UNSUPPORTED,
    "sync": _UNSUPPORTED,
    "psync": _UNSUPPORTED,
    "replconf": _UNSUPPORTED,
    "debug": _UNSUPPORTED,
    "save": _UNSUPPORTED,
    "bgsave": _UNSUPPORTED,
    "bgrewriteaof": _UNSUPPORTED,
    "module": _UNSUPPORTED,
    "asking": _UNSUPPORTED,
    "swapdb": _UNSUPPORTED,
}

# Default for subcommands of these containers that have no row of their own.
CONTAINER_DEFAULTS: dict[str, Row] = {
    "command": _PROXY,
    "cluster": _UNSUPPORTED,
    "client": _UNSUPPORTED,
}

_REQUEST_POLICY_ROUTES = {
    "all_shards": "all_masters",
    "all_nodes": "all_nodes",
    "multi_shard": "split",
    "special": "unsupported",
}
_RESPONSE_POLICY_MERGES = {
    "all_succeeded": "all_ok",
    "one_succeeded": "one_ok",
    "agg_sum": "sum",
    "agg_min": "min",
    "agg_max": "max",
    "agg_logical_and": "and",
    "agg_logical_or": "or",
    "special": "special",
}
_FAN_OUT = frozenset({"split", "all_masters", "all_nodes"})


def _tip_value(tips: Iterable[str], prefix: str) -> str | None:
    for tip in tips:
        if tip.startswith(prefix):
            return tip[len(prefix):]
    return None


def route_for(name: str, flags: Iterable[str], tips: Iterable[str], has_keys: bool) -> Row:
    """The ``(route, merge)`` of the command ``name`` (lower case, ``container|sub``).

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
        return ("blocking", None)
    tips = tuple(tips)
    request = _tip_value(tips, "request_policy:")
    if request is not None:
        route = _REQUEST_POLICY_ROUTES[request]
        response = _tip_value(tips, "response_policy:")
        if route in _FAN_OUT:
            merge = _RESPONSE_POLICY_MERGES[response] if response else "concat"
            return (route, merge)
        return (route, None)
    return ("single", None) if has_keys else ("keyless", None)
