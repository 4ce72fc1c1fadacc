"""Auth at the proxy with real clients: redis-py (RESP2 and RESP3) and redis-cli, each rule kind
(commands, categories, key patterns read vs write, channels), wrong passwords and disabled
users; every outcome compared with a standalone redis-server that has the same users."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.conftest import start_cluster
from tests.proxy.auth_support import pair
from tests.support import ManagedProcess, redis_cli


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ManagedProcess, ManagedProcess]]:
    workdir = tmp_path_factory.mktemp("auth-clients")
    nodes = start_cluster("real", workdir / "cluster", masters=3, replicas=0)
    try:
        with pair(workdir, [n.port for n in nodes]) as both:
            admin = both[0].client(username="admin", password="adminpw")
            admin.mset({"app:1": "a"})
            admin.set("ro:1", "r")
            admin.set("other", "o")
            both[1].client(username="admin", password="adminpw").mset(
                {"app:1": "a", "ro:1": "r", "other": "o"})
            yield both
    finally:
        for n in nodes:
            n.stop()


def outcome(step: Callable[[], object]) -> object:
    """What a client step gave: its value, or its exception's class and message."""
    try:
        return step()
    except redis.RedisError as e:
        return (type(e).__name__, str(e))


Steps = Callable[[ManagedProcess, int], list[object]]


def rule_kinds(server: ManagedProcess, proto: int) -> list[object]:
    def client(user: str | None = None, password: str | None = None) -> redis.Redis:
        # No retries: redis-py retries a refused login with backoff (seconds each).
        return server.client(username=user, password=password, protocol=proto,
                             retry=Retry(NoBackoff(), 0))

    out: list[object] = []
    alice = client("alice", "alicepw")  # ~app:* +@read
    out += [outcome(lambda: alice.get("app:1")), outcome(lambda: alice.set("app:1", "x")),
            outcome(lambda: alice.get("other")), outcome(lambda: alice.acl_whoami()),
            outcome(lambda: alice.execute_command("ACL", "WHOAMI"))]
    erin = client("erin", "erinpw")  # -@all +get +set +client|setname +acl|whoami
    out += [outcome(lambda: erin.set("any", "1")), outcome(lambda: erin.delete("any")),
            outcome(lambda: erin.client_setname("n")), outcome(lambda: erin.client_getname())]
    carol = client("carol", "carolpw")  # %R~ro:* %W~wo:* ~rw:* +@all -@dangerous
    out += [outcome(lambda: carol.get("ro:1")), outcome(lambda: carol.set("ro:1", "x")),
            outcome(lambda: carol.set("wo:1", "w")), outcome(lambda: carol.get("wo:1")),
            outcome(lambda: carol.set("rw:1", "v")), outcome(lambda: carol.get("rw:1")),
            outcome(lambda: carol.keys("*")), outcome(lambda: carol.flushall())]
    dave = client("dave", "davepw")  # &news.* publish/subscribe
    out += [outcome(lambda: dave.publish("news.a", "hi")),
            outcome(lambda: dave.publish("sports", "x"))]
    p = dave.pubsub()
    out.append(outcome(lambda: p.subscribe("sports")))
    out.append(outcome(lambda: p.get_message(timeout=1.0)))
    p.close()
    p = dave.pubsub()
    p.subscribe("news.a")
    out.append(outcome(lambda: p.get_message(timeout=1.0)))
    p.close()
    for user, password in (("alice", "wrong"), ("bob", "bobpw"), ("nosuch", "x"),
                           ("default", "wrong")):
        out.append(outcome(lambda u=user, pw=password: client(u, pw).ping()))
    out.append(outcome(lambda: client().get("app:1")))
    out.append(outcome(lambda: client(None, "topsecret").get("app:1")))
    for c in (alice, erin, carol, dave):
        c.close()
    return out


@pytest.mark.parametrize("proto", [2, 3])
def test_redis_py_rule_kinds(servers: tuple[ManagedProcess, ManagedProcess], proto: int) -> None:
    proxy, real = servers
    ours, theirs = rule_kinds(proxy, proto), rule_kinds(real, proto)
    assert ours == theirs
    # The script did meet every kind of refusal.
    text = repr(theirs)
    for expected in ("no permissions to run", "access one of the keys",
                     "access one of the channels", "invalid username-password pair",
                     "uthenticat"):
        assert expected in text


CLI_RUNS = [
    (["--user", "alice", "--pass", "alicepw"], ["GET", "app:1"]),
    (["--user", "alice", "--pass", "alicepw"], ["SET", "app:1", "x"]),
    (["--user", "alice", "--pass", "alicepw"], ["GET", "other"]),
    (["--user", "carol", "--pass", "carolpw"], ["GET", "ro:1"]),
    (["--user", "carol", "--pass", "carolpw"], ["SET", "ro:1", "x"]),
    (["--user", "carol", "--pass", "carolpw"], ["SET", "wo:9", "x"]),
    (["--user", "carol", "--pass", "carolpw"], ["GET", "wo:9"]),
    (["--user", "carol", "--pass", "carolpw"], ["FLUSHALL"]),
    (["--user", "dave", "--pass", "davepw"], ["PUBLISH", "news.a", "x"]),
    (["--user", "dave", "--pass", "davepw"], ["PUBLISH", "sports", "x"]),
    (["--user", "erin", "--pass", "erinpw"], ["DEL", "x"]),
    (["--user", "alice", "--pass", "wrong"], ["GET", "app:1"]),
    (["--user", "bob", "--pass", "bobpw"], ["GET", "app:1"]),
    (["--pass", "topsecret"], ["GET", "app:1"]),
    ([], ["GET", "app:1"]),
    (["--user", "admin", "--pass", "adminpw"], ["ACL", "WHOAMI"]),
    (["--user", "admin", "--pass", "adminpw"], ["ACL", "DRYRUN", "carol", "SET", "ro:1", "x"]),
    (["--user", "admin", "--pass", "adminpw", "-3"], ["ACL", "GETUSER", "carol"]),
]


def test_redis_cli(servers: tuple[ManagedProcess, ManagedProcess], tmp_path: Path) -> None:
    proxy, real = servers
    for login, command in CLI_RUNS:
        outputs = []
        for server in (proxy, real):
            done = redis_cli("-p", str(server.port), "--no-auth-warning", *login, *command,
                             check=False)
            outputs.append((done.returncode, done.stdout, done.stderr))
        assert outputs[0] == outputs[1], (login, command)
