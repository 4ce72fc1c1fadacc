"""Byte-level behaviour: the proxy's replies compared with one standalone real redis-server,
and bad input (which must cost only the offending connection)."""

from __future__ import annotations

import random
import resource
import socket
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from slotgate.protocol.resp import encode_command
from tests.conftest import ClusterBackend
from tests.support import ManagedProcess, RawClient, during, slotgate_proxy, wait_until


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
        c.send_raw(data)
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
            c.send_raw(data)
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
    base = rss_bytes(slotgate.pid)
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
    grown = rss_bytes(slotgate.pid) - base
    print(f"RSS growth after 5 clients vanished mid-pipeline: {grown / MB:.1f} MB")
    assert grown < 200 * MB


# --- resources: a client's bad or greedy behaviour costs bounded memory and nobody's time -----

def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid`` from /proc/<pid>/status."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


MB = 1024 * 1024


@pytest.fixture
def lone_proxy(cluster_backend: ClusterBackend, tmp_path: Path) -> Iterator[ManagedProcess]:
    """A proxy of the test's own (its memory is measured), with room for many connections."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = min(hard, 16384) if hard != resource.RLIM_INFINITY else 16384
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))  # the proxy inherits it
    proc = slotgate_proxy(tmp_path, cluster_backend.ports[:2]).start()
    try:
        with RawClient(proc.port) as c:  # warm: slot map loaded, node connections open
            assert c.call("MSET", "warm:a", "1", "warm:b", "2") == b"+OK\r\n"
        yield proc
    finally:
        proc.stop()


class Prober:
    """Another client, PINGing in a loop: its worst round trip shows whether anyone stalled."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.worst_s = 0.0
        self.rounds = 0
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        try:
            with RawClient(self.port) as c:
                while not self._stop.is_set():
                    t = time.monotonic()
                    assert c.call("PING") == b"+PONG\r\n"
                    self.worst_s = max(self.worst_s, time.monotonic() - t)
                    self.rounds += 1
                    self._stop.wait(0.005)
        except BaseException as exc:  # reported by the test
            self.errors.append(exc)

    def __enter__(self) -> Prober:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def check(self, max_round_trip_s: float = 1.0) -> None:
        assert not self.errors, self.errors
        assert self.rounds > 0
        assert self.worst_s < max_round_trip_s, f"a PING took {self.worst_s:.2f}s"


def test_huge_element_count_costs_no_time(slotgate: ManagedProcess) -> None:
    """'*2000000000' is a legal count (Redis waits for the arguments); '*3000000000' is over
    INT_MAX (error and close). Neither may hold up the proxy: a reader that allocated the
    count up front took seconds to free it, during which no client was served."""
    with Prober(slotgate.port) as prober:
        started = time.monotonic()
        with RawClient(slotgate.port) as waiting, RawClient(slotgate.port) as refused:
            waiting.send_raw(b"*2000000000\r\n$4\r\nPING\r\n")
            refused.send_raw(b"*3000000000\r\n")
            assert refused.read_until_closed() == b"-ERR Protocol error: invalid multibulk length\r\n"
            assert time.monotonic() - started < 1.0
            time.sleep(0.3)  # the scenario: a while later, still neither reply nor close
            waiting.sock.setblocking(False)
            with pytest.raises(BlockingIOError):  # no reply, no close: it waits, as Redis does
                waiting.sock.recv(100)
    prober.check(max_round_trip_s=0.5)


def test_600mb_bulk_header_refused_and_500mb_header_not_preallocated(
    lone_proxy: ManagedProcess, redis_standalone: ManagedProcess
) -> None:
    over = b"*2\r\n$3\r\nGET\r\n$600000000\r\n"
    want = read_all_until_closed(redis_standalone.port, over)
    assert want == b"-ERR Protocol error: invalid bulk length\r\n"
    assert read_all_until_closed(lone_proxy.port, over) == want
    # Within the 512 MB limit: the proxy keeps what arrives, not what is announced.
    base = rss_bytes(lone_proxy.pid)
    clients = []
    with Prober(lone_proxy.port) as prober:
        for _ in range(4):
            c = RawClient(lone_proxy.port)
            c.send_raw(b"*3\r\n$3\r\nSET\r\n$6\r\nbig:k1\r\n$500000000\r\n" + b"x" * MB)
            clients.append(c)
        time.sleep(0.5)  # the proxy takes in what they sent (nothing shows when it is done)
        grown = rss_bytes(lone_proxy.pid) - base
        for c in clients:
            c.close()
    prober.check()
    print(f"RSS growth with 4 clients announcing 500 MB arguments: {grown / MB:.1f} MB")
    assert grown < 100 * MB
    assert lone_proxy.client().exists("big:k1") == 0


def test_5000_idle_connections(lone_proxy: ManagedProcess) -> None:
    count = 5000
    base = rss_bytes(lone_proxy.pid)
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            socks.append(socket.create_connection(("127.0.0.1", lone_proxy.port), timeout=10))
        r = lone_proxy.client(socket_timeout=10)
        wait_until(lambda: r.info("proxy")["proxy_connected_clients"] >= count + 1, 30,
                   lambda: f"{count + 1} clients: {r.info('proxy')['proxy_connected_clients']}")
        grown = rss_bytes(lone_proxy.pid) - base
        with Prober(lone_proxy.port) as prober:
            # Idle ones still work, every 250th asked.
            for s in socks[::250]:
                s.sendall(b"PING\r\n")
                assert s.recv(100) == b"+PONG\r\n"
            r.set("idle:k", "v")
            assert r.get("idle:k") == b"v"
        prober.check()
    finally:
        for s in socks:
            s.close()
    print(f"RSS growth for {count} idle connections: {grown / MB:.1f} MB")
    assert grown < 200 * MB
    wait_until(lambda: r.info("proxy")["proxy_connected_clients"] <= 1, 30,
               "closed connections no longer counted")
    assert r.delete("idle:k") == 1


def test_client_pipelining_without_reading_is_held_back(lone_proxy: ManagedProcess) -> None:
    """A client that sends GETs of a 16 KB value and never reads: the proxy stops reading it
    (max_pipeline_depth), so its memory stays bounded however much the client asks for."""
    value_bytes = 16 * 1024
    r = lone_proxy.client(socket_timeout=10)
    r.set("greedy:v", b"v" * value_bytes)
    request = encode_command("GET", "greedy:v")
    chunk = request * 2000
    base = rss_bytes(lone_proxy.pid)
    greedy = socket.create_connection(("127.0.0.1", lone_proxy.port))
    greedy.setblocking(False)
    sent = 0
    with Prober(lone_proxy.port) as prober:
        stalled_since = None
        for _ in during(20, interval_s=0):
            try:
                sent += greedy.send(chunk)
                stalled_since = None
            except BlockingIOError:
                # Nobody reads any more: the proxy holds back, kernel buffers are full.
                stalled_since = stalled_since or time.monotonic()
                if time.monotonic() - stalled_since > 1.0:
                    break
                time.sleep(0.01)  # send again shortly: the 1 s of stall is the scenario
        peak = rss_bytes(lone_proxy.pid) - base
        greedy.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        greedy.close()
        assert r.get("greedy:v") == b"v" * value_bytes
    prober.check()
    asked_bytes = sent // len(request) * value_bytes
    print(f"greedy client asked for {asked_bytes / MB:.0f} MB of replies; "
          f"proxy RSS growth {peak / MB:.1f} MB")
    assert stalled_since is not None, "the proxy never stopped reading the greedy client"
    assert asked_bytes > 500 * MB
    assert peak < 200 * MB
    assert r.delete("greedy:v") == 1
