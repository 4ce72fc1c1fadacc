"""durable_writes and read_your_writes for every kind of write the proxy acknowledges, in
front of real redis-server 7.0 and of our nodes (3 masters, 1 replica each): scripts,
per-shard transactions, blocking pops and moves (one slot and across slots), multi-key
commands across slots (the gather path), FUNCTION changes, numbered databases.

For each kind, three runs of the same write (fresh keys each time):
- ``dur`` (durable_writes: 1) with every replica stopped (SIGSTOP): the short-WAIT error;
- ``dur`` with the replicas running: the write's own reply (WAIT acknowledged);
- ``ryw`` (read_from: replica, read_your_writes) with every replica stopped right after its
  reads were shown to reach replicas: its reads after the write return the write (a read
  sent to a stopped replica would hang until the client's timeout).
"""

from __future__ import annotations

import hashlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.conftest import CLUSTER_FIXTURES as CLUSTER_KINDS
from tests.conftest import ClusterBackend, wait_replicas_up
from tests.proxy.test_read_policies import master_of, reads
from tests.proxy.test_replica_reads import roles, start_proxy
from tests.support import ManagedProcess, wait_until

CONFIG = """auth:
  users: ["dur on >durpw ~* &* +@all", "ryw on >rywpw ~* &* +@all"]
reads:
  check_interval: 50ms
writes:
  durable_timeout: 200ms
cross_slot_transactions: per_shard
databases: 4
policies:
  users:
    dur: {durable_writes: 1}
    ryw: {read_from: replica, read_your_writes: true}
"""
SHORT = "acknowledged by 0 of 1"
SCRIPT = "return redis.call('SET', KEYS[1], ARGV[1])"
SCRIPT_SHA = hashlib.sha1(SCRIPT.encode()).hexdigest()
LIBRARY = ("#!lua name=wpolicy\nredis.register_function('wpolicy_set', function(keys, args) "
           "return redis.call('SET', keys[1], args[1]) end)")
LOADED = "#!lua name=wpolicy_{run}\nredis.register_function('wpolicy_{run}', function() end)"
ANY = object()  # a read whose reply is not checked (SELECT)

Argv = list[Any]
Key = Callable[[str, str], str]  # (tag "a" or "b", name) -> this run's key


@dataclass
class Case:
    """One kind of write: ``setup`` on a client without a policy, then on the policy's
    client ``prep`` (no writes), ``steps`` (the last is the write answered with the WAIT's
    result), its ``reads`` (argv, expected reply or a predicate) and ``after``."""

    name: str
    steps: Callable[[Key], list[Argv]]
    reads: Callable[[Key], list[tuple[Argv, Any]]]
    setup: Callable[[Key], list[Argv]] = lambda k: []
    prep: list[Argv] = field(default_factory=list)
    after: list[Argv] = field(default_factory=list)


def _ident(k: Key) -> str:
    """A name for this run's function library."""
    return hashlib.sha1(k("a", "").encode()).hexdigest()[:10]


def _pending(n: int) -> Callable[[Any], bool]:
    """XPENDING's summary shows ``n`` pending entries (redis-py parses it into a dict)."""
    return lambda r: (r["pending"] if isinstance(r, dict) else r[0]) == n


def _in_db(db: int, *argvs: Argv) -> list[Argv]:
    return [["SELECT", db], *argvs, ["SELECT", 0]]


