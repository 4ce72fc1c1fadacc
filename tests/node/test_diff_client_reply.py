"""CLIENT REPLY OFF / ON / SKIP against redis-server 7.0: which replies a client still gets.

Redis 7.0 drops the replies of a client under OFF (and of the command after SKIP) but never
its pushes: pub/sub confirmations and messages arrive whatever the mode, in RESP2 too. A
rejected command (unknown, wrong arity) counts as the command a SKIP skips. CLIENT REPLY ON
right after SKIP answers +OK (it used to be swallowed: a client waiting for it hung).
"""

from __future__ import annotations

import pytest

from tests.node.diff import Case, Pair, check_cases
from tests.support import RawClient

CASES = [
    Case("skip then on", [("CLIENT REPLY SKIP", "noreply"), "CLIENT REPLY ON", "PING",
                          ("CLIENT REPLY SKIP", "noreply"), ("CLIENT REPLY SKIP", "noreply"),
                          ("PING", "noreply"), "PING",
                          ("CLIENT REPLY SKIP", "noreply"), ("CLIENT REPLY OFF", "noreply"),
                          ("PING", "noreply"), "CLIENT REPLY ON", "PING"]),
    Case("skip and rejected commands", [("CLIENT REPLY SKIP", "noreply"), ("NOSUCH", "noreply"),
                                        "PING", ("CLIENT REPLY SKIP", "noreply"),
                                        ("GET", "noreply"), "PING",
                                        ("CLIENT REPLY OFF", "noreply"), ("NOSUCH", "noreply"),
                                        ("GET", "noreply"), "CLIENT REPLY ON"]),
    Case("subscribe under off: the confirmations are pushes", [
        ("CLIENT REPLY OFF", "noreply"), "SUBSCRIBE ch1 ch2", "PSUBSCRIBE p*",
        ("PING", "noreply"), "UNSUBSCRIBE ch1", "PUNSUBSCRIBE", "UNSUBSCRIBE", "UNSUBSCRIBE",
        ("PING", "noreply"), "CLIENT REPLY ON", "PING"]),
    Case("subscribe after skip", [("CLIENT REPLY SKIP", "noreply"), "SUBSCRIBE ch",
                                  "UNSUBSCRIBE", "PING"]),
    Case("sharded subscribe under off", [("CLIENT REPLY OFF", "noreply"), "SSUBSCRIBE s1",
                                         "SUNSUBSCRIBE", ("PING", "noreply"),
                                         "CLIENT REPLY ON", "PING"]),
]


@pytest.mark.parametrize("proto", [2, 3])
def test_client_reply_modes(diff_pair: Pair, proto: int) -> None:
    assert check_cases(diff_pair, CASES, proto) == []


@pytest.mark.parametrize("proto", [2, 3])
@pytest.mark.parametrize("mode", ["OFF", "SKIP"])
def test_a_subscriber_under_off_or_skip_gets_its_messages(diff_pair: Pair, proto: int,
                                                          mode: str) -> None:
    """Messages published to a subscriber whose replies are off (or skipped) arrive, on both
    servers, the same bytes."""
    got: dict[str, bytes] = {}
    for name, port in (("ours", diff_pair.ours_port), ("real", diff_pair.real_port)):
        sub, pub = RawClient(port), RawClient(port)
        try:
            if proto == 3:
                sub.call("HELLO", "3")
            sub.send("SUBSCRIBE", "ch")
            first = sub.read()
            if proto == 3:
                sub.send("CLIENT", "REPLY", mode)
            else:  # a RESP2 subscriber cannot run CLIENT: turn replies off before subscribing
                sub.send("UNSUBSCRIBE")
                sub.read()
                sub.send("CLIENT", "REPLY", mode)
                sub.send("SUBSCRIBE", "ch")
                first += sub.read()
            assert pub.call("PUBLISH", "ch", "hello") == b":1\r\n"
            msg = sub.read()
            assert pub.call("PUBLISH", "ch", "again") == b":1\r\n"
            got[name] = first + msg + sub.read()
        finally:
            sub.close()
            pub.close()
    assert got["ours"] == got["real"]


