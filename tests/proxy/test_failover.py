"""A master dies (kill -9) while clients run: the proxy rides through the failover.

Requests wait (retrying with backoff and map refreshes) until a replica has taken over; the
only error a client may see is the documented unknown-fate error for a write that was in
flight on the dead connection. The killed node is restarted (it rejoins as a replica).
"""

from __future__ import annotations

import threading
import time
import uuid

import redis

from slotgate.protocol.slots import key_slot
from tests.conftest import ClusterBackend, wait_replicas_up
from tests.proxy.test_redirects import slot_owner
from tests.support import ManagedProcess, during, wait_cluster_ok, wait_until

UNKNOWN_FATE = "write may or may not have been applied"


def test_master_killed_mid_traffic(slotgate: ManagedProcess,
                                   cluster_backend: ClusterBackend) -> None:
    # a replica that never synced cannot be elected: the failover must not start earlier
    wait_replicas_up(cluster_backend.nodes, 30)
    tag = f"fo{uuid.uuid4().hex[:6]}"
    victim = slot_owner(cluster_backend, key_slot(tag.encode()))
    keys = [f"{{{tag}}}:{i}" for i in range(21)] + [f"other{tag}:{i}" for i in range(21)]
    stop = threading.Event()
    unexpected: list[BaseException] = []
    acked: dict[str, str] = {}
    unknown_fate = [0]
    lost_at_kill: list[tuple[str, str, object]] = []
    ok_after_kill = [0]
    killed_at = [0.0]

    def worker(wid: int) -> None:
        c = slotgate.client(socket_timeout=30)
        n = 0
        while not stop.is_set():
            n += 1
            k = keys[wid + 3 * (n % (len(keys) // 3))]  # each worker its own keys
            v = f"{wid}-{n}"
            sent_before_kill = not killed_at[0]
            try:
                c.set(k, v)
                acked[k] = v
                got = c.get(k)
                if got != v.encode() and sent_before_kill:
                    # Acknowledged by the master just before it died, and not yet applied by
                    # the replica that took over: asynchronous replication loses this write,
                    # in Redis too. Counted and bounded below; never allowed after the kill.
                    lost_at_kill.append((k, v, got))
                    acked.pop(k, None)
                    continue
                assert got == v.encode()
                if killed_at[0]:
                    ok_after_kill[0] += 1
            except redis.ResponseError as exc:
                if UNKNOWN_FATE in str(exc):
                    unknown_fate[0] += 1
                    acked.pop(k, None)  # fate unknown: not counted either way
                else:
                    unexpected.append(exc)
                    return
            except BaseException as exc:  # reported to the test thread
                unexpected.append(exc)
                return

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: acked or unexpected, what="the clients under way")
        victim.kill()
        killed_at[0] = time.monotonic()
        # node timeout is 2 s: the replica should take over within a few seconds.
        for _ in during(20, interval_s=0.1):
            if ok_after_kill[0] >= 200:
                break
    finally:
        stop.set()
        for t in threads:
            t.join(40)
    try:
        assert not unexpected, [(type(e).__name__, e.args) for e in unexpected]
        assert len(lost_at_kill) <= len(threads), lost_at_kill  # one write in flight each
        assert ok_after_kill[0] >= 200
        assert slot_owner(cluster_backend, key_slot(tag.encode())) is not victim
        r = slotgate.client()
        lost = [k for k, v in acked.items() if r.get(k) != v.encode()]
        # Replication is asynchronous; with nothing in flight at the end, every write
        # acknowledged after the takeover must be there. Report the count of any others.
        print(f"unknown-fate writes: {unknown_fate[0]}, acknowledged writes lost: {len(lost)}, "
              f"lost at the kill: {lost_at_kill}")
        assert len(lost) <= unknown_fate[0] + 5
        r.delete(*keys)
    finally:
        victim.start()
        wait_cluster_ok(cluster_backend.nodes, timeout_s=60)
        wait_replicas_up(cluster_backend.nodes, 30)
