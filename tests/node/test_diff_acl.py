"""ACL against redis-server 7.0.15: rules through GETUSER/LIST, every rule kind, NOPERM for
commands, keys (read / write) and channels, ACL LOG, AUTH and HELLO AUTH, DRYRUN, CAT, the ACL
file, and the connections of deleted and changed users. RESP2 and RESP3."""

from __future__ import annotations

import re
import time
from pathlib import Path

import hiredis
import pytest

from tests.node.diff import NORMALIZERS, Case, Pair, check_cases, split_line
from tests.support import RawClient, node_and_redis

_SINGLE = re.compile(rb"^[+-][^@]")


def _sort_singles(text: bytes) -> bytes:
    """Redis writes the single-command part of a rule description in its command dict's
    order, which is random per process; both sides' runs of ``+cmd``/``-cmd`` are sorted."""
    words = text.split(b" ")
    out: list[bytes] = []
    run: list[bytes] = []
    for w in words:
        if _SINGLE.match(w):
            run.append(w)
            continue
        out += sorted(run) + [w]
        run = []
    return b" ".join(out + sorted(run))


def _walk(v: object, fn: object) -> object:
    if isinstance(v, list):
        return [_walk(x, fn) for x in v]
    if isinstance(v, dict):
        return {k: _walk(x, fn) for k, x in v.items()}
    if isinstance(v, bytes):
        return fn(v)  # type: ignore[operator]
    return v


def _parsed(raw: bytes) -> object:
    r = hiredis.Reader(notEnoughData=None)
    r.feed(raw)
    return r.gets()


def norm_acl_rules(raw: bytes) -> bytes:
    """GETUSER / LIST: command rules with their single commands in sorted order."""
    return repr((raw[:1], _walk(_parsed(raw), _sort_singles))).encode()


def norm_acl_log(raw: bytes) -> bytes:
    """ACL LOG: age-seconds and client-info (times, addresses, buffer sizes) left out."""
    entries = _parsed(raw)
    if not isinstance(entries, list):
        return raw
    kept = []
    for e in entries:
        items = list(e.items()) if isinstance(e, dict) else list(zip(e[::2], e[1::2], strict=True))
        kept.append([(k, v) for k, v in items if k not in (b"age-seconds", b"client-info")])
    return repr((raw[:1], kept)).encode()


NORMALIZERS["aclrules"] = norm_acl_rules
NORMALIZERS["acllog"] = norm_acl_log

RULES = "aclrules"