CASES = [
    Case("eval", lambda k: [["EVAL", SCRIPT, 1, k("a", "e"), "v"]],
         lambda k: [(["GET", k("a", "e")], b"v")]),
    Case("evalsha", lambda k: [["EVALSHA", SCRIPT_SHA, 1, k("a", "es"), "v"]],
         lambda k: [(["GET", k("a", "es")], b"v")], setup=lambda k: [["SCRIPT", "LOAD", SCRIPT]]),
    Case("fcall", lambda k: [["FCALL", "wpolicy_set", 1, k("a", "f"), "v"]],
         lambda k: [(["GET", k("a", "f")], b"v")],
         setup=lambda k: [["FUNCTION", "LOAD", "REPLACE", LIBRARY]]),
    Case("function load", lambda k: [["FUNCTION", "LOAD", LOADED.format(run=_ident(k))]],
         lambda k: []),
    Case("per-shard transaction",
         lambda k: [["MULTI"], ["SET", k("a", "t"), "v"], ["SET", k("b", "t"), "v"], ["EXEC"]],
         lambda k: [(["GET", k("a", "t")], b"v"), (["GET", k("b", "t")], b"v")]),
    Case("per-shard transaction, a move across slots inside",
         lambda k: [["MULTI"], ["LMOVE", k("a", "tm"), k("b", "tm"), "LEFT", "LEFT"], ["EXEC"]],
         lambda k: [(["LLEN", k("a", "tm")], 0), (["LRANGE", k("b", "tm"), 0, -1], [b"x"])],
         setup=lambda k: [["RPUSH", k("a", "tm"), "x"]]),
    Case("blmove", lambda k: [["BLMOVE", k("a", "bm"), k("a", "bm2"), "LEFT", "RIGHT", 1]],
         lambda k: [(["LRANGE", k("a", "bm2"), 0, -1], [b"x"])],
         setup=lambda k: [["RPUSH", k("a", "bm"), "x"]]),
    Case("blpop", lambda k: [["BLPOP", k("a", "bp"), 1]],
         lambda k: [(["LLEN", k("a", "bp")], 1)],
         setup=lambda k: [["RPUSH", k("a", "bp"), "x", "y"]]),
    Case("bzpopmin", lambda k: [["BZPOPMIN", k("a", "bz"), 1]],
         lambda k: [(["ZCARD", k("a", "bz")], 1)],
         setup=lambda k: [["ZADD", k("a", "bz"), 1, "m", 2, "n"]]),
    Case("xreadgroup", lambda k: [["XREADGROUP", "GROUP", "g", "c", "STREAMS", k("a", "x"), ">"]],
         lambda k: [(["XPENDING", k("a", "x"), "g"], _pending(1))],
         setup=lambda k: [["XADD", k("a", "x"), "*", "f", "v"],
                          ["XGROUP", "CREATE", k("a", "x"), "g", "0"]]),
    Case("blmove across slots",
         lambda k: [["BLMOVE", k("a", "cm"), k("b", "cm"), "LEFT", "RIGHT", 1]],
         lambda k: [(["LLEN", k("a", "cm")], 0), (["LRANGE", k("b", "cm"), 0, -1], [b"x"])],
         setup=lambda k: [["RPUSH", k("a", "cm"), "x"]]),
    Case("blpop across slots", lambda k: [["BLPOP", k("a", "cp"), k("b", "cp"), 1]],
         lambda k: [(["LLEN", k("b", "cp")], 0)], setup=lambda k: [["RPUSH", k("b", "cp"), "x"]]),
    Case("lmpop across slots", lambda k: [["LMPOP", 2, k("a", "lp"), k("b", "lp"), "LEFT"]],
         lambda k: [(["LLEN", k("b", "lp")], 0)], setup=lambda k: [["RPUSH", k("b", "lp"), "x"]]),
    Case("xreadgroup across slots",
         lambda k: [["XREADGROUP", "GROUP", "g", "c", "STREAMS", k("a", "xx"), k("b", "xx"),
                     ">", ">"]],
         lambda k: [(["XPENDING", k("a", "xx"), "g"], _pending(1)),
                    (["XPENDING", k("b", "xx"), "g"], _pending(1))],
         setup=lambda k: [["XADD", k("a", "xx"), "*", "f", "v"],
                          ["XGROUP", "CREATE", k("a", "xx"), "g", "0"],
                          ["XADD", k("b", "xx"), "*", "f", "v"],
                          ["XGROUP", "CREATE", k("b", "xx"), "g", "0"]]),
    Case("sunionstore", lambda k: [["SUNIONSTORE", k("a", "su"), k("a", "s1"), k("b", "s2")]],
         lambda k: [(["SCARD", k("a", "su")], 2)],
         setup=lambda k: [["SADD", k("a", "s1"), "m"], ["SADD", k("b", "s2"), "n"]]),
    Case("rename", lambda k: [["RENAME", k("a", "rn"), k("b", "rn")]],
         lambda k: [(["GET", k("b", "rn")], b"v"), (["EXISTS", k("a", "rn")], 0)],
         setup=lambda k: [["SET", k("a", "rn"), "v"]]),
    Case("copy", lambda k: [["COPY", k("a", "cy"), k("b", "cy")]],
         lambda k: [(["GET", k("b", "cy")], b"v")], setup=lambda k: [["SET", k("a", "cy"), "v"]]),
    Case("lmove", lambda k: [["LMOVE", k("a", "lm"), k("b", "lm"), "LEFT", "LEFT"]],
         lambda k: [(["LLEN", k("a", "lm")], 0), (["LRANGE", k("b", "lm"), 0, -1], [b"x"])],
         setup=lambda k: [["RPUSH", k("a", "lm"), "x"]]),
    Case("smove", lambda k: [["SMOVE", k("a", "sm"), k("b", "sm"), "m"]],
         lambda k: [(["SCARD", k("a", "sm")], 0), (["SISMEMBER", k("b", "sm"), "m"], 1)],
         setup=lambda k: [["SADD", k("a", "sm"), "m"]]),
    Case("msetnx", lambda k: [["MSETNX", k("a", "mn"), "v", k("b", "mn"), "v"]],
         lambda k: [(["GET", k("a", "mn")], b"v"), (["GET", k("b", "mn")], b"v")]),
    Case("sort with a pattern, stored",
         lambda k: [["SORT", k("a", "so"), "GET", "#", "STORE", k("a", "sd")]],
         lambda k: [(["LRANGE", k("a", "sd"), 0, -1], [b"1", b"2"])],
         setup=lambda k: [["RPUSH", k("a", "so"), 2, 1]]),
    Case("set in a database", lambda k: [["SET", k("a", "d"), "v"]],
         lambda k: [(["GET", k("a", "d")], b"v")], prep=[["SELECT", 1]], after=[["SELECT", 0]]),
    Case("move", lambda k: [["MOVE", k("a", "dm"), 2]],
         lambda k: [(["SELECT", 2], ANY), (["GET", k("a", "dm")], b"v"), (["SELECT", 1], ANY)],
         setup=lambda k: _in_db(1, ["SET", k("a", "dm"), "v"]),
         prep=[["SELECT", 1]], after=[["SELECT", 0]]),
    Case("copy to a database", lambda k: [["COPY", k("a", "cd"), k("a", "cd"), "DB", 3]],
         lambda k: [(["SELECT", 3], ANY), (["GET", k("a", "cd")], b"v"), (["SELECT", 0], ANY)],
         setup=lambda k: [["SET", k("a", "cd"), "v"]]),
    Case("swapdb", lambda k: [["SWAPDB", 2, 3]],
         lambda k: [(["SELECT", 3], ANY), (["GET", k("b", "sw")], b"v"), (["SELECT", 0], ANY)],
         setup=lambda k: _in_db(2, ["SET", k("b", "sw"), "v"])),
    Case("flushdb in a database", lambda k: [["FLUSHDB"]],
         lambda k: [(["EXISTS", k("a", "fl")], 0)],
         setup=lambda k: _in_db(1, ["SET", k("a", "fl"), "v"]),
         prep=[["SELECT", 1]], after=[["SELECT", 0]]),
]


