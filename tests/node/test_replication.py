"""Replication between real node processes: full sync, stream, partial resync, failover ids,
WAIT, min-replicas-to-write, read-only replicas, ROLE / INFO replication.

Error texts are compared with a real redis-server in the same situation.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from tests.support import ManagedProcess, during, redis_server, slotgate_node, wait_until


def info(r: redis.Redis, section: str = "replication") -> dict[str, str]:
    """INFO <section> as strings (redis-py parses INFO; ``slaveN`` comes back as a dict)."""
    out = {}
    for k, v in r.info(section).items():
        if isinstance(v, dict):
            v = ",".join(f"{a}={b}" for a, b in v.items())
        out[k] = str(v)
    return out


def linked(replica: redis.Redis) -> bool:
    return info(replica).get("master_link_status") == "up"


def in_sync(master: redis.Redis, replica: redis.Redis) -> bool:
    m, r = info(master), info(replica)
    return r.get("master_link_status") == "up" and \
        r.get("slave_repl_offset") == m.get("master_repl_offset")


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[Callable[..., ManagedProcess]]:
    started: list[ManagedProcess] = []

    def start(*extra: str) -> ManagedProcess:
        p = slotgate_node(tmp_path, extra=["--repl-ping-replica-period", "1", *extra]).start()
        started.append(p)
        return p

    try:
        yield start
    finally:
        for p in started:
            p.stop()


def make_replica(replica: ManagedProcess, master: ManagedProcess) -> redis.Redis:
    r = replica.client()
    assert r.execute_command("REPLICAOF", "127.0.0.1", master.port) == b"OK"
    wait_until(lambda: linked(r), what="replica link up")
    return r


def test_full_sync_then_stream_roles_and_info(nodes: Callable[..., ManagedProcess]) -> None:
    m_proc, r_proc = nodes(), nodes()
    m = m_proc.client()
    m.set("before", "1")
    m.execute_command("SELECT", 0)
    db3 = redis.Redis(host="127.0.0.1", port=m_proc.port, db=3)
    db3.set("in-db3", "x")
    m.rpush("list", "a", "b", "c")
    m.hset("hash", mapping={"f": "v"})
    m.set("ttl-key", "v", px=60_000)
    r = make_replica(r_proc, m_proc)
    assert r.execute_command("REPLICAOF", "127.0.0.1", m_proc.port) == \
        b"OK Already connected to specified master"
    m.set("after", "2")
    db3.incr("counter-db3")
    wait_until(lambda: in_sync(m, r), what="offsets equal")
    assert r.get("before") == b"1" and r.get("after") == b"2"
    assert r.lrange("list", 0, -1) == [b"a", b"b", b"c"]
    assert r.hgetall("hash") == {b"f": b"v"}
    assert 0 < r.pttl("ttl-key") <= 60_000
    r3 = redis.Redis(host="127.0.0.1", port=r_proc.port, db=3)
    assert r3.get("in-db3") == b"x" and r3.get("counter-db3") == b"1"

    mi, ri = info(m), info(r)
    assert mi["role"] == "master" and mi["connected_slaves"] == "1"
    assert mi["slave0"].startswith(f"ip=127.0.0.1,port={r_proc.port},state=online,")
    assert ri["role"] == "slave" and ri["master_port"] == str(m_proc.port)
    assert ri["master_replid"] == mi["master_replid"]
    assert ri["master_sync_in_progress"] == "0" and ri["slave_read_only"] == "1"
    assert int(mi["repl_backlog_histlen"]) > 0 and mi["repl_backlog_active"] == "1"

    off = int(mi["master_repl_offset"])
    role = m.execute_command("ROLE")
    assert role[0] == b"master" and role[1] >= off
    assert role[2] == [[b"127.0.0.1", str(r_proc.port).encode(), role[2][0][2]]]
    rrole = r.execute_command("ROLE")
    assert rrole[:4] == [b"slave", b"127.0.0.1", m_proc.port, b"connected"]
    assert isinstance(rrole[4], int) and rrole[4] >= off

    # WAIT: one replica acknowledges; asking for two waits out the timeout and says 1.
    m.set("w", "1")
    assert m.execute_command("WAIT", 1, 0) == 1
    t0 = time.monotonic()
    assert m.execute_command("WAIT", 2, 300) == 1
    assert time.monotonic() - t0 >= 0.25

    # Replica back to master: writable, keeps data, new replid with the old one as replid2.
    assert r.execute_command("REPLICAOF", "NO", "ONE") == b"OK"
    ri2 = info(r)
    assert ri2["role"] == "master" and ri2["master_replid2"] == mi["master_replid"]
    assert ri2["master_replid"] != mi["master_replid"]
    assert int(ri2["second_repl_offset"]) == int(ri["slave_repl_offset"]) + 1 or \
        int(ri2["second_repl_offset"]) > off
    assert r.set("now-writable", "1")
    assert r.get("after") == b"2"


def test_error_texts_match_real_redis(nodes: Callable[..., ManagedProcess], tmp_path: Path) -> None:
    real_replica = redis_server(tmp_path, extra=["--replicaof", "127.0.0.1", "1"]).start()
    real_minrep = redis_server(tmp_path, extra=["--min-replicas-to-write", "1"]).start()
    try:
        ours_replica = nodes("--replicaof", "127.0.0.1", "1")
        ours_minrep = nodes("--min-replicas-to-write", "1")
        pairs = [
            (real_replica.client(), ours_replica.client(), ("SET", "k", "v")),
            (real_replica.client(), ours_replica.client(), ("WAIT", 1, 10)),
            (real_minrep.client(), ours_minrep.client(), ("SET", "k", "v")),
            (real_minrep.client(), ours_minrep.client(), ("REPLCONF", "bogus", "1")),
            (real_minrep.client(), ours_minrep.client(), ("WAIT", 0, -1)),
            (real_minrep.client(), ours_minrep.client(), ("WAIT", 1, "abc")),
            (real_minrep.client(), ours_minrep.client(), ("WAIT", "x", 0)),
            (real_minrep.client(), ours_minrep.client(), ("REPLICAOF", "127.0.0.1", "abc")),
            (real_minrep.client(), ours_minrep.client(), ("REPLICAOF", "127.0.0.1", "-5")),
            (real_minrep.client(), ours_minrep.client(), ("REPLICAOF", "127.0.0.1", "70000")),
        ]
        for real, ours, cmd in pairs:
            with pytest.raises(redis.ResponseError) as want:
                real.execute_command(*cmd)
            with pytest.raises(redis.ResponseError) as got:
                ours.execute_command(*cmd)
            assert str(got.value) == str(want.value), cmd
        # Reads still work on both.
        assert ours_replica.client().get("k") is None
        assert real_minrep.client().get("k") == ours_minrep.client().get("k")
        # Replica ROLE before any link: same shape as real redis.
        ours_role = ours_replica.client().execute_command("ROLE")
        real_role = real_replica.client().execute_command("ROLE")
        assert ours_role[:3] == real_role[:3] and ours_role[4] == real_role[4] == -1
    finally:
        real_replica.stop()
        real_minrep.stop()


def test_min_replicas_to_write_counts_good_replicas(nodes: Callable[..., ManagedProcess]) -> None:
    m_proc, r_proc = nodes("--min-replicas-to-write", "1", "--min-replicas-max-lag", "2"), nodes()
    m = m_proc.client()
    with pytest.raises(redis.ResponseError, match="NOREPLICAS"):
        m.set("a", "1")
    r = make_replica(r_proc, m_proc)
    wait_until(lambda: _set_ok(m), what="write accepted with one good replica")
    wait_until(lambda: r.get("a") == b"1", what="write replicated")
    # A stopped replica stops acking: after max-lag the master refuses writes again.
    os.kill(r_proc.pid, signal.SIGSTOP)
    try:
        wait_until(lambda: not _set_ok(m), timeout_s=8, what="NOREPLICAS after lag")
    finally:
        os.kill(r_proc.pid, signal.SIGCONT)
    wait_until(lambda: _set_ok(m), timeout_s=8, what="writes accepted again")
    assert m.config_set("min-replicas-to-write", 0)
    os.kill(r_proc.pid, signal.SIGSTOP)
    try:
        assert m.set("free", "1")
    finally:
        os.kill(r_proc.pid, signal.SIGCONT)


def _set_ok(m: redis.Redis) -> bool:
    try:
        return bool(m.set("a", "1"))
    except redis.ResponseError as exc:
        assert str(exc).startswith("NOREPLICAS Not enough good replicas to write.")
        return False


def _disconnect_replica(m: redis.Redis, r_proc: ManagedProcess, write: Callable[[], None]) -> None:
    """Freeze the replica, cut its link on the master, run ``write``, thaw the replica."""
    os.kill(r_proc.pid, signal.SIGSTOP)
    try:
        assert m.execute_command("CLIENT", "KILL", "TYPE", "replica") == 1
        write()
    finally:
        os.kill(r_proc.pid, signal.SIGCONT)


def test_partial_resync_after_short_disconnect(nodes: Callable[..., ManagedProcess]) -> None:
    m_proc, r_proc = nodes(), nodes()
    m = m_proc.client()
    m.set("k0", "v0")
    r = make_replica(r_proc, m_proc)
    wait_until(lambda: in_sync(m, r))
    _disconnect_replica(m, r_proc, lambda: [m.set(f"gap{i}", i) for i in range(50)])
    wait_until(lambda: in_sync(m, r), what="resynced")
    assert r.mget([f"gap{i}" for i in range(50)]) == [str(i).encode() for i in range(50)]
    log = m_proc.log_text()
    assert log.count("Full resync requested") == 1
    assert "Partial resynchronization request from" in log


def test_replica_behind_more_than_backlog_resyncs_fully(nodes: Callable[..., ManagedProcess]) -> None:
    m_proc, r_proc = nodes("--repl-backlog-size", "16384"), nodes()
    m = m_proc.client()
    r = make_replica(r_proc, m_proc)
    wait_until(lambda: in_sync(m, r))
    big = b"x" * 1000

    def write() -> None:
        pipe = m.pipeline(transaction=False)
        for i in range(100):  # ~100 KB, far beyond the 16 KB backlog
            pipe.set(f"big{i}", big)
        pipe.execute()

    _disconnect_replica(m, r_proc, write)
    wait_until(lambda: in_sync(m, r), timeout_s=15, what="full resync")
    assert r.mget([f"big{i}" for i in range(100)]) == [big] * 100
    log = m_proc.log_text()
    assert log.count("Full resync requested") == 2
    assert "Partial resynchronization request from" not in log


def test_promoted_replica_continues_history_with_replid2(nodes: Callable[..., ManagedProcess]) -> None:
    m_proc, a_proc, b_proc = nodes(), nodes(), nodes()
    m = m_proc.client()
    a = make_replica(a_proc, m_proc)
    b = make_replica(b_proc, m_proc)
    for i in range(20):
        m.set(f"k{i}", i)
    wait_until(lambda: in_sync(m, a) and in_sync(m, b))
    old_id = info(m)["master_replid"]
    m_proc.kill()
    assert a.execute_command("REPLICAOF", "NO", "ONE") == b"OK"
    ai = info(a)
    assert ai["master_replid2"] == old_id and ai["master_replid"] != old_id
    a.set("after-failover", "1")
    assert b.execute_command("REPLICAOF", "127.0.0.1", a_proc.port) == b"OK"
    wait_until(lambda: in_sync(a, b), what="b follows a")
    assert b.get("after-failover") == b"1" and b.get("k19") == b"19"
    assert "Partial resynchronization request from" in a_proc.log_text()
    assert "Full resync requested" not in a_proc.log_text()
    bi = info(b)
    assert bi["master_replid"] == ai["master_replid"] and bi["master_replid2"] == old_id


def test_chained_replica_and_slaveof_alias(nodes: Callable[..., ManagedProcess]) -> None:
    m_proc, a_proc, b_proc = nodes(), nodes(), nodes()
    m = m_proc.client()
    m.set("k", "1")
    a = make_replica(a_proc, m_proc)
    b = b_proc.client()
    assert b.execute_command("SLAVEOF", "127.0.0.1", a_proc.port)
    wait_until(lambda: linked(b), what="b linked to a")
    m.set("k2", "2")
    redis.Redis(host="127.0.0.1", port=m_proc.port, db=4).set("k4", "4")
    wait_until(lambda: in_sync(m, a) and in_sync(a, b), what="chain in sync")
    assert b.mget(["k", "k2"]) == [b"1", b"2"]
    assert redis.Redis(host="127.0.0.1", port=b_proc.port, db=4).get("k4") == b"4"
    assert info(b)["master_replid"] == info(m)["master_replid"]
    assert info(a)["connected_slaves"] == "1"


def test_blocking_pops_replicate_as_the_pops_they_did(nodes: Callable[..., ManagedProcess]) -> None:
    """BLPOP/BRPOP/BLMPOP/BZPOPMIN/BZMPOP, served at once and served later by a push, reach
    the replica as the LPOP/RPOP/ZPOPMIN (with count) they performed: afterwards the
    replica holds exactly the master's lists and sorted sets."""
    import threading

    def norm(x: object) -> object:  # redis-py answers some pops as tuples
        return [norm(e) for e in x] if isinstance(x, (list, tuple)) else x

    m_proc, r_proc = nodes(), nodes()
    m = m_proc.client()
    r = make_replica(r_proc, m_proc)
    m.rpush("l", "a", "b", "c", "d", "e")
    m.zadd("z", {"m1": 1, "m2": 2, "m3": 3, "m4": 4})
    # Served at once.
    assert norm(m.execute_command("BLPOP", "empty", "l", 0)) == [b"l", b"a"]
    assert norm(m.execute_command("BRPOP", "l", 0)) == [b"l", b"e"]
    assert norm(m.execute_command("BLMPOP", 0, 2, "empty", "l", "LEFT", "COUNT", 2)) == \
        [b"l", [b"b", b"c"]]
    assert norm(m.execute_command("BZPOPMIN", "z", 0)) == [b"z", b"m1", 1.0]
    assert norm(m.execute_command("BZMPOP", 0, 1, "z", "MAX", "COUNT", 2)) == \
        [b"z", [[b"m4", b"4"], [b"m3", b"3"]]]

    # Served later: each blocked client is woken by a push from another client.
    results: dict[str, object] = {}

    def blocked(name: str, *cmd: object) -> None:
        results[name] = norm(m_proc.client().execute_command(*cmd))

    cases: list[tuple[str, tuple[object, ...], Callable[[], object]]] = [
        ("blpop", ("BLPOP", "l2", 0), lambda: m.rpush("l2", "x", "y")),
        ("blmpop", ("BLMPOP", 0, 1, "l3", "RIGHT", "COUNT", 5), lambda: m.rpush("l3", "p", "q")),
        ("bzpopmin", ("BZPOPMIN", "z2", 0), lambda: m.zadd("z2", {"a": 1, "b": 2})),
        ("bzmpop", ("BZMPOP", 0, 1, "z3", "MIN", "COUNT", 1), lambda: m.zadd("z3", {"c": 3, "d": 4})),
    ]
    for name, cmd, push in cases:
        t = threading.Thread(target=blocked, args=(name, *cmd))
        t.start()
        wait_until(lambda: int(m.info("clients")["blocked_clients"]) == 1, what=f"{name} blocked")
        push()
        t.join(10)
        assert not t.is_alive(), name
    assert results == {
        "blpop": [b"l2", b"x"],
        "blmpop": [b"l3", [b"q", b"p"]],
        "bzpopmin": [b"z2", b"a", 1.0],
        "bzmpop": [b"z3", [[b"c", b"3"]]],
    }

    wait_until(lambda: in_sync(m, r), what="offsets equal")
    for key in ("l", "l2", "l3"):
        assert r.lrange(key, 0, -1) == m.lrange(key, 0, -1), key
    for key in ("z", "z2", "z3"):
        assert r.zrange(key, 0, -1, withscores=True) == m.zrange(key, 0, -1, withscores=True), key
    assert r.lrange("l", 0, -1) == [b"d"] and r.zrange("z", 0, -1) == [b"m2"]
    assert r.exists("l3") == 0 and r.zrange("z3", 0, -1) == [b"d"]


