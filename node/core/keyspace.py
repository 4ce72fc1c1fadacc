"""The data: databases of keys, expiry, the per-slot key index, WATCH and blocking registries.

Sans-IO: nothing here awaits. Value storage by type (see ``TYPES``):

- a string is a plain ``bytes`` object (immutable; SET replaces it, APPEND builds a new one);
- every other type is a mutable Python object of a class registered with ``register_type``
  (lists, hashes, sets, sorted sets add their own classes in their command modules).

``type(value) is bytes`` is the string check on hot paths. A key never holds an empty
container: the command that empties one deletes the key (as Redis does).

Write discipline (what a command that changes a key must do — see node/commands/__init__.py):
``db.set(key, value)`` / ``db.delete(key)`` already signal the modification; after changing a
mutable value in place call ``db.modified(key)``; after pushing to a list/zset/stream that
clients may block on call ``db.signal_ready(key)``; count changes with ``ks.dirty += n``;
emit keyspace events with ``db.notify(flag, event, key)``.
"""

from __future__ import annotations

import random
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from slotgate.node.core import lru
from slotgate.protocol.slots import key_slot

if TYPE_CHECKING:
    from slotgate.node.core.client import Client
    from slotgate.node.core.tracking import Tracking

# --- value types -----------------------------------------------------------------------------


class TypeInfo:
    """What the generic commands need to know about one value type."""

    __slots__ = ("name", "encoding", "digest", "copy")

    def __init__(
        self,
        name: bytes,
        encoding: Callable[[Any], bytes],
        digest: Callable[[Any], bytes],
        copy: Callable[[Any], Any],
    ) -> None:
        self.name = name  # TYPE reply, e.g. b"list"
        self.encoding = encoding  # OBJECT ENCODING reply
        self.digest = digest  # DEBUG DIGEST(-VALUE): bytes mixed into the digest
        self.copy = copy  # COPY: a deep-enough copy of the value


TYPES: dict[type, TypeInfo] = {}


def register_type(
    cls: type,
    name: bytes,
    encoding: Callable[[Any], bytes],
    digest: Callable[[Any], bytes],
    copy: Callable[[Any], Any],
) -> None:
    """Register a value class so TYPE, OBJECT ENCODING, SCAN TYPE, COPY and DEBUG DIGEST know it."""
    TYPES[cls] = TypeInfo(name, encoding, digest, copy)


LONG_MIN = -(2**63)
LONG_MAX = 2**63 - 1


def is_strict_int(s: bytes) -> bool:
    """True when Redis would store ``s`` with the "int" encoding (string2ll round-trips)."""
    if not s or len(s) > 20:
        return False
    try:
        n = int(s)
    except ValueError:
        return False
    return LONG_MIN <= n <= LONG_MAX and str(n).encode() == s


def _string_encoding(s: bytes) -> bytes:
    if len(s) <= 20 and is_strict_int(s):
        return b"int"
    return b"embstr" if len(s) <= 44 else b"raw"


register_type(bytes, b"string", _string_encoding, lambda s: s, lambda s: s)

# --- keyspace events (notify-keyspace-events flag bits, as Redis defines them) ---------------
NOTIFY_KEYSPACE = 1 << 0  # K
NOTIFY_KEYEVENT = 1 << 1  # E
NOTIFY_GENERIC = 1 << 2  # g
NOTIFY_STRING = 1 << 3  # $
NOTIFY_LIST = 1 << 4  # l
NOTIFY_SET = 1 << 5  # s
NOTIFY_HASH = 1 << 6  # h
NOTIFY_ZSET = 1 << 7  # z
NOTIFY_EXPIRED = 1 << 8  # x
NOTIFY_EVICTED = 1 << 9  # e
NOTIFY_STREAM = 1 << 10  # t
NOTIFY_KEY_MISS = 1 << 11  # m
NOTIFY_NEW = 1 << 14  # n


def now_ms() -> int:
    return int(time.time() * 1000)


