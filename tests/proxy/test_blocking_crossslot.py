"""Blocking pops over keys in several slots, through the proxy (a real cluster, then our
nodes: the ``slotgate`` fixture runs each test once per cluster).

Key names carry no hash tag; ``a`` is in the first master's slots, ``b`` and ``c`` in the
last master's (and in slots of their own), so every command spans two masters.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Sequence

import pytest

from slotgate.protocol.slots import key_slot
from slotgate.proxy.routing.splitter import array_elements
from tests.support import ManagedProcess, RawClient

NAMES = ("a", "b", "c", "s")


def _keys() -> dict[str, str]:
    """Fresh names: ``a`` in slots 0-5000, ``b``/``c``/``s`` in 11000-16383, all different."""
    while True:
        tag = uuid.uuid4().hex[:8]
        keys = {n: f"bp{tag}{n}" for n in NAMES}
        slots = {n: key_slot(k.encode()) for n, k in keys.items()}
        if (slots["a"] < 5000 and all(slots[n] > 11000 for n in "bcs")
                and len(set(slots.values())) == len(NAMES)):
            return keys


SCRIPT: list[list[str]] = [
    ["BLPOP", "a", "b", "0.1"], ["BRPOP", "a", "b", "0.1"],
    ["RPUSH", "b", "1", "2", "3"], ["BLPOP", "a", "b", "1"], ["BRPOP", "a", "b", "1"],
    ["RPUSH", "a", "x", "y"], ["BLPOP", "b", "a", "1"], ["BLPOP", "a", "b", "1"],
    ["BRPOP", "b", "a", "1"], ["LRANGE", "a", "0", "-1"], ["LRANGE", "b", "0", "-1"],
    ["BLPOP", "a", "b", "-1"], ["BLPOP", "a", "b", "soon"], ["BLPOP", "a", "b", "0.1"],
    ["SET", "s", "v"], ["BLPOP", "a", "s", "1"], ["BLPOP", "b", "s", "a", "1"],
    ["BZPOPMIN", "a", "c", "0.1"], ["ZADD", "c", "1", "m1", "2.5", "m2", "3", "m3"],
    ["BZPOPMIN", "a", "c", "1"], ["BZPOPMAX", "a", "c", "1"], ["BZPOPMIN", "s", "c", "1"],
    ["ZRANGE", "c", "0", "-1", "WITHSCORES"],
    ["RPUSH", "b", "p", "q", "r"], ["BLMPOP", "1", "2", "a", "b", "LEFT", "COUNT", "2"],
    ["BLMPOP", "1", "2", "a", "b", "RIGHT"], ["BLMPOP", "0.1", "2", "a", "c", "RIGHT"],
    ["BLMPOP", "1", "2", "a", "b", "LEFT", "COUNT", "0"], ["BLMPOP", "1", "2", "a", "b", "UP"],
    ["BLMPOP", "1", "3", "a", "b"], ["BLMPOP", "1", "0", "a", "b", "LEFT"],
    ["ZADD", "c", "4", "m4", "5", "m5"], ["BZMPOP", "1", "2", "a", "c", "MIN", "COUNT", "2"],
    ["BZMPOP", "1", "2", "a", "c", "MAX"], ["BZMPOP", "0.1", "2", "a", "b", "MAX"],
    ["BZMPOP", "1", "2", "s", "c", "MIN"], ["EXISTS", "a", "b", "c"],
]


def _run(port: int, proto: int, keys: dict[str, str], script: Sequence[list[str]]) -> list[bytes]:
    with RawClient(port) as c:
        if proto == 3:
            assert c.call("HELLO", "3")[:1] == b"%"
        out = [c.call(*[keys.get(a, a) for a in cmd]) for cmd in script]
        c.call("DEL", *keys.values())
    return out


def same_replies(proxy_port: int, server_port: int, proto: int,
                 script: Sequence[list[str]]) -> None:
    """``script`` over fresh ``_keys`` gets the same replies from both, command by command."""
    keys = _keys()
    want = _run(server_port, proto, keys, script)
    got = _run(proxy_port, proto, keys, script)
    for cmd, w, g in zip(script, want, got, strict=True):
        assert g == w, cmd


@pytest.mark.parametrize("proto", [2, 3])
def test_same_replies_as_one_redis_server(slotgate: ManagedProcess,
                                          redis_standalone: ManagedProcess, proto: int) -> None:
    same_replies(slotgate.port, redis_standalone.port, proto, SCRIPT)


def test_blocked_until_a_push_on_either_key(slotgate: ManagedProcess) -> None:
    keys = _keys()
    a, b = keys["a"], keys["b"]
    with RawClient(slotgate.port) as waiter, RawClient(slotgate.port) as pusher:
        for key in (b, a):
            waiter.send("BLPOP", a, b, "10")
            time.sleep(0.3)
            assert waiter.nothing_pending(0.2)
            assert pusher.call("RPUSH", key, "v1") == b":1\r\n"
            assert array_elements(waiter.read(5)) == [b"$%d\r\n%s\r\n" % (len(key), key.encode()),
                                                      b"$2\r\nv1\r\n"]
            # The other master's wait was ended and nothing stayed popped or pushed.
            assert pusher.call("EXISTS", a, b) == b":0\r\n"
        assert waiter.call("PING") == b"+PONG\r\n"


@pytest.mark.parametrize("proto", [2, 3])
def test_timeout_answers_null_in_time(slotgate: ManagedProcess, proto: int) -> None:
    keys = _keys()
    with RawClient(slotgate.port) as c:
        if proto == 3:
            c.call("HELLO", "3")
        started = time.monotonic()
        reply = c.call("BRPOP", keys["a"], keys["b"], "0.5")
        elapsed_s = time.monotonic() - started
        assert reply == (b"_\r\n" if proto == 3 else b"*-1\r\n")
        assert 0.4 <= elapsed_s < 3.0
        started = time.monotonic()
        assert c.call("BZPOPMIN", keys["c"], keys["a"], "0.3")[:2] in (b"_\r", b"*-")
        assert 0.2 <= time.monotonic() - started < 3.0


def test_concurrent_pops_take_each_element_once(slotgate: ManagedProcess) -> None:
    """Four clients blocked on overlapping pairs of four lists (two masters) while two
    producers push 200 distinct elements over the lists: every element is popped exactly
    once, none is left or lost."""
    keys = _keys()
    lists = [keys["a"], keys["b"], keys["c"], keys["s"]]
    produced = [f"e{i}".encode() for i in range(200)]
    popped: list[bytes] = []
    errors: list[bytes] = []
    lock = threading.Lock()

    def consumer(i: int) -> None:
        mine = [lists[i], lists[(i + 1) % 4]]
        with RawClient(slotgate.port) as c:
            for _ in range(400):  # bounded
                reply = c.call("BRPOP" if i % 2 else "BLPOP", *mine, "1.5")
                if reply == b"*-1\r\n":
                    return
                if reply[:1] != b"*":
                    errors.append(reply)
                    return
                with lock:
                    popped.append(array_elements(reply)[1].split(b"\r\n")[1])

    def producer(part: list[bytes], offset: int) -> None:
        with RawClient(slotgate.port) as c:
            for n, elem in enumerate(part):
                c.call("RPUSH", lists[(n + offset) % 4], elem)
                if n % 10 == 0:
                    time.sleep(0.01)

    threads = [threading.Thread(target=consumer, args=(i,)) for i in range(4)]
    threads += [threading.Thread(target=producer, args=(produced[k::2], k)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    with RawClient(slotgate.port) as c:
        left = [c.call("LLEN", key) for key in lists]
    assert left == [b":0\r\n"] * 4
    assert sorted(popped) == sorted(produced)


def test_client_gone_ends_its_waits(slotgate: ManagedProcess) -> None:
    """A client that goes away while blocked over two masters: its waits end there, so a
    later push stays in the list (no node pops it for nobody)."""
    keys = _keys()
    a, b = keys["a"], keys["b"]
    with RawClient(slotgate.port) as waiter:
        waiter.send("BLPOP", a, b, "0")
        time.sleep(0.3)
    time.sleep(0.5)
    with RawClient(slotgate.port) as c:
        assert c.call("RPUSH", a, "v") == b":1\r\n"
        assert c.call("RPUSH", b, "w") == b":1\r\n"
        time.sleep(0.3)
        assert c.call("LLEN", a) == b":1\r\n"
        assert c.call("LLEN", b) == b":1\r\n"
        c.call("DEL", a, b)
