"""The proxy in front of a real redis-server cluster that requires a password: it logs in on
every connection it opens (data, topology, transactions, blocking commands, subscribers,
/healthz), as the default user or an ACL user; a refused login is one log line and a metric,
retried with backoff (counted at the nodes); and no client can lock the proxy out with
CONFIG SET requirepass or ACL commands unless the proxy allows admin commands.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from slotgate.protocol.slots import key_slot
from tests.conftest import _session_cluster
from tests.proxy.test_metrics import parse
from tests.support import ManagedProcess, free_port, slotgate_proxy, wait_until

PASSWORD = "s3cret-pw"
ACL_USER = "slotgate"
ACL_PASSWORD = "acl-pw"
WINDOW_S = 3.0  # how long connection attempts are counted at the nodes


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ManagedProcess]]:
    """Three real masters (no replicas), each with ``requirepass`` and an ACL user."""
    with contextlib.closing(_session_cluster("real", tmp_path_factory, 3, 0)) as cluster:
        procs = next(cluster)
        for n in procs:
            c = n.client()
            c.execute_command("ACL", "SETUSER", ACL_USER, "on", f">{ACL_PASSWORD}", "~*", "&*",
                              "+@all")
            c.config_set("requirepass", PASSWORD)
        yield procs


def node_client(n: ManagedProcess) -> redis.Redis:
    return n.client(password=PASSWORD, socket_timeout=5)


def start_proxy(tmp_path: Path, nodes: list[ManagedProcess], config: str,
                cleanup: list[ManagedProcess]) -> tuple[ManagedProcess, int]:
    cfg = tmp_path / "proxy.yaml"
    cfg.write_text(config)
    metrics_port = free_port()
    proc = slotgate_proxy(tmp_path, [n.port for n in nodes],
                          ["--config", str(cfg), "--metrics", f"127.0.0.1:{metrics_port}"])
    cleanup.append(proc)
    proc.start()
    return proc, metrics_port


def metrics(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        return parse(resp.read().decode())


def healthz(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def auth_failures(port: int) -> float:
    return sum(v for (name, _), v in metrics(port).items()
               if name == "slotgate_backend_auth_failures_total")


def every_kind_of_connection(proxy: ManagedProcess) -> None:
    """Traffic that makes the proxy open each kind of node connection."""
    c = proxy.client(socket_timeout=10)
    keys = [f"auth:{i}" for i in range(60)]  # spread over the three masters
    assert len({key_slot(k.encode()) // 5462 for k in keys}) == 3
    for k in keys:
        c.set(k, k)
    assert c.mget(keys) == [k.encode() for k in keys]
    pipe = c.pipeline(transaction=True)  # MULTI/EXEC on a connection of its own
    pipe.set("{auth}a", 1).incr("{auth}a")
    assert pipe.execute() == [True, 2]
    assert c.blpop(["auth:list"], timeout=0.1) is None  # a blocking command: its own connection
    pubsub = c.pubsub()  # a subscriber link
    pubsub.subscribe("auth-channel")
    wait_until(lambda: pubsub.get_message(timeout=0.1), 10, "the subscribe confirmation")
    assert c.publish("auth-channel", "hi") == 1
    pubsub.close()
    assert c.dbsize() >= 60  # fan-out to every master


def test_requirepass_on_every_connection(tmp_path: Path, nodes: list[ManagedProcess],
                                         cleanup: list[ManagedProcess]) -> None:
    proxy, mport = start_proxy(tmp_path, nodes, f'backend:\n  password: "{PASSWORD}"\n', cleanup)
    every_kind_of_connection(proxy)
    assert healthz(mport) == 200
    assert auth_failures(mport) == 0


def test_acl_user_on_every_connection(tmp_path: Path, nodes: list[ManagedProcess],
                                      cleanup: list[ManagedProcess]) -> None:
    proxy, mport = start_proxy(
        tmp_path, nodes, f'backend:\n  username: {ACL_USER}\n  password: "{ACL_PASSWORD}"\n',
        cleanup)
    every_kind_of_connection(proxy)
    assert healthz(mport) == 200
    # The nodes see the proxy's connections as the ACL user, never as the default user.
    proxy_port = f":{proxy.port}"
    for n in nodes:
        clients = node_client(n).client_list()
        users = {c["user"] for c in clients if c["laddr"].endswith(f":{n.port}")
                 and c["cmd"] not in ("client|list",) and not c["addr"].endswith(proxy_port)}
        assert users <= {ACL_USER, "default"}
        assert ACL_USER in users


def connections_received(nodes: list[ManagedProcess]) -> int:
    return sum(int(node_client(n).info("stats")["total_connections_received"]) for n in nodes)


def hammer(proxy: ManagedProcess, stop: threading.Event, errors: list[str],
           key: str | None = None) -> None:
    c = proxy.client(socket_timeout=15)
    i = 0
    while not stop.is_set():
        try:
            c.get(key or f"hammer:{i}")
        except redis.RedisError as exc:
            errors.append(str(exc))
        i += 1


def test_wrong_password_is_one_log_line_a_metric_and_no_storm(
        tmp_path: Path, nodes: list[ManagedProcess], cleanup: list[ManagedProcess]) -> None:
    proxy, mport = start_proxy(
        tmp_path, nodes,
        "backend:\n  password: wrong\nretry:\n  deadline: 200ms\n", cleanup)
    stop = threading.Event()
    errors: list[str] = []
    clients = [threading.Thread(target=hammer, args=(proxy, stop, errors)) for _ in range(4)]
    for t in clients:
        t.start()
    try:
        time.sleep(2.0)  # part of the scenario: the backoff reaches its ceiling
        before = connections_received(nodes) + len(nodes)  # our own INFO connections
        time.sleep(WINDOW_S)  # part of the scenario: the window the attempts are counted in
        attempts = connections_received(nodes) - before
    finally:
        stop.set()
        for t in clients:
            t.join()
    assert errors, "requests cannot succeed without the cluster's password"
    # Retried with backoff (at most ~1 s apart per node and kind of connection), not a storm:
    # without the backoff the topology refresher alone opens ~10 connections a second per node.
    assert attempts <= 6 * len(nodes) * WINDOW_S, attempts
    assert auth_failures(mport) >= len(nodes)
    assert healthz(mport) == 503
    refused = [line for line in proxy.log_text().splitlines() if "backend login to" in line]
    assert 1 <= len(refused) <= len(nodes), refused  # one line per node, however many attempts
    assert "WRONGPASS" in refused[0] and "backend.password" in refused[0]


def test_node_auth_overrides_for_one_node(tmp_path: Path, nodes: list[ManagedProcess],
                                          cleanup: list[ManagedProcess]) -> None:
    """backend.node_auth wins for its node: wrong there, the other masters still serve."""
    bad = nodes[0]
    proxy, mport = start_proxy(
        tmp_path, nodes,
        f'backend:\n  password: "{PASSWORD}"\n  node_auth:\n'
        f'    "127.0.0.1:{bad.port}": {{password: nope}}\nretry:\n  deadline: 300ms\n', cleanup)
    c = proxy.client(socket_timeout=10)
    good_key = next(f"k{i}" for i in range(10_000)
                    if not _owned_by(bad, key_slot(f"k{i}".encode())))
    wait_until(lambda: c.set(good_key, 1), 10, "a write to a good master", ignore=(redis.RedisError,))
    bad_key = next(f"k{i}" for i in range(10_000) if _owned_by(bad, key_slot(f"k{i}".encode())))
    with pytest.raises(redis.RedisError):
        c.set(bad_key, 1)
    stop = threading.Event()
    errors: list[str] = []
    clients = [threading.Thread(target=hammer, args=(proxy, stop, errors, bad_key))
               for _ in range(4)]
    for t in clients:
        t.start()
    try:
        time.sleep(2.0)  # part of the scenario: the backoff reaches its ceiling
        before = int(node_client(bad).info("stats")["total_connections_received"]) + 1
        time.sleep(WINDOW_S)  # part of the scenario: the window the attempts are counted in
        attempts = int(node_client(bad).info("stats")["total_connections_received"]) - before
    finally:
        stop.set()
        for t in clients:
            t.join()
    assert errors
    assert attempts <= 6 * WINDOW_S, attempts
    samples = metrics(mport)
    assert samples[("slotgate_backend_auth_failures_total",
                    (("node", f"127.0.0.1:{bad.port}"),))] >= 1
    assert c.get(good_key) == b"1"


def _owned_by(n: ManagedProcess, slot: int) -> bool:
    for entry in node_client(n).execute_command("CLUSTER", "SLOTS"):
        if int(entry[0]) <= slot <= int(entry[1]):
            return int(entry[2][1]) == n.port
    return False


# --- no client can lock the proxy out -------------------------------------------------------

LOCKOUTS = [
    ("CONFIG", "SET", "requirepass", "x"),
    ("CONFIG", "SET", "MasterAuth", "x"),
    ("config", "set", "masteruser", "x"),
    ("CONFIG", "SET", "maxmemory-policy", "noeviction", "requirepass", "x"),
]


def test_no_client_can_lock_the_proxy_out(tmp_path: Path, nodes: list[ManagedProcess],
                                          cleanup: list[ManagedProcess]) -> None:
    proxy, _ = start_proxy(tmp_path, nodes, f'backend:\n  password: "{PASSWORD}"\n', cleanup)
    other = proxy.client(socket_timeout=10)
    other.set("lockout:other", "before")
    attacker = proxy.client(socket_timeout=10)
    for argv in LOCKOUTS:
        with pytest.raises(redis.ResponseError) as err:
            attacker.execute_command(*argv)
        assert str(err.value).startswith("slotgate: '"), argv  # redis-py drops "NOPERM "
        assert "admin_commands" in str(err.value)
    raw = attacker.connection_pool.get_connection()
    raw.send_command("CONFIG", "SET", "requirepass", "x")
    with pytest.raises(redis.exceptions.NoPermissionError):
        raw.read_response()
    attacker.connection_pool.release(raw)
    # ACL commands manage the proxy's own users (it has no such user): the nodes' are untouched.
    assert attacker.execute_command("ACL", "DELUSER", ACL_USER) == 0
    pipe = attacker.pipeline(transaction=True)
    pipe.config_set("requirepass", "x")
    with pytest.raises(redis.ResponseError):
        pipe.execute()
    # A harmless CONFIG SET still reaches every node.
    assert attacker.config_set("maxmemory-samples", "7")
    for n in nodes:
        assert node_client(n).config_get("maxmemory-samples") == {"maxmemory-samples": "7"}
        assert node_client(n).config_get("requirepass") == {"requirepass": PASSWORD}
        assert ACL_USER in node_client(n).acl_users()
    # Every client keeps working, new ones too (their commands need new node connections:
    # a transaction and a blocking command).
    assert other.get("lockout:other") == b"before"
    fresh = proxy.client(socket_timeout=10)
    pipe = fresh.pipeline(transaction=True)
    pipe.set("{lockout}x", 1).get("{lockout}x")
    assert pipe.execute() == [True, b"1"]
    assert fresh.blpop(["lockout:list"], timeout=0.1) is None


def test_admin_commands_change_the_password_and_the_proxy_adopts_it(
        tmp_path: Path, nodes: list[ManagedProcess], cleanup: list[ManagedProcess]) -> None:
    proxy, _ = start_proxy(
        tmp_path, nodes, f'admin_commands: true\nbackend:\n  password: "{PASSWORD}"\n', cleanup)
    admin = proxy.client(socket_timeout=10)
    admin.set("adopt:k", "v")
    new_password = "rotated-pw"
    try:
        assert admin.config_set("requirepass", new_password)
        for n in nodes:
            assert n.client(password=new_password).config_get("requirepass") == {
                "requirepass": new_password}
        # New node connections (a transaction, a blocking command, a subscriber) log in with
        # the new password.
        fresh = proxy.client(socket_timeout=10)
        pipe = fresh.pipeline(transaction=True)
        pipe.set("{adopt}x", 2).get("{adopt}x")
        assert pipe.execute() == [True, b"2"]
        assert fresh.blpop(["adopt:list"], timeout=0.1) is None
        pubsub = fresh.pubsub()
        pubsub.subscribe("adopt-channel")
        wait_until(lambda: pubsub.get_message(timeout=0.1), 10, "the subscribe confirmation")
        pubsub.close()
        assert admin.get("adopt:k") == b"v"
        assert "changed through the proxy" in proxy.log_text()
    finally:
        for n in nodes:
            for pw in (new_password, PASSWORD):
                try:
                    n.client(password=pw).config_set("requirepass", PASSWORD)
                    break
                except redis.AuthenticationError:
                    continue


def test_operator_command_logs_in(nodes: list[ManagedProcess],
                                  capsys: pytest.CaptureFixture[str]) -> None:
    """``slotgate cluster check/info`` reach password-protected nodes with --password (and an
    ACL user with --user); without it they report the node's NOAUTH."""
    from slotgate.proxy.ops.cli import main

    seed = f"127.0.0.1:{nodes[0].port}"
    assert main(["cluster", "check", seed, "--password", PASSWORD]) == 0
    assert "[OK] All 16384 slots covered." in capsys.readouterr().out
    assert main(["cluster", "info", seed, "--user", ACL_USER, "--password", ACL_PASSWORD]) == 0
    assert capsys.readouterr().out.count("keys | slots") == len(nodes)
    assert main(["cluster", "check", seed]) == 1
    assert "NOAUTH" in capsys.readouterr().err
    assert main(["cluster", "check", seed, "--password", "wrong"]) == 1
    assert "WRONGPASS" in capsys.readouterr().err


