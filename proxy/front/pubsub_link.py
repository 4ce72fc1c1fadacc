"""One subscriber connection to one node: requests answered in order, messages handed on.

    Link.request(SSUBSCRIBE a b) ─▶ node ─▶ pump: confirmations a, b ─▶ the request is done
                                            pump: message / smessage ─▶ on_message(...)
                                            pump: sunsubscribe nobody asked for ─▶ on_dropped

A client in subscriber mode holds one ``Link`` per node it has subscriptions on (front/
pubsub.py decides which). The link only ever sends subscribe-family commands naming their
channels (never the no-argument forms) and RESET, so every confirmation it reads either
answers the oldest request still waiting — same kind, one of its channels — or is the node's
own: a ``sunsubscribe`` pushed when the channel's slot left that node (a reshard, a
failover). ``confirmed`` is what the node holds for this link, as its confirmations say.

When the connection is lost every waiting request fails with ``LinkLost`` and ``on_closed``
runs: the link's subscriptions are gone with it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import hiredis
import trio

from slotgate.eventcore.tls import NodeStream
from slotgate.protocol.resp import ReplyFramer, encode_command
from slotgate.proxy.backend.connections import HELLO3, connect

if TYPE_CHECKING:
    from slotgate.proxy.ops.metrics import ProxyMetrics
    from slotgate.proxy.ops.settings import ProxySettings

RECV_BUFFER_BYTES = 64 * 1024
MESSAGE_KINDS = frozenset({b"message", b"pmessage", b"smessage"})
# Confirmation kind -> (which set it changes, added?)
CONFIRMATIONS = {
    b"subscribe": ("channels", True), b"unsubscribe": ("channels", False),
    b"psubscribe": ("patterns", True), b"punsubscribe": ("patterns", False),
    b"ssubscribe": ("shard", True), b"sunsubscribe": ("shard", False),
}
_CLIENT_ID = encode_command(b"CLIENT", b"ID")
_STAR, _PUSH, _MINUS = ord("*"), ord(">"), ord("-")

# on_message(link, raw frame, kind, channel it was published to)
OnMessage = Callable[["Link", bytes, bytes, bytes], None]


class LinkLost(Exception):
    """The link's connection is gone (its subscriptions with it)."""


class _Request:
    __slots__ = ("kind", "names", "error", "done")

    def __init__(self, kind: bytes | None, names: list[bytes]) -> None:
        self.kind = kind  # the confirmations that answer it (None: any one frame)
        self.names = names  # channels still to be confirmed
        self.error: bytes | None = None
        self.done = trio.Event()


class Link:
    """One client's subscriber connection to ``node``."""

    def __init__(self, node: str, stream: NodeStream, node_client_id: int) -> None:
        self.node = node
        self.stream = stream
        self.node_client_id = node_client_id  # for CLIENT KILL of the client
        self.confirmed: dict[str, set[bytes]] = {"channels": set(), "patterns": set(),
                                                 "shard": set()}
        self.closed = False
        self._waiting: deque[_Request] = deque()

    def holds(self) -> int:
        return sum(len(s) for s in self.confirmed.values())

    async def request(self, argv: list[bytes]) -> bytes | None:
        """Send one command; None once every channel it names is confirmed, or the node's
        error frame. Raises ``LinkLost``."""
        if self.closed:
            raise LinkLost(self.node)
        kind = argv[0].lower()
        req = _Request(kind, list(argv[1:])) if kind in CONFIRMATIONS else _Request(None, [])
        self._waiting.append(req)
        try:
            await self.stream.send_all(encode_command(*argv))
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            self._lost()
            raise LinkLost(self.node) from exc
        await req.done.wait()
        if req.error is _LOST:
            raise LinkLost(self.node)
        return req.error

    async def pump(self, on_message: OnMessage, on_dropped: Callable[[Link, bytes], None],
                   on_closed: Callable[[Link], None], after: Callable[[], None]) -> None:
        """Read every frame the node sends until the link closes (``after`` each read)."""
        framer = ReplyFramer()
        try:
            while not self.closed:
                data = await self.stream.receive_some(RECV_BUFFER_BYTES)
                if not data:
                    break
                framer.feed(data)
                for type_byte, raw in framer.frames():
                    self._frame(type_byte, raw, on_message, on_dropped)
                after()
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        was_open = not self.closed
        self._lost()
        if was_open:
            on_closed(self)

    def _frame(self, type_byte: int, raw: bytes, on_message: OnMessage,
               on_dropped: Callable[[Link, bytes], None]) -> None:
        if type_byte in (_STAR, _PUSH):
            reader = hiredis.Reader()
            reader.feed(raw)
            value = reader.gets()
            if isinstance(value, list) and len(value) >= 3 and isinstance(value[0], bytes):
                kind = value[0].lower()
                if kind in MESSAGE_KINDS:
                    channel = value[2] if kind == b"pmessage" and len(value) > 3 else value[1]
                    on_message(self, raw, kind, channel if isinstance(channel, bytes) else b"")
                    return
                change = CONFIRMATIONS.get(kind)
                if change is not None and isinstance(value[1], bytes):
                    name, added = change
                    (self.confirmed[name].add if added else self.confirmed[name].discard)(
                        value[1])
                    if not self._answers(kind, value[1]) and kind == b"sunsubscribe":
                        on_dropped(self, value[1])
                    return
        head = self._waiting[0] if self._waiting else None
        if head is None:
            return
        if type_byte == _MINUS:
            head.error = raw
        self._waiting.popleft()
        head.done.set()

    def _answers(self, kind: bytes, channel: bytes) -> bool:
        """Whether this confirmation answers the oldest waiting request."""
        head = self._waiting[0] if self._waiting else None
        if head is None or head.kind != kind or channel not in head.names:
            return False
        head.names.remove(channel)
        if not head.names:
            self._waiting.popleft()
            head.done.set()
        return True

    def _lost(self) -> None:
        self.closed = True
        while self._waiting:
            req = self._waiting.popleft()
            req.error = _LOST
            req.done.set()

    async def aclose(self) -> None:
        self._lost()
        await self.stream.aclose()


_LOST = b"-lost\r\n"


async def open_link(node: str, proto: int, settings: ProxySettings,
                    metrics: ProxyMetrics) -> Link:
    """A logged-in connection to ``node`` speaking ``proto``, its client id known. Raises
    ``OSError``, ``trio.TooSlowError``, ``trio.BrokenResourceError`` (or the login's error)."""
    stream = await connect(node, settings, metrics)
    try:
        with trio.fail_after(settings.connect_timeout_ms / 1000):
            await stream.send_all(_CLIENT_ID + (HELLO3 if proto == 3 else b""))
            framer = ReplyFramer()
            frames: list[tuple[int, bytes]] = []
            while len(frames) < (2 if proto == 3 else 1):
                frame = framer.next_frame()
                if frame is not None:
                    frames.append(frame)
                    continue
                data = await stream.receive_some(RECV_BUFFER_BYTES)
                if not data:
                    raise trio.BrokenResourceError(f"{node} closed the connection")
                framer.feed(data)
    except BaseException:
        await trio.aclose_forcefully(stream)
        raise
    raw = frames[0][1]
    return Link(node, stream, int(raw[1:-2]) if raw[:1] == b":" else 0)
