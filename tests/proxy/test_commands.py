"""The proxy in front of a real cluster, driven by plain (non-cluster) clients.

Expected replies come from real servers: a standalone redis-server given the same commands,
or the cluster nodes themselves.
"""

from __future__ import annotations

import uuid

import pytest
import redis

from slotgate.protocol.slots import SLOT_COUNT, key_slot
from slotgate.proxy.routing.splitter import array_elements
from tests.conftest import ClusterBackend
from tests.support import ManagedProcess, RawClient, redis_cli


@pytest.fixture
def prefix() -> str:
    return f"t{uuid.uuid4().hex[:8]}:"


def keys_for_every_slot(prefix: str) -> list[str]:
    by_slot: dict[int, str] = {}
    i = 0
    while len(by_slot) < SLOT_COUNT:
        key = f"{prefix}{i}"
        by_slot.setdefault(key_slot(key.encode()), key)
        i += 1
    return [by_slot[s] for s in range(SLOT_COUNT)]


@pytest.mark.parametrize("protocol", [2, 3])
def test_single_key_commands_in_every_slot(slotgate: ManagedProcess, prefix: str,
                                           protocol: int) -> None:
    keys = keys_for_every_slot(prefix)
    r = slotgate.client(protocol=protocol)
    pipe = r.pipeline(transaction=False)
    for i, k in enumerate(keys):
        pipe.set(k, i)
        pipe.incr(k)
        pipe.get(k)
    results = pipe.execute()
    assert results[0::3] == [True] * SLOT_COUNT
    assert results[1::3] == [i + 1 for i in range(SLOT_COUNT)]
    assert results[2::3] == [str(i + 1).encode() for i in range(SLOT_COUNT)]
    assert r.delete(*keys) == SLOT_COUNT


def test_cross_slot_multi_key_commands_match_standalone(
    slotgate: ManagedProcess, redis_standalone: ManagedProcess, prefix: str
) -> None:
    keys = [f"{prefix}{i}" for i in range(50)]
    assert len({key_slot(k.encode()) for k in keys}) > 40
    missing = [f"{prefix}missing{i}" for i in range(5)]
    results = []
    for server in (slotgate, redis_standalone):
        r = server.client()
        out = [
            r.mset({k: f"v{i}" for i, k in enumerate(keys[:30])}),
            r.mget(keys + missing),
            r.mget(list(reversed(keys))),
            r.exists(*keys, *missing, keys[0], keys[0]),
            r.touch(*keys[:40], *missing),
            r.delete(*keys[:10], *missing, keys[0]),
            r.unlink(*keys[10:20], keys[10]),
            r.mget(keys[:25]),
            r.exists(*keys),
            r.delete(*keys),
        ]
        results.append(out)
    assert results[0] == results[1]
    assert results[0][1][:3] == [b"v0", b"v1", b"v2"]


def test_scripts_across_slots_run_and_tagged_multikey_commands_are_served(
    slotgate: ManagedProcess, prefix: str
) -> None:
    with RawClient(slotgate.port) as c:
        # KEYS in several slots: run on copies (tests/proxy/test_crossslot_scripts.py).
        assert c.call("EVAL", "return 1", "2", f"{prefix}a", f"{prefix}b") == b":1\r\n"
        assert c.call("FCALL", "f", "2", f"{prefix}a", f"{prefix}b") == (
            b"-ERR Function not found\r\n")
        # Same slot via hash tag: served.
        assert c.call("MSETNX", f"{{{prefix}}}a", "1", f"{{{prefix}}}b", "2") == b":1\r\n"
        assert c.call("RENAME", f"{{{prefix}}}a", f"{{{prefix}}}c") == b"+OK\r\n"
        assert c.call("DEL", f"{{{prefix}}}b", f"{{{prefix}}}c") == b":2\r\n"


def test_redis_cli_as_a_plain_client(slotgate: ManagedProcess, prefix: str) -> None:
    port = str(slotgate.port)
    assert redis_cli("-p", port, "SET", f"{prefix}x", "hello").stdout.strip() == "OK"
    assert redis_cli("-p", port, "GET", f"{prefix}x").stdout.strip() == "hello"
    out = redis_cli("-p", port, "MGET", f"{prefix}x", f"{prefix}y", f"{prefix}x").stdout
    assert out.split("\n")[:3] == ["hello", "", "hello"]
    assert redis_cli("-p", port, "-3", "PING").stdout.strip() == "PONG"
    assert redis_cli("-p", port, "DEL", f"{prefix}x").stdout.strip() == "1"


