"""Moves across slots with ``--workers 2``: the lock on a moved key holds across the worker
processes (``proxy/routing/movelock.py``), against a real redis-server cluster."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from slotgate.protocol.slots import key_slot
from slotgate.proxy.routing.movelock import LOCK_TTL_MS, lock_key
from tests.proxy.test_crossslot import concurrent_moves
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
    """Six clients (spread over both workers) make 360 random moves between 12 lists on
    every master: every element is found exactly once at the end, and no move failed."""
    concurrent_moves(workers.port, n_lists=12, n_elements=120, n_clients=6, moves_each=60)
