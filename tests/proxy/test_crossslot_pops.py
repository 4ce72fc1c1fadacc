"""LMPOP/ZMPOP, BLMOVE/BRPOPLPUSH and XREAD/XREADGROUP over keys in several slots, through
the proxy (a real cluster, then our nodes), against one standalone redis-server.

Key names carry no hash tag (``tests/proxy/test_blocking_crossslot.py``'s ``_keys``: ``a`` on
the first master, ``b``, ``c``, ``s`` on the last one, every key in a slot of its own).
"""

from __future__ import annotations

import threading
import time

import pytest

from slotgate.proxy.routing.splitter import array_elements
from tests.proxy.test_blocking_crossslot import _keys, same_replies
from tests.support import ManagedProcess, RawClient

SCRIPT: list[list[str]] = [
    # LMPOP / ZMPOP: the first key with data, in key order.
    ["LMPOP", "2", "a", "b", "LEFT"], ["RPUSH", "b", "1", "2", "3"],
    ["LMPOP", "2", "a", "b", "LEFT"], ["LMPOP", "3", "a", "c", "b", "RIGHT", "COUNT", "5"],
    ["RPUSH", "a", "x"], ["RPUSH", "b", "y"], ["LMPOP", "2", "b", "a", "LEFT"],
    ["SET", "s", "v"], ["LMPOP", "3", "c", "s", "a", "LEFT"], ["LMPOP", "2", "a", "s", "LEFT"],
    ["LMPOP", "2", "a", "b", "UP"], ["LMPOP", "2", "a", "b", "LEFT", "COUNT", "0"],
    ["LMPOP", "0", "a", "b", "LEFT"], ["LMPOP", "5", "a", "b", "LEFT"],
    ["ZMPOP", "2", "a", "c", "MIN"], ["ZADD", "c", "1", "m1", "2", "m2", "3", "m3"],
    ["ZMPOP", "3", "a", "b", "c", "MAX", "COUNT", "2"], ["ZMPOP", "2", "s", "c", "MIN"],
    ["ZMPOP", "2", "c", "a", "MIN"], ["ZMPOP", "2", "a", "c", "MIN"],
    ["ZMPOP", "2", "a", "c", "SIDEWAYS"], ["DEL", "a", "b", "c", "s"],
    # BLMOVE / BRPOPLPUSH: source and destination in different slots.
    ["BLMOVE", "a", "b", "LEFT", "RIGHT", "0.1"], ["BRPOPLPUSH", "a", "b", "0.1"],
    ["RPUSH", "a", "1", "2", "3"], ["BLMOVE", "a", "b", "LEFT", "RIGHT", "1"],
    ["BLMOVE", "a", "b", "RIGHT", "LEFT", "1"], ["BRPOPLPUSH", "a", "c", "1"],
    ["LRANGE", "a", "0", "-1"], ["LRANGE", "b", "0", "-1"], ["LRANGE", "c", "0", "-1"],
    ["BLMOVE", "a", "b", "UP", "RIGHT", "1"], ["BLMOVE", "a", "b", "LEFT", "DOWN", "x"],
    ["BLMOVE", "a", "b", "LEFT", "RIGHT", "x"], ["BLMOVE", "a", "b", "LEFT", "RIGHT", "-1"],
    ["BRPOPLPUSH", "a", "b", "x"], ["SET", "s", "v"], ["BLMOVE", "s", "b", "LEFT", "LEFT", "1"],
    ["RPUSH", "a", "z"], ["BLMOVE", "a", "s", "LEFT", "LEFT", "1"], ["LRANGE", "a", "0", "-1"],
    ["BRPOPLPUSH", "b", "s", "1"], ["LLEN", "b"], ["DEL", "a", "b", "c", "s"],
    # XREAD / XREADGROUP: per-stream replies merged in the client's order.
    ["XREAD", "STREAMS", "a", "b", "0", "0"],
    ["XADD", "a", "1-1", "f", "v"], ["XADD", "b", "1-2", "g", "w"], ["XADD", "b", "2-2", "h", "x"],
    ["XREAD", "STREAMS", "b", "a", "0", "0"], ["XREAD", "STREAMS", "a", "b", "a", "0", "0", "0"],
    ["XREAD", "COUNT", "1", "STREAMS", "b", "c", "a", "0", "0", "0"],
    ["XREAD", "STREAMS", "a", "b", "1-1", "0"], ["XREAD", "STREAMS", "a", "b", "$", "$"],
    ["XREAD", "BLOCK", "100", "STREAMS", "a", "b", "$", "1-2"],
    ["XREAD", "BLOCK", "100", "STREAMS", "a", "b", "$", "$"],
    ["XREAD", "BLOCK", "100", "STREAMS", "a", "b", "9-9", "9-9"],
    ["SET", "s", "v"], ["XREAD", "STREAMS", "a", "s", "0", "0"],
    ["XREAD", "STREAMS", "s", "a", "0", "zz"], ["XREAD", "STREAMS", "a", "s", "zz", "0"],
    ["XREAD", "STREAMS", "a", "b", ">", ">"], ["XREAD", "BLOCK", "x", "STREAMS", "a", "b", "0", "0"],
    ["XREAD", "BLOCK", "-1", "STREAMS", "a", "b", "0", "0"],
    ["XREAD", "COUNT", "x", "STREAMS", "a", "b", "0", "0"], ["XREAD", "STREAMS", "a", "b", "0"],
    ["XGROUP", "CREATE", "a", "g", "0"], ["XGROUP", "CREATE", "b", "g", "0"],
    ["XREADGROUP", "GROUP", "g", "c1", "COUNT", "1", "STREAMS", "a", "b", ">", ">"],
    ["XREADGROUP", "GROUP", "g", "c1", "STREAMS", "b", "a", ">", ">"],
    ["XREADGROUP", "GROUP", "g", "c1", "BLOCK", "100", "STREAMS", "b", "a", ">", ">"],
    ["XREADGROUP", "GROUP", "g", "c1", "STREAMS", "a", "b", "0", "0"],
    ["XREADGROUP", "GROUP", "g", "c1", "STREAMS", "a", "c", ">", ">"],
    ["XREADGROUP", "GROUP", "g", "c1", "STREAMS", "a", "b", "$", "$"],
    ["XPENDING", "a", "g"], ["XPENDING", "b", "g"],
]


