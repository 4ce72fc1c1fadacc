"""Pops (and BLMOVE) across slots that wait are woken by the nodes' invalidations, not by
polling (``proxy/routing/keywake.py``): while nothing arrives, the masters run no pop script
and hold no blocked connection; an element added later is answered. Through the proxy, a real
cluster and then our nodes (the ``slotgate`` fixture runs each test once per cluster).
"""

from __future__ import annotations

import time
import uuid

import pytest

from slotgate.protocol.slots import key_slot
from slotgate.proxy.routing.splitter import array_elements
from tests.conftest import ClusterBackend
from tests.proxy.test_blocking_crossslot import _keys
from tests.proxy.test_redirects import finish_migration, open_migration, slot_owner
from tests.proxy.test_redirects import masters as redirect_masters
from tests.support import ManagedProcess, RawClient, blocked_clients, wait_until

# A pop over keys on two masters, and how an element reaches the second key.
POPS = {
    "bzpopmin": (["BZPOPMIN", "{a}", "{c}", "0"], ["ZADD", "{c}", "7", "m"]),
    "bzmpop": (["BZMPOP", "0", "2", "{a}", "{c}", "MAX", "COUNT", "2"],
               ["ZADD", "{c}", "7", "m"]),
    "blpop": (["BLPOP", "{a}", "{c}", "0"], ["RPUSH", "{c}", "m"]),
}


def _masters(cluster_backend: ClusterBackend) -> list[RawClient]:
    out = []
    for n in cluster_backend.nodes:
        c = RawClient(n.port)
        if b"role:master" in c.call("INFO", "replication"):
            out.append(c)
        else:
            c.close()
    return out


def _calls(master: RawClient, command: str) -> int:
    """INFO commandstats' calls of ``command`` (0 before its first)."""
    for line in master.call("INFO", "commandstats").split(b"\r\n"):
        if line.startswith(b"cmdstat_%s:calls=" % command.encode()):
            return int(line.split(b"=")[1].split(b",")[0])
    return 0


def _scripts(masters: list[RawClient]) -> int:
    return sum(_calls(m, "eval") + _calls(m, "evalsha") for m in masters)


@pytest.mark.parametrize("pop", sorted(POPS))
def test_a_waiting_pop_costs_nothing_until_an_element_arrives(
        slotgate: ManagedProcess, cluster_backend: ClusterBackend, pop: str) -> None:
    keys = _keys()
    names = {"{a}": keys["a"], "{c}": keys["c"]}
    command, add = ([names.get(w, w) for w in words] for words in POPS[pop])
    masters = _masters(cluster_backend)
    try:
        before = _scripts(masters)
        with RawClient(slotgate.port) as waiter, RawClient(slotgate.port) as pusher:
            waiter.send(*command)
            # step 1 on both masters, the keys armed, step 1 again: then it waits
            wait_until(lambda: _scripts(masters) >= before + 4, what="two tries")
            waiting = _scripts(masters)
            time.sleep(1.0)  # polling every 50 ms would run ~40 scripts meanwhile
            assert _scripts(masters) == waiting
            assert waiter.nothing_pending(0.1)
            assert [blocked_clients(m) for m in masters] == [0] * len(masters)
            pusher.call(*add)
            got = array_elements(waiter.read(10))
            assert got[0] == b"$%d\r\n%s\r\n" % (len(keys["c"]), keys["c"].encode())
            assert b"m" in got[1]
            assert pusher.call("EXISTS", keys["a"], keys["c"]) == b":0\r\n"
    finally:
        for m in masters:
            m.close()


def test_a_lost_tracking_connection_arms_again(slotgate: ManagedProcess,
                                               cluster_backend: ClusterBackend) -> None:
    """The tracking connections killed while a pop waits: it arms its keys again on new ones
    (their invalidations would be lost otherwise) and is woken by a later element."""
    keys = _keys()
    masters = _masters(cluster_backend)

    def trackers() -> list[tuple[RawClient, bytes]]:
        found = []
        for m in masters:
            for line in m.call("CLIENT", "LIST").split(b"\n"):
                fields = dict(f.split(b"=", 1) for f in line.split() if b"=" in f)
                if b"t" in fields.get(b"flags", b""):
                    found.append((m, fields[b"id"]))
        return found

    try:
        with RawClient(slotgate.port) as waiter, RawClient(slotgate.port) as pusher:
            before = _scripts(masters)
            waiter.send("BZPOPMAX", keys["a"], keys["c"], "0")
            wait_until(lambda: _scripts(masters) >= before + 4, what="two tries")
            killed = trackers()
            assert len(killed) >= 2
            for m, cid in killed:
                m.call("CLIENT", "KILL", "ID", cid)
            wait_until(lambda: len([t for t in trackers() if t not in killed]) >= 2,
                       what="new tracking connections")
            assert waiter.nothing_pending(0.2)
            pusher.call("ZADD", keys["a"], "3", "x")
            got = array_elements(waiter.read(10))
            assert got[:2] == [b"$%d\r\n%s\r\n" % (len(keys["a"]), keys["a"].encode()),
                               b"$1\r\nx\r\n"]
    finally:
        for m in masters:
            m.close()


