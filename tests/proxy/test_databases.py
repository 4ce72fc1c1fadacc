"""Numbered databases through the proxy (``databases: 16``), against one redis-server of this
module's own: the same scripts, keys without hash tags, RESP2 and RESP3 (a real cluster,
then our nodes, behind the proxy).

Whole-database commands (KEYS, SCAN, DBSIZE, FLUSHDB, SWAPDB) run in databases above 0 only:
database 0 of the session's cluster holds other tests' keys.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import hiredis
import pytest
import redis
import trio

from slotgate.protocol.resp import encode_command
from slotgate.protocol.slots import key_slot
from slotgate.proxy.backend.connections import DirectConnection
from slotgate.proxy.front import db_info
from slotgate.proxy.front.databases import prefixed, strip
from slotgate.proxy.ops.metrics import ProxyMetrics
from slotgate.proxy.ops.settings import ProxySettings
from slotgate.proxy.routing.splitter import array_elements
from tests.conftest import ClusterBackend
from tests.support import (
    ManagedProcess,
    RawClient,
    redis_server,
    running,
    slotgate_proxy,
    wait_blocked,
    wait_until,
)


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagedProcess]:
    proc = redis_server(tmp_path_factory.mktemp("dbs-redis"))
    with running(proc):
        yield proc


@pytest.fixture(scope="module")
def dbs_proxy(cluster_backend: ClusterBackend,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagedProcess]:
    workdir = Path(tmp_path_factory.mktemp("dbs-proxy"))
    cfg = workdir / "proxy.yaml"
    cfg.write_text("databases: 16\n")
    proc = slotgate_proxy(workdir, cluster_backend.ports[:2], ["--config", str(cfg)])
    with running(proc):
        yield proc


NAMES = ("a", "b", "c", "l", "z", "x", "y")


def _keys() -> dict[str, str]:
    """Fresh names without hash tags, each in a slot of its own (one with braces)."""
    while True:
        tag = uuid.uuid4().hex[:8]
        keys = {n: f"db{tag}{n}" for n in NAMES}
        keys["c"] = "}{" + keys["c"] + "}x"
        if len({key_slot(k.encode()) for k in keys.values()}) == len(keys):
            return keys


SCRIPT: list[list[str]] = [
    ["SELECT", "16"], ["SELECT", "-1"], ["SELECT", "x"], ["SELECT", "3"],
    ["SET", "a", "v3"], ["RPUSH", "l", "x", "y"], ["SADD", "b", "m"], ["SET", "c", "braces"],
    ["GET", "a"], ["MGET", "a", "b", "c", "nope"], ["EXISTS", "a", "b", "c", "l"], ["DBSIZE"],
    ["KEYS", "*"], ["KEYS", "db*a"], ["TYPE", "b"], ["RENAME", "a", "z"], ["GET", "z"],
    ["SUNIONSTORE", "a", "b", "b"], ["SMEMBERS", "a"], ["LMPOP", "2", "z", "l", "LEFT"],
    ["BLPOP", "nope", "l", "1"], ["RPUSH", "l", "q"], ["BLMOVE", "l", "z", "LEFT", "LEFT", "1"],
    ["XADD", "x", "1-1", "f", "v"], ["XADD", "y", "1-2", "g", "w"],
    ["XREAD", "STREAMS", "y", "x", "0", "0"], ["XREAD", "STREAMS", "x", "0"],
    ["XREAD", "BLOCK", "50", "STREAMS", "x", "y", "$", "$"],
    ["SELECT", "0"], ["EXISTS", "a", "b", "c", "l", "z"], ["GET", "c"], ["SET", "a", "v0"],
    ["MOVE", "a", "3"], ["MOVE", "a", "0"], ["MOVE", "a", "16"], ["MOVE", "a", "x"],
    ["SELECT", "3"], ["MOVE", "a", "4"], ["EXISTS", "a"], ["SET", "a", "again"],
    ["MOVE", "a", "4"], ["GET", "a"], ["MOVE", "nope", "4"], ["MOVE", "c", "0"],
    ["SELECT", "0"], ["GET", "c"], ["DEL", "c"], ["SELECT", "4"], ["GET", "a"],
    ["COPY", "a", "b", "DB", "5"], ["COPY", "a", "b", "DB", "5"],
    ["COPY", "a", "b", "DB", "5", "REPLACE"], ["COPY", "a", "a", "DB", "4"],
    ["COPY", "a", "a", "DB", "x"], ["COPY", "a", "a", "DB", "16"], ["COPY", "a", "a", "DB", "6"],
    ["COPY", "nope", "a", "DB", "6"], ["COPY", "a", "c", "BOGUS"], ["COPY", "a", "c"],
    ["GET", "c"], ["SELECT", "5"], ["GET", "b"], ["SELECT", "6"], ["GET", "a"],
    ["SWAPDB", "4", "6"], ["SWAPDB", "x", "1"], ["SWAPDB", "1", "y"], ["SWAPDB", "1", "16"],
    ["SWAPDB", "6", "6"], ["DBSIZE"], ["KEYS", "*"], ["GET", "c"], ["SELECT", "4"],
    ["DBSIZE"], ["KEYS", "*"], ["GET", "a"], ["RANDOMKEY"], ["FLUSHDB", "BOGUS"],
    ["FLUSHDB"], ["DBSIZE"], ["RANDOMKEY"], ["SELECT", "6"], ["DBSIZE"],
    ["SELECT", "3"], ["DBSIZE"], ["FLUSHDB", "ASYNC"], ["SELECT", "5"], ["FLUSHDB"],
    ["SELECT", "6"], ["FLUSHDB"], ["RESET"], ["GET", "a"],
]
# Replies compared as sets (key order is a server's own).
UNORDERED = frozenset({"KEYS"})


def _run(port: int, proto: int, keys: dict[str, str]) -> list[bytes]:
    with RawClient(port) as c:
        if proto == 3:
            assert c.call("HELLO", "3")[:1] == b"%"
        out = []
        for cmd in SCRIPT:
            reply = c.call(*[keys.get(a, a) for a in cmd])
            if cmd[0] in UNORDERED and reply[:1] == b"*":
                reply = b"".join(sorted(array_elements(reply)))
            if cmd[0] == "RESET":
                reply = reply[:6]
            out.append(reply)
    return out


@pytest.mark.parametrize("proto", [2, 3])
def test_same_replies_as_one_redis_server(dbs_proxy: ManagedProcess, standalone: ManagedProcess,
                                          proto: int) -> None:
    keys = _keys()
    # Other test files of this worker's session leave keys in databases above 0 (their own
    # proxies with `databases`): the script's DBSIZE/KEYS count from empty databases.
    with RawClient(dbs_proxy.port) as c:
        for db in range(1, 16):
            assert c.call("SELECT", str(db)) == b"+OK\r\n"
            assert c.call("FLUSHDB") == b"+OK\r\n"
        assert c.call("SELECT", "0") == b"+OK\r\n"
    want = _run(standalone.port, proto, keys)
    got = _run(dbs_proxy.port, proto, keys)
    for cmd, w, g in zip(SCRIPT, want, got, strict=True):
        assert g == w, cmd


# Inside MULTI: keys of one slot (a transaction's keys must share one: cross_slot_transactions
# is refuse here), "k" standing for a fresh name.
MULTI_SCRIPT: list[list[str]] = [
    ["SELECT", "3"], ["SET", "k", "three"], ["MULTI"], ["SET", "k", "3b"], ["SELECT", "4"],
    ["SET", "k", "four"], ["SELECT", "99"], ["SELECT", "x"], ["GET", "k"], ["MOVE", "k", "5"],
    ["MOVE", "k", "4"], ["MOVE", "{k}nope", "5"], ["MOVE", "k", "99"], ["MOVE", "k", "y"],
    ["EXEC"], ["GET", "k"], ["SELECT", "5"], ["GET", "k"], ["SELECT", "3"], ["GET", "k"],
    ["MULTI"], ["SELECT", "6"], ["DISCARD"], ["GET", "k"],
    ["MULTI"], ["SELECT", "7"], ["RPUSH", "{k}l", "x", "y"], ["BLPOP", "{k}l", "0"],
    ["LMPOP", "1", "{k}l", "LEFT"], ["COPY", "k", "{k}c", "DB", "8"], ["GET", "k"], ["EXEC"],
    ["GET", "k"], ["SELECT", "8"], ["GET", "{k}c"], ["DEL", "{k}c"],
    ["WATCH", "k"], ["SELECT", "3"], ["SET", "k", "changed"], ["MULTI"], ["SELECT", "9"],
    ["EXEC"], ["GET", "k"],
    ["SELECT", "3"], ["DEL", "k"], ["SELECT", "5"], ["DEL", "k"], ["SELECT", "7"],
    ["DEL", "k"], ["SELECT", "0"],
]


@pytest.mark.parametrize("proto", [2, 3])
def test_select_move_copy_inside_multi_as_one_redis_server(
    dbs_proxy: ManagedProcess, standalone: ManagedProcess, proto: int,
) -> None:
    k = "mx" + uuid.uuid4().hex[:8]

    def run(port: int) -> list[bytes]:
        with RawClient(port) as c:
            if proto == 3:
                assert c.call("HELLO", "3")[:1] == b"%"
            return [c.call(*[a.replace("k", k) if "k" in a and a != "KEYS" else a
                             for a in cmd]).replace(k.encode(), b"K") for cmd in MULTI_SCRIPT]

    want = run(standalone.port)
    got = run(dbs_proxy.port)
    for cmd, w, g in zip(MULTI_SCRIPT, want, got, strict=True):
        assert g == w, cmd


def test_whole_database_commands_are_refused_inside_multi(dbs_proxy: ManagedProcess) -> None:
    """A transaction runs on one node: DBSIZE, FLUSHDB, SWAPDB … would be partial there."""
    with RawClient(dbs_proxy.port) as c:
        c.call("SELECT", "2")
        assert c.call("MULTI") == b"+OK\r\n"
        for cmd in (["DBSIZE"], ["FLUSHDB"], ["SWAPDB", "2", "3"], ["KEYS", "*"],
                    ["RANDOMKEY"], ["SCAN", "0"]):
            name = cmd[0].lower()
            assert c.call(*cmd) == b"-ERR slotgate: '%s' cannot run inside MULTI through the " \
                                   b"proxy\r\n" % name.encode()
        assert c.call("EXEC").startswith(b"-EXECABORT")


def test_scan_walks_one_database(dbs_proxy: ManagedProcess) -> None:
    keys = [f"scan{uuid.uuid4().hex[:6]}:{i}" for i in range(40)]
    with RawClient(dbs_proxy.port) as c:
        assert c.call("SELECT", "7") == b"+OK\r\n"
        c.call("MSET", *[x for k in keys[:30] for x in (k, "v")])
        c.call("SELECT", "8")
        c.call("MSET", *[x for k in keys[30:] for x in (k, "v")])
        c.call("SELECT", "7")
        seen: list[bytes] = []
        cursor = b"0"
        for _ in range(10_000):  # bounded
            head, names = array_elements(c.call("SCAN", cursor, "COUNT", "50"))
            seen.extend(n.split(b"\r\n")[1] for n in array_elements(names))
            cursor = head.split(b"\r\n")[1]
            if cursor == b"0":
                break
        assert sorted(set(seen)) == sorted(k.encode() for k in keys[:30])
        c.call("FLUSHDB")
        c.call("SELECT", "8")
        c.call("FLUSHDB")


def test_database_0_is_what_direct_cluster_clients_see(dbs_proxy: ManagedProcess,
                                                      cluster_backend: ClusterBackend) -> None:
    key = f"direct{uuid.uuid4().hex[:6]}"
    with RawClient(dbs_proxy.port) as c:
        c.call("SET", key, "zero")
        c.call("SELECT", "2")
        c.call("SET", key, "two")
    direct = redis.RedisCluster(host="127.0.0.1", port=cluster_backend.ports[0])
    try:
        assert direct.get(key) == b"zero"
        assert direct.get(prefixed(key.encode(), 2)) == b"two"
        assert key_slot(prefixed(key.encode(), 2)) == key_slot(key.encode())
        direct.delete(key, prefixed(key.encode(), 2))
    finally:
        direct.close()


def test_redis_py_select_move_copy_swapdb(dbs_proxy: ManagedProcess,
                                          standalone: ManagedProcess) -> None:
    """What redis-py's own tests of MOVE, COPY … DB and SWAPDB do, on both servers."""
    def run(port: int) -> list[object]:
        k = "rp" + uuid.uuid4().hex[:6]
        r9 = redis.Redis(port=port, db=9)
        r10 = redis.Redis(port=port, db=10)
        out: list[object] = []
        try:
            out.append(r9.set(k, "foo"))
            out.append(r9.move(k, 10))
            out.append(r9.get(k))
            out.append(r10.get(k))
            out.append(r10.copy(k, k + "c", destination_db=9))
            out.append(r9.get(k + "c"))
            r9.set(k + "x", "nine")
            out.append(r9.swapdb(9, 10))
            out.append(sorted(r9.keys(k + "*")))
            out.append(sorted(r10.keys(k + "*")))
            out.append(r10.get(k + "x"))
        finally:
            r9.flushdb()
            r10.flushdb()
            r9.close()
            r10.close()
        return [o.replace(k.encode(), b"K") if isinstance(o, bytes) else
                [x.replace(k.encode(), b"K") for x in o] if isinstance(o, list) else o
                for o in out]

    assert run(dbs_proxy.port) == run(standalone.port)


