"""The proxy's own clients, as one Redis server shows and manages its clients.

    CLIENT LIST / INFO / KILL / ID / SETNAME / GETNAME / UNBLOCK / NO-EVICT / REPLY
    INFO clients, stats (connections, errors) ─▶ ServerStats (one per Proxy)

The registry is the proxy's set of sessions (``Proxy.sessions``); what each client line shows
is read from the session at the moment it is asked (its subscriptions from ``pubsub``, its
transaction from ``pinned``, its blocked command from ``pinned``). The hot path keeps two
attribute stores per reply (the last command and when it came, for ``cmd=`` and ``idle=``);
everything else is counted per connection or per error reply.

CLIENT UNBLOCK of a client blocked through the proxy is sent to the node where its command
waits, naming the node's own client id of that connection: the node ends the command with its
own TIMEOUT or ERROR reply, which flows back through the proxy as any reply does, and nothing
it might have popped is lost. Texts and argument rules are redis-server 7.0.15's (there is no
MAXAGE filter in 7.0: it is a syntax error there and here).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from slotgate.protocol.hello import valid_client_name
from slotgate.protocol.resp import OK, bulk, encode_command, integer, null, verbatim
from slotgate.proxy import errors
from slotgate.proxy.routing.redirect import error_frame
from slotgate.proxy.routing.router import Call, Gather

if TYPE_CHECKING:
    from slotgate.proxy.front.routes import RouteSession as Session
    from slotgate.proxy.front.server import Proxy
    from slotgate.proxy.front.session import Session as FullSession
    from slotgate.proxy.routing.router import Router

# What a handler returns when it answered by itself: the reply slot is taken (ANSWERED), or
# the reply is given and the session's reply mode changed (SWITCHED: the session re-reads
# how it dispatches before its next request).
ANSWERED: bytes = bytes(bytearray(b"answered"))
SWITCHED: bytes = bytes(bytearray(b"switched"))
# CLIENT REPLY modes (Redis' CLIENT_REPLY_OFF / CLIENT_REPLY_SKIP_NEXT).
REPLY_ON, REPLY_OFF, REPLY_SKIP = range(3)
_REPLY_MODES = {b"on": REPLY_ON, b"off": REPLY_OFF, b"skip": REPLY_SKIP}
# Redis' getClientTypeByName: "slave" and "replica" are one type.
_CLIENT_TYPES = {b"normal": b"normal", b"slave": b"replica", b"replica": b"replica",
                 b"master": b"master", b"pubsub": b"pubsub"}


class ServerStats:
    """What the proxy counts about itself as a server (INFO server, clients, stats)."""

    def __init__(self) -> None:
        self.started_s = time.time()
        self.started_monotonic_s = time.monotonic()
        self.run_id = os.urandom(20).hex()
        self.connections_received = 0
        self.rejected_connections = 0
        self.error_replies: Counter[bytes] = Counter()  # error code -> replies the proxy gave
        # command name ("other": unknown) -> requests refused before they could run (unknown
        # command, arity, not allowed here): Redis counts them as rejected, not as calls.
        self.rejected: Counter[str] = Counter()
        # (monotonic seconds, commands processed) at the last two samples, for ops/sec.
        self._samples: list[tuple[float, int]] = []

    def error_reply(self, raw: bytes) -> None:
        """One error reply sent to a client (``-CODE text``): Redis' errorstats."""
        end = raw.find(b" ")
        code = raw[1:end] if end > 0 else raw[1:].rstrip(b"\r\n")
        self.error_replies[code[:64]] += 1

    def reject(self, name: str) -> None:
        self.rejected[name] += 1

    def uptime_s(self) -> int:
        return int(time.monotonic() - self.started_monotonic_s)

    def ops_per_sec(self, commands_total: int) -> int:
        """Commands per second over the time since the previous INFO stats (at least 100 ms
        apart, as Redis samples every 100 ms; the first call has no rate yet)."""
        now = time.monotonic()
        samples = self._samples
        if samples and now - samples[-1][0] < 0.1:
            if len(samples) < 2:
                return 0
            then_s, then_n = samples[-2]
        else:
            samples.append((now, commands_total))
            del samples[:-2]
            if len(samples) < 2:
                return 0
            then_s, then_n = samples[0]
        elapsed_s = now - then_s
        return int((commands_total - then_n) / elapsed_s) if elapsed_s > 0 else 0