@pytest.mark.parametrize("kind", ["bundled", "real"])
def test_write_leaves_for_the_replica_before_its_reply(nodes: Callable[..., ManagedProcess],
                                                        tmp_path: Path, kind: str) -> None:
    """The replication stream of a write is sent no later than the write's reply, as Redis
    sends replicas their bytes first: once a client has its OK, the replica has been sent the
    write, even if the master then stalls. Client B's DEBUG SLEEP runs in the same pass as
    client A's SET. The node, like Redis, sends a pass's replies (the replicas' bytes before
    them) when the pass ends. Had A's OK gone out at once and the stream later, the replica
    would wait out B's 2 s sleep while A already had its OK. redis-server passes the same
    check."""
    if kind == "bundled":
        m_proc, r_proc = nodes("--enable-debug-command", "yes"), nodes()
    else:
        m_proc = redis_server(tmp_path, extra=["--repl-diskless-sync-delay", "0"]).start()
        r_proc = redis_server(tmp_path).start()
    try:
        _check_write_before_reply(m_proc, r_proc)
    finally:
        if kind == "real":
            m_proc.stop()
            r_proc.stop()


def _check_write_before_reply(m_proc: ManagedProcess, r_proc: ManagedProcess) -> None:
    import socket

    m = m_proc.client()
    r = make_replica(r_proc, m_proc)

    def conn() -> socket.socket:
        s = socket.create_connection(("127.0.0.1", m_proc.port), timeout=10)
        s.sendall(b"PING\r\n")
        assert s.recv(100) == b"+PONG\r\n"  # served once: now watched by the node's poller
        return s

    a, b, c = conn(), conn(), conn()
    try:
        # C holds the node for 0.3 s, so that A's SET and B's sleep are both pending when it
        # wakes, and are served one after the other in a single pass.
        # (the sleeps order the three requests inside C's 0.3 s; the node, busy, shows nothing)
        c.sendall(b"DEBUG SLEEP 0.3\r\n")
        time.sleep(0.05)
        a.sendall(b"SET early-bird v1\r\n")
        time.sleep(0.01)
        b.sendall(b"DEBUG SLEEP 2\r\n")
        assert a.recv(100) == b"+OK\r\n"
        got_reply = time.monotonic()
        seen = None
        for _ in during(1.5, interval_s=0.01):
            if r.get("early-bird") == b"v1":
                seen = time.monotonic() - got_reply
                break
        # Sent after the reply, the write would wait out B's 2 s sleep.
        assert seen is not None and seen < 1.0, seen
        assert b.recv(100) == b"+OK\r\n" and c.recv(100) == b"+OK\r\n"
    finally:
        for s in (a, b, c):
            s.close()
    wait_until(lambda: in_sync(m, r), what="offsets equal")


