"""Subscriber mode: a client's subscriptions, placed on links of its own to the nodes.

    client ─(P|S)SUBSCRIBE/UNSUBSCRIBE─▶ Subscription.sets (what the client holds)
                                          │ placement pass (under the lock)
                                          ▼
         Link per node (pubsub_link.py) ◀─ SUBSCRIBE/UNSUBSCRIBE so each node holds its part
         messages ─▶ filtered ─▶ client     confirmations ─▶ built by the proxy, counted as
                                                            one server counts them

Where each subscription lives:
- classic channels and patterns: the *pub/sub home*, the master of ``PUBSUB_HOME_SLOT``, where
  the proxy sends PUBLISH and PUBSUB introspection, so PUBLISH counts every subscriber that
  came through the proxy as one server would (Redis Cluster delivers messages to every node
  but counts only local subscribers);
- keyspace notification channels (``__keyspace@…`` / ``__keyevent@…``) and patterns that may
  match them: every master too, since each node notifies its own keys' events only. From a
  master other than the home only those notifications are passed on (a PUBLISH reaches
  every node through the cluster bus and comes from the home's link already);
- shard channels: the master of the channel's slot, so one client may hold shard channels
  on several nodes.

The client's confirmations are the proxy's, sent once every node that must hold the new
subscription has confirmed it (after that every later PUBLISH reaches it) and, for the
unsubscribe family, once the nodes confirmed its end (no later PUBLISH counts it). Messages
that arrive while a subscribe command is being placed are held until its confirmations are
out, so no message precedes the confirmation of its channel.

Following the cluster: a node pushes ``sunsubscribe`` when a shard channel's slot leaves it
(reshard, failover), a link's connection may die, and the topology changes. Each wakes the
subscription's *keeper*, which runs placement passes again (MOVED patches the slot map, a
lost node waits for a refresh) until every subscription is where it belongs. A shard channel
that cannot be placed again within ``retry_deadline_ms`` is given up: the client gets the
``sunsubscribe`` push then, as from a server whose slot went away. Classic subscriptions
whose home cannot be reached within the deadline close the client's connection, as a server
going away would (the client resubscribes). Messages published while a subscription is
being moved are lost, as they are for a cluster client that resubscribes.

RESP2 subscribers may run only the subscribe family, PING (answered in subscriber form),
QUIT and RESET; RESP3 subscribers route their other commands as usual. The client's state is
the ``Subscriber`` its session holds; only this module changes it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from functools import partial
from typing import TYPE_CHECKING

import trio

from slotgate.eventcore.backoff import backoff_ms
from slotgate.protocol.commands import key_positions
from slotgate.protocol.glob import glob_match
from slotgate.protocol.resp import bulk, integer, null, push_header
from slotgate.protocol.slots import key_slot
from slotgate.proxy import errors
from slotgate.proxy.front.db_names import client_message, node_names, wanted_via
from slotgate.proxy.front.pubsub_link import Link, LinkLost, open_link
from slotgate.proxy.routing.redirect import error_frame
from slotgate.proxy.routing.splitter import array_elements

if TYPE_CHECKING:
    from slotgate.proxy.front.routes import RouteSession

# Command -> (the set it changes, adds?)
COMMANDS = {
    b"subscribe": ("channels", True), b"unsubscribe": ("channels", False),
    b"psubscribe": ("patterns", True), b"punsubscribe": ("patterns", False),
    b"ssubscribe": ("shard", True), b"sunsubscribe": ("shard", False),
}
_SUBSCRIBE = {"channels": b"SUBSCRIBE", "patterns": b"PSUBSCRIBE", "shard": b"SSUBSCRIBE"}
_UNSUBSCRIBE = {"channels": b"UNSUBSCRIBE", "patterns": b"PUNSUBSCRIBE",
                "shard": b"SUNSUBSCRIBE"}
SHARD_COMMANDS = frozenset({b"ssubscribe", b"sunsubscribe"})
LEAVING = frozenset({b"reset", b"quit"})  # end the subscriptions on the nodes first
SUBSCRIBER_ALLOWED = frozenset(COMMANDS) | {b"ping", b"quit", b"reset"}
CANT_EXECUTE = ("ERR Can't execute '{name}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / "
                "QUIT / RESET are allowed in this context")
PUBSUB_HOME_SLOT = 0
KEYSPACE_PREFIXES = (b"__keyspace@", b"__keyevent@")
_GLOB_SPECIAL = frozenset(b"*?[\\")
_CLASSIC = ("channels", "patterns")
# Node errors after which a placement is tried again (the slot moved, the cluster is busy).
_RETRIED = (b"-MOVED ", b"-ASK ", b"-TRYAGAIN", b"-CLUSTERDOWN", b"-LOADING", b"-BUSY")
_SOFT_RETRY_S = 1.0  # the pause before placing a master's keyspace subscriptions again

Item = tuple[str, bytes]  # (set name, channel or pattern)


def everywhere_channel(channel: bytes) -> bool:
    """A keyspace notification channel: every master publishes its own."""
    return channel.startswith(KEYSPACE_PREFIXES)


def everywhere_pattern(pattern: bytes) -> bool:
    """Whether the pattern may match a keyspace notification channel (judged on its literal
    prefix, so it may say yes for a pattern that matches none)."""
    end = next((i for i, c in enumerate(pattern) if c in _GLOB_SPECIAL), len(pattern))
    prefix = pattern[:end]
    return any(k.startswith(prefix) or prefix.startswith(k) for k in KEYSPACE_PREFIXES)


def confirmation(proto: int, kind: bytes, name: bytes | None, count: int) -> bytes:
    """``[kind, name, count]`` as a server confirms a (un)subscription (a push in RESP3)."""
    return (push_header(3, proto) + bulk(kind)
            + (null(proto) if name is None else bulk(name)) + integer(count))


class Subscriber:
    """One client's subscriber mode: ``link`` while it has subscriptions, else None."""

    __slots__ = ("link",)

    def __init__(self) -> None:
        self.link: Subscription | None = None

    async def aclose(self) -> None:
        """The client is gone: close its links."""
        state, self.link = self.link, None
        if state is not None:
            await state.aclose()