# --- one client's line -------------------------------------------------------------------------
def client_type(c: FullSession) -> bytes:
    return b"pubsub" if c.sub.link is not None else b"normal"


def flags(c: FullSession) -> str:
    """Redis' flag letters, in Redis' order (getClientInfoString)."""
    out = ""
    if c.sub.link is not None:
        out += "P"
    if c.tx.queued is not None:
        out += "x"
    if c.tx.blocked is not None or c in c.proxy.pause.held:
        out += "b"
    if c.no_evict:
        out += "e"
    return out or "N"


def info_line(c: FullSession, now_s: float, cmd: str | None = None) -> str:
    link = c.sub.link
    sub, psub, ssub = (0, 0, 0) if link is None else (
        len(link.sets["channels"]), len(link.sets["patterns"]), len(link.sets["shard"]))
    queued = c.tx.queued
    last_s, last_cmd = c.last_s, c.last_cmd
    if c.tx.blocked is not None and c.slots:  # the blocking command is the oldest unanswered
        last_s, last_cmd = c.slots[0].start_s, c.slots[0].name
    held = c.proxy.pause.held.get(c)
    if held is not None:  # a request held by CLIENT PAUSE: Redis shows it as the last command
        last_cmd = held
    idle_s = int(time.perf_counter() - last_s) if cmd is None else 0
    return (
        f"id={c.id} addr={c.peer} laddr={c.laddr} fd={c.fd} "
        f"name={(c.name or b'').decode('utf-8', 'replace')} "
        f"age={int(now_s - c.created_s)} idle={idle_s} flags={flags(c)} db={c.db} "
        f"sub={sub} psub={psub} ssub={ssub} multi={-1 if queued is None else len(queued)} "
        f"qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 "
        f"events=r cmd={cmd or last_cmd} user={c.login.user.name.decode('utf-8', 'replace')} redir=-1 resp={c.proto}\n"
    )


def _sessions(s: Session) -> list[FullSession]:
    return sorted(s.proxy.sessions, key=lambda c: c.id)


def full(s: Session) -> FullSession:
    return cast("FullSession", s)  # route code's view of the session is the session


# --- the CLIENT subcommands --------------------------------------------------------------------
def client_id(s: Session, argv: list[bytes]) -> bytes:
    return integer(s.id)


def client_setname(s: Session, argv: list[bytes]) -> bytes:
    name = argv[2]
    if not valid_client_name(name):
        return error_frame(errors.CLIENT_NAME_CHARS)
    s.name = name or None
    return OK


def client_getname(s: Session, argv: list[bytes]) -> bytes:
    return null(s.proto) if s.name is None else bulk(s.name)


def client_info(s: Session, argv: list[bytes]) -> bytes:
    return verbatim(info_line(full(s), time.monotonic(), "client|info"), proto=s.proto)


def client_list(s: Session, argv: list[bytes]) -> bytes:
    """CLIENT LIST [TYPE type] | [ID id ...]: 7.0 takes one filter, TYPE with exactly one
    value; the caller's own line shows this command. With workers, every worker's clients,
    in id order."""
    clients = _listed(s.proxy, argv)
    if isinstance(clients, bytes):
        return clients
    now_s = time.monotonic()
    text = "".join(info_line(c, now_s, "client|list" if c.id == s.id else None)
                   for c in clients)
    siblings = s.proxy.siblings
    if siblings is None:
        return verbatim(text, proto=s.proto)
    slot = s.new_slot("client|list")
    proto = s.proto
    siblings.ask([b"LIST", *argv[2:]],
                 lambda answers: slot(verbatim(_by_id(text, answers), proto=proto)))
    return ANSWERED


