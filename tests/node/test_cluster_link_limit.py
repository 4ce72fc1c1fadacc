"""``cluster-link-sendbuf-limit``: a peer stopped with SIGSTOP while this node keeps
publishing to it; the link's send buffer shows in CLUSTER LINKS and INFO's
``mem_cluster_links`` and is freed once past the limit, counted in
``total_cluster_links_buffer_limit_exceeded`` -- on two of our nodes and on two real
redis-server 7.0 nodes with the same checks."""

from __future__ import annotations

import os
import signal
import time

import redis

from tests.node.test_cluster_shard_pubsub import pair  # noqa: F401 - the fixture
from tests.support import ManagedProcess

LIMIT_BYTES = 4 << 20
MESSAGE = b"x" * (100 << 10)


def _exceeded(c: redis.Redis) -> int:
    text = c.execute_command("CLUSTER", "INFO").decode()
    return int(text.split("total_cluster_links_buffer_limit_exceeded:", 1)[1].split()[0])


def _to_link_buffer(c: redis.Redis, peer_id: bytes) -> int:
    """send-buffer-allocated of the outbound link to ``peer_id`` (0 if none)."""
    for link in c.execute_command("CLUSTER", "LINKS"):
        d = link if isinstance(link, dict) else dict(zip(link[::2], link[1::2], strict=True))
        d = {(k.decode() if isinstance(k, bytes) else k): v for k, v in d.items()}
        if d["node"] in (peer_id, peer_id.decode()) and d["direction"] in (b"to", "to"):
            return int(d["send-buffer-allocated"])
    return 0


def test_link_freed_at_sendbuf_limit(pair: list[ManagedProcess]) -> None:  # noqa: F811
    a, b = pair
    ca = a.client(socket_timeout=10)
    idb = b.client().execute_command("CLUSTER", "MYID")
    base_mem = int(ca.info("memory")["mem_cluster_links"])
    assert base_mem > 0
    assert _exceeded(ca) == 0
    ca.config_set("cluster-link-sendbuf-limit", LIMIT_BYTES)
    os.kill(b.pid, signal.SIGSTOP)
    max_buffer = max_mem = 0
    try:
        for _ in range(1000):  # 100 MB at most: the kernel's socket buffers fill first
            ca.publish("ch", MESSAGE)
            time.sleep(0.02)  # the buffer grows over several crons (100 ms), which check it
            max_buffer = max(max_buffer, _to_link_buffer(ca, idb))
            max_mem = max(max_mem, int(ca.info("memory")["mem_cluster_links"]))
            if _exceeded(ca):
                break
    finally:
        os.kill(b.pid, signal.SIGCONT)
    assert _exceeded(ca) >= 1
    assert max_buffer > 0
    assert max_mem > base_mem + len(MESSAGE)