CASES = [
    Case("every rule kind", [
        "ACL DELUSER r1 r2 r3 r4",
        "ACL SETUSER r1", ("ACL GETUSER r1", RULES), ("ACL LIST", RULES),
        "ACL SETUSER r1 on >p1 >p2 >p1 <p2 nopass resetpass >p3 #" + "a" * 64,
        "ACL SETUSER r1 !" + "a" * 64, ("ACL GETUSER r1", RULES),
        "ACL SETUSER r1 ~a* %R~b* %W~c* %RW~d* %R~a* allkeys", ("ACL GETUSER r1", RULES),
        "ACL SETUSER r1 resetkeys ~a* %R~b* %W~c* %RW~d* %W~b* %R", ("ACL GETUSER r1", RULES),
        "ACL SETUSER r1 &x* &y &x* allchannels", ("ACL GETUSER r1", RULES),
        "ACL SETUSER r1 resetchannels &ch1 &ch2", ("ACL GETUSER r1", RULES),
        "ACL SETUSER r1 +get +@read -@fast +set", ("ACL GETUSER r1", RULES),
        "ACL SETUSER r1 allcommands -@write -get +config|get", ("ACL GETUSER r1", RULES),
        "ACL SETUSER r1 nocommands +select|0 +SELECT|1 +debug|object +client -client|kill",
        ("ACL GETUSER r1", RULES),
        "ACL SETUSER r1 +@all -@dangerous +@admin -@slow", ("ACL GETUSER r1", RULES),
        "ACL SETUSER r1 -@all +@hash +@set -hset +@string", ("ACL GETUSER r1", RULES),
        "ACL SETUSER r1 (+get ~x*) (%R~y &z +@read -hget)", ("ACL GETUSER r1", RULES),
        "ACL SETUSER r1 \"(+set ~w*\" \"&q)\"", ("ACL LIST", RULES),
        "ACL SETUSER r1 clearselectors skip-sanitize-payload", ("ACL GETUSER r1", RULES),
        "ACL SETUSER r1 sanitize-payload off on", ("ACL LIST", RULES),
        "ACL SETUSER r1 reset", ("ACL GETUSER r1", RULES), ("ACL LIST", RULES),
        "ACL SETUSER r2 on nopass +@all ~* &*", ("ACL GETUSER r2", RULES),
        "ACL SETUSER r3 +@ALL -GET ~K &C", ("ACL LIST", RULES),
        "ACL USERS", "ACL DELUSER r1 r2 r3 nosuch", "ACL USERS",
    ]),
    Case("rule errors", [
        "ACL DELUSER e1",
        "ACL SETUSER e1 foo", "ACL SETUSER e1 +nosuch", "ACL SETUSER e1 -@nosuch",
        "ACL SETUSER e1 +@nosuch", "ACL SETUSER e1 +select|0|1", "ACL SETUSER e1 -select|0",
        "ACL SETUSER e1 +config|get|x", "ACL SETUSER e1 +config|nosuch", "ACL SETUSER e1 +debug|",
        "ACL SETUSER e1 #abc", "ACL SETUSER e1 !" + "A" * 64, "ACL SETUSER e1 <nope",
        "ACL SETUSER e1 ~* ~x", "ACL SETUSER e1 &* &x", "ACL SETUSER e1 %~x", "ACL SETUSER e1 %X~x",
        "ACL SETUSER e1 %RR~x", "ACL SETUSER e1 + -", "ACL SETUSER e1 (+get", "ACL SETUSER e1 x (+get ~a",
        "ACL SETUSER e1 (foo)", "ACL SETUSER \"a b\"", "ACL SETUSER e1 on ~a foo",
        "ACL USERS", "ACL GETUSER e1", "ACL GETUSER", "ACL SETUSER", "ACL DELUSER default",
        "ACL DELUSER", "ACL NOSUCH", "ACL", "ACL LIST x", "ACL WHOAMI x",
    ]),
    Case("cat and genpass", [
        "ACL CAT", ("ACL CAT read", "sorted"), ("ACL CAT DANGEROUS", "sorted"),
        ("ACL CAT slow", "sorted"), "ACL CAT nosuch", "ACL CAT a b",
        ("ACL GENPASS", "type"), ("ACL GENPASS 5", "type"), "ACL GENPASS 0", "ACL GENPASS 4097",
        "ACL GENPASS x", "ACL GENPASS 1 2", "ACL HELP",
    ]),
    Case("permission errors", [
        "ACL DELUSER p1",
        "ACL SETUSER p1 on >pw +@all -flushall %R~r* %W~w* ~rw* &ch* (+ping ~sel*)",
        "SET r1 v", "AUTH p1 pw", "ACL WHOAMI",
        "GET r1", "GET w1", "SET w1 x", "SET r1 x", "SET rw1 x", "GET rw1", "FLUSHALL",
        "MULTI", "GET w1", "GET r1", "EXEC", "MULTI", "FLUSHALL", "EXEC",
        "COPY r1 w2", "COPY w1 r2", "LMOVE r1 w1 LEFT RIGHT", "SORT r1", "SORT r1 STORE r2",
        "SORT r1 STORE w3", "SET w9 x GET", "SET r9 x", "BITFIELD r1 GET u8 0",
        "BITFIELD r1 SET u8 0 1", "MSET w1 a w2 b r1 c", "GET sel1", "PING",
        "PUBLISH ch1 m", "PUBLISH other m", "SUBSCRIBE ch1 other", "PSUBSCRIBE ch*",
        "PSUBSCRIBE c*", "SPUBLISH ch2 m", "SSUBSCRIBE zz",
        "ACL WHOAMI", "CONFIG GET x",
    ]),
    Case("acl log", [
        "ACL DELUSER l1", "ACL LOG RESET",
        "ACL SETUSER l1 on >pw -@all +get +set +acl ~k* &c",
        "AUTH l1 wrong", "AUTH nouser pw", "auth l1 wrong", "AUTH l1 pw",
        "GET x", "GET k", "GET x", "SET x 1", "LPUSH k 1", "PUBLISH d m",
        "MULTI", "GET y", "DISCARD",
        ("ACL LOG", "acllog"), ("ACL LOG 2", "acllog"), ("ACL LOG 0", "acllog"),
        ("ACL LOG -1", "acllog"), "ACL LOG x", "ACL LOG 1 2", "ACL LOG RESET", "ACL LOG",
    ]),
    Case("auth and hello", [
        "ACL DELUSER a1 a2",
        "ACL SETUSER a1 on >pw +@all ~*", "ACL SETUSER a2 off >pw +@all ~*",
        "AUTH a1 bad", "AUTH a2 pw", "AUTH nouser pw", "AUTH a1 pw x", "AUTH pw",
        "HELLO 2 AUTH a1 bad", "HELLO 2 AUTH a2 pw", ("HELLO 2 AUTH a1 pw", "type"),
        "ACL WHOAMI", "RESET", "ACL WHOAMI",
        "ACL SETUSER a1 nopass", "AUTH a1 anything", "ACL WHOAMI",
    ]),
    Case("dryrun", [
        "ACL DELUSER d1",
        "ACL SETUSER d1 -@all +get +set %R~r* ~k* &c* +publish +subscribe +psubscribe",
        "ACL DRYRUN d1 get k1", "ACL DRYRUN d1 get x", "ACL DRYRUN d1 set r1 v",
        "ACL DRYRUN d1 get r1", "ACL DRYRUN d1 del k1", "ACL DRYRUN d1 publish c1 m",
        "ACL DRYRUN d1 publish x m", "ACL DRYRUN d1 subscribe c1 x", "ACL DRYRUN d1 psubscribe c*",
        "ACL DRYRUN d1 psubscribe c1", "ACL DRYRUN nosuch get k", "ACL DRYRUN d1 nosuch",
        "ACL DRYRUN d1 config nosuch", "ACL DRYRUN d1 get", "ACL DRYRUN d1 get a b",
        "ACL DRYRUN d1", "ACL DRYRUN default flushall", "ACL DRYRUN d1 config get x",
        "ACL DRYRUN d1 auth x", "ACL DRYRUN d1 ping",
    ]),
    # the default user restricted: every connection of it takes the check (fast path off)
    Case("default user rules", [
        "ACL SETUSER adm on >pw +@all ~* &*", "SET a 1", "ACL SETUSER default -get resetkeys ~b*",
        "GET a", "SET a 2", "SET b 1", "GET b", "PING", ("ACL LIST", RULES),
        "AUTH adm pw", "GET a", "ACL SETUSER default +get ~* off", "AUTH default x",
        "ACL SETUSER default on", ("ACL LIST", RULES), "ACL DELUSER adm",
    ]),
    # scriptVerifyACL: a script's commands are checked against the caller's user
    Case("inside scripts", [
        "ACL DELUSER s1", "ACL LOG RESET",
        "ACL SETUSER s1 on >pw +@all -lpush ~app:* &ch", "AUTH s1 pw",
        "EVAL \"return redis.call('set','app:1','v')\" 0",
        "EVAL \"return redis.call('set','other','v')\" 0",
        "EVAL \"return redis.pcall('get','other')\" 0",
        "EVAL \"return redis.call('lpush','app:l','v')\" 0",
        "EVAL \"return redis.call('publish','nope','m')\" 0",
        "EVAL \"return redis.call('publish','ch','m')\" 0",
        ("ACL LOG", "acllog"), "AUTH default x", "ACL LOG RESET", "ACL DELUSER s1",
    ]),
    Case("acl directives", [
        "ACL DELUSER pd1 pd2 x1", ("CONFIG GET acl*", "pairs"),
        "CONFIG SET acl-pubsub-default allchannels", "ACL SETUSER pd1", "ACL SETUSER pd2 ~a reset",
        ("ACL LIST", RULES), "CONFIG SET acl-pubsub-default resetchannels", "ACL SETUSER pd2 reset",
        ("ACL LIST", RULES), "CONFIG SET acl-pubsub-default nosuch", "CONFIG SET aclfile x",
        "ACL LOG RESET", "CONFIG SET acllog-max-len 2", "AUTH x1 y", "AUTH x2 y", "AUTH x3 y",
        ("ACL LOG", "acllog"), "CONFIG SET acllog-max-len 1", ("ACL LOG", "acllog"),
        "AUTH x4 y", ("ACL LOG", "acllog"), "CONFIG SET acllog-max-len 128", "ACL LOG RESET",
        "ACL DELUSER pd1 pd2",
    ]),
]


