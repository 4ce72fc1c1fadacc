"""node/cluster/failover.py without processes: the voter rules in order, the vote saved with
fsync before the ACK is queued, election timing and rank, and whole elections (automatic,
FORCE, TAKEOVER, the manual handshake) between engines on the in-memory network of
test_cluster_gossip, under trio's MockClock."""

from __future__ import annotations

import random

import trio

from slotgate.node.cluster import bus
from slotgate.node.cluster.bus import Message
from slotgate.node.cluster.failover import (
    Failover,
    election_delay_ms,
    replica_rank,
    vote_refusal,
)
from slotgate.node.cluster.gossip import Engine, Hooks, Link
from slotgate.node.cluster.state import ClusterState, Node, random_name
from tests.node.test_cluster_gossip import Net, form, run


class FakeSettings:
    def __init__(self, node_timeout_ms: int = 2000) -> None:
        self.node_timeout_ms = node_timeout_ms
        self.replica_validity_factor = 10
        self.repl_ping_replica_period_s = 10
        self.replica_no_failover = False
        self.migration_barrier = 1
        self.allow_replica_migration = True


class FakeRepl:
    """ReplicationPort: the offset is set by the test; pauses are recorded."""

    def __init__(self) -> None:
        self.off = 0
        self.age_ms = 0
        self.master: tuple[str, int] | None = None
        self.paused_until = 0
        self.pauses: list[int] = []

    def offset(self) -> int:
        return self.off

    def data_age_ms(self) -> int:
        return self.age_ms

    def replicating_from(self) -> tuple[str, int] | None:
        return self.master

    def pause_writes(self, until_ms: int) -> None:
        self.paused_until = until_ms
        self.pauses.append(until_ms)

    def unpause_writes(self) -> None:
        self.paused_until = 0


def attach(eng: Engine, timeout_ms: int = 2000) -> tuple[Failover, FakeRepl]:
    repl = FakeRepl()
    fo = Failover(eng, FakeSettings(timeout_ms), repl)
    eng.ext = fo

    def set_master(node: Node | None) -> None:
        repl.master = None if node is None else (node.ip, node.port)

    eng.hooks.set_master = set_master
    eng.hooks.repl_offset = repl.offset
    return fo, repl


# -- voter rules -------------------------------------------------------------------------------
def _voter() -> tuple[ClusterState, Node, Node, Node]:
    """A master with slots 0-99 (me, epoch 1), a FAIL master with 100-199 (epoch 2) and its
    replica asking for votes."""
    now = 1_000_000
    me = Node(random_name(), bus.F_MYSELF | bus.F_MASTER, now)
    st = ClusterState(me, lambda: now)
    failed = Node(random_name(), bus.F_MASTER | bus.F_FAIL, now)
    replica = Node(random_name(), bus.F_SLAVE, now)
    st.add_node(failed)
    st.add_node(replica)
    st.set_replica_of(replica, failed)
    for s in range(100):
        st.add_slot(me, s)
    for s in range(100, 200):
        st.add_slot(failed, s)
    me.config_epoch, failed.config_epoch = 1, 2
    st.current_epoch = 5
    return st, me, failed, replica


def _request(st: ClusterState, failed: Node, replica: Node, epoch: int = 5,
             config_epoch: int = 2, mflags: bytes = b"\0\0\0") -> Message:
    return Message(type=bus.FAILOVER_AUTH_REQUEST, sender=replica.name, current_epoch=epoch,
                   config_epoch=config_epoch, myslots=bytes(failed.slots),
                   slaveof=failed.name, mflags=mflags)


def test_vote_granted_when_every_rule_holds() -> None:
    st, me, failed, replica = _voter()
    assert vote_refusal(st, replica, _request(st, failed, replica), 2000, 1_000_000) is None