class Database:
    """One numbered database: ``data`` (key -> value) and ``expires`` (key -> unix ms)."""

    __slots__ = ("ks", "index", "data", "expires", "watched", "blocking", "slots", "str_enc",
                 "invalidator", "access")

    def __init__(self, ks: Keyspace, index: int, slot_index: bool) -> None:
        self.ks = ks
        self.index = index
        self.data: dict[bytes, Any] = {}
        self.expires: dict[bytes, int] = {}
        # WATCH: key -> {client: key_was_already_expired_when_watched}
        self.watched: dict[bytes, dict[Client, bool]] = {}
        # blocked clients per key, in the order they blocked (Redis serves FIFO)
        self.blocking: dict[bytes, deque[Client]] = {}
        # cluster mode only: slot -> keys (an insertion-ordered dict used as a set)
        self.slots: dict[int, dict[bytes, None]] | None = {} if slot_index else None
        # strings whose Redis encoding is not what their bytes imply: "raw" (APPEND, SETRANGE,
        # SETBIT, BITOP, BITFIELD) or "embstr" for a number INCRBYFLOAT wrote. Only for
        # OBJECT ENCODING / DEBUG OBJECT; dropped whenever the key is set or removed.
        self.str_enc: dict[bytes, bytes] = {}
        # client-side caching (node/core/tracking.py): None while nothing is tracked
        self.invalidator: Tracking | None = None
        # key -> LRU clock or LFU word of its last access (node/core/lru.py)
        self.access: dict[bytes, int] = {}

    # -- reads ---------------------------------------------------------------------------
    def lookup(self, key: bytes) -> Any:
        """The live value of ``key`` or None; an expired key is deleted on the way (lazy expiry)."""
        v = self.data.get(key)
        if v is None:
            return None
        if self.expires:
            when = self.expires.get(key)
            if when is not None and when <= now_ms() and self.ks.expire_enabled:
                if not self.ks.expire_paused:  # CLIENT PAUSE: expired, but kept until the end
                    self.expire_now(key)
                return None
        ks = self.ks
        if ks.lfu:
            ks.lfu_touch(self, key)
        else:
            self.access[key] = ks.lru_clock
        return v

    def touch(self, key: bytes) -> None:
        """Record an access to ``key`` (for paths that read ``data`` without ``lookup``)."""
        ks = self.ks
        if ks.lfu:
            ks.lfu_touch(self, key)
        else:
            self.access[key] = ks.lru_clock

    def set_access_info(self, key: bytes, idle_s: int | None, freq: int | None) -> None:
        """RESTORE IDLETIME / FREQ (objectSetLRUOrLFU): FREQ counts under an LFU policy,
        IDLETIME under any other."""
        ks = self.ks
        if ks.lfu:
            if freq is not None:
                self.access[key] = lru.lfu_with_counter(time.time(), freq)
        elif idle_s is not None:
            self.access[key] = lru.lru_idle_since(ks.lru_clock, idle_s)

    def lookup_notouch(self, key: bytes) -> Any:
        """``lookup`` that leaves the access clock alone (OBJECT, as LOOKUP_NOTOUCH)."""
        field = self.access.get(key)
        v = self.lookup(key)
        if v is not None and field is not None:
            self.access[key] = field
        return v

    def lookup_read(self, key: bytes) -> Any:
        """``lookup`` that also counts keyspace hits/misses (INFO stats), for read commands;
        a miss is also the ``keymiss`` event (class ``m``), as in Redis' lookupKey."""
        v = self.lookup(key)
        if v is None:
            ks = self.ks
            ks.keyspace_misses += 1
            if ks.notify_flags & NOTIFY_KEY_MISS:
                self.notify(NOTIFY_KEY_MISS, b"keymiss", key)
        else:
            self.ks.keyspace_hits += 1
        return v

    def exists(self, key: bytes) -> bool:
        return self.lookup(key) is not None

    def get_expire(self, key: bytes) -> int | None:
        """Absolute unix ms of ``key``'s expiry, or None (caller has looked the key up)."""
        return self.expires.get(key) if self.expires else None

    # -- writes --------------------------------------------------------------------------
    def set(self, key: bytes, value: Any, keep_ttl: bool = False) -> None:
        """setKey: store ``value`` (new or overwrite), drop the TTL unless ``keep_ttl``."""
        data = self.data
        if self.expires:
            if not keep_ttl:
                self.expires.pop(key, None)
            elif key in self.expires and self.expires[key] <= now_ms():
                self.expire_now(key)
        if self.slots is not None and key not in data:
            self.slots.setdefault(key_slot(key), {})[key] = None
        if self.str_enc:
            self.str_enc.pop(key, None)
        data[key] = value
        ks = self.ks
        if ks.lfu:
            ks.lfu_touch(self, key)
        else:
            self.access[key] = ks.lru_clock
        if self.watched:
            self.touch_watched(key)
        if self.invalidator is not None:
            self.invalidator.key_changed(key)
        if self.blocking and key in self.blocking:
            self.signal_ready(key)

    def delete(self, key: bytes) -> bool:
        """Remove ``key`` (value and TTL); True if it existed (expired keys count as absent)."""
        if key not in self.data:
            return False
        if self.expires and key in self.expires and self.expires[key] <= now_ms() and self.ks.expire_enabled:
            self.expire_now(key)
            return False
        self._remove(key)
        if self.watched:
            self.touch_watched(key)
        if self.invalidator is not None:
            self.invalidator.key_changed(key)
        return True

    def _remove(self, key: bytes) -> None:
        del self.data[key]
        self.access.pop(key, None)
        if self.blocking and key in self.blocking:
            self.signal_ready(key)  # a blocked XREADGROUP learns its key is gone
        if self.str_enc:
            self.str_enc.pop(key, None)
        if self.expires:
            self.expires.pop(key, None)
        if self.slots is not None:
            slot = key_slot(key)
            keys = self.slots.get(slot)
            if keys is not None:
                keys.pop(key, None)
                if not keys:
                    del self.slots[slot]

    def mark_raw(self, key: bytes) -> None:
        """The string at ``key`` now has Redis' "raw" encoding (see ``str_enc``)."""
        self.str_enc[key] = b"raw"

    def mark_encoding(self, key: bytes, encoding: bytes) -> None:
        self.str_enc[key] = encoding

    def encoding(self, key: bytes, value: Any) -> bytes:
        """OBJECT ENCODING of a live ``value`` stored at ``key``."""
        if type(value) is bytes:
            enc = self.str_enc.get(key)
            if enc is not None:
                return enc
        return TYPES[type(value)].encoding(value)

    def modified(self, key: bytes) -> None:
        """signalModifiedKey: a value was changed in place (breaks WATCH, invalidates)."""
        if self.watched:
            self.touch_watched(key)
        if self.invalidator is not None:
            self.invalidator.key_changed(key)

    def set_expire(self, key: bytes, when_ms: int) -> None:
        self.expires[key] = when_ms

    def persist(self, key: bytes) -> bool:
        return self.expires.pop(key, None) is not None if self.expires else False

    def expire_now(self, key: bytes) -> None:
        """Delete an expired key as Redis does: event, WATCH touch, DEL propagated, stats."""
        self._remove(key)
        ks = self.ks
        ks.expired_keys += 1
        self.notify(NOTIFY_EXPIRED, b"expired", key)
        if self.watched:
            self.touch_watched(key)
        if self.invalidator is not None:
            self.invalidator.key_changed(key, expired=True)
        ks.propagate(self.index, [b"DEL", key])

    def signal_ready(self, key: bytes) -> None:
        """A key clients may block on got data: queue it for the blocked-client pass."""
        if key in self.blocking:
            self.ks.ready.setdefault((self.index, key), None)

    def notify(self, flag: int, event: bytes, key: bytes) -> None:
        """notifyKeyspaceEvent; a no-op unless notify-keyspace-events enables ``flag``."""
        ks = self.ks
        if ks.notify_flags & flag and ks.notify_hook is not None:
            ks.notify_hook(flag, event, key, self.index)

    # -- WATCH ---------------------------------------------------------------------------
    def touch_watched(self, key: bytes) -> None:
        clients = self.watched.get(key)
        if not clients:
            return
        for c, was_expired in list(clients.items()):
            if was_expired:
                # Watched while already expired: its deletion is logically no change.
                if key not in self.data:
                    clients[c] = False
                    continue
            c.dirty_cas = True

    def touch_all_watched(self) -> None:
        """FLUSHDB/FLUSHALL/SWAPDB: every watched key that exists now is touched."""
        for key, clients in self.watched.items():
            if key in self.data:
                for c in clients:
                    c.dirty_cas = True

    # -- whole-db ------------------------------------------------------------------------
    def size(self) -> int:
        return len(self.data)

    def clear(self) -> int:
        """FLUSHDB: empty this database."""
        n = self._clear()
        if self.invalidator is not None:
            self.invalidator.flushed(everything=False)
        return n

    def _clear(self) -> int:
        n = len(self.data)
        self.touch_all_watched()
        for key in self.blocking:
            if key in self.data:
                self.signal_ready(key)
        self.data = {}
        self.expires = {}
        self.str_enc = {}
        self.access = {}
        if self.slots is not None:
            self.slots = {}
        return n

    def random_key(self) -> bytes | None:
        """RANDOMKEY: a random live key (expired picks are expired and retried), or None."""
        for _ in range(100):
            if not self.data:
                return None
            key = random.choice(list(self.data)) if len(self.data) < 64 else _random_dict_key(self.data)
            if self.lookup(key) is not None:
                return key
        return None

    def keys_in_slot(self, slot: int) -> dict[bytes, None]:
        assert self.slots is not None
        return self.slots.get(slot) or {}

    def count_keys_in_slot(self, slot: int) -> int:
        return len(self.slots.get(slot) or ()) if self.slots is not None else 0