@pytest.mark.parametrize("proto", [2, 3])
def test_same_replies_as_one_redis_server(slotgate: ManagedProcess,
                                          redis_standalone: ManagedProcess, proto: int) -> None:
    same_replies(slotgate.port, redis_standalone.port, proto, SCRIPT)


def _bulk(value: str) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(value), value.encode())


def test_blmove_waits_for_its_source_then_moves(slotgate: ManagedProcess) -> None:
    """A BLMOVE blocked on an empty source (its destination on another master) moves the
    element pushed later: it is in the destination only, the source stays empty."""
    keys = _keys()
    a, b = keys["a"], keys["b"]
    with RawClient(slotgate.port) as waiter, RawClient(slotgate.port) as pusher:
        waiter.send("BLMOVE", a, b, "RIGHT", "LEFT", "10")
        time.sleep(0.3)
        assert waiter.nothing_pending(0.2)
        assert pusher.call("RPUSH", a, "v1") == b":1\r\n"
        assert waiter.read(5) == _bulk("v1")
        assert pusher.call("LRANGE", b, "0", "-1") == b"*1\r\n" + _bulk("v1")
        assert pusher.call("EXISTS", a) == b":0\r\n"
        started = time.monotonic()
        assert waiter.call("BRPOPLPUSH", a, b, "0.3") == b"*-1\r\n"
        assert 0.2 <= time.monotonic() - started < 3.0
        pusher.call("DEL", a, b)


def test_blocking_moves_take_each_element_once(slotgate: ManagedProcess) -> None:
    """Three BLMOVEs blocked on one source, 60 elements pushed one by one: each element is
    moved once, to the destination of whichever took it; none stays or is doubled."""
    keys = _keys()
    src, dests = keys["a"], [keys["b"], keys["c"], keys["s"]]
    got: list[bytes] = []
    errors: list[bytes] = []
    lock = threading.Lock()

    def mover(dest: str) -> None:
        with RawClient(slotgate.port) as c:
            for _ in range(100):  # bounded
                reply = c.call("BLMOVE", src, dest, "LEFT", "RIGHT", "1.5")
                if reply == b"*-1\r\n":
                    return
                if reply[:1] != b"$":
                    errors.append(reply)
                    return
                with lock:
                    got.append(reply)

    threads = [threading.Thread(target=mover, args=(d,)) for d in dests]
    for t in threads:
        t.start()
    with RawClient(slotgate.port) as c:
        for i in range(60):
            c.call("RPUSH", src, f"e{i}")
            if i % 10 == 0:
                time.sleep(0.02)
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads)
        assert errors == []
        assert sorted(got) == sorted(_bulk(f"e{i}") for i in range(60))
        moved = [array_elements(c.call("LRANGE", d, "0", "-1")) for d in dests]
        assert sorted(x for m in moved for x in m) == sorted(got)
        assert c.call("LLEN", src) == b":0\r\n"
        c.call("DEL", src, *dests)


@pytest.mark.parametrize("proto", [2, 3])
def test_xread_block_wakes_on_either_stream(slotgate: ManagedProcess, proto: int) -> None:
    keys = _keys()
    a, b = keys["a"], keys["b"]
    with RawClient(slotgate.port) as waiter, RawClient(slotgate.port) as writer:
        if proto == 3:
            waiter.call("HELLO", "3")
        writer.call("XADD", a, "1-1", "f", "old")
        for key, entry in ((b, "5-1"), (a, "6-1")):
            waiter.send("XREAD", "BLOCK", "10000", "STREAMS", a, b, "$", "$")
            time.sleep(0.3)
            assert waiter.nothing_pending(0.2)
            writer.call("XADD", key, entry, "f", "new")
            reply = waiter.read(5)
            name = _bulk(key)
            item = b"*1\r\n*2\r\n" + _bulk(entry) + b"*2\r\n" + _bulk("f") + _bulk("new")
            assert reply == (b"%1\r\n" + name + item if proto == 3
                             else b"*1\r\n*2\r\n" + name + item)
        assert waiter.call("PING") == (b"+PONG\r\n")
        writer.call("DEL", a, b)