def two_tags(nodes: list[ManagedProcess]) -> tuple[str, str]:
    """Two hash tags whose slots have different masters."""
    first = master_of(nodes, "{wa}")
    i = 0
    while master_of(nodes, f"{{wb{i}}}") is first:
        i += 1
    return "wa", f"wb{i}"


@contextmanager
def stopped(replicas: list[ManagedProcess]) -> Iterator[None]:
    for r in replicas:
        os.kill(r.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for r in replicas:
            os.kill(r.pid, signal.SIGCONT)


def run(c: redis.Redis, argvs: list[Argv]) -> Any:
    reply = None
    for argv in argvs:
        reply = c.execute_command(*argv)
    return reply


def check_reads(c: redis.Redis, reads_: list[tuple[Argv, Any]], case: str) -> None:
    for argv, want in reads_:
        got = c.execute_command(*argv)
        if want is ANY:
            continue
        assert want(got) if callable(want) else got == want, (case, argv, got)


@pytest.fixture
def policy_proxy(cluster_backend: ClusterBackend, tmp_path: Path,
                 cleanup: list[ManagedProcess]) -> Iterator[tuple[ManagedProcess, int]]:
    nodes = cluster_backend.nodes
    wait_replicas_up(nodes)
    proxy, mport = start_proxy(tmp_path, nodes, CONFIG, cleanup)
    anon = proxy.client(socket_timeout=30)
    try:
        yield proxy, mport
    finally:
        anon.execute_command("FUNCTION", "FLUSH")  # the libraries the test loaded
        wait_replicas_up(nodes)


def login(proxy: ManagedProcess, user: str) -> redis.Redis:
    """A connection of ``user``'s that never tries a request again (a read stuck on a stopped
    replica must fail the test, not be sent again on a new connection)."""
    return redis.Redis(port=proxy.port, username=user, password=f"{user}pw", socket_timeout=5,
                       single_connection_client=True, retry=Retry(NoBackoff(), 0))


def test_every_kind_of_write_waits_and_is_read_back(
        cluster_backend: ClusterBackend, policy_proxy: tuple[ManagedProcess, int],
        request: pytest.FixtureRequest) -> None:
    """Each kind against both implementations with ``--run-slow``; in the default run each
    kind against one of them, in turn (the CI budget)."""
    cases = CASES
    if not request.config.getoption("--run-slow"):
        cases = CASES[list(CLUSTER_KINDS).index(cluster_backend.kind)::len(CLUSTER_KINDS)]
    nodes = cluster_backend.nodes
    proxy, mport = policy_proxy
    _, replicas = roles(nodes)
    tag_a, tag_b = two_tags(nodes)
    anon = redis.Redis(port=proxy.port, socket_timeout=30, single_connection_client=True)
    dur, ryw = login(proxy, "dur"), login(proxy, "ryw")
    probes = [f"{{{tag_a}}}probe", f"{{{tag_b}}}probe"]
    for key in probes:
        anon.set(key, "p")

    def keys(run_id: str) -> Key:
        tags = {"a": tag_a, "b": tag_b}
        return lambda tag, name: f"{{{tags[tag]}}}{name}:{run_id}"

    def on_replicas() -> bool:
        """Every probe read by ``ryw`` from a replica (fit, and past its last writes)."""
        before = reads(mport)
        for key in probes:
            assert ryw.get(key) == b"p"
        after = reads(mport)
        return after[0] - before[0] == 0 and after[1] - before[1] == len(probes)

    for i, case in enumerate(cases):
        # dur, replicas stopped: the write's reply is the short WAIT's error.
        k = keys(f"{i}s")
        run(anon, case.setup(k))
        run(dur, case.prep)
        with stopped(replicas):
            run(dur, case.steps(k)[:-1])
            with pytest.raises(redis.ResponseError, match=SHORT):
                run(dur, case.steps(k)[-1:])
        run(dur, case.after)
        # dur, replicas running: acknowledged.
        k = keys(f"{i}r")
        run(anon, case.setup(k))
        run(dur, case.prep)
        run(dur, case.steps(k))
        check_reads(dur, case.reads(k), case.name)
        run(dur, case.after)
        # ryw: reads right after the write see it, with every replica stopped.
        k = keys(f"{i}y")
        run(anon, case.setup(k))
        wait_until(on_replicas, what=f"{case.name}: reads on replicas")
        run(ryw, case.prep)
        with stopped(replicas):
            run(ryw, case.steps(k))
            b = reads(mport)
            check_reads(ryw, case.reads(k), case.name)
            from tests.proxy.test_replica_reads import reads_by_role
            print("DEBUG", case.name, b, reads(mport), reads_by_role(mport)["replica"], [(r.port, open(f"/proc/{r.pid}/stat").read().split()[2]) for r in replicas])
        run(ryw, case.after)


def test_blocked_pop_across_slots_waits(cluster_backend: ClusterBackend,
                                        policy_proxy: tuple[ManagedProcess, int]) -> None:
    """A BLPOP over keys of two masters that had to wait (step 2 of blockmulti.py): the pop
    that ends it is a write like any other."""
    nodes = cluster_backend.nodes
    proxy, _ = policy_proxy
    _, replicas = roles(nodes)
    tag_a, tag_b = two_tags(nodes)
    anon = redis.Redis(port=proxy.port, socket_timeout=30, single_connection_client=True)
    dur = login(proxy, "dur")
    for phase in ("stopped", "running"):
        keys = [f"{{{tag_a}}}wp:{phase}", f"{{{tag_b}}}wp:{phase}"]
        got: list[Any] = []
        waiter = threading.Thread(target=_pop, args=(dur, keys, got))
        master = master_of(nodes, keys[1])
        armed = exists_calls(master)
        with stopped(replicas) if phase == "stopped" else _nothing():
            waiter.start()
            # the keys armed (keywake.py): the pop found nothing and waits
            wait_until(lambda: exists_calls(master) > armed,  # noqa: B023
                       what="the pop waits")
            anon.rpush(keys[1], "x")
            waiter.join(30)
        assert not waiter.is_alive()
        if phase == "stopped":
            assert isinstance(got[0], redis.ResponseError) and SHORT in str(got[0]), got
        else:
            assert got == [(keys[1].encode(), b"x")]


def _pop(c: redis.Redis, keys: list[str], got: list[Any]) -> None:
    try:
        got.append(c.blpop(keys, 10))
    except redis.ResponseError as exc:
        got.append(exc)


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def exists_calls(node: ManagedProcess) -> int:
    stats = node.client(socket_timeout=5).info("commandstats")
    return int(stats.get("cmdstat_exists", {}).get("calls", 0))


