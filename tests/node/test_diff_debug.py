"""DEBUG subcommands against redis-server 7.0.15, RESP2 and RESP3: RELOAD and its options,
QUICKLIST-PACKED-THRESHOLD, LISTPACK, QUICKLIST, LOG, ERROR, PROTOCOL, STRINGMATCH-TEST, the
testing switches, CHANGE-REPL-ID; the crash subcommands our node refuses."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from slotgate.node.commands.server_cmds import write_config_file
from slotgate.node.core import config as C
from tests.node.diff import Case, Pair, check_cases
from tests.node.test_replication import in_sync, make_replica, nodes  # noqa: F401
from tests.support import ManagedProcess, RawClient, wait_until

_DATA = [
    "SET s hello", "SET n 12345", "SET t v EX 1000", "RPUSH l a b c", "HSET h f v g w",
    "SADD si 1 2 3", "SADD ss a b", "ZADD z 1 a 2 b", "XADD x 1-1 f v", "PEXPIRE h 500000",
]

CASES = [
    Case("reload keeps keys, types, TTLs and the digest", [
        *_DATA, "DEBUG DIGEST", "DEBUG RELOAD", "DEBUG DIGEST", "DBSIZE",
        "TYPE s", "TYPE l", "TYPE x", "GET n", "LRANGE l 0 -1", "ZRANGE z 0 -1 WITHSCORES",
        ("TTL t", "ttl"), ("TTL h", "ttl"), "TTL s", "OBJECT ENCODING si", "XRANGE x - +"]),
    Case("reload options", [
        "SET a 1", "DEBUG RELOAD", "SET a 2", "SET b 3", "DEBUG RELOAD NOSAVE",
        "GET a", "GET b", "SET b 3", "DEBUG RELOAD NOSAVE NOFLUSH MERGE", "GET a", "GET b",
        "DEBUG RELOAD merge noflush nosave", "DBSIZE", "DEBUG RELOAD noflush merge",
        "DBSIZE", "DEBUG RELOAD foo", "DEBUG RELOAD NOSAVE bar", "GET a"]),
    Case("reload of an empty dataset", ["DEBUG RELOAD", "DBSIZE", "DEBUG DIGEST"]),
    Case("quicklist-packed-threshold", [
        "DEBUG QUICKLIST-PACKED-THRESHOLD 10", "DEBUG QUICKLIST-PACKED-THRESHOLD 1k",
        "DEBUG QUICKLIST-PACKED-THRESHOLD 1KB", "DEBUG QUICKLIST-PACKED-THRESHOLD 0",
        "DEBUG QUICKLIST-PACKED-THRESHOLD 4293918720",
        "DEBUG QUICKLIST-PACKED-THRESHOLD 4293918721", "DEBUG QUICKLIST-PACKED-THRESHOLD 5gb",
        "DEBUG QUICKLIST-PACKED-THRESHOLD abc", "DEBUG QUICKLIST-PACKED-THRESHOLD -1",
        "DEBUG QUICKLIST-PACKED-THRESHOLD 1.5k", "DEBUG QUICKLIST-PACKED-THRESHOLD 1x",
        "DEBUG QUICKLIST-PACKED-THRESHOLD", "DEBUG QUICKLIST-PACKED-THRESHOLD 1 2",
        "DEBUG QUICKLIST-PACKED-THRESHOLD 0"]),
    Case("listpack and quicklist", [
        "RPUSH l a b c", "HSET h f v", "ZADD z 1 a", "SADD si 1", "SADD ss a", "SET s x",
        "DEBUG LISTPACK h", "DEBUG LISTPACK z", "DEBUG LISTPACK l", "DEBUG LISTPACK si",
        "DEBUG LISTPACK s", "DEBUG LISTPACK nokey", "DEBUG LISTPACK", "DEBUG LISTPACK h x",
        "DEBUG QUICKLIST l", "DEBUG QUICKLIST l 1", "DEBUG QUICKLIST h", "DEBUG QUICKLIST nokey",
        "DEBUG QUICKLIST", "DEBUG QUICKLIST l 1 2", "DEBUG listpack H", "DEBUG QuickList l"]),
    Case("log, error, stringmatch-test", [
        "DEBUG LOG hello", "DEBUG LOG", "DEBUG LOG a b", 'DEBUG ERROR "my err"',
        "DEBUG ERROR ERR custom", 'DEBUG ERROR "WRONGTYPE x y"', "DEBUG ERROR",
        "DEBUG STRINGMATCH-TEST", "DEBUG STRINGMATCH-TEST x", "DEBUG STRINGMATCH-LEN",
        "DEBUG JMAP"]),
    Case("protocol", [
        *(f"DEBUG PROTOCOL {t}" for t in (
            "string", "integer", "double", "bignum", "null", "array", "set", "map", "attrib",
            "push", "verbatim", "true", "false", "TRUE", "Map", "bogus")),
        "DEBUG PROTOCOL", "DEBUG PROTOCOL string x", "PING"]),
    Case("testing switches", [
        "DEBUG SET-SKIP-CHECKSUM-VALIDATION 1", "DEBUG SET-SKIP-CHECKSUM-VALIDATION 0",
        "DEBUG SET-SKIP-CHECKSUM-VALIDATION x", "DEBUG SET-SKIP-CHECKSUM-VALIDATION",
        "DEBUG PAUSE-CRON 0", "DEBUG PAUSE-CRON", "DEBUG PAUSE-CRON 1 2",
        "DEBUG CHANGE-REPL-ID x", "DEBUG REPLICATE", "DEBUG REPLICATE SET k v", "GET k",
        "DEBUG CONFIG-REWRITE-FORCE-ALL", "DEBUG CONFIG-REWRITE-FORCE-ALL x"]),
]


@pytest.mark.parametrize("proto", [2, 3])
def test_debug_matches_redis(diff_pair: Pair, proto: int) -> None:
    assert check_cases(diff_pair, CASES, proto) == []


def _replids(conn: RawClient) -> tuple[str, str]:
    text = conn.call("INFO", "replication").decode()
    fields = dict(ln.split(":", 1) for ln in text.splitlines() if ":" in ln)
    return fields["master_replid"], fields["master_replid2"]


def test_change_repl_id(diff_pair: Pair) -> None:
    for port in (diff_pair.ours_port, diff_pair.real_port):
        conn = RawClient(port)
        before = _replids(conn)
        assert conn.call("DEBUG", "CHANGE-REPL-ID") == b"+OK\r\n"
        after = _replids(conn)
        assert after[0] != before[0] and len(after[0]) == 40
        assert after[1] == "0" * 40
        conn.close()


@pytest.mark.parametrize("sub", ["SEGFAULT", "PANIC", "RESTART", "OOM", "ASSERT", "MALLCTL",
                                 "crash-and-recover", "LEAK"])
def test_crash_subcommands_refused(diff_pair: Pair, sub: str) -> None:
    conn = RawClient(diff_pair.ours_port)
    reply = conn.call("DEBUG", sub, "x") if sub == "LEAK" else conn.call("DEBUG", sub)
    assert reply == (f"-ERR DEBUG {sub.upper()} is not supported by this server "
                     "(it would crash or restart it)\r\n").encode()
    assert conn.call("PING") == b"+PONG\r\n"
    conn.close()


def test_replicate_reaches_replicas_only(nodes: Callable[..., ManagedProcess]) -> None:  # noqa: F811
    master, replica = nodes("--enable-debug-command", "yes"), nodes()
    m = master.client()
    r = make_replica(replica, master)
    m.set("a", "1")
    wait_until(lambda: r.get("a") == b"1", what="write replicated")
    assert m.execute_command("DEBUG", "REPLICATE", "SET", "diverged", "yes") == b"OK"
    m.set("b", "2")
    wait_until(lambda: in_sync(m, r), what="offsets equal")
    assert r.get("diverged") == b"yes" and m.get("diverged") is None
    assert r.get("b") == b"2"


def test_config_rewrite_force_all_writes_every_directive(tmp_path: Path) -> None:
    """The file written by DEBUG CONFIG-REWRITE-FORCE-ALL names every directive, keeps the
    lines it does not know, and loads back to the same values."""
    conf = tmp_path / "node.conf"
    conf.write_text("# kept\nhz 20\n")
    cfg = C.load([str(conf)])
    write_config_file(cfg, str(conf), force_all=True)
    text = conf.read_text()
    assert text.startswith("# kept\nhz 20\n")
    names = {ln.split(" ", 1)[0] for ln in text.splitlines() if ln and ln[0] != "#"}
    assert names == set(C.DIRECTIVES)
    assert dict(C.load([str(conf)]).config_get(b"*")) == dict(cfg.config_get(b"*"))


def test_help_lists_what_the_node_knows(diff_pair: Pair) -> None:
    import slotgate.node.commands.cluster  # noqa: F401  (adds DROP-CLUSTER-PACKET-FILTER)
    from slotgate.node.commands.debug_cmds import ERR_REFUSED
    from slotgate.node.commands.server_cmds import DEBUG_SUBCOMMANDS

    conn = RawClient(diff_pair.ours_port)
    lines = [ln[1:] for ln in conn.call("DEBUG", "HELP").decode().split("\r\n")[1:]
             if ln.startswith("+") and not ln.startswith("+ ")]
    conn.close()
    listed = {ln.split(" ", 1)[0].lower() for ln in lines[1:]}
    refused = {b"segfault", b"panic", b"restart", b"crash-and-recover", b"oom", b"assert",
               b"mallctl", b"mallctl-str", b"leak"}
    assert "DEBUG" in ERR_REFUSED
    assert listed == {k.decode() for k in DEBUG_SUBCOMMANDS} - {k.decode() for k in refused}


def test_skip_checksum_validation_restore(diff_pair: Pair) -> None:
    """RESTORE of a payload with a wrong CRC64: refused, accepted once skipped, refused again."""
    bad = b"\x00\x01v\x0a\x00" + bytes(8)
    for port in (diff_pair.ours_port, diff_pair.real_port):
        conn = RawClient(port)
        conn.call("DEL", "k")
        assert conn.call("RESTORE", "k", "0", bad).startswith(b"-ERR DUMP payload version")
        assert conn.call("DEBUG", "SET-SKIP-CHECKSUM-VALIDATION", "1") == b"+OK\r\n"
        try:
            assert conn.call("RESTORE", "k", "0", bad) == b"+OK\r\n"
            assert conn.call("GET", "k") == b"$1\r\nv\r\n"
            assert conn.call("RESTORE", "k", "0", b"\x00\x01v\x0b\x00" + bytes(8),
                             "REPLACE").startswith(b"-ERR DUMP payload version")
        finally:
            assert conn.call("DEBUG", "SET-SKIP-CHECKSUM-VALIDATION", "x") == b"+OK\r\n"
        assert conn.call("RESTORE", "k", "0", bad, "REPLACE").startswith(b"-ERR DUMP")
        conn.close()
