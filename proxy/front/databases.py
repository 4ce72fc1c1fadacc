"""Numbered databases over a cluster (``databases: N``, N > 1): SELECT 0..N-1.

A cluster has database 0 only. The proxy keeps each client's database (``Session.db``) and
stores the keys of database ``d > 0`` under a prefix that keeps their slot::

    {T}slotgate-db<d>:<key>      T: a short hash tag whose slot is the key's own slot

``T`` (``crossslot.tag_for_slot``) is made of hex digits, so the prefixed key's hash tag is
``T`` whatever braces the key itself holds, and its slot is the key's: a command's keys that
share a slot in one database share it in every database, and a key moves between databases
(MOVE, SWAPDB) by a RENAME within its slot. Database 0 is not prefixed: direct cluster
clients see the same keys, and its requests take the usual fast path at no cost.

With databases on, every request of a client in database ``d > 0`` has its keys prefixed
(``COMMAND GETKEYS``' positions) before it is routed; the replies that carry key names
(blocking pops, LMPOP/ZMPOP, XREAD/XREADGROUP, scripts and functions) have the prefix taken
off. The commands about
a whole database are the proxy's in every database (database 0 leaves out the prefixed
keys): KEYS, SCAN, RANDOMKEY, DBSIZE, FLUSHDB (a KEYS or SCAN of every master), MOVE
(RENAMENX), COPY … DB, SWAPDB (``db_swap.py``), SELECT, INFO's Keyspace section
(``db_info.py``). Inside MULTI,
SELECT, MOVE and COPY … DB are rewritten for the node while queuing and their replies given
Redis' form at EXEC (``at_exec``); the other whole-database commands are refused there.
Stored names and notification channels: ``db_names.py``.
"""

from __future__ import annotations

import random
import re
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from slotgate.protocol.commands import arity_ok, key_positions, lookup
from slotgate.protocol.resp import encode_command
from slotgate.protocol.slots import key_slot
from slotgate.proxy import errors
from slotgate.proxy.backend.connections import DirectConnection
from slotgate.proxy.front import db_info, db_swap
from slotgate.proxy.front.db_info import masters
from slotgate.proxy.front.db_names import ANY_DB, MARK, prefixed, split_name
from slotgate.proxy.front.pinned import _direct, _on_owner, after_writes, refuse, write_on_owner
from slotgate.proxy.front.routes import ROUTES
from slotgate.proxy.routing.redirect import error_frame
from slotgate.proxy.routing.splitter import array_elements

if TYPE_CHECKING:
    from slotgate.proxy.front.routes import RouteSession

DB_OUT_OF_RANGE = "ERR DB index is out of range"
SAME_OBJECTS = "ERR source and destination objects are the same"
INVALID_FIRST = "ERR invalid first DB index"
INVALID_SECOND = "ERR invalid second DB index"
_ANY_DB = ANY_DB
_OK = b"+OK\r\n"
# Replies that carry key names (the prefix is taken off them): a script's or function's
# reply may name its KEYS.
NAMED_REPLIES = frozenset({"blpop", "brpop", "bzpopmin", "bzpopmax", "blmpop", "bzmpop",
                           "lmpop", "zmpop", "xread", "xreadgroup", "eval", "evalsha",
                           "eval_ro", "evalsha_ro", "fcall", "fcall_ro"})
# Commands of the session's fast route that this module answers in every database.
NOT_FAST: frozenset[str] = frozenset({"move"})
# SCAN's cursor: the node's cursor times this, plus the master's index.
_CURSOR_STRIDE = 1024

Handled = tuple[bool, list[bytes], Awaitable[None] | None]


def _pattern(db: int, pattern: bytes) -> bytes:
    return b"{*}%s%d:%s" % (MARK, db, pattern)


def _named_re(db: int) -> re.Pattern[bytes]:
    """A bulk string (its length in group 1) or a simple string (a script's status reply)
    that starts with database ``db``'s prefix."""
    return re.compile(rb"(?:\$(\d+)\r\n|(?:\A|(?<=\n))\+)\{[0-9a-f]+\}" + MARK + b"%d:" % db)


