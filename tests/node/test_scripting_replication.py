"""A script's effects, not the script, go to replicas and the AOF (Redis 7.0).

- the replication stream after scripts, compared with a real redis-server's: one write goes
  out as it is, several wrapped in MULTI/EXEC, none for a read-only script, ``set_repl``
  honoured, EVAL inside MULTI inside the transaction's own MULTI/EXEC;
- a replica of ours holds the same data as its master after scripts that write at random
  (SPOP, math.random), select other databases, fail half-way (DEBUG DIGEST equal);
- the AOF: kill -9 and restart, the same DEBUG DIGEST.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import hiredis

from tests.node.test_replication import in_sync, make_replica
from tests.support import ManagedProcess, redis_server, running, slotgate_node, wait_until

SCRIPTS: list[tuple[str, ...]] = [
    ("EVAL", "return redis.call('set', KEYS[1], ARGV[1])", "1", "one", "1"),
    ("EVAL", "redis.call('set','a','1') redis.call('incr','a') return 1", "0"),
    ("EVAL", "return redis.call('get','a')", "0"),
    ("EVAL", "redis.call('rpush','l','x','y') redis.set_repl(redis.REPL_NONE) "
             "redis.call('set','hidden','1') redis.set_repl(redis.REPL_ALL) "
             "redis.call('set','shown','1')", "0"),
    ("EVAL", "redis.call('select', 2) redis.call('set','in2','v') return 1", "0"),
    ("EVAL", "redis.call('sadd','s','a') return redis.call('spop','s')", "0"),
    ("EVAL", "redis.call('set','before','1') return redis.call('incr','l')", "0"),
    ("EVAL", "redis.call('set','px','1','PX','100000') return 1", "0"),
    ("FUNCTION", "LOAD", "#!lua name=rl\nredis.register_function('rf', function(k, a) "
                         "redis.call('set', k[1], a[1]) redis.call('incr', 'fc') end)"),
    ("FCALL", "rf", "1", "fk", "v"),
    ("FCALL_RO", "rf", "1", "fk", "v"),
]
IN_MULTI: list[tuple[str, ...]] = [
    ("MULTI",), ("SET", "m", "1"), ("EVAL", "redis.call('incr','m') redis.call('incr','m')", "0"),
    ("EXEC",),
]


def _send(sock: socket.socket, *argv: str) -> None:
    out = [b"*%d\r\n" % len(argv)]
    for a in argv:
        b = a.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    sock.sendall(b"".join(out))


def _read_line(sock: socket.socket) -> bytes:
    buf = b""
    while not buf.endswith(b"\r\n"):
        ch = sock.recv(1)
        if not ch:
            raise ConnectionError("closed")
        buf += ch
        if buf == b"\n":  # keep-alive newline while the snapshot is made
            buf = b""
    return buf[:-2]


def _stream_after_sync(port: int, commands: list[tuple[str, ...]]) -> list[list[bytes]]:
    """PSYNC as a replica would, run ``commands`` on another connection, return what the
    master streamed (PING and REPLCONF left out)."""
    repl = socket.create_connection(("127.0.0.1", port), timeout=10)
    client = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        _send(repl, "PSYNC", "?", "-1")
        assert _read_line(repl).startswith(b"+FULLRESYNC")
        size = int(_read_line(repl)[1:])
        while size:
            size -= len(repl.recv(min(size, 65536)))
        reader = hiredis.Reader()
        for argv in commands:
            _send(client, *argv)
            reader_c = hiredis.Reader()
            while (reply := reader_c.gets()) is False:
                reader_c.feed(client.recv(65536))
        got: list[list[bytes]] = []
        repl.settimeout(0.5)
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            try:
                data = repl.recv(65536)
            except TimeoutError:
                break
            reader.feed(data)
            while (cmd := reader.gets()) is not False:
                if cmd[0].upper() not in (b"PING", b"REPLCONF"):
                    # absolute expiry times differ by the run's own clock
                    args = [b"<ms>" if i > 0 and cmd[i - 1].upper() == b"PXAT" else a
                            for i, a in enumerate(cmd)]
                    got.append([cmd[0].upper(), *args[1:]])
        del reply
        return got
    finally:
        repl.close()
        client.close()


def test_stream_matches_redis(tmp_path: Path) -> None:
    ours = slotgate_node(tmp_path)
    real = redis_server(tmp_path)
    with running(ours, real):
        streams = {name: _stream_after_sync(p.port, SCRIPTS + IN_MULTI)
                   for name, p in (("ours", ours), ("real", real))}
    assert streams["ours"] == streams["real"]
    flat = [c[0] for c in streams["ours"]]
    assert b"MULTI" in flat and b"EVAL" not in flat


def _run_all(r: object) -> None:
    for argv in SCRIPTS + IN_MULTI:
        try:
            r.execute_command(*argv)  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - scripts that fail on purpose
            pass


def _digest(p: ManagedProcess) -> bytes:
    return p.client().execute_command("DEBUG", "DIGEST")


def test_replica_holds_the_masters_data_after_scripts(tmp_path: Path) -> None:
    master = slotgate_node(tmp_path, extra=["--repl-ping-replica-period", "1", "--enable-debug-command", "yes"])
    replica = slotgate_node(tmp_path, extra=["--repl-ping-replica-period", "1", "--enable-debug-command", "yes"])
    with running(master, replica):
        r = make_replica(replica, master)
        m = master.client()
        _run_all(m)
        for _ in range(20):  # random effects: the replica must follow what the master did
            m.execute_command("EVAL", "local n = math.random(1000) "
                              "redis.call('sadd','r', n, n + 1) "
                              "return redis.call('spop','r')", "0")
        m.execute_command("SET", "hidden", "set-by-a-plain-command")
        wait_until(lambda: in_sync(m, r), what="replica in sync")
        assert _digest(master) == _digest(replica)
        assert r.get("shown") == b"1"
        assert r.get("in2") is None and replica.client(db=2).get("in2") == b"v"


def test_aof_reload_after_scripts(tmp_path: Path) -> None:
    node = slotgate_node(tmp_path, extra=["--appendonly", "yes", "--appendfsync", "always",
                                                 "--enable-debug-command", "yes"])
    with running(node):
        c = node.client()
        _run_all(c)
        assert c.exists("hidden")  # REPL_NONE: not in the AOF either
        c.set("hidden", "set-by-a-plain-command")
        before = _digest(node)
        node.kill()
        node.start()
        assert _digest(node) == before
