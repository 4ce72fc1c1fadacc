"""Commands the proxy answers itself: connection state and cheap introspection.

Each handler takes the session and argv (arity already checked against the command table)
and returns the complete reply frame. Texts mirror Redis 7.0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from slotgate.protocol import commands
from slotgate.protocol.hello import valid_client_name
from slotgate.protocol.resp import OK, array, bulk, integer, null, verbatim
from slotgate.protocol.slots import key_slot
from slotgate.proxy import errors
from slotgate.proxy.front import pinned, pubsub
from slotgate.proxy.routing.redirect import error_frame

if TYPE_CHECKING:
    from slotgate.proxy.front.routes import (
        RouteSession as Session,  # the session as route code sees it
    )

# A handler returns the reply frame, or None: "not mine after all, forward to one master".
Handler = Callable[["Session", list[bytes]], bytes | None]



def _wrong_arity(name: str) -> bytes:
    return error_frame(errors.WRONG_ARITY.format(name=name))


def ping(s: Session, argv: list[bytes]) -> bytes:
    if len(argv) > 2:
        return _wrong_arity("ping")
    return bulk(argv[1]) if len(argv) == 2 else b"+PONG\r\n"


def echo(s: Session, argv: list[bytes]) -> bytes:
    return bulk(argv[1])


def quit_(s: Session, argv: list[bytes]) -> bytes:
    s.quit = True
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
        return error_frame(errors.SELECT_CLUSTER)
    return OK


def readonly(s: Session, argv: list[bytes]) -> bytes:
    return OK


def client_setname(s: Session, argv: list[bytes]) -> bytes:
    name = argv[2]
    if not valid_client_name(name):
        return error_frame(errors.CLIENT_NAME_CHARS)
    s.name = name or None
    return OK


def client_getname(s: Session, argv: list[bytes]) -> bytes:
    return null(s.proto) if s.name is None else bulk(s.name)


def client_id(s: Session, argv: list[bytes]) -> bytes:
    return integer(s.id)


def client_line(s: Session) -> bytes:
    name = (s.name or b"").decode("utf-8", "replace")
    flags = "x" if s.tx.queued is not None else "N"
    user = s.login.user.name.decode("utf-8", "replace")
    return (
        f"id={s.id} addr={s.peer} laddr={s.proxy.listen_address} fd=-1 name={name} age=0 "
        f"idle=0 flags={flags} db=0 sub=0 psub=0 ssub=0 multi=-1 qbuf=0 qbuf-free=0 "
        f"argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r "
        f"cmd=client|info user={user} redir=-1 resp={s.proto}\n"
    ).encode()


def client_info(s: Session, argv: list[bytes]) -> bytes:
    return verbatim(client_line(s), proto=s.proto)


def client_list(s: Session, argv: list[bytes]) -> bytes:
    # Only this connection: the proxy does not expose other clients.
    return verbatim(client_line(s), proto=s.proto)


def client_setinfo(s: Session, argv: list[bytes]) -> bytes:
    # Redis 7.2's handshake command; accepted so 7.2+ clients connect without noise.
    if len(argv) != 4:
        return _wrong_arity("client|setinfo")
    if argv[2].lower() not in (b"lib-name", b"lib-ver"):
        return error_frame(f"ERR Unrecognized option '{argv[2].decode('utf-8', 'replace')}'")
    return OK


def cluster_keyslot(s: Session, argv: list[bytes]) -> bytes:
    return integer(key_slot(argv[2]))


def command(s: Session, argv: list[bytes]) -> bytes:
    return commands.command_info_reply(None, s.proto)


def command_count(s: Session, argv: list[bytes]) -> bytes:
    return integer(commands.command_count())


def command_info(s: Session, argv: list[bytes]) -> bytes:
    return commands.command_info_reply(argv[2:] or None, s.proto)


def command_docs(s: Session, argv: list[bytes]) -> bytes:
    return commands.command_docs_reply(argv[2:] or None, s.proto)


def command_list(s: Session, argv: list[bytes]) -> bytes | None:
    if len(argv) > 2:
        return None  # FILTERBY: a master answers it from the same table
    return array(bulk(n) for n in commands.command_list())


def command_getkeys(s: Session, argv: list[bytes]) -> bytes:
    try:
        positions = commands.getkeys_command(argv[2:])
    except commands.GetKeysError as exc:
        return error_frame(str(exc))
    return array(bulk(argv[2 + p]) for p in positions)


HANDLERS: dict[str, Handler] = {
    "ping": ping,
    "echo": echo,
    "quit": quit_,
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