def test_workers_log_in(tmp_path: Path, nodes: list[ManagedProcess],
                        cleanup: list[ManagedProcess]) -> None:
    proxy, mport = start_proxy(tmp_path, nodes,
                               f'workers: 2\nbackend:\n  password: "{PASSWORD}"\n', cleanup)
    for _ in range(4):  # the kernel spreads the connections over both workers
        every_kind_of_connection(proxy)
    assert healthz(mport) == 200
    assert auth_failures(mport) == 0


def test_reload_applies_new_credentials(tmp_path: Path, nodes: list[ManagedProcess],
                                        cleanup: list[ManagedProcess]) -> None:
    """A wrong password fixed in the file: after SIGHUP the next attempt logs in."""
    proxy, mport = start_proxy(tmp_path, nodes, "backend:\n  password: wrong\n", cleanup)
    wait_until(lambda: auth_failures(mport) >= 1, 10, "a refused login")
    (tmp_path / "proxy.yaml").write_text(f'backend:\n  password: "{PASSWORD}"\n')
    os.kill(proxy.pid, signal.SIGHUP)
    c = proxy.client(socket_timeout=10)
    wait_until(lambda: c.set("reload:k", "v"), 15, "a write after the reload",
               ignore=(redis.RedisError,))
    assert c.get("reload:k") == b"v"
    assert healthz(mport) == 200


