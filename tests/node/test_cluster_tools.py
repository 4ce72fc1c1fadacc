"""Our nodes as a cluster, driven by the real tools: redis-cli --cluster create/check/reshard/
rebalance/add-node/del-node/fix, redis-py RedisCluster, redis-benchmark --cluster."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.cluster import RedisCluster

from slotgate.protocol.slots import key_slot
from tests.support import (
    ManagedProcess,
    RawClient,
    nodes_lines,
    redis_cli,
    signature,
    start_nodes,
    wait_cluster_ok,
    wait_until,
)

SLOTS = 16384


def addr(n: ManagedProcess) -> str:
    return f"127.0.0.1:{n.port}"


def wait_agree(nodes: list[ManagedProcess], timeout_s: float = 30.0) -> None:
    sigs: set[str] = set()

    def agree() -> bool:
        sigs.clear()
        sigs.update(signature(n) for n in nodes)
        return len(sigs) == 1

    wait_until(agree, timeout_s, lambda: f"nodes to agree: {sigs}", interval_s=0.2)


def raw(port: int, *cmds: list[bytes]) -> list[bytes]:
    """Send ``cmds`` pipelined on a fresh connection; the raw reply frames."""
    with RawClient(port) as c:
        return c.pipeline(cmds)


def check(entry: ManagedProcess) -> str:
    out = redis_cli("--cluster", "check", addr(entry), check=False)
    return out.stdout + out.stderr


def key_per_slot() -> list[bytes]:
    """One key name for each of the 16384 slots."""
    keys: list[bytes | None] = [None] * SLOTS
    missing = SLOTS
    i = 0
    while missing:
        k = b"k%d" % i
        s = key_slot(k)
        if keys[s] is None:
            keys[s] = k
            missing -= 1
        i += 1
    return [k for k in keys if k is not None]


@pytest.fixture(scope="module")
def six(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ManagedProcess]]:
    """Six of our nodes made into 3 masters + 3 replicas by redis-cli --cluster create."""
    nodes = start_nodes(tmp_path_factory.mktemp("cluster6"), 6)
    try:
        out = redis_cli("--cluster", "create", *[addr(n) for n in nodes],
                        "--cluster-replicas", "1", "--cluster-yes", timeout_s=120)
        assert "[OK] All 16384 slots covered." in out.stdout
        wait_cluster_ok(nodes)
        yield nodes
    finally:
        for n in nodes:
            n.stop()


def wait_replicas(nodes: list[ManagedProcess], count: int, timeout_s: float = 30.0) -> None:
    """Until every node lists ``count`` replicas (roles spread with the next pings)."""
    wait_until(lambda: all(sum("slave" in f[2].split(",") for f in nodes_lines(n)) == count
                           for n in nodes),
               timeout_s, "replicas known everywhere", interval_s=0.2)


def wait_known(nodes: list[ManagedProcess], timeout_s: float = 30.0) -> None:
    """Until every node knows every other (gossip spreads a newly met node)."""
    wait_until(lambda: all(len([f for f in nodes_lines(n) if "handshake" not in f[2]])
                           == len(nodes) for n in nodes),
               timeout_s, "nodes to know each other", interval_s=0.2)


def test_create_topology(six: list[ManagedProcess]) -> None:
    wait_agree(six)
    wait_replicas(six, 3)
    lines = nodes_lines(six[0])
    assert len(lines) == 6
    masters = [f for f in lines if "master" in f[2].split(",")]
    replicas = [f for f in lines if "slave" in f[2].split(",")]
    assert len(masters) == 3 and len(replicas) == 3
    master_ids = {f[0] for f in masters}
    assert {f[3] for f in replicas} == master_ids  # one replica per master
    covered = 0
    for f in masters:
        for tok in f[8:]:
            a, _, b = tok.partition("-")
            covered += int(b or a) - int(a) + 1
        assert f[7] == "connected"
    assert covered == SLOTS
    for f in replicas:
        assert f[8:] == [] and f[3] != "-"
    epochs = sorted(int(f[6]) for f in masters)
    assert len(set(epochs)) == 3  # distinct config epochs
    for n in six:
        info = n.client().execute_command("CLUSTER", "INFO").decode()
        assert "cluster_state:ok" in info and "cluster_size:3" in info
        assert "cluster_known_nodes:6" in info
        assert n.client().info("cluster").get("cluster_enabled") == 1


def test_check_ok(six: list[ManagedProcess]) -> None:
    wait_agree(six)
    out = check(six[3])
    assert "[OK] All nodes agree about slots configuration." in out
    assert "[OK] All 16384 slots covered." in out
    assert "[ERR]" not in out and "[WARNING]" not in out


def test_nodes_conf_matches_cluster_nodes(six: list[ManagedProcess]) -> None:
    n = six[1]
    conf = (n.cwd / f"nodes-{n.port}.conf").read_text()
    assert conf.endswith("\n") and conf.splitlines()[-1].startswith("vars currentEpoch ")
    conf_lines = [line.split() for line in conf.splitlines()[:-1]]
    live = nodes_lines(n)
    # same nodes, flags, masters, epochs and slots (ping/pong times differ)
    def key(f: list[str]) -> tuple[str, ...]:
        return (f[0], f[1], f[2], f[3], f[6], *f[8:])
    assert sorted(map(key, conf_lines)) == sorted(map(key, live))


def test_routing_errors(six: list[ManagedProcess]) -> None:
    wait_agree(six)
    c = six[0].client()
    lines = nodes_lines(six[0])
    me = next(f for f in lines if "myself" in f[2])
    owner_of = {}
    for f in lines:
        for tok in f[8:]:
            a, _, b = tok.partition("-")
            for s in range(int(a), int(b or a) + 1):
                owner_of[s] = f[1].split("@")[0]
    foreign = next(k for k in (b"foo", b"bar", b"hello", b"zap") if
                   owner_of[key_slot(k)] != me[1].split("@")[0])
    port = str(six[0].port)
    out = redis_cli("-p", port, "SET", foreign.decode(), "x").stdout.strip()
    assert out == f"MOVED {key_slot(foreign)} {owner_of[key_slot(foreign)]}"
    out = redis_cli("-p", port, "MSET", "a", "1", "b", "2").stdout.strip()
    assert out == "CROSSSLOT Keys in request don't hash to the same slot"
    # redis-cli -c follows the redirect
    assert redis_cli("-c", "-p", port, "SET", foreign.decode(), "y").stdout.strip() == "OK"
    assert redis_cli("-c", "-p", port, "GET", foreign.decode()).stdout.strip() == "y"
    # a transaction with a redirected command fails at EXEC
    replies = raw(six[0].port, [b"MULTI"], [b"SET", foreign, b"1"], [b"EXEC"])
    assert replies[0] == b"+OK\r\n" and replies[1].startswith(b"-MOVED ")
    assert replies[2] == b"-EXECABORT Transaction discarded because of previous errors.\r\n"
    # EXEC itself redirected (a key moved between queueing and EXEC is not possible here, but
    # ASKING + a key of a slot that is not importing still gets MOVED)
    replies = raw(six[0].port, [b"ASKING"], [b"GET", foreign])
    assert replies[0] == b"+OK\r\n" and replies[1].startswith(b"-MOVED ")
    # key-less commands always run; READONLY/READWRITE/ASKING answer OK
    assert raw(six[0].port, [b"READONLY"], [b"READWRITE"], [b"ASKING"], [b"PING"]) == [
        b"+OK\r\n", b"+OK\r\n", b"+OK\r\n", b"+PONG\r\n"]
    with pytest.raises(redis.ResponseError) as e:
        c.execute_command("SELECT", 1)
    assert str(e.value) == "SELECT is not allowed in cluster mode"


def test_redis_py_cluster_all_slots(six: list[ManagedProcess]) -> None:
    wait_agree(six)
    rc = RedisCluster(host="127.0.0.1", port=six[2].port)
    try:
        keys = key_per_slot()
        pipe = rc.pipeline()
        for k in keys:
            pipe.set(k, b"v" + k)
        assert all(pipe.execute())
        pipe = rc.pipeline()
        for k in keys:
            pipe.get(k)
        assert pipe.execute() == [b"v" + k for k in keys]
        assert rc.get(keys[100]) == b"v" + keys[100]
        assert rc.incr("{t}counter") == 1
        assert rc.mget("{t}a", "{t}b") == [None, None]
        total = sum(int(n.client().dbsize()) for n in six
                    if "master" in n.client().execute_command("ROLE")[0].decode())
        assert total >= SLOTS
        pipe = rc.pipeline()
        for k in keys:
            pipe.delete(k)
        pipe.execute()
    finally:
        rc.close()


def test_redis_benchmark_cluster(six: list[ManagedProcess]) -> None:
    wait_agree(six)
    out = subprocess.run(
        ["redis-benchmark", "--cluster", "-h", "127.0.0.1", "-p", str(six[0].port),
         "-t", "set,get", "-n", "100000", "-q"],
        capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    assert re.search(r"SET: [\d.]+ requests per second", text), text
    assert re.search(r"GET: [\d.]+ requests per second", text), text
    assert "Error" not in text and "ERR" not in text


@pytest.fixture
def three(tmp_path: Path) -> Iterator[list[ManagedProcess]]:
    """Three of our masters (function scope: the test changes the topology)."""
    nodes = start_nodes(tmp_path, 4)
    try:
        redis_cli("--cluster", "create", *[addr(n) for n in nodes[:3]], "--cluster-yes",
                  timeout_s=120)
        wait_cluster_ok(nodes[:3])
        yield nodes
    finally:
        for n in nodes:
            n.stop()


def _load(entry: ManagedProcess, count: int) -> RedisCluster:
    rc = RedisCluster(host="127.0.0.1", port=entry.port)
    pipe = rc.pipeline()
    for i in range(count):
        pipe.set(f"key:{i}", f"v{i}")
    pipe.execute()
    return rc


def _assert_all_keys(nodes: list[ManagedProcess], count: int) -> None:
    """Every key readable from its owner, exactly once across the masters."""
    rc = RedisCluster(host="127.0.0.1", port=nodes[0].port)
    try:
        pipe = rc.pipeline()
        for i in range(count):
            pipe.get(f"key:{i}")
        assert pipe.execute() == [f"v{i}".encode() for i in range(count)]
    finally:
        rc.close()
    assert sum(int(n.client().dbsize()) for n in nodes) == count


def test_reshard_1000_slots_keeps_every_key(three: list[ManagedProcess]) -> None:
    masters = three[:3]
    _load(masters[0], 20000).close()
    src = masters[0].client().execute_command("CLUSTER", "MYID").decode()
    dst = masters[1].client().execute_command("CLUSTER", "MYID").decode()
    before = int(masters[1].client().dbsize())
    out = redis_cli("--cluster", "reshard", addr(masters[0]), "--cluster-from", src,
                    "--cluster-to", dst, "--cluster-slots", "1000", "--cluster-yes",
                    timeout_s=600)
    assert "[ERR]" not in out.stdout, out.stdout[-2000:]
    wait_agree(masters)
    assert int(masters[1].client().dbsize()) > before
    lines = nodes_lines(masters[1])
    dst_line = next(f for f in lines if f[0] == dst)
    owned = sum(int(t.partition("-")[2] or t) - int(t.partition("-")[0]) + 1
                for t in dst_line[8:])
    assert owned == 16384 // 3 + 1 + 1000 or owned == 16384 // 3 + 1000
    _assert_all_keys(masters, 20000)
    assert "[OK] All 16384 slots covered." in check(masters[2])


def test_add_node_reshard_rebalance_del_node(three: list[ManagedProcess]) -> None:
    masters, new = three[:3], three[3]
    _load(masters[0], 3000).close()
    out = redis_cli("--cluster", "add-node", addr(new), addr(masters[0]), timeout_s=60)
    assert "[OK] New node added correctly." in out.stdout
    wait_known(three)
    wait_agree(three)
    wait_cluster_ok(three)  # a newly joined master waits the rejoin delay before going ok
    new_id = new.client().execute_command("CLUSTER", "MYID").decode()
    # a small weight keeps the move short (every slot move fsyncs nodes.conf, as in Redis)
    out = redis_cli("--cluster", "rebalance", addr(masters[0]), "--cluster-use-empty-masters",
                    "--cluster-weight", f"{new_id}=0.05", timeout_s=600, check=False)
    assert out.returncode == 0 and "[ERR]" not in out.stdout, out.stdout[-3000:]
    wait_agree(three)
    new_line = next(f for f in nodes_lines(masters[0]) if f[0] == new_id)
    assert len(new_line) > 8  # it got slots
    _assert_all_keys(three, 3000)
    # empty it again and remove it
    out = redis_cli("--cluster", "reshard", addr(masters[0]), "--cluster-from", new_id,
                    "--cluster-to",
                    masters[0].client().execute_command("CLUSTER", "MYID").decode(),
                    "--cluster-slots", "16384", "--cluster-yes", timeout_s=600)
    wait_agree(three)
    out = redis_cli("--cluster", "del-node", addr(masters[0]), new_id, timeout_s=60)
    assert "SHUTDOWN" in out.stdout or "Sending CLUSTER FORGET" in out.stdout
    for m in masters:
        assert new_id not in m.client().execute_command("CLUSTER", "NODES").decode()
    _assert_all_keys(masters, 3000)
    assert "[OK] All 16384 slots covered." in check(masters[1])


def test_fix_repairs_open_and_uncovered_slots(three: list[ManagedProcess]) -> None:
    masters = three[:3]
    a, b = masters[0].client(), masters[1].client()
    b_id = b.execute_command("CLUSTER", "MYID").decode()
    # an open slot: slot 1 (owned by a) left migrating with a key in it
    key = next(f"x{i}" for i in range(100000) if key_slot(f"x{i}".encode()) == 1)
    a.set(key, "value")
    a.execute_command("CLUSTER", "SETSLOT", 1, "MIGRATING", b_id)
    assert "[WARNING]" in check(masters[0])
    # and an uncovered slot: slot 2 unassigned everywhere
    for m in masters:
        m.client().execute_command("CLUSTER", "DELSLOTS", 2)
    # covering uncovered slots asks for a typed "yes" even with --cluster-yes
    out = subprocess.run(["redis-cli", "--cluster", "fix", addr(masters[0]), "--cluster-yes"],
                         input="yes\n" * 4, capture_output=True, text=True, timeout=120)
    assert "Fixing open slot 1" in out.stdout, out.stdout[-2000:]
    assert "Covering slot 2" in out.stdout, out.stdout[-2000:]
    wait_agree(masters)
    text = check(masters[2])
    assert "[OK] All 16384 slots covered." in text and "[WARNING]" not in text, text
    rc = RedisCluster(host="127.0.0.1", port=masters[0].port)
    try:
        assert rc.get(key) == b"value"
    finally:
        rc.close()


def test_replicas_replicate_and_serve_readonly(six: list[ManagedProcess]) -> None:
    wait_agree(six)
    wait_replicas(six, 3)
    rc = RedisCluster(host="127.0.0.1", port=six[0].port)
    try:
        assert rc.set("{r}key", "value")
    finally:
        rc.close()
    lines = nodes_lines(six[0])
    owner = next(f for f in lines for t in f[8:]
                 if int(t.partition("-")[0]) <= key_slot(b"{r}key") <= int(t.partition("-")[2]
                                                                            or t))
    replica_line = next(f for f in lines if f[3] == owner[0])
    replica = next(n for n in six if replica_line[1].startswith(addr(n) + "@"))
    port = replica.port
    got: list[bytes] = []

    def replica_has_key() -> bool:
        got[:] = raw(port, [b"READONLY"], [b"GET", b"{r}key"], [b"SET", b"{r}key", b"x"],
                     [b"READWRITE"], [b"GET", b"{r}key"])
        return got[1] == b"$5\r\nvalue\r\n"

    wait_until(replica_has_key, 30, lambda: f"the replica to have the key: {got}",
               interval_s=0.2)
    moved = b"-MOVED %d %s\r\n" % (key_slot(b"{r}key"), owner[1].split("@")[0].encode())
    assert got == [b"+OK\r\n", b"$5\r\nvalue\r\n", moved, b"+OK\r\n", moved]
    assert replica.client().execute_command("ROLE")[0] == b"slave"

    def slots_have_replicas() -> bool:
        entries = six[0].client().execute_command("CLUSTER", "SLOTS")
        return all(len(e) == 4 for e in entries)  # start, end, master, one replica

    def listed_else_write() -> bool:
        if slots_have_replicas():
            return True
        # replicas appear in CLUSTER SLOTS once their gossiped offset is non-zero
        rc = RedisCluster(host="127.0.0.1", port=six[0].port)
        for k in ("{a}x", "{b}x", "{c}x", "{d}x", "{e}x", "{f}x"):
            rc.set(k, 1)
        rc.close()
        return False

    wait_until(listed_else_write, 30, "replicas in CLUSTER SLOTS", interval_s=0.5)
    assert slots_have_replicas()
