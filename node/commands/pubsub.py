"""Pub/Sub: (P|S)SUBSCRIBE, (P|S)UNSUBSCRIBE, PUBLISH, SPUBLISH, PUBSUB, keyspace events.

State lives in one ``Hub`` per server (channel -> subscribers, pattern -> subscribers, shard
channel -> subscribers, each an insertion-ordered dict used as a set) and one ``ClientSubs``
per subscribed client (``c.pubsub``; its sizes are the ``sub``/``psub``/``ssub`` counts that
CLIENT LIST shows). ``c.subscriptions`` holds the client's total (channels + patterns + shard
channels), which is what puts a RESP2 client in subscribe mode (the dispatcher then refuses
other commands with Redis' error).

Delivery appends one frame per message to the receiver's ``c.out`` and wakes it. Messages for
a receiver are coalesced into one ``bytearray`` while it is still queued (the server takes
``c.out`` entries whole, so a buffer still at the tail of ``c.out`` has not been handed to a
send). That buffer's size, plus the last buffer handed over while a send is in progress,
is the receiver's pending output; ``client-output-buffer-limit pubsub <hard> <soft> <secs>``
is checked against it on every delivery, as Redis checks it on every reply: over the hard
limit, or over the soft limit for longer than ``secs``, the client is closed at once and its
pending output dropped, which keeps memory bounded when a subscriber stops reading.

Cluster propagation is a hook: ``hub(server).publish_hooks`` functions get
``(channel, message, sharded)`` after each local PUBLISH/SPUBLISH, and the cluster bus calls
``deliver`` / ``deliver_shard`` for messages that arrive from peers.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

from slotgate.node.commands.registry import command
from slotgate.node.core.client import output_limit_reached
from slotgate.node.core.config import oblimit_class
from slotgate.node.core.errors import CommandError, _shown
from slotgate.node.core.glob import Glob, compile_glob
from slotgate.node.core.keyspace import NOTIFY_KEYEVENT, NOTIFY_KEYSPACE
from slotgate.protocol.resp import array_header, bulk, integer
from slotgate.protocol.slots import key_slot

if TYPE_CHECKING:

    from slotgate.node.core.client import Client
    from slotgate.node.core.server import Server

log = logging.getLogger("node.pubsub")

Subscribers = dict["Client", None]


class ClientSubs:
    """One client's subscriptions and output accounting."""

    __slots__ = ("channels", "patterns", "shard", "buf", "inflight_bytes", "soft_since_s")

    def __init__(self) -> None:
        self.channels: dict[bytes, None] = {}
        self.patterns: dict[bytes, None] = {}
        self.shard: dict[bytes, None] = {}
        self.buf: bytearray | None = None  # the coalescing buffer last appended to c.out
        self.inflight_bytes = 0  # size of the last buffer taken by the server's sender
        self.soft_since_s: float | None = None  # when pending output first passed the soft limit


