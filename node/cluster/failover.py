"""Failover decisions (sans-IO): replica elections, votes, promotion, manual failover
(default / FORCE / TAKEOVER) and replica migration, as Redis 7.0 does them.

Flow, replica side (``cron`` every 100 ms, ``before_sleep`` after every input)::

    master FAIL (or a manual failover may start), master has slots, no nofailover,
    data age <= repl-ping-replica-period*1000 + node_timeout*validity-factor
      -> retry window open: election at now + 500 + rand(0..499) + rank*1000 ms
         (rank: siblings with a greater offset); PONG my offset to my siblings
      -> while waiting, a worse rank adds 1000 ms per step (not for a manual failover)
      -> time reached: currentEpoch += 1, FAILOVER_AUTH_REQUEST to all (FORCEACK when
         manual), config saved with fsync
      -> ACKs from masters with slots whose currentEpoch >= the election epoch;
         quorum = size // 2 + 1 -> configEpoch = election epoch, replace my master
      -> no quorum within auth_timeout = max(2*node_timeout, 2000): wait for the retry window
         (2*auth_timeout after the last attempt started)

Voter side (FAILOVER_AUTH_REQUEST): all of facts §6's six rules, then lastVoteEpoch is
saved with fsync *before* the ACK is queued. A refusal sends nothing.

Manual failover: the replica sends MFSTART; its master pauses writes for 10 s and pings it
with the PAUSED flag and its offset; the replica records that offset once, and when its own
processed offset reaches it, the election starts at once (rank 0, FORCEACK). After 5 s
without success it is abandoned (the master unpauses). FORCE skips the handshake;
TAKEOVER skips the election (epoch bumped without consensus).

Everything the node must do outside the bus is behind ``ReplicationPort``; times are unix ms
from the engine's injected clock and randomness is the engine's ``random.Random``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from slotgate.node.cluster import bus
from slotgate.node.cluster.bus import Message
from slotgate.node.cluster.state import TODO_FSYNC, TODO_SAVE, TODO_UPDATE_STATE, ClusterState, Node

if TYPE_CHECKING:
    from slotgate.node.cluster.gossip import Engine, Link

log = logging.getLogger("node.cluster")

MF_TIMEOUT_MS = 5000  # CLUSTER_MF_TIMEOUT
MF_PAUSE_MULT = 2  # the master pauses writes for MF_TIMEOUT_MS * MF_PAUSE_MULT
ELECTION_FIXED_DELAY_MS = 500  # let the FAIL message propagate
ELECTION_RANDOM_DELAY_MS = 500  # plus rand(0 .. this - 1)
RANK_DELAY_MS = 1000  # per replica with a better offset
MIN_AUTH_TIMEOUT_MS = 2000
REPLICA_MIGRATION_DELAY_MS = 5000  # CLUSTER_SLAVE_MIGRATION_DELAY
CANT_FAILOVER_LOG_PERIOD_MS = 10_000  # CLUSTER_CANT_FAILOVER_RELOG_PERIOD (s in Redis)

# why a replica does not fail over (logged when it changes, or every 10 s)
CANT_NONE = 0
CANT_DATA_AGE = 1
CANT_WAITING_DELAY = 2
CANT_EXPIRED = 3
CANT_WAITING_VOTES = 4
_CANT_TEXT = {
    CANT_DATA_AGE: "Disconnected from master for longer than allowed. Please check the "
                   "'cluster-replica-validity-factor' configuration option.",
    CANT_WAITING_DELAY: "Waiting the delay before I can start a new failover.",
    CANT_EXPIRED: "Failover attempt expired.",
    CANT_WAITING_VOTES: "Waiting for votes, but majority still not reached.",
}


class FailoverSettings(Protocol):
    """The live configuration failover reads."""

    @property
    def node_timeout_ms(self) -> int: ...
    @property
    def replica_validity_factor(self) -> int: ...
    @property
    def repl_ping_replica_period_s(self) -> int: ...
    @property
    def replica_no_failover(self) -> bool: ...
    @property
    def migration_barrier(self) -> int: ...
    @property
    def allow_replica_migration(self) -> bool: ...


class ReplicationPort(Protocol):
    """What failover needs from replication and the client layer."""

    def offset(self) -> int:
        """Processed replication offset (a replica) / master_repl_offset (a master)."""
        ...

    def data_age_ms(self) -> int:
        """Time since the last interaction with my master (or since the link went down)."""
        ...

    def replicating_from(self) -> tuple[str, int] | None:
        """(host, port) of the master replication currently follows, None as a master."""
        ...

    def pause_writes(self, until_ms: int) -> None: ...

    def unpause_writes(self) -> None: ...


def auth_timeout_ms(node_timeout_ms: int) -> int:
    return max(node_timeout_ms * 2, MIN_AUTH_TIMEOUT_MS)


def election_delay_ms(rank: int, rng_draw: int) -> int:
    """500 + rand(0..499) + rank * 1000 (``rng_draw`` already in 0..499)."""
    return ELECTION_FIXED_DELAY_MS + rng_draw + rank * RANK_DELAY_MS


def replica_rank(me: Node, master: Node, my_offset: int) -> int:
    """clusterGetSlaveRank: siblings that may fail over and have processed more than me."""
    return sum(1 for r in master.replicas
               if r is not me and not r.flags & bus.F_NOFAILOVER and r.repl_offset > my_offset)


def vote_refusal(st: ClusterState, requester: Node, m: Message, node_timeout_ms: int,
                 now_ms: int) -> str | None:
    """clusterSendFailoverAuthIfNeeded's rules, in order. None: grant the vote; otherwise why
    not (logged). ``st.current_epoch`` already includes the request's (adopted on receipt)."""
    me = st.myself
    if me.is_replica or me.numslots == 0:
        return "I am not a master with slots"
    if m.current_epoch < st.current_epoch:
        return (f"reqEpoch ({m.current_epoch}) < curEpoch({st.current_epoch})")
    if st.last_vote_epoch == st.current_epoch:
        return f"already voted for epoch {st.current_epoch}"
    master = requester.slaveof
    force_ack = bool(m.mflags[0] & bus.MF_FORCEACK)
    if requester.is_master or master is None or (not master.failed and not force_ack):
        if requester.is_master:
            return "it is a master node"
        if master is None:
            return "I don't know its master"
        return "its master is up"
    if now_ms - master.voted_time < node_timeout_ms * 2:
        return (f"can't vote about this master before "
                f"{node_timeout_ms * 2 - (now_ms - master.voted_time)} milliseconds")
    for slot in bus.bitmap_slots(m.myslots):
        owner = st.slots[slot]
        if owner is None or owner.config_epoch <= m.config_epoch:
            continue
        return (f"slot {slot} epoch ({owner.config_epoch}) > reqEpoch ({m.config_epoch})")
    return None


