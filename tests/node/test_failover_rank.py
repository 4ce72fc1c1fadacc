"""Two replicas of one master: the one that processed more of the stream wins the election
(rank 0 goes first; rank 1 waits 1000 ms more), ten runs out of ten.

Each run freezes one replica, writes ~16 MB to the master (more than loopback socket buffers
hold, so the frozen replica really lags), kills the master with -9, thaws the lagging
replica, and checks who won. The killed master is restarted and rejoins as a replica, so the
next run has again one master with two replicas.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from tests.node.test_failover import (
    create,
    first_slot,
    key_in_slot,
    myid,
    replicas_synced,
    role_of,
    start_cluster_nodes,
    wait_agree,
    wait_for,
)
from tests.support import ManagedProcess

TIMEOUT_MS = 1000
RUNS = 10
VALUE = b"x" * 100_000


def _max_socket_buffering() -> int:
    """Bytes the kernel may hold between a master and a frozen replica on loopback: the
    replica's receive buffer can autotune up to tcp_rmem's maximum, the master's send buffer
    up to tcp_wmem's."""
    total = 0
    for name in ("tcp_rmem", "tcp_wmem"):
        with open(f"/proc/sys/net/ipv4/{name}") as f:
            total += int(f.read().split()[2])
    return total


# The stream of one run must not fit in those buffers, or the frozen replica receives all of
# it when it wakes and does not lag (seen with tcp_rmem's maximum at 32 MB). The same keys are
# written every run.
KEYS = max(160, _max_socket_buffering() * 3 // 2 // len(VALUE) + 1)


def _offset(n: ManagedProcess) -> int:
    info = n.client(socket_timeout=5).info("replication")
    if info["role"] == "slave":
        return int(info["slave_repl_offset"])
    return int(info["master_repl_offset"])


def test_higher_offset_replica_wins(tmp_path: Path, cleanup: list[ManagedProcess]) -> None:
    nodes = start_cluster_nodes("ours", tmp_path, 5, timeout_ms=TIMEOUT_MS)
    cleanup.extend(nodes)
    create(nodes[:3], replicas=0)
    master = nodes[0]
    mid = myid(master)
    for r in nodes[3:]:
        r.client().execute_command("CLUSTER", "MEET", "127.0.0.1", master.port)
    wait_for(lambda: all(len(r.client().execute_command("CLUSTER", "NODES").splitlines()) == 5
                         for r in nodes[3:]), 20, "new nodes to join")
    for r in nodes[3:]:
        assert r.client().execute_command("CLUSTER", "REPLICATE", mid) == b"OK"
    wait_for(lambda: replicas_synced(nodes), 30, "replicas in sync")
    wait_agree(nodes)
    slot = first_slot(master)
    keys = [key_in_slot(slot, f"big{i}-") for i in range(KEYS)]
    winners: list[bool] = []
    for run in range(RUNS):
        ok, master, mid = _one_run(nodes, master, mid, keys, run)
        winners.append(ok)
    assert all(winners), f"the higher-offset replica lost {winners.count(False)} of {RUNS}"
    assert all(n.client().ping() for n in nodes)


def _one_run(nodes: list[ManagedProcess], master: ManagedProcess, mid: str, keys: list[str],
             run: int) -> tuple[bool, ManagedProcess, str]:
    """One failover with a lagging and an ahead replica; returns (ahead won, master, id)."""
    reps = [n for n in nodes if role_of(n) == ("slave", mid)]
    assert len(reps) == 2, f"run {run}: expected two replicas of {mid}"
    lagging, ahead = reps[run % 2], reps[1 - run % 2]
    os.kill(lagging.pid, signal.SIGSTOP)
    try:
        mc = master.client(socket_timeout=30)
        pipe = mc.pipeline(transaction=False)
        for k in keys:
            pipe.set(k, VALUE)
        pipe.execute()
        target = _offset(master)
        wait_for(lambda: _offset(ahead) >= target, 30, "the ahead replica to catch up")
        master.kill()
    finally:
        os.kill(lagging.pid, signal.SIGCONT)
    time.sleep(0.5)  # it drains what the kernel buffered (the election is >= 1.5 s away)
    lag_off = _offset(lagging)
    assert lag_off < target, f"run {run}: the frozen replica did not lag ({lag_off})"
    winner = wait_for(lambda: next((n for n in reps if role_of(n) == ("master", "-")), None),
                      20, "a replica to win")
    assert isinstance(winner, ManagedProcess)
    print(f"\nrun {run}: winner {'ahead' if winner is ahead else 'LAGGING'} "
          f"(ahead offset {target}, lagging {lag_off})")
    # the old master rejoins as a replica of the winner; the loser follows the winner too
    new_id = myid(winner)
    master.start()
    loser = lagging if winner is ahead else ahead
    for n in (master, loser):
        wait_for(lambda n=n: role_of(n) == ("slave", new_id), 30,
                 "the others to follow the new master")
    wait_for(lambda: replicas_synced(nodes), 60, "replicas in sync again")
    return winner is ahead, winner, new_id
