"""Pub/Sub on our node, differential against a real redis-server 7.0: the same scripted
conversations over raw sockets must produce the same reply bytes on both."""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from protocol.resp import ReplyFramer
from tests.support import ManagedProcess, free_port, redis_server

FRAME_TIMEOUT_S = 5.0


def node_process(workdir: Path, *extra: str) -> ManagedProcess:
    port = free_port()
    argv = [sys.executable, "-m", "node", "--port", str(port), "--bind", "127.0.0.1", *extra]
    return ManagedProcess(argv, port, workdir / f"node-{port}", "node.log")


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ManagedProcess]]:
    """Our node and a real redis-server, both fresh for this module."""
    d = tmp_path_factory.mktemp("pubsub")
    ours = node_process(d).start()
    try:
        real = redis_server(d).start()
        try:
            yield {"ours": ours, "real": real}
        finally:
            real.stop()
    finally:
        ours.stop()


class Conn:
    """A raw RESP connection that reads whole reply frames as bytes."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=FRAME_TIMEOUT_S)
        self.framer = ReplyFramer()

    def send(self, *args: bytes | str) -> None:
        parts = [b"*%d\r\n" % len(args)]
        for a in args:
            b = a.encode() if isinstance(a, str) else a
            parts.append(b"$%d\r\n%s\r\n" % (len(b), b))
        self.sock.sendall(b"".join(parts))

    def frames(self, n: int) -> list[bytes]:
        out: list[bytes] = []
        deadline = time.monotonic() + FRAME_TIMEOUT_S
        while len(out) < n:
            f = self.framer.next_frame()
            if f is not None:
                out.append(f[1])
                continue
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError(f"closed after {len(out)} of {n} frames: {out!r}")
            self.framer.feed(data)
        return out

    def call(self, *args: bytes | str, frames: int = 1) -> list[bytes]:
        self.send(*args)
        return self.frames(frames)

    def nothing_pending(self, wait_s: float = 0.1) -> bool:
        if self.framer.next_frame() is not None:
            return False
        self.sock.settimeout(wait_s)
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            return True
        self.framer.feed(data)
        return False

    def close(self) -> None:
        self.sock.close()


Script = Callable[[Callable[[], Conn]], list[object]]


def both(servers: dict[str, ManagedProcess], script: Script) -> dict[str, list[object]]:
    """Run ``script`` against each server; it gets a connection factory, returns a transcript."""
    results: dict[str, list[object]] = {}
    for name, proc in servers.items():
        conns: list[Conn] = []

        def connect(port: int = proc.port, conns: list[Conn] = conns) -> Conn:
            c = Conn(port)
            conns.append(c)
            return c

        try:
            results[name] = script(connect)
        finally:
            for c in conns:
                c.close()
    return results


def assert_same(servers: dict[str, ManagedProcess], script: Script) -> list[object]:
    got = both(servers, script)
    assert got["ours"] == got["real"]
    return got["ours"]


def wait_numsub(conn: Conn, channel: str, want: int) -> None:
    """Subscriptions made on other connections are visible once PUBSUB NUMSUB says so."""
    deadline = time.monotonic() + FRAME_TIMEOUT_S
    while time.monotonic() < deadline:
        frame = conn.call("PUBSUB", "NUMSUB", channel)[0]
        if frame.endswith(b":%d\r\n" % want):
            return
        time.sleep(0.01)
    raise AssertionError(f"NUMSUB {channel} never reached {want}")


# --- RESP2 -----------------------------------------------------------------------------------


def test_resp2_subscribe_mode_replies_and_restrictions(servers: dict[str, ManagedProcess]) -> None:
    def script(connect: Callable[[], Conn]) -> list[object]:
        c = connect()
        t: list[object] = []
        t += c.call("SUBSCRIBE", "a", "b", "a", frames=3)
        t += c.call("GET", "x")  # refused in RESP2 subscribe mode
        t += c.call("set", "x", "1")
        t += c.call("PING")
        t += c.call("PING", "hi")
        t += c.call("PSUBSCRIBE", "p*", "q?", frames=2)
        t += c.call("SSUBSCRIBE", "s1", frames=1)
        t += c.call("UNSUBSCRIBE", "b", "nope", frames=2)
        t += c.call("PUNSUBSCRIBE", "q?", frames=1)
        t += c.call("SUNSUBSCRIBE", frames=1)
        t += c.call("UNSUBSCRIBE", frames=1)
        t += c.call("PUNSUBSCRIBE", frames=1)
        t += c.call("UNSUBSCRIBE", frames=1)  # nothing left: a null channel name
        t += c.call("GET", "x")  # out of subscribe mode again
        return t

    transcript = assert_same(servers, script)
    assert transcript[3] == (b"-ERR Can't execute 'get': only (P|S)SUBSCRIBE / "
                             b"(P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context\r\n")


def test_unsubscribe_all_counts_down(servers: dict[str, ManagedProcess]) -> None:
    """UNSUBSCRIBE with no names walks the client's channels in hash order (random per
    process in Redis): compare the names as a set and the counts in order."""

    def script(connect: Callable[[], Conn]) -> list[object]:
        c = connect()
        c.call("SUBSCRIBE", "c1", "c2", "c3", frames=3)
        c.call("PSUBSCRIBE", "x*", frames=1)
        frames = c.call("UNSUBSCRIBE", frames=3)
        counts = [f.rsplit(b":", 1)[1] for f in frames]
        names = sorted(f.split(b"\r\n")[4] for f in frames)
        return [counts, names, c.call("PUNSUBSCRIBE"), c.nothing_pending()]

    assert assert_same(servers, script)[0] == [b"3\r\n", b"2\r\n", b"1\r\n"]  # + 1 pattern


def test_publish_reaches_channel_then_pattern_subscribers(
        servers: dict[str, ManagedProcess]) -> None:
    def script(connect: Callable[[], Conn]) -> list[object]:
        sub, psub, both_, pub = connect(), connect(), connect(), connect()
        t: list[object] = []
        t += sub.call("SUBSCRIBE", "news.tech", frames=1)
        t += psub.call("PSUBSCRIBE", "news.[a-t]*", frames=1)
        t += both_.call("SUBSCRIBE", "news.tech", frames=1)
        t += both_.call("PSUBSCRIBE", "news.*", frames=1)
        wait_numsub(pub, "news.tech", 2)
        t += pub.call("PUBLISH", "news.tech", "hello\r\nworld")
        t += sub.frames(1) + psub.frames(1) + both_.frames(2)
        t += pub.call("PUBLISH", "news.zoo", b"\x00bin")
        t += both_.frames(1)
        t += [sub.nothing_pending(), psub.nothing_pending()]
        t += pub.call("PUBLISH", "nobody", "x")
        return t

    transcript = assert_same(servers, script)
    assert b":4\r\n" in transcript  # 2 channel subscribers + 2 pattern subscribers


def test_resp3_pushes_and_commands_while_subscribed(servers: dict[str, ManagedProcess]) -> None:
    def script(connect: Callable[[], Conn]) -> list[object]:
        c, pub = connect(), connect()
        c.call("HELLO", "3")
        t: list[object] = []
        t += c.call("SUBSCRIBE", "ch", frames=1)
        t += c.call("SET", "k", "v")  # allowed in RESP3
        t += c.call("GET", "k")
        t += c.call("PSUBSCRIBE", "c*", frames=1)
        t += c.call("SSUBSCRIBE", "sh", frames=1)
        wait_numsub(pub, "ch", 1)
        t += pub.call("PUBLISH", "ch", "m1")
        t += c.frames(2)
        t += pub.call("SPUBLISH", "sh", "m2")
        t += c.frames(1)
        # publishing to itself: the push precedes the reply
        t += c.call("PUBLISH", "ch", "self", frames=3)
        t += c.call("PING")
        t += c.call("UNSUBSCRIBE", "ch", frames=1)
        t += c.call("PUNSUBSCRIBE", frames=1)
        t += c.call("SUNSUBSCRIBE", "sh", frames=1)
        t += c.call("UNSUBSCRIBE", frames=1)
        return t

    transcript = assert_same(servers, script)
    assert any(isinstance(f, bytes) and f.startswith(b">3\r\n$7\r\nmessage") for f in transcript)


def test_resp3_subscriber_blocked_in_blpop_keeps_waiting(
        servers: dict[str, ManagedProcess]) -> None:
    """A push to a RESP3 subscriber parked in BLPOP must not end its wait."""

    def script(connect: Callable[[], Conn]) -> list[object]:
        c, other = connect(), connect()
        c.call("HELLO", "3")
        t: list[object] = []
        t += c.call("SUBSCRIBE", "bl", frames=1)
        c.send("BLPOP", "blk", "5")
        wait_numsub(other, "bl", 1)
        time.sleep(0.1)  # let BLPOP park
        t += other.call("PUBLISH", "bl", "while-blocked")
        time.sleep(0.1)
        t += other.call("RPUSH", "blk", "item")
        t += c.frames(2)  # the push, then BLPOP's answer with the item
        t += other.call("DEL", "blk")
        return t

    transcript = assert_same(servers, script)
    assert transcript[-2] == b"*2\r\n$3\r\nblk\r\n$4\r\nitem\r\n"


def test_sharded_pubsub(servers: dict[str, ManagedProcess]) -> None:
    def script(connect: Callable[[], Conn]) -> list[object]:
        s, pub = connect(), connect()
        t: list[object] = []
        t += s.call("SSUBSCRIBE", "{u}a", "{u}b", frames=2)
        t += s.call("SUBSCRIBE", "plain", frames=1)  # shard and plain counts are separate
        t += s.call("GET", "x")
        t += pub.call("PUBSUB", "SHARDNUMSUB", "{u}a", "{u}b", "none")
        t += [sorted(pub.call("PUBSUB", "SHARDCHANNELS", "{u}*")[0].split(b"\r\n"))]
        t += pub.call("SPUBLISH", "{u}a", "hi")
        t += s.frames(1)
        t += pub.call("PUBLISH", "{u}a", "not sharded")
        t += [s.nothing_pending()]
        t += s.call("SUNSUBSCRIBE", "{u}a", frames=1)
        t += pub.call("PUBSUB", "SHARDCHANNELS")
        return t

    assert_same(servers, script)


def test_pubsub_introspection(servers: dict[str, ManagedProcess]) -> None:
    def script(connect: Callable[[], Conn]) -> list[object]:
        a, b, q = connect(), connect(), connect()
        a.call("SUBSCRIBE", "alpha", "beta", frames=2)
        b.call("SUBSCRIBE", "beta", frames=1)
        a.call("PSUBSCRIBE", "al*", "be*", frames=2)
        b.call("PSUBSCRIBE", "al*", frames=1)
        wait_numsub(q, "beta", 2)
        t: list[object] = []
        t += q.call("PUBSUB", "NUMSUB", "alpha", "beta", "gamma")
        t += q.call("PUBSUB", "NUMSUB")
        t += q.call("PUBSUB", "NUMPAT")
        t += [sorted(q.call("PUBSUB", "CHANNELS")[0].split(b"\r\n"))]
        t += q.call("PUBSUB", "CHANNELS", "b*")
        t += q.call("PUBSUB", "CHANNELS", "a", "b")
        t += q.call("PUBSUB", "NOPE")
        t += q.call("PUBSUB")
        t += [len(q.call("PUBSUB", "HELP")[0])]
        b.close()  # a disconnect drops its subscriptions
        wait_numsub(q, "beta", 1)
        t += q.call("PUBSUB", "NUMPAT")
        a.call("RESET")  # so does RESET
        wait_numsub(q, "alpha", 0)
        t += q.call("PUBSUB", "NUMPAT")
        t += q.call("PUBSUB", "CHANNELS")
        return t

    assert_same(servers, script)


def test_pubsub_introspection_resp3(servers: dict[str, ManagedProcess]) -> None:
    def script(connect: Callable[[], Conn]) -> list[object]:
        a, q = connect(), connect()
        q.call("HELLO", "3")
        a.call("SUBSCRIBE", "r3", frames=1)
        a.call("SSUBSCRIBE", "s3", frames=1)
        wait_numsub(q, "r3", 1)
        t: list[object] = []
        t += q.call("PUBSUB", "NUMSUB", "r3", "zz")
        t += q.call("PUBSUB", "SHARDNUMSUB", "s3")
        t += q.call("PUBSUB", "CHANNELS", "r*")
        t += q.call("PUBSUB", "SHARDCHANNELS")
        t += q.call("PUBSUB", "NUMPAT")
        t += q.call("UNSUBSCRIBE", frames=1)  # not subscribed, RESP3: a null name
        return t

    assert_same(servers, script)


def test_reset_leaves_subscribe_mode(servers: dict[str, ManagedProcess]) -> None:
    def script(connect: Callable[[], Conn]) -> list[object]:
        c, pub = connect(), connect()
        t: list[object] = []
        t += c.call("SUBSCRIBE", "r", frames=1)
        t += c.call("RESET")
        t += pub.call("PUBLISH", "r", "lost")
        t += [c.nothing_pending()]
        t += c.call("GET", "nothing")
        return t

    assert_same(servers, script)


def test_subscribe_inside_multi(servers: dict[str, ManagedProcess]) -> None:
    def script(connect: Callable[[], Conn]) -> list[object]:
        c = connect()
        t: list[object] = []
        t += c.call("MULTI")
        t += c.call("SUBSCRIBE", "m1")
        t += c.call("SSUBSCRIBE", "m2")
        t += c.call("GET", "m1")
        t += c.call("EXEC")
        t += c.call("UNSUBSCRIBE", frames=1)
        t += c.call("SUNSUBSCRIBE", frames=1)
        return t

    assert_same(servers, script)


@pytest.fixture(scope="module")
def notify_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ManagedProcess]]:
    """Both servers started with notify-keyspace-events KEA."""
    d = tmp_path_factory.mktemp("notify")
    opts = ("--notify-keyspace-events", "KEA")
    ours = node_process(d, *opts).start()
    try:
        real = redis_server(d, extra=opts).start()
        try:
            yield {"ours": ours, "real": real}
        finally:
            real.stop()
    finally:
        ours.stop()


def test_keyspace_notifications(notify_servers: dict[str, ManagedProcess]) -> None:
    def script(connect: Callable[[], Conn]) -> list[object]:
        c, w = connect(), connect()
        t: list[object] = []
        t += c.call("PSUBSCRIBE", "__key*__:*", frames=1)
        t += w.call("SET", "nk", "1")
        t += c.frames(2)
        t += w.call("DEL", "nk")
        t += c.frames(2)
        t += w.call("SELECT", "3")
        t += w.call("SET", "k3", "x")
        t += c.frames(2)
        return t

    transcript = assert_same(notify_servers, script)
    assert b"__keyspace@3__:k3" in b"".join(f for f in transcript if isinstance(f, bytes))