class Hub:
    """The server's pub/sub registries."""

    def __init__(self, server: Server) -> None:
        self.channels: dict[bytes, Subscribers] = {}
        self.patterns: dict[bytes, Subscribers] = {}
        self.compiled: dict[bytes, Glob] = {}
        self.shard: dict[bytes, Subscribers] = {}
        self.publish_hooks: list[Callable[[bytes, bytes, bool], None]] = []
        self.config = server.config
        self.ks = server.ks
        self._limits_text = ""
        self._limits = (0, 0, 0)
        server.client_close_hooks.append(self.drop_client)
        server.ks.notify_hook = self.keyspace_event

    # -- limits --------------------------------------------------------------------------
    def pubsub_limits(self) -> tuple[int, int, int]:
        """(hard bytes, soft bytes, soft seconds) of the ``pubsub`` class; 0 = no limit."""
        text = str(self.config.get("client-output-buffer-limit"))
        if text != self._limits_text:
            self._limits_text, self._limits = text, oblimit_class(text, "pubsub")
        return self._limits

    # -- subscriptions -------------------------------------------------------------------
    def drop_client(self, c: Client) -> None:
        """Forget every subscription of ``c`` (disconnect, RESET)."""
        st = c.pubsub
        if st is None:
            return
        c.pubsub = None
        for ch in st.channels:
            _discard(self.channels, ch, c)
        for pat in st.patterns:
            if _discard(self.patterns, pat, c):
                self.compiled.pop(pat, None)
        for ch in st.shard:
            _discard(self.shard, ch, c)
        _set_counts(c, ClientSubs())

    # -- delivery ------------------------------------------------------------------------
    def deliver(self, channel: bytes, message: bytes) -> int:
        """Send a PUBLISH to local subscribers (channel, then matching patterns)."""
        receivers = 0
        tail = bulk(channel) + bulk(message)
        subs = self.channels.get(channel)
        if subs:
            frames = {2: b"*3\r\n$7\r\nmessage\r\n" + tail, 3: b">3\r\n$7\r\nmessage\r\n" + tail}
            for rc in list(subs):
                self._push(rc, frames[rc.resp])
            receivers += len(subs)
        for pat, psubs in list(self.patterns.items()):
            if not self.compiled[pat].matches(channel):
                continue
            head = b"$8\r\npmessage\r\n" + bulk(pat)
            frames = {2: b"*4\r\n" + head + tail, 3: b">4\r\n" + head + tail}
            for rc in list(psubs):
                self._push(rc, frames[rc.resp])
            receivers += len(psubs)
        return receivers

    def deliver_shard(self, channel: bytes, message: bytes) -> int:
        subs = self.shard.get(channel)
        if not subs:
            return 0
        tail = b"$8\r\nsmessage\r\n" + bulk(channel) + bulk(message)
        frames = {2: b"*3\r\n" + tail, 3: b">3\r\n" + tail}
        n = len(subs)
        for rc in list(subs):
            self._push(rc, frames[rc.resp])
        return n

    def _push(self, rc: Client, frame: bytes) -> None:
        if rc.killed:
            return
        st = rc.pubsub
        if st is None:  # unsubscribed meanwhile (cannot happen within one delivery)
            return
        out = rc.out
        buf = st.buf
        if buf is not None and out and out[-1] is buf:
            buf += frame
        else:
            if buf is not None:
                st.inflight_bytes = len(buf)
            buf = st.buf = bytearray(frame)
            out.append(buf)  # type: ignore[arg-type]  # sent like bytes by the server
        self._check_limits(rc, st, len(buf))
        if rc.blocked is None:
            # The server's wake() ends a blocking wait (BLPOP...); a RESP3 subscriber that is
            # blocked gets its pushes with the reply that unblocks it instead.
            rc.wake()

    def _check_limits(self, rc: Client, st: ClientSubs, queued: int) -> None:
        hard, soft, soft_s = self.pubsub_limits()
        if not hard and not soft:
            return
        pending = queued + (st.inflight_bytes if rc.writer.sending else 0)
        over, st.soft_since_s = output_limit_reached(pending, hard, soft, soft_s, st.soft_since_s)
        if over:
            log.warning("Client id=%d addr=%s scheduled to be closed ASAP for overcoming of "
                        "output buffer limits.", rc.id, rc.addr)
            rc.out.clear()
            st.buf = None
            self.drop_client(rc)
            rc.server.kill_client(rc)

    def unsubscribe_shard_slot(self, slot: int) -> None:
        """The slot left this node's shard (removeChannelsInSlot): each of its shard channels
        is dropped, in channel name order, and every subscriber is pushed ``sunsubscribe``."""
        for ch in sorted(ch for ch in self.shard if key_slot(ch) == slot):
            for rc in list(self.shard.pop(ch)):
                st = rc.pubsub
                if st is None or rc.killed:
                    continue
                st.shard.pop(ch, None)
                self._push(rc, _confirm(rc, b"sunsubscribe", ch, len(st.shard)))
                _set_counts(rc, st)
                if not rc.subscriptions:
                    rc.pubsub = None

    def keyspace_event(self, flag: int, event: bytes, key: bytes, db_index: int) -> None:
        """notifyKeyspaceEvent: ``__keyspace@<db>__:<key>`` and ``__keyevent@<db>__:<event>``."""
        flags = self.ks.notify_flags
        if flags & NOTIFY_KEYSPACE:
            self.deliver(b"__keyspace@%d__:" % db_index + key, event)
        if flags & NOTIFY_KEYEVENT:
            self.deliver(b"__keyevent@%d__:" % db_index + event, key)