@pytest.mark.parametrize("kind", ["bundled", "real"])
def test_first_write_of_a_new_connection_is_answered_at_once(
        nodes: Callable[..., ManagedProcess], tmp_path: Path, kind: str) -> None:
    """A new connection's first request is served before the poller watches it; a write
    there, with a replica attached, is answered at once too. The replica is stopped
    (SIGSTOP), so no other traffic reaches the master to end a pass for it."""
    import socket

    if kind == "bundled":
        m_proc, r_proc = nodes(), nodes()
    else:
        m_proc = redis_server(tmp_path, extra=["--repl-diskless-sync-delay", "0"]).start()
        r_proc = redis_server(tmp_path).start()
    try:
        m = m_proc.client()
        r = make_replica(r_proc, m_proc)
        assert r.ping()
        assert r_proc.proc is not None
        os.kill(r_proc.proc.pid, signal.SIGSTOP)
        try:
            for i in range(3):
                with socket.create_connection(("127.0.0.1", m_proc.port), timeout=2) as s:
                    s.sendall(b"SET first%d v\r\n" % i)
                    assert s.recv(100) == b"+OK\r\n"  # socket.timeout after 2 s otherwise
        finally:
            os.kill(r_proc.proc.pid, signal.SIGCONT)
        assert m.get("first2") == b"v"
    finally:
        if kind == "real":
            m_proc.stop()
            r_proc.stop()
