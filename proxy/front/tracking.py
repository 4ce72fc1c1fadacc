"""Client-side caching through the proxy: CLIENT TRACKING with the proxy's own table.

    client's read ─▶ dispatch ─▶ remember(keys) ─▶ table: key -> sessions (default mode)
    every master ─ feed link: CLIENT TRACKING ON BCAST (every key it changes) ─▶ invalidate
        ─▶ the sessions that read the key (default mode; then forgotten, as Redis does)
        ─▶ the BCAST sessions whose prefixes match
        ─▶ a RESP3 push to the client, or the ``__redis__:invalidate`` message to the client
           it redirects to (that client must be subscribed, as in Redis)

A client's reads go over node connections shared by many clients, so a node cannot tell
whose read it served; the proxy sees every request, so it keeps the tracking table itself,
as one server would (``remember``: readonly commands' keys; OPTIN/OPTOUT with CLIENT
CACHING; NOLOOP skips invalidations of keys the client itself wrote through the proxy).
What changes keys is learned from the nodes: while any client tracks, the proxy holds one
*feed* per master, a RESP3 connection in BCAST mode with no prefix, which every change on
that master (writes of any client, of other proxies, expiry, eviction, FLUSHALL) answers
with an ``invalidate`` push. A feed that is lost, or a master that appears (failover,
reshard onto a new master), flushes every tracking client (``invalidate`` with a null key
list, as after FLUSHALL): what changed meanwhile is unknown.

Keys read inside MULTI are remembered when EXEC ran them (its reply an array), with the
CLIENT CACHING of the EXEC; NOLOOP notes the transaction's writes when EXEC is sent. The table
holds at most ``tracking-table-max-keys`` keys (``limit``, Redis' trackingLimitUsedSlots):
over it, before a tracking client's next request, keys are dropped and their readers told, as
if the keys had changed, with Redis' effort (100 keys, 200 the next time while still over...).

While a client tracks, its requests leave the session's fast routes (their keys must be
seen). Arguments, checks and TRACKINGINFO are ``protocol/tracking.py``'s, as the node's.
With workers, a REDIRECT target on another worker gets its invalidations through the
supervisor (front/siblings.py: REDIR, HAS).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

import hiredis
import trio

from slotgate.protocol import tracking as args
from slotgate.protocol.commands import CommandInfo, get_keys, lookup
from slotgate.protocol.resp import (
    OK,
    ReplyFramer,
    array_header,
    bulk,
    encode_command,
    integer,
    null,
    push_header,
)
from slotgate.proxy import errors
from slotgate.proxy.backend.connections import HELLO3, connect
from slotgate.proxy.front.clients import ANSWERED
from slotgate.proxy.front.db_names import split_name
from slotgate.proxy.routing.redirect import error_frame

if TYPE_CHECKING:
    from slotgate.proxy.front.routes import RouteSession
    from slotgate.proxy.front.server import Proxy
    from slotgate.proxy.front.session import Session

log = logging.getLogger("slotgate.tracking")

RECV_BUFFER_BYTES = 64 * 1024
_FEED_ON = encode_command(b"CLIENT", b"TRACKING", b"ON", b"BCAST")
_INVALIDATE = b"invalidate"
_CHANNEL = b"__redis__:invalidate"
_OWN_WRITES_MAX = 10_000  # NOLOOP's memory of the client's own writes, bounded
_FEED_RETRY_S = 0.5
_LIMIT_EFFORT = 100  # keys dropped per check over tracking-table-max-keys, times the rounds


class ClientTracking:
    """One client's tracking state (protocol/tracking.py's ``State``)."""

    __slots__ = ("bcast", "optin", "optout", "noloop", "caching", "broken_redirect",
                 "redirect", "prefixes", "keys", "own_writes")

    def __init__(self, o: args.Options) -> None:
        self.bcast = o.bcast
        self.optin = o.optin
        self.optout = o.optout
        self.noloop = o.noloop
        self.caching = False
        self.broken_redirect = False
        self.redirect = o.redirect
        self.prefixes: list[bytes] = list(o.prefixes)
        self.keys: set[bytes] = set()  # this client's keys in the table
        self.own_writes: Counter[bytes] = Counter()  # NOLOOP: writes not yet invalidated


class Tracker:
    """The proxy's tracking table and its feeds (one per Proxy)."""

    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy
        self.table: dict[bytes, dict[Session, None]] = {}
        self.clients: dict[Session, None] = {}  # every tracking session
        self.bcast: dict[Session, None] = {}  # those in BCAST mode
        self.noloop: dict[Session, None] = {}  # those with NOLOOP
        self.feeds: dict[str, trio.CancelScope] = {}
        self.connected: set[str] = set()
        self.changed = trio.Event()
        self.feed_up = trio.Event()  # set (then replaced) whenever a feed connects
        self.running = False
        self._limit_rounds = 0  # checks in a row that ended still over the limit

    # --- clients -----------------------------------------------------------------------------
    def enable(self, s: Session, o: args.Options) -> None:
        st = s.tracking
        if st is None:
            s.tracking = st = ClientTracking(o)
            self.clients[s] = None
            if o.bcast:
                self.bcast[s] = None
            s.set_checked(s.checked)  # its fast routes off
        else:
            st.redirect, st.noloop = o.redirect, o.noloop
            st.optin, st.optout = st.optin or o.optin, st.optout or o.optout
            st.prefixes += o.prefixes
        st.broken_redirect = False
        if st.noloop:
            self.noloop[s] = None
        else:
            self.noloop.pop(s, None)
        if not self.running:
            self.running = True
            self.proxy.router.nursery.start_soon(self._manage)
        self.changed.set()

    def disable(self, s: Session) -> None:
        st = s.tracking
        if st is None:
            return
        s.tracking = None
        self.clients.pop(s, None)
        self.bcast.pop(s, None)
        self.noloop.pop(s, None)
        for key in st.keys:
            readers = self.table.get(key)
            if readers is not None:
                readers.pop(s, None)
                if not readers:
                    del self.table[key]
        s.set_checked(s.checked)
        self.changed.set()

    def remember(self, s: Session, argv: list[bytes], info: CommandInfo) -> None:
        """A tracking client's request: its keys remembered if it reads them (Redis'
        trackingRememberKeys), its own writes noted for NOLOOP."""
        self.limit()
        st = s.tracking
        assert st is not None
        self._note(s, st, argv, info, st.caching, reads=True, writes=True)
        # (As Redis' resetClient: kept inside MULTI, MULTI included, and after CLIENT.)
        if s.tx.queued is None and info.name != "multi" and not info.name.startswith("client"):
            st.caching = False

    def _note(self, s: Session, st: ClientTracking, argv: list[bytes], info: CommandInfo,
              caching: bool, *, reads: bool, writes: bool) -> None:
        flags = info.flags
        if "readonly" in flags and not st.bcast and not (
                (st.optin and not caching) or (st.optout and caching)):
            if reads:
                for key in self._names(get_keys(argv)):
                    self.table.setdefault(key, {})[s] = None
                    st.keys.add(key)
        elif st.noloop and "write" in flags and writes:
            # The client's own write ends its tracking of the key at once, silently (as in
            # Redis); the change's invalidation, when it comes, is not for this client.
            if len(st.own_writes) > _OWN_WRITES_MAX:
                st.own_writes.clear()
            for key in self._names(get_keys(argv)):
                st.own_writes[key] += 1
                self._forget(s, key)

    def at_exec(self, rs: RouteSession, queued: list[list[bytes]],
                reply_slot: Callable[[bytes], None]) -> Callable[[bytes], None]:
        """EXEC of a tracking client: its writes noted now (NOLOOP), the keys its queued
        reads read remembered once EXEC's reply says they ran, as Redis remembers them when
        EXEC runs them; the CLIENT CACHING before the transaction applies to them all."""
        s = _full(rs)
        st = s.tracking
        if st is None:
            return reply_slot
        caching = st.caching
        st.caching = False
        rows = [(argv, info) for argv in queued if (info := lookup(argv)) is not None]
        for argv, info in rows:
            self._note(s, st, argv, info, caching, reads=False, writes=True)

        def done(raw: bytes) -> None:
            if s.tracking is st and raw[:1] == b"*" and raw[:2] != b"*-":
                for argv, info in rows:
                    self._note(s, st, argv, info, caching, reads=True, writes=False)
            reply_slot(raw)

        return done

    def limit(self) -> None:
        """Redis' trackingLimitUsedSlots: while the table holds more keys than
        tracking-table-max-keys (0: no limit), keys are dropped, the oldest first, and their
        readers told as if the keys changed; at most 100 keys per check, 100 more each check
        that ended still over the limit."""
        max_keys = self.proxy.settings.tracking_table_max_keys
        table = self.table
        if not max_keys or len(table) <= max_keys:
            self._limit_rounds = 0
            return
        effort = _LIMIT_EFFORT * (self._limit_rounds + 1)
        while effort > 0 and table:
            effort -= 1
            key = next(iter(table))
            for s in list(table[key]):
                self._forget(s, key)
                if s.tracking is not None:
                    self._send(s, [key])
            table.pop(key, None)
            if len(table) <= max_keys:
                self._limit_rounds = 0
                return
        self._limit_rounds += 1

    def info_fields(self) -> dict[bytes, int]:
        """INFO stats' tracking fields, the proxy's own table's."""
        prefixes = {p for s in self.bcast if s.tracking is not None
                    for p in (s.tracking.prefixes or [b""])}
        return {b"tracking_total_keys": len(self.table),
                b"tracking_total_items": sum(len(r) for r in self.table.values()),
                b"tracking_total_prefixes": len(prefixes)}

    def _names(self, keys: list[bytes]) -> list[bytes]:
        """Key names as the clients know them: with numbered databases, a stored name
        without its database's prefix (Redis tracks names, whatever the database)."""
        if self.proxy.settings.databases == 1:
            return keys
        return [split_name(k)[1] for k in keys]

    # --- invalidations -----------------------------------------------------------------------
    def invalidate(self, keys: list[bytes] | None) -> None:
        """The keys a master changed (None: all of them, FLUSHALL or a lost feed)."""
        if keys is not None:
            keys = self._names(keys)
        if keys is None:
            self.table.clear()
            for s in list(self.clients):
                assert s.tracking is not None
                s.tracking.keys.clear()
                self._send(s, None)
            return
        bcast_out: dict[Session, list[bytes]] = {}
        for key in keys:
            # NOLOOP clients whose own write this change is: not told (a default-mode one
            # stopped tracking the key at its write; if it read the key since, it still does).
            own = [s for s in self.noloop if self._own(s, key)]
            for s in list(self.table.get(key, ())):
                if s in own:
                    continue
                self._forget(s, key)
                if s.tracking is not None:
                    self._send(s, [key])  # one message per key, as Redis' default mode
            for s in self.bcast:
                st = s.tracking
                if st is not None and s not in own and (
                        not st.prefixes or any(key.startswith(p) for p in st.prefixes)):
                    bcast_out.setdefault(s, []).append(key)
        for s, ks in bcast_out.items():
            self._send(s, ks)

    def _forget(self, s: Session, key: bytes) -> None:
        readers = self.table.get(key)
        if readers is not None:
            readers.pop(s, None)
            if not readers:
                del self.table[key]
        if s.tracking is not None:
            s.tracking.keys.discard(key)

    @staticmethod
    def _own(s: Session, key: bytes) -> bool:
        """NOLOOP: this change is the client's own write (counted down once)."""
        st = s.tracking
        if st is None or not st.own_writes.get(key):
            return False
        st.own_writes[key] -= 1
        if not st.own_writes[key]:
            del st.own_writes[key]
        return True

    def _send(self, s: Session, keys: list[bytes] | None) -> None:
        st = s.tracking
        assert st is not None
        target: Session | None = s
        if st.redirect:
            target = next((c for c in self.proxy.sessions if c.id == st.redirect), None)
            siblings = self.proxy.siblings
            if target is None and siblings is not None:  # a client of another worker, maybe
                redirect = st.redirect
                siblings.ask([b"REDIR", b"%d" % redirect,
                              *([b"null"] if keys is None else [b"keys", *keys])],
                             lambda answers: None if b"1" in answers else self._broken(s, redirect))
                return
            if target is None:
                self._broken(s, st.redirect)
                return
        assert target is not None
        _deliver(target, bool(st.redirect), keys)

    @staticmethod
    def _broken(s: Session, redirect: int) -> None:
        """The client it redirects to is gone: ``tracking-redir-broken`` (RESP3), as Redis."""
        st = s.tracking
        if st is None or st.redirect != redirect:
            return
        st.broken_redirect = True
        if s.proto == 3:
            s.write_raw(push_header(2, 3) + bulk(b"tracking-redir-broken") + integer(redirect))
            s.flush_output()

    # --- the feeds ---------------------------------------------------------------------------
    async def wait_feeds(self) -> None:
        """Until every master has a feed (bounded by twice the connect timeout)."""
        topology = self.proxy.router.topology
        with trio.move_on_after(self.proxy.settings.connect_timeout_ms / 1000 * 2):
            while not set(topology.slot_map.masters) <= self.connected:
                await self.feed_up.wait()

    async def _manage(self) -> None:
        """Feeds to exactly the current masters while any client tracks."""
        topology = self.proxy.router.topology
        while self.clients:
            async with trio.open_nursery() as nursery:
                while self.clients:
                    masters = set(topology.slot_map.masters)
                    for node in masters - set(self.feeds):
                        self.feeds[node] = trio.CancelScope()
                        nursery.start_soon(self._feed, node, self.feeds[node])
                    for node in set(self.feeds) - masters:
                        self.feeds.pop(node).cancel()
                    self.changed = trio.Event()
                    await topology.refreshed_or(self.changed)
                # Nobody tracks: the feeds stop, with no one to tell. Marked down at once, so
                # that a client enabling tracking while they close waits for new ones (the
                # loop around starts them) and is not sent the old feeds' loss.
                self.connected.clear()
                for scope in self.feeds.values():
                    scope.cancel()
                self.feeds.clear()
        self.running = False

    async def _feed(self, node: str, scope: trio.CancelScope) -> None:
        first = True
        with scope:
            while True:
                try:
                    await self._read_feed(node, first)
                except (OSError, trio.TooSlowError, trio.BrokenResourceError,
                        ValueError) as exc:
                    log.debug("tracking feed from %s: %s", node, exc)
                finally:
                    if node in self.connected:
                        self.connected.discard(node)
                        self.invalidate(None)  # changes may be missed from now on
                first = False
                await trio.sleep(_FEED_RETRY_S)

    async def _read_feed(self, node: str, first: bool) -> None:
        s = self.proxy.settings
        stream = await connect(node, s, self.proxy.metrics)
        async with stream:
            await stream.send_all(HELLO3 + _FEED_ON)
            framer = ReplyFramer()
            answered = 0
            while True:
                data = await stream.receive_some(RECV_BUFFER_BYTES)
                if not data:
                    raise trio.BrokenResourceError(f"{node} closed the tracking feed")
                framer.feed(data)
                for type_byte, raw in framer.frames():
                    if answered < 2:
                        if type_byte == ord("-"):
                            raise ValueError(raw.decode("utf-8", "replace").strip())
                        answered += 1
                        if answered == 2:
                            self.connected.add(node)
                            self.feed_up.set()
                            self.feed_up = trio.Event()
                            if not first:
                                self.invalidate(None)
                        continue
                    self._on_push(raw)

    def _on_push(self, raw: bytes) -> None:
        reader = hiredis.Reader()
        reader.feed(raw)
        value = reader.gets()
        if isinstance(value, list) and len(value) == 2 and value[0] == _INVALIDATE:
            keys = value[1]
            self.invalidate([k for k in keys if isinstance(k, bytes)]
                            if isinstance(keys, list) else None)


