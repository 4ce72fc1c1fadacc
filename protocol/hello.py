"""HELLO's arguments as Redis 7.0 reads them (``helloCommand``), and its reply, for the node
and the proxy alike.

    HELLO [protover [AUTH username password] [SETNAME clientname]]

Redis checks ``protover`` first (not an integer: ``PROTOVER_NOT_INTEGER``; not 2 or 3:
``NOPROTO``), then walks the options in order and acts on each at once: AUTH authenticates
(a failure ends the command), SETNAME checks the name and sets it. So ``HELLO 3 SETNAME a BAD``
leaves the name ``a`` set and answers the syntax error for ``BAD``, and the protocol changes
only when every option went through. ``parse_hello`` returns those steps; the caller performs
them in order (its own AUTH check, ``valid_client_name``), then answers ``Hello.error`` if set,
else switches the protocol and answers ``hello_reply``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from slotgate.protocol import errors
from slotgate.protocol.resp import array_header, bulk, integer, map_header, string2ll

AUTH = "auth"  # step arguments: (username, password)
SETNAME = "setname"  # step arguments: (clientname,)

class HelloError(Exception):
    """HELLO fails before any option acts; ``text`` is the error without ``-`` and CRLF."""

    def __init__(self, text: bytes) -> None:
        super().__init__(text)
        self.text = text


@dataclass(slots=True)
class Hello:
    proto: int | None  # None: no protover given, the protocol stays
    steps: list[tuple[str, tuple[bytes, ...]]] = field(default_factory=list)
    error: bytes | None = None  # the syntax error that ends the walk after ``steps``


def parse_hello(argv: Sequence[bytes]) -> Hello:
    """The steps of ``HELLO`` (``argv[0]`` is the command name); raises ``HelloError``."""
    proto: int | None = None
    if len(argv) >= 2:
        proto = string2ll(argv[1])
        if proto is None:
            raise HelloError(errors.PROTOVER_NOT_INTEGER.encode())
        if proto not in (2, 3):
            raise HelloError(errors.NOPROTO.encode())
    hello = Hello(proto)
    i = 2
    while i < len(argv):
        opt = argv[i].lower()
        more = len(argv) - i - 1
        if opt == b"auth" and more >= 2:
            hello.steps.append((AUTH, (argv[i + 1], argv[i + 2])))
            i += 3
        elif opt == b"setname" and more >= 1:
            hello.steps.append((SETNAME, (argv[i + 1],)))
            i += 2
        else:
            hello.error = errors.format_error(errors.HELLO_OPTION, argv[i])
            break
    return hello


def valid_client_name(name: bytes) -> bool:
    """Redis' rule for CLIENT SETNAME / HELLO SETNAME: printable ASCII other than space."""
    return all(33 <= c <= 126 for c in name)


def hello_reply(proto: int, client_id: int, *, version: str, mode: bytes,
                role: bytes) -> bytes:
    """HELLO's reply: a map in RESP3, a flat array in RESP2."""
    return b"".join([
        map_header(7, proto),
        bulk(b"server"), bulk(b"redis"),
        bulk(b"version"), bulk(version.encode()),
        bulk(b"proto"), integer(proto),
        bulk(b"id"), integer(client_id),
        bulk(b"mode"), bulk(mode),
        bulk(b"role"), bulk(role),
        bulk(b"modules"), array_header(0),
    ])
