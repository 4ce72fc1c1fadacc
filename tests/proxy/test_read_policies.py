"""Read and write policies per user and per listener (``policies.*``), in front of a real
redis-server 7.0 cluster (3 masters, 1 replica each): the choice is the proxy's, one
implementation of the nodes is enough."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import hiredis
import pytest
import redis

from slotgate.protocol.slots import key_slot
from slotgate.proxy.ops import config
from tests.conftest import wait_replicas_up
from tests.proxy.test_replica_reads import reads_by_role, replica_of, start_proxy
from tests.support import ManagedProcess, RawClient, wait_until

USERS = """auth:
  users: ["alice on >apw ~* &* +@all", "bob on >bpw ~* &* +@all"]
reads:
  check_interval: 50ms
"""


def reads(mport: int) -> tuple[float, float]:
    """slotgate_policy_reads_total summed: (to masters, to replicas)."""
    by_role = reads_by_role(mport)
    return sum(by_role["master"].values()), sum(by_role["replica"].values())


def read_all(c: redis.Redis, keys: list[str], mport: int) -> tuple[float, float]:
    """Every key read through ``c``: how many reads the policies counted (masters, replicas)."""
    before = reads(mport)
    for k in keys:
        assert c.get(k) == k.encode()
    after = reads(mport)
    return after[0] - before[0], after[1] - before[1]


def test_each_user_reads_by_its_own_policy(real_cluster: list[ManagedProcess], tmp_path: Path,
                                           cleanup: list[ManagedProcess]) -> None:
    """alice reads from replicas, bob from masters (prefer-master), the default user has no
    policy; AUTH and HELLO AUTH switch a connection's policy; a reload changes the policy of
    a connected client."""
    wait_replicas_up(real_cluster)
    cfg = USERS + ("policies:\n  users:\n    alice: {read_from: replica}\n"
                   "    bob: {read_from: prefer-master}\n")
    proxy, mport = start_proxy(tmp_path, real_cluster, cfg, cleanup)
    anon = proxy.client(socket_timeout=30)
    keys = [f"pu:{i}" for i in range(30)]
    for k in keys:
        assert anon.set(k, k)
    alice = redis.Redis(port=proxy.port, username="alice", password="apw", socket_timeout=30,
                        single_connection_client=True)
    bob = redis.Redis(port=proxy.port, username="bob", password="bpw", socket_timeout=30,
                      single_connection_client=True)
    n = len(keys)
    wait_until(lambda: read_all(alice, keys, mport) == (0, n), what="alice on replicas")
    assert read_all(bob, keys, mport) == (n, 0)
    assert read_all(anon, keys, mport) == (0, 0)  # no policy: nothing counted
    # A login switches the connection's policy.
    assert bob.execute_command("HELLO", "2", "AUTH", "alice", "apw")
    assert read_all(bob, keys, mport) == (0, n)
    assert bob.execute_command("AUTH", "bob", "bpw")
    assert read_all(bob, keys, mport) == (n, 0)
    # A reload reaches connected clients: bob reads from replicas, alice gets no policy.
    (tmp_path / "proxy.yaml").write_text(USERS + "policies:\n  users:\n"
                                         "    bob: {read_from: replica}\n")
    os.kill(proxy.pid, signal.SIGHUP)
    wait_until(lambda: read_all(bob, keys, mport) == (0, n), what="bob on replicas")
    assert read_all(alice, keys, mport) == (0, 0)


@pytest.mark.parametrize("raw, problem", [
    ({"policies.users": {"alice": {"read_from": "slave"}}},
     "policies.users: alice: read_from: expected one of master, prefer-master"),
    ({"policies.users": {"alice": {"readfrom": "replica"}}},
     "policies.users: alice: readfrom: unknown; expected one of read_from"),
    ({"policies.users": {"alice": {}}}, "policies.users: alice: expected a mapping of some"),
    ({"policies.users": ["alice"]}, "policies.users: expected a mapping of user names"),
    ({"policies.tls_listener": {"durable_writes": -1}},
     "policies.tls_listener: durable_writes: expected a whole number from 0 to 1000"),
])
def test_bad_policies_name_their_key(raw: dict[str, object], problem: str) -> None:
    with pytest.raises(config.ConfigError) as e:
        config.build({"seeds": ["127.0.0.1:7000"], **raw})
    assert e.value.problems[0].startswith(problem), e.value.problems


def master_of(nodes: list[ManagedProcess], key: str) -> ManagedProcess:
    """``key``'s master (CLUSTER SLOTS)."""
    slot = key_slot(key.encode())
    reader = hiredis.Reader()
    reader.feed(RawClient(nodes[0].port).call("CLUSTER", "SLOTS"))
    for first, last, master, *_ in reader.gets():
        if first <= slot <= last:
            return next(n for n in nodes if n.port == master[1])
    raise AssertionError(f"slot {slot} unserved")


