"""Connection commands: PING ECHO HELLO AUTH SELECT QUIT RESET CLIENT ..."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from slotgate.node.commands.clients import CLIENT_TYPES, client_type, memory_fields, redir
from slotgate.node.commands.registry import command
from slotgate.node.commands.replies import OK, PONG
from slotgate.node.commands.util import parse_int
from slotgate.node.core import errors
from slotgate.node.core.client import REPLY_OFF, REPLY_ON, REPLY_SKIP_NEXT
from slotgate.node.core.config import REDIS_VERSION
from slotgate.node.core.errors import CommandError
from slotgate.protocol.errors import AUTH_NOT_CONFIGURED, CLIENT_NAME_CHARS, NOAUTH_HELLO
from slotgate.protocol.hello import AUTH, HelloError, hello_reply, parse_hello, valid_client_name
from slotgate.protocol.resp import bulk, integer, verbatim

if TYPE_CHECKING:
    from slotgate.node.core.client import Client


@command("ping")
def ping(c: Client, argv: list[bytes]) -> bytes:
    if len(argv) > 2:
        raise CommandError(errors.wrong_args("ping"))
    if c.subscriptions and c.resp == 2:
        msg = argv[1] if len(argv) == 2 else b""
        return b"*2\r\n$4\r\npong\r\n" + bulk(msg)
    if len(argv) == 2:
        return bulk(argv[1])
    return PONG


@command("echo")
def echo(c: Client, argv: list[bytes]) -> bytes:
    return bulk(argv[1])


@command("quit")
def quit_(c: Client, argv: list[bytes]) -> bytes:
    c.close_after_reply = True
    return OK


@command("auth")
def auth(c: Client, argv: list[bytes]) -> bytes:
    if len(argv) > 3:
        raise CommandError(errors.SYNTAX)
    if len(argv) == 2:
        if c.server.acl.default.nopass:
            raise CommandError(AUTH_NOT_CONFIGURED)
        user, password = b"default", argv[1]
    else:
        user, password = argv[1], argv[2]
    if not c.server.acl.authenticate(c, user, password, argv[0]):
        raise CommandError(errors.WRONGPASS)
    return OK


@command("hello")
def hello(c: Client, argv: list[bytes]) -> bytes:
    try:
        request = parse_hello(argv)
    except HelloError as exc:
        raise CommandError(exc.text.decode("utf-8", "replace")) from None
    for step, args in request.steps:  # each option acts at once, as in Redis
        if step == AUTH:
            user, password = args
            if not c.server.acl.authenticate(c, user, password, argv[0]):
                raise CommandError(errors.WRONGPASS)
        else:
            _validate_name(args[0])
            c.name = args[0]
    if request.error is not None:
        raise CommandError(request.error.decode("utf-8", "replace"))
    if not c.authenticated:
        raise CommandError(NOAUTH_HELLO)
    proto = c.resp if request.proto is None else request.proto
    c.set_resp(proto)
    mode = b"cluster" if c.server.cluster_enabled else b"standalone"
    repl = c.server.replication
    role = b"replica" if repl is not None and repl.role == "slave" else b"master"
    return hello_reply(proto, c.id, version=REDIS_VERSION, mode=mode, role=role)


@command("select")
def select(c: Client, argv: list[bytes]) -> bytes:
    idx = parse_int(argv[1])
    if c.server.cluster_enabled and idx != 0:
        raise CommandError(errors.SELECT_CLUSTER)
    if idx < 0 or idx >= len(c.ks.dbs):
        raise CommandError(errors.DB_INDEX_OUT_OF_RANGE)
    c.db = c.ks.dbs[idx]
    return OK


@command("reset")
def reset(c: Client, argv: list[bytes]) -> bytes:
    c.discard_multi()
    c.db = c.ks.dbs[0]
    c.set_resp(2)
    c.name = b""
    c.readonly = False
    c.set_asking(False)
    c.set_reply_mode(REPLY_ON)
    if c.monitor:
        c.server.remove_monitor(c)
    for hook in c.server.client_close_hooks:  # pub/sub & co. drop this client's state
        hook(c)
    c.set_subscriptions(0)
    c.set_acl_user(c.server.acl.default)
    c.set_authenticated(c.server.acl.open_login())
    return b"+RESET\r\n"


# -- CLIENT ------------------------------------------------------------------------------------

def _validate_name(name: bytes) -> None:
    if not valid_client_name(name):
        raise CommandError(CLIENT_NAME_CHARS)


@command("client|id")
def client_id(c: Client, argv: list[bytes]) -> bytes:
    return integer(c.id)


@command("client|setname")
def client_setname(c: Client, argv: list[bytes]) -> bytes:
    _validate_name(argv[2])
    c.name = argv[2]
    return OK


@command("client|getname")
def client_getname(c: Client, argv: list[bytes]) -> bytes:
    return bulk(c.name) if c.name else c.null_bulk


def client_info_line(c: Client, now_ms: int | None = None, caller: Client | None = None,
                     argv: list[bytes] | None = None) -> str:
    now = now_ms if now_ms is not None else int(time.time() * 1000)
    multi = -1 if c.multi is None else len(c.multi)
    subs = c.pubsub
    sub, psub, ssub = (0, 0, 0) if subs is None else (
        len(subs.channels), len(subs.patterns), len(subs.shard))
    cmd = c.last_cmd
    return (
        f"id={c.id} addr={c.addr} laddr={c.laddr} fd={c.fd} "
        f"name={c.name.decode('utf-8', 'replace')} age={(now - c.created_ms) // 1000} "
        f"idle={(now - c.last_interaction_ms) // 1000} flags={c.flags_text()} db={c.db.index} "
        f"sub={sub} psub={psub} ssub={ssub} "
        f"multi={multi} {memory_fields(c, caller, argv)} events=r cmd={cmd} "
        f"user={c.user.decode('utf-8', 'replace')} redir={redir(c)} resp={c.resp}"
    )


@command("client|list")
def client_list(c: Client, argv: list[bytes]) -> bytes:
    clients = list(c.server.clients.values())
    i = 2
    while i < len(argv):
        opt = argv[i].lower()
        if opt == b"type" and i + 1 < len(argv):
            t = CLIENT_TYPES.get(argv[i + 1].lower())
            if t is None:
                raise CommandError(f"ERR Unknown client type '{errors._shown(argv[i + 1], 128)}'")
            clients = [x for x in clients if client_type(x) == t]
            i += 2
        elif opt == b"id" and i + 1 < len(argv):
            ids = set()
            for raw in argv[i + 1:]:
                try:
                    n = parse_int(raw)
                except CommandError:
                    raise CommandError("ERR Invalid client ID") from None
                if n <= 0:
                    raise CommandError("ERR Invalid client ID")
                ids.add(n)
            clients = [x for x in clients if x.id in ids]
            break
        else:
            raise CommandError(errors.SYNTAX)
    text = "".join(client_info_line(x, None, c, argv) + "\n" for x in clients)
    return verbatim(text, "txt", c.resp)


@command("client|info")
def client_info(c: Client, argv: list[bytes]) -> bytes:
    return verbatim(client_info_line(c, None, c, argv) + "\n", "txt", c.resp)


@command("client|reply")
def client_reply(c: Client, argv: list[bytes]) -> bytes:
    mode = argv[2].lower()
    if mode == b"on":
        c.set_reply_mode(REPLY_ON)
        return OK
    if mode == b"off":
        c.set_reply_mode(REPLY_OFF)
    elif mode == b"skip":
        if c.reply_mode != REPLY_OFF:
            c.set_reply_mode(REPLY_SKIP_NEXT)
    else:
        raise CommandError(errors.SYNTAX)
    return b""


@command("client|unblock")
def client_unblock(c: Client, argv: list[bytes]) -> bytes:
    target_id = parse_int(argv[2])
    error = False
    if len(argv) == 4:
        how = argv[3].lower()
        if how == b"error":
            error = True
        elif how != b"timeout":
            raise CommandError("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR")
    elif len(argv) > 4:
        raise CommandError(errors.SYNTAX)
    target = c.server.clients.get(target_id)
    if target is None or target.blocked is None or target.blocked.postponed:
        return integer(0)  # a client held by CLIENT PAUSE stays held (Redis 7.0 crashes)
    reply = b"-" + errors.UNBLOCKED.encode() + b"\r\n" if error else target.blocked.timeout_reply
    target.unblock(reply)
    return integer(1)
