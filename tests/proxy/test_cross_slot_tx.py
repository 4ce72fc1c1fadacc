"""Transactions whose keys span slots (``cross_slot_transactions``), through the proxy.

redis-py pipelines (MULTI/EXEC, keys without hash tags, on every master) go to one
standalone redis-server and to the proxy with ``per_shard`` in front of a real cluster, then
of our nodes; the replies must be equal (errors in their place included), RESP2 and RESP3.
WATCH on keys of two masters, DISCARD, and the ``refuse`` mode's error are checked too.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis

from slotgate.protocol.slots import key_slot
from tests.conftest import start_cluster
from tests.support import ManagedProcess, RawClient, running, slotgate_proxy

# The default 3-master split of redis-cli --cluster create.
MASTER_OF_SLOT = ((0, 5460), (5461, 10922), (10923, 16383))


def _master(key: str) -> int:
    slot = key_slot(key.encode())
    return next(i for i, (lo, hi) in enumerate(MASTER_OF_SLOT) if lo <= slot <= hi)


def _keys(n_masters: int = 3) -> list[str]:
    """One untagged key on each of ``n_masters`` masters, in master order."""
    prefix = uuid.uuid4().hex[:8]
    found: dict[int, str] = {}
    i = 0
    while len(found) < n_masters:
        key = f"{prefix}:k{i}"
        found.setdefault(_master(key), key)
        i += 1
    return [found[m] for m in sorted(found)]


@pytest.fixture(scope="module", params=["real", "bundled"])
def proxies(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[dict[str, ManagedProcess]]:
    """{"per_shard": proxy, "refuse": proxy} in front of a 3-master cluster of the param."""
    workdir = tmp_path_factory.mktemp(f"shardtx-{request.param}")
    nodes = start_cluster(request.param, workdir / "cluster", masters=3, replicas=0)
    try:
        procs: dict[str, ManagedProcess] = {}
        for mode in ("per_shard", "refuse"):
            cfg = workdir / f"{mode}.yaml"
            cfg.write_text(f"cross_slot_transactions: {mode}\n")
            procs[mode] = slotgate_proxy(workdir / mode, [n.port for n in nodes],
                                         ["--config", str(cfg)])
        with running(*procs.values()):
            yield procs
    finally:
        for n in nodes:
            n.stop()


def _pipeline(r: redis.Redis, a: str, b: str, c: str) -> list[object]:
    pipe = r.pipeline()  # transaction=True: MULTI … EXEC
    pipe.set(a, "1").incr(a).rpush(b, "x", "y").incr(b).get(c).set(c, "v")
    pipe.lrange(b, 0, -1).ping().sadd(c + "s", "m").hset(a + "h", "f", "v")
    pipe.mset({a: "m", c: "n"}).mget(c, b, a, "nokey").exists(a, b, c, "nokey")
    pipe.hgetall(a + "h").exists(a, b).lpush(a, "z").mget(c).delete(a, b, c + "s", a + "h", "nokey").echo("e").touch(a, c)
    out = pipe.execute(raise_on_error=False)
    return [("error", str(x)) if isinstance(x, Exception) else x for x in out]


@pytest.mark.parametrize("protocol", [2, 3])
def test_pipeline_replies_as_one_redis_server(proxies: dict[str, ManagedProcess],
                                              redis_standalone: ManagedProcess,
                                              protocol: int) -> None:
    a, b, c = _keys()
    with redis.Redis(port=proxies["per_shard"].port, protocol=protocol) as via_proxy, \
            redis.Redis(port=redis_standalone.port, protocol=protocol) as one:
        got = _pipeline(via_proxy, a, b, c)
        want = _pipeline(one, a, b, c)
    assert got == want
    assert ("error", "WRONGTYPE Operation against a key holding the wrong kind of value") in got


@pytest.mark.parametrize("proto", [2, 3])
def test_raw_exec_reply_as_one_redis_server(proxies: dict[str, ManagedProcess],
                                            redis_standalone: ManagedProcess,
                                            proto: int) -> None:
    a, b, c = _keys()
    script: list[tuple[str, ...]] = [
        ("HELLO", str(proto)), ("MULTI",), ("SET", a, "1"), ("LPUSH", b, "x"), ("INCR", b),
        ("ZADD", c, "1", "m"), ("ZRANGE", c, "0", "-1", "WITHSCORES"), ("GET", a),
        ("PING",), ("EXEC",), ("MULTI",), ("EXEC",), ("MULTI",), ("GET", a), ("DISCARD",),
        ("EXEC",), ("DEL", a, b), ("DEL", c),
    ]
    replies = {}
    for name, port in (("proxy", proxies["per_shard"].port), ("one", redis_standalone.port)):
        with RawClient(port) as cl:
            replies[name] = [cl.call(*cmd) for cmd in script][1:]
    assert replies["proxy"] == replies["one"]


def _watched_exec(r: redis.Redis, other: redis.Redis, watched: list[str], changed: str | None,
                  writes: dict[str, str]) -> list[object] | None:
    """WATCH ``watched``; ``other`` sets ``changed``; MULTI, the writes, EXEC (None: nil)."""
    with r.pipeline() as pipe:
        pipe.watch(*watched)
        if changed is not None:
            other.set(changed, "changed")
        pipe.multi()
        for key, value in writes.items():
            pipe.set(key, value)
        try:
            return pipe.execute()
        except redis.WatchError:
            return None


def test_watch_on_two_masters(proxies: dict[str, ManagedProcess]) -> None:
    a, b, _ = _keys()
    port = proxies["per_shard"].port
    with redis.Redis(port=port) as r, redis.Redis(port=port) as other:
        r.mset({a: "0"})
        r.set(b, "0")
        # Unchanged: both shards commit.
        assert _watched_exec(r, other, [a, b], None, {a: "1", b: "1"}) == [True, True]
        assert r.mget(a) == [b"1"] and r.get(b) == b"1"
        # A watched key of the first shard to run changed: EXEC nil, nothing changed.
        assert _watched_exec(r, other, [a, b], a, {a: "2", b: "2"}) is None
        assert r.get(a) == b"changed" and r.get(b) == b"1"
        # A watched key of the second shard changed: EXEC nil; the first shard had already
        # committed (documented: no rollback across shards).
        assert _watched_exec(r, other, [a, b], b, {a: "3", b: "3"}) is None
        assert r.get(a) == b"3" and r.get(b) == b"changed"
        # A watched master with no command in the transaction is still checked.
        assert _watched_exec(r, other, [a, b], b, {a: "4"}) is None
        assert r.get(a) == b"3"
        r.delete(a, b)


def test_discard_and_unwatch_release_every_shard(proxies: dict[str, ManagedProcess]) -> None:
    a, b, c = _keys()
    port = proxies["per_shard"].port
    with RawClient(port) as cl, redis.Redis(port=port) as other:
        assert cl.call("WATCH", a, b, c) == b"+OK\r\n"
        assert cl.call("MULTI") == b"+OK\r\n"
        assert cl.call("SET", a, "x") == b"+QUEUED\r\n"
        assert cl.call("DISCARD") == b"+OK\r\n"
        other.set(b, "meanwhile")
        cl.call("MULTI")
        cl.call("SET", a, "y")
        cl.call("SET", c, "y")
        assert cl.call("EXEC") == b"*2\r\n+OK\r\n+OK\r\n"
        assert cl.call("WATCH", a, b) == b"+OK\r\n"
        assert cl.call("UNWATCH") == b"+OK\r\n"
        other.set(a, "meanwhile")
        cl.call("MULTI")
        cl.call("GET", a)
        cl.call("GET", b)
        assert cl.call("EXEC") == b"*2\r\n$9\r\nmeanwhile\r\n$9\r\nmeanwhile\r\n"
        other.delete(a, b, c)


def test_refuse_names_the_setting(proxies: dict[str, ManagedProcess]) -> None:
    a, b, _ = _keys()
    with redis.Redis(port=proxies["refuse"].port) as r:
        pipe = r.pipeline()
        pipe.set(a, "1").set(b, "1")
        with pytest.raises(redis.ResponseError, match="cross_slot_transactions: per_shard"):
            pipe.execute()
        assert r.exists(a, b) == 0
        # One slot: as before.
        pipe = r.pipeline()
        pipe.set(a, "1").get(a).delete(a)
        assert pipe.execute() == [True, b"1", 1]


@pytest.mark.parametrize("command", [
    ("EVAL", "redis.call('SET', KEYS[2], redis.call('GET', KEYS[1])) return 1", "2"),
    ("SUNIONSTORE",), ("RENAME",),
])
def test_gathered_commands_across_slots_are_refused_inside_multi(
    proxies: dict[str, ManagedProcess], redis_standalone: ManagedProcess,
    command: tuple[str, ...],
) -> None:
    """A script (or any other command run by gathering copies, docs/COMMANDS.md) whose keys
    span slots is refused inside MULTI even with ``per_shard``: each group is one slot's
    transaction, where its copies cannot be made. ``EXEC`` then aborts as Redis does after
    a refused command; with its keys in one slot it is queued and runs as on one server."""
    a, b = _keys(2)
    tag = uuid.uuid4().hex[:6]
    one_slot = (f"{{{tag}}}a", f"{{{tag}}}b")
    for keys, want in ((a, b), False), (one_slot, True):
        argv = (*command, *keys)
        replies = {}
        for name, port in (("proxy", proxies["per_shard"].port), ("one", redis_standalone.port)):
            with RawClient(port) as cl:
                replies[name] = [cl.call(*c) for c in (
                    ("SET", keys[0], "v"), ("SADD", keys[1] + "s", "m"), ("MULTI",), argv,
                    ("EXEC",), ("GET", keys[1]), ("DEL", *keys))]
        if want:
            assert replies["proxy"] == replies["one"]
        else:
            assert replies["proxy"][3] == (b"-CROSSSLOT Keys in request don't hash to the "
                                           b"same slot\r\n")
            assert replies["proxy"][4].startswith(b"-EXECABORT"), replies["proxy"]
            assert replies["proxy"][5] == b"$-1\r\n"  # nothing ran
            assert replies["one"][3] == b"+QUEUED\r\n"
