"""Shard channels on several masters follow their slots through the proxy.

One subscriber holds a shard channel on each of the three masters (a link per node). Each
channel's slot is then resharded to another master (SETSLOT MIGRATING/IMPORTING, MIGRATE,
SETSLOT NODE) and one master is failed over (CLUSTER FAILOVER on its replica). The nodes push
``sunsubscribe`` when a slot leaves them; the proxy subscribes the channel again where the
slot went, and the client hears nothing of it. Once the new owner holds the subscription
(PUBSUB SHARDNUMSUB there says 1), every message published through the proxy is received:
the test counts them, and any stray push would break the count. These tests move slots and
fail a master over; like test_redirects.py they restore nothing.
"""

from __future__ import annotations

import uuid

import redis

from slotgate.protocol.slots import key_slot
from tests.conftest import ClusterBackend, wait_replicas_up
from tests.proxy.test_redirects import (
    finish_migration,
    masters,
    myid,
    node_by_port,
    open_migration,
    slot_owner,
)
from tests.support import ManagedProcess, RawClient, wait_cluster_ok, wait_until

MESSAGES = 20


def _smessage(ch: str, data: str) -> bytes:
    return b"*3\r\n$8\r\nsmessage\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (
        len(ch), ch.encode(), len(data), data.encode())


def _channel_on(backend: ClusterBackend, node: ManagedProcess, prefix: str) -> str:
    owners = {}
    for start, end, master, *_ in node.client().execute_command("CLUSTER", "SLOTS"):
        for slot in range(start, end + 1):
            owners[slot] = int(master[1])
    return next(ch for i in range(10_000) if owners[key_slot((ch := f"{prefix}{i}").encode())]
                == node.port)


def _held_on(node: ManagedProcess, ch: str) -> bool:
    reply = node.client(socket_timeout=5).execute_command("PUBSUB", "SHARDNUMSUB", ch)
    return reply[1] == 1


def _publish_all_received(proxy: redis.Redis, sub: RawClient, ch: str, label: str) -> int:
    sent = [f"{label}-{i}" for i in range(MESSAGES)]
    counts = [proxy.execute_command("SPUBLISH", ch, m) for m in sent]
    assert counts == [1] * MESSAGES
    assert sub.read_frames(MESSAGES) == [_smessage(ch, m) for m in sent]
    return MESSAGES


def _replica_of(backend: ClusterBackend, master: ManagedProcess) -> ManagedProcess:
    line = master.client().execute_command("CLUSTER", "REPLICAS", myid(master))[0]
    addr = (line.decode() if isinstance(line, bytes) else line).split()[1]
    return node_by_port(backend, int(addr.split("@")[0].rsplit(":", 1)[1]))


def test_shard_channels_follow_reshard_and_failover(slotgate: ManagedProcess,
                                                    cluster_backend: ClusterBackend) -> None:
    wait_replicas_up(cluster_backend.nodes, 30)
    ms = masters(cluster_backend)
    assert len(ms) == 3
    run = uuid.uuid4().hex[:6]
    chans = [_channel_on(cluster_backend, m, f"fol{run}:{i}:") for i, m in enumerate(ms)]
    proxy = slotgate.client(socket_timeout=20)
    received = 0
    with RawClient(slotgate.port) as sub:
        for n, ch in enumerate(chans):
            assert sub.call("SSUBSCRIBE", ch) == (
                b"*3\r\n$10\r\nssubscribe\r\n$%d\r\n%s\r\n:%d\r\n" % (len(ch), ch.encode(), n + 1))
        for ch in chans:
            received += _publish_all_received(proxy, sub, ch, "before")

        # Reshard each channel's slot to the next master; messages published in the middle of
        # the move (the source still serves the slot) arrive too.
        for i, ch in enumerate(chans):
            slot = key_slot(ch.encode())
            src, dst = ms[i], ms[(i + 1) % 3]
            open_migration(slot, src, dst)
            received += _publish_all_received(proxy, sub, ch, "migrating")
            finish_migration(cluster_backend, slot, src, dst)
            wait_until(lambda ch=ch, dst=dst: _held_on(dst, ch),
                       what=f"{ch} subscribed again on {dst.port}")
            received += _publish_all_received(proxy, sub, ch, "moved")

        # Fail over the master that now holds the first channel.
        victim = slot_owner(cluster_backend, key_slot(chans[0].encode()))
        on_victim = [ch for ch in chans
                     if slot_owner(cluster_backend, key_slot(ch.encode())) is victim]
        replica = _replica_of(cluster_backend, victim)
        replica.client().execute_command("CLUSTER", "FAILOVER")
        wait_until(lambda: all(slot_owner(cluster_backend, key_slot(ch.encode())) is replica
                               for ch in on_victim), 30, "the replica took the slots over")
        for ch in on_victim:
            wait_until(lambda ch=ch: _held_on(replica, ch), 30,
                       f"{ch} subscribed again on the promoted {replica.port}")
        for ch in chans:
            received += _publish_all_received(proxy, sub, ch, "after-failover")
        assert received == MESSAGES * (3 + 3 * 2 + 3)
        for n, ch in enumerate(chans):
            assert sub.call("SUNSUBSCRIBE", ch) == (
                b"*3\r\n$12\r\nsunsubscribe\r\n$%d\r\n%s\r\n:%d\r\n" % (
                    len(ch), ch.encode(), 2 - n))
        assert sub.call("PING") == b"+PONG\r\n"  # out of subscriber mode
    wait_cluster_ok(cluster_backend.nodes, timeout_s=60)
    wait_replicas_up(cluster_backend.nodes, 60)


def _numsub(node: ManagedProcess, ch: str, shard: bool) -> int:
    cmd = "SHARDNUMSUB" if shard else "NUMSUB"
    return int(node.client(socket_timeout=5).execute_command("PUBSUB", cmd, ch)[1])


def test_subscriptions_placed_again_after_a_lost_link(slotgate: ManagedProcess,
                                                      cluster_backend: ClusterBackend) -> None:
    """Every subscriber link of the proxy is killed on its node: the subscriptions (a shard
    channel on each master, a classic channel at the home) come back on new links and the
    client, which heard nothing of it, receives again."""
    ms = masters(cluster_backend)
    run = uuid.uuid4().hex[:6]
    chans = [_channel_on(cluster_backend, m, f"lost{run}:{i}:") for i, m in enumerate(ms)]
    classic = f"lostc{run}"
    home = slot_owner(cluster_backend, 0)
    proxy = slotgate.client(socket_timeout=20)
    with RawClient(slotgate.port) as sub:
        for ch in chans:
            sub.call("SSUBSCRIBE", ch)
        sub.call("SUBSCRIBE", classic)
        for m in ms:
            m.client().execute_command("CLIENT", "KILL", "TYPE", "pubsub")
        for m, ch in zip(ms, chans, strict=True):
            wait_until(lambda m=m, ch=ch: _numsub(m, ch, True) == 1,
                       what=f"{ch} subscribed again on {m.port}")
        wait_until(lambda: _numsub(home, classic, False) == 1, what="the classic channel back")
        for ch in chans:
            _publish_all_received(proxy, sub, ch, "after-kill")
        assert proxy.publish(classic, "m") == 1
        assert sub.read() == b"*3\r\n$7\r\nmessage\r\n$%d\r\n%s\r\n$1\r\nm\r\n" % (
            len(classic), classic.encode())