class Subscription:
    """What one client subscribed to (``sets``) and its links to the nodes holding it."""

    def __init__(self, session: RouteSession) -> None:
        self.session = session
        self.sets: dict[str, set[bytes]] = {"channels": set(), "patterns": set(),
                                            "shard": set()}
        self.links: dict[str, Link] = {}
        self.lock = trio.Lock()
        self.home = ""  # the node holding the classic subscriptions
        self.databases = session.settings.databases > 1
        self.held: list[bytes] | None = None  # messages held while a subscribe is placed
        self.wake = trio.Event()
        self.closed = False

    # --- what the client sees ----------------------------------------------------------------
    def count(self, set_name: str) -> int:
        """The count a server's confirmation carries for this kind."""
        if set_name == "shard":
            return len(self.sets["shard"])
        return len(self.sets["channels"]) + len(self.sets["patterns"])

    def total(self) -> int:
        return sum(len(s) for s in self.sets.values())

    def node_clients(self) -> list[tuple[str, int]]:
        """(node, the link's client id there) of every link (CLIENT KILL waits for them)."""
        return [(n, link.node_client_id) for n, link in self.links.items()
                if link.node_client_id]

    def _on_message(self, link: Link, raw: bytes, kind: bytes, channel: bytes) -> None:
        if kind != b"smessage" and link.node != self.home and not everywhere_channel(channel):
            return  # a PUBLISH the home's link delivers already
        if self.databases and kind != b"smessage" and everywhere_channel(channel):
            raw = self._client_form(raw, kind)
            if not raw:
                return
        if self.held is not None:
            self.held.append(raw)
        else:
            self.session.write_raw(raw)

    def _client_form(self, raw: bytes, kind: bytes) -> bytes:
        """A keyspace notification as the client's databases name it (``db_names.py``): for
        a ``pmessage``, one per client pattern held for the node's that matches it, as a
        server sends; empty when none of the client's subscriptions wants it."""
        parts = [f[f.index(b"\r\n") + 2:-2] for f in array_elements(raw)]
        proto = self.session.proto
        if kind == b"message":
            channel, message = client_message(parts[1], parts[2])
            if channel not in self.sets["channels"]:
                return b""
            return push_header(3, proto) + bulk(kind) + bulk(channel) + bulk(message)
        channel, message = client_message(parts[2], parts[3])
        return b"".join(push_header(4, proto) + bulk(kind) + bulk(p) + bulk(channel)
                        + bulk(message) for p in sorted(self.sets["patterns"])
                        if wanted_via(p, parts[1], parts[2]) and glob_match(p, channel))

    def _node_names(self, set_name: str, name: bytes) -> tuple[bytes, ...]:
        """What nodes hold for the client's ``name`` (with numbered databases, a keyspace
        channel of another database than 0 is held as the one that carries it, a pattern
        that may match any database's as itself and the one carrying every database's)."""
        if not self.databases or set_name == "shard":
            return (name,)
        return node_names(name, set_name == "patterns")

    def _on_dropped(self, link: Link, channel: bytes) -> None:
        if channel in self.sets["shard"]:
            self.wake.set()  # its slot left that node: place it again

    def _on_closed(self, link: Link) -> None:
        if self.links.get(link.node) is link:
            del self.links[link.node]
        if not self.closed:
            self.session.router.topology.request_refresh("subscriber link lost")
            self.wake.set()

    # --- placement ---------------------------------------------------------------------------
    def _wanted(self) -> tuple[dict[str, dict[str, set[bytes]]], dict[Item, bytes]]:
        """Node -> what it must hold for this client; items no node can hold now."""
        topo = self.session.router.topology
        home = topo.owners[PUBSUB_HOME_SLOT]
        self.home = home or ""
        masters = topo.slot_map.masters
        want: dict[str, dict[str, set[bytes]]] = {}
        unplaced: dict[Item, bytes] = {}

        def put(node: str, set_name: str, name: bytes) -> None:
            want.setdefault(node, {"channels": set(), "patterns": set(), "shard": set()})[
                set_name].add(name)

        for set_name, everywhere in (("channels", everywhere_channel),
                                     ("patterns", everywhere_pattern)):
            for client_name in self.sets[set_name]:
                for name in self._node_names(set_name, client_name):
                    if home is None:
                        unplaced[(set_name, name)] = error_frame(errors.SLOT_NOT_SERVED)
                    else:
                        put(home, set_name, name)
                    if everywhere(name):
                        for node in masters:
                            put(node, set_name, name)
        for name in self.sets["shard"]:
            owner = topo.owners[key_slot(name)]
            if owner is None:
                unplaced[("shard", name)] = error_frame(errors.SLOT_NOT_SERVED)
            else:
                put(owner, "shard", name)
        return want, unplaced

    async def place(self) -> tuple[dict[Item, bytes], bool]:
        """One placement pass (the lock held): every node asked to hold exactly its part.
        Returns the items whose required node (home, slot owner) did not take them, with
        the error, and whether some other master's part failed."""
        want, failed = self._wanted()
        soft = [False]
        async with trio.open_nursery() as nursery:
            for node in set(want) | set(self.links):
                nursery.start_soon(self._sync_node, node, want.get(node), failed, soft)
        for node, link in list(self.links.items()):
            if node not in want and not link.holds():
                del self.links[node]
                await link.aclose()
        return failed, soft[0]

    def _required(self, node: str, set_name: str, name: bytes) -> bool:
        """Whether ``node`` is the one node that must hold the item (else it is one of the
        masters a keyspace subscription is also placed on)."""
        if set_name == "shard":
            return True
        return node == self.home

    async def _sync_node(self, node: str, want: dict[str, set[bytes]] | None,
                         failed: dict[Item, bytes], soft: list[bool]) -> None:
        link = self.links.get(node)
        held = link.confirmed if link is not None else None
        adds = {k: want[k] - (held[k] if held else set()) for k in want} if want else {}
        removes = {k: held[k] - (want[k] if want else set()) for k in held} if held else {}
        if not any(adds.values()) and not any(removes.values()):
            return

        def fail(names: Iterable[Item], err: bytes) -> None:
            for item in names:
                if self._required(node, *item):
                    failed[item] = err
                else:
                    soft[0] = True

        adding = [(k, n) for k, names in adds.items() for n in names]
        s = self.session
        if link is None:
            try:
                link = await open_link(node, s.proto, s.settings, s.metrics)
            except (OSError, trio.TooSlowError, trio.BrokenResourceError):
                s.router.topology.request_refresh("subscriber link failed")
                fail(adding, error_frame(errors.NODE_UNREACHABLE.format(node=node)))
                return
            if self.closed:
                await link.aclose()
                return
            self.links[node] = link
            s.spawn(partial(link.pump, self._on_message, self._on_dropped, self._on_closed,
                            s.flush_output))
        try:
            for set_name, names in removes.items():
                if names:
                    await link.request([_UNSUBSCRIBE[set_name], *sorted(names)])
            for set_name, names in adds.items():
                for group in _groups(set_name, names):
                    err = await link.request([_SUBSCRIBE[set_name], *group])
                    if err is not None:
                        if err.startswith(b"-MOVED "):
                            _moved(s, err)
                        fail(((set_name, n) for n in group), err)
        except LinkLost:
            fail(adding, error_frame(errors.NODE_UNREACHABLE.format(node=node)))

    async def place_until(self, items: list[Item]) -> bytes | None:
        """Placement passes until ``items`` are held where they must be: None, or the error
        that ends trying (a final node error, or the retry deadline's)."""
        s = self.session
        deadline = trio.current_time() + s.settings.retry_deadline_ms / 1000
        attempt = 0
        while True:
            failed, _ = await self.place()
            errs = [failed[i] for i in ((k, name) for k, n in items
                                        for name in self._node_names(k, n)) if i in failed]
            if not errs:
                return None
            final = [e for e in errs if not e.startswith(_RETRIED) and not _unreachable(e)]
            if final or trio.current_time() >= deadline:
                return (final or errs)[0]
            if not all(e.startswith(b"-MOVED ") for e in errs):
                s.router.topology.request_refresh("subscriber placement")
                await trio.sleep(backoff_ms(attempt, s.settings.retry_backoff_min_ms,
                                            s.settings.retry_backoff_max_ms) / 1000)
                attempt += 1

    async def keep(self) -> None:
        """The keeper: placement passes again whenever the cluster moved under the links."""
        s = self.session
        while not self.closed:
            await s.router.topology.refreshed_or(self.wake)
            self.wake = trio.Event()
            deadline = None
            attempt = 0
            while not self.closed:
                async with self.lock:
                    if self.closed:
                        return
                    failed, soft = await self.place()
                if not failed and not soft:
                    break
                now = trio.current_time()
                if failed:
                    if deadline is None:
                        deadline = now + s.settings.retry_deadline_ms / 1000
                    if now >= deadline:
                        await self._give_up(failed)
                        deadline = None
                        continue
                    s.router.topology.request_refresh("subscriber placement")
                    await trio.sleep(backoff_ms(attempt, s.settings.retry_backoff_min_ms,
                                                s.settings.retry_backoff_max_ms) / 1000)
                    attempt += 1
                else:
                    await trio.sleep(_SOFT_RETRY_S)

    async def _give_up(self, failed: dict[Item, bytes]) -> None:
        """Placement failed past the deadline: shard channels are dropped with the push a
        server sends when their slot goes; a lost home closes the client's connection."""
        s = self.session
        async with self.lock:
            if any(set_name in _CLASSIC for set_name, _ in failed):
                s.abort()
                return
            for _, name in sorted(failed):
                if name in self.sets["shard"]:
                    self.sets["shard"].discard(name)
                    s.write_raw(confirmation(s.proto, b"sunsubscribe", name, self.count("shard")))
            s.flush_output()
            if self.total() == 0:
                await self._end()

    async def _end(self) -> None:
        """No subscription left: out of subscriber mode, every link closed."""
        self.closed = True
        self.wake.set()
        if self.session.sub.link is self:
            self.session.sub.link = None
        await self.aclose()

    async def leave(self) -> None:
        """RESET / QUIT: every node drops the link's subscriptions and answers before the
        client hears its own answer (no later PUBLISH counts or reaches them)."""
        async with self.lock:
            async with trio.open_nursery() as nursery:
                for link in list(self.links.values()):
                    nursery.start_soon(_reset_link, link)
            await self._end()

    async def aclose(self) -> None:
        self.closed = True
        self.wake.set()
        links, self.links = list(self.links.values()), {}
        for link in links:
            await link.aclose()


