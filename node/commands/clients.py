"""CLIENT TRACKING CACHING GETREDIR TRACKINGINFO PAUSE UNPAUSE NO-EVICT KILL, and the memory
fields of CLIENT LIST / CLIENT INFO.

The tracking table lives in node/core/tracking.py, the pause in node/core/pause.py; this module
parses the commands with Redis 7.0's checks and error texts and wires both into the server.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from slotgate.node.commands.registry import command
from slotgate.node.commands.replies import OK
from slotgate.node.commands.util import parse_int
from slotgate.node.core import errors
from slotgate.node.core.errors import CommandError
from slotgate.node.core.pause import Pause
from slotgate.node.core.tracking import Tracking
from slotgate.protocol import pause as pause_args
from slotgate.protocol import tracking as tracking_args
from slotgate.protocol.resp import array_header, integer

if TYPE_CHECKING:
    from slotgate.node.core.client import Client
    from slotgate.node.core.server import Server

TIMEOUT_NOT_INT = "ERR timeout is not an integer or out of range"
NO_SUCH_CLIENT = "ERR No such client"
CLIENT_ID_POSITIVE = "ERR client-id should be greater than 0"


def install(srv: Server) -> None:
    srv.tracker = Tracking(srv)
    srv.pause = Pause(srv)
    srv.client_close_hooks.append(_on_close)


def _on_close(c: Client) -> None:
    """A closed (or RESET) client leaves tracking; a held one leaves the pause queue."""
    srv = c.server
    srv.tracker.disable(c)
    if c.blocked is not None and c.blocked.postponed:
        srv.pause.drop(c)


def _text(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


# -- client-side caching ------------------------------------------------------------------------
@command("client|tracking")
def client_tracking(c: Client, argv: list[bytes]) -> bytes:
    try:
        o = tracking_args.parse(argv, parse_int, c.server.clients.__contains__, c.tracking)
    except tracking_args.TrackingError as exc:
        raise CommandError(str(exc)) from None
    if not o.on:
        c.server.tracker.disable(c)
    else:
        c.server.tracker.enable(c, o.redirect, o.bcast, o.optin, o.optout, o.noloop,
                                o.prefixes)
    return OK


@command("client|caching")
def client_caching(c: Client, argv: list[bytes]) -> bytes:
    try:
        tracking_args.check_caching(c.tracking, argv[2])
    except tracking_args.TrackingError as exc:
        raise CommandError(str(exc)) from None
    assert c.tracking is not None
    c.tracking.caching = True
    return OK


@command("client|getredir")
def client_getredir(c: Client, argv: list[bytes]) -> bytes:
    return integer(-1 if c.tracking is None else c.tracking.redirect)


@command("client|trackinginfo")
def client_trackinginfo(c: Client, argv: list[bytes]) -> bytes:
    return tracking_args.info_reply(c.tracking, c.resp)


# -- pausing -------------------------------------------------------------------------------------
@command("client|pause")
def client_pause(c: Client, argv: list[bytes]) -> bytes:
    try:
        kind, timeout_ms = pause_args.parse(argv, lambda raw: parse_int(raw, TIMEOUT_NOT_INT))
    except pause_args.PauseError as exc:
        raise CommandError(str(exc)) from None
    now_ms = int(time.time() * 1000)
    c.server.pause.pause(kind, min(now_ms + timeout_ms, pause_args.MAX_END_MS))
    return OK


@command("client|unpause")
def client_unpause(c: Client, argv: list[bytes]) -> bytes:
    c.server.pause.unpause()
    return OK


@command("client|no-evict")
def client_no_evict(c: Client, argv: list[bytes]) -> bytes:
    opt = argv[2].lower()
    if opt == b"on":
        c.no_evict = True
    elif opt == b"off":
        c.no_evict = False
    else:
        raise CommandError(errors.SYNTAX)
    return OK


# -- CLIENT KILL -----------------------------------------------------------------------------------
CLIENT_TYPES = {b"normal": b"normal", b"master": b"master", b"replica": b"replica",
                b"slave": b"replica", b"pubsub": b"pubsub"}


def client_type(c: Client) -> bytes:
    """getClientType: replica, master, pubsub or normal."""
    if c.is_replica and not c.monitor:
        return b"replica"
    if c.is_master:
        return b"master"
    if c.subscriptions:
        return b"pubsub"
    return b"normal"


@command("client|kill")
def client_kill(c: Client, argv: list[bytes]) -> bytes:
    srv = c.server
    if len(argv) == 3:  # the old form: CLIENT KILL addr:port
        for other in list(srv.clients.values()):
            if other.addr.encode() == argv[2]:
                srv.kill_client(other)
                return OK
        raise CommandError(NO_SUCH_CLIENT)
    if len(argv) % 2:
        raise CommandError(errors.SYNTAX)
    cid: int | None = None
    ctype: bytes | None = None
    addr = laddr = user = None
    skipme = True
    for i in range(2, len(argv), 2):
        opt, val = argv[i].lower(), argv[i + 1]
        if opt == b"id":
            try:
                cid = parse_int(val)
            except CommandError:
                raise CommandError(CLIENT_ID_POSITIVE) from None
            if cid <= 0:
                raise CommandError(CLIENT_ID_POSITIVE)
        elif opt == b"type":
            ctype = CLIENT_TYPES.get(val.lower())
            if ctype is None:
                raise CommandError(f"ERR Unknown client type '{_text(val)}'")
        elif opt == b"addr":
            addr = val
        elif opt == b"laddr":
            laddr = val
        elif opt == b"user":
            found = srv.acl.users.get(val)
            if found is None:
                raise CommandError(f"ERR No such user '{_text(val)}'")
            user = val
        elif opt == b"skipme":
            low = val.lower()
            if low not in (b"yes", b"no"):
                raise CommandError(errors.SYNTAX)
            skipme = low == b"yes"
        else:
            raise CommandError(errors.SYNTAX)
    killed = 0
    for other in list(srv.clients.values()):
        if addr is not None and other.addr.encode() != addr:
            continue
        if laddr is not None and other.laddr.encode() != laddr:
            continue
        if ctype is not None and client_type(other) != ctype:
            continue
        if cid is not None and other.id != cid:
            continue
        if user is not None and other.user != user:
            continue
        if other is c and skipme:
            continue
        srv.kill_client(other)
        killed += 1
    return integer(killed)


# -- CLIENT LIST / INFO memory fields -------------------------------------------------------------
def _command_bytes(argv: list[bytes]) -> int:
    """The size of ``argv`` as a RESP multibulk request."""
    return (3 + len(str(len(argv)))
            + sum(len(a) + 5 + len(str(len(a))) for a in argv))


def memory_fields(c: Client, caller: Client | None, argv: list[bytes] | None) -> str:
    """qbuf ... tot-mem of one CLIENT LIST/INFO line, from what ``c`` holds now.

    ``caller``/``argv``: the client running CLIENT LIST/INFO and its request (still in its
    query buffer and argv, as in Redis)."""
    qbuf, argv_mem, multi_mem, oll, omem, tot = _memory(c, caller, argv)
    return (f"qbuf={qbuf} qbuf-free=0 argv-mem={argv_mem} multi-mem={multi_mem} rbs={READ_BUFFER_BYTES} "
            f"rbp=0 obl=0 oll={oll} omem={omem} tot-mem={tot}")


def client_memory_bytes(c: Client) -> int:
    """What ``c`` holds (CLIENT LIST's tot-mem): MEMORY STATS' clients.*, MEMORY DOCTOR."""
    return _memory(c, None, None)[-1]


READ_BUFFER_BYTES = 1024


def _memory(c: Client, caller: Client | None,
            argv: list[bytes] | None) -> tuple[int, int, int, int, int, int]:
    """qbuf, argv-mem, multi-mem, oll, omem and tot-mem of ``c``."""
    qbuf = c.query_buffered()
    if c is caller and argv is not None:
        cur_argv: list[bytes] | None = argv
        qbuf += _command_bytes(argv)
    else:
        cur_argv = c.blocked.argv if c.blocked is not None else None
    argv_mem = sum(map(len, cur_argv)) if cur_argv else 0
    multi_mem = 0
    if c.multi:
        multi_mem = sum(sum(map(len, q_argv)) for _, q_argv in c.multi)
    out = c.out
    omem = sum(map(len, out))
    tot = qbuf + argv_mem + multi_mem + omem + READ_BUFFER_BYTES
    return qbuf, argv_mem, multi_mem, len(out), omem, tot


def redir(c: Client) -> int:
    return -1 if c.tracking is None else c.tracking.redirect


# -- CLIENT HELP (Redis 7.0's text) -----------------------------------------------------------------
_HELP = """CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:
CACHING (YES|NO)
    Enable/disable tracking of the keys for next command in OPTIN/OPTOUT modes.
GETREDIR
    Return the client ID we are redirecting to when tracking is enabled.
GETNAME
    Return the name of the current connection.
ID
    Return the ID of the current connection.
INFO
    Return information about the current client connection.
KILL <ip:port>
    Kill connection made from <ip:port>.
KILL <option> <value> [<option> <value> [...]]
    Kill connections. Options are:
    * ADDR (<ip:port>|<unixsocket>:0)
      Kill connections made from the specified address
    * LADDR (<ip:port>|<unixsocket>:0)
      Kill connections made to specified local address
    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)
      Kill connections by type.
    * USER <username>
      Kill connections authenticated by <username>.
    * SKIPME (YES|NO)
      Skip killing current connection (default: yes).
LIST [options ...]
    Return information about client connections. Options:
    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)
      Return clients of specified type.
UNPAUSE
    Stop the current client pause, resuming traffic.
PAUSE <timeout> [WRITE|ALL]
    Suspend all, or just write, clients for <timeout> milliseconds.
REPLY (ON|OFF|SKIP)
    Control the replies sent to the current connection.
SETNAME <name>
    Assign the name <name> to the current connection.
UNBLOCK <clientid> [TIMEOUT|ERROR]
    Unblock the specified blocked client.
TRACKING (ON|OFF) [REDIRECT <id>] [BCAST] [PREFIX <prefix> [...]]
         [OPTIN] [OPTOUT] [NOLOOP]
    Control server assisted client side caching.
TRACKINGINFO
    Report tracking status for the current connection.
NO-EVICT (ON|OFF)
    Protect current client connection from eviction.
HELP
    Prints this help.""".split("\n")


@command("client|help")
def client_help(c: Client, argv: list[bytes]) -> bytes:
    return array_header(len(_HELP)) + b"".join(b"+" + ln.encode() + b"\r\n" for ln in _HELP)