def test_with_workers_a_new_requirepass_is_refused_even_to_admins(
        tmp_path: Path, nodes: list[ManagedProcess], cleanup: list[ManagedProcess]) -> None:
    """Only the worker that ran it could adopt it: the others would be locked out."""
    proxy, _ = start_proxy(
        tmp_path, nodes, f'workers: 2\nadmin_commands: true\nbackend:\n  password: "{PASSWORD}"\n',
        cleanup)
    c = proxy.client(socket_timeout=10)
    with pytest.raises(redis.ResponseError, match="with 2 workers"):
        c.config_set("requirepass", "x")
    for n in nodes:
        assert node_client(n).config_get("requirepass") == {"requirepass": PASSWORD}
    assert c.config_set("maxmemory-samples", "6")


def test_requirepass_on_bundled_nodes(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path,
                                      cleanup: list[ManagedProcess]) -> None:
    with contextlib.closing(_session_cluster("bundled", tmp_path_factory, 3, 0)) as cluster:
        bundled = next(cluster)
        for n in bundled:
            n.client().config_set("requirepass", PASSWORD)
        proxy, mport = start_proxy(tmp_path, bundled, f'backend:\n  password: "{PASSWORD}"\n',
                                   cleanup)
        every_kind_of_connection(proxy)
        assert healthz(mport) == 200
        proxy.stop()