def test_strip_takes_off_its_own_database_only() -> None:
    a, b = prefixed(b"k{x}", 3), prefixed(b"k", 31)
    raw = b"*3\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n$1\r\nv\r\n" % (len(a), a, len(b), b)
    assert strip(raw, 3) == b"*3\r\n$4\r\nk{x}\r\n$%d\r\n%s\r\n$1\r\nv\r\n" % (len(b), b)


def test_client_list_and_info_show_the_clients_database(dbs_proxy: ManagedProcess) -> None:
    with RawClient(dbs_proxy.port) as c, RawClient(dbs_proxy.port) as other:
        assert b" db=0 " in c.call("CLIENT", "INFO")
        c.call("SELECT", "5")
        assert b" db=5 " in c.call("CLIENT", "INFO")
        me = int(c.call("CLIENT", "ID")[1:-2])
        line = next(x for x in other.call("CLIENT", "LIST").split(b"\n")
                    if x.startswith(b"$") is False and b"id=%d " % me in x)
        assert b" db=5 " in line
        c.call("MULTI")
        c.call("SELECT", "7")
        c.call("EXEC")
        assert b" db=7 " in c.call("CLIENT", "INFO")
        c.call("MULTI")
        c.call("SELECT", "9")
        c.call("DISCARD")
        assert b" db=7 " in c.call("CLIENT", "INFO")


