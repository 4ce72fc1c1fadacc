"""Gossip, handshake, PFAIL/FAIL and epochs of the sans-IO engine, on an in-memory network under
trio's MockClock (node timeouts of seconds run in milliseconds of wall time)."""

from __future__ import annotations

import functools
import random
from collections.abc import Callable

import trio
import trio.testing

from slotgate.node.cluster import bus
from slotgate.node.cluster.gossip import Engine, FixedSettings, Hooks, Link
from slotgate.node.cluster.state import ClusterState, Node, random_name


def mock_ms() -> int:
    return int(trio.current_time() * 1000)


class Net:
    """Delivers queued link bytes between engines; a node can be cut off (``down``)."""

    def __init__(self) -> None:
        self.engines: dict[int, Engine] = {}  # by bus port
        self.down: set[int] = set()
        self.queue: list[tuple[Engine, Link, bytes]] = []
        self.peer: dict[Link, tuple[Engine, Link]] = {}
        self.closing: list[tuple[Engine, Link]] = []
        self.connected: list[tuple[Engine, Link]] = []

    def add(self, port: int, timeout_ms: int = 2000, seed: int = 0) -> Engine:
        me = Node(random_name(), bus.F_MYSELF | bus.F_MASTER, mock_ms())
        me.ip, me.port, me.cport = "127.0.0.1", port, port + 10000
        st = ClusterState(me, mock_ms)
        hooks = Hooks()
        eng = Engine(st, FixedSettings(timeout_ms, port, port + 10000), hooks, mock_ms,
                     random.Random(seed or port))
        hooks.connect = functools.partial(self._connect, eng)
        hooks.close = functools.partial(self._close, eng)
        self.engines[port + 10000] = eng
        return eng

    def _wire(self, src: Engine, link: Link) -> Callable[[], None]:
        def wake() -> None:
            dst = self.peer.get(link)
            while link.out:
                data = link.out.pop(0)
                if dst is not None:
                    self.queue.append((dst[0], dst[1], data))
        return wake

    def _connect(self, src: Engine, link: Link) -> None:
        assert link.node is not None
        dst = self.engines.get(link.node.cport)
        src_port = src.st.myself.cport
        if dst is None or link.node.cport in self.down or src_port in self.down:
            self.closing.append((src, link))
            return
        inbound = dst.accept("127.0.0.1", "127.0.0.1")
        link.local_ip = "127.0.0.1"
        self.peer[link] = (dst, inbound)
        self.peer[inbound] = (src, link)
        link.wake = self._wire(src, link)
        inbound.wake = self._wire(dst, inbound)
        link.wake()
        self.connected.append((src, link))  # the connect handler runs after the cron

    def _close(self, eng: Engine, link: Link) -> None:
        other = self.peer.pop(link, None)
        if other is not None:
            self.peer.pop(other[1], None)
            self.closing.append(other)

    def cut(self, port: int) -> None:
        """Node ``port`` drops off the network: every link to or from it breaks."""
        cport = port + 10000
        self.down.add(cport)
        for link, (dst, dlink) in list(self.peer.items()):
            src_eng = self.peer.get(dlink, (None, None))[0]
            if dst.st.myself.cport == cport or (src_eng is not None
                                                 and src_eng.st.myself.cport == cport):
                self.peer.pop(link, None)
                self.closing.append((dst, dlink))

    def pump(self) -> None:
        for _ in range(1000):
            if self.connected:
                connected, self.connected = self.connected, []
                for eng, link in connected:
                    eng.on_link_connected(link)
            if self.closing:
                closing, self.closing = self.closing, []
                for eng, link in closing:
                    eng.on_link_closed(link)
            if not self.queue:
                break
            items, self.queue = self.queue, []
            for eng, link, data in items:
                if eng.st.myself.cport in self.down or link.closed:
                    continue
                eng.on_message(link, data)
            for eng in self.engines.values():
                eng.before_sleep()

    async def run_for(self, seconds: float) -> None:
        end = trio.current_time() + seconds
        while trio.current_time() < end:
            await trio.sleep(0.1)
            for eng in self.engines.values():  # a cut-off node still runs its cron
                eng.cron()
                eng.before_sleep()
            self.pump()


def run(fn: Callable[[], object]) -> None:
    trio.run(fn, clock=trio.testing.MockClock(autojump_threshold=0))  # type: ignore[arg-type]


def assign(eng: Engine, first: int, last: int) -> None:
    for s in range(first, last + 1):
        eng.st.add_slot(eng.st.myself, s)


