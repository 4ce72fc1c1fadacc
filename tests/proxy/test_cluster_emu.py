"""Cluster emulation: the proxy answers CLUSTER SLOTS/SHARDS/NODES/INFO/MYID in the exact
shapes of a real redis-server 7.0 that owns all 16384 slots (RESP2 and RESP3), and redis-py's
``RedisCluster`` pointed at the proxy runs a mixed workload across a live reshard of the real
cluster behind it without ever meeting a MOVED or an ASK.
"""

from __future__ import annotations

import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.cluster import RedisCluster

from slotgate.protocol.resp import verbatim
from slotgate.protocol.slots import key_slot
from slotgate.proxy.front.cluster_emu import node_id
from tests.conftest import _session_cluster
from tests.proxy.test_metrics import parse
from tests.support import (
    ManagedProcess,
    RawClient,
    free_port,
    redis_cli,
    redis_server,
    running,
    slotgate_proxy,
    wait_until,
)

INTROSPECTION = [("CLUSTER", "SLOTS"), ("CLUSTER", "SHARDS"), ("CLUSTER", "NODES"),
                 ("CLUSTER", "INFO"), ("CLUSTER", "MYID")]
# Answered alike by one real node that owns every slot and holds no keys in slot 5, and by the
# proxy (the slots' real masters answer the slot queries).
SAME_REPLIES = [
    ("CLUSTER", "COUNTKEYSINSLOT", "5"), ("CLUSTER", "COUNTKEYSINSLOT", "16384"),
    ("CLUSTER", "COUNTKEYSINSLOT", "-1"), ("CLUSTER", "COUNTKEYSINSLOT", "x"),
    ("CLUSTER", "COUNTKEYSINSLOT", "007"),
    ("CLUSTER", "GETKEYSINSLOT", "5", "10"), ("CLUSTER", "GETKEYSINSLOT", "5", "-1"),
    ("CLUSTER", "GETKEYSINSLOT", "16384", "1"), ("CLUSTER", "GETKEYSINSLOT", "x", "1"),
    ("CLUSTER", "GETKEYSINSLOT", "1", "x"), ("CLUSTER", "GETKEYSINSLOT", "1"),
    ("ASKING",), ("READONLY",), ("READWRITE",),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ManagedProcess]]:
    """Three real masters, no replicas."""
    yield from _session_cluster("real", tmp_path_factory, masters=3, replicas=0)


@pytest.fixture(scope="module")
def proxy(cluster: list[ManagedProcess],
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ManagedProcess, int]]:
    """The proxy with cluster emulation on, and its metrics port."""
    workdir = tmp_path_factory.mktemp("emu-proxy")
    cfg = workdir / "proxy.yaml"
    cfg.write_text("cluster_emulation:\n  enabled: true\n")
    metrics_port = free_port()
    proc = slotgate_proxy(workdir, [n.port for n in cluster],
                          ["--config", str(cfg), "--metrics", f"127.0.0.1:{metrics_port}"])
    with running(proc):
        yield proc, metrics_port


@pytest.fixture(scope="module")
def one_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagedProcess]:
    """A real cluster node that owns all 16384 slots: what the proxy emulates."""
    proc = redis_server(tmp_path_factory.mktemp("emu-one-node"), cluster=True)
    with running(proc):
        redis_cli("-p", str(proc.port), "cluster", "addslotsrange", "0", "16383")
        wait_until(lambda: b"cluster_state:ok" in proc.client().execute_command("CLUSTER", "INFO"),
                   10, "cluster_state:ok")
        yield proc


def _bulk(text: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(text), text)


def as_proxy(raw: bytes, real: ManagedProcess, real_id: bytes, port: int, proto: int) -> bytes:
    """A real node's reply with its id, address and bus port replaced by the proxy's. (The
    real node shows an empty ip: it never met another node to learn its own.)"""
    host = b"127.0.0.1"
    pid = node_id("127.0.0.1", port).encode()
    bus = port + 10000 if port + 10000 < 65536 else 0
    if raw[:1] in b"$=":  # NODES / INFO / MYID: one string, re-framed after the change
        text = raw.split(b"\r\n", 1)[1][:-2]
        if raw[:1] == b"=":
            text = text[4:]
        text = text.replace(real_id, pid).replace(
            b" :%d@%d " % (real.port, real.port + 10000), b" %s:%d@%d " % (host, port, bus))
        return verbatim(text, proto=proto) if raw[:1] == b"=" else _bulk(text)
    return (raw.replace(_bulk(real_id), _bulk(pid)).replace(b"$0\r\n\r\n", _bulk(host))
            .replace(b":%d\r\n" % real.port, b":%d\r\n" % port))


