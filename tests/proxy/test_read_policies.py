"""Read and write policies per user and per listener (``policies.*``), in front of a real
redis-server 7.0 cluster (3 masters, 1 replica each): the choice is the proxy's, one
implementation of the nodes is enough."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import redis

from slotgate.proxy.ops import config
from tests.conftest import wait_replicas_up
from tests.proxy.test_replica_reads import reads_by_role, start_proxy
from tests.support import ManagedProcess, wait_until

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
