"""Transactions whose keys span slots (``cross_slot_transactions``), through the proxy.

redis-py pipelines (MULTI/EXEC, keys without hash tags, on every master) go to one
standalone redis-server and to the proxy with ``per_shard`` in front of a real cluster, then
of our nodes; the replies must be equal (errors in their place included), RESP2 and RESP3.
WATCH on keys of two masters, DISCARD, and the ``refuse`` mode's error are checked too, and
pipelines holding commands whose own keys span slots (SUNIONSTORE, RENAME, MSETNX, scripts …),
each run at its place in EXEC's order.
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
    """{"per_shard": proxy, "refuse": proxy, "databases": per_shard with ``databases: 4``} in
    front of a 3-master cluster of the param."""
    workdir = tmp_path_factory.mktemp(f"shardtx-{request.param}")
    nodes = start_cluster(request.param, workdir / "cluster", masters=3, replicas=0)
    try:
        procs: dict[str, ManagedProcess] = {}
        for mode, extra in (("per_shard", ""), ("refuse", ""), ("databases", "databases: 4\n")):
            cfg = workdir / f"{mode}.yaml"
            cfg.write_text(f"cross_slot_transactions: {mode.replace('databases', 'per_shard')}\n"
                           + extra)
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


# Every command family the proxy runs across slots, queued in one redis-py pipeline (MULTI …
# EXEC) between single-slot commands that feed it and read its result.
_LIB = """#!lua name=txpipe
redis.register_function('cp', function(keys, args)
  redis.call('SET', keys[2], redis.call('GET', keys[1]) or 'none') return redis.call('GET', keys[2])
end)"""
_SCRIPT = "redis.call('SET', KEYS[2], redis.call('GET', KEYS[1])) return redis.call('GET', KEYS[2])"


def _names(prefix: str) -> dict[str, str]:
    names = ("s1 s2 s3 su si sd z1 z2 zu zi str b1 b2 bo h1 h2 hm l1 l2 l3 rn cp ms1 ms2 "
             "srt srtd w_a w_b w_c g1 gd e1 e2 x1 x2 x3 st1 st2").split()
    keys = {n: f"{prefix}:{n}" for n in names}
    assert len({key_slot(k.encode()) for k in keys.values()}) > 30  # untagged: many slots
    return keys


def _families(r: redis.Redis, k: dict[str, str]) -> list[object]:
    pipe = r.pipeline()  # transaction=True
    pipe.sadd(k["s1"], "a", "b", "c").sadd(k["s2"], "b", "c", "d").sadd(k["s3"], "c", "x")
    pipe.sunionstore(k["su"], [k["s1"], k["s2"], k["s3"]]).smembers(k["su"])
    pipe.sinterstore(k["si"], [k["s1"], k["s2"]]).sdiffstore(k["sd"], [k["s1"], k["s3"]])
    pipe.zadd(k["z1"], {"a": 1, "b": 2}).zadd(k["z2"], {"b": 3, "c": 4})
    pipe.zunionstore(k["zu"], {k["z1"]: 2, k["z2"]: 1}).zinterstore(k["zi"], [k["z1"], k["z2"]])
    pipe.zrange(k["zu"], 0, -1, withscores=True)
    pipe.set(k["str"], "v").sunionstore(k["su"], [k["s1"], k["str"]])  # WRONGTYPE in place
    pipe.set(k["b1"], "ab").set(k["b2"], "ba").bitop("AND", k["bo"], k["b1"], k["b2"])
    pipe.get(k["bo"])
    pipe.pfadd(k["h1"], "x", "y").pfadd(k["h2"], "y", "z").pfmerge(k["hm"], k["h1"], k["h2"])
    pipe.pfcount(k["hm"]).pfcount(k["h1"], k["h2"])
    pipe.rpush(k["l1"], "1", "2", "3").rpoplpush(k["l1"], k["l2"])
    pipe.lmove(k["l1"], k["l3"], "LEFT", "RIGHT").lrange(k["l2"], 0, -1).lrange(k["l1"], 0, -1)
    pipe.smove(k["s1"], k["s3"], "a").smove(k["s1"], k["s3"], "nope").smembers(k["s3"])
    pipe.rename(k["l3"], k["rn"]).lrange(k["rn"], 0, -1).copy(k["rn"], k["cp"])
    pipe.copy(k["rn"], k["cp"]).pexpire(k["rn"], 100000).rename(k["rn"], k["e1"])
    pipe.ttl(k["e1"]).rename(k["rn"], k["e2"])  # ERR no such key in place
    pipe.msetnx({k["ms1"]: "1", k["ms2"]: "2"}).msetnx({k["ms2"]: "3", k["x1"]: "4"})
    pipe.mget(k["ms1"], k["ms2"], k["x1"]).mset({k["x1"]: "a", k["x2"]: "b"})
    pipe.mget(k["x1"], k["x2"], k["x3"]).delete(k["x1"], k["x2"], k["x3"])
    pipe.rpush(k["srt"], "b", "c", "a").sort(k["srt"], store=k["srtd"], alpha=True)
    pipe.lrange(k["srtd"], 0, -1)
    pipe.mset({k["w_a"]: "3", k["w_b"]: "1", k["w_c"]: "2"})
    pipe.sort(k["srt"], by=k["w_a"].replace("w_a", "w_*")).sort(
        k["srt"], by=k["w_a"].replace("w_a", "w_*"), store=k["srtd"])
    pipe.geoadd(k["g1"], (13.361389, 38.115556, "Palermo") + (15.087269, 37.502669, "Catania"))
    pipe.geosearchstore(k["gd"], k["g1"], longitude=15, latitude=37, radius=200, unit="km")
    pipe.zrange(k["gd"], 0, -1)
    pipe.eval(_SCRIPT, 2, k["ms1"], k["e2"]).get(k["e2"]).fcall("cp", 2, k["ms2"], k["x3"])
    pipe.get(k["x3"]).eval("return redis.call('GET', KEYS[1])", 2, k["e2"], k["x3"])
    pipe.lmpop(2, k["e1"], k["l2"], direction="RIGHT", count=2).lmpop(2, k["e1"], k["l2"],
                                                                     direction="LEFT")
    pipe.zmpop(2, [k["zi"], k["z2"]], min=True).zmpop(2, [k["z1"], k["z2"]], max=True, count=5)
    pipe.lmpop(2, k["str"], k["l2"], direction="LEFT")  # WRONGTYPE
    # Blocking pops and moves: without blocking inside MULTI, as in Redis.
    pipe.rpush(k["l2"], "p", "q", "r").blpop([k["e1"], k["l2"]], 0).brpop([k["e1"], k["l2"]], 1)
    pipe.blpop([k["e1"], k["x1"]], 0).blmove(k["l2"], k["x1"], 0, "LEFT", "RIGHT")
    pipe.blmove(k["l2"], k["x2"], 0).brpoplpush(k["x1"], k["x2"], 0).lrange(k["x2"], 0, -1)
    pipe.blmpop(0, 2, k["e1"], k["x2"], direction="RIGHT", count=5).blmpop(1, 2, k["e1"],
                                                                             k["x2"],
                                                                             direction="LEFT")
    pipe.zadd(k["z2"], {"m1": 1.5, "m2": 2}).bzpopmin([k["e1"], k["z2"]], 0)
    pipe.bzpopmax([k["e1"], k["z2"]], 0).bzpopmin([k["e1"], k["z2"]], 0)
    pipe.zadd(k["z2"], {"m3": 3}).bzmpop(0, 2, [k["e1"], k["z2"]], min=True, count=2)
    pipe.blpop([k["str"], k["l2"]], 0)  # WRONGTYPE
    pipe.xadd(k["st1"], {"f": "1"}, id="1-1").xadd(k["st2"], {"f": "2"}, id="2-1")
    pipe.xread({k["st1"]: 0, k["st2"]: 0}).xread({k["st1"]: "$", k["st2"]: "1-0"}, block=0)
    pipe.xread({k["st2"]: "$", k["st1"]: "$"}, block=10, count=1)
    pipe.xgroup_create(k["st1"], "g", 0).xgroup_create(k["st2"], "g", 0)
    pipe.xreadgroup("g", "c", {k["st2"]: ">", k["st1"]: ">"}, block=0, count=5)
    pipe.xreadgroup("g", "c", {k["st1"]: ">", k["st2"]: ">"}, block=1)
    pipe.xreadgroup("g", "c", {k["st1"]: "0", k["st2"]: "0"}, noack=True)
    pipe.xreadgroup("g", "c", {k["st1"]: ">", k["str"]: ">"}, block=0)  # NOGROUP
    out = pipe.execute(raise_on_error=False)
    return [("error", str(x)) if isinstance(x, Exception) else x for x in out]


def _data(r: redis.Redis, keys: dict[str, str]) -> dict[str, object]:
    """Every key's type and content (TTL: set or not)."""
    out: dict[str, object] = {}
    for name, key in keys.items():
        kind = r.type(key)
        read = {b"string": r.get, b"list": lambda k: r.lrange(k, 0, -1),
                b"set": lambda k: sorted(r.smembers(k)),
                b"zset": lambda k: r.zrange(k, 0, -1, withscores=True)}.get(kind)
        out[name] = (kind, read(key) if read else None, r.pttl(key) > 0)
    return out