@pytest.mark.parametrize("proto", [2, 3])
def test_introspection_has_the_shapes_of_a_real_node(
        proto: int, proxy: tuple[ManagedProcess, int], one_node: ManagedProcess) -> None:
    proc, _ = proxy
    with RawClient(one_node.port) as real, RawClient(proc.port) as ours:
        real.call("HELLO", str(proto))
        hello = ours.call("HELLO", str(proto))
        assert b"cluster" in hello and b"standalone" not in hello
        assert b"cluster_enabled:1" in ours.call("INFO", "cluster")
        real_id = real.call("CLUSTER", "MYID").split(b"\r\n")[1]
        for argv in INTROSPECTION:
            expected = as_proxy(real.call(*argv), one_node, real_id, proc.port, proto)
            assert ours.call(*argv) == expected, argv
        for argv in SAME_REPLIES:
            assert ours.call(*argv) == real.call(*argv), argv


def test_slot_queries_reach_the_slots_master(proxy: tuple[ManagedProcess, int]) -> None:
    proc, _ = proxy
    c = proc.client()
    keys = [f"{{slotq}}:{i}" for i in range(5)]
    for k in keys:
        c.set(k, 1)
    slot = key_slot(b"slotq")
    assert c.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) == 5
    assert sorted(c.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 10)) == sorted(
        k.encode() for k in keys)


def test_several_proxies_share_the_slots(cluster: list[ManagedProcess], tmp_path: Path,
                                         cleanup: list[ManagedProcess]) -> None:
    me = free_port()
    other = ("10.0.0.2", 7777)
    cfg = tmp_path / "proxy.yaml"
    cfg.write_text("cluster_emulation:\n  enabled: true\n"
                   f'  announce: "127.0.0.1:{me}"\n'
                   f'  proxies: ["{other[0]}:{other[1]}", "127.0.0.1:{me}"]\n')
    proc = slotgate_proxy(tmp_path, [cluster[0].port], ["--config", str(cfg)])
    cleanup.append(proc)
    proc.start()
    c = proc.client()
    assert c.execute_command("CLUSTER", "SLOTS") == [
        [0, 8191, [other[0].encode(), other[1], node_id(*other).encode(), {}]],
        [8192, 16383, [b"127.0.0.1", me, node_id("127.0.0.1", me).encode(), {}]],
    ]
    nodes = c.execute_command("CLUSTER", "NODES").decode().splitlines()
    assert nodes[1].split()[2] == "myself,master" and nodes[0].split()[2] == "master"
    assert c.execute_command("CLUSTER", "MYID") == node_id("127.0.0.1", me).encode()
    # Each proxy serves every slot, whichever share the clients believe it owns.
    c.set("x", 1)  # slot 16287: this proxy's share
    c.set("a", 1)  # slot 15495
    c.set("foo", 1)  # slot 12182
    c.set("b", 1)  # slot 3300: the other proxy's share
    assert c.get("b") == b"1"


def test_emulation_off_shows_the_real_cluster(cluster: list[ManagedProcess], tmp_path: Path,
                                              cleanup: list[ManagedProcess]) -> None:
    proc = slotgate_proxy(tmp_path, [cluster[0].port])
    cleanup.append(proc)
    proc.start()
    c = proc.client()
    ports = {int(e[2][1]) for e in c.execute_command("CLUSTER", "SLOTS")}
    assert ports == {n.port for n in cluster}
    assert c.info("cluster")["cluster_enabled"] == 0
    with pytest.raises(redis.ResponseError, match="'asking' is not supported"):
        c.execute_command("ASKING")
    with pytest.raises(redis.ResponseError, match="is not supported"):
        c.execute_command("CLUSTER", "COUNTKEYSINSLOT", 5)


# --- redis-py RedisCluster through the proxy, across a reshard -------------------------------

SLOTS_MOVED = 300
WORKERS = 4


