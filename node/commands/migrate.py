"""MIGRATE: move keys to another node with DUMP payloads and RESTORE(-ASKING), as Redis 7.0.

Like Redis, MIGRATE is synchronous: the node waits for the target (bounded by the timeout)
while it runs, which is what makes a key either here or there, never both. Per call::

    look the keys up (none: +NOKEY) -> cached socket to host:port (10 s idle, 64 at most)
    -> one pipelined write: [AUTH] [SELECT db if the socket is on another db]
       RESTORE-ASKING key ttl payload [REPLACE]   (plain RESTORE outside cluster mode)
    -> read one reply line each -> delete the keys the target took (unless COPY),
       propagated as DEL -> +OK, or "ERR Target instance replied with error: ...",
       or "IOERR error or timeout reading|writing to target instance" (one retry on a socket
       error that is not a timeout, when nothing was read yet).
"""

from __future__ import annotations

import random
import socket
import time
from typing import TYPE_CHECKING

from slotgate.node.commands.dump import dump_value
from slotgate.node.commands.registry import command
from slotgate.node.commands.replies import OK
from slotgate.node.commands.util import parse_int
from slotgate.node.core.errors import SYNTAX, CommandError
from slotgate.node.core.keyspace import NOTIFY_GENERIC, now_ms
from slotgate.protocol.resp import encode_command

if TYPE_CHECKING:
    from slotgate.node.core.client import Client

CACHE_MAX_ITEMS = 64
CACHE_IDLE_S = 10
CHUNK = 64 * 1024  # bytes per write, as Redis
KEYS_MUST_BE_EMPTY = ("ERR When using MIGRATE KEYS option, the key argument must be set to "
                      "the empty string")
CONNECT_ERROR = "IOERR error or timeout connecting to the client"


class _Cached:
    __slots__ = ("sock", "last_dbid", "last_use_s", "buf")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.last_dbid = -1
        self.last_use_s = time.monotonic()
        self.buf = b""


_CACHE: dict[str, _Cached] = {}


class _SocketError(Exception):
    def __init__(self, writing: bool, timed_out: bool) -> None:
        super().__init__("writing" if writing else "reading")
        self.writing = writing
        self.timed_out = timed_out
        self.retry_ok = False  # nothing was read back yet: reconnecting once is safe


def close_idle_sockets(now_s: float | None = None) -> None:
    """Close cached sockets unused for CACHE_IDLE_S (Redis' migrateCloseTimedoutSockets)."""
    now = time.monotonic() if now_s is None else now_s
    for name in [n for n, cs in _CACHE.items() if now - cs.last_use_s > CACHE_IDLE_S]:
        _close(name)


def _close(name: str) -> None:
    cs = _CACHE.pop(name, None)
    if cs is not None:
        cs.sock.close()


def _get_socket(host: str, port: int, timeout_s: float) -> _Cached | None:
    name = f"{host}:{port}"
    cs = _CACHE.get(name)
    if cs is not None:
        cs.last_use_s = time.monotonic()
        return cs
    if len(_CACHE) >= CACHE_MAX_ITEMS:
        _close(random.choice(list(_CACHE)))
    try:
        sock = socket.create_connection((host, port), timeout=timeout_s)
    except TimeoutError:
        return None
    except OSError:
        # Redis' non-blocking connect "succeeds" and the refusal shows up as a failed write
        # (so the reply is the "writing to target instance" IOERR, after one retry).
        raise _SocketError(True, False) from None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    cs = _CACHE[name] = _Cached(sock)
    return cs


def _read_line(cs: _Cached, deadline: float) -> bytes:
    while b"\r\n" not in cs.buf:
        left = deadline - time.monotonic()
        if left <= 0:
            raise _SocketError(False, True)
        cs.sock.settimeout(left)
        try:
            data = cs.sock.recv(65536)
        except TimeoutError:
            raise _SocketError(False, True) from None
        except OSError:
            raise _SocketError(False, False) from None
        if not data:
            raise _SocketError(False, False)
        cs.buf += data
    line, cs.buf = cs.buf.split(b"\r\n", 1)
    return line


def _write_all(cs: _Cached, data: bytes, timeout_s: float) -> None:
    view = memoryview(data)
    cs.sock.settimeout(timeout_s)
    try:
        while view:
            n = cs.sock.send(view[:CHUNK])
            view = view[n:]
    except TimeoutError:
        raise _SocketError(True, True) from None
    except OSError:
        raise _SocketError(True, False) from None