@pytest.mark.parametrize("protocol", [2, 3])
def test_pipeline_of_commands_across_slots_as_one_redis_server(
        proxies: dict[str, ManagedProcess], redis_standalone: ManagedProcess,
        protocol: int) -> None:
    """Each command whose own keys span slots runs at its place in EXEC's order: the
    commands before it feed it, those after it read its result; its errors are in its place."""
    keys = _names(uuid.uuid4().hex[:8])
    got: dict[str, object] = {}
    for name, port in (("proxy", proxies["per_shard"].port), ("one", redis_standalone.port)):
        with redis.Redis(port=port, protocol=protocol) as r:
            r.function_load(_LIB, replace=True)
            got[name] = (_families(r, keys), _data(r, keys))
            r.delete(*keys.values())
    assert got["proxy"] == got["one"]
    replies = got["one"][0]
    assert isinstance(replies, list)
    assert ("error", "WRONGTYPE Operation against a key holding the wrong kind of value") in replies
    assert ("error", "no such key") in replies
    with redis.Redis(port=proxies["per_shard"].port) as r:
        assert r.keys("*slotgate-*") == []


def _watched_across(r: redis.Redis, other: redis.Redis, watched: str, change: bool,
                    k: dict[str, str]) -> list[object] | None:
    """WATCH ``watched``; ``other`` writes it if ``change``; a transaction beginning with a
    SUNIONSTORE across slots (None: EXEC answered nil)."""
    with r.pipeline() as pipe:
        pipe.watch(watched)
        if change:
            other.set(watched, "changed")
        pipe.multi()
        pipe.sunionstore(k["su"], [k["s1"], k["s2"]]).set(k["x1"], "1").rename(k["l1"], k["l2"])
        try:
            return pipe.execute()
        except redis.WatchError:
            return None


