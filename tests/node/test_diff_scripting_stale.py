"""Scripts on a stale replica (its link to its master down, ``replica-serve-stale-data no``):
our replica of our node and redis-server 7.0's replica of a redis-server, both masters stopped,
the same commands to both replicas, raw replies compared (RESP2 and RESP3).

Redis refuses every command without the ``stale`` flag (MASTERDOWN), a script command by its
script's flags: a script without a shebang is refused when it is about to run, one with a
shebang unless it declares ``allow-stale`` (``no-writes`` too, or the read-only replica refuses
it first); inside an ``allow-stale`` script, a command without the ``stale`` flag fails."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.node.diff import Case, Pair, check_cases
from tests.support import RawClient, redis_server, running, slotgate_node, wait_until

LIB = ("#!lua name=stalelib\n"
       "redis.register_function('plain', function(k) return redis.call('get', k[1]) end)\n"
       "redis.register_function{function_name='ro', callback=function(k) return 1 end, "
       "flags={'no-writes'}}\n"
       "redis.register_function{function_name='stale', callback=function(k) "
       "return redis.call('get', k[1]) end, flags={'allow-stale'}}\n"
       "redis.register_function{function_name='stalero', callback=function(k) "
       "return redis.call('get', k[1]) end, flags={'allow-stale', 'no-writes'}}\n"
       "redis.register_function{function_name='staleinfo', callback=function(k) "
       "return {redis.pcall('ping'), redis.pcall('info', 'nosuch'), redis.pcall('time')[2] ~= nil}"
       " end, flags={'allow-stale', 'no-writes'}}\n")
STALE = "#!lua flags=allow-stale,no-writes\n"
SHA_OF_RETURN_1 = "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"  # "return 1"


def _ev(body: str, *args: str) -> str:
    return " ".join(['EVAL "' + body + '"', *args])


CASES = [
    Case("commands", ["GET k", "PING", "DBSIZE", "SET a b", "INFO keyspace", "SELECT 0",
                      "FUNCTION LIST", "SCRIPT EXISTS x", "CONFIG GET replica-serve-stale-data"]),
    Case("eval", [
        _ev("return redis.call('get', KEYS[1])", "1", "k"), _ev("return 1", "0"),
        _ev("return +", "0"), "EVAL_RO \"return 1\" 0", f"EVALSHA {SHA_OF_RETURN_1} 0",
        _ev("#!lua\nreturn 1", "0"), _ev("#!lua flags=no-writes\nreturn 1", "0"),
        _ev("#!lua flags=allow-stale\nreturn 1", "0"),
        _ev("#!lua flags=bogus\nreturn 1", "0"),
        _ev(STALE + "return redis.call('get', KEYS[1])", "1", "k"),
        _ev(STALE + "return redis.pcall('get', KEYS[1])", "1", "k"),
        _ev(STALE + "return {pcall(redis.call, 'dbsize')}", "0"),
        _ev(STALE + "return redis.pcall('set', 'k', 'x')", "0"),
        _ev(STALE + "return {redis.pcall('nosuch'), redis.pcall('get'), redis.pcall('multi')}",
            "0"),
        _ev(STALE + "return {redis.call('info', 'nosuch'), redis.call('select', '0')}", "0"),
        _ev(STALE + "return 5", "0"), "EVAL_RO \"" + STALE + "return 5\" 0",
        "SCRIPT LOAD \"" + STALE + "return 6\"",
        "EVALSHA 4b7e41d1a4b0ef25b9b75fe6ffd2e4f9fc2ee69b 0",
    ]),
    Case("fcall", ["FCALL plain 1 k", "FCALL ro 0", "FCALL_RO ro 0", "FCALL stale 1 k",
                   "FCALL stalero 1 k", "FCALL_RO stalero 1 k", "FCALL staleinfo 0",
                   "FCALL nosuch 0"]),
    Case("transactions", ["MULTI", _ev(STALE + "return 1", "0"), "GET k", "EXEC",
                          "MULTI", _ev("#!lua flags=no-writes\nreturn 1", "0"), "EXEC",
                          "MULTI", "FCALL stalero 1 k", "FCALL ro 0", "DISCARD"]),
]
# replica-serve-stale-data yes: everything runs (the replica answers what it holds)
SERVING = Case("serving stale data", [
    "CONFIG SET replica-serve-stale-data yes", "GET k", _ev("return redis.call('get', 'k')", "0"),
    _ev("#!lua flags=no-writes\nreturn redis.call('get', 'k')", "0"), "FCALL_RO ro 0",
    "CONFIG SET replica-serve-stale-data no",
])


def _link_up(port: int) -> bool:
    with RawClient(port) as c:
        return b"master_link_status:up" in c.call("INFO", "replication")


@pytest.fixture(scope="module")
def stale_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    """A replica of each kind whose master is gone (a replica of our node is ours: the
    snapshot it loads is our node's)."""
    work: Path = tmp_path_factory.mktemp("stale")
    masters = {"ours": slotgate_node(work), "real": redis_server(work)}
    with running(*masters.values()):
        for m in masters.values():
            with RawClient(m.port) as c:
                assert c.call("SET", "k", "v") == b"+OK\r\n"
                assert c.call("FUNCTION", "LOAD", LIB) == b"$8\r\nstalelib\r\n"
        stale = ["--replica-serve-stale-data", "no"]
        replicas = {
            "ours": slotgate_node(work, extra=["--replicaof", "127.0.0.1",
                                               str(masters["ours"].port), *stale]),
            "real": redis_server(work, extra=["--replicaof", "127.0.0.1",
                                              str(masters["real"].port), *stale]),
        }
        with running(*replicas.values()):
            for r in replicas.values():
                wait_until(lambda r=r: _link_up(r.port), 30, f"{r.argv[0]} in sync")
            for m in masters.values():
                m.stop()
            for r in replicas.values():
                wait_until(lambda r=r: not _link_up(r.port), 30, "the link to be down")
            yield Pair(replicas["ours"].port, replicas["real"].port)


@pytest.mark.parametrize("proto", [2, 3])
def test_scripts_on_a_stale_replica_match_redis(stale_pair: Pair, proto: int) -> None:
    problems = check_cases(stale_pair, [*CASES, SERVING], proto)
    assert not problems, "\n".join(problems)


def test_hello_names_the_replica_role(stale_pair: Pair) -> None:
    for port in (stale_pair.ours_port, stale_pair.real_port):
        with RawClient(port) as c:
            assert b"$4\r\nrole\r\n$7\r\nreplica\r\n" in c.call("HELLO", "3"), port
