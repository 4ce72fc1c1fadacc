"""Commands the proxy answers itself: connection state and cheap introspection.

Each handler takes the session and argv (arity already checked against the command table)
and returns the complete reply frame. Texts mirror Redis 7.0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from slotgate.protocol import commands
from slotgate.protocol.resp import OK, array, bulk, integer
from slotgate.protocol.slots import key_slot
from slotgate.proxy import errors
from slotgate.proxy.front import (
    clients,
    latency,
    monitor,
    own_config,
    pause,
    pinned,
    pubsub,
    tracking,
)
from slotgate.proxy.routing.redirect import error_frame

if TYPE_CHECKING:
    from slotgate.proxy.front.routes import (
        RouteSession as Session,  # the session as route code sees it
    )

# A handler returns the reply frame, or None: "not mine after all, forward to one master",
# or ANSWERED / SWITCHED (clients.py): it answered by itself.
Handler = Callable[["Session", list[bytes]], bytes | None]
ANSWERED: bytes = clients.ANSWERED  # (annotated: see clients.HANDLERS)
SWITCHED: bytes = clients.SWITCHED


async def resume() -> None:
    """Nothing to wait for: the session's next request is read after this one's effect."""



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
    clients.reset(s)
    tracking.reset(s)
    monitor.reset(s)
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


def client_setinfo(s: Session, argv: list[bytes]) -> bytes:
    # Redis 7.2's handshake command; accepted so 7.2+ clients connect without noise.
    if len(argv) != 4:
        return _wrong_arity("client|setinfo")
    if argv[2].lower() not in (b"lib-name", b"lib-ver"):
        return error_frame(f"ERR Unrecognized option '{argv[2].decode('utf-8', 'replace')}'")
    return OK


def slowlog_get(s: Session, argv: list[bytes]) -> bytes:
    if len(argv) > 3:
        sub = argv[1].decode("utf-8", "replace")
        return error_frame(f"ERR unknown subcommand or wrong number of arguments for '{sub}'. "
                           "Try SLOWLOG HELP.")
    reply = s.proxy.slowlog.get(argv)
    return error_frame(reply) if isinstance(reply, str) else reply


def slowlog_len(s: Session, argv: list[bytes]) -> bytes:
    return s.proxy.slowlog.length()


def slowlog_reset(s: Session, argv: list[bytes]) -> bytes:
    s.proxy.slowlog.reset()
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
    **clients.HANDLERS,
    **tracking.HANDLERS,
    **pause.HANDLERS,
    **monitor.HANDLERS,
    "cluster|keyslot": cluster_keyslot,
    "config|get": own_config.config_get,
    "slowlog|get": slowlog_get,
    "slowlog|len": slowlog_len,
    "slowlog|reset": slowlog_reset,
    **latency.HANDLERS,
}

# Commands Redis 7.0 does not know but clients send (matched on "name|sub" lower case).
EXTRA: dict[bytes, Handler] = {
    b"client|setinfo": client_setinfo,
}
