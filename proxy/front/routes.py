"""How a client's command is served, by the route its command table row names.

    dispatch(argv) ─▶ lookup(argv).route ─▶ ROUTES[route](session, argv, row)
        single / keyless ─▶ one call to one slot's master (session.send_single)
        split / all_*    ─▶ fanout.py          proxy       ─▶ local.py (or one master)
        gather           ─▶ gather.py (keys in several slots: run on copies next to one key)
        transaction      ─▶ pinned.py          blocking    ─▶ pinned.py
        wait             ─▶ wait.py (on the client's own connection to its last write's master)
        functions        ─▶ functions.py (FUNCTION on every master, all or nothing)
        pubsub           ─▶ pubsub.py          unsupported ─▶ the proxy's error

``ROUTES`` is built once, at import, from the route names the command table's rows use: a row
whose route has no function here fails the import. Route code — here and in fanout, local,
pinned and pubsub — sees the client's session only through ``RouteSession``; each feature's
state on it (``tx``: MULTI/WATCH, ``sub``: subscriber mode) is changed only by its own module.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Protocol

from slotgate.protocol import overrides
from slotgate.protocol.commands import COMMANDS, CommandInfo
from slotgate.protocol.resp import OK
from slotgate.proxy import errors
from slotgate.proxy.front import auth, cluster_emu, guard, local, own_config, pinned, pubsub, wait
from slotgate.proxy.routing import (
    blockmove,
    blockmulti,
    crossslot,
    fanout,
    functions,
    gather,
    migrateroute,
    xreadmulti,
)
from slotgate.proxy.routing.redirect import error_frame

if TYPE_CHECKING:
    from slotgate.proxy.backend.connections import BackendConnection
    from slotgate.proxy.front.readwrite import ReadWrite
    from slotgate.proxy.front.server import Proxy
    from slotgate.proxy.front.session import ReplySlot
    from slotgate.proxy.ops.metrics import ProxyMetrics
    from slotgate.proxy.ops.settings import ProxySettings
    from slotgate.proxy.routing.router import Router

CROSSSLOT = error_frame(errors.CROSSSLOT)


class RouteSession(Protocol):
    """What route code may use of a client's session (``proxy.session.Session``)."""

    # This connection's protocol state, which commands (HELLO, CLIENT SETNAME, QUIT) change.
    proto: int
    name: bytes | None
    quit: bool
    # The client's database (front/databases.py; changed only through set_db).
    db: int

    @property
    def id(self) -> int: ...
    @property
    def peer(self) -> str: ...
    @property
    def local_address(self) -> str:
        """``host:port`` the client connected to."""
    @property
    def any_slot(self) -> int:
        """The slot whose master answers this client's keyless commands."""
    # The slot of the client's last write, -1 before any (WAIT waits there: wait.py).
    last_write_slot: int
    @property
    def proxy(self) -> Proxy: ...
    @property
    def router(self) -> Router: ...
    @property
    def settings(self) -> ProxySettings: ...
    @property
    def metrics(self) -> ProxyMetrics: ...
    @property
    def tx(self) -> pinned.Transaction: ...
    @property
    def checked(self) -> bool:
        """Every request passes auth.refused (auth.py's flag)."""
    @property
    def login(self) -> auth.Login:
        """Who the client is (changed only by auth.py)."""
    @property
    def sub(self) -> pubsub.Subscriber: ...
    @property
    def policies(self) -> ReadWrite | None:
        """Read/write policies, if the client has any (readwrite.py)."""

    def reply(self, name: str, raw: bytes) -> None:
        """Answer the current request with the complete frame ``raw``."""
    def new_slot(self, name: str) -> ReplySlot:
        """The current request's place in the reply order, filled later by calling it."""
    async def wait_idle(self, own: int = 1) -> None:
        """Until the requests before the caller's have their replies."""
    def slot_of(self, argv: list[bytes]) -> int | None:
        """The one slot of argv's keys, ``any_slot`` if keyless, None if they span slots."""
    def send_single(self, argv: list[bytes], slot: int, readonly: bool, name: str) -> None:
        """The current request as one call to ``slot``'s master."""
    def conn_to(self, node: str) -> BackendConnection:
        """This client's shared connection to ``node``."""
    def write_raw(self, raw: bytes) -> None:
        """Output that answers no request (subscriber-mode frames)."""
    def flush_output(self) -> None: ...
    def spawn(self, fn: Callable[[], Awaitable[None]]) -> None:
        """Run ``fn`` as long as the session lives."""
    def abort(self) -> None:
        """Close the client's connection now."""
    def set_checked(self, checked: bool) -> None:
        """Whether every request passes auth.refused before routing (set by auth.derive)."""
    def set_db(self, db: int) -> None:
        """SELECT's database (front/databases.py)."""


# A route: None when the reply is on its way, or an awaitable the session must await before
# it reads the client's next request.
Route = Callable[[RouteSession, list[bytes], CommandInfo], Awaitable[None] | None]