class Failover:
    """One node's failover state machine, driven by the engine's cron, messages and
    ``before_sleep``; ``Engine.ext`` points here."""

    def __init__(self, engine: Engine, settings: FailoverSettings, repl: ReplicationPort) -> None:
        self.engine = engine
        self.st: ClusterState = engine.st
        self.cfg = settings
        self.repl = repl
        self.clock_ms: Callable[[], int] = engine.clock_ms
        # election (replica side)
        self.auth_time_ms = 0  # when the current attempt may start / started
        self.auth_count = 0
        self.auth_sent = False
        self.auth_rank = 0
        self.auth_epoch = 0
        self.auth_master: Node | None = None  # the master the election state is about
        self.cant_reason = CANT_NONE
        self.cant_logged_ms = 0
        # manual failover: replica side (mf_master_offset, mf_can_start) and master side
        # (mf_replica); mf_end_ms != 0 while one is in progress on either side
        self.mf_end_ms = 0
        self.mf_replica: Node | None = None
        self.mf_master_offset = -1
        self.mf_can_start = False
        # work requested for the next before_sleep
        self.todo_failover = False
        self.todo_manual = False
        self.won_elections = 0  # for tests / INFO

    # -- engine extension points -----------------------------------------------------------
    def header_mflags(self) -> bytes:
        """mflags of every message I send: PAUSED while I am a master in a manual failover."""
        if self.mf_end_ms and self.st.myself.is_master:
            return bytes((bus.MF_PAUSED, 0, 0))
        return b"\0\0\0"

    def on_sender_header(self, m: Message, sender: Node, now_ms: int) -> None:
        """Every packet from a known sender: my paused master tells me its offset (once)."""
        me = self.st.myself
        if (self.mf_end_ms and me.is_replica and me.slaveof is sender
                and m.mflags[0] & bus.MF_PAUSED and self.mf_master_offset == -1):
            self.mf_master_offset = m.offset
            self.todo_manual = True
            log.info("Received replication offset for paused master manual failover: %d",
                     m.offset)

    def on_message(self, link: Link, m: Message, sender: Node | None, now_ms: int) -> None:
        handler = _HANDLERS.get(m.type)
        if handler is not None and sender is not None and not sender.in_handshake:
            handler(self, link, m, sender, now_ms)

    def before_sleep(self) -> None:
        if self.mf_replica is not None and self.st.myself.is_replica:
            # I paused for a replica and am now a replica myself (clusterSetMaster resets
            # the manual failover): the paused writes go on, and get redirected.
            self.reset_manual()
        if self.todo_manual:
            self.todo_manual = False
            self.handle_manual_failover()
        if self.todo_failover:
            self.todo_failover = False
            self.handle_replica_failover()

    def cron(self, now_ms: int) -> None:
        """The failover part of clusterCron."""
        st = self.st
        me = st.myself
        self._update_my_flags()
        if self.mf_end_ms and self.mf_end_ms < now_ms:
            log.warning("Manual failover timed out.")
            self.reset_manual()
        if me.is_master and self.mf_end_ms and self.mf_replica is not None \
                and self.mf_replica.link is not None:
            self.engine.send_ping(self.mf_replica.link, bus.PING)
        if me.is_master:
            return
        master = me.slaveof
        if master is not None and master.ip and master.port:
            if self.repl.replicating_from() != (master.ip, master.port):
                self.engine.hooks.set_master(master)  # e.g. after a restart as a replica
        self.handle_manual_failover()
        self.handle_replica_failover()
        self.handle_replica_migration(now_ms)

    # -- configuration -----------------------------------------------------------------------
    def _update_my_flags(self) -> None:
        """clusterUpdateMyselfFlags: cluster-replica-no-failover -> nofailover flag."""
        me = self.st.myself
        old = me.flags
        if self.cfg.replica_no_failover:
            me.flags |= bus.F_NOFAILOVER
        else:
            me.flags &= ~bus.F_NOFAILOVER
        if me.flags != old:
            self.st.changed(TODO_SAVE | TODO_UPDATE_STATE)

    def _save_now(self) -> None:
        """Run a pending nodes.conf save (with fsync if asked) right now, before anything is
        queued to the bus: votes and promotions must be on disk first."""
        st = self.st
        if st.todo & TODO_SAVE:
            fsync = bool(st.todo & TODO_FSYNC)
            st.todo &= ~(TODO_SAVE | TODO_FSYNC)
            self.engine.hooks.save(fsync)

    # -- voter -------------------------------------------------------------------------------
    def _on_auth_request(self, link: Link, m: Message, sender: Node, now_ms: int) -> None:
        st = self.st
        why = vote_refusal(st, sender, m, self.cfg.node_timeout_ms, now_ms)
        if why is not None:
            if st.myself.is_master and st.myself.numslots:
                log.info("Failover auth denied to %s: %s", sender.name.decode(), why)
            return
        master = sender.slaveof
        assert master is not None
        st.last_vote_epoch = st.current_epoch
        master.voted_time = now_ms
        st.changed(TODO_SAVE | TODO_FSYNC)
        self._save_now()
        ack = self.engine.header(bus.FAILOVER_AUTH_ACK)
        if sender.link is not None:
            self.engine.send(sender.link, ack)
        log.info("Failover auth granted to %s for epoch %d", sender.name.decode(),
                 st.current_epoch)

    def _on_auth_ack(self, link: Link, m: Message, sender: Node, now_ms: int) -> None:
        if sender.is_master and sender.numslots > 0 and m.current_epoch >= self.auth_epoch:
            self.auth_count += 1
            self.todo_failover = True

    # -- master side of a manual failover -----------------------------------------------------
    def _on_mfstart(self, link: Link, m: Message, sender: Node, now_ms: int) -> None:
        if sender.slaveof is not self.st.myself:
            return
        self.reset_manual()
        self.mf_end_ms = now_ms + MF_TIMEOUT_MS
        self.mf_replica = sender
        self.repl.pause_writes(now_ms + MF_TIMEOUT_MS * MF_PAUSE_MULT)
        log.warning("Manual failover requested by replica %s.", sender.name.decode())
        # The ping carries PAUSED and my offset, so the replica can start as soon as possible.
        self.engine.send_ping(link, bus.PING)

    # -- replica side --------------------------------------------------------------------------
    def reset_manual(self) -> None:
        """resetManualFailover: a master that paused for a replica unpauses."""
        if self.mf_replica is not None or self.mf_end_ms:
            self.repl.unpause_writes()
        self.mf_end_ms = 0
        self.mf_can_start = False
        self.mf_replica = None
        self.mf_master_offset = -1

    def manual_failover(self, *, force: bool, takeover: bool) -> None:
        """CLUSTER FAILOVER [FORCE|TAKEOVER] on a replica whose master is known (the command
        checked the preconditions)."""
        self.reset_manual()
        now = self.clock_ms()
        self.mf_end_ms = now + MF_TIMEOUT_MS
        me = self.st.myself
        if takeover:
            log.warning("Taking over the master (user request).")
            self.engine.bump_epoch_without_consensus()
            self.replace_my_master()
        elif force:
            log.warning("Forced failover user request accepted.")
            self.mf_can_start = True
            self.todo_failover = True
        else:
            log.warning("Manual failover user request accepted.")
            master = me.slaveof
            if master is not None and master.link is not None:
                self.engine.send(master.link, self.engine.header(bus.MFSTART))

    def handle_manual_failover(self) -> None:
        """clusterHandleManualFailover: start once my offset reached the paused master's."""
        if not self.mf_end_ms or self.mf_can_start or self.mf_master_offset == -1:
            return
        # Redis compares with ==; the stream may carry a PING or GETACK after the pause
        # point, which only ever puts us further, never short of the master's writes.
        if self.repl.offset() >= self.mf_master_offset:
            self.mf_can_start = True
            self.todo_failover = True
            log.warning("All master replication stream processed, manual failover can start.")

    def handle_replica_failover(self) -> None:
        """clusterHandleSlaveFailover."""
        st = self.st
        me = st.myself
        now = self.clock_ms()
        timeout = self.cfg.node_timeout_ms
        manual = bool(self.mf_end_ms) and self.mf_can_start
        auth_timeout = auth_timeout_ms(timeout)
        auth_retry = auth_timeout * 2
        master = me.slaveof
        if (me.is_master or master is None or (not master.failed and not manual)
                or (self.cfg.replica_no_failover and not manual) or master.numslots == 0):
            self.cant_reason = CANT_NONE
            return
        if master is not self.auth_master:
            # A schedule made for another master (a failover I lost, then my new master
            # failed) must not carry over: it would skip the rank delay. Redis keeps it.
            self.auth_master = master
            self.auth_time_ms = 0
            self.auth_sent = False
            self.auth_count = 0
        # never tried: the retry window is open (Redis: auth time 0 vs the unix clock)
        auth_age = now - self.auth_time_ms if self.auth_time_ms else auth_retry + 1
        data_age = self.repl.data_age_ms()
        if data_age > timeout:
            data_age -= timeout
        factor = self.cfg.replica_validity_factor
        if factor and data_age > self.cfg.repl_ping_replica_period_s * 1000 + timeout * factor:
            if not manual:
                self._cant(CANT_DATA_AGE, now)
                return
        if auth_age > auth_retry:
            rank = replica_rank(me, master, self.repl.offset())
            self.auth_time_ms = now + election_delay_ms(
                rank, self.engine.rng.randrange(ELECTION_RANDOM_DELAY_MS))
            self.auth_count = 0
            self.auth_sent = False
            self.auth_rank = rank
            if self.mf_end_ms:
                self.auth_time_ms = now
                self.auth_rank = 0
                self.todo_failover = True
            log.warning("Start of election delayed for %d milliseconds (rank #%d, offset %d).",
                        self.auth_time_ms - now, self.auth_rank, self.repl.offset())
            self._pong_siblings(master)
            return
        if not self.auth_sent and not self.mf_end_ms:
            newrank = replica_rank(me, master, self.repl.offset())
            if newrank > self.auth_rank:
                added = (newrank - self.auth_rank) * RANK_DELAY_MS
                self.auth_time_ms += added
                self.auth_rank = newrank
                log.warning("Replica rank updated to #%d, added %d milliseconds of delay.",
                            newrank, added)
        if now < self.auth_time_ms:
            self._cant(CANT_WAITING_DELAY, now)
            return
        if auth_age > auth_timeout:
            self._cant(CANT_EXPIRED, now)
            return
        if not self.auth_sent:
            st.current_epoch += 1
            self.auth_epoch = st.current_epoch
            log.warning("Starting a failover election for epoch %d.", self.auth_epoch)
            st.changed(TODO_SAVE | TODO_UPDATE_STATE | TODO_FSYNC)
            self._save_now()
            self._request_auth()
            self.auth_sent = True
            return
        needed = st.size // 2 + 1
        if self.auth_count >= needed:
            log.warning("Failover election won: I'm the new master.")
            if me.config_epoch < self.auth_epoch:
                me.config_epoch = self.auth_epoch
                log.warning("configEpoch set to %d after successful failover", self.auth_epoch)
            self.won_elections += 1
            self.replace_my_master()
        else:
            self._cant(CANT_WAITING_VOTES, now)

    def _request_auth(self) -> None:
        """clusterRequestFailoverAuth: broadcast, FORCEACK during a manual failover."""
        m = self.engine.header(bus.FAILOVER_AUTH_REQUEST)
        if self.mf_end_ms:
            m.mflags = bytes((m.mflags[0] | bus.MF_FORCEACK,)) + m.mflags[1:]
        self.engine.broadcast(m)

    def _pong_siblings(self, master: Node) -> None:
        """clusterBroadcastPong(LOCAL_SLAVES): my offset to the other replicas of my master."""
        me = self.st.myself
        for r in master.replicas:
            if r is not me and r.link is not None and not r.in_handshake:
                self.engine.send_ping(r.link, bus.PONG)

    def _cant(self, reason: int, now_ms: int) -> None:
        """clusterLogCantFailover: log a reason when it changes (or every 10 s)."""
        if reason == self.cant_reason and now_ms - self.cant_logged_ms < CANT_FAILOVER_LOG_PERIOD_MS:
            return
        self.cant_reason = reason
        self.cant_logged_ms = now_ms
        log.info("Currently unable to failover: %s", _CANT_TEXT.get(reason, "?"))

    def replace_my_master(self) -> None:
        """clusterFailoverReplaceYourMaster: become master, claim the old master's slots, save
        with fsync, then PONG everyone so the cluster learns it at once."""
        st = self.st
        me = st.myself
        old = me.slaveof
        if me.is_master or old is None:
            return
        st.set_node_as_master(me)
        self.engine.hooks.set_master(None)  # stop replication: new replid, old kept as replid2
        for slot in bus.bitmap_slots(old.slots):
            st.del_slot(slot)
            st.add_slot(me, slot)
        self.engine.update_state()
        st.changed(TODO_SAVE | TODO_FSYNC | TODO_UPDATE_STATE)
        self._save_now()
        self.engine.broadcast_pong()
        self.reset_manual()

    # -- replica migration ---------------------------------------------------------------------
    def handle_replica_migration(self, now_ms: int) -> None:
        """clusterHandleSlaveMigration, with the counts clusterCron gathers first: go to an
        orphaned master (slots, no working replica, used to have one) when my master keeps
        more than cluster-migration-barrier working replicas and I am the candidate (the
        smallest id among replicas of the masters with the most working replicas)."""
        st = self.st
        me = st.myself
        mymaster = me.slaveof
        orphaned = max_replicas = this_replicas = 0
        for n in st.nodes.values():
            if n.replicas:
                n.flags |= bus.F_MIGRATE_TO  # clusterNodeAddSlave sets it on every master
            if not n.is_master or n.failed:
                continue
            ok = _non_failing_replicas(n)
            if ok == 0 and n.numslots > 0 and n.flags & bus.F_MIGRATE_TO:
                orphaned += 1
            max_replicas = max(max_replicas, ok)
            if n is mymaster:
                this_replicas = ok
        if not (orphaned and max_replicas >= 2 and this_replicas == max_replicas
                and self.cfg.allow_replica_migration):
            return
        if st.state != bus.STATE_OK or mymaster is None:
            return
        ok_mine = sum(1 for r in mymaster.replicas if not r.failed and not r.timed_out)
        if ok_mine <= self.cfg.migration_barrier:
            return
        candidate = me
        target: Node | None = None
        for n in st.nodes.values():
            ok = _non_failing_replicas(n) if n.is_master else 0
            orphan = (n.is_master and not n.failed and bool(n.flags & bus.F_MIGRATE_TO)
                      and ok == 0)
            if orphan:
                if target is None and n.numslots > 0:
                    target = n
                if not n.orphaned_time:
                    n.orphaned_time = now_ms
            else:
                n.orphaned_time = 0
            if ok == max_replicas:
                for r in n.replicas:
                    if r.name < candidate.name:
                        candidate = r
        if (target is not None and candidate is me
                and now_ms - target.orphaned_time > REPLICA_MIGRATION_DELAY_MS):
            log.warning("Migrating to orphaned master %s", target.name.decode())
            self.engine.set_my_master(target)

    # -- introspection -------------------------------------------------------------------------
    def info_fields(self) -> list[tuple[str, object]]:
        return [("failover_auth_epoch", self.auth_epoch),
                ("failover_elections_won", self.won_elections),
                ("manual_failover_in_progress", int(bool(self.mf_end_ms)))]


def _non_failing_replicas(master: Node) -> int:
    """clusterCountNonFailingSlaves (FAIL only; PFAIL replicas still count)."""
    return sum(1 for r in master.replicas if not r.failed)


_HANDLERS: dict[int, Callable[[Failover, Link, Message, Node, int], None]] = {
    bus.FAILOVER_AUTH_REQUEST: Failover._on_auth_request,
    bus.FAILOVER_AUTH_ACK: Failover._on_auth_ack,
    bus.MFSTART: Failover._on_mfstart,
}

EXT_MESSAGE_TYPES = frozenset(_HANDLERS)
