"""Commands the proxy answers itself: connection state and cheap introspection.

Each handler takes the session and argv (arity already checked against the command table)
and returns the complete reply frame. Texts mirror Redis 7.0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from protocol import commands
from protocol.slots import key_slot
from proxy import errors, pinned, pubsub
from proxy.redirect import error_frame

if TYPE_CHECKING:
    from proxy.routes import RouteSession as Session  # the session as route code sees it

# A handler returns the reply frame, or None: "not mine after all, forward to one master".
Handler = Callable[["Session", list[bytes]], bytes | None]

OK = b"+OK\r\n"


def _bulk(b: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(b), b)


def _null(proto: int) -> bytes:
    return b"_\r\n" if proto == 3 else b"$-1\r\n"


def _verbatim(text: bytes, proto: int) -> bytes:
    if proto == 3:
        return b"=%d\r\ntxt:%s\r\n" % (len(text) + 4, text)
    return _bulk(text)


def _wrong_arity(name: str) -> bytes:
    return error_frame(errors.WRONG_ARITY.format(name=name))


def _valid_client_name(name: bytes) -> bool:
    # Redis: every byte must be printable ASCII other than space ('!'..'~').
    return all(33 <= c <= 126 for c in name)


def ping(s: Session, argv: list[bytes]) -> bytes:
    if len(argv) > 2:
        return _wrong_arity("ping")
    return _bulk(argv[1]) if len(argv) == 2 else b"+PONG\r\n"


def echo(s: Session, argv: list[bytes]) -> bytes:
    return _bulk(argv[1])


def quit_(s: Session, argv: list[bytes]) -> bytes:
    s.quit = True
    return OK


def _hello_reply(s: Session) -> bytes:
    fields = [
        _bulk(b"server"), _bulk(b"redis"),
        _bulk(b"version"), _bulk(commands.REDIS_VERSION.encode()),
        _bulk(b"proto"), b":%d\r\n" % s.proto,
        _bulk(b"id"), b":%d\r\n" % s.id,
        _bulk(b"mode"), _bulk(b"standalone"),
        _bulk(b"role"), _bulk(b"master"),
        _bulk(b"modules"), b"*0\r\n",
    ]
    header = b"%7\r\n" if s.proto == 3 else b"*14\r\n"
    return header + b"".join(fields)


def hello(s: Session, argv: list[bytes]) -> bytes:
    proto = s.proto
    if len(argv) >= 2:
        ver = argv[1]
        if not ver.lstrip(b"-").isdigit():
            return error_frame("ERR Protocol version is not an integer or out of range")
        proto = int(ver)
        if proto not in (2, 3):
            return error_frame(errors.NOPROTO)
    name: bytes | None = None
    i = 2
    while i < len(argv):
        opt = argv[i].lower()
        more = len(argv) - i - 1
        if opt == b"auth" and more >= 2:
            if argv[i + 1] != b"default":
                return error_frame("WRONGPASS invalid username-password pair or user is disabled.")
            i += 3
        elif opt == b"setname" and more >= 1:
            name = argv[i + 1]
            if not _valid_client_name(name):
                return error_frame(errors.CLIENT_NAME_CHARS)
            i += 2
        else:
            return error_frame(
                f"ERR Syntax error in HELLO option '{argv[i].decode('utf-8', 'replace')}'")
    s.proto = proto
    if name is not None:
        s.name = name or None
    return _hello_reply(s)


def auth(s: Session, argv: list[bytes]) -> bytes:
    if len(argv) > 3:
        return error_frame(errors.SYNTAX)
    if len(argv) == 2:
        return error_frame(errors.AUTH_NOT_CONFIGURED)
    if argv[1] != b"default":
        return error_frame("WRONGPASS invalid username-password pair or user is disabled.")
    return OK


def reset(s: Session, argv: list[bytes]) -> bytes:
    pinned.reset(s)
    pubsub.reset(s)
    s.proto = 2
    s.name = None
    return b"+RESET\r\n"


def select(s: Session, argv: list[bytes]) -> bytes:
    raw = argv[1]
    if not raw.lstrip(b"-").isdigit() or len(raw) > 20:
        return error_frame(errors.NOT_INTEGER)
    db = int(raw)
    if db != 0:
        return error_frame(errors.SELECT_IN_CLUSTER)
    return OK


def readonly(s: Session, argv: list[bytes]) -> bytes:
    return OK


def client_setname(s: Session, argv: list[bytes]) -> bytes:
    name = argv[2]
    if not _valid_client_name(name):
        return error_frame(errors.CLIENT_NAME_CHARS)
    s.name = name or None
    return OK


def client_getname(s: Session, argv: list[bytes]) -> bytes:
    return _null(s.proto) if s.name is None else _bulk(s.name)


def client_id(s: Session, argv: list[bytes]) -> bytes:
    return b":%d\r\n" % s.id


def _client_line(s: Session) -> bytes:
    name = (s.name or b"").decode("utf-8", "replace")
    flags = "x" if s.tx.queued is not None else "N"
    return (
        f"id={s.id} addr={s.peer} laddr={s.proxy.listen_address} fd=-1 name={name} age=0 "
        f"idle=0 flags={flags} db=0 sub=0 psub=0 ssub=0 multi=-1 qbuf=0 qbuf-free=0 "
        f"argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r "
        f"cmd=client|info user=default redir=-1 resp={s.proto}\n"
    ).encode()


def client_info(s: Session, argv: list[bytes]) -> bytes:
    return _verbatim(_client_line(s), s.proto)


def client_list(s: Session, argv: list[bytes]) -> bytes:
    # Only this connection: the proxy does not expose other clients.
    return _verbatim(_client_line(s), s.proto)


def client_setinfo(s: Session, argv: list[bytes]) -> bytes:
    # Redis 7.2's handshake command; accepted so 7.2+ clients connect without noise.
    if len(argv) != 4:
        return _wrong_arity("client|setinfo")
    if argv[2].lower() not in (b"lib-name", b"lib-ver"):
        return error_frame(f"ERR Unrecognized option '{argv[2].decode('utf-8', 'replace')}'")
    return OK


def cluster_keyslot(s: Session, argv: list[bytes]) -> bytes:
    return b":%d\r\n" % key_slot(argv[2])


def command(s: Session, argv: list[bytes]) -> bytes:
    return commands.command_info_reply(None, s.proto)


def command_count(s: Session, argv: list[bytes]) -> bytes:
    return b":%d\r\n" % commands.command_count()


def command_info(s: Session, argv: list[bytes]) -> bytes:
    return commands.command_info_reply(argv[2:] or None, s.proto)


def command_docs(s: Session, argv: list[bytes]) -> bytes:
    return commands.command_docs_reply(argv[2:] or None, s.proto)


def command_list(s: Session, argv: list[bytes]) -> bytes | None:
    if len(argv) > 2:
        return None  # FILTERBY: a master answers it from the same table
    names = commands.command_list()
    return b"*%d\r\n" % len(names) + b"".join(_bulk(n) for n in names)


def command_getkeys(s: Session, argv: list[bytes]) -> bytes:
    try:
        positions = commands.getkeys_command(argv[2:])
    except commands.GetKeysError as exc:
        return error_frame(str(exc))
    keys = [argv[2 + p] for p in positions]
    return b"*%d\r\n" % len(keys) + b"".join(_bulk(k) for k in keys)


HANDLERS: dict[str, Handler] = {
    "ping": ping,
    "echo": echo,
    "quit": quit_,
    "hello": hello,
    "auth": auth,
    "reset": reset,
    "select": select,
    "readonly": readonly,
    "readwrite": readonly,
    "command": command,
    "command|count": command_count,
    "command|info": command_info,
    "command|docs": command_docs,
    "command|list": command_list,
    "command|getkeys": command_getkeys,
    "client|setname": client_setname,
    "client|getname": client_getname,
    "client|id": client_id,
    "client|info": client_info,
    "client|list": client_list,
    "cluster|keyslot": cluster_keyslot,
}

# Commands Redis 7.0 does not know but clients send (matched on "name|sub" lower case).
EXTRA: dict[bytes, Handler] = {
    b"client|setinfo": client_setinfo,
}
