"""Blocking list and sorted-set pops on our node vs a real redis-server 7.0: several clients,
wake-up order, timeouts, BLMOVE chains, MULTI; every client's reply bytes must match."""

from __future__ import annotations

import time

from tests.node.types_diff import compare_scenario, servers  # noqa: F401 - servers is a fixture
from tests.support import RawClient, wait_blocked


def test_fifo_wakeup_order_one_push_serves_several(servers):  # noqa: F811
    compare_scenario(servers, [
        ("send", 1, "BLPOP", "k", "0"), ("blocked", 1),
        ("send", 2, "BRPOP", "k", "0"), ("blocked", 2),
        ("send", 3, "BLPOP", "k", "0"), ("blocked", 3),
        ("cmd", 9, "RPUSH", "k", "a", "b"),
        ("read", 1), ("read", 2),
        ("cmd", 9, "LPUSH", "k", "c"),
        ("read", 3),
        ("cmd", 9, "EXISTS", "k"),
    ])


def test_first_ready_key_in_argument_order(servers):  # noqa: F811
    compare_scenario(servers, [
        ("send", 1, "BLPOP", "k1", "k2", "k3", "0"), ("blocked", 1),
        ("cmd", 9, "RPUSH", "k3", "x"),
        ("read", 1),
        ("cmd", 9, "RPUSH", "k1", "a"), ("cmd", 9, "RPUSH", "k2", "b"),
        ("cmd", 1, "BLPOP", "k3", "k2", "k1", "0"),
    ])


def test_multi_exec_push_serves_after_exec_in_key_order(servers):  # noqa: F811
    compare_scenario(servers, [
        ("send", 1, "BLPOP", "a", "0"), ("blocked", 1),
        ("send", 2, "BLPOP", "b", "0"), ("blocked", 2),
        ("send", 3, "BLPOP", "b", "a", "0"), ("blocked", 3),
        ("cmd", 9, "MULTI"),
        ("cmd", 9, "RPUSH", "b", "b1"),
        ("cmd", 9, "RPUSH", "a", "a1", "a2"),
        ("cmd", 9, "RPUSH", "b", "b2"),
        ("cmd", 9, "EXEC"),
        ("read", 1), ("read", 2), ("read", 3),
        ("cmd", 9, "LRANGE", "a", "0", "-1"), ("cmd", 9, "LRANGE", "b", "0", "-1"),
    ])


def test_blocking_inside_multi_never_blocks(servers):  # noqa: F811
    compare_scenario(servers, [
        ("cmd", 1, "MULTI"),
        ("cmd", 1, "BLPOP", "nokey", "0"),
        ("cmd", 1, "BRPOPLPUSH", "nokey", "x", "0"),
        ("cmd", 1, "BLMOVE", "nokey", "x", "LEFT", "RIGHT", "0"),
        ("cmd", 1, "BLMPOP", "0", "1", "nokey", "LEFT"),
        ("cmd", 1, "BZPOPMIN", "nokey", "0"),
        ("cmd", 1, "BZMPOP", "0", "1", "nokey", "MIN"),
        ("cmd", 1, "EXEC"),
    ])


def test_blmove_chain_and_brpoplpush(servers):  # noqa: F811
    compare_scenario(servers, [
        ("send", 1, "BLMOVE", "a", "b", "LEFT", "RIGHT", "0"), ("blocked", 1),
        ("send", 2, "BRPOPLPUSH", "b", "c", "0"), ("blocked", 2),
        ("send", 3, "BLPOP", "c", "0"), ("blocked", 3),
        ("cmd", 9, "RPUSH", "a", "x", "y"),
        ("read", 1), ("read", 2), ("read", 3),
        ("cmd", 9, "LRANGE", "a", "0", "-1"),
        ("cmd", 9, "EXISTS", "b", "c"),
    ])


def test_blmove_to_wrong_type_destination_unblocks_with_error(servers):  # noqa: F811
    compare_scenario(servers, [
        ("cmd", 9, "SET", "dst", "string"),
        ("send", 1, "BLMOVE", "src", "dst", "LEFT", "LEFT", "0"), ("blocked", 1),
        ("cmd", 9, "RPUSH", "src", "v"),
        ("read", 1),
        ("cmd", 9, "LRANGE", "src", "0", "-1"),
    ])


def test_key_of_another_type_keeps_client_blocked(servers):  # noqa: F811
    compare_scenario(servers, [
        ("send", 1, "BLPOP", "k", "0"), ("blocked", 1),
        ("cmd", 9, "SET", "k", "x"),
        ("cmd", 9, "DEL", "k"),
        ("cmd", 9, "RPUSH", "k", "v"),
        ("read", 1),
    ])


def test_blmpop_count_and_bzmpop(servers):  # noqa: F811
    compare_scenario(servers, [
        ("send", 1, "BLMPOP", "0", "2", "l1", "l2", "RIGHT", "COUNT", "2"), ("blocked", 1),
        ("send", 2, "BZMPOP", "0", "2", "z1", "z2", "MAX", "COUNT", "5"), ("blocked", 2),
        ("cmd", 9, "RPUSH", "l2", "a", "b", "c"),
        ("cmd", 9, "ZADD", "z2", "1", "m1", "2.5", "m2"),
        ("read", 1), ("read", 2),
    ])


def test_bzpop_order_and_scores(servers):  # noqa: F811
    compare_scenario(servers, [
        ("send", 1, "BZPOPMIN", "z", "0"), ("blocked", 1),
        ("send", 2, "BZPOPMAX", "z", "0"), ("blocked", 2),
        ("send", 3, "BZPOPMIN", "z", "0"), ("blocked", 3),
        ("cmd", 9, "ZADD", "z", "1.5", "a", "0.1", "b", "inf", "c"),
        ("read", 1), ("read", 2),
        ("cmd", 9, "ZADD", "z", "3", "d"),
        ("read", 3),
        ("cmd", 9, "ZRANGE", "z", "0", "-1", "WITHSCORES"),
    ])


def test_timeouts_reply_null_after_the_delay(servers):  # noqa: F811
    for name in ("real", "ours"):
        for cmd in (["BLPOP", "nokey", "0.2"], ["BLMOVE", "nokey", "x", "LEFT", "LEFT", "0.2"],
                    ["BZPOPMIN", "nokey", "0.2"], ["BLMPOP", "0.2", "1", "nokey", "LEFT"]):
            c = RawClient(servers[name].port)
            t0 = time.monotonic()
            reply = c.call(*cmd)
            elapsed = time.monotonic() - t0
            c.close()
            assert reply == b"*-1\r\n", (name, cmd, reply)
            assert 0.15 <= elapsed < 2.0, (name, cmd, elapsed)


def test_timeout_in_resp3_and_disconnect_while_blocked(servers):  # noqa: F811
    compare_scenario(servers, [
        ("cmd", 1, "BLPOP", "nokey", "0.05"),
        ("cmd", 1, "BZPOPMAX", "nokey", "0.05"),
        ("cmd", 1, "BRPOPLPUSH", "nokey", "x", "0.05"),
        ("cmd", 1, "BZMPOP", "0.05", "1", "nokey", "MIN"),
    ])
    c = RawClient(servers["ours"].port)
    c.send("BLPOP", "gone", "0")
    admin = RawClient(servers["ours"].port)
    wait_blocked(admin, 1)
    c.close()
    wait_blocked(admin, 0)
    assert admin.call("RPUSH", "gone", "v") == b":1\r\n"
    assert admin.call("LRANGE", "gone", "0", "-1") == b"*1\r\n$1\r\nv\r\n"
    admin.close()