def form(net: Net, n: int, with_slots: bool = True) -> list[Engine]:
    engines = [net.add(20001 + i) for i in range(n)]
    if with_slots:
        step = 16384 // n
        for i, e in enumerate(engines):
            assign(e, i * step, 16383 if i == n - 1 else (i + 1) * step - 1)
            e.st.myself.config_epoch = i + 1
            e.st.current_epoch = i + 1
    for e in engines[1:]:
        assert e.start_handshake("127.0.0.1", 20001, 30001)
    return engines


def test_meet_handshake_and_gossip_spread() -> None:
    async def main() -> None:
        net = Net()
        engines = form(net, 5)
        await net.run_for(5)
        names = {e.st.myself.name for e in engines}
        for e in engines:
            assert set(e.st.nodes) == names, "every node knows every other by its real id"
            for n in e.st.nodes.values():
                assert not n.flags & (bus.F_HANDSHAKE | bus.F_NOADDR | bus.F_PFAIL)
                assert n.numslots > 0 and n.ip == "127.0.0.1"
            assert e.st.state == bus.STATE_OK
            assert e.st.size == 5
        # all agree on every slot owner
        owners = [[n.name if n else None for n in e.st.slots] for e in engines]
        assert all(o == owners[0] for o in owners)
    run(main)


def test_pfail_then_fail_with_majority_and_recovery() -> None:
    async def main() -> None:
        net = Net()
        engines = form(net, 5)
        await net.run_for(5)
        victim = engines[4]
        vname = victim.st.myself.name
        net.cut(victim.st.myself.port)
        t0 = trio.current_time()
        # Within node_timeout nobody flags it.
        await net.run_for(1.5)
        for e in engines[:4]:
            assert not e.st.nodes[vname].flags & (bus.F_PFAIL | bus.F_FAIL)
        # A while after node_timeout (2 s): FAIL everywhere (reports from a majority).
        while trio.current_time() - t0 < 20:
            await net.run_for(0.5)
            if all(e.st.nodes[vname].failed for e in engines[:4]):
                break
        assert all(e.st.nodes[vname].failed for e in engines[:4])
        assert trio.current_time() - t0 > 2.0
        for e in engines[:4]:
            assert e.st.state == bus.STATE_FAIL  # its slots are uncovered
            assert e.st.stats_sent[bus.FAIL] + e.st.stats_received[bus.FAIL] > 0
        # It comes back: a master with slots has FAIL cleared after 2 x node_timeout.
        net.down.clear()
        await net.run_for(8)
        for e in engines[:4]:
            assert not e.st.nodes[vname].flags & (bus.F_FAIL | bus.F_PFAIL)
            assert e.st.state == bus.STATE_OK
    run(main)


def test_minority_does_not_mark_fail() -> None:
    async def main() -> None:
        net = Net()
        engines = form(net, 5)
        await net.run_for(5)
        # cut two nodes: the other three are a majority of 5 and mark both FAIL...
        net.cut(engines[3].st.myself.port)
        net.cut(engines[4].st.myself.port)
        await net.run_for(10)
        for e in engines[:3]:
            assert e.st.nodes[engines[3].st.myself.name].failed
        # ...while an isolated node only reaches PFAIL for the others (no quorum).
        iso = engines[4]
        for name, n in iso.st.nodes.items():
            if n is not iso.st.myself:
                assert n.flags & bus.F_PFAIL and not n.flags & bus.F_FAIL, name
        assert iso.st.state == bus.STATE_FAIL
    run(main)


def test_epoch_collision_resolves_to_distinct_epochs() -> None:
    async def main() -> None:
        net = Net()
        engines = form(net, 4, with_slots=False)
        for i, e in enumerate(engines):
            assign(e, i * 4096, i * 4096 + 4095)  # every configEpoch stays 0
        await net.run_for(10)
        epochs = {e.st.myself.config_epoch for e in engines}
        assert len(epochs) == 4
        top = max(e.st.current_epoch for e in engines)
        assert all(e.st.current_epoch == top for e in engines)
    run(main)


def test_higher_epoch_claim_rebinds_slots_and_update_fixes_stale_owner() -> None:
    async def main() -> None:
        net = Net()
        engines = form(net, 3)
        await net.run_for(5)
        a, b, c = engines
        slot = 0  # owned by a (epoch 1)
        # b takes slot 0 with a bumped epoch (as SETSLOT NODE after importing does)
        b.st.del_slot(slot)
        b.st.add_slot(b.st.myself, slot)
        assert b.bump_epoch_without_consensus()
        b.broadcast_pong()
        net.pump()
        await net.run_for(3)
        for e in engines:
            assert e.st.slots[slot] is e.st.nodes[b.st.myself.name]
        assert a.st.myself.numslots == 16384 // 3 - 1
    run(main)


