"""FAILOVER: Redis 7.0's coordinated switchover of a standalone master to one of its replicas.

Flow (``master_failover_state`` in INFO replication)::

    FAILOVER [TO host port [FORCE]] [TIMEOUT ms]
        no-failover -> waiting-for-sync: client writes are held (a write pause of its own,
        independent of CLIENT PAUSE / UNPAUSE); the cron waits for a replica (the TO one, or
        any) whose REPLCONF ACK offset equals master_repl_offset. No PINGs go to replicas
        meanwhile, so the offset stays put.
    a replica caught up (or TIMEOUT passed with FORCE) -> failover-in-progress: we become a
        replica of it; our link sends ``PSYNC <replid> <offset+1> FAILOVER``; the target,
        seeing its own replid, turns master first and then answers +CONTINUE.
    +CONTINUE / +FULLRESYNC -> no-failover: the held writes run again (now -READONLY).
    TIMEOUT without FORCE, ABORT, or the target refusing the PSYNC -> back to no-failover as
        a master (an in-progress one leaves the replica role again with a new replid).

``get(repl)`` returns the ``Failover`` of a ``Replication``; the link (replica.py) calls
``psync_extra()`` and ``psync_result(ok)``; PSYNC (commands.py) calls ``accept_psync``.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from slotgate.node.commands.registry import command
from slotgate.node.commands.replies import OK
from slotgate.node.commands.util import parse_int
from slotgate.node.core.errors import SYNTAX, CommandError
from slotgate.node.core.pause import PAUSE_OFF, PAUSE_WRITE, Pause
from slotgate.node.replication import master as replication

if TYPE_CHECKING:
    from slotgate.node.core.client import Client
    from slotgate.node.replication.master import Replica, Replication

log = logging.getLogger("node.replication")

NO_FAILOVER = "no-failover"
WAIT_FOR_SYNC = "waiting-for-sync"
IN_PROGRESS = "failover-in-progress"
HOLD_FOREVER_MS = 1 << 62

ERR_CLUSTER = "ERR FAILOVER not allowed in cluster mode. Use CLUSTER FAILOVER command instead."
ERR_NO_FAILOVER = "ERR No failover in progress."
ERR_TIMEOUT = "ERR FAILOVER timeout must be greater than 0"
ERR_RUNNING = "ERR FAILOVER already in progress."
ERR_REPLICA = "ERR FAILOVER is not valid when server is a replica."
ERR_NO_REPLICAS = "ERR FAILOVER requires connected replicas."
ERR_FORCE = "ERR FAILOVER with force option requires both a timeout and target HOST and IP."
ERR_NOT_REPLICA = "ERR FAILOVER target HOST and PORT is not a replica."
ERR_NOT_ONLINE = "ERR FAILOVER target replica is not online."
ERR_PSYNC_REPLID = "ERR PSYNC FAILOVER replid must match my replid."
ERR_PSYNC_FAILING = "NOMASTERLINK Can't SYNC while failing over"
ERR_REPLICAOF = "ERR REPLICAOF not allowed while failing over."


class Failover:
    """The switchover state of one server (``master_failover_state``)."""

    def __init__(self, repl: Replication) -> None:
        self.repl = repl
        self.state = NO_FAILOVER
        self.target: tuple[str, int] | None = None
        self.end_ms = 0  # TIMEOUT deadline (wall clock), 0: none
        self.force = False
        self.hold = Pause(repl.server)  # our own write pause

    # -- start / end ---------------------------------------------------------------------
    def start(self, target: tuple[str, int] | None, timeout_ms: int, force: bool) -> None:
        self.target, self.force = target, force
        self.end_ms = _now_ms() + timeout_ms if timeout_ms else 0
        self.state = WAIT_FOR_SYNC
        self.hold.pause(PAUSE_WRITE, _now_ms() + HOLD_FOREVER_MS)
        if target is not None:
            log.info("FAILOVER requested to %s:%d.", *target)
        else:
            log.info("FAILOVER requested to any replica.")

    def abort(self, why: str) -> None:
        if self.state == NO_FAILOVER:
            return
        where = f"{self.target[0]}:{self.target[1]}" if self.target is not None else "any replica"
        log.info("FAILOVER to %s aborted: %s", where, why)
        if self.state == IN_PROGRESS:
            self.repl.stop_replication()
        self._clear()

    def _clear(self) -> None:
        self.state = NO_FAILOVER
        self.target, self.end_ms, self.force = None, 0, False
        self.hold.unpause()
        srv = self.repl.server
        srv.ks.expire_paused = srv.pause.kind != PAUSE_OFF  # CLIENT PAUSE may still run

    # -- the cron ------------------------------------------------------------------------
    def cron(self) -> None:
        """Redis' updateFailoverStatus: time out, or fail over to a caught-up replica."""
        if self.state != WAIT_FOR_SYNC:
            return
        if self.end_ms and self.end_ms <= _now_ms():
            if self.force and self.target is not None:
                log.info("FAILOVER to %s:%d time out exceeded, failing over.", *self.target)
                self._switch(self.target)
            else:
                self.abort("Replica never caught up before timeout")
            return
        offset = self.repl.backlog.master_repl_offset
        if self.target is not None:
            r = self.find(*self.target)
            if r is not None and r.ack_off == offset:
                self._switch(self.target)
            return
        for r in self.repl.replicas.values():
            if r.ack_off == offset:
                self._switch((r.ip, r.port))
                return

    def _switch(self, target: tuple[str, int]) -> None:
        self.target = target
        self.state = IN_PROGRESS
        log.info("Failover target %s:%d is synced, failing over.", *target)
        self.repl.start_replication(*target)

    def find(self, host: str, port: int) -> Replica | None:
        for r in self.repl.replicas.values():
            if r.ip.lower() == host.lower() and r.port == port:
                return r
        return None

    # -- the link and PSYNC ----------------------------------------------------------------
    def psync_extra(self) -> tuple[str, ...]:
        """Extra PSYNC arguments of our link: FAILOVER while we hand over."""
        return ("FAILOVER",) if self.state == IN_PROGRESS else ()

    def psync_result(self, ok: bool) -> None:
        """Our link's PSYNC got +CONTINUE / +FULLRESYNC (ok) or anything else."""
        if self.state != IN_PROGRESS:
            return
        if ok:
            self._clear()
        else:
            self.abort("Failover target rejected psync request")

    def accept_psync(self, argv: list[bytes]) -> None:
        """PSYNC <replid> <offset> FAILOVER: the old master hands over to us."""
        repl = self.repl
        if len(argv) > 3 and argv[3].lower() == b"failover":
            if argv[1].decode("utf-8", "replace") != repl.replid:
                raise CommandError(ERR_PSYNC_REPLID)
            repl.stop_replication()
            log.info("Failover request received for replid %s.", repl.replid2)
        if self.state != NO_FAILOVER:
            raise CommandError(ERR_PSYNC_FAILING)