async def _reset_link(link: Link) -> None:
    try:
        await link.request([b"RESET"])
    except LinkLost:
        pass  # the link is gone, and with it its subscriptions


def _groups(set_name: str, names: set[bytes]) -> list[list[bytes]]:
    """One command's worth of names: shard channels one slot per command (a cluster node
    refuses several), the others all together."""
    if set_name != "shard":
        return [sorted(names)]
    by_slot: dict[int, list[bytes]] = {}
    for name in sorted(names):
        by_slot.setdefault(key_slot(name), []).append(name)
    return list(by_slot.values())


def _moved(s: RouteSession, err: bytes) -> None:
    """``-MOVED slot host:port``: the slot map patched at once."""
    parts = err.split()
    if len(parts) >= 3 and parts[1].isdigit():
        s.router.topology.moved(int(parts[1]), parts[2].decode())


def _unreachable(err: bytes) -> bool:
    return err.startswith((b"-ERR slotgate: no connection", b"-CLUSTERDOWN"))


def reset(s: RouteSession) -> None:
    """RESET: out of subscriber mode (the links close in the background)."""
    state, s.sub.link = s.sub.link, None
    if state is not None:
        state.closed = True
        s.router.nursery.start_soon(state.aclose)


def _shard_slot(argv: list[bytes]) -> int | None:
    """The one slot of SSUBSCRIBE/SUNSUBSCRIBE channels; -1 if none; None if they differ."""
    slots = {key_slot(argv[p]) for p in key_positions(argv, include_not_key=True)}
    if len(slots) > 1:
        return None
    return slots.pop() if slots else -1