@pytest.mark.parametrize("proto", [2, 3])
def test_acl_matches_redis(diff_pair: Pair, proto: int) -> None:
    problems = check_cases(diff_pair, CASES, proto)
    assert not problems, "\n".join(problems)


# -- connections of deleted and changed users ------------------------------------------------
def _both(pair: Pair) -> list[RawClient]:
    return [RawClient(pair.ours_port), RawClient(pair.real_port)]


def _call_both(conns: list[RawClient], line: str) -> list[bytes]:
    argv = split_line(line)
    for c in conns:
        c.send(*argv)
    return [c.read() for c in conns]


def _closed(conn: RawClient) -> bool:
    try:
        conn.send("PING")
        return conn.sock.recv(64) == b""
    except OSError:
        return True


def test_deleted_users_connections_close_changed_users_stay(diff_pair: Pair) -> None:
    admin = _both(diff_pair)
    assert len(set(_call_both(admin, "ACL SETUSER gone on >pw +@all ~* &*"))) == 1
    assert len(set(_call_both(admin, "ACL SETUSER kept on >pw +@all ~* &*"))) == 1
    gone, kept, self_del = _both(diff_pair), _both(diff_pair), _both(diff_pair)
    for conns, user in ((gone, "gone"), (kept, "kept"), (self_del, "gone")):
        assert _call_both(conns, f"AUTH {user} pw") == [b"+OK\r\n"] * 2
    # a changed user's connections stay, under the new rules
    assert len(set(_call_both(admin, "ACL SETUSER kept -get"))) == 1
    replies = _call_both(kept, "GET a")
    assert replies[0] == replies[1] == (
        b"-NOPERM this user has no permissions to run the 'get' command\r\n")
    # deleting a user closes its connections; the one that deleted it after the reply
    assert _call_both(self_del, "ACL DELUSER gone") == [b":1\r\n"] * 2
    time.sleep(0.2)
    assert [_closed(c) for c in gone] == [True, True]
    assert [_closed(c) for c in self_del] == [True, True]
    assert [_closed(c) for c in kept] == [False, False]
    # a subscriber whose channel is taken away is closed; others stay
    sub = _both(diff_pair)
    for c in sub:
        c.call("AUTH", "kept", "pw")
        c.call("ACL", "SETUSER", "kept", "resetchannels", "&news*")
    replies = _call_both(sub, "SUBSCRIBE news1")
    assert replies[0] == replies[1]
    _call_both(admin, "ACL SETUSER kept resetchannels &other")
    time.sleep(0.2)
    assert [_closed(c) for c in sub] == [True, True]
    for c in (*admin, *kept):
        c.close()


