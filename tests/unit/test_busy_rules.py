"""The pure rules behind busy scripts: BUSY retried, the kill merge, slow-command detection."""

from __future__ import annotations

from slotgate.protocol.resp import encode_command
from slotgate.proxy.backend.connections import request_name, runs_long
from slotgate.proxy.routing.control import merge_kill
from slotgate.proxy.routing.redirect import Action, classify_error

BUSY = b"-BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.\r\n"
OK = b"+OK\r\n"
NOTBUSY = b"-NOTBUSY No scripts in execution right now.\r\n"
UNKILLABLE = (b"-UNKILLABLE Sorry the script already executed write commands against the dataset. "
              b"You can either wait the script termination or kill the server in a hard way using "
              b"the SHUTDOWN NOSAVE command.\r\n")
DOWN = b"-ERR slotgate: no connection to 127.0.0.1:1 within the retry deadline\r\n"


def test_busy_is_retried_until_the_deadline() -> None:
    assert classify_error(BUSY, "n:1", 0, 16, False).action is Action.RETRY
    expired = classify_error(BUSY, "n:1", 0, 16, True)
    assert (expired.action, expired.error) == (Action.FAIL, BUSY)


def test_busykey_and_busygroup_are_forwarded() -> None:
    for raw in (b"-BUSYKEY Target key name already exists.\r\n",
                b"-BUSYGROUP Consumer Group name already exists\r\n"):
        assert classify_error(raw, "n:1", 0, 16, False).action is Action.FORWARD


def test_kill_merge() -> None:
    assert merge_kill([NOTBUSY, OK, NOTBUSY]) == OK
    assert merge_kill([NOTBUSY, UNKILLABLE, NOTBUSY]) == UNKILLABLE
    assert merge_kill([UNKILLABLE, OK]) == OK
    assert merge_kill([NOTBUSY, DOWN, NOTBUSY]) == DOWN
    assert merge_kill([NOTBUSY, NOTBUSY]) == NOTBUSY


class _Call:
    def __init__(self, *argv: bytes) -> None:
        self.payload = encode_command(*argv)


def test_slow_commands() -> None:
    assert request_name(encode_command(b"EvalSha", b"x", b"0")) == "evalsha"
    assert request_name(b"*1\r\n") == "" and request_name(b"*1\r\n$x\r\n") == ""
    for argv in ((b"EVAL", b"while true do end", b"0"), (b"FCALL", b"f", b"0"),
                 (b"DEBUG", b"SLEEP", b"1"), (b"KEYS", b"*"), (b"MIGRATE",), (b"BLPOP", b"k", b"0")):
        assert runs_long(_Call(*argv)), argv
    for argv in ((b"GET", b"k"), (b"SET", b"k", b"v"), (b"PING",)):
        assert not runs_long(_Call(*argv)), argv
    assert not runs_long(object())