def _decoded(frame: bytes) -> tuple[object, ...]:
    reader = hiredis.Reader()
    reader.feed(frame)
    return tuple(reader.gets())


def _notifications(port: int, run: str, proto: int, expected: int | None) -> list[tuple[object, ...]]:
    """Keyspace notifications of several databases' keys, as a subscriber of each kind sees
    them (the standalone's: ``expected`` None, read until a second of silence; through the
    proxy: until ``expected`` arrived, then a second more so an extra one would show)."""
    k = f"{run}k"
    subscriptions = [("SUBSCRIBE", f"__keyspace@3__:{k}"), ("SUBSCRIBE", "__keyevent@3__:set"),
                     ("SUBSCRIBE", "__keyevent@0__:set"), ("PSUBSCRIBE", f"__keyspace@3__:{run}*"),
                     ("PSUBSCRIBE", "__keyevent@*__:del"), ("PSUBSCRIBE", "__keyevent@3__:*"),
                     # wildcards in the database part: every database's keyspace channels
                     ("PSUBSCRIBE", f"__keyspace@*__:{run}*"), ("PSUBSCRIBE", "__keyspace@?__:*"),
                     ("PSUBSCRIBE", "__key*__:*"), ("PSUBSCRIBE", "__keyspace@0__:*")]
    b, c_ = f"{run}{{t}}b", f"{run}{{t}}c"  # one slot: a RENAME within it
    script = [["SELECT", "3"], ["SET", k, "1"], ["SET", b, "2"], ["DEL", k],
              ["RENAME", b, c_], ["SELECT", "0"], ["SET", k, "0"], ["DEL", k],
              ["SELECT", "5"], ["SET", k, "5"], ["DEL", k], ["SELECT", "3"],
              ["DEL", c_], ["SELECT", "0"]]
    with RawClient(port) as sub, RawClient(port) as c:
        if proto == 3:
            sub.call("HELLO", "3")
        for cmd, name in subscriptions:
            assert _decoded(sub.call(cmd, name))[1] == name.encode()
        for argv in script:
            assert not c.call(*argv).startswith(b"-"), argv
        got: list[tuple[object, ...]] = []
        while True:  # the standalone's are all sent once the script's replies are in
            wait_s = 10.0 if expected is not None and len(got) < expected else 1.0
            try:
                event = _decoded(sub.read(timeout_s=wait_s))
            except TimeoutError:
                return got
            if any(run.encode() in p for p in event[1:] if isinstance(p, bytes)):
                got.append(event)  # else another test's key