def _deliver(target: Session, redirected: bool, keys: list[bytes] | None) -> None:
    if target.proto == 3:
        head = push_header(2, 3) + bulk(_INVALIDATE)
    elif redirected and target.sub.link is not None:
        head = push_header(3, 2) + bulk(b"message") + bulk(_CHANNEL)
    else:
        return  # RESP2 without a redirect: nothing can carry it (as in Redis)
    body = null(target.proto) if keys is None else (
        array_header(len(keys)) + b"".join(bulk(k) for k in keys))
    target.write_raw(head + body)
    target.flush_output()


def asked_redirect(proxy: Proxy, args: list[bytes]) -> list[bytes]:
    """Another worker's invalidation for a client of this one (its REDIRECT target): ``1``
    when that client is here (delivered if it can be), else ``0``."""
    target_id = int(args[0]) if args and args[0].isdigit() else -1
    target = next((c for c in proxy.sessions if c.id == target_id), None)
    if target is None:
        return [b"0"]
    _deliver(target, True, None if args[1:2] == [b"null"] else args[2:])
    return [b"1"]


def asked_has(proxy: Proxy, args: list[bytes]) -> list[bytes]:
    """Whether a client of this id is here (another worker's CLIENT TRACKING REDIRECT)."""
    return [b"1" if any(args[:1] == [b"%d" % c.id] for c in proxy.sessions) else b"0"]