def test_command_getkeysandflags_matches_real_redis(
    slotgate: ManagedProcess, redis_standalone: ManagedProcess,
) -> None:
    cmd = ["COMMAND", "GETKEYSANDFLAGS", "LMOVE", "a", "b", "LEFT", "RIGHT"]
    with RawClient(slotgate.port) as p, RawClient(redis_standalone.port) as d:
        assert p.call(*cmd) == d.call(*cmd)


def test_local_commands_match_real_redis(
    slotgate: ManagedProcess, redis_standalone: ManagedProcess,
    redis_cluster_enabled: ManagedProcess,
) -> None:
    same_as_standalone = [
        ["PING"], ["PING", "hi"], ["PING", "a", "b"], ["ECHO", "x y"], ["ECHO"],
        ["SELECT", "0"], ["SELECT", "x"], ["CLIENT", "GETNAME"], ["CLIENT", "SETNAME", "a b"],
        ["CLIENT", "SETNAME", "app"], ["CLIENT", "GETNAME"], ["CLIENT", "NOPE"],
        ["COMMAND", "COUNT"], ["COMMAND", "INFO", "get", "mset"], ["COMMAND", "GETKEYS", "MSET", "a", "1", "b", "2"],
        ["COMMAND", "GETKEYS", "GET"], ["COMMAND", "HELP"],
        ["HELLO", "4"], ["HELLO", "x"], ["AUTH", "pw"],
        ["NOSUCHCOMMAND", "a", "b"], ["GET"], ["SET", "k"],
    ]
    with RawClient(slotgate.port) as p, RawClient(redis_standalone.port) as d:
        assert p.pipeline([[a.encode() for a in c] for c in same_as_standalone]) == \
            d.pipeline([[a.encode() for a in c] for c in same_as_standalone])
    # Dict order differs between two servers: compare as sets.
    filterby = ("COMMAND", "LIST", "FILTERBY", "PATTERN", "xa*")
    with RawClient(slotgate.port) as p, RawClient(redis_standalone.port) as d:
        got, want = set(array_elements(p.call(*filterby))), set(array_elements(d.call(*filterby)))
    assert got == want and len(want) == 3
    same_as_cluster_node = [["SELECT", "1"], ["READWRITE"], ["READONLY"], ["CLUSTER", "KEYSLOT", "foo{bar}zap"],
                            ["CLUSTER", "KEYSLOT", "somekey"]]
    with RawClient(slotgate.port) as p, RawClient(redis_cluster_enabled.port) as c:
        cmds = [[a.encode() for a in cmd] for cmd in same_as_cluster_node]
        assert p.pipeline(cmds) == c.pipeline(cmds)


def test_hello_options_match_real_redis(slotgate: ManagedProcess,
                                        redis_standalone: ManagedProcess) -> None:
    # Options act one by one (a name set before a bad option stays); the protocol version is
    # read as Redis' string2ll; the bad option is printed as a C string, CR/LF as spaces.
    commands = [
        [b"HELLO", b"2", b"SETNAME", b"ok", b"BAD"], [b"CLIENT", b"GETNAME"],
        [b"HELLO", b"2", b"SETNAME", b"a2", b"AUTH", b"foo", b"bar"], [b"CLIENT", b"GETNAME"],
        [b"HELLO", b"2", b"AUTH", b"foo", b"bar", b"SETNAME", b"a b"],
        [b"HELLO", b"2", b"SETNAME", b"ok2", b"SETNAME", b"a b"], [b"CLIENT", b"GETNAME"],
        [b"HELLO", b"03"], [b"HELLO", b"+3"], [b"HELLO", b" 3"], [b"HELLO", b"-1"],
        [b"HELLO", b"99999999999999999999"], [b"HELLO", b"3", b"x" * 200],
        [b"HELLO", b"3", b"a\r\nb\xff\x00c"], [b"HELLO", b"3", b"AUTH"],
        [b"HELLO", b"3", b"setname"], [b"HELLO", b"2", b"SETNAME", b""], [b"CLIENT", b"GETNAME"],
    ]
    with RawClient(slotgate.port) as p, RawClient(redis_standalone.port) as d:
        got, want = p.pipeline(commands), d.pipeline(commands)
    for argv, ours, real in zip(commands, got, want, strict=True):
        if argv[:4] == [b"HELLO", b"2", b"SETNAME", b""]:  # the reply carries the client id
            ours, real = ours[:4], real[:4]
        assert ours == real, argv


