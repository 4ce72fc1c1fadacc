"""The proxy's users reloaded with SIGHUP (one process, and every worker of a supervisor): a
changed user's connections run under the new rules from their next command, a removed user's
connections are closed, a newly enabled user can log in, and a section that no longer loads is
refused as a whole."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import start_cluster
from tests.proxy.auth_support import write_config
from tests.support import ManagedProcess, RawClient, running, slotgate_proxy, wait_until

BEFORE = [
    "alice on >alicepw ~app:* +@read",
    "bob off >bobpw ~* +@all",
    "carol on >carolpw ~* +@all",
]
AFTER = [
    "alice on >alicepw ~app:* +@read +set",  # changed: may write now
    "bob on >bobpw ~* +@all",  # enabled
]  # carol removed
NOPERM_SET = b"-NOPERM this user has no permissions to run the 'set' command\r\n"


@pytest.fixture(scope="module")
def seeds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[int]]:
    nodes = start_cluster("real", tmp_path_factory.mktemp("auth-reload"), masters=3,
                          replicas=0)
    try:
        yield [n.port for n in nodes]
    finally:
        for n in nodes:
            n.stop()


def login(port: int, user: str, password: str) -> RawClient:
    c = RawClient(port, timeout_s=10)
    assert c.call("AUTH", user, password) == b"+OK\r\n"
    return c


def closed(c: RawClient) -> bool:
    try:
        c.send("PING")
        c.read(timeout_s=1)
    except (ConnectionError, OSError):
        return True
    return False


def reload(proxy: ManagedProcess, conf: Path, seeds: list[int], users: list[str],
           requirepass: str | None = "pw") -> None:
    write_config(conf, seeds, users, requirepass)
    assert proxy.proc is not None
    proxy.proc.send_signal(signal.SIGHUP)


def test_sighup_changes_users_and_their_connections(seeds: list[int], tmp_path: Path) -> None:
    conf = write_config(tmp_path / "proxy.yaml", seeds, BEFORE, "pw")
    proxy = slotgate_proxy(tmp_path, [], extra=["--config", str(conf)])
    with running(proxy):
        alice = login(proxy.port, "alice", "alicepw")
        carol = login(proxy.port, "carol", "carolpw")
        default = login(proxy.port, "default", "pw")
        assert alice.call("SET", "app:1", "x") == NOPERM_SET
        assert RawClient(proxy.port).call("AUTH", "bob", "bobpw").startswith(b"-WRONGPASS")
        assert carol.call("SET", "app:1", "c") == b"+OK\r\n"

        # A section that no longer loads: refused whole, the users stay as they are.
        (tmp_path / "proxy.yaml").write_text(
            (tmp_path / "proxy.yaml").read_text().replace("+@read", "+nosuch"))
        assert proxy.proc is not None
        proxy.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "reload refused" in proxy.log_text(), 10, "the reload refused")
        assert "auth.users: entry 0" in proxy.log_text()
        assert alice.call("SET", "app:1", "x") == NOPERM_SET
        assert carol.call("GET", "app:1") == b"$1\r\nc\r\n"

        reload(proxy, conf, seeds, AFTER, requirepass="pw2")
        wait_until(lambda: alice.call("SET", "app:1", "x") == b"+OK\r\n", 10,
                   "alice's connection under her new rules")
        assert alice.call("GET", "app:1") == b"$1\r\nx\r\n"
        assert closed(carol)
        assert RawClient(proxy.port).call("AUTH", "carol", "carolpw").startswith(b"-WRONGPASS")
        assert login(proxy.port, "bob", "bobpw").call("SET", "app:2", "b") == b"+OK\r\n"
        # The default user's new password: connections already in stay in, new ones need it.
        assert default.call("GET", "app:1") == b"$1\r\nx\r\n"
        fresh = RawClient(proxy.port)
        assert fresh.call("GET", "app:1") == b"-NOAUTH Authentication required.\r\n"
        assert fresh.call("AUTH", "pw").startswith(b"-WRONGPASS")
        assert fresh.call("AUTH", "pw2") == b"+OK\r\n"
        for c in (alice, carol, default, fresh):
            c.close()


def test_sighup_reloads_every_worker(seeds: list[int], tmp_path: Path) -> None:
    conf = write_config(tmp_path / "proxy.yaml", seeds, BEFORE, None)
    proxy = slotgate_proxy(tmp_path, [], extra=["--config", str(conf), "--workers", "2"])
    with running(proxy):
        wait_until(lambda: "(2 workers)" in proxy.log_text(), 30, "both workers up")
        # Connections until both workers hold some (a worker's client ids are index + 1
        # modulo the worker count).
        conns: dict[int, list[RawClient]] = {0: [], 1: []}
        for _ in range(200):
            c = RawClient(proxy.port, timeout_s=10)
            cid = int(c.call("CLIENT", "ID")[1:-2])  # as the default user (no password)
            assert c.call("AUTH", "alice", "alicepw") == b"+OK\r\n"
            conns[(cid - 1) % 2].append(c)
            if conns[0] and conns[1]:
                break
        assert conns[0] and conns[1], "SO_REUSEPORT gave every connection to one worker"
        every = conns[0] + conns[1]
        assert all(c.call("SET", "app:1", "x") == NOPERM_SET for c in every)
        reload(proxy, conf, seeds, AFTER, requirepass=None)
        wait_until(lambda: all(c.call("SET", "app:1", "x") == b"+OK\r\n" for c in every), 15,
                   "every worker's alice under the new rules")
        for c in every:
            c.close()


def test_acl_setuser_closes_subscribers_of_channels_taken_away(seeds: list[int],
                                                                tmp_path: Path) -> None:
    """As Redis: after ACL SETUSER narrows a user's channels, its subscribers that hold a
    channel no longer allowed are closed; the others stay."""
    conf = write_config(tmp_path / "proxy.yaml", seeds,
                        ["sub on >s resetchannels &news.* &sports.* +@all"], None)
    proxy = slotgate_proxy(tmp_path, [], extra=["--config", str(conf)])
    with running(proxy):
        news, sports = login(proxy.port, "sub", "s"), login(proxy.port, "sub", "s")
        assert news.call("SUBSCRIBE", "news.a").startswith(b"*3\r\n$9\r\nsubscribe")
        assert sports.call("SUBSCRIBE", "sports.a").startswith(b"*3\r\n$9\r\nsubscribe")
        admin = RawClient(proxy.port)
        assert admin.call("ACL", "SETUSER", "sub", "resetchannels", "&news.*") == b"+OK\r\n"
        assert closed(sports)
        assert news.call("PING") == b"*2\r\n$4\r\npong\r\n$0\r\n\r\n"
        # The same through a reload.
        reload(proxy, conf, seeds, ["sub on >s resetchannels &sports.* +@all"], None)
        wait_until(lambda: closed(news), 10, "the news subscriber closed by the reload")
        for c in (news, sports, admin):
            c.close()
