"""CLIENT TRACKING through the proxy, compared with one standalone redis-server.

Scripts of three clients: A tracks (default, BCAST with PREFIX, OPTIN with CLIENT CACHING,
NOLOOP, RESP2 with REDIRECT), B writes, R receives A's invalidations when A redirects. Every
frame A and R receive is compared, replies and invalidation pushes alike, in order. A client
id in a reply is shown as ``<id>`` (each server numbers its clients its own way).
"""

from __future__ import annotations

import time
import uuid

import pytest

from slotgate.protocol.slots import key_slot
from tests.conftest import ClusterBackend
from tests.proxy.test_redirects import slot_owner
from tests.support import ManagedProcess, RawClient, wait_until

# Steps: (who, argv) sends and reads the reply; ("A", "push") / ("R", "push") reads one frame
# the client must have been sent; (who, "quiet") checks nothing else arrived (a PING's PONG
# comes first).
Step = tuple[str, object]


def _keys(run: str) -> tuple[str, str]:
    return f"tr{run}:a", f"tr{run}:b"  # two slots, most often two masters


def _default(run: str) -> list[Step]:
    k1, k2 = _keys(run)
    return [("A", ["HELLO", "3"]), ("A", ["CLIENT", "TRACKING", "ON"]),
            ("A", ["GET", k1]), ("B", ["SET", k1, "x"]), ("A", "push"),
            ("B", ["SET", k1, "y"]), ("A", "quiet"),  # forgotten once invalidated
            ("A", ["GET", k1]), ("A", ["MGET", k1, k2]), ("B", ["SET", k2, "z"]),
            ("A", "push"), ("B", ["DEL", k1]), ("A", "push"),
            ("A", ["CLIENT", "TRACKINGINFO"]), ("A", ["CLIENT", "GETREDIR"]),
            ("A", ["CLIENT", "TRACKING", "ON", "PREFIX", "x"]),
            ("A", ["CLIENT", "CACHING", "YES"]),
            ("A", ["CLIENT", "TRACKING", "ON", "BCAST"]),
            ("A", ["CLIENT", "TRACKING", "OFF"]), ("A", ["GET", k2]),
            ("B", ["SET", k2, "w"]), ("A", "quiet"), ("A", ["CLIENT", "TRACKINGINFO"])]


def _bcast(run: str) -> list[Step]:
    k1, k2 = _keys(run)
    return [("A", ["HELLO", "3"]),
            ("A", ["CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", f"tr{run}:a"]),
            ("B", ["SET", k1, "x"]), ("A", "push"), ("B", ["SET", k2, "x"]), ("A", "quiet"),
            ("B", ["SET", f"{k1}2", "x"]), ("A", "push"),
            ("A", ["CLIENT", "TRACKINGINFO"]),
            ("A", ["CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", f"tr{run}"]),
            ("B", ["DEL", k1, f"{k1}2", k2])]


def _optin_noloop(run: str) -> list[Step]:
    k1, k2 = _keys(run)
    return [("A", ["HELLO", "3"]), ("A", ["CLIENT", "TRACKING", "ON", "OPTIN"]),
            ("A", ["GET", k1]), ("B", ["SET", k1, "x"]), ("A", "quiet"),
            ("A", ["CLIENT", "CACHING", "YES"]), ("A", ["CLIENT", "TRACKINGINFO"]),
            ("A", ["GET", k1]), ("A", ["CLIENT", "TRACKINGINFO"]), ("B", ["SET", k1, "y"]),
            ("A", "push"), ("A", ["CLIENT", "CACHING", "NO"]),
            ("A", ["CLIENT", "TRACKING", "ON", "OPTOUT"]),
            ("A", ["CLIENT", "TRACKING", "OFF"]),
            ("A", ["CLIENT", "TRACKING", "ON", "NOLOOP"]), ("A", ["GET", k2]),
            ("A", ["SET", k2, "own"]), ("A", "quiet"), ("A", ["GET", k2]),
            ("B", ["SET", k2, "other"]), ("A", "push"), ("B", ["DEL", k1, k2])]


def _redirect(run: str) -> list[Step]:
    k1, _ = _keys(run)
    return [("R", ["CLIENT", "ID"]), ("R", ["SUBSCRIBE", "__redis__:invalidate"]),
            ("A", ["CLIENT", "TRACKING", "ON", "REDIRECT", "<R>"]),
            ("A", ["CLIENT", "GETREDIR"]), ("A", ["GET", k1]), ("B", ["SET", k1, "x"]),
            ("R", "push"), ("A", ["CLIENT", "TRACKING", "ON", "REDIRECT", "999999999"]),
            ("B", ["DEL", k1])]