# CLIENT REPLY inside MULTI and EXEC under OFF/SKIP. Redis applies the mode to each piece of a
# reply as it is made: a queued OFF drops the replies after its own (EXEC's array header,
# already sent, announces them all), a queued ON brings back the ones after it, a queued SKIP
# skips the command after EXEC. Compared as the whole byte stream up to QUIT, as the replies
# do not frame (``*2`` followed by one element).
TRANSACTIONS = [
    ["MULTI", "CLIENT REPLY OFF", "SET a 1", "EXEC", "PING", "CLIENT REPLY ON", "PING"],
    ["MULTI", "CLIENT REPLY SKIP", "SET a 1", "EXEC", "PING", "PING"],
    ["MULTI", "SET a 1", "CLIENT REPLY SKIP", "GET a", "EXEC", "PING", "PING"],
    ["MULTI", "CLIENT REPLY OFF", "GET a", "CLIENT REPLY ON", "GET a", "EXEC", "PING"],
    ["CLIENT REPLY OFF", "MULTI", "SET a 1", "EXEC", "CLIENT REPLY ON", "PING"],
    ["CLIENT REPLY OFF", "MULTI", "SET a 1", "CLIENT REPLY ON", "EXEC", "PING"],
    ["CLIENT REPLY SKIP", "MULTI", "SET a 1", "EXEC", "PING"],
    ["CLIENT REPLY SKIP", "MULTI", "CLIENT REPLY SKIP", "PING", "EXEC", "PING", "PING"],
    ["MULTI", "CLIENT REPLY SKIP", "EXEC", "PING", "PING"],
    ["MULTI", "CLIENT REPLY OFF", "EXEC", "PING", "CLIENT REPLY ON", "PING"],
    ["MULTI", "CLIENT REPLY SKIP", "CLIENT REPLY SKIP", "PING", "PING", "EXEC", "PING", "PING"],
    ["MULTI", "CLIENT REPLY OFF", "DISCARD", "PING"],
    ["MULTI", "CLIENT REPLY BAD", "EXEC", "PING"],
    ["MULTI", "CLIENT REPLY SKIP", "NOSUCH", "EXEC", "PING"],
    ["MULTI", "CLIENT REPLY OFF", "SET a 1", "EXEC", "PING", "MULTI", "CLIENT REPLY ON",
     "EXEC", "PING"],
    ["CLIENT REPLY OFF", "MULTI", "NOSUCH", "EXEC", "CLIENT REPLY ON", "PING"],
    ["WATCH a", "SET a 2", "CLIENT REPLY SKIP", "MULTI", "GET a", "EXEC", "PING"],
    ["WATCH a", "SET a 2", "MULTI", "CLIENT REPLY OFF", "EXEC", "CLIENT REPLY ON", "PING"],
    ["MULTI", "CLIENT REPLY OFF", "SUBSCRIBE ch", "UNSUBSCRIBE ch", "EXEC", "CLIENT REPLY ON",
     "PING"],
]


@pytest.mark.parametrize("proto", [2, 3])
def test_client_reply_in_transactions(diff_pair: Pair, proto: int) -> None:
    wrong = []
    for commands in TRANSACTIONS:
        seen = []
        for port in (diff_pair.ours_port, diff_pair.real_port):
            with RawClient(port) as c:
                if proto == 3:
                    c.call("HELLO", "3")
                c.call("DEL", "a")
                for command in [*commands, "QUIT"]:
                    c.send(*command.split())
                seen.append(c.read_until_closed())
        if seen[0] != seen[1]:
            wrong.append(f"{commands}: ours {seen[0]!r}, redis {seen[1]!r}")
    assert wrong == []
