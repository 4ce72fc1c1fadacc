"""The invalidations a proxy's waiting pop relies on (proxy/routing/keywake.py), against
redis-server 7.0.15: a RESP3 connection with ``CLIENT TRACKING ON`` reads the waited keys
with ``EXISTS`` (one key missing, a sorted set and a list in one command), then another
client changes them in each way that can give a sorted set or a list an element (and a few
that change nothing). Both servers must send the same pushes at the same points: every
frame the tracking connection receives up to its next reply is compared."""

from __future__ import annotations

import shlex

from tests.node.diff import Pair
from tests.support import RawClient

RESTORE = ("\"local d = redis.call('DUMP', KEYS[2]) redis.call('DEL', KEYS[1]) "
           "return redis.call('RESTORE', KEYS[1], 0, d)\"")
SETUP = ["w ZADD z 1 a", "w ZADD src 5 e 6 f", "w RPUSH l x", "w RPUSH srcl y"]
CHANGES = {
    "zadd new key": ["w ZADD none 1 m"],
    "zadd": ["w ZADD z 2 b"],
    "zadd no change": ["w ZADD z 1 a", "w ZADD z XX 3 nosuch", "w ZADD z NX 9 a"],
    "zincrby": ["w ZINCRBY z 1 a"],
    "zincrby new key": ["w ZINCRBY none 1 m"],
    "zunionstore into": ["w ZUNIONSTORE none 2 z src"],
    "zinterstore empty": ["w ZINTERSTORE none 2 z src"],
    "zrangestore into": ["w ZRANGESTORE none src 0 -1"],
    "rename onto": ["w RENAME src none"],
    "copy onto": ["w COPY src z REPLACE"],
    "restore by script": [f"w EVAL {RESTORE} 2 none src"],
    "restore replace": [f"w EVAL {RESTORE} 2 z src"],
    "multi exec": ["w MULTI", "w ZADD none 1 m", "w ZADD z 4 d", "w EXEC"],
    "script zadd": ["w EVAL \"return redis.call('zadd', KEYS[1], 1, 'm')\" 1 none"],
    "zpopmin": ["w ZPOPMIN z"],
    "bzpopmin other client": ["w BZPOPMIN z 1"],
    "lpush": ["w LPUSH l v"],
    "lmove into": ["w LMOVE srcl none RIGHT LEFT"],
    "blmove into": ["w BLMOVE srcl l RIGHT LEFT 1"],
    "expire": ["w PEXPIRE z 100000"],
    "rpushx missing": ["w RPUSHX none v"],
    "read only": ["w ZCARD z", "w EXISTS none"],
}

# Steps of a change: "w ..." another client's command; "t ..." the tracking connection's.
CHANGES["read again"] = ["w ZADD z 2 b", "t PING", "w ZADD z 3 c", "t PING", "t EXISTS z",
                         "w ZADD z 4 d"]
WAITED = ["none", "z", "l", "src", "srcl"]


def _until_reply(t: RawClient) -> list[bytes]:
    """Every push, then the reply that follows them."""
    got = [t.read(5)]
    while got[-1][:1] == b">":
        got.append(t.read(5))
    return got


def _run(port: int) -> list[tuple[str, str, list[bytes]]]:
    seen: list[tuple[str, str, list[bytes]]] = []
    with RawClient(port) as w, RawClient(port) as t:
        w.call("FLUSHALL")
        t.call("HELLO", "3")
        t.call("CLIENT", "TRACKING", "ON")
        for name, steps in CHANGES.items():
            w.call("DEL", *WAITED)
            for step in SETUP:
                w.call(*shlex.split(step)[1:])
            t.send("PING")
            _until_reply(t)  # what the setup invalidated
            t.send("EXISTS", "none")
            seen.append((name, "arm", _until_reply(t)))
            t.send("EXISTS", "z", "l")
            seen.append((name, "arm", _until_reply(t)))
            for step in [*steps, "t PING"]:
                who, *argv = shlex.split(step)
                if who == "w":
                    seen.append((name, step, [w.call(*argv)]))
                else:
                    t.send(*argv)
                    seen.append((name, step, _until_reply(t)))
    return seen


def test_waited_keys_are_invalidated(diff_pair: Pair) -> None:
    real, ours = _run(diff_pair.real_port), _run(diff_pair.ours_port)
    assert [x for x in ours if x not in real] == []
    assert ours == real