def test_a_password_change_some_nodes_refused_locks_nothing_out(
        tmp_path: Path, nodes: list[ManagedProcess], cleanup: list[ManagedProcess]) -> None:
    """One node refuses the new requirepass: the client gets that node's error, and the proxy
    still logs in everywhere (the new password where it took, the old one where not)."""
    stubborn = nodes[0]
    node_client(stubborn).execute_command("ACL", "SETUSER", "default", "-config|set")
    proxy, _ = start_proxy(
        tmp_path, nodes, f'admin_commands: true\nbackend:\n  password: "{PASSWORD}"\n', cleanup)
    new_password = "partly-rotated"
    keys = {n.port: next(f"p{i}" for i in range(10_000) if _owned_by(n, key_slot(f"p{i}".encode())))
            for n in nodes}
    try:
        admin = proxy.client(socket_timeout=10)
        with pytest.raises(redis.exceptions.NoPermissionError):
            admin.config_set("requirepass", new_password)
        assert node_client(stubborn).config_get("requirepass") == {"requirepass": PASSWORD}
        assert nodes[1].client(password=new_password).ping()
        # Fresh node connections (one transaction per master) log in on every node.
        fresh = proxy.client(socket_timeout=10)
        for port, key in keys.items():
            pipe = fresh.pipeline(transaction=True)
            pipe.set(key, port).get(key)
            assert pipe.execute() == [True, str(port).encode()]
    finally:
        node_client(stubborn).execute_command("ACL", "SETUSER", "default", "+config|set")
        for n in nodes[1:]:
            n.client(password=new_password).config_set("requirepass", PASSWORD)