def _now_ms() -> int:
    return int(time.time() * 1000)


def get(repl: Replication) -> Failover:
    fo = repl.failover
    if fo is None:
        fo = repl.failover = Failover(repl)
    return fo


@command("failover")
def failover_cmd(c: Client, argv: list[bytes]) -> bytes:
    if c.server.cluster_enabled:
        raise CommandError(ERR_CLUSTER)
    repl = replication.get(c.server)
    fo = get(repl)
    if len(argv) == 2 and argv[1].lower() == b"abort":
        if fo.state == NO_FAILOVER:
            raise CommandError(ERR_NO_FAILOVER)
        fo.abort("Failover manually aborted")
        return OK
    timeout_ms, force, target = 0, False, None
    j = 1
    while j < len(argv):
        arg = argv[j].lower()
        if arg == b"timeout" and j + 1 < len(argv) and timeout_ms == 0:
            timeout_ms = parse_int(argv[j + 1])
            if timeout_ms <= 0:
                raise CommandError(ERR_TIMEOUT)
            j += 1
        elif arg == b"to" and j + 2 < len(argv) and target is None:
            port = parse_int(argv[j + 2])
            target = (argv[j + 1].decode("utf-8", "replace"), port)
            j += 2
        elif arg == b"force" and not force:
            force = True
        else:
            raise CommandError(SYNTAX)
        j += 1
    if fo.state != NO_FAILOVER:
        raise CommandError(ERR_RUNNING)
    if repl.role == "slave":
        raise CommandError(ERR_REPLICA)
    if not repl.replicas:
        raise CommandError(ERR_NO_REPLICAS)
    if force and (not timeout_ms or target is None):
        raise CommandError(ERR_FORCE)
    if target is not None:
        r = fo.find(*target)
        if r is None:
            raise CommandError(ERR_NOT_REPLICA)
        if r.state != "online":
            raise CommandError(ERR_NOT_ONLINE)
    fo.start(target, timeout_ms, force)
    return OK