@pytest.fixture
def notifying(dbs_proxy: ManagedProcess, standalone: ManagedProcess) -> Iterator[None]:
    """notify-keyspace-events KEA on the standalone server and (CONFIG SET through the
    proxy) every node, then as it was."""
    olds = []
    for port in (dbs_proxy.port, standalone.port):
        with RawClient(port) as c:
            olds.append((port, _decoded(c.call("CONFIG", "GET", "notify-keyspace-events"))[1]))
            assert c.call("CONFIG", "SET", "notify-keyspace-events", "KEA") == b"+OK\r\n"
    try:
        yield
    finally:
        for port, old in olds:
            with RawClient(port) as c:
                c.call("CONFIG", "SET", "notify-keyspace-events", old)


@pytest.mark.parametrize("proto", [2, 3])
def test_keyspace_notifications_name_the_clients_database(
    dbs_proxy: ManagedProcess, standalone: ManagedProcess, notifying: None, proto: int,
) -> None:
    run = "n" + uuid.uuid4().hex[:6]
    want = _notifications(standalone.port, run, proto, None)
    assert len(want) > 10
    got = _notifications(dbs_proxy.port, run, proto, len(want))
    assert Counter(got) == Counter(want)


def test_redis_py_suite_style_in_database_9(dbs_proxy: ManagedProcess,
                                             standalone: ManagedProcess) -> None:
    """What redis-py's own test suite does with its client of database 9 (its default
    ``redis://localhost:6379/9``): FLUSHDB around each test, fixed key names, DBSIZE, KEYS,
    RANDOMKEY, SCAN, pipelines, CLIENT INFO's db, a SELECT sent as a raw command. Database 9
    of the proxy is this test's alone."""
    def run(port: int) -> list[object]:
        r = redis.Redis(port=port, db=9)
        out: list[object] = []
        try:
            r.flushdb()
            r.set("a", "foo")
            r.set("b", "bar")
            out.append(r.dbsize())
            out.append(sorted(r.keys()))
            out.append(sorted(r.keys("a*")))
            out.append(r.randomkey() in (b"a", b"b"))
            out.append(sorted(r.scan_iter(count=1)))
            out.append(r.client_info()["db"])
            with r.pipeline(transaction=False) as pipe:
                out.append(pipe.set("c", "1").incr("c").get("a").mget("a", "b", "c").execute())
            with r.pipeline() as pipe:  # MULTI/EXEC: keys of one slot
                out.append(pipe.set("{t}x", "1").incr("{t}x").rpush("{t}l", "p", "q")
                           .blpop(["{t}l"], 1).execute())
            out.append(r.execute_command("SELECT", "3"))
            out.append(r.get("a"))
            out.append(r.client_info()["db"])
            out.append(r.execute_command("SELECT", "9"))
            out.append(r.get("a"))
            out.append(r.flushdb())
            out.append(r.dbsize())
            out.append(r.randomkey())
        finally:
            r.flushdb()
            r.close()
        return out

    assert run(dbs_proxy.port) == run(standalone.port)