def strip(raw: bytes, db: int) -> bytes:
    """``raw`` with the prefix of database ``db`` taken off every bulk string (and simple
    string) holding it."""
    def cut(m: re.Match[bytes]) -> bytes:
        if m.group(1) is None:
            return b"+"
        return b"$%d\r\n" % (int(m.group(1)) - (m.end() - m.start() - len(m.group(1)) - 3))
    return _named_re(db).sub(cut, raw)


def _name_of(key: bytes, db: int) -> bytes | None:
    """A node's key name as database ``db`` sees it (None: another database's)."""
    if db == 0:
        return None if _ANY_DB.match(key) else key
    m = _ANY_DB.match(key)
    if m is None or key[key.index(b"}") + 1:m.end()] != b"%s%d:" % (MARK, db):
        return None
    return key[m.end():]


def _bulk(value: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(value), value)


def _names(frames: list[bytes]) -> list[bytes]:
    return [f[f.index(b"\r\n") + 2:-2] for f in frames]


def _db_index(raw: bytes, n_dbs: int, invalid: str = errors.NOT_INTEGER) -> int | bytes:
    try:
        db = int(raw)
    except ValueError:
        return error_frame(invalid)
    if not 0 <= db < n_dbs:
        return error_frame(DB_OUT_OF_RANGE)
    return db


# --- the entry point from Session.dispatch ----------------------------------------------------
def dispatch(s: RouteSession, argv: list[bytes]) -> Handled:
    """``(True, argv, pending)``: answered here; ``(False, argv, None)``: route ``argv`` (the
    client's, its keys prefixed in a database above 0) as usual."""
    info = lookup(argv)
    if info is None or not arity_ok(info, len(argv)):
        return False, argv, None
    name = info.name
    # Inside MULTI, or in subscriber mode, the session's own checks come first.
    in_multi = s.tx.queued is not None
    plain = not in_multi and s.sub.link is None
    if plain:
        handler = _HANDLERS.get(name)
        if handler is not None:
            out = handler(s, argv)
            if out is not None:
                return True, argv, out if out is not _ANSWERED else None
    if name == "reset":
        s.set_db(0)
        return False, argv, None
    db = s.db if not in_multi or s.tx.db is None else s.tx.db
    if in_multi and name in _IN_MULTI:
        queued = _IN_MULTI[name](s, argv, db)
        if queued is None:
            return True, argv, None  # refused
        return False, queued, None  # rewritten, its keys already as stored
    if db == 0:
        return False, argv, None
    positions = key_positions(argv)
    if positions:
        argv = list(argv)
        for i in positions:
            argv[i] = prefixed(argv[i], db)
    if name in NAMED_REPLIES and plain:
        w = _Stripping(s, db)
        pending = ROUTES[info.route](cast("RouteSession", w), argv, info)
        return True, argv, pending if pending is not None else w.pending
    return False, argv, None


class _Stripping:
    """The session as route code sees it, with the prefix taken off the replies."""

    def __init__(self, s: RouteSession, db: int) -> None:
        self._s = s
        self._db = db
        self.pending: Awaitable[None] | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._s, name)

    def new_slot(self, name: str) -> Callable[[bytes], None]:
        fill = self._s.new_slot(name)
        return lambda raw: fill(strip(raw, self._db))

    def reply(self, name: str, raw: bytes) -> None:
        self._s.reply(name, strip(raw, self._db))

    def send_single(self, argv: list[bytes], slot: int, readonly: bool, name: str) -> None:
        fill = self.new_slot(name)
        s = self._s

        async def run() -> None:
            await s.wait_idle()
            if readonly:
                fill(await _on_owner(s, slot, encode_command(*argv), 1, True,
                                     partial(_direct, s)))
            else:  # a pop (LMPOP, ZMPOP): the client's write policies too
                fill(await write_on_owner(s, slot, encode_command(*argv), 1))

        self.pending = run()


class _Answered:
    pass


_ANSWERED = cast("Awaitable[None]", _Answered())


def _later(s: RouteSession, name: str,
           work: Callable[[], Coroutine[Any, Any, bytes]]) -> Awaitable[None]:
    """The reply computed by ``work`` once the client's earlier requests are answered."""
    fill = s.new_slot(name)

    async def run() -> None:
        await s.wait_idle()
        fill(await work())

    return run()


