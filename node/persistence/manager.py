"""Persistence: snapshots (SAVE, BGSAVE, save points) and the append-only file.

Snapshots are node/persistence/snapshot.py files named ``dbfilename`` in ``dir``; BGSAVE forks.

The append-only file follows Redis 7's multi-part layout in ``dir/appenddirname``::

    appendonly.aof.manifest          "file <name> seq <n> type b|i" lines
    appendonly.aof.<n>.base.rdb      a snapshot (the state when the last rewrite forked)
    appendonly.aof.<n>.incr.aof      RESP commands as propagated, SELECT when the db changes

Every propagated write is ``write()``-n to the current incr file before the command's reply
is queued, so a process crash (kill -9) loses no acknowledged write; ``appendfsync always``
also fsyncs there (machine crash safe), ``everysec`` fsyncs from a background task once a
second, ``no`` leaves it to the kernel.

Rewrite (BGREWRITEAOF, or automatic past auto-aof-rewrite-percentage/min-size): open a new
incr file and list it in the manifest, then fork a child that writes the new base. On
success the manifest becomes [new base, new incr] and the old files are deleted; on failure
the old base + incr files + the new incr still describe the data.

Start-up: with ``appendonly yes`` the AOF is loaded (base, then incr files in order); a tail
cut inside a command (crash during a write) is truncated away when ``aof-load-truncated
yes``, as is an unfinished MULTI block. Otherwise ``dbfilename`` is loaded if present.
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Any

import trio

from slotgate.node.commands.registry import command
from slotgate.node.commands.replies import OK
from slotgate.node.core.errors import CommandError
from slotgate.node.persistence import snapshot
from slotgate.node.persistence.aof_write import AofWriter
from slotgate.node.persistence.loading import Loader, PersistenceError
from slotgate.node.replication.apply import encode, select_cmd
from slotgate.protocol.resp import simple

if TYPE_CHECKING:
    from slotgate.node.core.client import Client
    from slotgate.node.core.server import Server

log = logging.getLogger("node.persistence")

CRON_INTERVAL_S = 0.1
BGSAVE_RETRY_DELAY_S = 5  # after a failed BGSAVE, save points wait this long (Redis: 5 s)
MANIFEST_SUFFIX = ".manifest"

ERR_BGSAVE_RUNNING = "ERR Background save already in progress"
ERR_AOF_CHILD = ("ERR Another child process is active (AOF?): can't BGSAVE right now. Use "
                 "BGSAVE SCHEDULE in order to schedule a BGSAVE whenever possible.")
ERR_REWRITE_RUNNING = "ERR Background append only file rewriting already in progress"


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class Child:
    """A forked snapshot writer."""

    __slots__ = ("pid", "path", "started", "dirty_at_fork")

    def __init__(self, pid: int, path: str, dirty_at_fork: int) -> None:
        self.pid = pid
        self.path = path
        self.started = time.monotonic()
        self.dirty_at_fork = dirty_at_fork


class Aof:
    """The multi-part append-only file: manifest, base, incr files, the open incr fd."""

    def __init__(self, dirname: str, filename: str) -> None:
        self.dir = dirname
        self.prefix = filename  # "appendonly.aof"
        self.base: str | None = None
        self.incrs: list[str] = []
        self.base_seq = 0
        self.incr_seq = 0
        self.fd: int | None = None
        self.selected_db = -1
        self.current_size = 0  # base + incr bytes
        self.base_size = 0
        self.unsynced = False

    @property
    def manifest_path(self) -> str:
        return os.path.join(self.dir, self.prefix + MANIFEST_SUFFIX)

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def read_manifest(self) -> bool:
        """Load the manifest; False when there is none. PersistenceError when malformed."""
        try:
            with open(self.manifest_path, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            return False
        for line in lines:
            if not line.strip() or line.startswith("#"):
                continue
            words = line.split()
            fields = dict(zip(words[0::2], words[1::2], strict=False))
            if "file" not in fields or fields.get("type") not in ("b", "i", "h"):
                raise PersistenceError(f"Invalid AOF manifest line: {line!r}")
            seq = int(fields.get("seq", "0"))
            if fields["type"] == "b":
                self.base, self.base_seq = fields["file"], seq
            elif fields["type"] == "i":
                self.incrs.append(fields["file"])
                self.incr_seq = max(self.incr_seq, seq)
        return True

    def write_manifest(self, base: str | None, incrs: list[str]) -> None:
        lines = []
        if base is not None:
            lines.append(f"file {base} seq {self.base_seq} type b\n")
        for name in incrs:
            seq = name.rsplit(".", 3)[-3]
            lines.append(f"file {name} seq {seq} type i\n")
        tmp = self.manifest_path + f".tmp-{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write("".join(lines))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.manifest_path)
        _fsync_dir(self.dir)
        self.base, self.incrs = base, list(incrs)

    def open_new_incr(self) -> str:
        """Start writing a new incr file (the caller updates the manifest)."""
        self.close()
        self.incr_seq += 1
        name = f"{self.prefix}.{self.incr_seq}.incr.aof"
        self.fd = os.open(self.path(name), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.selected_db = -1
        return name

    def reopen_last_incr(self) -> None:
        assert self.incrs
        self.fd = os.open(self.path(self.incrs[-1]), os.O_WRONLY | os.O_APPEND)
        self.selected_db = -1

    def sizes(self) -> None:
        def size(name: str | None) -> int:
            if name is None:
                return 0
            try:
                return os.path.getsize(self.path(name))
            except OSError:
                return 0

        self.base_size = size(self.base)
        self.current_size = self.base_size + sum(size(n) for n in self.incrs)

    def fsync(self) -> None:
        if self.fd is not None:
            os.fsync(self.fd)
        self.unsynced = False

    def close(self) -> None:
        if self.fd is not None:
            try:
                os.fsync(self.fd)
            except OSError:
                pass
            os.close(self.fd)
            self.fd = None


def _read_file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _file_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


class Persistence:
    """Snapshots + AOF for one server. Created by ``install``; ``server.persistence``."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.ks = server.ks
        self.cfg = server.config
        self.rdb_child: Child | None = None
        self.aof_child: Child | None = None
        self.aof_child_base = ""
        self._aof_for_child: Aof | None = None
        self.bgsave_scheduled = False
        self.rewrite_scheduled = False
        self.rdb_saves = 0
        self.last_bgsave_ok = True
        self.last_bgsave_try = 0.0
        self.last_bgsave_time_s = -1
        self.keys_loaded = 0
        self.keys_expired = 0
        self.loader = Loader(server)  # the loading state (loading.py)
        self.aof_loading = False  # the AOF is loaded at start-up (then attached)
        self.aof: Aof | None = None
        self.aof_rewrites = 0
        self.aof_rewrite_failures = 0
        self.aof_last_rewrite_ok = True
        self.aof_last_rewrite_time_s = -1
        self.aof_writer = AofWriter(server)  # aof_last_write_status, MISCONF (aof_write.py)
        self.fsync_policy = str(self.cfg.get("appendfsync"))
        self.save_params: list[tuple[int, int]] = []

    # -- configuration -------------------------------------------------------------------
    def on_config(self) -> None:
        self.fsync_policy = str(self.cfg.get("appendfsync"))
        words = str(self.cfg.get("save")).split()
        self.save_params = [(int(words[i]), int(words[i + 1])) for i in range(0, len(words) - 1, 2)]
        want = bool(self.cfg.get("appendonly"))
        if self.aof_loading:  # the start-up load attaches the AOF when it ends
            return
        if want and self.aof is None:
            self._start_aof_at_runtime()
        elif not want and self.aof is not None:
            self._stop_aof()

    def key_save_delay_us(self) -> int:
        """``rdb-key-save-delay``: microseconds a snapshot writer waits after each key."""
        return int(self.cfg.get("rdb-key-save-delay"))

    def rdb_path(self) -> str:
        return str(self.cfg.get("dbfilename"))

    def aof_dir(self) -> str:
        return str(self.cfg.get("appenddirname"))

    # -- start-up ------------------------------------------------------------------------
    def load_at_start(self) -> None:
        """Plan the start-up load: the AOF (appendonly yes) or the snapshot, loaded by
        ``_load_aof``/``_load_rdb`` once the server listens (clients meanwhile answered
        ``-LOADING``, node/persistence/loading.py); PersistenceError there ends the server."""
        if self.cfg.get("appendonly"):
            aof = Aof(self.aof_dir(), str(self.cfg.get("appendfilename")))
            os.makedirs(aof.dir, exist_ok=True)
            if aof.read_manifest():
                self.aof_loading = True
                self.server.loaders.append(lambda: self._load_aof(aof))
                return
            aof.write_manifest(None, [aof.open_new_incr()])
            log.info("Creating AOF incr file %s on server start", aof.incrs[-1])
            self._attach_aof(aof)
            return
        if os.path.exists(self.rdb_path()):
            self.server.loaders.append(self._load_rdb)

    def _attach_aof(self, aof: Aof) -> None:
        aof.sizes()
        self.aof = aof
        self.server.add_propagate_hook(self.feed)

    async def _load_rdb(self) -> None:
        path = self.rdb_path()
        t0 = time.monotonic()
        with self.loader.state(_file_size(path)):
            data = _read_file(path)  # blocking, as Redis' read: no client served before
            try:
                res = await self.loader.load_snapshot(data, drop_expired=self._i_am_master())
                self.load_functions(res.functions)
            except snapshot.SnapshotError as exc:
                raise PersistenceError(f"Short read or bad snapshot file {path}: {exc}") from None
        self.keys_loaded, self.keys_expired = res.keys_loaded, res.keys_expired
        self.ks.dirty = 0
        log.info("DB loaded from disk: %.3f seconds", time.monotonic() - t0)

    def _i_am_master(self) -> bool:
        """iAmMaster at start-up: no ``replicaof`` and, in cluster mode, not a replica in
        nodes.conf. A replica keeps the expired keys it loads; its master's DELs decide."""
        if self.cfg.get("replicaof"):
            return False
        if self.server.cluster_enabled:
            from slotgate.node.cluster.nodesconf import myself_is_replica
            return not myself_is_replica(str(self.cfg.get("cluster-config-file")))
        return True

    async def _load_aof(self, aof: Aof) -> None:
        """Load the base and the incr files in order, then feed the last incr file."""
        t0 = time.monotonic()
        aof.sizes()
        with self.loader.state(aof.current_size):
            done = 0
            if aof.base is not None:
                path = aof.path(aof.base)
                data = _read_file(path)
                if snapshot.is_snapshot(data[: len(snapshot.MAGIC)]):
                    try:
                        res = await self.loader.load_snapshot(data, drop_expired=True)
                        self.load_functions(res.functions)
                    except snapshot.SnapshotError as exc:
                        raise PersistenceError(f"Bad AOF base file {aof.base}: {exc}") from None
                    self.keys_loaded, self.keys_expired = res.keys_loaded, res.keys_expired
                else:
                    await self.loader.replay_aof(path, data, False, done)
                done += len(data)
            for i, name in enumerate(aof.incrs):
                path = aof.path(name)
                try:
                    data = _read_file(path)
                except FileNotFoundError:
                    raise PersistenceError(f"The AOF file {path} doesn't exist") from None
                await self.loader.replay_aof(path, data, i == len(aof.incrs) - 1, done)
                done += len(data)
        self.ks.dirty = 0
        log.info("DB loaded from append only file: %.3f seconds", time.monotonic() - t0)
        if not aof.incrs:
            aof.write_manifest(aof.base, [aof.open_new_incr()])
        else:
            aof.reopen_last_incr()
        self._attach_aof(aof)
        self.aof_loading = False

    # -- AOF feed ------------------------------------------------------------------------
    def feed(self, db_index: int, argv: list[bytes]) -> None:
        """Propagate hook: append the command (SELECT first when the db changes)."""
        aof = self.aof
        if aof is None or aof.fd is None:
            return
        data = encode(argv)
        if db_index != aof.selected_db:
            data = select_cmd(db_index) + data
            aof.selected_db = db_index
        always = self.fsync_policy == "always"
        grown = self.aof_writer.append(aof.fd, data, always)
        if grown:
            aof.current_size += grown
            aof.unsynced = not always

    def _start_aof_at_runtime(self) -> None:
        """CONFIG SET appendonly yes: a new incr file now; the manifest names it once the
        rewrite child has written the base (until then the old data lives elsewhere)."""
        aof = Aof(self.aof_dir(), str(self.cfg.get("appendfilename")))
        os.makedirs(aof.dir, exist_ok=True)
        aof.read_manifest()  # only to continue the sequence numbers
        aof.base = None
        aof.incrs = [aof.open_new_incr()]
        self.aof = aof
        if self.feed not in self.ks.propagate_hooks:
            self.server.add_propagate_hook(self.feed)
        self._fork_base(aof)

    def _stop_aof(self) -> None:
        aof = self.aof
        self.aof = None
        self.aof_writer.reset()
        if aof is not None:
            aof.close()
        if self.feed in self.ks.propagate_hooks:
            self.ks.propagate_hooks.remove(self.feed)

    # -- AOF rewrite ---------------------------------------------------------------------
    def start_rewrite(self) -> None:
        """BGREWRITEAOF: writes from now on go to a fresh incr file (listed in the manifest
        after the old ones), and a child writes the new base."""
        aof = self.aof
        if aof is None:  # appendonly no: rewrite the files anyway, nothing feeds them
            aof = Aof(self.aof_dir(), str(self.cfg.get("appendfilename")))
            os.makedirs(aof.dir, exist_ok=True)
            aof.read_manifest()
        name = aof.open_new_incr()
        aof.write_manifest(aof.base, aof.incrs + [name])
        if self.aof is None:
            aof.close()
        self._fork_base(aof)

    def _fork_base(self, aof: Aof) -> None:
        aof.base_seq += 1
        base = f"{aof.prefix}.{aof.base_seq}.base.rdb"
        self.aof_child_base = base
        self._aof_for_child = aof
        pid = snapshot.fork_write(self.ks, aof.path(base), functions=self.function_codes(),
                                  key_delay_us=self.key_save_delay_us())
        self.aof_child = Child(pid, aof.path(base), self.ks.dirty)
        log.info("Background append only file rewriting started by pid %d", pid)

    def _rewrite_done(self, ok: bool) -> None:
        child = self.aof_child
        assert child is not None
        self.aof_child = None
        aof = self._aof_for_child
        assert aof is not None
        self.aof_last_rewrite_time_s = int(time.monotonic() - child.started)
        if not ok:
            self.aof_last_rewrite_ok = False
            self.aof_rewrite_failures += 1
            aof.base_seq -= 1
            log.warning("Background AOF rewrite failed")
            return
        old = ([aof.base] if aof.base else []) + aof.incrs[:-1]
        current = aof.incrs[-1:]
        aof.write_manifest(self.aof_child_base, current)
        for name in old:
            try:
                os.unlink(aof.path(name))
            except OSError:
                pass
        aof.sizes()
        self.aof_rewrites += 1
        self.aof_rewrite_failures = 0
        self.aof_last_rewrite_ok = True
        log.info("Background AOF rewrite finished successfully")

    def _auto_rewrite_due(self) -> bool:
        aof = self.aof
        pct = int(self.cfg.get("auto-aof-rewrite-percentage"))
        if aof is None or pct <= 0 or self.aof_child is not None or self.rdb_child is not None:
            return False
        if aof.current_size < int(self.cfg.get("auto-aof-rewrite-min-size")):
            return False
        base = aof.base_size or 1
        return (aof.current_size - base) * 100 // base >= pct

    # -- snapshots -----------------------------------------------------------------------
    def function_codes(self) -> list[bytes]:
        """The function libraries a snapshot carries."""
        fns = self.server.functions
        return fns.codes() if fns is not None else []

    def load_functions(self, codes: list[bytes]) -> None:
        """Make a loaded snapshot's libraries the node's (SnapshotError if one fails)."""
        fns = self.server.functions
        if fns is None or (not codes and not fns.libraries):
            return
        try:
            fns.restore(codes, b"flush")
        except CommandError as exc:
            raise snapshot.SnapshotError(f"bad function library: {exc}") from None

    def save(self) -> None:
        """SAVE: a synchronous snapshot (OSError on failure)."""
        snapshot.write_file(self.ks, self.rdb_path(), functions=self.function_codes(),
                            key_delay_us=self.key_save_delay_us())
        self.ks.dirty = 0
        self.server.last_save_time = int(time.time())
        self.rdb_saves += 1
        self.last_bgsave_ok = True
        log.info("DB saved on disk")

    def bgsave(self) -> None:
        self.last_bgsave_try = time.monotonic()
        pid = snapshot.fork_write(self.ks, self.rdb_path(), functions=self.function_codes(),
                                  key_delay_us=self.key_save_delay_us())
        self.rdb_child = Child(pid, self.rdb_path(), self.ks.dirty)
        log.info("Background saving started by pid %d", pid)

    def _bgsave_done(self, ok: bool) -> None:
        child = self.rdb_child
        assert child is not None
        self.rdb_child = None
        self.last_bgsave_time_s = int(time.monotonic() - child.started)
        self.last_bgsave_ok = ok
        if ok:
            self.ks.dirty = max(0, self.ks.dirty - child.dirty_at_fork)
            self.server.last_save_time = int(time.time())
            self.rdb_saves += 1
            log.info("Background saving terminated with success")
        else:
            log.warning("Background saving error")

    # -- cron ----------------------------------------------------------------------------
    async def run(self) -> None:
        """Poll children, save points, automatic rewrites, everysec fsync."""
        last_fsync = time.monotonic()
        while True:
            await trio.sleep(CRON_INTERVAL_S)
            self.cron()
            aof = self.aof
            if aof is not None and aof.fd is not None and self.aof_writer.kept:
                always = self.fsync_policy == "always"
                grown = self.aof_writer.retry(aof.fd, always)
                aof.current_size += grown
                aof.unsynced = aof.unsynced or (bool(grown) and not always)
            now = time.monotonic()
            if aof is not None and aof.unsynced and self.fsync_policy == "everysec" \
                    and now - last_fsync >= 1.0:
                last_fsync = now
                fd = aof.fd
                aof.unsynced = False
                if fd is not None:
                    try:
                        await trio.to_thread.run_sync(os.fsync, fd)
                    except OSError as exc:
                        log.warning("AOF fsync failed: %s", exc)

    def cron(self) -> None:
        if self.rdb_child is not None:
            code = snapshot.child_status(self.rdb_child.pid)
            if code is not None:
                self._bgsave_done(code == 0)
        if self.aof_child is not None:
            code = snapshot.child_status(self.aof_child.pid)
            if code is not None:
                self._rewrite_done(code == 0)
        if self.rdb_child is None and self.aof_child is None:
            if self.rewrite_scheduled:
                self.rewrite_scheduled = False
                self.start_rewrite()
            elif self.bgsave_scheduled:
                self.bgsave_scheduled = False
                self.bgsave()
        if self.loader.loading:  # a replica's full sync: no save points until it is loaded
            return
        if self.rdb_child is None and self.aof_child is None and self.save_params:
            now = time.time()
            dirty = self.ks.dirty
            retry_ok = self.last_bgsave_ok or \
                time.monotonic() - self.last_bgsave_try > BGSAVE_RETRY_DELAY_S
            for secs, changes in self.save_params:
                if dirty >= changes and now - self.server.last_save_time > secs and retry_ok:
                    log.info("%d changes in %d seconds. Saving...", changes, secs)
                    self.bgsave()
                    break
        if self._auto_rewrite_due():
            log.info("Starting automatic rewriting of AOF on %d%% growth",
                     int(self.cfg.get("auto-aof-rewrite-percentage")))
            self.start_rewrite()

    def on_shutdown(self) -> None:
        """SIGTERM/SHUTDOWN: stop children, flush the AOF, save if save points are set."""
        for child in (self.rdb_child, self.aof_child):
            if child is not None:
                try:
                    os.kill(child.pid, 9)
                    os.waitpid(child.pid, 0)
                except OSError:
                    pass
        self.rdb_child = self.aof_child = None
        if self.aof is not None:
            self.aof.close()
        if self.save_params and not self.loader.loading:  # a half-loaded set is not saved
            try:
                self.save()
            except OSError as exc:
                log.warning("Error trying to save the DB: %s", exc)

    # -- INFO ----------------------------------------------------------------------------
    def info(self, server: Server) -> list[tuple[str, Any]]:
        now = time.monotonic()
        rdb, aofc = self.rdb_child, self.aof_child
        rows: list[tuple[str, Any]] = [
            ("loading", int(self.loader.loading and not self.loader.async_loading)),
            ("async_loading", int(self.loader.async_loading)), ("current_cow_peak", 0),
            ("current_cow_size", 0), ("current_cow_size_age", 0), ("current_fork_perc", "0.00"),
            ("current_save_keys_processed", 0), ("current_save_keys_total", 0),
            ("rdb_changes_since_last_save", self.ks.dirty),
            ("rdb_bgsave_in_progress", int(rdb is not None)),
            ("rdb_last_save_time", server.last_save_time),
            ("rdb_last_bgsave_status", "ok" if self.last_bgsave_ok else "err"),
            ("rdb_last_bgsave_time_sec", self.last_bgsave_time_s),
            ("rdb_current_bgsave_time_sec", int(now - rdb.started) if rdb else -1),
            ("rdb_saves", self.rdb_saves), ("rdb_last_cow_size", 0),
            ("rdb_last_load_keys_expired", self.keys_expired),
            ("rdb_last_load_keys_loaded", self.keys_loaded),
            ("aof_enabled", int(self.aof is not None)),
            ("aof_rewrite_in_progress", int(aofc is not None)),
            ("aof_rewrite_scheduled", int(self.rewrite_scheduled)),
            ("aof_last_rewrite_time_sec", self.aof_last_rewrite_time_s),
            ("aof_current_rewrite_time_sec", int(now - aofc.started) if aofc else -1),
            ("aof_last_bgrewrite_status", "ok" if self.aof_last_rewrite_ok else "err"),
            ("aof_rewrites", self.aof_rewrites),
            ("aof_rewrites_consecutive_failures", self.aof_rewrite_failures),
            ("aof_last_write_status", "ok" if self.aof_writer.ok else "err"),
            ("aof_last_cow_size", 0), ("module_fork_in_progress", 0),
            ("module_fork_last_cow_size", 0),
        ]
        if self.aof is not None:
            rows += [
                ("aof_current_size", self.aof.current_size), ("aof_base_size", self.aof.base_size),
                ("aof_pending_rewrite", 0), ("aof_buffer_length", 0),
                ("aof_pending_bio_fsync", 0), ("aof_delayed_fsync", 0),
            ]
        rows += self.loader.info_rows()
        return rows