# Keyless commands that must reach one fixed node: classic pub/sub lives on the pub/sub home.
_KEYLESS_HOME = {
    name: pubsub.PUBSUB_HOME_SLOT
    for name in ("publish", "pubsub|channels", "pubsub|numsub", "pubsub|numpat")
}


def single(s: RouteSession, argv: list[bytes], info: CommandInfo) -> Awaitable[None] | None:
    slot = s.slot_of(argv)
    if slot is None:
        across = _SINGLE_ACROSS.get(info.name)
        pending = across(s, argv, info) if across is not None else None
        if pending is None:
            s.reply(info.name, CROSSSLOT)
        return pending
    s.send_single(argv, slot, "readonly" in info.flags, info.name)
    return None


# Commands routed ``single`` that the proxy still runs when their keys span slots: scripts
# and functions on copies of their KEYS (gather.py), MIGRATE … KEYS per slot.
_SINGLE_ACROSS: dict[str, Route] = {
    **dict.fromkeys(crossslot.SCRIPTS, gather.route),
    "migrate": migrateroute.route,
}


def keyless(s: RouteSession, argv: list[bytes], info: CommandInfo) -> None:
    slot = _KEYLESS_HOME.get(info.name, s.any_slot)
    s.send_single(argv, slot, "readonly" in info.flags, info.name)


def split(s: RouteSession, argv: list[bytes], info: CommandInfo) -> None:
    fanout.split(s, argv, info)


def all_nodes(s: RouteSession, argv: list[bytes], info: CommandInfo) -> Awaitable[None] | None:
    if s.proxy.siblings is not None and info.name == "info":
        return s.proxy.siblings.info(s, argv, info)  # with workers: every worker's clients
    fanout.all_nodes(s, argv, info)
    return None


def proxy(s: RouteSession, argv: list[bytes], info: CommandInfo) -> Awaitable[None] | None:
    # auth.py answers AUTH, HELLO, RESET and ACL; local.py the rest.
    handler = auth.HANDLERS.get(info.name) or local.HANDLERS[info.name]
    reply = handler(s, argv)
    if reply is None:
        keyless(s, argv, info)
    elif reply is local.ANSWERED:
        pass
    elif reply is local.SWITCHED:
        return local.resume()
    else:
        s.reply(info.name, reply)
    return None


def subscribe(s: RouteSession, argv: list[bytes], info: CommandInfo) -> Awaitable[None]:
    return pubsub.command(s, argv, info.name)


def guarded(s: RouteSession, argv: list[bytes], info: CommandInfo) -> None:
    """CONFIG SET: the proxy's own parameters here (own_config.py), the rest to guard.py."""
    if info.name == "config|set":
        err, rest = own_config.config_set(s, argv)
        if err is not None or not rest:
            s.reply(info.name, err or OK)
            return
        argv = rest
    guard.route(s, argv, info)


def unsupported(s: RouteSession, argv: list[bytes], info: CommandInfo) -> None:
    s.reply(info.name, error_frame(errors.NOT_SUPPORTED.format(name=info.name)))


def transaction(s: RouteSession, argv: list[bytes], info: CommandInfo) -> Awaitable[None] | None:
    return pinned.TRANSACTION[info.name](s, argv)


# Blocking commands whose keys span slots, by name (the rest: blockmulti.route).
_BLOCKING_ACROSS: dict[str, Route] = {
    **dict.fromkeys(blockmove.HANDLED, blockmove.route),
    **dict.fromkeys(xreadmulti.HANDLED, xreadmulti.route),
}


def blocking(s: RouteSession, argv: list[bytes], info: CommandInfo) -> Awaitable[None] | None:
    slot = s.slot_of(argv)
    if slot is None:
        pending = _BLOCKING_ACROSS.get(info.name, blockmulti.route)(s, argv, info)
        if pending is None:
            s.reply(info.name, CROSSSLOT)
        return pending
    if "write" in info.flags:
        s.last_write_slot = slot
    return pinned.blocking(s, argv, info, slot)


_BY_NAME: dict[str, Route] = {
    "single": single,
    "keyless": keyless,
    "split": split,
    "all_masters": all_nodes,
    "all_nodes": all_nodes,
    "proxy": proxy,
    "pubsub": subscribe,
    "unsupported": unsupported,
    "transaction": transaction,
    "blocking": blocking,
    "cluster": cluster_emu.route,
    "guarded": guarded,
    "gather": gather.route,
    "wait": wait.route,
    "functions": functions.route,
}


def _route_names() -> set[str]:
    """Every route a row of the command table names (subcommands included)."""
    names: set[str] = set()
    for info in COMMANDS.values():
        names.add(info.route)
        names.update(sub.route for sub in info.subcommands.values())
    return names


def table(route_names: Iterable[str]) -> dict[str, Route]:
    """Route name -> its function; a name without a function is a ``KeyError``."""
    return {route: _BY_NAME[route] for route in sorted(route_names)}


# Every declared route, also one that no row names today but other code hands rows to
# (guard.py sends CONFIG SET through ``all_nodes``); the rows' own routes must be declared.
assert _route_names() <= overrides.ROUTES, _route_names() - overrides.ROUTES
ROUTES = table(overrides.ROUTES)