def _listed(proxy: Proxy, argv: list[bytes]) -> list[FullSession] | bytes:
    """The clients CLIENT LIST's filter keeps, or its error."""
    clients = sorted(proxy.sessions, key=lambda c: c.id)
    if len(argv) == 4 and argv[2].lower() == b"type":
        kind = _CLIENT_TYPES.get(argv[3].lower())
        if kind is None:
            return error_frame(errors.UNKNOWN_CLIENT_TYPE.format(type=_shown(argv[3])))
        return [c for c in clients if client_type(c) == kind]
    if len(argv) >= 4 and argv[2].lower() == b"id":
        ids = set()
        for raw in argv[3:]:
            n = _int(raw)
            if n is None:
                return error_frame(errors.INVALID_CLIENT_ID)
            ids.add(n)
        return [c for c in clients if c.id in ids]
    if len(argv) != 2:
        return error_frame(errors.SYNTAX)
    return clients


def _by_id(text: str, answers: list[bytes]) -> str:
    """This worker's client lines and the other workers', ordered by client id."""
    lines = text.splitlines(keepends=True)
    for answer in answers:
        lines += answer.decode("utf-8", "replace").splitlines(keepends=True)
    return "".join(sorted(lines, key=lambda line: int(line[3:line.index(" ")])))


def asked_list(proxy: Proxy, args: list[bytes]) -> list[bytes]:
    """Another worker's CLIENT LIST: the lines of this worker's clients its filter keeps."""
    clients = _listed(proxy, [b"CLIENT", b"LIST", *args])
    if isinstance(clients, bytes):
        return []
    now_s = time.monotonic()
    return ["".join(info_line(c, now_s) for c in clients).encode()]


def client_kill(s: Session, argv: list[bytes]) -> bytes:
    """CLIENT KILL addr (the old form) or CLIENT KILL <filter> <value> ... (ID, TYPE, USER,
    ADDR, LADDR, SKIPME); a repeated filter keeps its last value, as in Redis. With workers,
    the other workers' clients too."""
    me = full(s)
    if len(argv) == 3:
        for c in _sessions(s):
            if c.peer.encode() == argv[2]:
                return _kill_all(s, me, [c], None, lambda n: OK)
        if s.proxy.siblings is None:
            return error_frame(errors.NO_SUCH_CLIENT)
        return _kill_all(s, me, [], [b"KILL", b"addr", argv[2]],
                         lambda n: OK if n else error_frame(errors.NO_SUCH_CLIENT))
    filters: dict[bytes, bytes] = {}
    skipme = True
    i = 2
    while i < len(argv):
        opt = argv[i].lower()
        if i + 1 >= len(argv):
            return error_frame(errors.SYNTAX)
        value = argv[i + 1]
        if opt == b"id":
            n = _int(value)
            if n is None or n < 1:
                return error_frame(errors.CLIENT_ID_POSITIVE)
        elif opt == b"type":
            kind = _CLIENT_TYPES.get(value.lower())
            if kind is None:
                return error_frame(errors.UNKNOWN_CLIENT_TYPE.format(type=_shown(value)))
            value = kind
        elif opt == b"user":
            if value not in s.proxy.users.users:
                return error_frame(errors.NO_SUCH_USER.format(user=_shown(value)))
        elif opt == b"skipme":
            if value.lower() not in (b"yes", b"no"):
                return error_frame(errors.SYNTAX)
            skipme = value.lower() == b"yes"
            i += 2
            continue
        elif opt not in (b"addr", b"laddr"):
            return error_frame(errors.SYNTAX)
        filters[opt] = value
        i += 2
    killed = [c for c in _sessions(s)
              if not (skipme and c is me) and all(_matches(c, o, v) for o, v in filters.items())]
    question = [b"KILL", *(part for pair in filters.items() for part in pair)]
    return _kill_all(s, me, killed, question, integer)