@pytest.mark.parametrize("protocol", [2, 3])
def test_watch_is_checked_before_a_command_across_slots(
        proxies: dict[str, ManagedProcess], protocol: int) -> None:
    """A changed watched key (on a master the transaction's groups do not touch first, or
    not at all) makes EXEC answer nil before anything runs: the commands across slots too."""
    k = _names(uuid.uuid4().hex[:8])
    port = proxies["per_shard"].port
    with redis.Redis(port=port, protocol=protocol) as r, redis.Redis(port=port) as other:
        for watched in (k["w_a"], k["s1"], k["su"], None):
            r.delete(*k.values())
            r.sadd(k["s1"], "a")
            r.sadd(k["s2"], "b")
            r.rpush(k["l1"], "x")
            if watched is None:
                break
            assert _watched_across(r, other, watched, True, k) is None
            assert r.exists(k["x1"], k["l2"]) == 0 and r.type(k["su"]) != b"set"
            assert r.lrange(k["l1"], 0, -1) == [b"x"]
        assert _watched_across(r, other, k["w_a"], False, k) == [2, True, True]
        assert sorted(r.smembers(k["su"])) == [b"a", b"b"] and r.lrange(k["l2"], 0, -1) == [b"x"]
        r.delete(*k.values())


def test_refuse_names_the_setting_for_a_command_across_slots(
        proxies: dict[str, ManagedProcess]) -> None:
    k = _names(uuid.uuid4().hex[:8])
    with redis.Redis(port=proxies["refuse"].port) as r:
        r.sadd(k["s1"], "a")
        pipe = r.pipeline()
        pipe.set(k["x1"], "1").sunionstore(k["su"], [k["s1"], k["s2"]])
        with pytest.raises(redis.ResponseError,
                           match="this command's keys span slots; set cross_slot_transactions: "
                                 "per_shard to run it inside MULTI"):
            pipe.execute()
        assert r.exists(k["x1"], k["su"]) == 0
        r.delete(k["s1"])


