"""Subscriber mode: a client's SUBSCRIBE family runs on a node connection of its own.

    client ─(P|S)SUBSCRIBE/UNSUBSCRIBE, PING─▶ link (one node) ─frames─▶ pump ─▶ client

The first subscribe command opens the *link*: a connection to one master. Classic pub/sub
uses a fixed home, the master of ``PUBSUB_HOME_SLOT``; the proxy sends PUBLISH and PUBSUB
introspection there too, so PUBLISH counts every subscriber that came through the proxy as one
server would (Redis Cluster delivers messages to every node but counts only local
subscribers). SSUBSCRIBE goes to the master of the shard channel's slot. From then on:

- RESP2 clients: subscribe commands and PING go to the link (Redis answers PING in its
  subscriber form); QUIT and RESET stay local; anything else gets Redis' "Can't execute"
  error from the proxy (a cluster node would answer MOVED first for keyed commands).
- RESP3 clients: subscribe commands go to the link, other commands are routed as usual.

Every frame the link sends — confirmations, messages, PING replies, errors — is forwarded to
the client as is, in arrival order. The session reads the client's next command only after
the link has answered the forwarded one (``expected`` confirmations counted by the pump), so
replies stay in order. When the last subscription is gone the link closes and the client is
back in normal mode. If the link's node connection is lost, the client connection is closed
too (as a Redis server going away would do), so the client resubscribes.

Limitation: the sharded channels of one client must all live on the link's node.

The client's subscriber state is a ``Subscriber`` the session holds; only this module
changes it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import hiredis
import trio

from slotgate.eventcore.tls import NodeStream
from slotgate.protocol.commands import key_positions
from slotgate.protocol.resp import ReplyFramer
from slotgate.protocol.slots import key_slot
from slotgate.proxy import errors
from slotgate.proxy.backend.connections import HELLO3, connect
from slotgate.proxy.routing.redirect import error_frame

if TYPE_CHECKING:
    from slotgate.proxy.front.routes import RouteSession

RECV_BUFFER_BYTES = 64 * 1024
MESSAGE_KINDS = frozenset({b"message", b"pmessage", b"smessage"})
# Confirmation kind -> (which set it changes, added?)
CONFIRMATIONS = {
    b"subscribe": ("channels", True), b"unsubscribe": ("channels", False),
    b"psubscribe": ("patterns", True), b"punsubscribe": ("patterns", False),
    b"ssubscribe": ("shard", True), b"sunsubscribe": ("shard", False),
}
# Command -> the set its no-argument form empties.
UNSUBSCRIBE_SETS = {b"unsubscribe": "channels", b"punsubscribe": "patterns",
                    b"sunsubscribe": "shard"}
SHARD_COMMANDS = frozenset({b"ssubscribe", b"sunsubscribe"})
LEAVING = frozenset({b"reset", b"quit"})  # end the subscriptions on the node first
SUBSCRIBER_ALLOWED = frozenset(CONFIRMATIONS) | {b"ping", b"quit", b"reset"}
CANT_EXECUTE = ("ERR Can't execute '{name}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / "
                "QUIT / RESET are allowed in this context")
PUBSUB_HOME_SLOT = 0
_CLIENT_ID = b"*2\r\n$6\r\nCLIENT\r\n$2\r\nID\r\n"
NOT_ONE_NODE = "ERR slotgate: a client's shard channels must all live on one node"


class Subscriber:
    """One client's subscriber mode: ``link`` while it has subscriptions, else None."""

    __slots__ = ("link",)

    def __init__(self) -> None:
        self.link: Link | None = None

    async def aclose(self) -> None:
        """The client is gone: close its link."""
        link, self.link = self.link, None
        if link is not None:
            await link.aclose()


def reset(s: RouteSession) -> None:
    """RESET: out of subscriber mode (the link closes in the background)."""
    sub = s.sub
    if sub.link is not None:
        link, sub.link = sub.link, None
        link.closed = True
        s.router.nursery.start_soon(link.aclose)


class Link:
    """One client's subscriber connection."""

    def __init__(self, session: RouteSession, node: str, stream: NodeStream) -> None:
        self.session = session
        self.node = node
        self.stream = stream
        self.sets: dict[str, set[bytes]] = {"channels": set(), "patterns": set(), "shard": set()}
        self.expected = 0
        self.answered = trio.Event()
        self.closed = False
        self.swallow = 0  # replies the node owes that are the proxy's, not the client's
        self.node_client_id = 0  # the link's client id on its node

    def subscriptions(self) -> int:
        return sum(len(s) for s in self.sets.values())

    async def pump(self) -> None:
        """Forward every frame from the node to the client; track confirmations."""
        framer = ReplyFramer()
        s = self.session
        try:
            while not self.closed:
                data = await self.stream.receive_some(RECV_BUFFER_BYTES)
                if not data:
                    raise trio.BrokenResourceError(f"{self.node} closed the subscriber link")
                framer.feed(data)
                for type_byte, raw in framer.frames():
                    if self._is_message(type_byte, raw):
                        s.write_raw(raw)
                        continue
                    if self.swallow:
                        self.swallow -= 1
                    else:
                        s.write_raw(raw)
                    self._answered_one()
                s.flush_output()
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
            if not self.closed:
                # The node went away: so does this client's connection (it resubscribes).
                self.closed = True
                self.answered.set()
                s.abort()

    def _is_message(self, type_byte: int, raw: bytes) -> bool:
        if type_byte not in (ord("*"), ord(">")):
            return False
        reader = hiredis.Reader()
        reader.feed(raw)
        value = reader.gets()
        if not isinstance(value, list) or len(value) < 3 or not isinstance(value[0], bytes):
            return False
        kind = value[0].lower()
        if kind in MESSAGE_KINDS:
            return True
        change = CONFIRMATIONS.get(kind)
        if change is not None and isinstance(value[1], bytes):
            name, added = change
            (self.sets[name].add if added else self.sets[name].discard)(value[1])
        return False

    def _answered_one(self) -> None:
        self.expected -= 1
        if self.expected <= 0:
            self.answered.set()

    async def forward(self, argv: list[bytes], replies: int, *, own: bool = False) -> None:
        """Send one command and wait until its ``replies`` non-message frames came back
        (``own``: they answer the proxy, not the client, and are not forwarded)."""
        self.expected = replies
        self.swallow = replies if own else 0
        self.answered = trio.Event()
        await self.stream.send_all(_pack(argv))
        await self.answered.wait()

    async def aclose(self) -> None:
        self.closed = True
        await self.stream.aclose()


