"""Subscriber mode through the proxy: replies compared with a standalone redis-server;
messages published through the proxy reach subscribers of the proxy."""

from __future__ import annotations

import time
import uuid

import redis

from tests.support import ManagedProcess, RawClient


def test_resp2_subscriber_session_matches_standalone(
    slotgate: ManagedProcess, redis_standalone: ManagedProcess
) -> None:
    ch = f"ch{uuid.uuid4().hex[:6]}"
    script = [
        (["SUBSCRIBE", f"{ch}a", f"{ch}b"], 2),
        (["PSUBSCRIBE", f"{ch}*"], 1),
        (["PING"], 1),
        (["PING", "hi"], 1),
        (["GET", "x"], 1),  # not allowed while subscribed: Redis' own error
        (["UNSUBSCRIBE", f"{ch}a"], 1),
        (["UNSUBSCRIBE"], 1),
        (["PUNSUBSCRIBE"], 1),
        (["GET", f"{ch}nokey"], 1),  # back in normal mode
        (["UNSUBSCRIBE"], 1),  # with nothing subscribed
        (["PING"], 1),
    ]
    transcripts = []
    for server in (slotgate, redis_standalone):
        with RawClient(server.port) as c:
            got = []
            for argv, n in script:
                c.send(*argv)
                got.append(c.read_frames(n))
            transcripts.append(got)
    assert transcripts[0] == transcripts[1]
    assert transcripts[0][4][0].startswith(b"-ERR Can't execute 'get'")


def test_messages_reach_subscribers_resp2_and_resp3(slotgate: ManagedProcess) -> None:
    ch = f"news{uuid.uuid4().hex[:6]}"
    publisher = slotgate.client()
    for protocol in (2, 3):
        r = slotgate.client(protocol=protocol)
        p = r.pubsub()
        p.subscribe(ch)
        p.psubscribe(f"{ch}:*")
        assert p.get_message(timeout=5)["type"] == "subscribe"
        assert p.get_message(timeout=5)["type"] == "psubscribe"
        assert publisher.publish(ch, "hello") >= 1
        assert publisher.publish(f"{ch}:x", "pat") >= 1
        msgs = [p.get_message(timeout=5) for _ in range(2)]
        assert [(m["type"], m["data"]) for m in msgs] == [("message", b"hello"),
                                                          ("pmessage", b"pat")]
        p.close()


def test_resp3_subscriber_can_run_other_commands(slotgate: ManagedProcess) -> None:
    ch = f"r3{uuid.uuid4().hex[:6]}"
    key = f"{ch}:key"
    with RawClient(slotgate.port) as c:
        c.call("HELLO", "3")
        c.send("SUBSCRIBE", ch)
        assert c.read_frames(1)[0] == b">3\r\n$9\r\nsubscribe\r\n$%d\r\n%s\r\n:1\r\n" % (
            len(ch), ch.encode())
        assert c.call("SET", key, "v") == b"+OK\r\n"
        assert c.call("GET", key) == b"$1\r\nv\r\n"
        slotgate.client().publish(ch, "m")
        assert c.read_frames(1)[0] == b">3\r\n$7\r\nmessage\r\n$%d\r\n%s\r\n$1\r\nm\r\n" % (
            len(ch), ch.encode())
        assert c.call("DEL", key) == b":1\r\n"


def test_sharded_pubsub(slotgate: ManagedProcess) -> None:
    ch = f"sh{uuid.uuid4().hex[:6]}"
    r = slotgate.client()
    p = r.pubsub()
    p.ssubscribe(ch)
    assert p.get_message(timeout=5)["type"] == "ssubscribe"
    assert r.spublish(ch, "shard-msg") == 1
    m = p.get_message(timeout=5)
    assert (m["type"], m["data"]) == ("smessage", b"shard-msg")
    p.close()
    with RawClient(slotgate.port) as c:
        assert c.call("SSUBSCRIBE", "{a}x", "{b}y") == \
            b"-CROSSSLOT Keys in request don't hash to the same slot\r\n"


def test_subscriber_quit_and_reset(slotgate: ManagedProcess) -> None:
    with RawClient(slotgate.port) as c:
        c.send("SUBSCRIBE", "q1")
        c.read_frames(1)
        assert c.call("RESET") == b"+RESET\r\n"
        assert c.call("PING") == b"+PONG\r\n"  # normal mode again
        c.send("SUBSCRIBE", "q1")
        c.read_frames(1)
        c.send("QUIT")
        assert c.read_until_closed() == b"+OK\r\n"
    time.sleep(0.1)  # a proxy that failed on the close would be gone by now
    assert redis.Redis(port=slotgate.port).ping() is True