def test_exec_checks_queued_commands_again(diff_pair: Pair) -> None:
    """Rules changed between MULTI and EXEC: each queued command is checked again."""
    admin, user = _both(diff_pair), _both(diff_pair)
    steps: list[tuple[list[RawClient], str]] = [
        (admin, "ACL LOG RESET"), (admin, "ACL SETUSER m on nopass +@all ~k* &c"),
        (user, "AUTH m x"), (user, "MULTI"), (user, "GET k1"), (user, "SET k2 v"),
        (user, "PUBLISH c x"), (user, "PING"),
        (admin, "ACL SETUSER m -get resetkeys ~x resetchannels"), (user, "EXEC"),
        (admin, "ACL LOG"), (admin, "ACL SETUSER m +get ~k* &c"), (user, "MULTI"),
        (user, "GET k1"), (admin, "ACL SETUSER m resetkeys ~x"), (user, "EXEC"),
        (admin, "ACL LOG"), (admin, "ACL DELUSER m"),
    ]
    for conns, line in steps:
        replies = _call_both(conns, line)
        if line == "ACL LOG":
            replies = [norm_acl_log(r) for r in replies]
        assert replies[0] == replies[1], (line, replies)
    for c in (*admin, *user):
        c.close()


SECRET_LINES = ["AUTH x y", "AUTH y", "HELLO 2 AUTH u p SETNAME n", "ACL SETUSER q >x on",
                "ACL DELUSER q", "PING"]


