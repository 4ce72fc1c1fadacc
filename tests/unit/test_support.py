"""The tests' own building blocks (tests/support.py): the raw client against a real
redis-server, the waits, and the node-plus-redis-server pair."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.support import (
    REDIS_SERVER,
    ManagedProcess,
    RawClient,
    blocked_clients,
    during,
    in_tree,
    node_and_redis,
    pid_alive,
    slotgate_node,
    slotgate_proxy,
    wait_blocked,
    wait_until,
)


# -- the raw client ------------------------------------------------------------------------------
def test_raw_client_returns_reply_frames_as_sent(redis_standalone: ManagedProcess) -> None:
    with RawClient(redis_standalone.port) as c:
        assert c.call("SET", "support:k", b"a\r\nb") == b"+OK\r\n"
        assert c.call("GET", "support:k") == b"$4\r\na\r\nb\r\n"
        assert c.pipeline([["INCR", "support:n"], ["INCRBYFLOAT", "support:n", 0.5],
                           ["GET", "nope:support"]]) == [b":1\r\n", b"$3\r\n1.5\r\n", b"$-1\r\n"]
        assert c.call_frames("SUBSCRIBE", "support:a", "support:b", frames=2) == [
            b"*3\r\n$9\r\nsubscribe\r\n$9\r\nsupport:a\r\n:1\r\n",
            b"*3\r\n$9\r\nsubscribe\r\n$9\r\nsupport:b\r\n:2\r\n"]
        assert c.nothing_pending()
        c.send("PING")
        assert not c.nothing_pending(wait_s=5)
        assert c.read() == b"*2\r\n$4\r\npong\r\n$0\r\n\r\n"  # PING while subscribed
        c.send_raw(b"RESET\r\nQUIT\r\n")
        assert c.read_until_closed() == b"+RESET\r\n+OK\r\n"
    with RawClient(redis_standalone.port) as c:
        assert c.call("DEL", "support:k", "support:n") == b":2\r\n"


def test_raw_client_read_times_out(redis_standalone: ManagedProcess) -> None:
    with RawClient(redis_standalone.port) as c:
        c.send("BLPOP", "support:never", "0")
        with pytest.raises(TimeoutError):
            c.read(timeout_s=0.1)


# -- the waits -----------------------------------------------------------------------------------
def test_wait_until_returns_the_first_true_value() -> None:
    values = iter([0, None, "", "ready", "later"])
    assert wait_until(lambda: next(values), 5, interval_s=0) == "ready"


def test_wait_until_fails_naming_what_it_waited_for() -> None:
    started = time.monotonic()
    with pytest.raises(AssertionError, match="timed out after 0.2s waiting for the moon"):
        wait_until(lambda: False, 0.2, "the moon")
    assert 0.2 <= time.monotonic() - started < 2
    with pytest.raises(AssertionError, match="waiting for state 7"):
        wait_until(lambda: False, 0.1, lambda: f"state {3 + 4}")


def test_wait_until_ignores_only_the_exceptions_named() -> None:
    calls = []

    def flaky() -> bool:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError("not yet")
        return True

    assert wait_until(flaky, 5, interval_s=0, ignore=(ConnectionError,)) is True
    with pytest.raises(AssertionError, match=r"last: ConnectionError\('down'\)"):
        wait_until(lambda: (_ for _ in ()).throw(ConnectionError("down")), 0.1,
                   ignore=(ConnectionError,))
    with pytest.raises(ValueError):
        wait_until(lambda: int("x"), 5, ignore=(ConnectionError,))


def test_during_lasts_its_window() -> None:
    started = time.monotonic()
    rounds = sum(1 for _ in during(0.3, interval_s=0.05))
    elapsed = time.monotonic() - started
    assert 0.3 <= elapsed < 1.5
    assert 3 <= rounds <= 8
    assert sum(1 for _ in during(0)) == 1  # at least one look, even at once


def test_wait_blocked_counts_blocked_clients(redis_standalone: ManagedProcess) -> None:
    port = redis_standalone.port
    with RawClient(port) as admin, RawClient(port) as a, RawClient(port) as b:
        before = blocked_clients(admin)
        a.send("BLPOP", "support:q", "0")
        wait_blocked(admin, before + 1)
        b.send("BLPOP", "support:q", "0")
        wait_blocked(port, before + 2)
        assert blocked_clients(redis_standalone.client()) == before + 2
        with pytest.raises(AssertionError, match=f"{before + 3} blocked clients"):
            wait_blocked(admin, before + 3, timeout_s=0.2)
        assert admin.call("RPUSH", "support:q", "x") == b":1\r\n"
        assert a.read() == b"*2\r\n$9\r\nsupport:q\r\n$1\r\nx\r\n"
        wait_blocked(admin, before + 1)
        b.close()
        wait_blocked(admin, before)


# -- the pair ------------------------------------------------------------------------------------
def test_node_and_redis_starts_both_with_the_same_directives(tmp_path: Path) -> None:
    with node_and_redis(tmp_path, ["--hz", "17"]) as procs:
        assert list(procs) == ["ours", "real"]
        assert procs["real"].argv[0] == REDIS_SERVER and procs["ours"].argv[1:3] == ["-m", "slotgate.node"]
        for proc in procs.values():
            with RawClient(proc.port) as c:
                assert c.call("CONFIG", "GET", "hz") == b"*2\r\n$2\r\nhz\r\n$2\r\n17\r\n"
                assert c.call("DEBUG", "SLEEP", "0") == b"+OK\r\n"  # DEBUG enabled on both
        pids = [p.pid for p in procs.values()]
    assert not any(pid_alive(pid) for pid in pids)


# -- another revision's tree -------------------------------------------------------------------
def test_in_tree_names_the_module_as_that_tree_does(tmp_path: Path) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    (new / "slotgate").mkdir(parents=True)
    old.mkdir()
    for make, name in ((lambda: slotgate_node(tmp_path), "node"),
                       (lambda: slotgate_proxy(tmp_path, [7000], []), "proxy")):
        assert in_tree(make(), old).argv[1:3] == ["-m", name]
        assert in_tree(make(), new).argv[1:3] == ["-m", f"slotgate.{name}"]
