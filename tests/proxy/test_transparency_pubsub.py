"""Pub/sub state in order, through the proxy as on one redis-server: once a command that ends
subscriptions has been answered (UNSUBSCRIBE, PUNSUBSCRIBE, SUNSUBSCRIBE, RESET, QUIT), no
later PUBLISH of any client counts or reaches them; once SUBSCRIBE has been answered, every
later PUBLISH reaches it."""

from __future__ import annotations

import uuid

import pytest

from tests.support import ManagedProcess, RawClient

ROUNDS = 10


def _subscribe(c: RawClient, ch: str, proto: int) -> None:
    if proto == 3:
        c.call("HELLO", "3")
    c.call_frames("SUBSCRIBE", ch, f"{ch}:2", frames=2)
    c.call_frames("PSUBSCRIBE", f"{ch}*", frames=1)


def _counts(port: int, leave: list[str], proto: int) -> list[bytes]:
    """PUBLISH's count right after SUBSCRIBE was answered, then right after ``leave`` was."""
    got = []
    for _ in range(ROUNDS):
        ch = f"ord{uuid.uuid4().hex[:8]}"
        with RawClient(port) as sub, RawClient(port) as pub:
            _subscribe(sub, ch, proto)
            got.append(pub.call("PUBLISH", ch, "m"))  # the channel and the pattern
            sub.read_frames(2)
            reply = sub.call(*leave)
            if leave == ["UNSUBSCRIBE"]:
                sub.read()  # the second channel's confirmation
                sub.call_frames("PUNSUBSCRIBE", frames=1)
            got.append(reply[:1])
            got.append(pub.call("PUBLISH", ch, "m"))
    return got


def _shard_counts(port: int, leave: str, run: str) -> list[object]:
    got: list[object] = []
    for i in range(ROUNDS):
        ch = f"{{sh{run}{i}}}"
        with RawClient(port) as sub, RawClient(port) as pub:
            sub.call_frames("SSUBSCRIBE", f"{ch}a", f"{ch}b", frames=2)
            got.append(pub.call("SPUBLISH", f"{ch}a", "m"))
            sub.read()
            if leave == "SUNSUBSCRIBE":
                # The order in which a server walks its channels is its hash table's.
                frames = sub.call_frames("SUNSUBSCRIBE", frames=2)
                got.append((sorted(f[:f.rindex(b":")] for f in frames),
                            sorted(f[f.rindex(b":"):] for f in frames)))
            else:
                got.append(sub.call(leave))
            got.append(pub.call("SPUBLISH", f"{ch}a", "m"))
    return got


@pytest.mark.parametrize("leave", ["SUNSUBSCRIBE", "RESET", "QUIT"])
def test_spublish_after_leaving_counts_nothing(slotgate: ManagedProcess,
                                               redis_standalone: ManagedProcess,
                                               leave: str) -> None:
    run = uuid.uuid4().hex[:8]
    want = _shard_counts(redis_standalone.port, leave, run)
    assert want[0] == b":1\r\n" and want[-1] == b":0\r\n"
    assert _shard_counts(slotgate.port, leave, run) == want


@pytest.mark.parametrize("proto", [2, 3])
@pytest.mark.parametrize("leave", [["UNSUBSCRIBE"], ["RESET"], ["QUIT"]],
                         ids=["unsubscribe", "reset", "quit"])
def test_publish_after_leaving_counts_nothing(slotgate: ManagedProcess,
                                              redis_standalone: ManagedProcess,
                                              leave: list[str], proto: int) -> None:
    want = _counts(redis_standalone.port, leave, proto)
    assert want[0] == b":2\r\n" and want[2] == b":0\r\n"
    assert _counts(slotgate.port, leave, proto) == want