# --- the CLIENT subcommands ---------------------------------------------------------------------
def _full(s: RouteSession) -> Session:
    return s  # type: ignore[return-value]  # route code's view of the session is the session


def _parse_id(raw: bytes) -> int:
    digits = raw[1:] if raw[:1] == b"-" else raw
    if not digits.isdigit() or len(raw) > 20:
        raise args.TrackingError(errors.NOT_INTEGER)
    return int(raw)


def client_tracking(s: RouteSession, argv: list[bytes]) -> bytes:
    me = _full(s)
    tracker = me.proxy.tracker
    siblings = me.proxy.siblings
    here: list[bool] = []

    def exists(i: int) -> bool:
        here.append(any(c.id == i for c in me.proxy.sessions))
        return here[-1] or (siblings is not None and i > 0)  # (then asked below)

    try:
        o = args.parse(argv, _parse_id, exists, me.tracking)
    except args.TrackingError as exc:
        return error_frame(str(exc))
    if not o.on:
        tracker.disable(me)
        return OK
    elsewhere = siblings is not None and o.redirect != 0 and not here[-1]
    if not elsewhere:
        tracker.enable(me, o)
    slot = s.new_slot("client|tracking")

    async def answer() -> None:
        if elsewhere:  # on once the other workers said the client is there
            assert siblings is not None
            if b"1" not in await siblings.ask_all([b"HAS", b"%d" % o.redirect]):
                slot(error_frame(args.REDIRECT_MISSING))
                me.flush_output()
                return
            tracker.enable(me, o)
        await tracker.wait_feeds()
        slot(OK)
        me.flush_output()

    me.router.nursery.start_soon(answer)
    return ANSWERED


def client_caching(s: RouteSession, argv: list[bytes]) -> bytes:
    me = _full(s)
    try:
        args.check_caching(me.tracking, argv[2])
    except args.TrackingError as exc:
        return error_frame(str(exc))
    assert me.tracking is not None
    me.tracking.caching = True
    return OK


def client_getredir(s: RouteSession, argv: list[bytes]) -> bytes:
    st = _full(s).tracking
    return integer(-1 if st is None else st.redirect)


def client_trackinginfo(s: RouteSession, argv: list[bytes]) -> bytes:
    return args.info_reply(_full(s).tracking, s.proto)


def reset(s: RouteSession) -> None:
    """RESET (and a closed connection): tracking off."""
    me = _full(s)
    me.proxy.tracker.disable(me)


HANDLERS: dict[str, Callable[[RouteSession, list[bytes]], bytes]] = {
    "client|tracking": client_tracking,
    "client|caching": client_caching,
    "client|getredir": client_getredir,
    "client|trackinginfo": client_trackinginfo,
}
