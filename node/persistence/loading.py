"""The loading state (Redis' ``server.loading``): a data set loaded while clients are served.

Every load runs in the event loop's own thread, a step at a time, as Redis' does: the
start-up snapshot or AOF (awaited by the server once its listeners are open, before the cron
and the background tasks start) and a replica's full synchronisation. Between steps the loop
serves clients (Redis' processEventsWhileBlocked): after every
``loading-process-events-interval-bytes`` bytes of a snapshot and every 1024 commands of an
AOF. Meanwhile every command without the ``loading`` flag is answered ``-LOADING``, INFO shows
``loading:1`` and the ``loading_*`` progress fields. ``key-load-delay`` microseconds pass
after each key (a negative value: one microsecond every ``-delay`` keys, as Redis'
debugDelay); the loop is not served during that sleep, as in Redis.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import trio

from slotgate.node.persistence import snapshot
from slotgate.node.replication.apply import Applier, command_len
from slotgate.protocol.resp import ProtocolError, RequestReader

if TYPE_CHECKING:
    from slotgate.node.commands.registry import Command
    from slotgate.node.core.client import Client
    from slotgate.node.core.keyspace import Database
    from slotgate.node.core.server import Server

log = logging.getLogger("node.persistence")

LOADING_ERR = b"-LOADING Redis is loading the dataset in memory\r\n"
AOF_EVENTS_EVERY_COMMANDS = 1024  # an AOF load serves clients this often (Redis' loop)
# trio scheduling rounds per step: the poller's task wakes on one, serves its ready clients
# on the next (their replies written in the same pass)
_EVENT_ROUNDS = 3


class PersistenceError(Exception):
    """Data on disk that cannot be loaded; the server must not start."""


def _truncate(path: str, size: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(size)
        f.flush()
        os.fsync(f.fileno())


class Loader:
    """The loading state of one server (``server.persistence.loader``); one load at a time."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.loading = False
        self.async_loading = False
        self.start_time_s = 0
        self.started = 0.0
        self.total_bytes = 0
        self.loaded_bytes = 0
        self._delay = snapshot.KeyDelay(0)

    def check(self, c: Client, cmd: Command, argv: list[bytes]) -> bytes | None:
        """processCommand's loading check: commands without the ``loading`` flag wait;
        while loading asynchronously only those flagged ``no_async_loading``."""
        if self.async_loading:
            return LOADING_ERR if "no_async_loading" in cmd.flags else None
        if self.loading and "loading" not in cmd.flags:
            return LOADING_ERR
        return None

    @contextmanager
    def state(self, total_bytes: int, *, async_loading: bool = False) -> Iterator[None]:
        """Loading from entry to exit (startLoading / stopLoading). ``async_loading``: the
        data set is loaded beside the one served (a replica's ``swapdb`` full sync from the
        history it already follows), which stays served meanwhile."""
        self.total_bytes = total_bytes
        self.loaded_bytes = 0
        self.loading = True
        self.async_loading = async_loading
        self.start_time_s = int(time.time())
        self.started = time.monotonic()
        self.server.add_command_check(self.check, first=True)
        try:
            yield
        finally:
            self.loading = self.async_loading = False
            self.server.remove_command_check(self.check)

    async def serve_clients(self) -> None:
        """processEventsWhileBlocked: one turn of the event loop for everything else."""
        for _ in range(_EVENT_ROUNDS):
            await trio.lowlevel.checkpoint()

    async def load_snapshot(self, data: bytes, *, drop_expired: bool, base_offset: int = 0,
                            dbs: list[Database] | None = None) -> snapshot.LoadResult:
        """Load snapshot ``data`` into the keyspace (or into ``dbs``), serving clients every
        ``loading-process-events-interval-bytes`` (progress counted from ``base_offset``)."""
        res = snapshot.LoadResult()
        cfg = self.server.config
        delay_us = int(cfg.get("key-load-delay"))
        on_key = self._on_key if delay_us else None
        self._delay = snapshot.KeyDelay(delay_us)
        every_bytes = int(cfg.get("loading-process-events-interval-bytes"))
        into = self.server.ks.dbs if dbs is None else dbs
        for offset in snapshot.iter_load(into, data, res, drop_expired=drop_expired,
                                         on_key=on_key, every_bytes=every_bytes):
            self.loaded_bytes = base_offset + offset
            await self.serve_clients()
        self.loaded_bytes = base_offset + len(data)
        return res

    async def replay_aof(self, path: str, data: bytes, last: bool, base_offset: int) -> None:
        """Replay one RESP file of an AOF, serving clients every 1024 commands. A cut-off
        tail (or an unfinished MULTI) of the LAST file is truncated away when
        aof-load-truncated is yes; anywhere else it is fatal (PersistenceError)."""
        applier = Applier(self.server, "aof-loader")
        reader = RequestReader(max_bulk_len=1 << 62)
        reader.feed(data)
        consumed = 0
        multi_start = 0
        loops = 0
        try:
            while True:
                argv = reader.get_request()
                if argv is None:
                    break
                if loops % AOF_EVENTS_EVERY_COMMANDS == 0:
                    self.loaded_bytes = base_offset + consumed
                    await self.serve_clients()
                loops += 1
                if argv[0].lower() == b"multi":
                    multi_start = consumed
                consumed += command_len(argv)
                applier.apply(argv)
        except ProtocolError as exc:
            raise PersistenceError(f"Bad file format reading the append only file {path}: "
                                   f"{exc}") from None
        self.loaded_bytes = base_offset + consumed
        valid = multi_start if applier.pending_multi else consumed
        if valid < len(data):
            if not (last and self.server.config.get("aof-load-truncated")):
                raise PersistenceError(
                    f"Unexpected end of file reading the append only file {path}. You can: "
                    "1) Make a backup of your AOF file, then use ./redis-check-aof --fix "
                    "<filename.manifest>. 2) Alternatively you can set the "
                    "'aof-load-truncated' configuration option to yes and restart the server.")
            log.warning("!!! Warning: short read while loading the AOF file %s!!!", path)
            log.warning("!!! Truncating the AOF %s at offset %d !!!", path, valid)
            _truncate(path, valid)
            log.warning("AOF %s loaded anyway because aof-load-truncated is enabled", path)

    def _on_key(self, offset: int, res: snapshot.LoadResult) -> None:
        self._delay()

    def info_rows(self) -> list[tuple[str, Any]]:
        """The loading_* fields of INFO persistence (while loading only)."""
        if not self.loading:
            return []
        elapsed_s = time.monotonic() - self.started
        done = self.loaded_bytes
        perc = done * 100.0 / self.total_bytes if self.total_bytes else 0.0
        eta_s = int(elapsed_s * (self.total_bytes - done) / done) if done else 1
        return [("loading_start_time", self.start_time_s),
                ("loading_total_bytes", self.total_bytes),
                ("loading_rdb_used_mem", 0),
                ("loading_loaded_bytes", done),
                ("loading_loaded_perc", f"{perc:.2f}"),
                ("loading_eta_seconds", eta_s)]