def test_vote_refusals_in_order() -> None:
    st, me, failed, replica = _voter()
    now = 1_000_000
    m = _request(st, failed, replica)
    # 2: a request from an older epoch
    assert "reqEpoch (4) < curEpoch(5)" in str(
        vote_refusal(st, replica, _request(st, failed, replica, epoch=4), 2000, now))
    # 3: one vote per epoch
    st.last_vote_epoch = 5
    assert "already voted" in str(vote_refusal(st, replica, m, 2000, now))
    st.last_vote_epoch = 4
    # 4: the master must be FAIL, unless FORCEACK
    failed.flags &= ~bus.F_FAIL
    assert vote_refusal(st, replica, m, 2000, now) == "its master is up"
    forced = _request(st, failed, replica, mflags=bytes((bus.MF_FORCEACK, 0, 0)))
    assert vote_refusal(st, replica, forced, 2000, now) is None
    failed.flags |= bus.F_FAIL
    # 5: not twice for the same master within 2 x node_timeout
    failed.voted_time = now - 3999
    assert "can't vote about this master" in str(vote_refusal(st, replica, m, 2000, now))
    failed.voted_time = now - 4001
    assert vote_refusal(st, replica, m, 2000, now) is None
    # 6: a claimed slot whose owner has a greater configEpoch than the request's
    stale = _request(st, failed, replica, config_epoch=1)
    assert "slot 100 epoch (2) > reqEpoch (1)" in str(
        vote_refusal(st, replica, stale, 2000, now))
    # 1: only masters with slots vote
    st.del_node_slots(me)
    assert vote_refusal(st, replica, m, 2000, now) == "I am not a master with slots"


def test_vote_is_saved_with_fsync_before_the_ack_is_queued() -> None:
    st, me, failed, replica = _voter()
    events: list[str] = []
    hooks = Hooks()
    hooks.save = lambda fsync: events.append(
        f"save {'fsync' if fsync else 'nofsync'} epoch={st.last_vote_epoch}")
    eng = Engine(st, _GossipSettings(), hooks, lambda: 1_000_000, random.Random(1))
    fo, _ = attach(eng)
    link = Link(replica, False, 0)
    link.wake = lambda: events.append("ack queued")
    replica.link = link
    fo.on_message(link, _request(st, failed, replica), replica, 1_000_000)
    assert events == ["save fsync epoch=5", "ack queued"]
    assert st.last_vote_epoch == 5 and failed.voted_time == 1_000_000
    assert bus.decode(link.out[0]).type == bus.FAILOVER_AUTH_ACK
    # a second request in the same epoch gets nothing
    fo.on_message(link, _request(st, failed, replica), replica, 1_000_001)
    assert len(link.out) == 1


class _GossipSettings:
    node_timeout_ms = 2000
    port = 7000
    cport = 17000
    pport = 0
    announce_ip = ""
    hostname = ""
    require_full_coverage = True
    allow_replica_migration = True


def test_rank_and_delay() -> None:
    now = 0
    me = Node(random_name(), bus.F_MYSELF | bus.F_SLAVE, now)
    st = ClusterState(me, lambda: now)
    master = Node(random_name(), bus.F_MASTER, now)
    a, b, c = (Node(random_name(), bus.F_SLAVE, now) for _ in range(3))
    for n in (master, a, b, c):
        st.add_node(n)
    for r in (me, a, b, c):
        st.set_replica_of(r, master)
    a.repl_offset, b.repl_offset, c.repl_offset = 100, 300, 500
    assert replica_rank(me, master, 400) == 1
    assert replica_rank(me, master, 50) == 3
    c.flags |= bus.F_NOFAILOVER  # cannot fail over: not counted
    assert replica_rank(me, master, 50) == 2
    assert replica_rank(me, master, 600) == 0
    assert election_delay_ms(0, 0) == 500
    assert election_delay_ms(2, 499) == 500 + 499 + 2000


# -- whole elections on the in-memory network ----------------------------------------------------
async def _cluster(net: Net, replicas: int = 1) -> tuple[list[Engine], list[Engine],
                                                          list[FakeRepl]]:
    masters = form(net, 3)
    extra = [net.add(20101 + i) for i in range(replicas)]
    for e in extra:
        assert e.start_handshake("127.0.0.1", 20001, 30001)
    repls = []
    for e in masters + extra:
        _, repl = attach(e)
        repls.append(repl)
    await net.run_for(4)
    m0 = extra[0].st.lookup(masters[0].st.myself.name)
    assert m0 is not None
    for e in extra:
        target = e.st.lookup(masters[0].st.myself.name)
        assert target is not None
        e.set_my_master(target)
    await net.run_for(3)
    for e in masters + extra:
        assert e.st.state == bus.STATE_OK
    return masters, extra, repls[3:]


