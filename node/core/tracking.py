"""Client-side caching: the tracking table and the invalidation messages (Redis' tracking.c).

Sans-IO: invalidations are frames appended to clients' output (``Client.out`` + ``wake``).

Two kinds of tracking clients (``ClientTracking`` on ``Client.tracking``; None: off):

- default mode: the keys a client read (read-only commands, after ``CLIENT CACHING`` under
  OPTIN/OPTOUT) go into ``Tracking.table`` (key -> ids of the clients that read it). A change
  of the key sends each of those clients one ``invalidate`` message and forgets the key.
- BCAST: a client registers prefixes (``Tracking.prefixes``); every changed key under a
  prefix is collected and sent, per prefix, once the current batch of commands is over (as
  Redis sends them in beforeSleep).

The keyspace tells us of a change through ``Database.invalidator`` (node/core/keyspace.py): it is
None while nothing is tracked, so a node without tracking clients pays one ``is None`` check
per write. Messages go to the tracking client as a RESP3 push, or to its REDIRECT client: a
RESP3 push too, or for a RESP2 client in Pub/Sub mode a message on ``__redis__:invalidate``.
A message for the client whose own command changed the key goes after that command's reply.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from slotgate.protocol.commands import GetKeysError, get_keys
from slotgate.protocol.resp import array_header, bulk, integer

if TYPE_CHECKING:
    from slotgate.node.commands.registry import Command
    from slotgate.node.core.client import Client
    from slotgate.node.core.server import Server

_PUSH_INVALIDATE = b">2\r\n$10\r\ninvalidate\r\n"
_MESSAGE_INVALIDATE = b"*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n"
_SCRIPTS_RO = frozenset({"eval_ro", "evalsha_ro", "fcall_ro"})
_PUSH_REDIR_BROKEN = b">2\r\n$21\r\ntracking-redir-broken\r\n"
_FLUSH_NULL = {2: b"$-1\r\n", 3: b"_\r\n"}
_LIMIT_EFFORT = 100  # keys invalidated per over-the-limit round, times the rounds in a row


class ClientTracking:
    """One client's CLIENT TRACKING state (Redis' CLIENT_TRACKING_* flags)."""

    __slots__ = ("bcast", "optin", "optout", "noloop", "caching", "broken_redirect",
                 "redirect", "prefixes")

    def __init__(self) -> None:
        self.bcast = False
        self.optin = False
        self.optout = False
        self.noloop = False
        self.caching = False  # CLIENT CACHING yes (OPTIN) / no (OPTOUT) for the next command
        self.broken_redirect = False
        self.redirect = 0  # client id, 0: none
        self.prefixes: list[bytes] = []  # BCAST prefixes in the order given


class _Bcast:
    """One BCAST prefix: its clients and the keys changed under it since the last send
    (key -> the client whose command changed it, None for expiry and the like)."""

    __slots__ = ("clients", "keys")

    def __init__(self) -> None:
        self.clients: dict[Client, None] = {}
        self.keys: dict[bytes, Client | None] = {}


class Tracking:
    """The server's tracking table, BCAST prefixes and message delivery."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.table: dict[bytes, dict[int, None]] = {}  # key -> ids of clients that read it
        self.items = 0  # (key, client) pairs in ``table`` (INFO tracking_total_items)
        self.prefixes: dict[bytes, _Bcast] = {}
        self.clients = 0  # clients with tracking on (INFO tracking_clients)
        # The tracking client whose command runs now (NOLOOP; its messages follow its reply)
        self.current: Client | None = None
        self.pending: list[bytes | None] = []  # keys (None: a flush) for ``current``
        self.tail: list[bytes] = []  # frames for ``current``, sent after its reply
        # A script of ``current`` runs: its writes count as the script client's (BCAST NOLOOP
        # skips only a client's own commands; per-key NOLOOP still looks at ``current``)
        self.in_script = False
        self.flush_scheduled = False
        self.over_limit_rounds = 0

    # -- switching tracking on and off ---------------------------------------------------
    def enable(self, c: Client, redirect: int, bcast: bool, optin: bool, optout: bool,
               noloop: bool, prefixes: list[bytes]) -> None:
        st = c.tracking
        if st is None:
            st = ClientTracking()
            self.clients += 1
        st.broken_redirect = False
        st.redirect = redirect
        st.bcast, st.optin, st.optout, st.noloop = bcast, optin, optout, noloop
        if bcast:
            for prefix in prefixes or [b""]:
                bs = self.prefixes.get(prefix)
                if bs is None:
                    bs = self.prefixes[prefix] = _Bcast()
                if c not in bs.clients:
                    bs.clients[c] = None
                    st.prefixes.append(prefix)
        c.set_tracking(st)
        self._refresh_hook()

    def disable(self, c: Client) -> None:
        st = c.tracking
        if st is None:
            return
        for prefix in st.prefixes:
            bs = self.prefixes.get(prefix)
            if bs is not None:
                bs.clients.pop(c, None)
                if not bs.clients:
                    del self.prefixes[prefix]
        self.clients -= 1
        c.set_tracking(None)
        self._refresh_hook()

    def _refresh_hook(self) -> None:
        """Point every database at us while anything is tracked (else None: no cost)."""
        active = self if (self.clients or self.table or self.prefixes) else None
        for db in self.server.ks.dbs:
            db.invalidator = active

    # -- remembering reads ----------------------------------------------------------------
    def remember(self, c: Client, cmd: Command, argv: list[bytes]) -> None:
        """trackingRememberKeys: the keys of a read-only command ``c`` ran. The read-only
        script commands are left to the commands their script runs (``remember_for_script``)."""
        st = c.tracking
        if st is None or st.bcast or "readonly" not in cmd.flags or "pubsub" in cmd.flags:
            return
        if cmd.full_name in _SCRIPTS_RO:
            return
        try:
            keys = get_keys(argv)
        except GetKeysError:
            return
        self._remember_keys(c, st, keys)

    def remember_for_script(self, caller: Client, keys: list[bytes]) -> None:
        """A script of ``caller`` ran a read-only command: Redis 7.0 remembers the keys of
        the caller's command (the script's declared keys), whatever the script read."""
        st = caller.tracking
        if st is not None and not st.bcast:
            self._remember_keys(caller, st, keys)

    def _remember_keys(self, c: Client, st: ClientTracking, keys: list[bytes]) -> None:
        if (st.optin and not st.caching) or (st.optout and st.caching):
            return
        table = self.table
        for key in keys:
            ids = table.get(key)
            if ids is None:
                ids = table[key] = {}
            if c.id not in ids:
                ids[c.id] = None
                self.items += 1
        max_keys = int(self.server.config.get("tracking-table-max-keys"))
        if max_keys and len(table) > max_keys:
            self._schedule()

    # -- around a tracking client's command (node/core/dispatch.py) -----------------------
    def begin(self, c: Client) -> None:
        self.current = c

    def end(self, c: Client, cmd: Command, reply: bytes) -> bytes:
        """After ``c``'s command: reset CLIENT CACHING, then its own invalidations, which
        follow the reply."""
        st = c.tracking
        if st is not None and c.multi is None and cmd.full_name.split("|")[0] != "client":
            st.caching = False
        pending = self.pending
        if pending:
            self.pending = []
            for key in pending:
                if c.tracking is not None:
                    self.send(c, _FLUSH_NULL[c.resp] if key is None else _one_key(key))
        self.current = None
        tail = self.tail
        if not tail:
            return reply
        self.tail = []
        if type(reply) is bytes and reply:
            return reply + b"".join(tail)
        c.out.extend(tail)  # blocked (or no reply): the messages go out with what comes next
        return reply

    # -- the keyspace's signals -------------------------------------------------------------
    def key_changed(self, key: bytes, expired: bool = False) -> None:
        """signalModifiedKey / an expired or evicted key: invalidate ``key``."""
        current = self.current
        if self.prefixes:
            self._remember_for_bcast(key, None if expired or self.in_script else current)
        ids = self.table.pop(key, None)
        if ids is None:
            return
        self.items -= len(ids)
        clients = self.server.clients
        for cid in ids:
            target = clients.get(cid)
            if target is None:
                continue
            st = target.tracking
            if st is None or st.bcast:
                continue
            if target is current:
                if not st.noloop:
                    self.pending.append(key)
                continue
            self.send(target, _one_key(key))
        if not self.table and not self.clients and not self.prefixes:
            self._refresh_hook()

    def flushed(self, everything: bool) -> None:
        """FLUSHDB / FLUSHALL: every tracking client gets a null invalidation."""
        current = self.current
        for c in list(self.server.clients.values()):
            if c.tracking is None:
                continue
            if c is current:
                self.pending.append(None)
            else:
                self.send(c, _FLUSH_NULL[c.resp])
        if everything:
            self.table = {}
            self.items = 0
            self._refresh_hook()

    def _remember_for_bcast(self, key: bytes, by: Client | None) -> None:
        for prefix, bs in self.prefixes.items():
            if key.startswith(prefix):
                bs.keys[key] = by
                self._schedule()

    # -- delivery ---------------------------------------------------------------------------
    def send(self, c: Client, value: bytes) -> None:
        """sendTrackingMessage: ``value`` (an array of keys, or a null) to ``c`` or its
        redirect client."""
        st = c.tracking
        assert st is not None
        target = c
        redirected = False
        if st.redirect:
            r = self.server.clients.get(st.redirect)
            if r is None:
                st.broken_redirect = True
                if c.resp > 2:
                    self._deliver(c, _PUSH_REDIR_BROKEN + integer(st.redirect))
                return
            target, redirected = r, True
        if target.resp > 2:
            self._deliver(target, _PUSH_INVALIDATE + value)
        elif redirected and target.subscriptions:
            self._deliver(target, _MESSAGE_INVALIDATE + value)

    def _deliver(self, target: Client, frame: bytes) -> None:
        if target is self.current:
            self.tail.append(frame)
            return
        if target.killed:
            return
        target.out.append(frame)
        if target.blocked is None:
            target.wake()

    # -- after the batch: BCAST messages and the table's size limit ---------------------------
    def _schedule(self) -> None:
        if self.flush_scheduled:
            return
        nursery = self.server.nursery
        if nursery is None:
            return
        self.flush_scheduled = True
        nursery.start_soon(self._after_batch)

    async def _after_batch(self) -> None:
        self.flush_scheduled = False
        self.broadcast()
        self.limit_keys()

    def broadcast(self) -> None:
        """trackingBroadcastInvalidationMessages: per prefix, the keys changed since last time."""
        for prefix in sorted(self.prefixes):
            bs = self.prefixes[prefix]
            if not bs.keys:
                continue
            keys = sorted(bs.keys)
            changed = bs.keys
            bs.keys = {}
            common = array_header(len(keys)) + b"".join(bulk(k) for k in keys)
            for c in list(bs.clients):
                st = c.tracking
                if st is None:
                    continue
                if st.noloop:
                    mine = [k for k in keys if changed[k] is not c]
                    if mine:
                        self.send(c, array_header(len(mine)) + b"".join(bulk(k) for k in mine))
                else:
                    self.send(c, common)

    def limit_keys(self) -> None:
        """trackingLimitUsedSlots: over ``tracking-table-max-keys``, invalidate random keys
        (more effort each round the table stays over it)."""
        max_keys = int(self.server.config.get("tracking-table-max-keys"))
        if not max_keys or len(self.table) <= max_keys:
            self.over_limit_rounds = 0
            return
        effort = _LIMIT_EFFORT * (self.over_limit_rounds + 1)
        current, self.current = self.current, None
        try:
            while effort > 0 and self.table:
                effort -= 1
                self.key_changed(random.choice(list(self.table)) if len(self.table) < 64
                                 else _random_key(self.table))
                if len(self.table) <= max_keys:
                    self.over_limit_rounds = 0
                    return
        finally:
            self.current = current
        self.over_limit_rounds += 1


def _one_key(key: bytes) -> bytes:
    return b"*1\r\n" + bulk(key)


def _random_key(table: dict[bytes, dict[int, None]]) -> bytes:
    idx = random.randrange(len(table))
    it = iter(table)
    for _ in range(idx):
        next(it)
    return next(it)
