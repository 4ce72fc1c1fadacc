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
from slotgate.node.core.pause import PAUSE_ALL, PAUSE_WRITE, Pause
from slotgate.node.core.tracking import Tracking
from slotgate.protocol.resp import array_header, bulk, integer, map_header, set_header

if TYPE_CHECKING:
    from slotgate.node.core.client import Client
    from slotgate.node.core.server import Server

CACHING_NOT_TRACKING = ("ERR CLIENT CACHING can be called only when the client is in tracking "
                        "mode with OPTIN or OPTOUT mode enabled")
CACHING_YES_NOT_OPTIN = "ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode."
CACHING_NO_NOT_OPTOUT = "ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode."
REDIRECT_ONE = "ERR A client can only redirect to a single other client"
REDIRECT_MISSING = "ERR The client ID you want redirect to does not exist"
PREFIX_NEEDS_BCAST = "ERR PREFIX option requires BCAST mode to be enabled"
SWITCH_BCAST = ("ERR You can't switch BCAST mode on/off before disabling tracking for this "
                "client, and then re-enabling it with a different mode.")
BCAST_OPTS = "ERR OPTIN and OPTOUT are not compatible with BCAST"
OPTIN_AND_OPTOUT = "ERR You can't specify both OPTIN mode and OPTOUT mode"
SWITCH_OPT = ("ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this "
              "client, and then re-enabling it with a different mode.")
PREFIX_OVERLAP_EXISTING = ("ERR Prefix '%s' overlaps with an existing prefix '%s'. "
                           "Prefixes for a single client must not overlap.")
PREFIX_OVERLAP_GIVEN = ("ERR Prefix '%s' overlaps with another provided prefix '%s'. "
                        "Prefixes for a single client must not overlap.")
TIMEOUT_NOT_INT = "ERR timeout is not an integer or out of range"
TIMEOUT_NEGATIVE = "ERR timeout is negative"
PAUSE_MODE = "ERR CLIENT PAUSE mode must be WRITE or ALL"
NO_SUCH_CLIENT = "ERR No such client"
CLIENT_ID_POSITIVE = "ERR client-id should be greater than 0"
_LONG_MAX = 2**63 - 1


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
    redirect = 0
    bcast = optin = optout = noloop = False
    prefixes: list[bytes] = []
    j = 3
    n = len(argv)
    while j < n:
        opt = argv[j].lower()
        more = j + 1 < n
        if opt == b"redirect" and more:
            j += 1
            if redirect != 0:
                raise CommandError(REDIRECT_ONE)
            redirect = parse_int(argv[j])
            if redirect not in c.server.clients:
                raise CommandError(REDIRECT_MISSING)
        elif opt == b"bcast":
            bcast = True
        elif opt == b"optin":
            optin = True
        elif opt == b"optout":
            optout = True
        elif opt == b"noloop":
            noloop = True
        elif opt == b"prefix" and more:
            j += 1
            prefixes.append(argv[j])
        else:
            raise CommandError(errors.SYNTAX)
        j += 1
    mode = argv[2].lower()
    tracking = c.server.tracker
    if mode == b"off":
        tracking.disable(c)
        return OK
    if mode != b"on":
        raise CommandError(errors.SYNTAX)
    st = c.tracking
    if not bcast and prefixes:
        raise CommandError(PREFIX_NEEDS_BCAST)
    if st is not None and st.bcast != bcast:
        raise CommandError(SWITCH_BCAST)
    if bcast and (optin or optout):
        raise CommandError(BCAST_OPTS)
    if optin and optout:
        raise CommandError(OPTIN_AND_OPTOUT)
    if st is not None and ((optin and st.optout) or (optout and st.optin)):
        raise CommandError(SWITCH_OPT)
    if bcast:
        _check_prefixes(c, prefixes)
    tracking.enable(c, redirect, bcast, optin, optout, noloop, prefixes)
    return OK


def _check_prefixes(c: Client, prefixes: list[bytes]) -> None:
    """checkPrefixCollisionsOrReply: no prefix may be a prefix of another."""
    existing = sorted(c.tracking.prefixes) if c.tracking is not None else []
    for i, p in enumerate(prefixes):
        for old in existing:
            if old.startswith(p) or p.startswith(old):
                raise CommandError(PREFIX_OVERLAP_EXISTING % (_text(p), _text(old)))
        for other in prefixes[i + 1:]:
            if other.startswith(p) or p.startswith(other):
                raise CommandError(PREFIX_OVERLAP_GIVEN % (_text(p), _text(other)))


@command("client|caching")
def client_caching(c: Client, argv: list[bytes]) -> bytes:
    st = c.tracking
    if st is None:
        raise CommandError(CACHING_NOT_TRACKING)
    opt = argv[2].lower()
    if opt == b"yes":
        if not st.optin:
            raise CommandError(CACHING_YES_NOT_OPTIN)
    elif opt == b"no":
        if not st.optout:
            raise CommandError(CACHING_NO_NOT_OPTOUT)
    else:
        raise CommandError(errors.SYNTAX)
    st.caching = True
    return OK


@command("client|getredir")
def client_getredir(c: Client, argv: list[bytes]) -> bytes:
    return integer(-1 if c.tracking is None else c.tracking.redirect)


@command("client|trackinginfo")
def client_trackinginfo(c: Client, argv: list[bytes]) -> bytes:
    st = c.tracking
    flags = c.server.tracker.trackinginfo_flags(c)
    prefixes = sorted(st.prefixes) if st is not None else []
    return (
        map_header(3, c.resp)
        + bulk(b"flags") + set_header(len(flags), c.resp) + b"".join(bulk(f) for f in flags)
        + bulk(b"redirect") + integer(-1 if st is None else st.redirect)
        + bulk(b"prefixes") + array_header(len(prefixes)) + b"".join(bulk(p) for p in prefixes)
    )


# -- pausing -------------------------------------------------------------------------------------
@command("client|pause")
def client_pause(c: Client, argv: list[bytes]) -> bytes:
    timeout_ms = parse_int(argv[2], TIMEOUT_NOT_INT)
    if timeout_ms < 0:
        raise CommandError(TIMEOUT_NEGATIVE)
    kind = PAUSE_ALL
    if len(argv) == 4:
        mode = argv[3].lower()
        if mode == b"write":
            kind = PAUSE_WRITE
        elif mode != b"all":
            raise CommandError(PAUSE_MODE)
    elif len(argv) > 4:
        raise CommandError("ERR unknown subcommand or wrong number of arguments for "
                           f"'{_text(argv[1])}'. Try CLIENT HELP.")
    now_ms = int(time.time() * 1000)
    c.server.pause.pause(kind, min(now_ms + timeout_ms, _LONG_MAX))
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