def _kill_all(s: Session, me: FullSession, killed: list[FullSession],
              question: list[bytes] | None, reply: Callable[[int], bytes]) -> bytes:
    """Close the ``killed`` clients; ``reply(clients killed)`` once a blocking command any of
    them had in flight has ended on its node, and their subscriber links are gone there (as
    Redis frees a killed client at once: nothing pushed after the reply is popped for it, no
    PUBLISH after it counts it), and, with workers, once the others answered ``question``
    (their own clients killed by the same filters)."""
    waiting = _close(killed, me)
    siblings = s.proxy.siblings if question is not None else None
    if not waiting and siblings is None:
        return reply(len(killed))
    slot = s.new_slot("client|kill")
    elsewhere = [0]
    gather = Gather(len(waiting) + (siblings is not None),
                    lambda replies: slot(reply(len(killed) + elsewhere[0])))
    for i, (node, node_client_id) in enumerate(waiting):
        s.router.send(_node_kill(s.router, node, node_client_id, gather.part(i)))
    if siblings is not None and question is not None:
        part = gather.part(len(waiting))

        def answered(answers: list[bytes]) -> None:
            elsewhere[0] = sum(int(a) for a in answers if a.isdigit())
            part(b"")

        siblings.ask(question, answered)
    return ANSWERED


def _close(killed: list[FullSession], me: FullSession | None) -> list[tuple[str, int]]:
    """Close the clients; the node connections (node, its client id) still to be killed."""
    waiting = [c.tx.blocked for c in killed if c.tx.blocked is not None]
    waiting += [pair for c in killed if (state := c.sub.link) is not None
                for pair in state.node_clients()]
    for c in killed:
        if c is me:
            c.quit = True  # the reply is sent, then the connection closes (CLOSE_AFTER_REPLY)
        else:
            c.kill()
    return waiting


def _node_kill(router: Router, node: str, node_client_id: int,
               done: Callable[[bytes], None]) -> Call:
    payload = encode_command(b"CLIENT", b"KILL", b"ID", str(node_client_id).encode())
    return Call(router, payload, -1, False, 2, 0, done, fixed_node=node)


def asked_kill(proxy: Proxy, args: list[bytes]) -> list[bytes]:
    """Another worker's CLIENT KILL: its filters (checked there) applied to this worker's
    clients; the number killed. Their blocked commands and subscriber links are ended on
    their nodes without waiting."""
    filters = dict(zip(args[::2], args[1::2], strict=False))
    killed = [c for c in sorted(proxy.sessions, key=lambda c: c.id)
              if all(_matches(c, o, v) for o, v in filters.items())]
    for node, node_client_id in _close(killed, None):
        proxy.router.send(_node_kill(proxy.router, node, node_client_id, _ignored))
    return [b"%d" % len(killed)]


def _ignored(raw: bytes) -> None:
    pass


def _matches(c: FullSession, opt: bytes, value: bytes) -> bool:
    if opt == b"id":
        return c.id == int(value)
    if opt == b"type":
        return client_type(c) == value
    if opt == b"addr":
        return c.peer.encode() == value
    if opt == b"laddr":
        return c.laddr.encode() == value
    return c.login.user.name == value  # user


def client_unblock(s: Session, argv: list[bytes]) -> bytes | None:
    """CLIENT UNBLOCK id [TIMEOUT|ERROR]: the node where that client's command waits ends it
    (see the module's docstring); 0 when that client is not blocked."""
    if len(argv) > 4:
        return error_frame(errors.CLIENT_SUBCOMMAND.format(sub=_shown(argv[1])))
    how = b"TIMEOUT"
    if len(argv) == 4:
        how = argv[3].upper()
        if how not in (b"TIMEOUT", b"ERROR"):
            return error_frame(errors.UNBLOCK_REASON)
    target_id = _int(argv[2])
    if target_id is None:
        return error_frame(errors.NOT_INTEGER)
    target = next((c for c in s.proxy.sessions if c.id == target_id), None)
    siblings = s.proxy.siblings
    if target is None and siblings is not None:  # a client of another worker, maybe
        slot = s.new_slot("client|unblock")
        siblings.ask([b"UNBLOCK", argv[2], how],
                     lambda answers: slot(integer(1 if b"1" in answers else 0)))
        return ANSWERED
    if target is None or target.tx.blocked is None:
        return integer(0)
    node, node_client_id = target.tx.blocked
    slot = s.new_slot("client|unblock")
    payload = encode_command(b"CLIENT", b"UNBLOCK", str(node_client_id).encode(), how)
    s.router.send(Call(s.router, payload, -1, False, s.proto, s.id, slot, fixed_node=node))
    return ANSWERED