def test_monitor_and_slowlog_hide_secrets(diff_pair: Pair) -> None:
    monitors, conns = _both(diff_pair), _both(diff_pair)
    assert _call_both(monitors, "MONITOR") == [b"+OK\r\n"] * 2
    for line in SECRET_LINES:
        _call_both(conns, line)
    seen = []
    for m in monitors:
        text = b""
        while text.count(b"\r\n") < 4:  # ACL SETUSER and DELUSER (admin) are not shown
            text += m.sock.recv(65536)
        lines = [ln.split(b"] ", 1)[1] for ln in text.split(b"\r\n") if ln]
        seen.append(lines)
    assert seen[0] == seen[1]
    assert b'"AUTH" "(redacted)" "(redacted)"' in seen[0]
    _call_both(conns, "CONFIG SET slowlog-log-slower-than 0")
    _call_both(conns, "SLOWLOG RESET")
    for line in SECRET_LINES[:4]:
        _call_both(conns, line)
    entries = [_parsed(r) for r in _call_both(conns, "SLOWLOG GET 4")]
    _call_both(conns, "CONFIG SET slowlog-log-slower-than 10000")
    argvs = [[e[3] for e in side] for side in entries]  # type: ignore[union-attr, index]
    assert argvs[0] == argvs[1]
    assert [b"ACL", b"SETUSER", b"(redacted)", b"(redacted)", b"(redacted)"] in argvs[0]
    for c in (*monitors, *conns):
        c.close()


# -- the ACL file (one file, by absolute path, for both servers) ---------------------------
def test_acl_save_and_load(tmp_path: Path) -> None:
    acl_text = ("user default on nopass ~* &* +@all\n"
                "user f1 on #" + "b" * 64 + " ~k* resetchannels -@all +get\n")
    (tmp_path / "users.acl").write_text(acl_text)
    with node_and_redis(tmp_path, ["--aclfile", str(tmp_path / "users.acl")]) as procs:
        pair = Pair(procs["ours"].port, procs["real"].port)
        lines = [
            ("ACL LIST", RULES), "ACL SETUSER f2 on >pw +@read ~x", "ACL SAVE",
            "ACL SETUSER f3 on", "ACL LOAD", ("ACL LIST", RULES), "ACL USERS",
        ]
        problems = check_cases(pair, [Case("save and load", lines)], 2)
        assert not problems, "\n".join(problems)
        # ACL LOAD replaces every user but the default one: their connections close
        f1, default = _both(pair), _both(pair)
        assert _call_both(f1, "AUTH f2 pw") == [b"+OK\r\n"] * 2
        assert _call_both(default, "ACL LOAD") == [b"+OK\r\n"] * 2
        time.sleep(0.2)
        assert [_closed(c) for c in f1] == [True, True]
        assert [_closed(c) for c in default] == [False, False]
    # the node and redis-server share the working directory: each saved the same text
    saved = (tmp_path / "users.acl").read_text()
    assert "user f2 on #" in saved and "f3" not in saved


@pytest.mark.parametrize("bad", [
    "user default on nopass ~* &* +@all\nuser x on foo\n",
    "user default on nopass ~* &* +@all\nuser x on\nuser x off\nnotuser y\n",
])
def test_acl_load_errors(tmp_path: Path, bad: str) -> None:
    (tmp_path / "users.acl").write_text("user default on nopass ~* &* +@all\n")
    with node_and_redis(tmp_path, ["--aclfile", str(tmp_path / "users.acl")]) as procs:
        (tmp_path / "users.acl").write_text(bad)
        pair = Pair(procs["ours"].port, procs["real"].port)
        problems = check_cases(pair, [Case("load errors", ["ACL LOAD", ("ACL LIST", RULES)])], 2)
        assert not problems, "\n".join(problems)


def test_no_aclfile_and_user_lines(tmp_path: Path) -> None:
    extra = ["--user", "cfg", "on", ">pw", "~a*", "+@all", "--requirepass", "top"]
    with node_and_redis(tmp_path, extra) as procs:
        pair = Pair(procs["ours"].port, procs["real"].port)
        lines = ["ACL LOAD", "ACL SAVE", "AUTH top", ("ACL LIST", RULES),
                 "CONFIG SET requirepass other", ("ACL LIST", RULES), "AUTH cfg pw", "GET b",
                 "CONFIG SET requirepass \"\"", ("ACL LIST", RULES)]
        problems = check_cases(pair, [Case("no file", lines)], 2)
        assert not problems, "\n".join(problems)


