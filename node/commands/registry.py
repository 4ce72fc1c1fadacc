"""Command registry: handler functions by name, joined with the shared command table.

``@command("get")`` registers a handler. ``build_table()`` (run once by the server) makes one
``Command`` per registered name with arity and flags taken from ``protocol.commands`` — the one
row per command generated from a real redis-server — and returns the dispatch dict keyed by
lower- and upper-case name bytes. Subcommands register as ``"config|get"``; their container
gets a ``Command`` whose ``subcommands`` dict is looked up by ``argv[1].lower()``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from slotgate.node.core.latency import SMALL_BUCKETS
from slotgate.protocol import commands as pc

if TYPE_CHECKING:
    from slotgate.node.core.client import Client

Handler = Callable[["Client", list[bytes]], bytes]

HANDLERS: dict[str, Handler] = {}
# Arity/flags for names missing from the shared table (should stay empty; see below).
FALLBACK: dict[str, tuple[int, frozenset[str]]] = {}


def command(
    name: str, *, arity: int | None = None, flags: tuple[str, ...] = ()
) -> Callable[[Handler], Handler]:
    """Register ``handler`` for ``name`` (lower case; ``container|sub`` for subcommands).

    ``arity``/``flags`` are only a fallback for commands absent from the shared table.
    """

    def deco(fn: Handler) -> Handler:
        if name in HANDLERS:
            raise ValueError(f"command {name!r} registered twice")
        HANDLERS[name] = fn
        if arity is not None:
            FALLBACK[name] = (arity, frozenset(flags))
        return fn

    return deco


class Command:
    """One executable command (or container) as the dispatcher sees it."""

    __slots__ = (
        "name", "full_name", "handler", "arity", "flags", "write", "no_auth", "no_multi",
        "denyoom", "blocking", "pubsub_ok", "skip_monitor", "movablekeys", "has_keys",
        "subcommands", "container", "calls", "usec", "failed_calls", "rejected_calls",
        "special", "fast", "lat_small", "lat_big", "denyoom_of",
    )

    def __init__(self, full_name: str, handler: Handler | None, arity: int, flags: frozenset[str],
                 has_keys: bool) -> None:
        self.full_name = full_name  # "get", "config|get"
        self.name = full_name.split("|")[-1]
        self.handler = handler
        self.arity = arity
        self.flags = flags
        self.write = "write" in flags
        self.no_auth = "no_auth" in flags
        self.no_multi = "no_multi" in flags
        self.denyoom = "denyoom" in flags
        # deny-oom decided per call (a script command: by its script's flags); set with denyoom
        self.denyoom_of: Callable[[Client, list[bytes]], bool] | None = None
        self.blocking = "blocking" in flags
        self.skip_monitor = "skip_monitor" in flags or "admin" in flags
        self.movablekeys = "movablekeys" in flags
        self.has_keys = has_keys
        self.pubsub_ok = full_name in _PUBSUB_CONTEXT_OK
        self.subcommands: dict[bytes, Command] | None = None
        self.container: Command | None = None
        # Handled outside the fast path: containers (set below), and commands that show the
        # command stats, which the fast path adds up per run of a command.
        self.special = full_name in _READS_STATS
        self.calls = 0
        self.usec = 0
        self.failed_calls = 0
        self.rejected_calls = 0
        # latency-tracking: calls by duration (node/core/latency.py)
        self.fast = "fast" in flags
        self.lat_small = [0] * SMALL_BUCKETS
        self.lat_big: dict[int, int] = {}


_READS_STATS = frozenset({"info"})
_PUBSUB_CONTEXT_OK = frozenset({
    "subscribe", "psubscribe", "ssubscribe", "unsubscribe", "punsubscribe", "sunsubscribe",
    "ping", "quit", "reset",
})


def _table_info() -> dict[str, tuple[int, frozenset[str], bool]]:
    """name -> (arity, flags, has_keys) from the shared table, subcommands as ``a|b``."""

    out: dict[str, tuple[int, frozenset[str], bool]] = {}

    def add(info: pc.CommandInfo) -> None:
        has_keys = info.has_keys
        out[info.name] = (info.arity, frozenset(info.flags), has_keys)
        for sub in (info.subcommands or {}).values():
            add(sub)

    for info in pc.COMMANDS.values():
        add(info)
    return out


def build_table() -> dict[bytes, Command]:
    """The dispatch dict: name bytes (lower and upper case) -> ``Command``."""
    known = _table_info()
    table: dict[bytes, Command] = {}
    top: dict[str, Command] = {}
    subs: list[tuple[str, str, Command]] = []
    for name, fn in sorted(HANDLERS.items()):
        if name in known:
            arity, flags, has_keys = known[name]
        elif name in FALLBACK:
            arity, flags = FALLBACK[name]
            has_keys = False
        else:
            raise KeyError(f"command {name!r} is neither in the shared table nor given an arity")
        cmd = Command(name, fn, arity, flags, has_keys)
        if "|" in name:
            parent_name, sub = name.split("|", 1)
            subs.append((parent_name, sub, cmd))
        else:
            top[name] = cmd
    for parent_name, sub, cmd in subs:
        parent = top.get(parent_name)
        if parent is None:
            p_arity, p_flags, _ = known.get(parent_name, (-2, frozenset(), False))
            parent = top[parent_name] = Command(parent_name, None, p_arity, p_flags, False)
        if parent.subcommands is None:
            parent.subcommands = {}
            parent.special = True
        parent.subcommands[sub.encode()] = cmd
        cmd.container = parent
    for name, cmd in top.items():
        table[name.encode()] = cmd
        table[name.upper().encode()] = cmd
    return table


def all_commands(table: dict[bytes, Command]) -> list[Command]:
    """Every distinct top-level command in ``table``."""
    seen: dict[str, Command] = {}
    for cmd in table.values():
        seen[cmd.full_name] = cmd
    return list(seen.values())
