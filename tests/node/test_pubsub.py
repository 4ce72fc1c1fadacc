"""Pub/Sub on our node, differential against a real redis-server 7.0: the same scripted
conversations over raw sockets must produce the same reply bytes on both."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.support import ManagedProcess, RawClient, node_and_redis, wait_blocked, wait_until

FRAME_TIMEOUT_S = 5.0


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ManagedProcess]]:
    """Our node and a real redis-server, both fresh for this module."""
    with node_and_redis(tmp_path_factory.mktemp("pubsub")) as procs:
        yield procs


Script = Callable[[Callable[[], RawClient]], list[object]]


def both(servers: dict[str, ManagedProcess], script: Script) -> dict[str, list[object]]:
    """Run ``script`` against each server; it gets a connection factory, returns a transcript."""
    results: dict[str, list[object]] = {}
    for name, proc in servers.items():
        conns: list[RawClient] = []

        def connect(port: int = proc.port, conns: list[RawClient] = conns) -> RawClient:
            c = RawClient(port, FRAME_TIMEOUT_S)
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


def info_pubsub(conn: RawClient) -> list[bytes]:
    """INFO stats' three pub/sub counts, as the server prints them."""
    lines = conn.call("INFO", "stats").split(b"\r\n")
    return [ln for ln in lines if ln.startswith((b"pubsub_", b"pubsubshard_"))]


def wait_numsub(conn: RawClient, channel: str, want: int) -> None:
    """Subscriptions made on other connections are visible once PUBSUB NUMSUB says so."""
    wait_until(lambda: conn.call("PUBSUB", "NUMSUB", channel).endswith(b":%d\r\n" % want),
               FRAME_TIMEOUT_S, f"NUMSUB {channel} to reach {want}", interval_s=0.01)


# --- RESP2 -----------------------------------------------------------------------------------


def test_resp2_subscribe_mode_replies_and_restrictions(servers: dict[str, ManagedProcess]) -> None:
    def script(connect: Callable[[], RawClient]) -> list[object]:
        c = connect()
        t: list[object] = []
        t += c.call_frames("SUBSCRIBE", "a", "b", "a", frames=3)
        t += c.call_frames("GET", "x")  # refused in RESP2 subscribe mode
        t += c.call_frames("set", "x", "1")
        t += c.call_frames("PING")
        t += c.call_frames("PING", "hi")
        t += c.call_frames("PSUBSCRIBE", "p*", "q?", frames=2)
        t += c.call_frames("SSUBSCRIBE", "s1", frames=1)
        t += c.call_frames("UNSUBSCRIBE", "b", "nope", frames=2)
        t += c.call_frames("PUNSUBSCRIBE", "q?", frames=1)
        t += c.call_frames("SUNSUBSCRIBE", frames=1)
        t += c.call_frames("UNSUBSCRIBE", frames=1)
        t += c.call_frames("PUNSUBSCRIBE", frames=1)
        t += c.call_frames("UNSUBSCRIBE", frames=1)  # nothing left: a null channel name
        t += c.call_frames("GET", "x")  # out of subscribe mode again
        return t

    transcript = assert_same(servers, script)
    assert transcript[3] == (b"-ERR Can't execute 'get': only (P|S)SUBSCRIBE / "
                             b"(P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context\r\n")


def test_unsubscribe_all_counts_down(servers: dict[str, ManagedProcess]) -> None:
    """UNSUBSCRIBE with no names walks the client's channels in hash order (random per
    process in Redis): compare the names as a set and the counts in order."""

    def script(connect: Callable[[], RawClient]) -> list[object]:
        c = connect()
        c.call_frames("SUBSCRIBE", "c1", "c2", "c3", frames=3)
        c.call_frames("PSUBSCRIBE", "x*", frames=1)
        frames = c.call_frames("UNSUBSCRIBE", frames=3)
        counts = [f.rsplit(b":", 1)[1] for f in frames]
        names = sorted(f.split(b"\r\n")[4] for f in frames)
        return [counts, names, c.call_frames("PUNSUBSCRIBE"), c.nothing_pending()]

    assert assert_same(servers, script)[0] == [b"3\r\n", b"2\r\n", b"1\r\n"]  # + 1 pattern