@command("migrate")
def migrate(c: Client, argv: list[bytes]) -> bytes:
    copy = replace = False
    username: bytes | None = None
    password: bytes | None = None
    keys = [argv[3]]
    j = 6
    while j < len(argv):
        opt = argv[j].lower()
        more = len(argv) - 1 - j
        if opt == b"copy":
            copy = True
        elif opt == b"replace":
            replace = True
        elif opt == b"auth":
            if not more:
                raise CommandError(SYNTAX)
            j += 1
            password = argv[j]
        elif opt == b"auth2":
            if more < 2:
                raise CommandError(SYNTAX)
            username, password = argv[j + 1], argv[j + 2]
            j += 2
        elif opt == b"keys":
            if argv[3]:
                raise CommandError(KEYS_MUST_BE_EMPTY)
            keys = argv[j + 1:]
            break
        else:
            raise CommandError(SYNTAX)
        j += 1
    timeout_ms = parse_int(argv[5])
    dbid = parse_int(argv[4])
    if timeout_ms <= 0:
        timeout_ms = 1000
    db = c.db
    present = [k for k in keys if db.lookup(k) is not None]
    if not present:
        return b"+NOKEY\r\n"
    close_idle_sockets()
    host = argv[1].decode("utf-8", "replace")
    try:
        port = int(argv[2])
    except ValueError:
        port = 0
    restore = b"RESTORE-ASKING" if c.server.cluster is not None else b"RESTORE"
    may_retry = True
    while True:
        try:
            cs = _get_socket(host, port, timeout_ms / 1000)
            if cs is None:
                raise CommandError(CONNECT_ERROR)
            return _transfer(c, cs, present, dbid, restore, replace, copy, username, password,
                             timeout_ms)
        except _SocketError as e:
            _close(f"{host}:{port}")
            if (e.retry_ok or e.writing) and may_retry and not e.timed_out:
                may_retry = False
                continue
            where = "writing" if e.writing else "reading"
            raise CommandError(f"IOERR error or timeout {where} to target instance") from None


def _transfer(c: Client, cs: _Cached, keys: list[bytes], dbid: int, restore: bytes,
              replace: bool, copy: bool, username: bytes | None, password: bytes | None,
              timeout_ms: int) -> bytes:
    db = c.db
    out: list[bytes] = []
    if password is not None:
        out.append(encode_command(b"AUTH", username, password) if username is not None
                   else encode_command(b"AUTH", password))
    select = cs.last_dbid != dbid
    if select:
        out.append(encode_command(b"SELECT", b"%d" % dbid))
    sent: list[bytes] = []
    now = now_ms()
    for key in keys:
        value = db.lookup(key)
        if value is None:
            continue
        ttl = 0
        when = db.get_expire(key)
        if when is not None:
            ttl = when - now
            if ttl < 0:
                continue
            ttl = max(ttl, 1)
        args = [restore, key, b"%d" % ttl, dump_value(value)]
        if replace:
            args.append(b"REPLACE")
        out.append(encode_command(*args))
        sent.append(key)
    deadline_s = time.monotonic() + timeout_ms / 1000
    try:
        _write_all(cs, b"".join(out), timeout_ms / 1000)
    except _SocketError as e:
        e.retry_ok = True
        raise
    first_error: bytes | None = None
    auth_line = select_line = b""
    try:
        if password is not None:
            auth_line = _read_line(cs, deadline_s)
        if select:
            select_line = _read_line(cs, deadline_s)
    except _SocketError as e:
        e.retry_ok = True
        raise
    moved: list[bytes] = []
    socket_error: _SocketError | None = None
    for idx, key in enumerate(sent):
        try:
            line = _read_line(cs, deadline_s)
        except _SocketError as e:
            e.retry_ok = idx == 0
            socket_error = e
            break
        if auth_line.startswith(b"-") or select_line.startswith(b"-") or line.startswith(b"-"):
            if first_error is None:
                cs.last_dbid = -1
                if auth_line.startswith(b"-"):
                    first_error = auth_line
                elif select_line.startswith(b"-"):
                    first_error = select_line
                else:
                    first_error = line
        elif not copy:
            db.delete(key)
            db.notify(NOTIFY_GENERIC, b"del", key)
            c.ks.dirty += 1
            moved.append(key)
    if moved:
        c.propagate_as = [[b"DEL", *moved]]
    if socket_error is not None and first_error is None:
        raise socket_error
    if first_error is not None:
        text = first_error[1:].decode("utf-8", "replace")
        raise CommandError(f"ERR Target instance replied with error: {text}")
    cs.last_dbid = dbid
    return OK
