"""Writing the AOF's incr file, and what a failed write does (Redis 7.0's flushAppendOnlyFile
and writeCommandsDeniedByDiskError).

A write that fails (a full disk: ENOSPC, or any other error) is undone where it was partial
(the file truncated back to its size before it), its bytes are kept, and the node refuses
writes -- and PING, as Redis does -- with ``-MISCONF Errors writing to the AOF file: <the
error>`` until a later attempt writes what was kept: at the next propagated write (which is
kept behind it) or at the next cron tick, so the node accepts writes again within a tick of
space coming back. The command whose write failed has run and is answered as usual (Redis
answers it too: its reply was queued before the write). Commands from our master are applied
regardless (Redis' ``replica-ignore-disk-write-errors`` no, which stops the replica instead,
is not mirrored). With ``appendfsync always`` the node exits, as Redis does.
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from slotgate.node.commands.registry import Command
    from slotgate.node.core.client import Client
    from slotgate.node.core.server import Server

log = logging.getLogger("node.persistence")

MISCONF_AOF = "-MISCONF Errors writing to the AOF file: {error}\r\n"
LOG_EVERY_S = 30.0  # a failure that goes on is logged at most this often (Redis: 30 s)


class AofWriter:
    """Appends to the AOF's open incr file; owns ``aof_last_write_status``."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.ok = True  # aof_last_write_status
        self.kept = bytearray()  # bytes a failed write left to write
        self.refusal = b""  # the MISCONF reply while not ok
        self.logged_s = -LOG_EVERY_S  # when a failed write was last logged (monotonic)

    def append(self, fd: int, data: bytes, fsync_always: bool) -> int:
        """Append ``data`` (after what a failed write kept); the bytes the file grew by."""
        if self.kept:
            self.kept += data
            return self.retry(fd, fsync_always)
        written = 0
        view = memoryview(data)
        try:
            while written < len(data):
                written += os.write(fd, view[written:])
        except OSError as exc:
            self._failed(fd, data, written, exc, fsync_always)
            return 0
        if fsync_always:
            os.fsync(fd)
        return written

    def retry(self, fd: int, fsync_always: bool) -> int:
        """Write what a failed write kept; the bytes the file grew by."""
        data = bytes(self.kept)
        self.kept.clear()
        grown = self.append(fd, data, fsync_always)
        if grown and not self.kept and not self.ok:
            log.warning("AOF write error looks solved, Redis can write again.")
            self.ok = True
            self.server.remove_command_check(self.check)
        return grown

    def _failed(self, fd: int, data: bytes, written: int, exc: OSError,
                fsync_always: bool) -> None:
        now_s = time.monotonic()
        if self.ok or now_s - self.logged_s >= LOG_EVERY_S:
            self.logged_s = now_s
            if written:
                log.warning("Short write while writing to the AOF file: "
                            "(nwritten=%d, expected=%d)", written, len(data))
            else:
                log.warning("Error writing to the AOF file: %s", exc.strerror or exc)
        if fsync_always:
            log.warning("Can't recover from AOF write error when the AOF fsync policy is "
                        "'always'. Exiting...")
            os._exit(1)
        if written:
            try:
                os.ftruncate(fd, os.fstat(fd).st_size - written)
            except OSError as trunc_exc:
                log.warning("Could not remove short write from the append-only file. Redis "
                            "may refuse to load the AOF the next time it starts. "
                            "ftruncate: %s", trunc_exc)
                data = data[written:]  # the part written stays; the rest is kept
        self.kept[:0] = data
        self.refusal = MISCONF_AOF.format(error=exc.strerror or exc).encode()
        if self.ok:
            self.ok = False
            self.server.add_command_check(self.check, first=True)

    def check(self, c: Client, cmd: Command, argv: list[bytes]) -> bytes | None:
        """Writes (an EXEC with queued writes too) and PING are refused while not ok."""
        if cmd.write or cmd.full_name == "ping" or (
                cmd.full_name == "exec" and c.multi is not None
                and any(q.write for q, _ in c.multi)):
            return self.refusal
        return None

    def reset(self) -> None:
        """The AOF was turned off or reopened: nothing kept, writes accepted."""
        self.kept.clear()
        if not self.ok:
            self.ok = True
            self.server.remove_command_check(self.check)