_HUBS: weakref.WeakKeyDictionary[Server, Hub] = weakref.WeakKeyDictionary()


def hub(server: Server) -> Hub:
    """The server's Hub (made on first use)."""
    h = _HUBS.get(server)
    if h is None:
        h = _HUBS[server] = Hub(server)
    return h


def _discard(registry: dict[bytes, Subscribers], name: bytes, c: Client) -> bool:
    """Remove ``c`` from ``registry[name]``; True when ``name`` lost its last subscriber."""
    subs = registry.get(name)
    if subs is None:
        return False
    subs.pop(c, None)
    if not subs:
        del registry[name]
        return True
    return False


def _set_counts(c: Client, st: ClientSubs) -> None:
    c.set_subscriptions(len(st.channels) + len(st.patterns) + len(st.shard))


def _subs(c: Client) -> ClientSubs:
    st = c.pubsub
    if st is None:
        st = c.pubsub = ClientSubs()
    return st


def _confirm(c: Client, kind: bytes, name: bytes | None, count: int) -> bytes:
    head = b">3\r\n" if c.resp == 3 else b"*3\r\n"
    return head + bulk(kind) + (c.null_bulk if name is None else bulk(name)) + integer(count)


# --- the three families: (client-side dict, hub registry, confirmation words, count) -------
_Family = tuple[
    Callable[[ClientSubs], dict[bytes, None]],
    Callable[[Hub], dict[bytes, Subscribers]],
    bytes, bytes,
    Callable[[ClientSubs], int],
]
_CHANNELS: _Family = (lambda st: st.channels, lambda h: h.channels, b"subscribe", b"unsubscribe",
                      lambda st: len(st.channels) + len(st.patterns))
_PATTERNS: _Family = (lambda st: st.patterns, lambda h: h.patterns, b"psubscribe",
                      b"punsubscribe", lambda st: len(st.channels) + len(st.patterns))
_SHARD: _Family = (lambda st: st.shard, lambda h: h.shard, b"ssubscribe", b"sunsubscribe",
                   lambda st: len(st.shard))


def _subscribe(c: Client, names: list[bytes], fam: _Family) -> bytes:
    mine, registry, word, _, count = fam
    h = hub(c.server)
    st = _subs(c)
    out = []
    for name in names:
        if name not in mine(st):
            mine(st)[name] = None
            registry(h).setdefault(name, {})[c] = None
            if fam is _PATTERNS and name not in h.compiled:
                h.compiled[name] = compile_glob(name)
        out.append(_confirm(c, word, name, count(st)))
    _set_counts(c, st)
    return b"".join(out)


def _unsubscribe(c: Client, names: list[bytes], fam: _Family) -> bytes:
    mine, registry, _, word, count = fam
    h = hub(c.server)
    st = _subs(c)
    out = []
    for name in names or list(mine(st)):
        if name in mine(st):
            del mine(st)[name]
            if _discard(registry(h), name, c) and fam is _PATTERNS:
                h.compiled.pop(name, None)
        out.append(_confirm(c, word, name, count(st)))
    if not out:  # nothing to unsubscribe from: one reply with a null name
        out.append(_confirm(c, word, None, count(st)))
    _set_counts(c, st)
    if not c.subscriptions:
        c.pubsub = None
    return b"".join(out)


@command("subscribe")
def subscribe(c: Client, argv: list[bytes]) -> bytes:
    return _subscribe(c, argv[1:], _CHANNELS)


@command("psubscribe")
def psubscribe(c: Client, argv: list[bytes]) -> bytes:
    return _subscribe(c, argv[1:], _PATTERNS)