def test_automatic_failover_elects_the_replica() -> None:
    async def main() -> None:
        net = Net()
        masters, (replica,), (rrepl,) = await _cluster(net)
        rrepl.off = 1000
        old = masters[0].st.myself
        epoch_before = max(e.st.current_epoch for e in masters)
        net.cut(old.port)
        t0 = trio.current_time()
        while not replica.st.myself.is_master and trio.current_time() - t0 < 20:
            await net.run_for(0.1)
        elapsed = trio.current_time() - t0
        me = replica.st.myself
        assert me.is_master and me.numslots == old.numslots
        # node_timeout, then FAIL agreement, then 500..999 ms of delay
        assert 2.5 < elapsed < 2 + 1.0 + 2.0, elapsed
        assert me.config_epoch == replica.st.current_epoch > epoch_before
        assert rrepl.master is None  # replication stopped
        await net.run_for(1)
        for e in masters[1:]:
            assert e.st.slots[0] is e.st.lookup(me.name)
            assert e.st.last_vote_epoch == me.config_epoch
            assert e.st.state == bus.STATE_OK
    run(main)


def test_manual_failover_waits_for_the_paused_offset() -> None:
    async def main() -> None:
        net = Net()
        masters, (replica,), (rrepl,) = await _cluster(net)
        mfo = masters[0].ext
        assert isinstance(mfo, Failover)
        mrepl = mfo.repl
        assert isinstance(mrepl, FakeRepl)
        mrepl.off = 5000
        rrepl.off = 4000
        rfo = replica.ext
        assert isinstance(rfo, Failover)
        rfo.manual_failover(force=False, takeover=False)
        await net.run_for(1)
        assert mrepl.paused_until > 0  # the master paused writes
        assert rfo.mf_master_offset == 5000
        assert replica.st.myself.is_replica  # not caught up yet
        rrepl.off = 5000
        await net.run_for(1)
        assert replica.st.myself.is_master
        assert masters[0].st.myself.is_replica  # the old master follows
        assert mrepl.paused_until == 0  # and unpaused
        assert mrepl.master == ("127.0.0.1", replica.st.myself.port)
    run(main)


def test_manual_failover_times_out_and_unpauses() -> None:
    async def main() -> None:
        net = Net()
        masters, (replica,), (rrepl,) = await _cluster(net)
        mfo = masters[0].ext
        rfo = replica.ext
        assert isinstance(mfo, Failover) and isinstance(rfo, Failover)
        mrepl = mfo.repl
        assert isinstance(mrepl, FakeRepl)
        mrepl.off, rrepl.off = 5000, 10  # never catches up
        rfo.manual_failover(force=False, takeover=False)
        await net.run_for(1)
        assert mrepl.paused_until
        await net.run_for(5)
        assert not mrepl.paused_until and not rfo.mf_end_ms and not mfo.mf_end_ms
        assert replica.st.myself.is_replica and masters[0].st.myself.is_master
    run(main)


def test_force_and_takeover() -> None:
    async def main() -> None:
        net = Net()
        masters, (replica,), _ = await _cluster(net)
        rfo = replica.ext
        assert isinstance(rfo, Failover)
        net.cut(masters[0].st.myself.port)
        rfo.manual_failover(force=True, takeover=False)
        await net.run_for(0.5)
        assert replica.st.myself.is_master  # FORCEACK votes, no FAIL needed
        assert masters[1].st.last_vote_epoch == replica.st.myself.config_epoch
        # TAKEOVER: no votes at all
        net2 = Net()
        masters2, (replica2,), _ = await _cluster(net2)
        votes_before = [e.st.last_vote_epoch for e in masters2]
        fo2 = replica2.ext
        assert isinstance(fo2, Failover)
        fo2.manual_failover(force=False, takeover=True)
        assert replica2.st.myself.is_master
        assert replica2.st.myself.config_epoch == replica2.st.current_epoch
        await net2.run_for(1)
        assert [e.st.last_vote_epoch for e in masters2] == votes_before
        assert masters2[0].st.myself.is_replica
    run(main)