@pytest.mark.parametrize("command", [
    ("EVAL", "redis.call('SET', KEYS[2], redis.call('GET', KEYS[1])) return 1", "2"),
    ("SUNIONSTORE",), ("RENAME",), ("SUNIONSTORE", "x"), ("ZUNIONSTORE", "x", "3"),
    ("EVAL", "return redis.call('SET', KEYS[2], 'w')", "2"),
])
def test_commands_across_slots_inside_multi_as_one_redis_server(
    proxies: dict[str, ManagedProcess], redis_standalone: ManagedProcess,
    command: tuple[str, ...],
) -> None:
    """With ``per_shard`` a command whose keys span slots is queued and runs at EXEC as on one
    server: queue-time errors (arity) before EXEC's EXECABORT, runtime errors (syntax,
    WRONGTYPE, a script's error) in EXEC's array; with ``refuse`` it is refused when queued,
    naming the setting, and EXEC aborts."""
    a, b = _keys(2)
    for argv in ((*command, a, b), (*command, a)):
        replies = {}
        for name, port in (("proxy", proxies["per_shard"].port), ("one", redis_standalone.port),
                           ("refuse", proxies["refuse"].port)):
            with RawClient(port) as cl:
                replies[name] = [cl.call(*c) for c in (
                    ("SET", argv[-1], "v"), ("SADD", b + "s", "m"), ("MULTI",), argv,
                    ("GET", a), ("EXEC",), ("GET", b), ("DEL", a, b, b + "s"))]
        assert replies["proxy"] == replies["one"]
        if len(argv) == len(command) + 2 and command[0] != "ZUNIONSTORE":  # keys in 2 slots
            # (a numkeys past the arguments names no key: the node's error at EXEC)
            assert replies["refuse"][3].startswith(b"-CROSSSLOT") and \
                b"cross_slot_transactions: per_shard" in replies["refuse"][3]
            assert replies["refuse"][5].startswith(b"-EXECABORT")


def test_migrate_keys_across_slots_inside_multi(proxies: dict[str, ManagedProcess],
                                                redis_standalone: ManagedProcess) -> None:
    """MIGRATE … KEYS over two slots, queued between commands that write and read its keys:
    it runs at its place, one MIGRATE per slot, as outside MULTI."""
    a, b = _keys(2)
    with RawClient(proxies["per_shard"].port) as cl, \
            redis.Redis(port=redis_standalone.port) as target:
        replies = [cl.call(*c) for c in (
            ("MULTI",), ("SET", a, "1"), ("SET", b, "2"),
            ("MIGRATE", "127.0.0.1", str(redis_standalone.port), "", "0", "5000", "KEYS", a, b),
            ("EXISTS", a), ("EXISTS", b), ("EXEC",))]
        assert replies[-1] == b"*5\r\n+OK\r\n+OK\r\n+OK\r\n:0\r\n:0\r\n", replies
        assert target.mget(a, b) == [b"1", b"2"]
        target.delete(a, b)


@pytest.mark.parametrize("protocol", [2, 3])
def test_pipeline_across_slots_in_a_numbered_database(
        proxies: dict[str, ManagedProcess], redis_standalone: ManagedProcess,
        protocol: int) -> None:
    """With ``databases: 4``, the same pipeline in database 2 (keys stored under that
    database's prefix): the same replies and data as one server's database 2."""
    keys = _names(uuid.uuid4().hex[:8])
    got: dict[str, object] = {}
    for name, port in (("proxy", proxies["databases"].port), ("one", redis_standalone.port)):
        with redis.Redis(port=port, protocol=protocol, db=2) as r:
            r.function_load(_LIB, replace=True)
            got[name] = (_families(r, keys), _data(r, keys))
            r.delete(*keys.values())
    assert got["proxy"] == got["one"]
    with redis.Redis(port=proxies["databases"].port) as r0:
        assert r0.keys("*slotgate-tmp*") == [] and r0.keys("*slotgate-mark*") == []


def test_blocking_commands_across_slots_inside_multi_as_one_redis_server(
        proxies: dict[str, ManagedProcess], redis_standalone: ManagedProcess) -> None:
    """Their argument errors (timeout, direction, COUNT) are Redis' own, in EXEC's array."""
    a, b = _keys(2)
    script: list[tuple[str, ...]] = [
        ("MULTI",), ("BLPOP", a, b, "-1"), ("BRPOP", a, b, "x"), ("BZPOPMIN", a, b, "-1"),
        ("BLMOVE", a, b, "LEFT", "UP", "0"), ("BLMOVE", a, b, "LEFT", "LEFT", "-2"),
        ("BRPOPLPUSH", a, b, "nope"), ("BLMPOP", "x", "2", a, b, "LEFT"),
        ("BLMPOP", "0", "2", a, b, "UP"), ("BZMPOP", "0", "2", a, b, "MIN", "COUNT", "0"),
        ("BLPOP", a, b, "0"), ("BZMPOP", "1", "2", a, b, "MAX"),
        ("XREAD", "BLOCK", "-1", "STREAMS", a, b, "0", "0"),
        ("XREAD", "COUNT", "x", "BLOCK", "0", "STREAMS", a, b, "0", "0"),
        ("XREAD", "BLOCK", "0", "STREAMS", a, b, "0", "bad"),
        ("XREADGROUP", "GROUP", "g", "c", "BLOCK", "-1", "STREAMS", a, b, ">", ">"),
        ("XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS", a, b, ">", ">"),
        ("XREAD", "BLOCK", "0", "STREAMS", a, b, "$", "$"), ("EXEC",)]
    replies = {}
    for name, port in (("proxy", proxies["per_shard"].port), ("one", redis_standalone.port)):
        with RawClient(port) as cl:
            replies[name] = [cl.call(*c) for c in script]
    assert replies["proxy"] == replies["one"]
    assert replies["one"][-1].count(b"-ERR") == 13, replies["one"][-1]
    assert b"-NOGROUP" in replies["one"][-1]