@command("ssubscribe")
def ssubscribe(c: Client, argv: list[bytes]) -> bytes:
    if c.in_exec:  # Redis refuses it to any client that expects one reply per command
        raise CommandError("ERR SSUBSCRIBE isn't allowed for a DENY BLOCKING client")
    return _subscribe(c, argv[1:], _SHARD)


@command("unsubscribe")
def unsubscribe(c: Client, argv: list[bytes]) -> bytes:
    return _unsubscribe(c, argv[1:], _CHANNELS)


@command("punsubscribe")
def punsubscribe(c: Client, argv: list[bytes]) -> bytes:
    return _unsubscribe(c, argv[1:], _PATTERNS)


@command("sunsubscribe")
def sunsubscribe(c: Client, argv: list[bytes]) -> bytes:
    return _unsubscribe(c, argv[1:], _SHARD)


@command("publish")
def publish(c: Client, argv: list[bytes]) -> bytes:
    h = hub(c.server)
    n = h.deliver(argv[1], argv[2])
    for hook in h.publish_hooks:
        hook(argv[1], argv[2], False)
    return integer(n)


@command("spublish")
def spublish(c: Client, argv: list[bytes]) -> bytes:
    h = hub(c.server)
    n = h.deliver_shard(argv[1], argv[2])
    for hook in h.publish_hooks:
        hook(argv[1], argv[2], True)
    return integer(n)


# --- PUBSUB introspection -------------------------------------------------------------------
def _channels_reply(registry: dict[bytes, Subscribers], argv: list[bytes]) -> bytes:
    names = list(registry)
    if len(argv) == 3:
        rx = compile_glob(argv[2])
        names = [n for n in names if rx.matches(n)]
    elif len(argv) > 3:  # addReplySubcommandSyntaxError
        raise CommandError(
            f"ERR unknown subcommand or wrong number of arguments for "
            f"'{_shown(argv[1], 128)}'. Try {_shown(argv[0], 128).upper()} HELP.")
    return array_header(len(names)) + b"".join(bulk(n) for n in names)


def _numsub_reply(registry: dict[bytes, Subscribers], argv: list[bytes]) -> bytes:
    parts = [array_header(2 * (len(argv) - 2))]
    for name in argv[2:]:
        parts.append(bulk(name) + integer(len(registry.get(name, ()))))
    return b"".join(parts)


@command("pubsub|channels")
def pubsub_channels(c: Client, argv: list[bytes]) -> bytes:
    return _channels_reply(hub(c.server).channels, argv)


@command("pubsub|shardchannels")
def pubsub_shardchannels(c: Client, argv: list[bytes]) -> bytes:
    return _channels_reply(hub(c.server).shard, argv)


@command("pubsub|numsub")
def pubsub_numsub(c: Client, argv: list[bytes]) -> bytes:
    return _numsub_reply(hub(c.server).channels, argv)


@command("pubsub|shardnumsub")
def pubsub_shardnumsub(c: Client, argv: list[bytes]) -> bytes:
    return _numsub_reply(hub(c.server).shard, argv)


@command("pubsub|numpat")
def pubsub_numpat(c: Client, argv: list[bytes]) -> bytes:
    return integer(len(hub(c.server).patterns))


_HELP = [
    b"PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    b"CHANNELS [<pattern>]",
    b"    Return the currently active channels matching a <pattern> (default: '*').",
    b"NUMPAT",
    b"    Return number of subscriptions to patterns.",
    b"NUMSUB [<channel> ...]",
    b"    Return the number of subscribers for the specified channels, excluding",
    b"    pattern subscriptions(default: no channels).",
    b"SHARDCHANNELS [<pattern>]",
    b"    Return the currently active shard level channels matching a <pattern> (default: '*').",
    b"SHARDNUMSUB [<shardchannel> ...]",
    b"    Return the number of subscribers for the specified shard level channel(s)",
    b"HELP",
    b"    Prints this help.",
]


@command("pubsub|help")
def pubsub_help(c: Client, argv: list[bytes]) -> bytes:
    return array_header(len(_HELP)) + b"".join(b"+" + line + b"\r\n" for line in _HELP)
