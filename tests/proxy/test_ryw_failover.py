"""Read-your-writes across a failover: a client's writes to a master keep counting once a
replica of that master took its place (routing/topology.py's successors, readwrite.py).

The proxy relies on replication offsets continuing across a promotion (PSYNC2): checked
here on redis-server 7.0, with two replicas per shard, through ``CLUSTER FAILOVER``.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from slotgate.proxy.front.readwrite import succeeded_by
from slotgate.proxy.routing.topology import SlotMap, replaced
from tests.conftest import start_cluster, wait_replicas_up
from tests.proxy.test_read_policies import master_of, reads
from tests.proxy.test_replica_reads import start_proxy
from tests.support import ManagedProcess, wait_until

CONFIG = """auth:
  users: ["ryw on >rywpw ~* &* +@all", "dur on >durpw ~* &* +@all"]
reads:
  check_interval: 50ms
writes:
  durable_timeout: 200ms
policies:
  users:
    ryw: {read_from: replica, read_your_writes: true}
    dur: {durable_writes: 1}
"""


def _map(owner: str, replicas: dict[str, list[str]]) -> SlotMap:
    m = SlotMap()
    m.owners[:] = [owner] * len(m.owners)
    m.masters = [owner]
    m.first_slots = [0]
    m.replicas = replicas
    return m


def test_successors_follow_promotions() -> None:
    """A promoted replica takes its former master's place; chains of failovers are followed
    and a cycle (A -> B -> A) ends."""
    before = _map("a:1", {"a:1": ["b:2", "c:3"]})
    after = _map("b:2", {"b:2": ["a:1", "c:3"]})
    assert replaced(before, after) == {"a:1": "b:2"}
    assert replaced(after, after) == {}
    assert replaced(before, _map("d:4", {"d:4": []})) == {}  # not a replica of it: no heir
    successors = {"a:1": "b:2", "b:2": "c:3"}
    assert succeeded_by(["a:1", "b:2", "x:9"], successors, "c:3") == ["a:1", "b:2"]
    assert succeeded_by(["a:1"], {"a:1": "b:2", "b:2": "a:1"}, "c:3") == []


def _role(n: ManagedProcess) -> list[object]:
    return n.client(socket_timeout=5).execute_command("ROLE")


def test_reads_after_a_failover_never_older(tmp_path: Path,
                                            cleanup: list[ManagedProcess]) -> None:
    """Two replicas per shard. The client writes its keys, then keeps pairing writes with
    reads while one replica is stopped in bursts and the other takes its master's place
    (CLUSTER FAILOVER): every read returns the client's last write, reads reach replicas
    after the failover, and the new master's offset continues the old one's."""
    nodes = start_cluster("real", tmp_path / "cluster", masters=3, replicas=2)
    cleanup.extend(nodes)
    proxy, mport = start_proxy(tmp_path, nodes, CONFIG, cleanup)
    c = redis.Redis(port=proxy.port, username="ryw", password="rywpw", socket_timeout=10,
                    single_connection_client=True, retry=Retry(NoBackoff(), 0))
    keys = [f"{{fo}}:{i}" for i in range(20)]
    master = master_of(nodes, keys[0])
    heir, slowed = [n for n in nodes if _role(n)[0] == b"slave"
                    and int(_role(n)[2]) == master.port]
    last: dict[str, int] = {}
    for i, key in enumerate(keys):
        assert c.set(key, i)
        last[key] = i

    def on_replicas() -> bool:
        for key in keys:
            assert c.get(key) == str(last[key]).encode()
        return reads(mport)[1] > 0

    wait_until(on_replicas, what="reads on replicas")
    stale: list[str] = []
    failures: list[BaseException] = []
    stop = threading.Event()

    def pairs() -> None:
        n = len(keys)
        try:
            while not stop.is_set():
                key = keys[n % len(keys)]
                try:
                    c.set(key, n)
                    last[key] = n
                except redis.ResponseError:
                    last.pop(key, None)  # its fate unknown: not checked until written again
                for k in (key, keys[(n * 7) % len(keys)]):
                    got = c.get(k)
                    if k in last and (got is None or int(got) != last[k]):
                        stale.append(f"{k}: read {got!r}, last wrote {last[k]}")
                n += 1
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            failures.append(exc)

    worker = threading.Thread(target=pairs)
    worker.start()
    try:
        offset_before = int(_role(master)[1])
        for _ in range(5):  # bursts before the failover
            os.kill(slowed.pid, signal.SIGSTOP)
            time.sleep(0.1)
            os.kill(slowed.pid, signal.SIGCONT)
            time.sleep(0.1)
        assert heir.client(socket_timeout=5).execute_command("CLUSTER", "FAILOVER")
        wait_until(lambda: _role(heir)[0] == b"master", what="the replica promoted")
        # Offsets continue across the promotion (PSYNC2): the new master's is past the old
        # one's, and the old master, now its replica, resumes from where it was.
        assert int(_role(heir)[1]) >= offset_before
        wait_until(lambda: _role(master)[0] == b"slave", what="the old master a replica")
        after_failover = reads(mport)[1]
        for _ in range(10):  # bursts after it
            os.kill(slowed.pid, signal.SIGSTOP)
            time.sleep(0.1)
            os.kill(slowed.pid, signal.SIGCONT)
            time.sleep(0.1)
        wait_until(lambda: reads(mport)[1] > after_failover + 20,
                   what="reads on replicas after the failover")
    finally:
        os.kill(slowed.pid, signal.SIGCONT)
        stop.set()
        worker.join(30)
    assert not failures, failures
    assert not stale, stale[:5]
    wait_replicas_up(nodes)
    # FLUSHALL (this cluster is the test's own): a WAIT on every master it reached.
    dur = redis.Redis(port=proxy.port, username="dur", password="durpw", socket_timeout=10,
                      single_connection_client=True, retry=Retry(NoBackoff(), 0))
    replicas = [n for n in nodes if _role(n)[0] == b"slave"]
    for r in replicas:
        os.kill(r.pid, signal.SIGSTOP)
    try:
        with pytest.raises(redis.ResponseError, match="acknowledged by 0 of 1"):
            dur.flushall()
    finally:
        for r in replicas:
            os.kill(r.pid, signal.SIGCONT)
    assert dur.flushall()
