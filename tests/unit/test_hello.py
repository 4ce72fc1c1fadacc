"""protocol/hello.py: HELLO's steps as Redis 7.0 takes them (the replies themselves are compared
with redis-server in tests/node/test_diff_server.py and tests/proxy/test_commands.py)."""

from __future__ import annotations

import pytest

from slotgate.protocol import errors
from slotgate.protocol.hello import (
    AUTH,
    SETNAME,
    HelloError,
    hello_reply,
    parse_hello,
    valid_client_name,
)


def test_options_are_steps_in_order_up_to_the_first_bad_one() -> None:
    hello = parse_hello([b"HELLO", b"3", b"SETNAME", b"a", b"auth", b"u", b"p", b"BAD", b"x"])
    assert hello.proto == 3
    assert hello.steps == [(SETNAME, (b"a",)), (AUTH, (b"u", b"p"))]
    assert hello.error == b"ERR Syntax error in HELLO option 'BAD'"
    assert parse_hello([b"HELLO"]).proto is None
    assert parse_hello([b"HELLO", b"2", b"AUTH", b"u"]).error == (
        b"ERR Syntax error in HELLO option 'AUTH'")


@pytest.mark.parametrize(("protover", "text"), [
    (b"03", errors.PROTOVER_NOT_INTEGER), (b"+3", errors.PROTOVER_NOT_INTEGER),
    (b"3 ", errors.PROTOVER_NOT_INTEGER), (b"", errors.PROTOVER_NOT_INTEGER),
    (b"9223372036854775808", errors.PROTOVER_NOT_INTEGER), (b"-1", errors.NOPROTO),
    (b"4", errors.NOPROTO), (b"1", errors.NOPROTO),
])
def test_bad_protocol_versions(protover: bytes, text: str) -> None:
    with pytest.raises(HelloError) as caught:
        parse_hello([b"HELLO", protover, b"SETNAME", b"a"])
    assert caught.value.text == text.encode()


def test_the_bad_option_is_shown_as_a_c_string_without_line_breaks() -> None:
    hello = parse_hello([b"HELLO", b"2", b"a\r\nb\xff\x00tail"])
    assert hello.error == b"ERR Syntax error in HELLO option 'a  b\xff'"


def test_client_names_and_reply() -> None:
    assert valid_client_name(b"a!~") and valid_client_name(b"")
    assert not valid_client_name(b"a b") and not valid_client_name(b"\xc3\xa9")
    reply = hello_reply(3, 7, version="7.0.15", mode=b"standalone", role=b"master")
    assert reply.startswith(b"%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n")
    assert b"$2\r\nid\r\n:7\r\n" in reply and reply.endswith(b"$7\r\nmodules\r\n*0\r\n")
    assert hello_reply(2, 7, version="7.0.15", mode=b"cluster", role=b"master")[:5] == b"*14\r\n"