def _confirmations(s: RouteSession, state: Subscription | None, cmd: bytes,
                   names: list[bytes], before: set[bytes]) -> None:
    """The client's confirmations of ``cmd`` over ``names``, counted one by one from the
    set as it was ``before`` (a repeated name counts once, as in a server)."""
    set_name, adding = COMMANDS[cmd]
    other = 0
    if set_name != "shard" and state is not None:
        other = len(state.sets["patterns" if set_name == "channels" else "channels"])
    if not names:
        s.write_raw(confirmation(s.proto, cmd, None, other + len(before)))
        return
    current = set(before)
    for name in names:
        (current.add if adding else current.discard)(name)
        s.write_raw(confirmation(s.proto, cmd, name, other + len(current)))


async def _run(s: RouteSession, argv: list[bytes], name: str) -> None:
    await s.wait_idle(own=0)
    cmd = argv[0].lower()
    if cmd == b"ping":  # a RESP2 subscriber's: answered in subscriber form
        s.write_raw(push_header(2, 2) + bulk(b"pong") + bulk(argv[1] if len(argv) > 1 else b""))
        s.flush_output()
        return
    if cmd in SHARD_COMMANDS and _shard_slot(argv) is None:
        s.reply(name, error_frame(errors.CROSSSLOT))
        return
    set_name, adding = COMMANDS[cmd]
    state = s.sub.link
    if state is None and not adding:
        _confirmations(s, None, cmd, argv[1:], set())
        s.flush_output()
        return
    if state is None:
        state = Subscription(s)
    async with state.lock:
        names = argv[1:] or list(state.sets[set_name])
        before = set(state.sets[set_name])
        if adding:
            new = [n for n in dict.fromkeys(names) if n not in before]
            state.sets[set_name].update(new)
            if s.sub.link is None:
                s.sub.link = state
                s.spawn(state.keep)
            state.held = []
            try:
                err = await state.place_until([(set_name, n) for n in new])
                if err is not None:
                    state.sets[set_name].difference_update(new)
                    if state.total() == 0:
                        await state._end()
                    else:
                        await state.place()  # what was placed of it is taken back
                    s.reply(name, err)
                    return
                _confirmations(s, state, cmd, names, before)
            finally:
                held, state.held = state.held or [], None
                for raw in held:
                    s.write_raw(raw)
        else:
            state.sets[set_name].difference_update(names)
            await state.place()
            _confirmations(s, state, cmd, names, before)
            if state.total() == 0:
                await state._end()
    s.flush_output()


def command(s: RouteSession, argv: list[bytes], name: str) -> Awaitable[None]:
    """A subscribe-family command (any mode), or a RESP2 subscriber's PING."""
    return _run(s, argv, name)


async def _leave(s: RouteSession, then: Callable[[], Awaitable[None] | None]) -> None:
    await s.wait_idle(own=0)
    state = s.sub.link
    if state is not None:
        await state.leave()
    pending = then()
    if pending is not None:
        await pending


def leave(s: RouteSession, then: Callable[[], Awaitable[None] | None]) -> Awaitable[None]:
    """RESET or QUIT of a subscriber: its subscriptions end on the nodes first, then
    ``then`` (the command itself) runs."""
    return _leave(s, then)


def refused_while_subscribed(s: RouteSession, name: bytes) -> bool:
    """RESP2 subscribers may run only the subscribe family, PING, QUIT and RESET."""
    return s.sub.link is not None and s.proto == 2 and name not in SUBSCRIBER_ALLOWED


def forwarded_ping(s: RouteSession, name: bytes) -> bool:
    """A RESP2 subscriber's PING is answered in Redis' subscriber form."""
    return s.sub.link is not None and s.proto == 2 and name == b"ping"
