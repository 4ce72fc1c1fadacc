"""Moves across slots with ``--workers 2``: the lock on a moved key holds across the worker
processes (``proxy/routing/movelock.py``), against a real redis-server cluster."""

from __future__ import annotations

import random
import threading
import uuid
from collections.abc import Iterator

import pytest

from slotgate.protocol.slots import key_slot
from slotgate.proxy.routing.movelock import LOCK_TTL_MS, lock_key
from slotgate.proxy.routing.splitter import array_elements
from tests.proxy.test_workers import start_workers
from tests.support import ManagedProcess, RawClient


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory,
            real_cluster: list[ManagedProcess]) -> Iterator[ManagedProcess]:
    proxy, _ = start_workers(tmp_path_factory.mktemp("workers-moves"),
                             [n.port for n in real_cluster[:2]])
    try:
        yield proxy
    finally:
        proxy.stop()


def _two_slots(prefix: str) -> tuple[str, str]:
    a = f"{prefix}a"
    i = 0
    while key_slot(f"{prefix}b{i}".encode()) == key_slot(a.encode()):
        i += 1
    return a, f"{prefix}b{i}"


def test_a_move_waits_while_another_process_holds_its_key(workers: ManagedProcess) -> None:
    """The lock key of the source, held as another worker would hold it: the move waits
    until it is gone, then runs."""
    src, dst = _two_slots(f"wl{uuid.uuid4().hex[:6]}")
    lock = lock_key(src.encode())
    with RawClient(workers.port) as c, RawClient(workers.port) as mover:
        assert c.call("RPUSH", src, "e1") == b":1\r\n"
        assert c.call("SET", lock, "other", "PX", str(LOCK_TTL_MS)) == b"+OK\r\n"
        mover.send("LMOVE", src, dst, "LEFT", "RIGHT")
        assert mover.nothing_pending(0.5)
        assert c.call("DEL", lock) == b":1\r\n"
        assert mover.read(10) == b"$2\r\ne1\r\n"
        assert c.call("LRANGE", dst, "0", "-1") == b"*1\r\n$2\r\ne1\r\n"
        # The move's own lock is gone with it.
        assert c.call("EXISTS", lock, lock_key(dst.encode())) == b":0\r\n"
        c.call("DEL", src, dst)


def test_concurrent_moves_over_two_workers_lose_and_duplicate_nothing(
        workers: ManagedProcess) -> None:
    """Six clients (spread over both workers) move elements at random between 12 lists on
    every master: every element is found exactly once at the end, and no move failed."""
    prefix = f"wsoak{uuid.uuid4().hex[:6]}:"
    lists = [f"{prefix}{i}" for i in range(12)]
    start = [f"e{i}".encode() for i in range(120)]
    with RawClient(workers.port) as c:
        c.pipeline([["RPUSH", lists[i], *start[i::12]] for i in range(12)])
    errors: list[bytes] = []

    def mover(seed: int) -> None:
        rng = random.Random(seed)
        with RawClient(workers.port) as c:
            for _ in range(60):
                src, dst = rng.sample(lists, 2)
                reply = c.call("LMOVE", src, dst, rng.choice(["LEFT", "RIGHT"]), "RIGHT")
                if reply[:1] not in (b"$", b"_"):
                    errors.append(reply)

    threads = [threading.Thread(target=mover, args=(seed,)) for seed in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    with RawClient(workers.port) as c:
        found = [e for raw in c.pipeline([["LRANGE", k, "0", "-1"] for k in lists])
                 for e in array_elements(raw)]
        assert c.call("KEYS", f"*slotgate-lock:{prefix}*") == b"*0\r\n"
        c.call("DEL", *lists)
    assert sorted(found) == sorted(b"$%d\r\n%s\r\n" % (len(e), e) for e in start)
