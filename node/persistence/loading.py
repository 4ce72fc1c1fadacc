"""Loading the data set while the server already answers clients (Redis' loading state).

Used at start-up when ``key-load-delay`` slows loading (Redis' test knob): the snapshot is
loaded by a worker thread after the listeners open and before the cron and the background
tasks (replication, cluster) start, so nothing else touches the keyspace meanwhile. Clients
are answered ``-LOADING`` for every command without the ``loading`` flag, INFO shows
``loading:1`` and the ``loading_*`` progress fields; ``key-load-delay`` microseconds pass
after each key (a negative value: one microsecond every ``-delay`` keys, as Redis'
debugDelay).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import trio

from slotgate.node.persistence import snapshot

if TYPE_CHECKING:
    from slotgate.node.commands.registry import Command
    from slotgate.node.core.client import Client
    from slotgate.node.core.server import Server
    from slotgate.node.persistence.manager import Persistence

LOADING_ERR = b"-LOADING Redis is loading the dataset in memory\r\n"


class Loader:
    """One start-up load of the snapshot at ``path``; ``run`` is awaited by the server."""

    def __init__(self, p: Persistence, server: Server, path: str, drop_expired: bool) -> None:
        self.p = p
        self.server = server
        self.path = path
        self.drop_expired = drop_expired
        self.loading = False
        self.start_time_s = 0
        self.started = 0.0
        self.total_bytes = 0
        self.loaded_bytes = 0
        self._delay_count = 0

    def check(self, c: Client, cmd: Command, argv: list[bytes]) -> bytes | None:
        """processCommand's loading check: commands without the ``loading`` flag wait."""
        if self.loading and "loading" not in cmd.flags:
            return LOADING_ERR
        return None

    async def run(self) -> None:
        data = await trio.Path(self.path).read_bytes()
        self.total_bytes = len(data)
        self.loading = True
        self.start_time_s = int(time.time())
        self.started = time.monotonic()
        self.server.add_command_check(self.check, first=True)
        try:
            res = snapshot.LoadResult()
            await trio.to_thread.run_sync(self._load, data, res)
            self.p.keys_loaded, self.p.keys_expired = res.keys_loaded, res.keys_expired
            self.p.load_functions(res.functions)
            self.server.ks.dirty = 0
        finally:
            self.loading = False
            self.server.remove_command_check(self.check)

    def _load(self, data: bytes, res: snapshot.LoadResult) -> None:
        snapshot.load_bytes(self.server.ks, data, drop_expired=self.drop_expired,
                            on_key=self._on_key, res=res)

    def _on_key(self, offset: int, res: snapshot.LoadResult) -> None:
        self.loaded_bytes = offset
        self.p.keys_loaded = res.keys_loaded
        delay_us = int(self.server.config.get("key-load-delay"))
        if delay_us > 0:
            time.sleep(delay_us / 1e6)
        elif delay_us < 0:
            self._delay_count += 1
            if self._delay_count >= -delay_us:
                self._delay_count = 0
                time.sleep(1e-6)

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