def _multi(run: str) -> list[Step]:
    """Keys read inside MULTI are tracked once EXEC ran them; CLIENT CACHING before MULTI
    covers the transaction's reads (OPTIN). (One slot: a transaction's keys.)"""
    k1, k2 = f"{{tr{run}}}:a", f"{{tr{run}}}:b"
    return [("A", ["HELLO", "3"]), ("A", ["CLIENT", "TRACKING", "ON"]),
            ("A", ["MULTI"]), ("A", ["GET", k1]), ("A", ["EXEC"]),
            ("B", ["SET", k1, "x"]), ("A", "push"),
            ("A", ["MULTI"]), ("A", ["SET", k2, "own"]), ("A", ["EXEC"]), ("A", "quiet"),
            ("A", ["CLIENT", "TRACKING", "OFF"]),
            ("A", ["CLIENT", "TRACKING", "ON", "OPTIN"]),
            ("A", ["MULTI"]), ("A", ["GET", k1]), ("A", ["EXEC"]),
            ("B", ["SET", k1, "y"]), ("A", "quiet"),
            ("A", ["CLIENT", "CACHING", "YES"]), ("A", ["MULTI"]), ("A", ["GET", k1]),
            ("A", ["GET", k2]), ("A", ["EXEC"]), ("B", ["DEL", k1, k2]), ("A", "push"),
            ("A", "push")]


def _run(port: int, steps: list[Step]) -> list[bytes]:
    got: list[bytes] = []
    with RawClient(port) as a, RawClient(port) as b, RawClient(port) as r:
        who = {"A": a, "B": b, "R": r}
        r_id = r.call("CLIENT", "ID")[1:-2].decode()
        for name, what in steps:
            c = who[name]
            if what == "push":
                got.append(c.read(timeout_s=10))
            elif what == "quiet":
                # Part of the scenario: the proxy learns of a change from the master's feed,
                # a moment after the write's reply; a read sent at once could race it.
                time.sleep(0.3)
                c.send("PING")
                reply = c.read(timeout_s=10)
                assert reply in (b"+PONG\r\n", b"*2\r\n$4\r\npong\r\n$0\r\n\r\n"), (reply, got)
            else:
                argv = [r_id if arg == "<R>" else arg for arg in what]  # type: ignore[attr-defined]
                reply = c.call(*argv)
                if name != "B" and argv[0] != "HELLO":
                    got.append(reply.replace(b":%s\r\n" % r_id.encode(), b":<id>\r\n"))
    return got


@pytest.mark.parametrize("script", [_default, _bcast, _optin_noloop, _redirect, _multi],
                         ids=["default", "bcast", "optin-noloop", "redirect", "multi"])
def test_tracking_matches_standalone(slotgate: ManagedProcess, redis_standalone: ManagedProcess,
                                     script: object) -> None:
    run = uuid.uuid4().hex[:6]
    steps = script(run)  # type: ignore[operator]
    want = _run(redis_standalone.port, steps)
    assert any(f.startswith(b">2\r\n$10\r\ninvalidate") or b"__redis__:invalidate\r\n*1" in f
               for f in want)
    assert _run(slotgate.port, steps) == want


def _until_reply(c: RawClient, *argv: str) -> tuple[int, bytes]:
    """(invalidation pushes received before the reply, the reply)."""
    c.send(*argv)
    pushes = 0
    while (frame := c.read(timeout_s=10)).startswith(b">"):
        pushes += 1
    return pushes, frame


def _table_limit(port: int, run: str) -> list[object]:
    keys = [f"trmax{run}:{i}" for i in range(5)]
    seen: list[object] = []
    with RawClient(port) as a, RawClient(port) as b:
        seen.append(b.call("CONFIG", "SET", "tracking-table-max-keys", "2"))
        try:
            seen.append(b.call("CONFIG", "GET", "tracking-table-max-keys"))
            a.call("HELLO", "3")
            seen.append(a.call("CLIENT", "TRACKING", "ON"))
            # Over the limit, keys are dropped before the next command, their readers told.
            seen += [_until_reply(a, "GET", k) for k in keys]
            seen.append(_until_reply(a, "PING"))
            stats = b.call("INFO", "stats").decode()
            seen += [line for line in stats.split("\r\n") if line.startswith("tracking_total")]
            for k in keys:
                b.call("SET", k, "v")
            time.sleep(0.3)  # (the proxy learns of the writes from the masters' feeds)
            seen.append(_until_reply(a, "PING"))  # the two keys still tracked
            seen.append(b.call("CONFIG", "SET", "tracking-table-max-keys", "x"))
        finally:
            b.call("CONFIG", "SET", "tracking-table-max-keys", "1000000")
        b.call("DEL", *keys)
    return seen