def _answer(s: RouteSession, name: str, raw: bytes) -> Awaitable[None]:
    s.reply(name, raw)
    return _ANSWERED


# --- the whole-database commands ------------------------------------------------------------
def _select(s: RouteSession, argv: list[bytes]) -> Awaitable[None]:
    db = _db_index(argv[1], s.settings.databases)
    if isinstance(db, bytes):
        return _answer(s, "select", db)
    s.set_db(db)
    return _answer(s, "select", _OK)


async def _call(s: RouteSession, slot: int, *args: bytes) -> bytes:
    return await _on_owner(s, slot, encode_command(*args), 1, True, partial(_direct, s))


async def _all_keys(s: RouteSession, db: int, pattern: bytes = b"*") -> list[bytes] | bytes:
    """Every key of database ``db`` matching ``pattern`` (KEYS on every master)."""
    out: list[bytes] = []
    for _, slot in masters(s):
        raw = await _call(s, slot, b"KEYS", _pattern(db, pattern) if db else pattern)
        if raw[:1] != b"*":
            return raw
        out.extend(n for n in (_name_of(k, db) for k in _names(array_elements(raw)))
                   if n is not None)
    return out


def _keys(s: RouteSession, argv: list[bytes]) -> Awaitable[None]:
    async def work() -> bytes:
        got = await _all_keys(s, s.db, argv[1])
        if isinstance(got, bytes):
            return got
        return b"*%d\r\n" % len(got) + b"".join(_bulk(k) for k in got)
    return _later(s, "keys", work)


def _dbsize(s: RouteSession, argv: list[bytes]) -> Awaitable[None]:
    async def work() -> bytes:
        got = await _all_keys(s, s.db)
        return got if isinstance(got, bytes) else b":%d\r\n" % len(got)
    return _later(s, "dbsize", work)


def _randomkey(s: RouteSession, argv: list[bytes]) -> Awaitable[None]:
    async def work() -> bytes:
        got = await _all_keys(s, s.db)
        if isinstance(got, bytes):
            return got
        if not got:
            return b"_\r\n" if s.proto == 3 else b"$-1\r\n"
        return _bulk(random.choice(got))
    return _later(s, "randomkey", work)


def _flushdb(s: RouteSession, argv: list[bytes]) -> Awaitable[None] | None:
    if len(argv) > 2 or (len(argv) == 2 and argv[1].lower() not in (b"async", b"sync")):
        return None  # the node's syntax error

    async def work() -> bytes:
        db = s.db
        got = await _all_keys(s, db)
        if isinstance(got, bytes):
            return got
        by_slot: dict[int, list[bytes]] = {}
        for key in got:
            by_slot.setdefault(key_slot(key), []).append(prefixed(key, db))
        written: list[DirectConnection | None] = []
        for slot, keys in by_slot.items():
            raw = await write_on_owner(s, slot, encode_command(b"UNLINK", *keys), 1, written)
            if raw[:1] == b"-":
                return raw
        return await after_writes(s, written, _OK)
    return _later(s, "flushdb", work)


def _scan(s: RouteSession, argv: list[bytes]) -> Awaitable[None] | None:
    try:
        cursor = int(argv[1])
    except ValueError:
        return None  # the node's error
    if cursor < 0:
        return None
    rest = list(argv[2:])
    pattern = b"*"
    for i in range(0, len(rest) - 1):
        if rest[i].lower() == b"match":
            pattern = rest[i + 1]
            del rest[i:i + 2]
            break
    db = s.db

    async def work() -> bytes:
        nodes = masters(s)
        at, node_cursor = cursor % _CURSOR_STRIDE, cursor // _CURSOR_STRIDE
        if at >= len(nodes):
            return b"*2\r\n$1\r\n0\r\n*0\r\n"
        match = _pattern(db, pattern) if db else pattern
        raw = await _call(s, nodes[at][1], b"SCAN", b"%d" % node_cursor, b"MATCH", match,
                          *rest)
        if raw[:1] != b"*":
            return raw
        head, names = array_elements(raw)
        nxt = int(_names([head])[0])
        if nxt == 0:
            at, nxt = at + 1, 0
            if at == len(nodes):
                at = 0
        out = nxt * _CURSOR_STRIDE + at
        got = [n for n in (_name_of(k, db) for k in _names(array_elements(names)))
               if n is not None]
        return (b"*2\r\n" + _bulk(b"%d" % out) + b"*%d\r\n" % len(got)
                + b"".join(_bulk(k) for k in got))
    return _later(s, "scan", work)