def _random_dict_key(d: dict[bytes, Any]) -> bytes:
    # O(n) in the worst case but cheap in C; only RANDOMKEY uses it.
    idx = random.randrange(len(d))
    it = iter(d)
    for _ in range(idx):
        next(it)
    return next(it)


class Keyspace:
    """All databases plus the counters INFO reports and the propagation/notification hooks."""

    def __init__(self, databases: int = 16, cluster: bool = False) -> None:
        self.cluster = cluster
        self.dbs = [Database(self, i, cluster) for i in range(databases)]
        self.dirty = 0  # changes since the last save (INFO rdb_changes_since_last_save)
        self.expired_keys = 0
        self.keyspace_hits = 0
        self.keyspace_misses = 0
        self.expire_enabled = True  # DEBUG SET-ACTIVE-EXPIRE / replicas (master expires)
        self.active_expire_enabled = True
        self.expire_paused = False  # CLIENT PAUSE: expired keys stay until it ends
        # (db index, key) queued by signal_ready, served after the current command
        self.ready: dict[tuple[int, bytes], None] = {}
        self.notify_flags = 0
        self.notify_hook: Callable[[int, bytes, bytes, int], None] | None = None
        # replication/AOF: each hook gets (db index, argv) of every change, in order
        self.propagate_hooks: list[Callable[[int, list[bytes]], None]] = []
        self._expire_cursor: dict[int, tuple[Any, int]] = {}
        # OBJECT IDLETIME/FREQ (node/core/lru.py): the cron refreshes the clock and the policy.
        # (Any: compiled, an int attribute is held unboxed, and every access that stores it
        # would make an int object of its own; an Any attribute is the one object all store.)
        self.lru_clock: Any = lru.lru_clock(time.time())
        self.lfu = False  # an LFU maxmemory-policy: accesses update LFU words
        self.lfu_log_factor = 10
        self.lfu_decay_time_min = 1
        self.lfu_rng = random.Random()

    def refresh_access_clock(self, policy: str, log_factor: int, decay_time_min: int) -> None:
        """The cron's tick: the LRU clock and the LFU settings as of now."""
        self.lru_clock = lru.lru_clock(time.time())
        self.lfu = "lfu" in policy
        self.lfu_log_factor = log_factor
        self.lfu_decay_time_min = decay_time_min

    def lfu_touch(self, db: Database, key: bytes) -> None:
        db.access[key] = lru.lfu_touch(db.access.get(key), time.time(), self.lfu_log_factor,
                                       self.lfu_decay_time_min, self.lfu_rng)

    def propagate(self, db_index: int, argv: list[bytes]) -> None:
        for hook in self.propagate_hooks:
            hook(db_index, argv)

    def flushall(self) -> int:
        n = sum(db._clear() for db in self.dbs)
        tracking = self.dbs[0].invalidator
        if tracking is not None:
            tracking.flushed(everything=True)
        return n

    def swap(self, a: int, b: int) -> None:
        """SWAPDB: contents swap; clients, WATCH and blocking registries stay with the index."""
        da, db_ = self.dbs[a], self.dbs[b]
        da.touch_all_watched()
        db_.touch_all_watched()
        da.data, db_.data = db_.data, da.data
        da.expires, db_.expires = db_.expires, da.expires
        da.access, db_.access = db_.access, da.access
        da.str_enc, db_.str_enc = db_.str_enc, da.str_enc
        da.slots, db_.slots = db_.slots, da.slots
        da.touch_all_watched()
        db_.touch_all_watched()
        for d in (da, db_):
            for key in d.blocking:  # a key gone by the swap answers a blocked XREADGROUP
                d.signal_ready(key)

    def new_dbs(self) -> list[Database]:
        """Empty databases like ours, outside the keyspace (a replica's async load)."""
        return [Database(self, db.index, db.slots is not None) for db in self.dbs]

    def swap_in(self, dbs: list[Database]) -> None:
        """The contents of ``dbs`` (from ``new_dbs``) replace ours at once, as a flush then a
        load would: clients, WATCH and blocking registries stay with the index."""
        for main, new in zip(self.dbs, dbs, strict=True):
            main.touch_all_watched()
            main.data, main.expires, main.access = new.data, new.expires, new.access
            main.str_enc, main.slots = new.str_enc, new.slots
            main.touch_all_watched()
            for key in main.blocking:
                main.signal_ready(key)
        tracking = self.dbs[0].invalidator
        if tracking is not None:
            tracking.flushed(everything=True)

    def active_expire_cycle(self, budget: int = 20, max_rounds: int = 16) -> int:
        """Active expiry, like Redis' cursor walk over the expires table: per db, check the
        next ``budget`` keys of a snapshot of its expiring keys and delete the expired ones;
        keep going while more than a quarter of a batch was expired. Returns keys removed."""
        if not (self.active_expire_enabled and self.expire_enabled) or self.expire_paused:
            return 0
        removed = 0
        now = now_ms()
        for db in self.dbs:
            expires = db.expires
            if not expires:
                self._expire_cursor.pop(db.index, None)
                continue
            for _ in range(max_rounds):
                snap, pos = self._expire_cursor.get(db.index, ((), 0))
                if pos >= len(snap):
                    snap, pos = list(expires), 0
                batch = snap[pos : pos + budget]
                self._expire_cursor[db.index] = (snap, pos + len(batch))
                hit = 0
                for key in batch:
                    when = expires.get(key)
                    if when is not None and when <= now:
                        db.expire_now(key)
                        hit += 1
                removed += hit
                if hit * 4 <= len(batch):
                    break
        return removed

    def iter_keys(self, db: Database) -> Iterator[bytes]:
        return iter(list(db.data))