# What a move across slots or its wait may send to a master.
MOVE_COMMANDS = ["exists", "watch", "multi", "exec", "lmove", "blmove", "rpoplpush", "eval",
                 "evalsha", "dump", "restore", "lpop", "rpop", "pttl", "type"]


def test_a_waiting_blmove_holds_nothing_on_its_source(slotgate: ManagedProcess,
                                                       cluster_backend: ClusterBackend) -> None:
    """BLMOVE across slots waits armed: no blocked client, no command on the source's master
    while nothing arrives; an element pushed later is moved."""
    keys = _keys()
    src, dst = keys["a"], keys["c"]
    masters = _masters(cluster_backend)

    def reads() -> int:
        return sum(_calls(m, "exists") for m in masters)

    try:
        with RawClient(slotgate.port) as waiter, RawClient(slotgate.port) as pusher:
            before = reads()
            waiter.send("BLMOVE", src, dst, "LEFT", "RIGHT", "0")
            wait_until(lambda: reads() > before, what="the source armed")
            time.sleep(0.5)
            counts = [[_calls(m, c) for c in MOVE_COMMANDS] for m in masters]
            time.sleep(0.5)
            assert [[_calls(m, c) for c in MOVE_COMMANDS] for m in masters] == counts
            assert [blocked_clients(m) for m in masters] == [0] * len(masters)
            assert waiter.nothing_pending(0.1)
            pusher.call("RPUSH", src, "x", "y")
            assert waiter.read(10) == b"$1\r\nx\r\n"
            assert pusher.call("LRANGE", dst, "0", "-1") == b"*1\r\n$1\r\nx\r\n"
            assert pusher.call("LRANGE", src, "0", "-1") == b"*1\r\n$1\r\ny\r\n"
            pusher.call("DEL", src, dst)
    finally:
        for m in masters:
            m.close()


def test_a_waiting_pop_follows_its_slot_to_a_new_master(slotgate: ManagedProcess,
                                                        cluster_backend: ClusterBackend) -> None:
    """A waited key's (empty) slot moves to another master: nothing tells the old master's
    tracking connection, so the topology refresh that sees the move wakes the pop, which
    arms the key on its new master and is answered by a push there."""
    keys = _keys()
    a, c = keys["a"], keys["c"]
    slot = key_slot(c.encode())
    src = slot_owner(cluster_backend, slot)
    dst = next(m for m in redirect_masters(cluster_backend)
               if m is not src and m is not slot_owner(cluster_backend, key_slot(a.encode())))
    masters = _masters(cluster_backend)
    try:
        with RawClient(slotgate.port) as waiter, RawClient(slotgate.port) as pusher:
            before = _scripts(masters)
            waiter.send("BZPOPMIN", a, c, "0")
            wait_until(lambda: _scripts(masters) >= before + 4, what="two tries")
            open_migration(slot, src, dst)
            finish_migration(cluster_backend, slot, src, dst)
            assert waiter.nothing_pending(0.1)
            assert pusher.call("ZADD", c, "5", "m") == b":1\r\n"  # MOVED: the proxy refreshes
            got = array_elements(waiter.read(15))
            assert got[:2] == [b"$%d\r\n%s\r\n" % (len(c), c.encode()), b"$1\r\nm\r\n"]
    finally:
        for m in masters:
            m.close()
        if slot_owner(cluster_backend, slot) is not src:
            open_migration(slot, dst, src)
            finish_migration(cluster_backend, slot, dst, src)


def test_a_woken_pop_that_takes_elsewhere_wakes_the_next(slotgate: ManagedProcess,
                                                         cluster_backend: ClusterBackend) -> None:
    """One change wakes one waiting pop. The first pop waiting on ``c``, woken by it, takes
    from an earlier key of its own instead: it passes the wake-up on, and the second pop
    waiting on ``c`` takes its element."""
    keys = _keys()
    tag = uuid.uuid4().hex[:8]
    a1, c = f"{{{tag}}}a1", f"{{{tag}}}c"  # one slot: one transaction changes both
    e, f = keys["a"], keys["b"]
    assert key_slot(e.encode()) != key_slot(c.encode()) != key_slot(f.encode())
    masters = _masters(cluster_backend)
    try:
        with RawClient(slotgate.port) as first, RawClient(slotgate.port) as second, \
                RawClient(slotgate.port) as pusher:
            for waiter, pop in ((first, ["BZPOPMIN", a1, c, e, "0"]),
                                (second, ["BZPOPMIN", c, f, "0"])):
                before = _scripts(masters)
                waiter.send(*pop)
                wait_until(lambda: _scripts(masters) >= before + 4, what="two tries")  # noqa: B023
            assert pusher.call("MULTI") == b"+OK\r\n"
            pusher.call("ZADD", c, "1", "m")
            pusher.call("ZADD", a1, "1", "n")
            assert pusher.call("EXEC") == b"*2\r\n:1\r\n:1\r\n"
            assert array_elements(first.read(10))[:2] == [
                b"$%d\r\n%s\r\n" % (len(a1), a1.encode()), b"$1\r\nn\r\n"]
            assert array_elements(second.read(10))[:2] == [
                b"$%d\r\n%s\r\n" % (len(c), c.encode()), b"$1\r\nm\r\n"]
    finally:
        for m in masters:
            m.close()