@pytest.mark.parametrize("protocol", [2, 3])
def test_hello_switches_protocol_and_reports_standalone(slotgate: ManagedProcess,
                                                        protocol: int) -> None:
    r = slotgate.client(protocol=protocol)
    reply = r.execute_command("HELLO", str(protocol), "SETNAME", "me")
    if isinstance(reply, list):
        reply = dict(zip(reply[::2], reply[1::2], strict=True))
    assert reply[b"proto"] == protocol and reply[b"mode"] == b"standalone"
    assert r.execute_command("CLIENT", "GETNAME") == b"me"
    with RawClient(slotgate.port) as c:
        assert c.call("HELLO", "3")[:2] == b"%7"
        assert c.call("GET", "nosuchkey-hello") == b"_\r\n"
        assert c.call("HELLO", "2")[:3] == b"*14"
        assert c.call("GET", "nosuchkey-hello") == b"$-1\r\n"


def test_keyless_fanout_dbsize_keys_info(
    slotgate: ManagedProcess, cluster_backend: ClusterBackend, prefix: str
) -> None:
    r = slotgate.client()
    keys = [f"{prefix}{i}" for i in range(100)]
    r.mset({k: "1" for k in keys})
    masters = [n for n in cluster_backend.nodes
               if n.client().info("replication")["role"] == "master"]
    assert r.dbsize() == sum(m.client().dbsize() for m in masters)
    assert sorted(r.keys(f"{prefix}*")) == sorted(k.encode() for k in keys)
    info = r.info()
    assert info["db0"]["keys"] == r.dbsize()
    assert info["cluster_enabled"] == 0
    assert info["cluster_slots_covered"] == SLOT_COUNT
    assert info["cluster_masters"] == len(masters)
    with RawClient(slotgate.port) as c:
        text = c.call("INFO", "keyspace")
    assert b"# Keyspace\r\ndb0:keys=100," in text and b"# Proxy" not in text
    r3 = slotgate.client(protocol=3)
    assert r3.info("proxy")["cluster_masters"] == len(masters)
    assert r.delete(*keys) == 100


def test_script_load_reaches_every_master(slotgate: ManagedProcess,
                                          cluster_backend: ClusterBackend) -> None:
    r = slotgate.client()
    masters = [n for n in cluster_backend.nodes
               if n.client().info("replication")["role"] == "master"]
    sha = r.script_load("return 1")
    assert r.script_exists(sha, "0" * 40) == [True, False]
    assert all(m.client().script_exists(sha) == [True] for m in masters)


def test_scan_visits_every_key_once_over_all_masters(slotgate: ManagedProcess,
                                                      prefix: str) -> None:
    r = slotgate.client()
    keys = {f"{prefix}{i}".encode() for i in range(3000)}
    pipe = r.pipeline(transaction=False)
    for k in keys:
        pipe.set(k, "x")
    pipe.execute()
    seen: list[bytes] = []
    cursor = 0
    calls = 0
    while True:
        cursor, batch = r.scan(cursor, match=f"{prefix}*", count=100)
        seen.extend(batch)
        calls += 1
        if cursor == 0:
            break
    assert set(seen) == keys
    assert len(seen) == len(keys)  # no rehashing happened, so no duplicates either
    assert calls > 3
    with RawClient(slotgate.port) as c:
        assert c.call("SCAN", "abc") == b"-ERR invalid cursor\r\n"
    r.delete(*keys)


def test_flushall_clears_every_master(slotgate: ManagedProcess,
                                      cluster_backend: ClusterBackend, prefix: str) -> None:
    r = slotgate.client()
    r.mset({f"{prefix}{i}": i for i in range(50)})
    assert r.flushall() is True
    assert r.dbsize() == 0
    assert all(n.client().dbsize() == 0 for n in cluster_backend.nodes
               if n.client().info("replication")["role"] == "master")


