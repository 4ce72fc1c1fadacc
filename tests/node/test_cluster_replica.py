"""A shard with a replica, our nodes and real redis-server 7.0 with the same checks: blocking
pops sent with READONLY to a replica (Redis redirects them: they are writes), and a replica
restarted after keys expired keeps them, as the master does, until the master's DELs arrive."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.node.test_cluster_convergence import _as_dict, _text
from tests.node.test_cluster_migration import _norm, _two_masters
from tests.support import (
    ManagedProcess,
    RawClient,
    redis_server,
    start_all,
    start_nodes,
    wait_until,
)

KINDS = ("real", "ours")  # real first: ours is compared with its replies
_RESULTS: dict[str, list[tuple[str, bytes]]] = {}


def _link_up(r: ManagedProcess) -> bool:
    return r.client(socket_timeout=2).info("replication").get("master_link_status") == "up"


def add_replica(nodes: list[ManagedProcess]) -> None:
    """Masters a and b (two halves of the slots), r joins as b's replica and syncs; every
    node knows r as b's replica."""
    a, b, r = nodes
    _two_masters(nodes[:2])
    idb = b.client().execute_command("CLUSTER", "MYID")
    idr = r.client().execute_command("CLUSTER", "MYID")
    r.client().execute_command("CLUSTER", "MEET", "127.0.0.1", a.port)
    wait_until(lambda: len(r.client().execute_command("CLUSTER", "NODES").splitlines()) == 3
               and b"noaddr" not in r.client().execute_command("CLUSTER", "NODES"), 20,
               "r to know the others")
    r.client().execute_command("CLUSTER", "REPLICATE", idb)
    wait_until(lambda: _link_up(r), 20, "r to sync", ignore=(redis.RedisError,))
    wait_until(lambda: all(b"slave " + idb in line for n in (a, b) for line in
                           n.client().execute_command("CLUSTER", "NODES").splitlines()
                           if line.startswith(idr)), 20, "a and b to know r as b's replica")
    wait_until(lambda: _link_from(b, idr) and _link_from(r, idb), 20,
               "r and b linked both ways", ignore=(redis.RedisError,))


def _link_from(n: ManagedProcess, peer_id: bytes) -> bool:
    """``n`` has an inbound bus link known to come from ``peer_id`` (CLUSTER LINKS)."""
    for link in n.client(socket_timeout=5).execute_command("CLUSTER", "LINKS"):
        d = _as_dict(link)
        if _text(d["direction"]) == "from" and _text(d["node"]) == peer_id.decode():
            return True
    return False


@pytest.fixture(params=KINDS)
def shard(request: pytest.FixtureRequest,
          tmp_path: Path) -> Iterator[tuple[str, list[ManagedProcess]]]:
    kind = request.param
    if kind == "ours":
        nodes = start_nodes(tmp_path, 3, extra=["--enable-debug-command", "yes"])
    else:
        nodes = start_all([redis_server(tmp_path, cluster=True) for _ in range(3)])
    try:
        add_replica(nodes)
        yield kind, nodes
    finally:
        for n in nodes:
            n.stop()


def _compare(kind: str, name: str, got: list[tuple[str, bytes]]) -> None:
    _RESULTS[f"{name}-{kind}"] = got
    if kind == "ours" and f"{name}-real" in _RESULTS:
        assert got == _RESULTS[f"{name}-real"]


def test_blocking_pops_on_readonly_replica(shard: tuple[str, list[ManagedProcess]]) -> None:
    kind, (a, b, r) = shard
    ida = a.client().execute_command("CLUSTER", "MYID")
    idb = b.client().execute_command("CLUSTER", "MYID")
    b.client().execute_command("SET", "{t}s", "v")
    wait_until(lambda: r.client().execute_command("DBSIZE") == 1, 10, "the write replicated")
    out: list[tuple[str, bytes]] = []
    with RawClient(r.port) as c:
        out.append(("readonly", c.call("READONLY")))
        out.append(("get", c.call("GET", "{t}s")))
        for cmd in (("BLPOP", "{t}q", 0), ("BRPOP", "{t}q", "{t}p", 0),
                    ("BLMOVE", "{t}q", "{t}q2", "LEFT", "LEFT", 0),
                    ("BZPOPMIN", "{t}z", 0), ("BLMPOP", 0, 1, "{t}q", "LEFT")):
            c.send(*cmd)
            out.append((str(cmd[0]), c.read(timeout_s=5)))
    got = [(name, _norm(reply, a.port, b.port, 99999, ida, idb)) for name, reply in out]
    assert dict(got)["BLPOP"].startswith(b"-MOVED ")
    _compare(kind, "blocking", got)