def test_concurrent_pipelines_of_moves_lose_nothing(proxies: dict[str, ManagedProcess]) -> None:
    """Four clients send pipelines of random moves between lists on every master at once
    (each move runs alone at its place, beside other clients' moves and groups): at the end
    every element is in exactly one list."""
    import random
    import threading

    prefix = uuid.uuid4().hex[:8]
    lists = [f"{prefix}:list{i}" for i in range(6)]
    assert len({_master(k) for k in lists}) == 3
    elements = [f"e{i}" for i in range(30)]
    port = proxies["per_shard"].port
    with redis.Redis(port=port) as r:
        for i, e in enumerate(elements):
            r.rpush(lists[i % len(lists)], e)
    failures: list[BaseException] = []

    def client(seed: int) -> None:
        rng = random.Random(seed)
        try:
            with redis.Redis(port=port) as c:
                for _ in range(12):
                    pipe = c.pipeline()
                    for _ in range(3):
                        src, dst = rng.sample(lists, 2)
                        if rng.random() < 0.5:
                            pipe.lmove(src, dst, "LEFT", "RIGHT")
                        else:
                            pipe.rpoplpush(src, dst)
                        pipe.llen(dst)
                    pipe.execute()
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=client, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures
    with redis.Redis(port=port) as r:
        found = [e.decode() for k in lists for e in r.lrange(k, 0, -1)]
        assert sorted(found) == sorted(elements)
        r.delete(*lists)


@pytest.mark.parametrize("protocol", [2, 3])
def test_every_master_commands_inside_a_pipeline(
        proxies: dict[str, ManagedProcess], redis_standalone: ManagedProcess,
        protocol: int) -> None:
    """DBSIZE, KEYS, SCRIPT LOAD/EXISTS/FLUSH and FLUSHDB run on every master at their place
    in EXEC's order (merged as outside MULTI); with ``refuse`` they stay refused."""
    k = _names(uuid.uuid4().hex[:8])
    script = "return 1"
    sha = "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"  # SCRIPT LOAD's reply, checked below

    def run(r: redis.Redis) -> list[object]:
        pipe = r.pipeline()
        pipe.dbsize().mset({k["s1"]: "1", k["s2"]: "2", k["s3"]: "3"}).dbsize()
        pipe.keys(k["s1"][:-2] + "s*").script_load(script)
        pipe.script_exists(sha, "0" * 40)
        pipe.rename(k["s1"], k["z1"]).keys(k["s1"][:-2] + "[sz]*").delete(*k.values()).dbsize()
        out = pipe.execute()
        out[3], out[7] = sorted(out[3]), sorted(out[7])
        out[0], out[2], out[9] = 0, out[2] - out[0], out[9] - out[0]  # other tests' keys aside
        return out

    with redis.Redis(port=proxies["per_shard"].port, protocol=protocol) as r, \
            redis.Redis(port=redis_standalone.port, protocol=protocol) as one:
        got = run(r)
        assert got == run(one)
        assert got[4] == sha and got[5] == [True, False]  # (redis-py decodes the sha)
        r.set(k["x1"], "v")
        pipe = r.pipeline()
        pipe.set(k["x2"], "v").script_flush().flushdb().dbsize().set(k["x3"], "v").dbsize()
        assert pipe.execute() == [True, True, True, 0, True, 1]
        assert r.keys("*") == [k["x3"].encode()] and r.script_exists(sha) == [False]
        r.delete(k["x3"])
    with redis.Redis(port=proxies["refuse"].port) as r:
        with pytest.raises(redis.ResponseError, match="'dbsize' cannot run inside MULTI"):
            r.pipeline().set(k["x1"], "v").dbsize().execute()