def test_tracking_table_max_keys_matches_standalone(slotgate: ManagedProcess,
                                                    redis_standalone: ManagedProcess) -> None:
    run = uuid.uuid4().hex[:6]
    want = _table_limit(redis_standalone.port, run)
    assert want[3:9] == [(0, b"_\r\n")] * 3 + [(1, b"_\r\n")] * 2 + [(1, b"+PONG\r\n")]
    assert want[-2] == (2, b"+PONG\r\n")
    assert _table_limit(slotgate.port, run) == want


def _feeds(node: ManagedProcess) -> list[str]:
    """Ids of the node's clients in BCAST tracking mode (the proxy's feeds)."""
    text = node.client().execute_command("CLIENT", "LIST")
    text = text.decode() if isinstance(text, bytes) else text
    fields = [dict(f.split("=", 1) for f in line.split() if "=" in f)
              for line in text.splitlines()]
    return [f["id"] for f in fields if "B" in f.get("flags", "")]


def test_lost_feed_invalidates_everything(slotgate: ManagedProcess,
                                          cluster_backend: ClusterBackend) -> None:
    """A master's feed is cut: tracking clients are told everything may have changed (an
    invalidation with a null key list, as after FLUSHALL), once when it is lost and once
    when a new feed is up, and tracking goes on."""
    key = f"trfeed{uuid.uuid4().hex[:6]}"
    owner = slot_owner(cluster_backend, key_slot(key.encode()))
    null_push = b">2\r\n$10\r\ninvalidate\r\n_\r\n"
    with RawClient(slotgate.port) as a, RawClient(slotgate.port) as b:
        a.call("HELLO", "3")
        assert a.call("CLIENT", "TRACKING", "ON") == b"+OK\r\n"
        feeds = wait_until(lambda: _feeds(owner), what="the proxy's feed on the key's master")
        for feed_id in feeds:
            owner.client().execute_command("CLIENT", "KILL", "ID", feed_id)
        assert a.read(timeout_s=10) == null_push  # the feed is lost
        assert a.read(timeout_s=10) == null_push  # a new feed: what changed meanwhile?
        assert a.call("GET", key) == b"_\r\n"
        b.call("SET", key, "v")
        assert a.read(timeout_s=10) == b">2\r\n$10\r\ninvalidate\r\n*1\r\n$%d\r\n%s\r\n" % (
            len(key), key.encode())
        b.call("DEL", key)


def test_tracking_off_then_on_keeps_its_feeds(slotgate: ManagedProcess) -> None:
    """The last tracking client turns tracking off and at once on again: the
    feeds that were closing must not leave it with none, nor send it their loss. Each round,
    a key read after ON is invalidated by another client's write, and nothing else arrives."""
    key = f"tronoff{uuid.uuid4().hex[:6]}"
    push = b">2\r\n$10\r\ninvalidate\r\n*1\r\n$%d\r\n%s\r\n" % (len(key), key.encode())
    with RawClient(slotgate.port) as a, RawClient(slotgate.port) as b:
        a.call("HELLO", "3")
        assert a.call("CLIENT", "TRACKING", "ON") == b"+OK\r\n"
        for i in range(20):
            if i % 2:
                a.send_raw(b"CLIENT TRACKING OFF\r\nCLIENT TRACKING ON\r\n")
                assert a.read(timeout_s=10) == b"+OK\r\n"
            else:  # ON lands while the closing feeds are being cancelled
                assert a.call("CLIENT", "TRACKING", "OFF") == b"+OK\r\n"
                time.sleep(0.0005 * i)
                a.send("CLIENT", "TRACKING", "ON")
            assert a.read(timeout_s=10) == b"+OK\r\n"
            assert a.call("GET", key) in (b"_\r\n", b"$1\r\nv\r\n")
            b.call("SET", key, "v")
            assert a.read(timeout_s=10) == push
        a.send("PING")
        assert a.read(timeout_s=10) == b"+PONG\r\n"
        b.call("DEL", key)
