"""A 10 s script on a master of a cluster with a 5 s node timeout: the same outcome for the
cluster (failover or not) on our nodes as on redis-server 7.0, in the same test.

Each kind gets 3 masters and a replica of the master that will run the script. Both scripts
start together; the replica's role and the other masters' view of the busy one are watched
until a few seconds after the scripts end.

- busy-reply-threshold 1000 ms: past it the busy master serves its cluster bus (Redis'
  processEventsWhileBlocked), so it answers its peers' PINGs: no failure report, no failover.
- busy-reply-threshold 8000 ms: the master serves nothing for longer than the node timeout:
  its peers flag it FAIL and its replica takes over.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.node.test_failover import (
    create,
    myid,
    nodes_lines,
    replicas_synced,
    start_cluster_nodes,
    wait_agree,
    wait_for,
)
from tests.support import ManagedProcess, RawClient, redis_cli

NODE_TIMEOUT_MS = 5000
SCRIPT_S = 10
AFTER_S = 4.0  # watched after the scripts end
KINDS = ("ours", "real")
TEN_SECONDS = (
    "local t = redis.call('time') local t0 = t[1] + t[2] / 1e6 "
    "while true do t = redis.call('time') "
    f"if t[1] + t[2] / 1e6 - t0 >= {SCRIPT_S} then return 1 end end")


class Shard:
    """A kind's cluster: ``busy`` (a master), its ``replica``, the ``others`` masters."""

    def __init__(self, kind: str, workdir: Path, threshold_ms: int,
                 procs: list[ManagedProcess]) -> None:
        nodes = start_cluster_nodes(kind, workdir / kind, 4, NODE_TIMEOUT_MS,
                                    ["--busy-reply-threshold", str(threshold_ms)])
        procs.extend(nodes)
        create(nodes[:3], replicas=0)
        self.busy, self.replica, self.others = nodes[0], nodes[3], nodes[1:3]
        redis_cli("--cluster", "add-node", f"127.0.0.1:{self.replica.port}",
                  f"127.0.0.1:{self.busy.port}", "--cluster-slave", "--cluster-master-id",
                  myid(self.busy), timeout_s=60)
        wait_for(lambda: replicas_synced(nodes) and self._replica_known(), 60, "replica in sync")
        wait_agree(nodes)
        self.busy_id = myid(self.busy)
        self.promoted = False
        self.flagged_fail = False

    def _replica_known(self) -> bool:
        info = self.replica.client(socket_timeout=3).info("replication")
        return info["role"] == "slave" and info.get("master_link_status") == "up"

    def watch(self) -> None:
        """One look: the replica promoted? the busy master flagged FAIL by another master?"""
        try:
            role = self.replica.client(socket_timeout=1).info("replication")["role"]
            self.promoted |= role == "master"
            for f in nodes_lines(self.others[0]):
                if f[0] == self.busy_id and "fail" in f[2].split(","):
                    self.flagged_fail = True
        except (OSError, Exception):  # noqa: BLE001 - a slow answer is no observation
            pass


@pytest.mark.parametrize(("threshold_ms", "expected"), [(1000, (False, False)),
                                                        (8000, (True, True))],
                         ids=["bus-served", "deaf-past-node-timeout"])
def test_long_script_same_cluster_outcome(tmp_path: Path, cleanup: list[ManagedProcess],
                                          threshold_ms: int,
                                          expected: tuple[bool, bool]) -> None:
    shards = {kind: Shard(kind, tmp_path, threshold_ms, cleanup) for kind in KINDS}
    replies: dict[str, bytes | Exception] = {}
    callers = {kind: RawClient(s.busy.port, timeout_s=SCRIPT_S + 30) for kind, s in shards.items()}

    def run_script(kind: str) -> None:
        try:
            replies[kind] = callers[kind].call("EVAL", TEN_SECONDS, "0")
        except OSError as e:
            replies[kind] = e

    threads = [threading.Thread(target=run_script, args=(k,), daemon=True) for k in KINDS]
    for t in threads:
        t.start()
    end = time.monotonic() + SCRIPT_S + AFTER_S
    while time.monotonic() < end:
        for s in shards.values():
            s.watch()
        time.sleep(0.2)
    for t in threads:
        t.join(30)
    for c in callers.values():
        c.close()
    outcome = {kind: (s.promoted, s.flagged_fail) for kind, s in shards.items()}
    assert replies["ours"] == replies["real"] == b":1\r\n", replies
    assert outcome["ours"] == outcome["real"], outcome
    assert outcome["real"] == expected, outcome