def two_masters_keys(nodes: list[ManagedProcess], prefix: str) -> list[str]:
    """Two keys whose masters differ."""
    first = master_of(nodes, f"{prefix}:0")
    i = 0
    while master_of(nodes, f"{prefix}:{i}") is first:
        i += 1
    return [f"{prefix}:0", f"{prefix}:{i}"]


def user_proxy(cluster: list[ManagedProcess], tmp_path: Path, cleanup: list[ManagedProcess],
               user: str, sections: str,
               policy: str) -> tuple[ManagedProcess, int, redis.Redis]:
    """A proxy whose one user ``user`` (password ``<user>pw``) has ``policy``: (the proxy, its
    metrics port, a connection logged in as the user)."""
    wait_replicas_up(cluster)
    cfg = (f'auth:\n  users: ["{user} on >{user}pw ~* &* +@all"]\n{sections}'
           f"policies:\n  users:\n    {user}: {policy}\n")
    proxy, mport = start_proxy(tmp_path, cluster, cfg, cleanup)
    client = redis.Redis(port=proxy.port, username=user, password=f"{user}pw",
                         socket_timeout=30, single_connection_client=True)
    return proxy, mport, client


def test_multi_slot_writes_wait_on_every_master(real_cluster: list[ManagedProcess],
                                                tmp_path: Path,
                                                cleanup: list[ManagedProcess]) -> None:
    """carol's cross-slot MSET and DEL get a WAIT on every master they reached: with one of
    those masters' replica stopped, the client gets the "acknowledged by 0 of 1" error; the
    default user (no policy) is answered at once."""
    proxy, _, carol = user_proxy(real_cluster, tmp_path, cleanup, "carol",
                                 "writes:\n  durable_timeout: 300ms\n", "{durable_writes: 1}")
    anon = proxy.client(socket_timeout=30)
    keys = two_masters_keys(real_cluster, "ms")
    assert carol.mset({k: "1" for k in keys})  # every replica up: acknowledged
    assert carol.delete(*keys) == 2
    stopped = replica_of(real_cluster, master_of(real_cluster, keys[1]))
    os.kill(stopped.pid, signal.SIGSTOP)
    try:
        with pytest.raises(redis.ResponseError, match="acknowledged by 0 of 1"):
            carol.mset({k: "2" for k in keys})
        with pytest.raises(redis.ResponseError, match="acknowledged by 0 of 1"):
            carol.delete(*keys)
        tx = carol.pipeline()
        tx.set(keys[1], "4")
        with pytest.raises(redis.ResponseError, match="acknowledged by 0 of 1"):
            tx.execute()  # MULTI/EXEC: the WAIT after EXEC
        with carol.pipeline() as tx:
            tx.watch(keys[1])
            tx.multi()
            tx.set(keys[1], "5")
            with pytest.raises(redis.ResponseError, match="acknowledged by 0 of 1"):
                tx.execute()  # WATCH ... EXEC: the same, on the watching connection
        assert anon.mset({k: "3" for k in keys})
        assert [anon.get(k) for k in keys] == [b"3", b"3"]
    finally:
        os.kill(stopped.pid, signal.SIGCONT)
    tx = carol.pipeline()
    tx.set(keys[1], "6")
    assert tx.execute() == [True]


def test_read_your_writes_after_multi_slot_writes_and_exec(
        real_cluster: list[ManagedProcess], tmp_path: Path,
        cleanup: list[ManagedProcess]) -> None:
    """dave reads from replicas with read-your-writes: after his cross-slot MSET, and after
    his MULTI/EXEC, his read of a key whose replica is stopped goes to its master."""
    proxy, mport, dave = user_proxy(real_cluster, tmp_path, cleanup, "dave",
                                    "reads:\n  check_interval: 50ms\n",
                                    "{read_from: replica, read_your_writes: true}")
    keys = two_masters_keys(real_cluster, "ryw")
    proxy.client(socket_timeout=30).mset({k: "0" for k in keys})
    stopped = replica_of(real_cluster, master_of(real_cluster, keys[1]))

    def one_read(want: bytes) -> tuple[float, float]:
        """dave's read of keys[1]: counted (on a master, on a replica)."""
        before = reads(mport)
        assert dave.get(keys[1]) == want
        after = reads(mport)
        return after[0] - before[0], after[1] - before[1]

    def write_then_read(write: Callable[[str], object], value: str, old: bytes) -> None:
        wait_until(lambda: one_read(old) == (0, 1), what="a replica serves the key")
        os.kill(stopped.pid, signal.SIGSTOP)
        try:
            write(value)
            assert one_read(value.encode()) == (1, 0)  # the master
        finally:
            os.kill(stopped.pid, signal.SIGCONT)

    write_then_read(lambda v: dave.mset({k: v for k in keys}), "1", b"0")

    def exec_write(v: str) -> None:  # on dave's own connection (a pipeline takes another)
        assert dave.execute_command("MULTI")
        dave.execute_command("SET", keys[1], v)
        assert len(dave.execute_command("EXEC")) == 1

    write_then_read(exec_write, "2", b"1")