def _move(s: RouteSession, argv: list[bytes]) -> Awaitable[None]:
    to = _db_index(argv[2], s.settings.databases)
    if isinstance(to, bytes):
        return _answer(s, "move", to)
    if to == s.db:
        return _answer(s, "move", error_frame(SAME_OBJECTS))
    key, here = argv[1], s.db

    async def work() -> bytes:
        raw = await write_on_owner(s, key_slot(key), encode_command(
            b"RENAMENX", prefixed(key, here), prefixed(key, to)), 1)
        return b":0\r\n" if raw.startswith(b"-ERR no such key") else raw
    return _later(s, "move", work)


def _copy(s: RouteSession, argv: list[bytes]) -> Awaitable[None] | None:
    """COPY … DB d: the COPY of the two prefixed keys (keys in one slot: as is; in two: the
    ``gather`` route); without DB: None (routed as usual, keys prefixed)."""
    to: int | None = None
    rest: list[bytes] = []
    i = 3
    while i < len(argv):
        word = argv[i].lower()
        if word == b"db" and i + 1 < len(argv):
            try:
                to = int(argv[i + 1])
            except ValueError:
                return _answer(s, "copy", error_frame(errors.NOT_INTEGER))
            i += 2
            continue
        if word != b"replace":
            return None  # the node's syntax error
        rest.append(argv[i])
        i += 1
    if to is None:
        return None
    if not 0 <= to < s.settings.databases:
        return _answer(s, "copy", error_frame(DB_OUT_OF_RANGE))
    if to == s.db and argv[1] == argv[2]:
        return _answer(s, "copy", error_frame(SAME_OBJECTS))
    new = [argv[0], prefixed(argv[1], s.db), prefixed(argv[2], to), *rest]
    info = lookup(new)
    assert info is not None
    return ROUTES[info.route](s, new, info) or _ANSWERED


def _swapdb(s: RouteSession, argv: list[bytes]) -> Awaitable[None]:
    n = s.settings.databases
    a = _db_index(argv[1], n, INVALID_FIRST)
    if isinstance(a, bytes):
        return _answer(s, "swapdb", a)
    b = _db_index(argv[2], n, INVALID_SECOND)
    if isinstance(b, bytes):
        return _answer(s, "swapdb", b)

    async def work() -> bytes:
        if a == b:
            return _OK
        return await db_swap.swap(s, a, b, _all_keys)
    return _later(s, "swapdb", work)


# --- inside MULTI ----------------------------------------------------------------------------
# A transaction runs on one node, so the commands the proxy answers from every master are
# refused while queuing (EXEC then aborts). SELECT, MOVE and COPY … DB are rewritten into
# what a cluster node runs in the transaction, and ``at_exec`` gives their replies Redis'
# form; every command queued after a SELECT has the new database's keys.
def _refused_in_multi(s: RouteSession, argv: list[bytes], db: int) -> list[bytes] | None:
    name = argv[0].decode(errors="replace").lower()
    refuse(s, name, error_frame(errors.NOT_IN_MULTI.format(name=name)))
    return None


def _select_in_multi(s: RouteSession, argv: list[bytes], db: int) -> list[bytes] | None:
    """A valid SELECT becomes ``SELECT 0`` (which a cluster node answers +OK) and moves the
    transaction's later commands to its database; an invalid one stays as it is, for
    ``at_exec`` to answer Redis' error in its place."""
    to = _db_index(argv[1], s.settings.databases)
    if isinstance(to, bytes):
        return argv
    s.tx.db = to
    return [argv[0], b"0"]


