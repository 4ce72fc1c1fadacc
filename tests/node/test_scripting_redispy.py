"""Real client code on our node: redis-py's ``Lock`` (Lua scripts for acquire, extend,
release) and ``register_script`` (EVALSHA, NOSCRIPT after SCRIPT FLUSH, healed by EVAL)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.support import ManagedProcess, running, slotgate_node


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagedProcess]:
    proc = slotgate_node(Path(tmp_path_factory.mktemp("redispy")))
    with running(proc):
        yield proc


def test_lock_acquire_extend_release(node: ManagedProcess) -> None:
    r = node.client()
    lock = r.lock("res", timeout=10)
    assert lock.acquire(blocking=False)
    assert not r.lock("res", timeout=10).acquire(blocking=False)
    assert lock.extend(20)
    assert 10_000 < r.pttl("res") <= 30_000
    assert lock.reacquire()
    assert lock.locked() and lock.owned()
    lock.release()
    assert not r.exists("res")
    assert lock.acquire(blocking=False)
    r.set("res", "someone-else")
    with pytest.raises(redis.exceptions.LockNotOwnedError):
        lock.extend(5)  # the extend script sees another token: 0
    with pytest.raises(redis.exceptions.LockNotOwnedError):
        lock.release()  # likewise the release script
    assert r.get("res") == b"someone-else"


def test_lock_under_contention_has_one_holder(node: ManagedProcess) -> None:
    holders = [0]
    worst = [0]
    guard = threading.Lock()
    errors: list[BaseException] = []

    def worker() -> None:
        r = node.client()
        try:
            for _ in range(20):
                with r.lock("contended", timeout=5, blocking_timeout=10, sleep=0.001):
                    with guard:
                        holders[0] += 1
                        worst[0] = max(worst[0], holders[0])
                    with guard:
                        holders[0] -= 1
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert worst[0] == 1


def test_register_script_survives_script_flush(node: ManagedProcess) -> None:
    r = node.client()
    bump = r.register_script(
        "local n = redis.call('incrby', KEYS[1], ARGV[1]) "
        "if n > tonumber(ARGV[2]) then return {err='LIMIT over ' .. ARGV[2]} end return n")
    assert bump(keys=["ctr"], args=[2, 10]) == 2
    assert r.script_exists(bump.sha) == [True]
    r.script_flush()
    assert r.script_exists(bump.sha) == [False]
    with pytest.raises(redis.exceptions.NoScriptError):
        r.evalsha(bump.sha, 1, "ctr", 1, 10)
    assert bump(keys=["ctr"], args=[3, 10]) == 5  # NOSCRIPT, then EVAL: loaded again
    assert r.script_exists(bump.sha) == [True]
    with pytest.raises(redis.exceptions.ResponseError, match="LIMIT over 10"):
        bump(keys=["ctr"], args=[20, 10])
    pipe = r.pipeline()
    bump(keys=["ctr"], args=[1, 100], client=pipe)
    pipe.get("ctr")
    assert pipe.execute() == [26, b"26"]