def test_tracking_invalidations_name_keys_as_the_client_does(dbs_proxy: ManagedProcess,
                                                              standalone: ManagedProcess) -> None:
    """CLIENT TRACKING in a database above 0: the invalidation names the key as the client
    wrote it (Redis tracks names whatever the database: a write of the same name in another
    database invalidates it too)."""
    k = "trk" + uuid.uuid4().hex[:6]

    def run(port: int) -> list[tuple[object, ...]]:
        with RawClient(port) as c, RawClient(port) as w:
            assert c.call("HELLO", "3")[:1] == b"%"
            c.call("SELECT", "3")
            w.call("SELECT", "3")
            c.call("CLIENT", "TRACKING", "ON")
            c.call("GET", k)
            w.call("SET", k, "1")
            got = [_decoded(c.read(timeout_s=10))]
            c.call("GET", k)
            w.call("SELECT", "0")
            w.call("SET", k, "0")  # the same name, another database
            got.append(_decoded(c.read(timeout_s=10)))
            w.call("DEL", k)
            w.call("SELECT", "3")
            w.call("DEL", k)
        return got

    assert run(dbs_proxy.port) == run(standalone.port)


_LIB = "#!lua name=%s\n" \
       "redis.register_function('%s_keys', function(keys, args) return {keys, args[1]} end)\n" \
       "redis.register_function{function_name='%s_get', " \
       "callback=function(keys, args) return {keys[1], redis.call('GET', keys[1])} end, " \
       "flags={'no-writes'}}"