def _pack(argv: list[bytes]) -> bytes:
    return b"*%d\r\n" % len(argv) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in argv)


def _replies_owed(link: Link, argv: list[bytes]) -> int:
    name = argv[0].lower()
    if name in CONFIRMATIONS:
        if len(argv) > 1:
            return len(argv) - 1
        return max(1, len(link.sets[UNSUBSCRIBE_SETS.get(name, "channels")]))
    return 1


def _shard_slot(argv: list[bytes]) -> int | None:
    """The one slot of SSUBSCRIBE/SUNSUBSCRIBE channels; -1 if none; None if they differ."""
    slots = {key_slot(argv[p]) for p in key_positions(argv, include_not_key=True)}
    if len(slots) > 1:
        return None
    return slots.pop() if slots else -1


async def _open_link(s: RouteSession, node: str) -> Link:
    stream = await connect(node, s.settings, s.metrics)
    with trio.fail_after(s.settings.connect_timeout_ms / 1000):
        # The link's client id on its node (for CLIENT KILL of this client), and RESP3 if
        # the client speaks it: both answered before the link is used.
        await stream.send_all(_CLIENT_ID + (HELLO3 if s.proto == 3 else b""))
        framer = ReplyFramer()
        frames: list[tuple[int, bytes]] = []
        while len(frames) < (2 if s.proto == 3 else 1):
            frame = framer.next_frame()
            if frame is not None:
                frames.append(frame)
                continue
            data = await stream.receive_some(RECV_BUFFER_BYTES)
            if not data:
                raise trio.BrokenResourceError(f"{node} closed the connection")
            framer.feed(data)
    link = Link(s, node, stream)
    raw = frames[0][1]
    link.node_client_id = int(raw[1:-2]) if raw[:1] == b":" else 0
    return link


async def _run(s: RouteSession, argv: list[bytes], name: str) -> None:
    """Enter subscriber mode if needed, forward, and leave it when nothing is left."""
    await s.wait_idle(own=0)
    cmd = argv[0].lower()
    sub = s.sub
    link = sub.link
    if cmd in SHARD_COMMANDS:
        slot = _shard_slot(argv)
        if slot is None:
            s.reply(name, error_frame(errors.CROSSSLOT))
            return
        owner = s.router.topology.owners[slot] if slot >= 0 else None
        if link is not None and owner is not None and owner != link.node:
            s.reply(name, error_frame(NOT_ONE_NODE))
            return
        node = owner or s.router.topology.owners[PUBSUB_HOME_SLOT]
    else:
        node = s.router.topology.owners[PUBSUB_HOME_SLOT]
    if link is None:
        if node is None:
            s.reply(name, error_frame(errors.SLOT_NOT_SERVED))
            return
        try:
            link = await _open_link(s, node)
        except (OSError, trio.TooSlowError, trio.BrokenResourceError):
            s.reply(name, error_frame(errors.NODE_UNREACHABLE.format(node=node)))
            return
        sub.link = link
        s.spawn(link.pump)
    try:
        await link.forward(argv, _replies_owed(link, argv))
    except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
        s.abort()
        return
    if link.subscriptions() == 0 and sub.link is link:
        sub.link = None
        await link.aclose()


def command(s: RouteSession, argv: list[bytes], name: str) -> Awaitable[None]:
    """A subscribe-family command (any mode), or any command of a RESP2 subscriber."""
    return _run(s, argv, name)


async def _leave(s: RouteSession, then: Callable[[], Awaitable[None] | None]) -> None:
    await s.wait_idle(own=0)
    link = s.sub.link
    if link is not None:
        # The node drops every subscription of the link and answers: from then on no
        # PUBLISH counts or reaches them, before the client hears its RESET / QUIT answered.
        try:
            await link.forward([b"RESET"], 1, own=True)
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the link is gone, and with it its subscriptions
        if s.sub.link is link:
            s.sub.link = None
        await link.aclose()
    pending = then()
    if pending is not None:
        await pending


def leave(s: RouteSession, then: Callable[[], Awaitable[None] | None]) -> Awaitable[None]:
    """RESET or QUIT of a subscriber: its subscriptions end on the node first, then ``then``
    (the command itself) runs."""
    return _leave(s, then)


def refused_while_subscribed(s: RouteSession, name: bytes) -> bool:
    """RESP2 subscribers may run only the subscribe family, PING, QUIT and RESET."""
    return s.sub.link is not None and s.proto == 2 and name not in SUBSCRIBER_ALLOWED


def forwarded_ping(s: RouteSession, name: bytes) -> bool:
    """A RESP2 subscriber's PING is answered by the link, in Redis' subscriber form."""
    return s.sub.link is not None and s.proto == 2 and name == b"ping"