def _p(c: Client) -> Persistence:
    p = c.server.persistence
    assert p is not None  # installed with the server (node/core/server.py SUBSYSTEMS)
    return p


@command("save")
def save_cmd(c: Client, argv: list[bytes]) -> bytes:
    p = _p(c)
    if p.rdb_child is not None:
        raise CommandError(ERR_BGSAVE_RUNNING)
    try:
        p.save()
    except OSError as exc:
        log.warning("Failed saving the DB: %s", exc)
        raise CommandError("ERR") from None
    return OK


@command("bgsave")
def bgsave_cmd(c: Client, argv: list[bytes]) -> bytes:
    p = _p(c)
    schedule = False
    if len(argv) > 1:
        if len(argv) == 2 and argv[1].lower() == b"schedule":
            schedule = True
        else:
            raise CommandError("ERR syntax error")
    if p.rdb_child is not None:
        raise CommandError(ERR_BGSAVE_RUNNING)
    if p.aof_child is not None:
        if not schedule:
            raise CommandError(ERR_AOF_CHILD)
        p.bgsave_scheduled = True
        return simple("Background saving scheduled")
    try:
        p.bgsave()
    except OSError as exc:
        raise CommandError(f"ERR Background save failed: {exc}") from None
    return simple("Background saving started")


@command("bgrewriteaof")
def bgrewriteaof_cmd(c: Client, argv: list[bytes]) -> bytes:
    p = _p(c)
    if p.aof_child is not None:
        raise CommandError(ERR_REWRITE_RUNNING)
    if p.rdb_child is not None:
        p.rewrite_scheduled = True
        return simple("Background append only file rewriting scheduled")
    try:
        p.start_rewrite()
    except OSError as exc:
        raise CommandError(f"ERR Can't execute an AOF background rewriting: {exc}") from None
    return simple("Background append only file rewriting started")


def install(server: Server) -> None:
    """Load data from disk, then attach the AOF feed, cron, INFO section, shutdown hook."""
    p = Persistence(server)
    server.persistence = p
    p.save_params = []
    words = str(server.config.get("save")).split()
    p.save_params = [(int(words[i]), int(words[i + 1])) for i in range(0, len(words) - 1, 2)]
    p.load_at_start()
    server.config_hooks.append(p.on_config)
    server.background_tasks.append(p.run)
    server.info_sections["persistence"] = p.info
    server.shutdown_hooks.append(p.on_shutdown)
