"""CLIENT PAUSE: holding clients' commands until the pause ends (Redis 7.0's rules).

WRITE holds the commands that may change data or be replicated (write commands, EVAL,
EVALSHA, FCALL, PUBLISH, SPUBLISH, PFCOUNT; EXEC with one of those queued, and such a command
sent inside MULTI); ALL holds every command. Our replicas' links and our master's link are
never held; the cluster bus is not a client. While paused, expired keys are not deleted
(reads see them as missing), so a failover target sees the same data.

A held client is parked (``BlockState.postponed``; counted in ``blocked_clients`` and shown
with flag ``b`` as in Redis). When the pause ends the held commands run again, in the order
they arrived, through the dispatcher's ``process_command``.
"""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING

import trio

from slotgate.node.core import dispatch
from slotgate.node.core.client import BLOCKED, BlockState
from slotgate.protocol.pause import PAUSE_OFF, PAUSE_WRITE, may_replicate

if TYPE_CHECKING:
    from slotgate.node.commands.registry import Command
    from slotgate.node.core.client import Client
    from slotgate.node.core.server import Server

def _may_replicate(cmd: Command) -> bool:
    return may_replicate(cmd.full_name, cmd.write)


class Pause:
    """The server's client pause: its kind, its end, and the held clients in order."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.kind = PAUSE_OFF
        self.end_ms = 0
        self.held: deque[Client] = deque()
        self._timer: trio.CancelScope | None = None

    def pause(self, kind: int, end_ms: int) -> None:
        """pauseClients: a second pause keeps the stronger kind and the later end."""
        srv = self.server
        if self.kind == PAUSE_OFF:
            self.kind, self.end_ms = kind, end_ms
            srv.add_command_check(self.check)  # after READONLY and the like, as in Redis
            srv.ks.expire_paused = True
        else:
            self.kind = max(self.kind, kind)
            self.end_ms = max(self.end_ms, end_ms)
        self._start_timer()

    def _start_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        nursery = self.server.nursery
        if nursery is not None:
            nursery.start_soon(self._wait_end)

    async def _wait_end(self) -> None:
        with trio.CancelScope() as scope:
            self._timer = scope
            while self.kind != PAUSE_OFF:
                left_ms = self.end_ms - int(time.time() * 1000)
                if left_ms <= 0:
                    self.unpause()
                    break
                await trio.sleep(left_ms / 1000)
        if self._timer is scope:
            self._timer = None

    def check(self, c: Client, cmd: Command, argv: list[bytes]) -> bytes | None:
        """A command check (node/core/dispatch.py): park ``c`` if the pause holds ``cmd``."""
        if c.is_replica or c.is_master or c.in_exec:
            return None
        if self.kind == PAUSE_WRITE and not _may_replicate(cmd):
            if cmd.full_name != "exec" or c.multi is None:
                return None
            if not any(_may_replicate(q) for q, _ in c.multi):
                return None
        c.last_cmd = cmd.full_name
        st = BlockState(c.db, [], None, _never, b"", argv)
        st.postponed = True
        c.blocked = st
        self.server.blocked_clients += 1
        self.held.append(c)
        return BLOCKED

    def unpause(self) -> None:
        """End the pause; run the held commands again, in the order they were held."""
        if self.kind == PAUSE_OFF:
            return
        srv = self.server
        self.kind = PAUSE_OFF
        srv.remove_command_check(self.check)
        srv.ks.expire_paused = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        held, self.held = self.held, deque()
        for c in held:
            st = c.blocked
            if st is None or not st.postponed or c.killed:
                continue
            c.blocked = None
            srv.blocked_clients -= 1
            argv = st.argv
            cmd = srv.table.get(argv[0].lower())
            reply = dispatch.process_command(c, cmd, argv)
            if reply is BLOCKED:
                self._follow_block(c)
            else:
                c.out.append(reply)
                c.wake()
            if srv.ks.ready:
                dispatch.serve_ready_keys(srv)

    def _follow_block(self, c: Client) -> None:
        """The held command blocked for real (BLPOP ...): its task still waits for the first
        parking, so its timeout is kept here."""
        st = c.blocked
        if st is None or st.postponed or st.deadline_s is None:
            return
        nursery = self.server.nursery
        if nursery is not None:
            nursery.start_soon(_time_out, c, st)

    def drop(self, c: Client) -> None:
        try:
            self.held.remove(c)
        except ValueError:
            pass


async def _time_out(c: Client, st: BlockState) -> None:
    assert st.deadline_s is not None
    await trio.sleep_until(st.deadline_s)
    if c.blocked is st:
        c.unblock(st.timeout_reply)


def _never(c: Client, db: object, key: bytes) -> bytes | None:
    return None
