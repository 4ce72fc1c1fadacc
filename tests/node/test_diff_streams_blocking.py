"""Blocked XREAD and XREADGROUP on our node vs a real redis-server 7.0: wake-up order, what a
group reader gets when its group is destroyed or its key deleted or overwritten, timeouts and
MULTI; every client's reply bytes must match, RESP2 and RESP3."""

from __future__ import annotations

from tests.node.types_diff import compare_scenario, servers  # noqa: F401 - servers is a fixture
from tests.support import RawClient


def test_xread_wakes_in_blocking_order(servers):  # noqa: F811
    compare_scenario(servers, [
        ("cmd", 9, "XADD", "s", "1-1", "a", "1"),
        ("send", 1, "XREAD", "BLOCK", "0", "STREAMS", "s", "$"), ("blocked", 1),
        ("send", 2, "XREAD", "COUNT", "1", "BLOCK", "0", "STREAMS", "t", "s", "0", "$"),
        ("blocked", 2),
        ("send", 3, "XREAD", "BLOCK", "0", "STREAMS", "s", "0"),  # served at once
        ("read", 3),
        ("cmd", 9, "XADD", "s", "2-1", "b", "2"),
        ("read", 1), ("read", 2),
        ("send", 1, "XREAD", "BLOCK", "0", "STREAMS", "t", "s", "$", "$"), ("blocked", 1),
        ("cmd", 9, "MULTI"), ("cmd", 9, "XADD", "t", "5-5", "x", "y"),
        ("cmd", 9, "XADD", "s", "5-5", "x", "y"), ("cmd", 9, "EXEC"),
        ("read", 1),
        ("cmd", 9, "XREAD", "BLOCK", "30", "STREAMS", "s", "$"),
    ])


def test_xreadgroup_one_entry_goes_to_the_first_reader(servers):  # noqa: F811
    compare_scenario(servers, [
        ("cmd", 9, "XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"),
        ("send", 1, "XREADGROUP", "GROUP", "g", "c1", "COUNT", "1", "BLOCK", "0", "STREAMS",
         "s", ">"), ("blocked", 1),
        ("send", 2, "XREADGROUP", "GROUP", "g", "c2", "BLOCK", "0", "STREAMS", "s", ">"),
        ("blocked", 2),
        ("send", 3, "XREAD", "BLOCK", "0", "STREAMS", "s", "$"), ("blocked", 3),
        ("cmd", 9, "XADD", "s", "1-1", "a", "1"),
        ("read", 1), ("read", 3), ("blocked", 1),
        ("cmd", 9, "XADD", "s", "2-1", "b", "2"),
        ("read", 2),
        ("cmd", 9, "XPENDING", "s", "g"),
        ("send", 1, "XREADGROUP", "GROUP", "g", "c3", "NOACK", "BLOCK", "0", "STREAMS", "s", ">"),
        ("blocked", 1),
        ("cmd", 9, "XADD", "s", "3-1", "c", "3"),
        ("read", 1),
        ("cmd", 9, "XPENDING", "s", "g"),
        ("cmd", 9, "XINFO", "GROUPS", "s"),
    ])


def test_xreadgroup_group_destroyed_or_key_gone(servers):  # noqa: F811
    steps = [("cmd", 9, "XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")]
    for i, action in enumerate(["XGROUP", "DEL", "SET", "FLUSHALL", "RENAME", "SWAPDB"]):
        steps += [("cmd", 9, "XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")] if i else []
        steps += [
            ("send", 1, "XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS", "s", ">"),
            ("blocked", 1),
            ("send", 2, "XREAD", "BLOCK", "0", "STREAMS", "s", "$"), ("blocked", 2),
        ]
        if action == "XGROUP":
            steps.append(("cmd", 9, "XGROUP", "DESTROY", "s", "g"))
        elif action == "DEL":
            steps.append(("cmd", 9, "DEL", "s"))
        elif action == "SET":
            steps.append(("cmd", 9, "SET", "s", "x"))
        elif action == "FLUSHALL":
            steps.append(("cmd", 9, "FLUSHALL"))
        elif action == "RENAME":
            steps.append(("cmd", 9, "RENAME", "s", "t"))
        else:
            steps += [("cmd", 9, "SWAPDB", "0", "1"), ("cmd", 9, "SWAPDB", "0", "1")]
        steps += [("read", 1), ("blocked", 1), ("cmd", 9, "DEL", "s", "t"),
                  ("cmd", 9, "XADD", "s", f"{i + 1}-1", "a", "1"), ("read", 2), ("blocked", 0)]
    compare_scenario(servers, steps)


def test_timeouts(servers):  # noqa: F811
    compare_scenario(servers, [
        ("cmd", 1, "XREAD", "BLOCK", "20", "STREAMS", "nokey", "0"),
        ("cmd", 9, "XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"),
        ("cmd", 1, "XREADGROUP", "GROUP", "g", "c", "BLOCK", "20", "STREAMS", "s", ">"),
        ("cmd", 1, "XINFO", "CONSUMERS", "s", "g"),
    ])


def test_keyspace_events(servers):  # noqa: F811
    cmds = [
        ("XADD", "s", "1-1", "a", "1"), ("XADD", "s", "MAXLEN", "1", "2-1", "a", "2"),
        ("XDEL", "s", "2-1"), ("XDEL", "s", "9-9"), ("XADD", "s", "3-1", "a", "3"),
        ("XTRIM", "s", "MAXLEN", "0"), ("XTRIM", "s", "MAXLEN", "0"),
        ("XGROUP", "CREATE", "s", "g", "0"), ("XGROUP", "CREATECONSUMER", "s", "g", "c"),
        ("XREADGROUP", "GROUP", "g", "c2", "STREAMS", "s", ">"),
        ("XGROUP", "SETID", "s", "g", "0"), ("XGROUP", "DELCONSUMER", "s", "g", "c"),
        ("XGROUP", "DESTROY", "s", "g"), ("XSETID", "s", "9-9"),
        ("XGROUP", "CREATE", "n", "g", "$", "MKSTREAM"), ("COPY", "n", "n2"),
        ("RENAME", "n2", "n3"), ("TYPE", "n3"), ("OBJECT", "ENCODING", "n3"),
        ("XADD", "q", "NOMKSTREAM", "*", "a", "1"), ("PING",),
    ]
    got = {}
    for name in ("real", "ours"):
        admin, sub = RawClient(servers[name].port), RawClient(servers[name].port)
        try:
            admin.call("FLUSHALL")
            admin.call("CONFIG", "SET", "notify-keyspace-events", "KEA")
            sub.call("PSUBSCRIBE", "__key*@0__:*")
            replies = [admin.call(*c) for c in cmds]
            sub.send("PING")
            frames = [sub.read()]
            while not frames[-1].startswith((b"*2\r\n$4\r\npong", b">2\r\n$4\r\npong")):
                frames.append(sub.read())
            frames += replies
            admin.call("CONFIG", "SET", "notify-keyspace-events", "")
            got[name] = frames
        finally:
            admin.close()
            sub.close()
    assert got["ours"] == got["real"]


def test_a_key_given_twice_waits_for_its_first_id(servers):  # noqa: F811
    compare_scenario(servers, [
        ("cmd", 9, "XADD", "s", "1-1", "a", "1"),
        ("send", 1, "XREAD", "BLOCK", "0", "STREAMS", "s", "s", "5-0", "$"), ("blocked", 1),
        ("cmd", 9, "XADD", "s", "2-1", "b", "2"), ("blocked", 1),
        ("cmd", 9, "XADD", "s", "6-1", "c", "3"),
        ("read", 1),
    ])