def test_higher_offset_replica_wins_in_memory() -> None:
    async def main() -> None:
        for seed in range(5):
            net = Net()
            masters, replicas, repls = await _cluster(net, replicas=2)
            ahead = seed % 2
            repls[ahead].off, repls[1 - ahead].off = 9000, 5000
            await net.run_for(1)  # offsets reach the siblings
            net.cut(masters[0].st.myself.port)
            await net.run_for(8)
            assert replicas[ahead].st.myself.is_master, seed
            assert replicas[1 - ahead].st.myself.is_replica
            loser_master = replicas[1 - ahead].st.myself.slaveof
            assert loser_master is not None
            assert loser_master.name == replicas[ahead].st.myself.name
    run(main)



def test_replica_migrates_to_an_orphaned_master() -> None:
    async def main() -> None:
        net = Net()
        masters = form(net, 3)
        extra = [net.add(20101 + i) for i in range(3)]
        for e in extra:
            assert e.start_handshake("127.0.0.1", 20001, 30001)
        for e in masters + extra:
            attach(e)
        await net.run_for(4)
        m0, m1 = (extra[0].st.lookup(m.st.myself.name) for m in masters[:2])
        assert m0 is not None and m1 is not None
        for e in extra[:2]:  # two replicas for master 0
            target = e.st.lookup(m0.name)
            assert target is not None
            e.set_my_master(target)
        lone = extra[2].st.lookup(m1.name)
        assert lone is not None
        extra[2].set_my_master(lone)
        await net.run_for(3)
        net.cut(extra[2].st.myself.port)  # master 1 loses its only replica
        await net.run_for(12)  # FAIL, then the 5 s orphan delay
        moved = [e for e in extra[:2] if e.st.myself.slaveof is not None
                 and e.st.myself.slaveof.name == m1.name]
        assert len(moved) == 1, "exactly one replica of master 0 migrated"
        smallest = min(extra[:2], key=lambda e: e.st.myself.name)
        assert moved[0] is smallest  # the candidate is the smallest id
        stayed = [e for e in extra[:2] if e is not moved[0]][0]
        assert stayed.st.myself.slaveof is not None
        assert stayed.st.myself.slaveof.name == m0.name
    run(main)


def test_no_failover_flag_and_data_age_block_automatic_but_not_force() -> None:
    async def main() -> None:
        for blocker in ("nofailover", "data_age"):
            net = Net()
            masters, (replica,), (rrepl,) = await _cluster(net)
            rfo = replica.ext
            assert isinstance(rfo, Failover)
            if blocker == "nofailover":
                rfo.cfg.replica_no_failover = True  # type: ignore[misc]
            else:  # 10 s ping period + 10 x node_timeout, plus node_timeout, exceeded
                rrepl.age_ms = 10_000 + 10 * 2000 + 2000 + 1
            await net.run_for(1)
            if blocker == "nofailover":  # gossiped to the others as the nofailover flag
                seen = masters[1].st.lookup(replica.st.myself.name)
                assert seen is not None and seen.flags & bus.F_NOFAILOVER
            net.cut(masters[0].st.myself.port)
            await net.run_for(10)
            assert replica.st.myself.is_replica, blocker
            rfo.manual_failover(force=True, takeover=False)
            await net.run_for(0.5)
            assert replica.st.myself.is_master, blocker
    run(main)


def test_full_coverage_setting_decides_the_state() -> None:
    async def main() -> None:
        for full in (True, False):
            net = Net()
            engines = form(net, 3)
            for e in engines:
                e.cfg.require_full_coverage = full  # type: ignore[misc]
            await net.run_for(4)
            net.cut(engines[2].st.myself.port)
            await net.run_for(8)
            for e in engines[:2]:
                lost = e.st.lookup(engines[2].st.myself.name)
                assert lost is not None and lost.failed
                assert e.st.state == (bus.STATE_FAIL if full else bus.STATE_OK), full
    run(main)