def _move_in_multi(s: RouteSession, argv: list[bytes], db: int) -> list[bytes] | None:
    """MOVE becomes the RENAMENX of the two stored names (``at_exec`` answers its "no such
    key" as MOVE's 0); MOVE with a bad target stays as it is, for ``at_exec``'s error."""
    to = _db_index(argv[2], s.settings.databases)
    if isinstance(to, bytes) or to == db:
        return [argv[0], prefixed(argv[1], db), argv[2]]
    return [b"RENAMENX", prefixed(argv[1], db), prefixed(argv[1], to)]


def _copy_in_multi(s: RouteSession, argv: list[bytes], db: int) -> list[bytes] | None:
    """COPY … DB d becomes the COPY of the two stored names; a bad DB argument is refused."""
    rest = [a for a in argv[3:]]
    words = [a.lower() for a in rest]
    if b"db" not in words:
        return [argv[0], prefixed(argv[1], db), prefixed(argv[2], db), *rest]
    at = words.index(b"db")
    to = _db_index(rest[at + 1], s.settings.databases) if at + 1 < len(rest) else b""
    if isinstance(to, bytes) or (to == db and argv[1] == argv[2]):
        return _refused_in_multi(s, argv, db)
    del rest[at:at + 2]
    return [argv[0], prefixed(argv[1], db), prefixed(argv[2], to), *rest]


_IN_MULTI: dict[str, Callable[[RouteSession, list[bytes], int], list[bytes] | None]] = {
    "select": _select_in_multi,
    "move": _move_in_multi,
    "copy": _copy_in_multi,
    **dict.fromkeys(("swapdb", "flushdb", "dbsize", "keys", "scan", "randomkey"),
                    _refused_in_multi),
}


def _fix_for(argv: list[bytes], n_dbs: int) -> Callable[[bytes], bytes] | None:
    """How EXEC's element for a queued ``argv`` becomes Redis' (None: as the node gave it)."""
    name = argv[0].lower()
    if name == b"select" and argv[1] != b"0":
        err = _db_index(argv[1], n_dbs)
        return lambda raw: err if isinstance(err, bytes) else raw
    if name == b"move":
        err = _db_index(argv[2], n_dbs)
        return lambda raw: err if isinstance(err, bytes) else error_frame(SAME_OBJECTS)
    if name == b"renamenx" and len(argv) == 3:
        a, b = (_ANY_DB.match(k) for k in argv[1:])
        if (a or b) and argv[1][a.end() if a else 0:] == argv[2][b.end() if b else 0:]:
            return lambda raw: b":0\r\n" if raw.startswith(b"-ERR no such key") else raw
    if name.decode(errors="replace") in NAMED_REPLIES:
        for k in (argv[i] for i in key_positions(argv)):
            db = split_name(k)[0]
            if db:
                return lambda raw: strip(raw, db)
    return None


def at_exec(s: RouteSession, queued: list[list[bytes]], db: int | None,
            reply_slot: Callable[[bytes], None]) -> Callable[[bytes], None]:
    """EXEC's reply slot, for a transaction queued with databases on: the elements of the
    rewritten commands in Redis' form, and the last queued SELECT's database the client's
    once EXEC ran (a null or an error: nothing ran)."""
    fixes = {i: f for i, f in ((i, _fix_for(a, s.settings.databases))
                               for i, a in enumerate(queued)) if f is not None}
    if not fixes and db is None:
        return reply_slot

    def fill(raw: bytes) -> None:
        if raw[:1] != b"*" or raw[:2] == b"*-":
            reply_slot(raw)
            return
        if db is not None:
            s.set_db(db)
        if fixes:
            elems = array_elements(raw)
            raw = raw[:raw.index(b"\r\n") + 2] + b"".join(
                fixes[i](e) if i in fixes else e for i, e in enumerate(elems))
        reply_slot(raw)
    return fill


_HANDLERS: dict[str, Callable[[RouteSession, list[bytes]], Awaitable[None] | None]] = {
    "select": _select,
    "keys": _keys,
    "dbsize": _dbsize,
    "randomkey": _randomkey,
    "flushdb": _flushdb,
    "scan": _scan,
    "move": _move,
    "copy": _copy,
    "swapdb": _swapdb,
    "info": db_info.info,
}
