"""Keyspace notifications through the proxy are those of the whole cluster, as one server's.

The same script runs against one standalone redis-server and through the proxy (each master
notifies only its own keys' events; the proxy subscribes keyspace channels and patterns on
every master). ``notify-keyspace-events`` is set with CONFIG SET through the proxy, which
reaches every node. The events compare equal as multisets, and per key in order (the order
between masters is not one server's).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator

import hiredis
import pytest

from tests.support import ManagedProcess, RawClient

Event = tuple[bytes, ...]


def _script(run: str) -> list[list[str]]:
    keys = [f"ks{run}:{i}" for i in range(9)]  # spread over the masters' slots
    tag = f"{{ks{run}}}"
    cmds: list[list[str]] = []
    for k in keys:
        cmds += [["SET", k, "1"], ["INCR", k], ["EXPIRE", k, "100"], ["PERSIST", k]]
    cmds += [["LPUSH", f"{keys[0]}l", "a", "b"], ["LPOP", f"{keys[0]}l"],
             ["HSET", f"{keys[1]}h", "f", "v"], ["HDEL", f"{keys[1]}h", "f"],
             ["SADD", f"{keys[2]}s", "m"], ["ZADD", f"{keys[3]}z", "1", "m"],
             ["MSET", *(a for k in keys[4:] for a in (k, "x"))],
             ["SET", f"{tag}a", "v"], ["RENAME", f"{tag}a", f"{tag}b"],
             ["DEL", *keys, f"{keys[2]}s", f"{keys[3]}z", f"{tag}b"]]
    return cmds


def _decode(frame: bytes) -> Event:
    reader = hiredis.Reader()
    reader.feed(frame)
    return tuple(reader.gets())


@pytest.fixture
def keyspace_events(slotgate: ManagedProcess,
                    redis_standalone: ManagedProcess) -> Iterator[None]:
    """notify-keyspace-events on (KEA) on the standalone server and every node, then off."""
    olds = []
    for port in (slotgate.port, redis_standalone.port):
        with RawClient(port) as c:
            olds.append((port, c.call("CONFIG", "GET", "notify-keyspace-events")))
            assert c.call("CONFIG", "SET", "notify-keyspace-events", "KEA") == b"+OK\r\n"
    try:
        yield
    finally:
        for port, old in olds:
            value = _decode(old)[1]
            with RawClient(port) as c:
                c.call("CONFIG", "SET", "notify-keyspace-events", value)


def _events(port: int, run: str, proto: int, expected: int | None) -> list[Event]:
    """The notifications the script causes (the standalone's: ``expected`` is None, read up
    to a final marker; through the proxy: read until ``expected`` arrived, then a little
    more so an extra one shows)."""
    prefix = f"ks{run}".encode()
    subscriptions = [("PSUBSCRIBE", f"__keyspace@0__:ks{run}*"),
                     ("PSUBSCRIBE", "__keyevent@0__:*"),
                     ("SUBSCRIBE", f"__keyspace@0__:ks{run}:0")]
    with RawClient(port) as sub, RawClient(port) as c:
        if proto == 3:
            sub.call("HELLO", "3")
        for cmd, name in subscriptions:
            assert _decode(sub.call(cmd, name))[1] == name.encode()
        for argv in _script(run):
            assert not c.call(*argv).startswith(b"-"), argv
        if expected is None:
            c.call("SET", f"ks{run}:end", "1")
        got: list[Event] = []
        while True:
            try:
                frame = sub.read(timeout_s=0.5 if expected is not None and
                                 len(got) >= expected else 10)
            except TimeoutError:
                break
            event = _decode(frame)
            if not any(prefix in part for part in event[1:] if isinstance(part, bytes)):
                continue  # another test's key
            if expected is None and event[-1] == f"ks{run}:end".encode():
                break
            if expected is None and event[-2].endswith(f"ks{run}:end".encode()):
                continue
            got.append(event)
    return got


def _per_key(events: list[Event]) -> dict[bytes, list[Event]]:
    """Each key's notifications in the order they came (a keyspace channel names the key,
    a keyevent message carries it)."""
    out: dict[bytes, list[Event]] = {}
    for ev in events:
        key = ev[-2].partition(b":")[2] if ev[-2].startswith(b"__keyspace") else ev[-1]
        out.setdefault(key, []).append(ev)
    return out


@pytest.mark.parametrize("proto", [2, 3])
def test_keyspace_events_of_every_master(slotgate: ManagedProcess,
                                         redis_standalone: ManagedProcess,
                                         keyspace_events: None, proto: int) -> None:
    run = uuid.uuid4().hex[:6]
    want = _events(redis_standalone.port, run, proto, None)
    assert len(want) > 100
    got = _events(slotgate.port, run, proto, len(want))
    assert Counter(got) == Counter(want)
    assert _per_key(got) == _per_key(want)
