"""client-output-buffer-limit for pub/sub clients: a subscriber that stops reading is closed
(hard limit at once, soft limit after its grace time) and the server's memory stays bounded.
Every scenario runs on our node and on a real redis-server 7.0 and must end the same way."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.support import ManagedProcess, during, node_and_redis, rss_bytes

MESSAGE = b"m" * (64 * 1024)  # 64 KiB per PUBLISH
BATCH = 32  # publishes per pipeline round trip


@pytest.fixture
def default_limits(tmp_path: Path) -> Iterator[dict[str, ManagedProcess]]:
    with node_and_redis(tmp_path) as procs:  # built-in default: pubsub 32mb 8mb 60
        yield procs


@pytest.fixture
def soft_limit(tmp_path: Path) -> Iterator[dict[str, ManagedProcess]]:
    with node_and_redis(tmp_path, ["--client-output-buffer-limit", "pubsub 0 256kb 1"]) as procs:
        yield procs


def stalled_subscriber(port: int, channel: bytes) -> socket.socket:
    """Subscribe, read the confirmation, then never read again (tiny receive buffer)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    s.sendall(b"*2\r\n$9\r\nSUBSCRIBE\r\n$%d\r\n%s\r\n" % (len(channel), channel))
    s.settimeout(5)
    want = b"*3\r\n$9\r\nsubscribe\r\n$%d\r\n%s\r\n:1\r\n" % (len(channel), channel)
    got = b""
    while len(got) < len(want):
        got += s.recv(len(want) - len(got))
    assert got == want
    return s


def publish_batches(client: redis.Redis, channel: bytes, batches: int) -> list[int]:
    receivers: list[int] = []
    for _ in range(batches):
        pipe = client.pipeline(transaction=False)
        for _ in range(BATCH):
            pipe.publish(channel, MESSAGE)
        receivers += pipe.execute()
    return receivers


def numsub(client: redis.Redis, channel: bytes) -> int:
    reply = client.execute_command("PUBSUB", "NUMSUB", channel)
    return int(reply[1])


def drain_until_closed(s: socket.socket, timeout_s: float = 10.0) -> int:
    """Read what the server had already sent; returns the byte count once it closes."""
    total = 0
    s.settimeout(1)
    for _ in during(timeout_s, interval_s=0):
        try:
            data = s.recv(1 << 20)
        except TimeoutError:
            continue
        except ConnectionResetError:
            return total
        if not data:
            return total
        total += len(data)
    raise AssertionError(f"subscriber still connected after {timeout_s}s ({total} bytes read)")


@pytest.mark.parametrize("impl", ["ours", "real"])
def test_hard_limit_closes_stalled_subscriber_and_memory_stays_bounded(
        default_limits: dict[str, ManagedProcess], impl: str) -> None:
    proc = default_limits[impl]
    pub = proc.client()
    sub = stalled_subscriber(proc.port, b"firehose")
    try:
        rss_start = rss_bytes(proc.pid)
        rss_peak = rss_start
        receivers: list[int] = []
        # 160 batches * 32 * 64 KiB = 320 MiB published, ten times the 32 MiB hard limit
        for _ in range(160):
            receivers += publish_batches(pub, b"firehose", 1)
            rss_peak = max(rss_peak, rss_bytes(proc.pid))
        growth_mb = (rss_peak - rss_start) / 2**20
        print(f"{impl}: rss start {rss_start / 2**20:.1f} MiB, peak growth {growth_mb:.1f} MiB, "
              f"delivered to {receivers.count(1)} of {len(receivers)} publishes")
        # the subscriber was dropped: later publishes reach nobody
        assert receivers[0] == 1 and receivers[-1] == 0
        assert numsub(pub, b"firehose") == 0
        # what was queued before the limit is at most the limit (plus kernel buffers)
        delivered_mb = receivers.count(1) * len(MESSAGE) / 2**20
        assert delivered_mb < 32 + 16
        # bounded: far below the 320 MiB published (hard limit 32 MiB + one copy in flight)
        assert growth_mb < 110
        assert "overcoming of output buffer limits" in proc.log_text()
        received = drain_until_closed(sub)
        assert received < 48 * 2**20
        assert pub.ping()
    finally:
        sub.close()
        pub.close()


@pytest.mark.parametrize("impl", ["ours", "real"])
def test_soft_limit_closes_subscriber_after_grace_time(
        soft_limit: dict[str, ManagedProcess], impl: str) -> None:
    proc = soft_limit[impl]
    pub = proc.client()
    sub = stalled_subscriber(proc.port, b"slow")
    try:
        # 8 MiB: past the kernel's socket buffers, so well over 256 KiB stays queued
        assert publish_batches(pub, b"slow", 4)[-1] == 1
        assert numsub(pub, b"slow") == 1  # over the soft limit, but not for long yet
        time.sleep(2.5)  # Redis counts whole seconds: > 1 s means at least 2 s here
        assert pub.publish(b"slow", MESSAGE) == 0
        assert numsub(pub, b"slow") == 0
        drain_until_closed(sub)
    finally:
        sub.close()
        pub.close()


@pytest.mark.parametrize("impl", ["ours", "real"])
def test_reading_subscriber_keeps_up(default_limits: dict[str, ManagedProcess],
                                     impl: str) -> None:
    """The same traffic to a subscriber that reads is delivered whole."""
    proc = default_limits[impl]
    pub = proc.client()
    sub = proc.client().pubsub()
    sub.subscribe(b"ok")
    assert sub.get_message(timeout=5)["type"] == "subscribe"
    try:
        got = 0
        for _ in range(20):  # 20 * 32 * 64 KiB = 40 MiB
            assert publish_batches(pub, b"ok", 1) == [1] * BATCH
            for _ in range(BATCH):
                msg = sub.get_message(timeout=5)
                assert msg is not None and msg["data"] == MESSAGE
                got += 1
        assert got == 20 * BATCH
        assert numsub(pub, b"ok") == 1
    finally:
        sub.close()
        pub.close()
