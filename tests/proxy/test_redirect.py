"""redirect.py: the decision table for error replies and lost connections."""

from __future__ import annotations

from slotgate.proxy.routing.redirect import Action, classify_error, decide_lost


def test_moved_and_ask_targets() -> None:
    d = classify_error(b"-MOVED 3999 127.0.0.1:6381\r\n", "127.0.0.1:7000", 0, 16, False)
    assert (d.action, d.slot, d.node) == (Action.RESEND, 3999, "127.0.0.1:6381")
    d = classify_error(b"-ASK 12 10.0.0.2:7001\r\n", "127.0.0.1:7000", 3, 16, False)
    assert (d.action, d.slot, d.node) == (Action.ASK, 12, "10.0.0.2:7001")


def test_empty_host_means_the_node_that_answered() -> None:
    d = classify_error(b"-MOVED 1 :7002\r\n", "10.1.2.3:7000", 0, 16, False)
    assert d.node == "10.1.2.3:7002"


def test_redirect_cap_gives_an_error() -> None:
    d = classify_error(b"-MOVED 1 127.0.0.1:7002\r\n", "127.0.0.1:7000", 16, 16, False)
    assert d.action is Action.FAIL and d.error.startswith(b"-ERR slotgate: too many redirects")


def test_retryable_until_expired_then_forwarded() -> None:
    raw = b"-CLUSTERDOWN The cluster is down\r\n"
    assert classify_error(raw, "n:1", 0, 16, False).action is Action.RETRY
    d = classify_error(raw, "n:1", 0, 16, True)
    assert d.action is Action.FAIL and d.error == raw
    assert classify_error(b"-TRYAGAIN Multiple keys\r\n", "n:1", 0, 16, False).action is Action.RETRY


def test_other_errors_are_forwarded() -> None:
    for raw in (b"-ERR wrong number\r\n", b"-WRONGTYPE Operation\r\n", b"-MOVEDX 1 a:1\r\n"):
        assert classify_error(raw, "n:1", 0, 16, False).action is Action.FORWARD


def test_lost_connection_rules() -> None:
    assert decide_lost("n:1", sent=False, readonly=False, expired=False).action is Action.RETRY
    assert decide_lost("n:1", sent=True, readonly=True, expired=False).action is Action.RETRY
    d = decide_lost("127.0.0.1:7000", sent=True, readonly=False, expired=False)
    assert d.action is Action.FAIL
    assert d.error == (b"-ERR slotgate: connection to 127.0.0.1:7000 lost; "
                       b"write may or may not have been applied\r\n")
    assert decide_lost("n:1", sent=False, readonly=True, expired=True).action is Action.FAIL
