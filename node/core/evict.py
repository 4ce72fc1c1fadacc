"""maxmemory: the used-memory estimate, eviction with Redis' sampling, and the OOM refusal.

Used memory is not the process size (a Python process holds far more than its data): it is the
keyspace as node/core/memory.py accounts it (the figure MEMORY USAGE gives), estimated without
touching the write path: the number of keys times the mean accounted size of a random sample of
keys, plus the keyspace tables' overhead. The mean is re-sampled after every ``RESAMPLE_WRITES``
changes (``Keyspace.dirty``) and whenever INFO asks.

While ``maxmemory`` is set, a command check (node/core/dispatch.py) runs before every command,
as Redis' processCommand calls performEvictions: if used memory is over the limit, keys are
evicted by ``maxmemory-policy`` until it is not or nothing is evictable; a command flagged
deny-oom (or any command queued in MULTI) is then refused with ``OOM``. Candidates are picked as
Redis does: ``maxmemory-samples`` random keys per database feed a pool of the best 16, and the
best of the pool is evicted. Nothing is evicted (and nothing refused) during CLIENT PAUSE or on a
replica with ``replica-ignore-maxmemory``.
"""

from __future__ import annotations

import random
import time
from typing import TYPE_CHECKING

from slotgate.node.core import lru, memory
from slotgate.node.core.keyspace import NOTIFY_EVICTED, Database

if TYPE_CHECKING:
    from slotgate.node.commands.registry import Command
    from slotgate.node.core.client import Client
    from slotgate.node.core.server import Server

OOM = b"-OOM command not allowed when used memory > 'maxmemory'.\r\n"
POOL_SIZE = 16  # EVPOOL_SIZE
MEAN_SAMPLES = 16  # keys sampled for the mean accounted size
USAGE_SAMPLES = 5  # elements sampled per aggregate value (MEMORY USAGE's default)
RESAMPLE_WRITES = 1024
# commands never refused in MULTI (they end or leave the transaction)
_MULTI_ALWAYS = frozenset({"exec", "discard", "quit", "reset"})
POLICIES = frozenset({"noeviction", "allkeys-lru", "allkeys-lfu", "allkeys-random",
                      "volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl"})