def test_forget_blacklist_blocks_gossip_readd() -> None:
    async def main() -> None:
        net = Net()
        engines = form(net, 3)
        await net.run_for(5)
        a, b, c = engines
        cname = c.st.myself.name
        net.cut(c.st.myself.port)
        a.forget(a.st.nodes[cname])
        await net.run_for(5)  # b still gossips about c
        assert cname not in a.st.nodes
    run(main)


def test_gossip_section_size_and_pfail_appended() -> None:
    async def main() -> None:
        net = Net()
        engines = form(net, 12)
        await net.run_for(8)
        e = engines[0]
        others = [n for n in e.st.nodes.values() if n is not e.st.myself]
        pf = others[0]
        pf.flags |= bus.F_PFAIL
        e.st.stats_pfail_nodes = 1
        link = Link(others[1], False, mock_ms())
        e.send_ping(link, bus.PING)
        m = bus.decode(link.out[-1])
        names = [g.name for g in m.gossip]
        assert len(names) == 3 + 1  # wanted = max(3, 12 // 10); all PFAIL nodes appended
        assert names[-1] == pf.name and pf.name not in names[:-1]
        assert e.st.myself.name not in names
    run(main)


def test_stale_owner_gets_update_and_gives_up_slot() -> None:
    async def main() -> None:
        net = Net()
        engines = form(net, 3)
        await net.run_for(5)
        a, b, c = engines
        net.cut(a.st.myself.port)  # a keeps claiming slot 0 while it is away
        b.st.del_slot(0)
        b.st.add_slot(b.st.myself, 0)
        assert b.bump_epoch_without_consensus()
        b.broadcast_pong()
        net.pump()
        await net.run_for(2)
        assert c.st.slots[0] is c.st.nodes[b.st.myself.name]
        assert a.st.slots[0] is a.st.myself  # stale
        net.down.clear()
        await net.run_for(5)
        assert a.st.slots[0] is a.st.nodes[b.st.myself.name]
        assert a.st.stats_received[bus.UPDATE] > 0  # told by an UPDATE message
        assert b.st.stats_sent[bus.UPDATE] + c.st.stats_sent[bus.UPDATE] > 0
    run(main)


def test_replica_role_and_master_slots_spread() -> None:
    async def main() -> None:
        net = Net()
        engines = form(net, 3, with_slots=True)
        r = net.add(20010)
        r.start_handshake("127.0.0.1", 20001, 30001)
        await net.run_for(4)
        master = r.st.nodes[engines[0].st.myself.name]
        r.set_my_master(master)
        r.before_sleep()
        await net.run_for(3)
        rname = r.st.myself.name
        for e in engines:
            node = e.st.nodes[rname]
            assert node.is_replica and node.slaveof is e.st.nodes[master.name]
            assert node in e.st.nodes[master.name].replicas
        # a replica's header carries its master's slots and epoch
        link = Link(None, False, mock_ms())
        r.send_ping(link, bus.PING)
        m = bus.decode(link.out[-1])
        assert m.slaveof == master.name and m.myslots == bytes(master.slots)
        assert m.config_epoch == master.config_epoch
    run(main)


def test_mutated_messages_never_raise() -> None:
    """Garbage from a peer (random byte flips in valid messages) is dropped or processed, but
    never raises out of the engine."""
    async def main() -> None:
        net = Net()
        engines = form(net, 3)
        await net.run_for(4)
        a, b, _ = engines
        samples: list[bytes] = []
        link = Link(None, False, mock_ms())
        b.send_ping(link, bus.PING)
        b.send_ping(link, bus.MEET)
        b.send_update(link, b.st.myself)
        samples.extend(link.out)
        fail = b.header(bus.FAIL)
        fail.fail_name = engines[2].st.myself.name
        pub = b.header(bus.PUBLISH)
        pub.channel, pub.message = b"ch", b"msg"
        samples += [bus.encode(fail), bus.encode(pub)]
        rng = random.Random(7)
        inbound = a.accept("127.0.0.1", "127.0.0.1")
        for _ in range(3000):
            raw = bytearray(rng.choice(samples))
            for _ in range(rng.randint(1, 8)):
                pos = rng.randrange(8, len(raw))
                raw[pos] = rng.randrange(256)
            a.on_message(inbound, bytes(raw))
            a.before_sleep()
        a.cron()
    run(main)