def test_transactions_pin_to_one_slot(slotgate: ManagedProcess, prefix: str) -> None:
    r = slotgate.client()
    tag = f"{{{prefix}}}"
    pipe = r.pipeline(transaction=True)
    pipe.set(f"{tag}a", 1).incr(f"{tag}a").get(f"{tag}a")
    assert pipe.execute() == [True, 2, b"2"]
    with RawClient(slotgate.port) as c:
        replies = c.pipeline([[b"MULTI"], [b"SET", f"{prefix}x".encode(), b"1"],
                              [b"SET", f"{prefix}y".encode(), b"1"], [b"EXEC"]])
        assert replies == [b"+OK\r\n", b"+QUEUED\r\n", b"+QUEUED\r\n",
                           b"-CROSSSLOT Keys in request don't hash to the same slot (slotgate: "
                           b"this transaction's keys span slots; set cross_slot_transactions: "
                           b"per_shard to run one MULTI/EXEC per slot)\r\n"]
        assert c.call("EXEC") == b"-ERR EXEC without MULTI\r\n"
        replies = c.pipeline([[b"MULTI"], [b"NOPE"], [b"EXEC"]])
        assert replies[2] == b"-EXECABORT Transaction discarded because of previous errors.\r\n"
        replies = c.pipeline([[b"MULTI"], [b"DBSIZE"], [b"EXEC"]])
        assert replies[1:] == [
            b"-ERR slotgate: 'dbsize' cannot run inside MULTI through the proxy\r\n",
            b"-EXECABORT Transaction discarded because of previous errors.\r\n"]
        # Keyless transaction: runs on one master.
        assert c.pipeline([[b"MULTI"], [b"PING"], [b"ECHO", b"x"], [b"EXEC"]])[3] == \
            b"*2\r\n+PONG\r\n$1\r\nx\r\n"
    # WATCH: a change from another client aborts the transaction.
    with r.pipeline(transaction=True) as pipe:
        pipe.watch(f"{tag}a")
        r.set(f"{tag}a", 100)
        pipe.multi()
        pipe.set(f"{tag}a", 5)
        with pytest.raises(redis.WatchError):
            pipe.execute()
    assert r.get(f"{tag}a") == b"100"
    # WATCH, then an untouched key: the transaction runs.
    with r.pipeline(transaction=True) as pipe:
        pipe.watch(f"{tag}a")
        pipe.multi()
        pipe.incr(f"{tag}a")
        assert pipe.execute() == [101]


def test_blocking_command_gets_value_pushed_by_another_client(slotgate: ManagedProcess,
                                                              prefix: str) -> None:
    import threading

    r = slotgate.client()
    q = f"{prefix}q"
    t = threading.Timer(0.3, lambda: slotgate.client().rpush(q, "job"))
    t.start()
    try:
        assert r.blpop([q], timeout=5) == (q.encode(), b"job")
    finally:
        t.join()
    assert r.ping() is True
    assert r.blpop([q], timeout=0.2) is None


@pytest.mark.parametrize("protocol", [2, 3])
def test_cross_slot_mget_over_other_types_matches_standalone(
    slotgate: ManagedProcess, redis_standalone: ManagedProcess, prefix: str, protocol: int
) -> None:
    # Keys in distinct slots (each one a part of its own), some holding other types, some
    # missing, one repeated (then two keys share a slot): MGET answers nulls for those.
    keys = [f"{prefix}{i}" for i in range(8)]
    assert len({key_slot(k.encode()) for k in keys}) == len(keys)
    setup = [["SET", keys[0], "s0"], ["RPUSH", keys[1], "l"], ["HSET", keys[2], "f", "v"],
             ["SADD", keys[3], "m"], ["SET", keys[5], "s5"], ["ZADD", keys[6], "1", "z"]]
    reads = [
        ["MGET", *keys],
        ["MGET", keys[1], keys[2]],
        ["MGET", keys[1], keys[0], keys[1]],
        ["MGET", *reversed(keys), keys[3]],
        ["GET", keys[1]],  # GET itself still refuses another type
    ]
    replies = []
    for server in (slotgate, redis_standalone):
        with RawClient(server.port) as c:
            if protocol == 3:
                assert c.call("HELLO", "3")[:1] == b"%"
            assert all(r[:1] in (b"+", b":") for r in c.pipeline(setup))  # type: ignore[arg-type]
            replies.append(c.pipeline(reads))  # type: ignore[arg-type]
            assert c.call("DEL", *keys) == b":6\r\n"
    assert replies[0] == replies[1]
    null = b"_\r\n" if protocol == 3 else b"$-1\r\n"
    assert replies[0][0] == b"*8\r\n$2\r\ns0\r\n" + null * 4 + b"$2\r\ns5\r\n" + null * 2
    assert replies[0][4].startswith(b"-WRONGTYPE ")
