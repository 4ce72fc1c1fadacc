"""Auth at the proxy against redis-server 7.0.15: the same users in the proxy's ``auth`` section
and in a standalone redis-server, the same script to both, raw replies equal in RESP2 and
RESP3 — with the proxy in front of a real redis-server cluster and in front of our nodes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import start_cluster
from tests.node.diff import Line
from tests.proxy.auth_support import login_lines, norm_acl_log, pair, run_script
from tests.support import ManagedProcess, RawClient


@pytest.fixture(scope="module", params=["real", "bundled"])
def servers(request: pytest.FixtureRequest,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ManagedProcess, ManagedProcess]]:
    """(proxy in front of a 3-master cluster of ``kind``, standalone redis-server)."""
    workdir = tmp_path_factory.mktemp(f"auth-{request.param}")
    nodes = start_cluster(request.param, workdir / "cluster", masters=3, replicas=0)
    try:
        with pair(workdir, [n.port for n in nodes]) as both:
            yield both
    finally:
        for n in nodes:
            n.stop()


def as_user(user: str, password: str, lines: list[Line], proto: int) -> list[Line]:
    return [*login_lines(user, password, proto), *lines]


ADMIN = ("admin", "adminpw")
SETUP = ["SET app:1 a", "SET other b", "SET ro:1 r", "SET wo:1 w", "SET rw:1 x",
         "SET sel:1 s", "HSET app:h f v"]

SCRIPTS: dict[str, tuple[tuple[str, str] | None, list[Line]]] = {
    # (login or None: stay logged out, lines)
    "before AUTH": (None, [
        "GET app:1", "PING", "ECHO x", "nosuchcommand a", "GET", "CLIENT SETNAME x",
        "SELECT 0", "COMMAND COUNT", "ACL WHOAMI", "MULTI", "EXEC", "DISCARD",
        "HELLO 3", "HELLO 2 SETNAME x", "HELLO 3 AUTH default wrong", "HELLO 4",
        "AUTH wrong", "AUTH a b c", "AUTH nosuch x", "AUTH alice wrong", "AUTH bob bobpw",
        "GET app:1", "RESET", "GET app:1", "AUTH topsecret", "GET app:1", "ACL WHOAMI",
        "RESET", "GET app:1",
    ]),
    "commands and categories": (("alice", "alicepw"), [
        "GET app:1", "HGETALL app:h", "EXISTS app:1", "SET app:1 z", "DEL app:1",
        "GET other", "ACL WHOAMI", "CLIENT SETNAME x", "FLUSHALL", "PING", "ECHO x",
        "MULTI", "GET app:1", "SET app:1 y", "EXEC", "MULTI", "GET app:1", "EXEC",
    ]),
    "first args and subcommands": (("erin", "erinpw"), [
        "GET app:1", "SET any 1", "DEL any", "CLIENT SETNAME x", "CLIENT GETNAME",
        "ACL WHOAMI", "ACL USERS", "PING",
    ]),
    "key patterns read vs write": (("carol", "carolpw"), [
        "GET ro:1", "SET ro:1 x", "GET wo:1", "SET wo:1 y", "GET rw:1", "SET rw:1 z",
        "APPEND wo:1 a", "APPEND rw:1 a", "GETDEL wo:1", "SET wo:1 v GET", "STRLEN wo:1",
        "GETRANGE ro:1 0 1", "SETRANGE ro:1 0 a", "BITFIELD ro:1 GET u8 0",
        "BITFIELD ro:1 SET u8 0 1", "GET other", "KEYS *", "FLUSHALL",
        "MULTI", "SET ro:1 x", "GET ro:1", "EXEC", "EXEC",
    ]),
    "selectors": (("frank", "frankpw"), [
        "GET other", "SET other x", "SET sel:1 y", "GET sel:1", "DEL sel:1",
    ]),
    "channels": (("dave", "davepw"), [
        "PUBLISH news.a hi", "PUBLISH sports x", "SUBSCRIBE sports", "SUBSCRIBE news.a sports",
        "PSUBSCRIBE news.x*", "PSUBSCRIBE sports*", "SSUBSCRIBE news.a", "GET k",
        "PSUBSCRIBE news.*", "PING", "PUNSUBSCRIBE news.*", "SUBSCRIBE news.a",
        "UNSUBSCRIBE news.a", "PING x",
    ]),
    "disabled and wrong passwords": (None, [
        "AUTH bob bobpw", "AUTH carol wrong", "HELLO 2 AUTH bob bobpw",
        "HELLO 2 AUTH carol wrong SETNAME x", "AUTH carol carolpw", "ACL WHOAMI",
        "AUTH alice alicepw", "GET app:1", "AUTH carol wrong", "GET app:1",
        "AUTH gina ginapw", "GET app:1", "AUTH gina other", "ACL WHOAMI", "AUTH gina x",
    ]),
    "ACL over the proxy's users": (ADMIN, [
        "ACL WHOAMI", "ACL USERS", ("ACL LIST", "rules"), "ACL GETUSER carol",
        "ACL GETUSER frank", ("ACL GETUSER dave", "rules"), "ACL GETUSER gina",
        "ACL GETUSER default", "ACL GETUSER nosuch", "ACL CAT",
        ("ACL CAT read", "sorted"), "ACL CAT nosuch", "ACL DRYRUN carol SET ro:1 x",
        "ACL DRYRUN carol GET ro:1", "ACL DRYRUN dave PUBLISH sports x",
        "ACL DRYRUN alice SET app:1 x", "ACL DRYRUN nosuch GET x", "ACL DRYRUN alice nosuch",
        "ACL DRYRUN alice GET", "ACL HELP", "ACL GENPASS 0", "ACL LOAD", "ACL SAVE",
        "ACL SETUSER zed on >z ~z:* +get", "ACL GETUSER zed", "ACL SETUSER zed +nosuch",
        "ACL SETUSER zed (~x", "ACL SETUSER zed %X~a", "ACL SETUSER zed <nope",
        "ACL USERS", "ACL DELUSER zed nosuch", "ACL DELUSER default", "ACL USERS",
    ]),
    # AUTH is queued in MULTI and runs at EXEC, in its place: later commands are checked as the
    # user it logged in (Redis 7.0's EXEC checks every queued command again).
    "AUTH inside MULTI": (ADMIN, [
        "ACL LOG RESET", "MULTI", "AUTH alice alicepw", "GET app:1", "SET app:1 z", "EXEC",
        "ACL WHOAMI", "GET app:1", "SET app:1 z", "AUTH admin adminpw",
        "MULTI", "AUTH alice wrong", "AUTH bob bobpw", "AUTH nosuch x", "AUTH a b c",
        "AUTH wrong", "GET app:1", "EXEC", "ACL WHOAMI", ("ACL LOG", "acl_log"),
        "MULTI", "AUTH", "EXEC", "MULTI", "AUTH alice alicepw", "DISCARD", "ACL WHOAMI",
        "MULTI", "AUTH alice alicepw", "AUTH admin adminpw", "SET app:1 y", "EXEC",
        "ACL WHOAMI", "MULTI", "SET app:2 x", "AUTH alice alicepw", "EXEC", "ACL WHOAMI",
        "GET app:2",
    ]),
    # HELLO too: its AUTH, SETNAME and protocol take effect in its place at EXEC.
    "HELLO inside MULTI": (ADMIN, [
        "MULTI", "HELLO 2 AUTH alice alicepw", "GET app:1", "SET app:1 z", ("EXEC", "ids"),
        "ACL WHOAMI", "AUTH admin adminpw", "MULTI", "HELLO 3 SETNAME n1", "HGETALL app:h",
        "PING", ("EXEC", "ids"), "HGETALL app:h", "CLIENT GETNAME", "MULTI", "HELLO 2",
        "HGETALL app:h", ("EXEC", "ids"), "HGETALL app:h", "MULTI",
        "HELLO 3 AUTH alice wrong", "HELLO 4", "HELLO x", "HELLO 2 SETNAME a b", "HELLO",
        "PING", ("EXEC", "ids"), "ACL WHOAMI", "CLIENT GETNAME", "MULTI",
        "HELLO 3 AUTH alice alicepw", "DISCARD", "ACL WHOAMI", "HGETALL app:h",
    ]),
    "ACL LOG": (ADMIN, [
        "ACL LOG RESET", "AUTH alice wrong", "AUTH alice alicepw", "GET other", "GET other",
        "SET app:1 x", "AUTH dave davepw", "PUBLISH sports x", "AUTH admin adminpw",
        ("ACL LOG", "acl_log"), ("ACL LOG 2", "acl_log"), "ACL LOG x", "ACL LOG RESET",
        "ACL LOG",
    ]),
}


@pytest.mark.parametrize("proto", [2, 3])
@pytest.mark.parametrize("name", list(SCRIPTS))
def test_same_replies_as_redis(servers: tuple[ManagedProcess, ManagedProcess], name: str,
                               proto: int) -> None:
    proxy, real = servers
    setup = as_user(*ADMIN, SETUP, 2)
    assert run_script(proxy.port, real.port, setup, 2) == []
    login, lines = SCRIPTS[name]
    if login is not None:
        lines = as_user(*login, lines, proto)
    elif proto == 3:
        lines = ["HELLO 3", *lines]
    assert run_script(proxy.port, real.port, lines, proto) == []


def test_config_check_names_the_key_and_redis_error(tmp_path: Path) -> None:
    from slotgate.proxy.ops.config import ConfigError, load

    def problems(text: str) -> list[str]:
        path = tmp_path / "c.yaml"
        path.write_text("seeds: ['127.0.0.1:7000']\n" + text)
        with pytest.raises(ConfigError) as err:
            load(path)
        return err.value.problems

    assert problems("auth:\n  users: ['alice on >pw +nosuch']\n") == [
        "auth.users: entry 0: Error loading ACL rule '+nosuch' for the user named 'alice': "
        "Unknown command or category name in ACL"]
    assert problems("auth:\n  users: ['alice on', 'alice off']\n") == [
        "auth.users: entry 1: Error in user declaration 'alice': Duplicate user found. A user "
        "can only be defined once in config files"]
    assert problems("auth:\n  users: ['alice on %X~a']\n") == [
        "auth.users: entry 0: Error in user declaration 'alice': Syntax error"]  # Redis' word
    assert problems("auth:\n  users: 'alice'\n")[0].startswith("auth.users: expected a list")
    assert problems("auth:\n  requirepass: 5\n") == [
        "auth.requirepass: expected a password string, got 5"]
    missing = tmp_path / "missing.acl"
    assert problems(f"auth:\n  aclfile: {missing}\n") == [
        f"auth.aclfile: Error loading ACLs, opening file '{missing}': No such file or "
        "directory"]
    bad = tmp_path / "bad.acl"
    bad.write_text("user alice on +nosuch\n")
    assert problems(f"auth:\n  aclfile: {bad}\n") == [
        f"auth.aclfile: {bad}:1: Unknown command or category name in ACL. WARNING: ACL errors "
        "detected, no change to the previously active ACL rules was performed"]
    good = tmp_path / "good.acl"
    good.write_text("user alice on >pw ~* +get\n")
    both = problems(f"auth:\n  aclfile: {good}\n  users: ['bob on']\n")
    assert both[0].startswith("auth.aclfile: Configuring Redis with users defined")


@pytest.mark.parametrize("proto", [2, 3])
def test_exec_checks_queued_commands_again(servers: tuple[ManagedProcess, ManagedProcess],
                                           proto: int) -> None:
    """Rules changed between MULTI and EXEC: EXEC answers the commands no longer allowed with
    Redis' NOPERM text in their places and runs the others (one slot: hash tags)."""
    replies = []
    for server in servers:
        admin, carol = RawClient(server.port), RawClient(server.port)
        assert admin.call("AUTH", "admin", "adminpw") == b"+OK\r\n"
        hello = ["HELLO", "3", "AUTH"] if proto == 3 else ["AUTH"]
        assert carol.call(*hello, "carol", "carolpw")[:1] in (b"+", b"%")
        got = [admin.call("ACL", "LOG", "RESET")]
        got += [carol.call(*line.split()) for line in (
            "MULTI", "SET rw:{t}1 a", "SET wo:{t}2 b", "GET rw:{t}1", "STRLEN rw:{t}1")]
        got.append(admin.call("ACL", "SETUSER", "carol", "resetkeys", "~rw:*", "-strlen"))
        got.append(carol.call("EXEC"))
        got.append(norm_acl_log(admin.call("ACL", "LOG")))
        got.append(admin.call("ACL", "SETUSER", "carol", "resetkeys", "%R~ro:*", "%W~wo:*",
                              "~rw:*", "+strlen"))
        admin.close()
        carol.close()
        replies.append(got)
    assert replies[0] == replies[1]
    assert b"ACLs rules changed" in replies[1][7]