class Evictor:
    """The server's maxmemory state: the used-memory estimate and the eviction pool."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.evicted_keys = 0
        self.maxmemory_bytes = 0
        self.policy = "noeviction"
        self.samples = 5
        self.mean_entry_bytes = 0
        self.peak_bytes = 0  # the highest used-memory estimate seen (MEMORY DOCTOR's peak)
        self._mean_dirty = -RESAMPLE_WRITES
        self._mean_keys = 0
        # per database: a shuffled snapshot of its keys (or expiring keys) and a position
        self._snaps: dict[tuple[int, bool], tuple[list[bytes], int]] = {}
        self._pool: list[tuple[int, int, bytes]] = []  # (score, db index, key), best last
        self._rng = random.Random()
        # the fast path skips the check of a deny-oom command until ``Keyspace.dirty`` reaches
        # this: the writes that fit, at the mean entry size, in the room left under the limit
        self.next_check_dirty = 0

    # -- configuration ----------------------------------------------------------------------
    def configure(self) -> None:
        cfg = self.server.config
        self.maxmemory_bytes = int(cfg.get("maxmemory"))
        self.policy = str(cfg.get("maxmemory-policy"))
        self.samples = int(cfg.get("maxmemory-samples"))
        self.next_check_dirty = 0
        self.server.oom_check = self.check if self.maxmemory_bytes > 0 else None

    # -- used memory --------------------------------------------------------------------------
    def sample_keys(self, db: Database, volatile: bool, count: int) -> list[bytes]:
        """Up to ``count`` random live keys of ``db`` (with a TTL if ``volatile``), from a
        shuffled snapshot refreshed when used up or when the database has outgrown it."""
        table = db.expires if volatile else db.data
        if not table:
            return []
        snap, pos = self._snaps.get((db.index, volatile), ([], 0))
        out: list[bytes] = []
        misses = 0
        stale = abs(len(table) - len(snap)) > len(snap) // 2 + 16
        while len(out) < count and len(out) < len(table):
            if stale or pos >= len(snap):  # used up, or mostly gone or grown: take a new one
                snap, pos, stale, misses = list(table), 0, False, -len(table)
                self._rng.shuffle(snap)
            key = snap[pos]
            pos += 1
            if key in table:
                out.append(key)
            else:
                misses += 1
                stale = misses > count + 8
        self._snaps[(db.index, volatile)] = (snap, pos)
        return out

    def _resample_mean(self) -> None:
        ks = self.server.ks
        total = n = 0
        for db in ks.dbs:
            if not db.data:
                continue
            for key in self.sample_keys(db, False, MEAN_SAMPLES):
                value = db.data[key]
                total += memory.usage(key, value, db.encoding(key, value), USAGE_SAMPLES,
                                      int(self.server.config.get("list-max-listpack-size")),
                                      ks.cluster)
                n += 1
        self.mean_entry_bytes = total // n if n else 0
        self._mean_dirty = ks.dirty
        self._mean_keys = sum(len(db.data) for db in ks.dbs)

    def used_bytes(self, fresh: bool = False) -> int:
        """The used-memory estimate (INFO used_memory, compared with maxmemory): keys times
        the mean accounted entry, the keyspace tables' overhead included."""
        ks = self.server.ks
        n_keys = sum([len(db.data) for db in ks.dbs])
        if fresh or ks.dirty - self._mean_dirty >= RESAMPLE_WRITES or (
                n_keys > 2 * self._mean_keys):
            self._resample_mean()
            overhead = sum([memory.dict_overhead(len(db.data)) + memory.dict_overhead(len(db.expires))
                            for db in ks.dbs])
            self.mean_entry_bytes += overhead // n_keys if n_keys else 0
        used = n_keys * self.mean_entry_bytes
        if used > self.peak_bytes:
            self.peak_bytes = used
        return used

    # -- the command check ------------------------------------------------------------------
    def check(self, c: Client, cmd: Command, argv: list[bytes]) -> bytes | None:
        srv = self.server
        if c.is_master or srv.pause.kind:
            return None  # CLIENT PAUSE: eviction paused; our master's writes are applied
        repl = srv.replication
        if repl is not None and repl.role == "slave" and srv.config.get("replica-ignore-maxmemory"):
            return None
        ks = srv.ks
        # INFO reports the figure this check compares: sampled afresh here, reused by INFO
        used = self.used_bytes(fresh=cmd.full_name == "info")
        if used <= self.maxmemory_bytes or self.evict():
            room = self.maxmemory_bytes - self.used_bytes()
            mean = max(self.mean_entry_bytes, 64)
            self.next_check_dirty = ks.dirty + max(0, min(room // mean // 2, RESAMPLE_WRITES))
            return None
        self.next_check_dirty = ks.dirty
        deny = _denies(c, cmd, argv)
        if c.multi is not None:
            if cmd.full_name == "exec":
                deny = any(_denies(c, q, q_argv) for q, q_argv in c.multi)
            elif cmd.full_name not in _MULTI_ALWAYS:
                deny = True
        return OOM if deny else None

    # -- eviction ------------------------------------------------------------------------------
    def evict(self) -> bool:
        """performEvictions: evict until used memory is under the limit; False if keys ran out."""
        if self.policy not in POLICIES or self.policy == "noeviction":
            return False
        ks = self.server.ks
        while True:
            picked = self._pick()
            if picked is None:
                return False
            db, key = picked
            self.evict_key(db, key)
            # the estimate after removing one key of the mean size
            if self.used_bytes() <= self.maxmemory_bytes:
                return True
            if not any(db.data for db in ks.dbs):
                return False

    def evict_key(self, db: Database, key: bytes) -> None:
        ks = self.server.ks
        db.delete(key)
        self.evicted_keys += 1
        ks.dirty += 1
        db.notify(NOTIFY_EVICTED, b"evicted", key)
        lazy = self.server.config.get("lazyfree-lazy-eviction")
        ks.propagate(db.index, [b"UNLINK" if lazy else b"DEL", key])

    def _pick(self) -> tuple[Database, bytes] | None:
        volatile = self.policy.startswith("volatile-")
        ks = self.server.ks
        if self.policy.endswith("-random"):
            dbs = [db for db in ks.dbs if (db.expires if volatile else db.data)]
            while dbs:
                db = self._rng.choice(dbs)
                keys = self.sample_keys(db, volatile, 1)
                if keys:
                    return db, keys[0]
                dbs.remove(db)
            return None
        for db in ks.dbs:
            if db.expires if volatile else db.data:
                for key in self.sample_keys(db, volatile, self.samples):
                    self._pool_insert(self._score(db, key), db.index, key)
        pool = self._pool
        while pool:  # the best entry whose key still exists
            _, index, key = pool.pop()
            db = ks.dbs[index]
            if key in (db.expires if volatile else db.data):
                return db, key
        return None

    def _score(self, db: Database, key: bytes) -> int:
        """Higher is evicted first: idle seconds, 255 - LFU counter, or nearness of the TTL."""
        if self.policy.endswith("-ttl"):
            return -db.expires[key]
        ks = self.server.ks
        field = db.access.get(key, 0)
        if self.policy.endswith("-lfu"):
            return 255 - lru.lfu_counter(field, time.time(), ks.lfu_decay_time_min)
        return lru.idle_s(field, ks.lru_clock)

    def _pool_insert(self, score: int, index: int, key: bytes) -> None:
        pool = self._pool
        for i, (_, idx, k) in enumerate(pool):
            if idx == index and k == key:
                del pool[i]
                break
        if len(pool) >= POOL_SIZE:
            if score <= pool[0][0]:
                return
            del pool[0]
        pool.append((score, index, key))
        pool.sort(key=lambda e: e[0])


def install(srv: Server) -> None:
    ev = Evictor(srv)
    srv.evictor = ev
    srv.config_hooks.append(ev.configure)


def _denies(c: Client, cmd: Command, argv: list[bytes]) -> bool:
    """Whether ``cmd`` is refused when out of memory: its deny-oom flag, or for a script
    command what its script's flags make of it (``Command.denyoom_of``)."""
    decide = cmd.denyoom_of
    if decide is None:
        return cmd.denyoom
    return decide(c, argv)