def test_publish_reaches_channel_then_pattern_subscribers(
        servers: dict[str, ManagedProcess]) -> None:
    def script(connect: Callable[[], RawClient]) -> list[object]:
        sub, psub, both_, pub = connect(), connect(), connect(), connect()
        t: list[object] = []
        t += sub.call_frames("SUBSCRIBE", "news.tech", frames=1)
        t += psub.call_frames("PSUBSCRIBE", "news.[a-t]*", frames=1)
        t += both_.call_frames("SUBSCRIBE", "news.tech", frames=1)
        t += both_.call_frames("PSUBSCRIBE", "news.*", frames=1)
        wait_numsub(pub, "news.tech", 2)
        t += pub.call_frames("PUBLISH", "news.tech", "hello\r\nworld")
        t += sub.read_frames(1) + psub.read_frames(1) + both_.read_frames(2)
        t += pub.call_frames("PUBLISH", "news.zoo", b"\x00bin")
        t += both_.read_frames(1)
        t += [sub.nothing_pending(), psub.nothing_pending()]
        t += pub.call_frames("PUBLISH", "nobody", "x")
        return t

    transcript = assert_same(servers, script)
    assert b":4\r\n" in transcript  # 2 channel subscribers + 2 pattern subscribers


def test_resp3_pushes_and_commands_while_subscribed(servers: dict[str, ManagedProcess]) -> None:
    def script(connect: Callable[[], RawClient]) -> list[object]:
        c, pub = connect(), connect()
        c.call_frames("HELLO", "3")
        t: list[object] = []
        t += c.call_frames("SUBSCRIBE", "ch", frames=1)
        t += c.call_frames("SET", "k", "v")  # allowed in RESP3
        t += c.call_frames("GET", "k")
        t += c.call_frames("PSUBSCRIBE", "c*", frames=1)
        t += c.call_frames("SSUBSCRIBE", "sh", frames=1)
        wait_numsub(pub, "ch", 1)
        t += pub.call_frames("PUBLISH", "ch", "m1")
        t += c.read_frames(2)
        t += pub.call_frames("SPUBLISH", "sh", "m2")
        t += c.read_frames(1)
        # publishing to itself: the push precedes the reply
        t += c.call_frames("PUBLISH", "ch", "self", frames=3)
        t += c.call_frames("PING")
        t += c.call_frames("UNSUBSCRIBE", "ch", frames=1)
        t += c.call_frames("PUNSUBSCRIBE", frames=1)
        t += c.call_frames("SUNSUBSCRIBE", "sh", frames=1)
        t += c.call_frames("UNSUBSCRIBE", frames=1)
        return t

    transcript = assert_same(servers, script)
    assert any(isinstance(f, bytes) and f.startswith(b">3\r\n$7\r\nmessage") for f in transcript)


def test_resp3_subscriber_blocked_in_blpop_keeps_waiting(
        servers: dict[str, ManagedProcess]) -> None:
    """A push to a RESP3 subscriber parked in BLPOP must not end its wait."""

    def script(connect: Callable[[], RawClient]) -> list[object]:
        c, other = connect(), connect()
        c.call_frames("HELLO", "3")
        t: list[object] = []
        t += c.call_frames("SUBSCRIBE", "bl", frames=1)
        c.send("BLPOP", "blk", "5")
        wait_numsub(other, "bl", 1)
        wait_blocked(other, 1)
        t += other.call_frames("PUBLISH", "bl", "while-blocked")
        wait_blocked(other, 1)  # still waiting after the push
        t += other.call_frames("RPUSH", "blk", "item")
        t += c.read_frames(2)  # the push, then BLPOP's answer with the item
        t += other.call_frames("DEL", "blk")
        return t

    transcript = assert_same(servers, script)
    assert transcript[-2] == b"*2\r\n$3\r\nblk\r\n$4\r\nitem\r\n"


def test_sharded_pubsub(servers: dict[str, ManagedProcess]) -> None:
    def script(connect: Callable[[], RawClient]) -> list[object]:
        s, pub = connect(), connect()
        t: list[object] = []
        t += s.call_frames("SSUBSCRIBE", "{u}a", "{u}b", frames=2)
        t += s.call_frames("SUBSCRIBE", "plain", frames=1)  # shard and plain counts are separate
        t += s.call_frames("GET", "x")
        t += pub.call_frames("PUBSUB", "SHARDNUMSUB", "{u}a", "{u}b", "none")
        t += info_pubsub(pub)
        t += [sorted(pub.call_frames("PUBSUB", "SHARDCHANNELS", "{u}*")[0].split(b"\r\n"))]
        t += pub.call_frames("SPUBLISH", "{u}a", "hi")
        t += s.read_frames(1)
        t += pub.call_frames("PUBLISH", "{u}a", "not sharded")
        t += [s.nothing_pending()]
        t += s.call_frames("SUNSUBSCRIBE", "{u}a", frames=1)
        t += pub.call_frames("PUBSUB", "SHARDCHANNELS")
        t += info_pubsub(pub)
        return t

    assert_same(servers, script)