class RedirectCounter:
    """Counts MOVED/ASK errors redis-py reads from any connection (wrapping read_response)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.seen = 0
        original = redis.connection.AbstractConnection.read_response
        counter = self

        def read_response(conn: redis.connection.AbstractConnection, *a: object, **kw: object) -> object:
            try:
                reply = original(conn, *a, **kw)  # type: ignore[arg-type]
            except (redis.exceptions.MovedError, redis.exceptions.AskError):
                counter.seen += 1
                raise
            if isinstance(reply, (redis.exceptions.MovedError, redis.exceptions.AskError)):
                counter.seen += 1
            return reply

        monkeypatch.setattr(redis.connection.AbstractConnection, "read_response", read_response)


def moved_slots(src: ManagedProcess) -> range:
    """The first SLOTS_MOVED slots ``src`` owns: those ``redis-cli --cluster reshard`` takes."""
    first = min(int(e[0]) for e in src.client().execute_command("CLUSTER", "SLOTS")
                if int(e[2][1]) == src.port)
    return range(first, first + SLOTS_MOVED)


def workload(rc: RedisCluster, worker: int, keys: list[str], stop: threading.Event,
             failures: list[str], rounds: list[int]) -> None:
    """Strings, hashes, MGET across slots and non-transactional pipelines on keys this worker
    owns; every value read back must be the one it wrote last."""
    n = 0
    while not stop.is_set() or n < 2:
        try:
            for i in range(0, len(keys), 4):
                group = keys[i:i + 4]
                values = [f"{worker}:{n}:{k}" for k in group]
                for k, v in zip(group, values, strict=True):
                    rc.set(k, v)
                got = rc.mget_nonatomic(group)
                if got != [v.encode() for v in values]:
                    failures.append(f"mget {group}: {got} != {values}")
                rc.hset(f"h:{group[0]}", mapping={"n": n, "w": worker})
                if rc.hgetall(f"h:{group[0]}") != {b"n": str(n).encode(), b"w": str(worker).encode()}:
                    failures.append(f"hash h:{group[0]}")
                pipe = rc.pipeline(transaction=False)
                for k in group:
                    pipe.append(k, "+")
                    pipe.get(k)
                replies = pipe.execute()
                if replies[1::2] != [f"{v}+".encode() for v in values]:
                    failures.append(f"pipeline {group}: {replies}")
        except redis.RedisError as exc:
            failures.append(f"{type(exc).__name__}: {exc}")
            return
        n += 1
        rounds[worker] = n


def test_redis_py_cluster_client_never_sees_a_redirect_across_a_reshard(
        cluster: list[ManagedProcess], proxy: tuple[ManagedProcess, int],
        monkeypatch: pytest.MonkeyPatch) -> None:
    proc, metrics_port = proxy
    counter = RedirectCounter(monkeypatch)
    src, dst = cluster[0], cluster[1]
    moving = set(moved_slots(src))
    keys_moving = [k for k in (f"rs:{i}" for i in range(20_000)) if key_slot(k.encode()) in moving]
    keys_other = [f"other:{i}" for i in range(40)]
    assert len(keys_moving) >= 80
    per_worker = [keys_moving[w * 20:(w + 1) * 20] + keys_other[w * 10:(w + 1) * 10]
                  for w in range(WORKERS)]
    rc = RedisCluster(host="127.0.0.1", port=proc.port, socket_timeout=15)
    # The same client straight to the cluster, its slot map learned before the reshard: it
    # meets MOVED afterwards, which shows the counter counts.
    direct = RedisCluster(host="127.0.0.1", port=src.port, socket_timeout=15)
    try:
        assert set(rc.nodes_manager.nodes_cache) == {f"127.0.0.1:{proc.port}"}
        stop = threading.Event()
        failures: list[str] = []
        rounds = [0] * WORKERS
        threads = [threading.Thread(target=workload,
                                    args=(rc, w, per_worker[w], stop, failures, rounds))
                   for w in range(WORKERS)]
        for t in threads:
            t.start()
        try:
            wait_until(lambda: min(rounds) >= 1 or failures, 30, "the workload running")
            src_id = src.client().execute_command("CLUSTER", "MYID").decode()
            dst_id = dst.client().execute_command("CLUSTER", "MYID").decode()
            redis_cli("--cluster", "reshard", f"127.0.0.1:{src.port}", "--cluster-from", src_id,
                      "--cluster-to", dst_id, "--cluster-slots", str(SLOTS_MOVED),
                      "--cluster-pipeline", "1", "--cluster-yes", timeout_s=240)
            done = list(rounds)
            wait_until(lambda: all(r >= d + 2 for r, d in zip(rounds, done, strict=True))
                       or failures, 60, "two more rounds after the reshard")
        finally:
            stop.set()
            for t in threads:
                t.join()
        assert not failures, failures[:5]
        assert counter.seen == 0
        assert direct.get(keys_moving[0]) is not None
        assert counter.seen > 0
        assert set(rc.nodes_manager.nodes_cache) == {f"127.0.0.1:{proc.port}"}
        # The slots did move behind the proxy, which followed the redirects itself.
        owner = {int(e[2][1]) for e in dst.client().execute_command("CLUSTER", "SLOTS")
                 if int(e[0]) <= min(moving) <= int(e[1])}
        assert owner == {dst.port}
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
            samples = parse(r.read().decode())
        followed = sum(v for (name, labels), v in samples.items()
                       if name == "slotgate_redirects_total"
                       and dict(labels)["kind"] in ("moved", "ask"))
        assert followed > 0
    finally:
        rc.close()
        direct.close()


def test_redis_cli_in_cluster_mode(proxy: tuple[ManagedProcess, int]) -> None:
    proc, _ = proxy
    for key in ("a", "b", "foo"):  # slots on all three masters
        assert redis_cli("-c", "-p", str(proc.port), "set", key, f"v-{key}").stdout == "OK\n"
        assert redis_cli("-c", "-p", str(proc.port), "get", key).stdout == f"v-{key}\n"