# "k": a fresh name; "{k}x" shares its slot, "o" is in another slot.
SCRIPT_SCRIPT: list[list[str]] = [
    ["SELECT", "3"], ["SET", "k", "v3"], ["SET", "{k}x", "x3"], ["SET", "o", "o3"],
    ["EVAL", "return KEYS[1]", "1", "k"],
    ["EVAL", "return {KEYS[1], KEYS[2], ARGV[1], redis.call('GET', KEYS[1]), {KEYS[2]}}",
     "2", "k", "{k}x", "arg"],
    ["EVAL", "return {KEYS[1], KEYS[2]}", "2", "k", "o"],
    ["EVAL_RO", "return {KEYS[1], redis.call('GET', KEYS[1])}", "1", "{k}x"],
    ["EVAL", "return redis.status_reply(KEYS[1])", "1", "k"],
    ["EVALSHA", "SHA", "1", "k"], ["EVALSHA_RO", "SHA", "1", "k"],
    ["FCALL", "LIB_keys", "2", "k", "{k}x", "a"], ["FCALL_RO", "LIB_get", "1", "k"],
    ["MULTI"], ["EVAL", "return {KEYS[1], KEYS[2]}", "2", "k", "{k}x"],
    ["FCALL", "LIB_keys", "1", "k", "b"], ["EXEC"],
    ["SELECT", "0"], ["EVAL", "return KEYS[1]", "1", "k"], ["SELECT", "3"],
    ["DEL", "k", "{k}x", "o"], ["SELECT", "0"],
]


@pytest.mark.parametrize("proto", [2, 3])
def test_key_names_a_script_returns_as_one_redis_server(
    dbs_proxy: ManagedProcess, standalone: ManagedProcess, proto: int,
) -> None:
    """A script's or function's reply naming its KEYS gives them as the client named them
    (one slot, across slots, inside MULTI)."""
    run = uuid.uuid4().hex[:8]
    k, o, lib = "sk" + run, "so" + run, "lib" + run
    sha = hashlib.sha1(b"return KEYS[1]").hexdigest()
    words = {"k": k, "{k}x": "{" + k + "}x", "o": o, "SHA": sha}

    def arg(a: str) -> str:
        return words.get(a, a.replace("LIB", lib))

    def play(port: int) -> list[bytes]:
        with RawClient(port) as c:
            if proto == 3:
                assert c.call("HELLO", "3")[:1] == b"%"
            assert c.call("SCRIPT", "LOAD", "return KEYS[1]") == b"$40\r\n%s\r\n" % sha.encode()
            assert c.call("FUNCTION", "LOAD", _LIB % (lib, lib, lib))[:1] == b"$"
            try:
                return [c.call(*[arg(a) for a in cmd]).replace(run.encode(), b"R")
                        for cmd in SCRIPT_SCRIPT]
            finally:
                c.call("FUNCTION", "DELETE", lib)

    want = play(standalone.port)
    got = play(dbs_proxy.port)
    for cmd, w, g in zip(SCRIPT_SCRIPT, want, got, strict=True):
        assert g == w, cmd


def _keyspace_lines(raw: bytes, dbs: tuple[int, ...]) -> dict[int, tuple[int, int, int]]:
    text = raw.split(b"\r\n", 1)[1].removeprefix(b"txt:")
    assert b"# Keyspace\r\n" in text
    out = {}
    for line in text.split(b"\r\n"):
        m = re.fullmatch(rb"db(\d+):keys=(\d+),expires=(\d+),avg_ttl=(\d+)", line)
        if m and int(m[1]) in dbs:
            out[int(m[1])] = (int(m[2]), int(m[3]), int(m[4]))
    return out