def test_pubsub_introspection(servers: dict[str, ManagedProcess]) -> None:
    def script(connect: Callable[[], RawClient]) -> list[object]:
        a, b, q = connect(), connect(), connect()
        a.call_frames("SUBSCRIBE", "alpha", "beta", frames=2)
        b.call_frames("SUBSCRIBE", "beta", frames=1)
        a.call_frames("PSUBSCRIBE", "al*", "be*", frames=2)
        b.call_frames("PSUBSCRIBE", "al*", frames=1)
        wait_numsub(q, "beta", 2)
        t: list[object] = []
        t += q.call_frames("PUBSUB", "NUMSUB", "alpha", "beta", "gamma")
        t += q.call_frames("PUBSUB", "NUMSUB")
        t += q.call_frames("PUBSUB", "NUMPAT")
        t += info_pubsub(q)
        t += [sorted(q.call_frames("PUBSUB", "CHANNELS")[0].split(b"\r\n"))]
        t += q.call_frames("PUBSUB", "CHANNELS", "b*")
        t += q.call_frames("PUBSUB", "CHANNELS", "a", "b")
        t += q.call_frames("PUBSUB", "NOPE")
        t += q.call_frames("PUBSUB")
        t += [len(q.call_frames("PUBSUB", "HELP")[0])]
        b.close()  # a disconnect drops its subscriptions
        wait_numsub(q, "beta", 1)
        t += q.call_frames("PUBSUB", "NUMPAT")
        a.call_frames("RESET")  # so does RESET
        wait_numsub(q, "alpha", 0)
        t += q.call_frames("PUBSUB", "NUMPAT")
        t += q.call_frames("PUBSUB", "CHANNELS")
        t += info_pubsub(q)
        return t

    assert_same(servers, script)


def test_pubsub_introspection_resp3(servers: dict[str, ManagedProcess]) -> None:
    def script(connect: Callable[[], RawClient]) -> list[object]:
        a, q = connect(), connect()
        q.call_frames("HELLO", "3")
        a.call_frames("SUBSCRIBE", "r3", frames=1)
        a.call_frames("SSUBSCRIBE", "s3", frames=1)
        wait_numsub(q, "r3", 1)
        t: list[object] = []
        t += q.call_frames("PUBSUB", "NUMSUB", "r3", "zz")
        t += q.call_frames("PUBSUB", "SHARDNUMSUB", "s3")
        t += q.call_frames("PUBSUB", "CHANNELS", "r*")
        t += q.call_frames("PUBSUB", "SHARDCHANNELS")
        t += q.call_frames("PUBSUB", "NUMPAT")
        t += q.call_frames("UNSUBSCRIBE", frames=1)  # not subscribed, RESP3: a null name
        return t

    assert_same(servers, script)


def test_reset_leaves_subscribe_mode(servers: dict[str, ManagedProcess]) -> None:
    def script(connect: Callable[[], RawClient]) -> list[object]:
        c, pub = connect(), connect()
        t: list[object] = []
        t += c.call_frames("SUBSCRIBE", "r", frames=1)
        t += c.call_frames("RESET")
        t += pub.call_frames("PUBLISH", "r", "lost")
        t += [c.nothing_pending()]
        t += c.call_frames("GET", "nothing")
        return t

    assert_same(servers, script)


def test_subscribe_inside_multi(servers: dict[str, ManagedProcess]) -> None:
    def script(connect: Callable[[], RawClient]) -> list[object]:
        c = connect()
        t: list[object] = []
        t += c.call_frames("MULTI")
        t += c.call_frames("SUBSCRIBE", "m1")
        t += c.call_frames("SSUBSCRIBE", "m2")
        t += c.call_frames("GET", "m1")
        t += c.call_frames("EXEC")
        t += c.call_frames("UNSUBSCRIBE", frames=1)
        t += c.call_frames("SUNSUBSCRIBE", frames=1)
        return t

    assert_same(servers, script)


@pytest.fixture(scope="module")
def notify_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ManagedProcess]]:
    """Both servers started with notify-keyspace-events KEA."""
    with node_and_redis(tmp_path_factory.mktemp("notify"),
                        ["--notify-keyspace-events", "KEA"]) as procs:
        yield procs


def test_keyspace_notifications(notify_servers: dict[str, ManagedProcess]) -> None:
    def script(connect: Callable[[], RawClient]) -> list[object]:
        c, w = connect(), connect()
        t: list[object] = []
        t += c.call_frames("PSUBSCRIBE", "__key*__:*", frames=1)
        t += w.call_frames("SET", "nk", "1")
        t += c.read_frames(2)
        t += w.call_frames("DEL", "nk")
        t += c.read_frames(2)
        t += w.call_frames("SELECT", "3")
        t += w.call_frames("SET", "k3", "x")
        t += c.read_frames(2)
        return t

    transcript = assert_same(notify_servers, script)
    assert b"__keyspace@3__:k3" in b"".join(f for f in transcript if isinstance(f, bytes))
