"""Real client code using Lua scripts, through the proxy, in front of a real Redis cluster and in
front of our bundled nodes (``cluster_backend`` runs every test once per backend).

Fifty redis-py clients, each a thread with a connection of its own to the proxy: ``Lock``
(acquire/extend/release under contention, never two holders), a ``register_script`` object
across ``SCRIPT FLUSH`` (EVALSHA, NOSCRIPT, healed), and a token-bucket rate limiter whose
totals follow a fixed schedule. Every backend's results must equal the same expected values
(computed here), so the two backends give equal results.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable

import pytest
import redis
from redis.lock import Lock

from slotgate.protocol.slots import key_slot
from tests.conftest import ClusterBackend
from tests.support import ManagedProcess, RawClient

CLIENTS = 50
DEADLINE_S = 90.0


@pytest.fixture
def prefix() -> str:
    return f"s{uuid.uuid4().hex[:8]}:"


def run_clients(proxy: ManagedProcess, body: Callable[[redis.Redis, int], None]) -> None:
    """``body(client, index)`` in CLIENTS threads, each with its own redis-py client; the first
    error of any thread is raised here."""
    errors: list[BaseException] = []

    def one(i: int) -> None:
        r = proxy.client(socket_timeout=30)
        try:
            body(r, i)
        except BaseException as e:  # noqa: BLE001 - reported to the test's thread
            errors.append(e)
        finally:
            r.close()

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE_S)
    assert not any(t.is_alive() for t in threads), "clients still running after the deadline"
    if errors:
        raise errors[0]


def masters_of(backend: ClusterBackend) -> list[ManagedProcess]:
    return [n for n in backend.nodes if n.client().info("replication")["role"] == "master"]


# --- redis-py Lock ---------------------------------------------------------------------------

LOCKS = 4
ROUNDS_PER_CLIENT = 3


def test_lock_never_has_two_holders(slotgate: ManagedProcess, prefix: str) -> None:
    names = [f"{prefix}lock{i}" for i in range(LOCKS)]
    assert len({key_slot(n.encode()) for n in names}) == LOCKS
    holders = [0] * LOCKS
    guard = threading.Lock()
    acquired = [0] * LOCKS
    overlaps: list[str] = []

    def body(r: redis.Redis, i: int) -> None:
        for n in range(ROUNDS_PER_CLIENT):
            which = (i + n) % LOCKS
            lock = Lock(r, names[which], timeout=10, sleep=0.005, blocking_timeout=60)
            assert lock.acquire(), f"client {i} never got {names[which]}"
            with guard:
                holders[which] += 1
                if holders[which] != 1:
                    overlaps.append(f"{names[which]}: {holders[which]} holders")
                acquired[which] += 1
            # Redis-side proof: an increment of a key in the lock's slot, read back unchanged.
            count_key = f"{{{names[which]}}}:count"
            before = r.incr(count_key)
            assert lock.extend(5)
            assert lock.reacquire()
            assert r.get(count_key) == str(before).encode()
            with guard:
                holders[which] -= 1
            lock.release()

    run_clients(slotgate, body)
    assert overlaps == []
    assert sum(acquired) == CLIENTS * ROUNDS_PER_CLIENT
    r = slotgate.client()
    counts = [int(r.get(f"{{{n}}}:count") or 0) for n in names]
    assert counts == acquired
    assert r.exists(*names) == 0  # every lock released
    # A lock taken by another token cannot be released or extended by this one.
    held = Lock(r, names[0], timeout=10)
    assert held.acquire(blocking=False)
    other = Lock(r, names[0], timeout=10)
    assert not other.acquire(blocking=False)
    other.local.token = b"not-the-owner"
    with pytest.raises(redis.exceptions.LockNotOwnedError):
        other.release()
    other.local.token = b"not-the-owner"  # release() forgot it
    with pytest.raises(redis.exceptions.LockNotOwnedError):
        other.extend(1)
    held.release()
    r.delete(*[f"{{{n}}}:count" for n in names])


# --- register_script across SCRIPT FLUSH -----------------------------------------------------

ADD_SCRIPT = "return redis.call('INCRBY', KEYS[1], ARGV[1])"
CALLS_PER_CLIENT = 4


def test_registered_script_heals_after_script_flush(slotgate: ManagedProcess,
                                                     cluster_backend: ClusterBackend,
                                                     prefix: str) -> None:
    r = slotgate.client()
    add = r.register_script(ADD_SCRIPT)
    keys = [f"{prefix}k{i}" for i in range(10)]  # several slots, several masters
    masters = masters_of(cluster_backend)

    def body(c: redis.Redis, i: int) -> None:
        for n in range(CALLS_PER_CLIENT):
            add(keys=[keys[(i + n) % len(keys)]], args=[1], client=c)

    run_clients(slotgate, body)
    assert sum(int(v) for v in r.mget(keys)) == CLIENTS * CALLS_PER_CLIENT
    assert r.script_exists(add.sha) == [True]

    assert r.script_flush() is True  # through the proxy: every master
    assert r.script_exists(add.sha) == [False]
    assert all(m.client().script_exists(add.sha) == [False] for m in masters)
    raw = RawClient(slotgate.port)
    try:
        # NOSCRIPT passes through verbatim, then EVAL runs (and caches) the script.
        assert raw.call("EVALSHA", add.sha, "1", keys[0], "1") == (
            b"-NOSCRIPT No matching script. Please use EVAL.\r\n")
        assert raw.call("EVAL", ADD_SCRIPT, "1", keys[0], "1") == b":%d\r\n" % (
            CLIENTS * CALLS_PER_CLIENT // len(keys) + 1)
        assert raw.call("EVALSHA", add.sha, "1", keys[0], "-1") == b":%d\r\n" % (
            CLIENTS * CALLS_PER_CLIENT // len(keys))
    finally:
        raw.close()

    run_clients(slotgate, body)  # redis-py: NOSCRIPT -> SCRIPT LOAD -> EVALSHA, all clients
    assert sum(int(v) for v in r.mget(keys)) == 2 * CLIENTS * CALLS_PER_CLIENT
    assert all(m.client().script_exists(add.sha) == [True] for m in masters)
    # A keyless call goes to one master; the script is there after the fan-out SCRIPT LOAD.
    assert r.evalsha(r.script_load("return 7"), 0) == 7
    r.delete(*keys)


# --- token-bucket rate limiter ---------------------------------------------------------------

# KEYS[1] tokens, KEYS[2] last refill (ms); ARGV capacity, tokens per second, now (ms).
# Integer arithmetic only; "now" is an argument, so replies do not depend on wall time.
BUCKET_SCRIPT = """
local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local tokens = tonumber(redis.call('GET', KEYS[1]) or capacity)
local last = tonumber(redis.call('GET', KEYS[2]) or now)
if now > last then
  tokens = math.min(capacity, tokens + math.floor((now - last) * rate / 1000))
  last = now