def test_new_link_pings_as_redis_does() -> None:
    """clusterCron only creates the link; clusterLinkConnectHandler sends the first PING/MEET
    when the connection is up. A node learned by gossip (pong_received 0) therefore also gets
    the cron's PING on the still-connecting link: two PINGs, ping_sent from the first. A
    reconnect to a node that answered recently gets one; a MEET handshake node gets the MEET."""
    async def main() -> None:
        await trio.sleep(1.5)  # the mock clock starts at 0: let pong_received 0 be > timeout/2 old
        now = mock_ms()
        eng = Net().add(20001)
        links: list[Link] = []
        eng.hooks.connect = links.append
        learned = Node(random_name(), bus.F_MASTER, now)  # as clusterProcessGossipSection adds it
        learned.ip, learned.port, learned.cport = "127.0.0.1", 20002, 30002
        answered = Node(random_name(), bus.F_MASTER, now)
        answered.ip, answered.port, answered.cport = "127.0.0.1", 20003, 30003
        answered.pong_received = now
        eng.st.add_node(learned)
        eng.st.add_node(answered)
        assert eng.start_handshake("127.0.0.1", 20004, 30004)
        await trio.sleep(0.05)  # mock clock: the cron runs 50 ms later
        eng.cron()
        assert len(links) == 3 and all(lk.node.link is lk for lk in links)
        by_node = {lk.node.port: lk for lk in links}
        assert [bus.decode(m).type for m in by_node[20002].out] == [bus.PING]
        assert by_node[20003].out == [] and by_node[20004].out == []
        first_ping_ms = learned.ping_sent
        assert first_ping_ms == mock_ms()
        await trio.sleep(0.01)  # mock clock: the links come up 10 ms later
        for lk in links:
            eng.on_link_connected(lk)
        assert [bus.decode(m).type for m in by_node[20002].out] == [bus.PING, bus.PING]
        assert learned.ping_sent == first_ping_ms  # the ping in flight keeps its time
        assert [bus.decode(m).type for m in by_node[20003].out] == [bus.PING]
        assert answered.ping_sent == mock_ms()
        meet = by_node[20004]
        assert [bus.decode(m).type for m in meet.out] == [bus.MEET]
        assert not meet.node.flags & bus.F_MEET
    run(main)


def test_nodes_learned_in_a_pass_are_linked_before_the_next_cron() -> None:
    """A CLUSTER MEET target and a node learned from gossip get their outbound link (and,
    for the gossiped one, the cron's PING) when the pass that learned them ends, not at the
    next cron tick: with no cron at all, a newcomer meets one node, hears of the other one in
    its gossip and reaches it."""
    async def main() -> None:
        await trio.sleep(1.5)  # pong_received 0 of a gossiped node must be > timeout/2 old
        net = Net()
        a, b = form(net, 2)
        await net.run_for(3)
        assert b.st.myself.name in a.st.nodes and a.st.myself.name in b.st.nodes
        c = net.add(20003)
        assert c.start_handshake("127.0.0.1", 20001, 30001)
        c.before_sleep()
        (hs,) = [n for n in c.st.nodes.values() if n.in_handshake]
        assert hs.link is not None, "the MEET target is linked at once"
        net.pump()  # deliveries and before_sleep only, no cron
        a_at_c = c.st.nodes.get(a.st.myself.name)
        assert a_at_c is not None and not a_at_c.in_handshake and a_at_c.link is not None
        assert c.st.myself.name in a.st.nodes and a.st.nodes[c.st.myself.name].link is not None
        # A PING from a whose gossip names b (the entries are random: draw until it does).
        b_name = b.st.myself.name
        for _ in range(100):
            probe = Link(a.st.nodes[c.st.myself.name], False, mock_ms())
            a.send_ping(probe, bus.PING)
            if b_name in [g.name for g in bus.decode(probe.out[-1]).gossip]:
                break
        else:
            raise AssertionError("a's gossip never named b")
        assert b_name not in c.st.nodes
        c.on_message(a_at_c.link, probe.out[-1])
        c.before_sleep()
        b_at_c = c.st.nodes.get(b_name)
        assert b_at_c is not None and b_at_c.link is not None, "linked in the same pass"
        net.pump()
        assert b_at_c.pong_received > 0, "b answered the PING"
    run(main)