def asked_unblock(proxy: Proxy, args: list[bytes], answer: Callable[[list[bytes]], None]) -> None:
    """Another worker's CLIENT UNBLOCK id how (checked there): ``1`` once the node ended the
    blocked command of that client of this worker, else ``0``."""
    target_id = _int(args[0]) if len(args) == 2 else None
    target = next((c for c in proxy.sessions if c.id == target_id), None)
    if target is None or target.tx.blocked is None:
        answer([b"0"])
        return
    node, node_client_id = target.tx.blocked
    payload = encode_command(b"CLIENT", b"UNBLOCK", str(node_client_id).encode(), args[1])
    proxy.router.send(Call(proxy.router, payload, -1, False, 2, 0,
                           lambda raw: answer([b"1" if raw == b":1\r\n" else b"0"]),
                           fixed_node=node))


def client_no_evict(s: Session, argv: list[bytes]) -> bytes:
    mode = argv[2].lower()
    if mode not in (b"on", b"off"):
        return error_frame(errors.SYNTAX)
    full(s).no_evict = mode == b"on"
    return OK


def client_reply(s: Session, argv: list[bytes]) -> bytes:
    """CLIENT REPLY ON answers +OK; OFF and SKIP answer nothing (the session drops the
    replies of the requests they cover)."""
    mode = _REPLY_MODES.get(argv[2].lower())
    if mode is None:
        return error_frame(errors.SYNTAX)
    me = full(s)
    if not (mode == REPLY_SKIP and me.reply_mode == REPLY_OFF):
        me.set_reply_mode(mode)
    s.reply("client|reply", OK if mode == REPLY_ON else b"")
    return SWITCHED


def answered_anyway(argv: list[bytes], mode: int) -> bool:
    """Requests answered while replies are off: CLIENT REPLY ON, and RESET (which turns them
    on) unless only this one reply was to be skipped."""
    name = argv[0].lower()
    if name == b"reset":
        return mode == REPLY_OFF
    return (name == b"client" and len(argv) == 3 and argv[1].lower() == b"reply"
            and argv[2].lower() == b"on")


def reset(s: Session) -> None:
    """RESET: replies on, NO-EVICT off (Redis' clearClientConnectionState)."""
    me = full(s)
    me.no_evict = False
    me.set_reply_mode(REPLY_ON)


def _int(raw: bytes) -> int | None:
    """Redis' string2ll: an optional minus and digits, no spaces, no plus, in 64 bits."""
    digits = raw[1:] if raw[:1] == b"-" else raw
    if not digits.isdigit() or len(raw) > 20 or (len(digits) > 1 and digits[:1] == b"0"):
        return None
    n = int(raw)
    return n if -(1 << 63) <= n < (1 << 63) else None


def _shown(raw: bytes) -> str:
    """An argument inside an error text, as Redis' addReplyErrorFormat shows it."""
    return raw.decode("utf-8", "replace").replace("\r", " ").replace("\n", " ")


# (annotated: the compiled build type-checks local.py, which spreads this, first)
HANDLERS: dict[str, Callable[[Session, list[bytes]], bytes | None]] = {
    "client|id": client_id,
    "client|setname": client_setname,
    "client|getname": client_getname,
    "client|info": client_info,
    "client|list": client_list,
    "client|kill": client_kill,
    "client|unblock": client_unblock,
    "client|no-evict": client_no_evict,
    "client|reply": client_reply,
}