def test_xread_block_on_readonly_replica_woken_by_master(
        shard: tuple[str, list[ManagedProcess]]) -> None:
    """XREAD BLOCK is a read: a READONLY replica blocks it there, and the master's XADD,
    arriving through replication, wakes it."""
    kind, (a, b, r) = shard
    ida = a.client().execute_command("CLUSTER", "MYID")
    idb = b.client().execute_command("CLUSTER", "MYID")
    out: list[tuple[str, bytes]] = []
    with RawClient(r.port) as c:
        out.append(("readonly", c.call("READONLY")))
        c.send("XREAD", "BLOCK", 10000, "STREAMS", "{t}st", "$")
        wait_until(lambda: r.client().info("clients")["blocked_clients"] == 1, 10,
                   "XREAD blocked on the replica")
        out.append(("xadd on master", b.client().execute_command("XADD", "{t}st", "7-1", "f", "v")))
        out.append(("xread", c.read(timeout_s=10)))
    got = [(name, _norm(reply, a.port, b.port, 99999, ida, idb)) for name, reply in out]
    assert dict(got)["xread"].startswith(b"*1\r\n"), got
    _compare(kind, "xread", got)


def test_replica_restart_keeps_expired_keys(shard: tuple[str, list[ManagedProcess]]) -> None:
    kind, (_a, b, r) = shard
    mb, mr = b.client(), r.client()
    mb.execute_command("DEBUG", "SET-ACTIVE-EXPIRE", "0")  # the master's DELs: on access only
    mb.set("{t}short", "v", px=1500)
    mb.set("{t}other", "v", px=1500)
    mb.set("{t}keep", "v")
    wait_until(lambda: mr.dbsize() == 3, 10, "the writes replicated")
    mr.execute_command("SAVE")
    r.stop()
    time.sleep(2.0)  # both keys expire while the replica is down
    os.kill(b.pid, signal.SIGSTOP)  # what the replica loaded, before any sync
    try:
        r.start()
        got = [("replica dbsize loaded", b"%d" % r.client().dbsize())]
    finally:
        os.kill(b.pid, signal.SIGCONT)
    wait_until(lambda: _link_up(r), 20, "the replica back in sync", ignore=(redis.RedisError,))
    got += [("master dbsize", b"%d" % mb.dbsize()),
            ("replica dbsize", b"%d" % r.client().dbsize())]
    mb.get("{t}short")  # the master expires it now and sends the replica its DEL
    wait_until(lambda: r.client().dbsize() == 2, 10, "the DEL to reach the replica")
    got.append(("replica dbsize after DEL", b"%d" % r.client().dbsize()))
    assert got[0] == ("replica dbsize loaded", b"3"), got
    _compare(kind, "restart", got)


def _shard_health(viewer: ManagedProcess, node_id: bytes) -> str:
    for shard in viewer.client(socket_timeout=5).execute_command("CLUSTER", "SHARDS"):
        for n in _as_dict(shard)["nodes"]:  # type: ignore[attr-defined]
            d = _as_dict(n)
            if _text(d["id"]) == node_id.decode():
                return str(_text(d["health"]))
    return "absent"


def _in_slots(viewer: ManagedProcess, node_id: bytes) -> bool:
    with RawClient(viewer.port, timeout_s=5) as c:
        return node_id in c.call("CLUSTER", "SLOTS")


def test_loading_replica_hidden(shard: tuple[str, list[ManagedProcess]]) -> None:
    kind, (a, b, r) = shard
    idr = r.client().execute_command("CLUSTER", "MYID")
    b.client().mset({f"{{t}}k:{i}": i for i in range(3000)})
    wait_until(lambda: r.client().dbsize() == 3000, 20, "the keys replicated")
    wait_until(lambda: _shard_health(a, idr) == "online" and _in_slots(a, idr), 20,
               "a to list r")
    r.client().execute_command("SAVE")
    r.stop()
    # Redis serves clients every loading-process-events-interval-bytes while it loads (not
    # its cluster bus: the others see no PONG and fail the node until the load ends)
    r.argv += ["--key-load-delay", "2000", "--loading-process-events-interval-bytes", "1024"]
    r.start()
    seen: list[tuple[str, bytes]] = []
    with RawClient(r.port) as c:
        seen.append(("loading readonly", c.call("READONLY")))
        seen.append(("loading get", c.call("GET", "{t}k:1")))
        seen.append(("loading cluster info", c.call("CLUSTER", "INFO")))
        seen.append(("loading get foreign", c.call("GET", "bar")))
        seen.append(("loading ssubscribe", c.call("SSUBSCRIBE", "bar").replace(
            str(a.port).encode(), b"<A>")))
    # while r loads, the others leave it out of SLOTS and SHARDS shows it failed
    wait_until(lambda: not _in_slots(a, idr), 10, "a to leave r out of SLOTS",
               ignore=(redis.RedisError,))
    seen.append(("health while loading", _shard_health(a, idr).encode()))
    with RawClient(r.port) as c:
        seen.append(("still loading", c.call("GET", "{t}k:1")))
    wait_until(lambda: _shard_health(a, idr) == "online" and _in_slots(a, idr), 40,
               "r back in the topology", ignore=(redis.RedisError,))
    # routing comes first (the cluster state is not ok yet), then the loading check
    assert seen[1][1] == b"-CLUSTERDOWN The cluster is down\r\n", seen
    assert seen[2][1] == b"-LOADING Redis is loading the dataset in memory\r\n", seen
    assert seen[5] == ("health while loading", b"fail"), seen
    _compare(kind, "loading", seen)
