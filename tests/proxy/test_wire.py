"""Byte-level behaviour: the proxy's replies compared with one standalone real redis-server,
and bad input (which must cost only the offending connection)."""

from __future__ import annotations

import random
import socket
import struct
import threading
import uuid

import pytest

from protocol.resp import encode_command
from tests.proxy.rawclient import RawClient
from tests.support import ManagedProcess


def mixed_commands(prefix: str, n: int, seed: int) -> list[list[bytes]]:
    """Deterministic commands whose replies depend only on the data (no random/time/ids)."""
    rng = random.Random(seed)
    strings = [f"{prefix}s{i}" for i in range(24)]
    hashes = [f"{prefix}h{i}" for i in range(4)]
    lists = [f"{prefix}l{i}" for i in range(4)]
    sets = [f"{prefix}set{i}" for i in range(4)]
    zsets = [f"{prefix}z{i}" for i in range(4)]
    everything = strings + hashes + lists + sets + zsets

    def some(keys: list[str], lo: int, hi: int) -> list[str]:
        return rng.sample(keys, rng.randint(lo, hi))

    templates = [
        lambda: ["SET", rng.choice(strings), str(rng.randint(0, 50))],
        lambda: ["GET", rng.choice(strings)],
        lambda: ["INCR", rng.choice(strings)],
        lambda: ["INCRBYFLOAT", rng.choice(strings), "1.5"],
        lambda: ["APPEND", rng.choice(strings), "x"],
        lambda: ["STRLEN", rng.choice(strings)],
        lambda: ["SETNX", rng.choice(strings), "n"],
        lambda: ["MGET", *some(strings, 2, 10)],
        lambda: ["MSET", *[a for k in some(strings, 1, 6) for a in (k, str(rng.randint(0, 9)))]],
        lambda: ["DEL", *some(everything, 1, 4)],
        lambda: ["EXISTS", *some(everything, 1, 6)],
        lambda: ["TOUCH", *some(everything, 1, 3)],
        lambda: ["UNLINK", *some(strings, 1, 3)],
        lambda: ["HSET", rng.choice(hashes), f"f{rng.randint(0, 5)}", str(rng.randint(0, 9))],
        lambda: ["HGETALL", rng.choice(hashes)],
        lambda: ["HINCRBYFLOAT", rng.choice(hashes), "f1", "0.25"],
        lambda: ["RPUSH", rng.choice(lists), str(rng.randint(0, 9))],
        lambda: ["LRANGE", rng.choice(lists), "0", "-1"],
        lambda: ["LPOP", rng.choice(lists)],
        lambda: ["SADD", rng.choice(sets), str(rng.randint(0, 20))],
        lambda: ["SMEMBERS", rng.choice(sets)],
        lambda: ["ZADD", rng.choice(zsets), str(rng.randint(0, 9) / 4), f"m{rng.randint(0, 5)}"],
        lambda: ["ZRANGE", rng.choice(zsets), "0", "-1", "WITHSCORES"],
        lambda: ["ZSCORE", rng.choice(zsets), f"m{rng.randint(0, 5)}"],
        lambda: ["LPUSH", rng.choice(strings), "wrongtype"],
        lambda: ["GET", rng.choice(hashes)],
        lambda: ["PING"],
        lambda: ["ECHO", "hello"],
        lambda: ["NOSUCHCMD", "x"],
        lambda: ["GET"],
        lambda: ["EXPIRE", rng.choice(everything), "1000"],
        lambda: ["PERSIST", rng.choice(everything)],
        lambda: ["TYPE", rng.choice(everything)],
    ]
    return [[a.encode() for a in rng.choice(templates)()] for _ in range(n)]


@pytest.mark.parametrize("protocol", [2, 3])
def test_pipeline_of_1000_mixed_commands_is_byte_identical_to_standalone(
    slotgate: ManagedProcess, redis_standalone: ManagedProcess, protocol: int
) -> None:
    prefix = f"p{uuid.uuid4().hex[:8]}:"
    commands = mixed_commands(prefix, 1000, seed=protocol)
    assert sum(1 for c in commands if c[0] in (b"MGET", b"MSET", b"DEL", b"EXISTS")) > 80
    replies = []
    for server in (slotgate, redis_standalone):
        with RawClient(server.port) as c:
            if protocol == 3:
                c.call("HELLO", "3")  # replies differ by client id; not compared
            replies.append(c.pipeline(commands))
    for i, (got, want) in enumerate(zip(*replies, strict=True)):
        assert got == want, f"command {i} {commands[i]!r}"
    assert any(r.startswith(b"-WRONGTYPE") for r in replies[0])


def read_all_until_closed(port: int, data: bytes) -> bytes:
    with RawClient(port) as c:
        c.send(data)
        return c.read_until_closed()


@pytest.mark.parametrize("bad", [
    b"*1\r\n$x\r\n",
    b"*1\r\n$600000000\r\n",
    b"*3000000000\r\n",
    b"*1\r\nfoo\r\n",
    b'SET a "unbalanced\r\n',
    b"PING\r\n*1\r\n$4\r\nPING\r\n*1\r\n$-5\r\n",
])
def test_bad_input_gets_redis_error_and_close(
    slotgate: ManagedProcess, redis_standalone: ManagedProcess, bad: bytes
) -> None:
    want = read_all_until_closed(redis_standalone.port, bad)
    assert want.startswith((b"+", b"-"))  # the oracle did answer something
    assert read_all_until_closed(slotgate.port, bad) == want


def test_inline_commands(slotgate: ManagedProcess, redis_standalone: ManagedProcess) -> None:
    data = b'PING\r\nECHO "a b"\r\n\r\nSET inline:k \'v 1\'\r\nGET inline:k\r\nDEL inline:k\r\n'
    got = []
    for server in (slotgate, redis_standalone):
        with RawClient(server.port) as c:
            c.send(data)
            got.append(c.read_frames(5))
    assert got[0] == got[1]
    assert got[0][3] == b"$3\r\nv 1\r\n"


def test_client_vanishing_mid_pipeline_does_not_affect_others(
    slotgate: ManagedProcess,
) -> None:
    prefix = f"v{uuid.uuid4().hex[:8]}:"
    errors: list[BaseException] = []
    stop = threading.Event()

    def steady_client() -> None:
        try:
            with RawClient(slotgate.port) as c:
                i = 0
                while not stop.is_set():
                    assert c.call("SET", f"{prefix}steady{i}", str(i)) == b"+OK\r\n"
                    assert c.call("GET", f"{prefix}steady{i}") == b"$%d\r\n%d\r\n" % (
                        len(str(i)), i)
                    i += 1
        except BaseException as exc:  # reported to the test thread below
            errors.append(exc)

    t = threading.Thread(target=steady_client)
    t.start()
    try:
        big = b"".join(encode_command("MGET", *[f"{prefix}{j}" for j in range(i, i + 50)])
                       for i in range(2000))
        for _ in range(5):
            s = socket.create_connection(("127.0.0.1", slotgate.port))
            s.sendall(big)
            # Reset (RST) instead of a clean close: the harshest way to vanish.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
            half = socket.create_connection(("127.0.0.1", slotgate.port))
            half.sendall(b"*3\r\n$3\r\nSET\r\n$1\r\na\r\n$100\r\nabc")  # mid-request
            half.close()
    finally:
        stop.set()
        t.join(30)
    assert not errors, errors
    assert slotgate.alive()
    with RawClient(slotgate.port) as c:
        assert c.call("PING") == b"+PONG\r\n"