end
local allowed = 0
if tokens >= 1 then
  tokens = tokens - 1
  allowed = 1
end
redis.call('SET', KEYS[1], tokens)
redis.call('SET', KEYS[2], last)
return allowed
"""
BUCKETS = 5
CAPACITY = 7
RATE_PER_S = 3
# Every client sends DEMAND[round] requests per bucket at ROUND_MS[round]; rounds are fenced
# by a barrier, so within a round only the count matters, never the order.
ROUND_MS = [1_000, 1_000, 1_500, 3_000, 3_100, 10_000]
DEMAND = [1, 0, 1, 2, 1, 1]


def bucket_model() -> tuple[int, int]:
    """(allowed, denied) over all buckets for the schedule, computed without a server."""
    allowed = denied = 0
    for _ in range(BUCKETS):
        tokens, last = CAPACITY, ROUND_MS[0]
        for now, demand in zip(ROUND_MS, DEMAND, strict=True):
            if now > last:
                tokens = min(CAPACITY, tokens + (now - last) * RATE_PER_S // 1000)
                last = now
            want = demand * CLIENTS
            got = min(tokens, want)
            tokens -= got
            allowed += got
            denied += want - got
    return allowed, denied


def test_token_bucket_totals_follow_the_schedule(slotgate: ManagedProcess,
                                                 prefix: str) -> None:
    r = slotgate.client()
    limiter = r.register_script(BUCKET_SCRIPT)
    buckets = [(f"{{{prefix}b{i}}}:tokens", f"{{{prefix}b{i}}}:ts") for i in range(BUCKETS)]
    assert len({key_slot(k.encode()) for k, _ in buckets}) > 1
    fence = threading.Barrier(CLIENTS, timeout=DEADLINE_S)
    results: list[list[int]] = [[] for _ in range(CLIENTS)]

    def body(c: redis.Redis, i: int) -> None:
        for now, demand in zip(ROUND_MS, DEMAND, strict=True):
            fence.wait()
            for _ in range(demand):
                for b in range(BUCKETS):
                    k = buckets[(i + b) % BUCKETS]
                    results[i].append(int(limiter(keys=list(k),
                                                  args=[CAPACITY, RATE_PER_S, now], client=c)))

    started = time.monotonic()
    run_clients(slotgate, body)
    assert time.monotonic() - started < DEADLINE_S
    flat = [x for per in results for x in per]
    assert (flat.count(1), flat.count(0)) == bucket_model() == (95, 1405)
    r.delete(*[k for pair in buckets for k in pair])


# --- functions through the proxy -------------------------------------------------------------

def test_function_load_reaches_every_master_and_fcall_routes_by_key(
        slotgate: ManagedProcess, cluster_backend: ClusterBackend, prefix: str) -> None:
    lib = prefix.rstrip(":")
    code = (f"#!lua name={lib}\n"
            f"redis.register_function('bump_{lib}', function(keys, args) "
            "return redis.call('INCRBY', keys[1], args[1]) end)")
    r = slotgate.client()
    assert r.function_load(code) == lib.encode()
    try:
        for m in masters_of(cluster_backend):
            assert [x[b"library_name"] if isinstance(x, dict) else x[1]
                    for x in m.client().function_list(library=lib)] == [lib.encode()]
        keys = [f"{prefix}f{i}" for i in range(10)]

        def body(c: redis.Redis, i: int) -> None:
            for k in keys:
                c.fcall(f"bump_{lib}", 1, k, 2)

        run_clients(slotgate, body)
        assert [int(v) for v in r.mget(keys)] == [2 * CLIENTS] * len(keys)
        r.delete(*keys)
    finally:
        assert r.function_delete(lib) is True