@pytest.mark.parametrize("proto", [2, 3])
def test_info_keyspace_has_a_line_per_database(dbs_proxy: ManagedProcess,
                                                standalone: ManagedProcess, proto: int) -> None:
    """INFO's Keyspace section: one line per non-empty database, keys and expires as one
    server counts them, avg_ttl the mean TTL in ms (Redis' own is an estimate). Databases
    12 and 13 are this test's alone."""
    run = uuid.uuid4().hex[:6]

    def play(port: int) -> list[dict[int, tuple[int, int, int]]]:
        with RawClient(port) as c:
            if proto == 3:
                assert c.call("HELLO", "3")[:1] == b"%"
            c.call("SELECT", "12")
            c.call("FLUSHDB")
            c.call("MSET", *[x for i in range(7) for x in (f"i{run}{i}", "v")])
            c.call("SET", f"t{run}", "v", "EX", "100")
            c.call("SELECT", "13")
            c.call("FLUSHDB")
            c.call("SET", f"u{run}", "v", "PX", "50000")
            c.call("SADD", f"s{run}", "m")
            out = [_keyspace_lines(c.call("INFO", *args), (12, 13))
                   for args in (["keyspace"], [], ["all"], ["server", "KEYSPACE"])]
            c.call("FLUSHDB")
            out.append(_keyspace_lines(c.call("INFO", "keyspace"), (12, 13)))
            c.call("SELECT", "12")
            c.call("FLUSHDB")
            out.append(_keyspace_lines(c.call("INFO", "everything"), (12, 13)))
            assert b"# Keyspace" not in c.call("INFO", "server")
        return out

    want, got = play(standalone.port), play(dbs_proxy.port)
    assert [{db: v[:2] for db, v in d.items()} for d in got] == \
           [{db: v[:2] for db, v in d.items()} for d in want]
    assert got[0][12][:2] == (8, 1) and got[0][13][:2] == (2, 1)
    assert 90_000 < got[0][12][2] <= 100_000 and 40_000 < got[0][13][2] <= 50_000
    assert not got[-1]


def test_swapdb_is_atomic_for_the_proxys_clients(dbs_proxy: ManagedProcess) -> None:
    """While SWAPDB 14 15 renames key after key, a client of database 14 reading every key
    (an MGET split over every master) sees all of them swapped or none. Databases 14 and 15
    are this test's alone."""
    run = uuid.uuid4().hex[:6]
    names = [f"sw{run}:{i}" for i in range(300)]
    with RawClient(dbs_proxy.port) as swapper, RawClient(dbs_proxy.port) as reader:
        for db in ("14", "15"):
            swapper.call("SELECT", db)
            swapper.call("FLUSHDB")
            assert swapper.call("MSET", *[x for n in names for x in (n, db)]) == b"+OK\r\n"
        reader.call("SELECT", "14")
        seen = []
        try:
            for _ in range(3):
                swapper.send("SWAPDB", "14", "15")
                for _ in range(1000):  # bounded: until the swap's reply is in
                    values = set(array_elements(reader.call("MGET", *names)))
                    seen.append(values)
                    if not swapper.nothing_pending(0.001):
                        break
                assert swapper.read() == b"+OK\r\n"
            assert all(len(v) == 1 for v in seen), [v for v in seen if len(v) > 1][:1]
            assert set(array_elements(reader.call("MGET", *names))) == {b"$2\r\n15\r\n"}
        finally:
            for db in ("14", "15"):
                swapper.call("SELECT", db)
                swapper.call("FLUSHDB")


@pytest.mark.parametrize("proto", [2, 3])
def test_swapdb_wakes_a_client_blocked_in_either_database(
    dbs_proxy: ManagedProcess, standalone: ManagedProcess, proto: int,
) -> None:
    """A client blocked on a list of database 14 is served when SWAPDB brings database 15's
    list there, as one server serves it."""
    run = uuid.uuid4().hex[:6]
    q = f"q{run}"

    def play(port: int) -> list[bytes]:
        with RawClient(port) as blocked, RawClient(port) as c:
            if proto == 3:
                blocked.call("HELLO", "3")
            blocked.call("SELECT", "14")
            c.call("SELECT", "15")
            c.call("DEL", q)
            blocked.send("BLPOP", q, "0")
            wait_blocked(c, 1)
            out = [c.call("RPUSH", q, "x", "y"), c.call("SWAPDB", "14", "15"),
                   blocked.read(timeout_s=10), c.call("LRANGE", q, "0", "-1"),
                   c.call("SELECT", "14"), c.call("LRANGE", q, "0", "-1"), c.call("DEL", q)]
        return [o.replace(run.encode(), b"R") for o in out]

    assert play(dbs_proxy.port) == play(standalone.port)


def test_info_keyspace_walk_counts_and_scales_past_its_cap(standalone: ManagedProcess) -> None:
    """The walk behind INFO's per-database lines, on one server's database 1 holding stored
    names of databases 0 and 3: exact under its cap; past it, scaled to DBSIZE."""
    stored = [prefixed(b"w%d" % i, 3) for i in range(60)] + [b"plain%d" % i for i in range(40)]

    async def walks() -> tuple[dict[int, list[float]], dict[int, list[float]]]:
        conn = await DirectConnection.open(f"127.0.0.1:{standalone.port}", 2, ProxySettings(),
                                           ProxyMetrics())
        try:
            await conn.roundtrip(encode_command(b"SELECT", b"1"), 1)
            await conn.roundtrip(encode_command(b"FLUSHDB"), 1)
            await conn.roundtrip(encode_command(b"MSET", *[x for k in stored for x in (k, b"v")]),
                                 1)
            for k in stored[:10] + stored[60:65]:
                await conn.roundtrip(encode_command(b"PEXPIRE", k, b"100000"), 1)
            try:
                return await db_info.walk(conn), await db_info.walk(conn, cap_keys=30, scan_count=10)
            finally:
                await conn.roundtrip(encode_command(b"FLUSHDB"), 1)
        finally:
            await conn.aclose()

    exact, capped = trio.run(walks)
    assert [exact[3][:2], exact[0][:2]] == [[60, 10], [40, 5]]
    assert 90_000 < exact[3][2] / 10 <= 100_000
    assert sum(c[0] for c in capped.values()) == pytest.approx(100)
    assert all(0 < c[0] < 100 for c in capped.values())  # each database's share, estimated


def test_swapdb_holds_the_clients_of_every_worker(
    tmp_path_factory: pytest.TempPathFactory, real_cluster: list[ManagedProcess],
) -> None:
    """With ``workers: 2``, a client of the other worker than the swapper's also sees all
    keys swapped or none."""
    workdir = Path(tmp_path_factory.mktemp("dbs-workers"))
    (workdir / "proxy.yaml").write_text("databases: 16\n")
    proxy = slotgate_proxy(workdir, [n.port for n in real_cluster[:2]],
                           ["--config", str(workdir / "proxy.yaml"), "--workers", "2"])
    proxy.start(timeout_s=60)
    try:
        wait_until(lambda: "(2 workers)" in proxy.log_text(), 60, "workers not all ready")
        clients = [RawClient(proxy.port) for _ in range(8)]
        try:
            worker = [re.search(rb"worker_index:(\d+)", c.call("INFO", "proxy"))[1]  # type: ignore[index]
                      for c in clients]
            swapper = clients[0]
            reader = next((c for c, w in zip(clients, worker, strict=True) if w != worker[0]),
                          None)
            if reader is None:
                pytest.skip("every connection landed on one worker")
            run = uuid.uuid4().hex[:6]
            names = [f"wsw{run}:{i}" for i in range(300)]
            for db in ("14", "15"):
                swapper.call("SELECT", db)
                assert swapper.call("MSET", *[x for n in names for x in (n, db)]) == b"+OK\r\n"
            reader.call("SELECT", "14")
            seen = []
            for _ in range(3):
                swapper.send("SWAPDB", "14", "15")
                for _ in range(1000):  # bounded: until the swap's reply is in
                    seen.append(set(array_elements(reader.call("MGET", *names))))
                    if not swapper.nothing_pending(0.001):
                        break
                assert swapper.read() == b"+OK\r\n"
            assert all(len(v) == 1 for v in seen), [v for v in seen if len(v) > 1][:1]
            assert set(array_elements(reader.call("MGET", *names))) == {b"$2\r\n15\r\n"}
            for db in ("14", "15"):
                swapper.call("SELECT", db)
                swapper.call("FLUSHDB")
        finally:
            for c in clients:
                c.close()
    finally:
        proxy.stop()
