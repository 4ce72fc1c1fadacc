"""List commands: LPUSH RPUSH LPUSHX RPUSHX LPOP RPOP LLEN LRANGE LINDEX LSET LINSERT LREM LTRIM
LPOS LMOVE RPOPLPUSH LMPOP and the blocking BLPOP BRPOP BLMOVE BRPOPLPUSH BLMPOP.

A list is an ``RList`` (a ``deque`` subclass): O(1) at both ends, O(n) from the middle, as
Redis' quicklist is in practice. Redis 7.0 always reports the ``quicklist`` encoding.

Argument checks run in Redis' order (some commands parse numbers before looking the key up,
others after), because the first failing check decides the reply. Blocking commands first
try to serve at once; otherwise they park the client with ``c.block`` and a ``serve``
callback that pops from the key that became ready (the pops through blocking.py, which the
sorted sets share). Served blocking pops replicate as their non-blocking form (BLPOP -> LPOP,
BLMOVE -> LMOVE), as Redis 7.0 rewrites them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from itertools import islice
from typing import TYPE_CHECKING

from mypy_extensions import mypyc_attr

from slotgate.node.commands.registry import command
from slotgate.node.commands.replies import EMPTY_ARRAY, OK, ZERO
from slotgate.node.commands.util import parse_int
from slotgate.node.core.errors import NO_SUCH_KEY, SYNTAX, WRONGTYPE, CommandError, wrong_args
from slotgate.node.core.keyspace import NOTIFY_LIST, register_type
from slotgate.node.types.blocking import block_mpop, block_pop, mpop, parse_timeout_s
from slotgate.node.types.typeutil import (
    bulks,
    delete_emptied,
    index_range,
    mix_digest,
    parse_positive,
    typed_lookups,
)

if TYPE_CHECKING:
    from slotgate.node.core.client import Client
    from slotgate.node.core.keyspace import Database

INDEX_OUT_OF_RANGE = "ERR index out of range"
RANK_ZERO = (
    "ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use "
    "negative to start from the end of the list"
)
COUNT_NEGATIVE = "ERR COUNT can't be negative"
MAXLEN_NEGATIVE = "ERR MAXLEN can't be negative"


@mypyc_attr(native_class=False)  # compiled: a subclass of a builtin stays a Python class
class RList(deque):  # type: ignore[type-arg]
    """A list value."""

    __slots__ = ()


def _digest(v: RList) -> bytes:
    d = bytearray(20)
    for x in v:
        mix_digest(d, x)
    return bytes(d)


register_type(RList, b"list", lambda v: b"quicklist", _digest, lambda v: RList(v))


def rdb_adapters() -> list[tuple[type, str, Callable[..., object], Callable[..., object]]]:
    """DUMP/RESTORE: a list travels as ``list[bytes]``."""
    return [(RList, "list", list, RList)]


_get, _get_read = typed_lookups(RList)


# --- push -----------------------------------------------------------------------------------


def _push(c: Client, argv: list[bytes], left: bool) -> bytes:
    """LPUSH (``left``) or RPUSH. An existing list in a db with no TTL to check, no WATCH to
    touch and no blocked client to serve takes the short path; everything else the general
    one (create, wrong type, expiry, WATCH, wake-ups). (Two module-level handlers calling
    this, not a closure per side: compiled, a closure is an object whose free variables are
    read through its environment on every call.)"""
    db = c.db
    key = argv[1]
    if not (db.expires or db.watched or db.blocking or db.invalidator):
        v = db.data.get(key)
        if type(v) is RList:
            db.touch(key)
            if len(argv) != 3:
                if left:
                    v.extendleft(argv[2:])
                else:
                    v.extend(argv[2:])
            elif left:
                v.appendleft(argv[2])
            else:
                v.append(argv[2])
            ks = c.ks
            ks.dirty += len(argv) - 2
            if ks.notify_flags:
                db.notify(NOTIFY_LIST, b"lpush" if left else b"rpush", key)
            return b":%d\r\n" % len(v)
    v = db.lookup(key)
    if v is None:
        v = RList()
        _extend(v, argv, left)
        db.set(key, v)
        return _counted(c, key, v, argv, left)
    if type(v) is not RList:
        raise CommandError(WRONGTYPE)
    return _append(c, key, v, argv, left)


def _extend(v: RList, argv: list[bytes], left: bool) -> None:
    if left:
        v.extendleft(argv[2:])
    else:
        v.extend(argv[2:])


def _append(c: Client, key: bytes, v: RList, argv: list[bytes], left: bool) -> bytes:
    """The elements of a push added to the existing list ``v``: WATCH touched, blocked
    clients served, counted."""
    _extend(v, argv, left)
    db = c.db
    db.modified(key)
    db.signal_ready(key)
    return _counted(c, key, v, argv, left)


def _counted(c: Client, key: bytes, v: RList, argv: list[bytes], left: bool) -> bytes:
    c.ks.dirty += len(argv) - 2
    c.db.notify(NOTIFY_LIST, b"lpush" if left else b"rpush", key)
    return b":%d\r\n" % len(v)


@command("lpush")
def lpush(c: Client, argv: list[bytes]) -> bytes:
    return _push(c, argv, True)


@command("rpush")
def rpush(c: Client, argv: list[bytes]) -> bytes:
    return _push(c, argv, False)


def _pushx(c: Client, argv: list[bytes], left: bool) -> bytes:
    v = _get(c.db, argv[1])
    if v is None:
        return ZERO
    return _append(c, argv[1], v, argv, left)


@command("lpushx")
def lpushx(c: Client, argv: list[bytes]) -> bytes:
    return _pushx(c, argv, True)


@command("rpushx")
def rpushx(c: Client, argv: list[bytes]) -> bytes:
    return _pushx(c, argv, False)


# --- pop ------------------------------------------------------------------------------------


def _pop_n(db: Database, key: bytes, v: RList, left: bool, count: int) -> list[bytes]:
    """Pop up to ``count`` elements (the list is non-empty); deletes an emptied key."""
    pop = v.popleft if left else v.pop
    out = [pop() for _ in range(min(count, len(v)))]
    db.notify(NOTIFY_LIST, b"lpop" if left else b"rpop", key)
    if not v:
        delete_emptied(db, key)
    else:
        db.modified(key)
    return out


def _pop(c: Client, argv: list[bytes], left: bool) -> bytes:
    if len(argv) > 3:
        raise CommandError(wrong_args(argv[0].decode(errors="replace").lower()))
    db = c.db
    key = argv[1]
    if len(argv) == 2:
        v = db.lookup(key)
        if v is None:
            return c.null_bulk
        if type(v) is not RList:
            raise CommandError(WRONGTYPE)
        x = v.popleft() if left else v.pop()
        c.ks.dirty += 1
        db.notify(NOTIFY_LIST, b"lpop" if left else b"rpop", key)
        if not v:
            delete_emptied(db, key)
        else:
            db.modified(key)
        return b"$%d\r\n%s\r\n" % (len(x), x)
    count = parse_positive(argv[2])
    v = db.lookup(key)
    if v is None:
        return c.null_array
    if type(v) is not RList:
        raise CommandError(WRONGTYPE)
    if count == 0:
        return EMPTY_ARRAY
    items = _pop_n(db, key, v, left, count)
    c.ks.dirty += len(items)
    return bulks(items)


@command("lpop")
def lpop(c: Client, argv: list[bytes]) -> bytes:
    return _pop(c, argv, True)


@command("rpop")
def rpop(c: Client, argv: list[bytes]) -> bytes:
    return _pop(c, argv, False)


# --- read -----------------------------------------------------------------------------------


@command("llen")
def llen(c: Client, argv: list[bytes]) -> bytes:
    v = _get_read(c.db, argv[1])
    return b":%d\r\n" % (len(v) if v is not None else 0)


@command("lrange")
def lrange(c: Client, argv: list[bytes]) -> bytes:
    start = parse_int(argv[2])
    end = parse_int(argv[3])
    v = _get_read(c.db, argv[1])
    if v is None:
        return EMPTY_ARRAY
    n = len(v)
    r = index_range(start, end, n)
    if r is None:
        return EMPTY_ARRAY
    start, end = r
    if start > n - 1 - end:  # nearer the tail: walk backwards
        items = list(islice(reversed(v), n - 1 - end, n - start))
        items.reverse()
    else:
        items = list(islice(v, start, end + 1))
    return bulks(items)


@command("lindex")
def lindex(c: Client, argv: list[bytes]) -> bytes:
    v = _get_read(c.db, argv[1])
    if v is None:
        return c.null_bulk
    i = parse_int(argv[2])
    n = len(v)
    if i < 0:
        i += n
    if not 0 <= i < n:
        return c.null_bulk
    x = v[i]
    return b"$%d\r\n%s\r\n" % (len(x), x)


@command("lpos")
def lpos(c: Client, argv: list[bytes]) -> bytes:
    rank, count, maxlen = 1, -1, 0
    j = 3
    n_args = len(argv)
    while j < n_args:
        opt = argv[j].lower()
        more = j + 1 < n_args
        if opt == b"rank" and more:
            j += 1
            rank = parse_int(argv[j])  # 7.0 takes LONG_MIN too (its negation wraps)
            if rank == 0:
                raise CommandError(RANK_ZERO)
        elif opt == b"count" and more:
            j += 1
            count = parse_positive(argv[j], COUNT_NEGATIVE)
        elif opt == b"maxlen" and more:
            j += 1
            maxlen = parse_positive(argv[j], MAXLEN_NEGATIVE)
        else:
            raise CommandError(SYNTAX)
        j += 1
    v = _get_read(c.db, argv[1])
    if v is None:
        return EMPTY_ARRAY if count != -1 else c.null_bulk
    ele = argv[2]
    n = len(v)
    it = iter(v) if rank > 0 else reversed(v)
    need = 1 if rank == -(2**63) else abs(rank)
    found: list[int] = []
    matches = 0
    index = 0
    for x in it:
        if maxlen and index >= maxlen:
            break
        if x == ele:
            matches += 1
            if matches >= need:
                found.append(index if rank > 0 else n - 1 - index)
                if count == -1 or (count and matches - need + 1 >= count):
                    break
        index += 1
    if count == -1:
        return b":%d\r\n" % found[0] if found else c.null_bulk
    return b"*%d\r\n" % len(found) + b"".join(b":%d\r\n" % i for i in found)


# --- in-place edits -------------------------------------------------------------------------


@command("lset")
def lset(c: Client, argv: list[bytes]) -> bytes:
    db = c.db
    key = argv[1]
    v = _get(db, key)
    if v is None:
        raise CommandError(NO_SUCH_KEY)
    i = parse_int(argv[2])
    n = len(v)
    if i < 0:
        i += n
    if not 0 <= i < n:
        raise CommandError(INDEX_OUT_OF_RANGE)
    v[i] = argv[3]
    db.modified(key)
    db.notify(NOTIFY_LIST, b"lset", key)
    c.ks.dirty += 1
    return OK


@command("linsert")
def linsert(c: Client, argv: list[bytes]) -> bytes:
    where = argv[2].lower()
    if where == b"after":
        after = True
    elif where == b"before":
        after = False
    else:
        raise CommandError(SYNTAX)
    db = c.db
    key = argv[1]
    v = _get(db, key)
    if v is None:
        return ZERO
    try:
        i = v.index(argv[3])
    except ValueError:
        return b":-1\r\n"
    v.insert(i + 1 if after else i, argv[4])
    db.modified(key)
    db.notify(NOTIFY_LIST, b"linsert", key)
    c.ks.dirty += 1
    return b":%d\r\n" % len(v)


@command("lrem")
def lrem(c: Client, argv: list[bytes]) -> bytes:
    count = parse_int(argv[2])
    db = c.db
    key = argv[1]
    v = _get(db, key)
    if v is None:
        return ZERO
    ele = argv[3]
    limit = abs(count) if count else len(v)
    removed = 0
    if count < 0:
        kept_rev: list[bytes] = []
        for x in reversed(v):
            if removed < limit and x == ele:
                removed += 1
            else:
                kept_rev.append(x)
        kept_rev.reverse()
        kept = kept_rev
    else:
        kept = []
        for x in v:
            if removed < limit and x == ele:
                removed += 1
            else:
                kept.append(x)
    if removed:
        v.clear()
        v.extend(kept)
        db.notify(NOTIFY_LIST, b"lrem", key)
        c.ks.dirty += removed
        if not v:
            delete_emptied(db, key)
        else:
            db.modified(key)
    return b":%d\r\n" % removed


@command("ltrim")
def ltrim(c: Client, argv: list[bytes]) -> bytes:
    start = parse_int(argv[2])
    end = parse_int(argv[3])
    db = c.db
    key = argv[1]
    v = _get(db, key)
    if v is None:
        return OK
    n = len(v)
    r = index_range(start, end, n)
    if r is None:
        ltrim_n, rtrim_n = n, 0
    else:
        ltrim_n, rtrim_n = r[0], n - r[1] - 1
    for _ in range(ltrim_n):
        v.popleft()
    for _ in range(min(rtrim_n, len(v))):
        v.pop()
    db.notify(NOTIFY_LIST, b"ltrim", key)
    if not v:
        delete_emptied(db, key)
    else:
        db.modified(key)
    c.ks.dirty += ltrim_n + rtrim_n
    return OK


# --- move -----------------------------------------------------------------------------------


_SIDES = {b"left": True, b"right": False}  # LMOVE's and LMPOP's words -> at the head


def _side(arg: bytes) -> bool:
    """LEFT -> True, RIGHT -> False; anything else is a syntax error."""
    left = _SIDES.get(arg.lower())
    if left is None:
        raise CommandError(SYNTAX)
    return left


def _push_dst(db: Database, dst: bytes, dv: RList | None, x: bytes, left: bool) -> None:
    """lmoveHandlePush: push ``x`` onto ``dst`` (created when missing)."""
    if dv is None:
        dv = RList((x,))
        db.set(dst, dv)
    else:
        if left:
            dv.appendleft(x)
        else:
            dv.append(x)
        db.modified(dst)
        db.signal_ready(dst)
    db.notify(NOTIFY_LIST, b"lpush" if left else b"rpush", dst)


def _move(c: Client, db: Database, src: bytes, sv: RList, dst: bytes, dv: RList | None,
          from_left: bool, to_left: bool) -> bytes:
    x = sv.popleft() if from_left else sv.pop()
    _push_dst(db, dst, dv, x, to_left)
    db.notify(NOTIFY_LIST, b"lpop" if from_left else b"rpop", src)
    if not sv:
        delete_emptied(db, src)
    else:
        db.modified(src)
    c.ks.dirty += 1
    return b"$%d\r\n%s\r\n" % (len(x), x)


def _lmove(c: Client, src: bytes, dst: bytes, from_left: bool, to_left: bool) -> bytes | None:
    """Serve an (B)LMOVE now; None when the source is empty or missing."""
    db = c.db
    sv = _get(db, src)
    if sv is None:
        return None
    dv = _get(db, dst)
    return _move(c, db, src, sv, dst, dv, from_left, to_left)


@command("lmove")
def lmove(c: Client, argv: list[bytes]) -> bytes:
    from_left = _side(argv[3])
    to_left = _side(argv[4])
    r = _lmove(c, argv[1], argv[2], from_left, to_left)
    return c.null_bulk if r is None else r


@command("rpoplpush")
def rpoplpush(c: Client, argv: list[bytes]) -> bytes:
    r = _lmove(c, argv[1], argv[2], False, True)
    return c.null_bulk if r is None else r


def _block_move(c: Client, argv: list[bytes], src: bytes, dst: bytes, from_left: bool,
                to_left: bool, timeout_s: float) -> bytes:
    side = {True: b"LEFT", False: b"RIGHT"}
    as_lmove = [b"LMOVE", src, dst, side[from_left], side[to_left]]
    r = _lmove(c, src, dst, from_left, to_left)
    if r is not None:
        c.propagate_as = [as_lmove]
        return r

    def serve(bc: Client, db: Database, key: bytes) -> bytes | None:
        sv = db.lookup(key)
        if type(sv) is not RList:
            return None
        dv = db.lookup(dst)
        if dv is not None and type(dv) is not RList:
            return b"-" + WRONGTYPE.encode() + b"\r\n"  # Redis unblocks it with the error
        bc.propagate_as = [as_lmove]
        return _move(bc, db, key, sv, dst, dv, from_left, to_left)

    if c.in_exec:  # no blocking in a transaction: a null bulk (a timeout gives a null array)
        return c.null_bulk
    return c.block([src], timeout_s, serve, argv)


@command("blmove")
def blmove(c: Client, argv: list[bytes]) -> bytes:
    from_left = _side(argv[3])
    to_left = _side(argv[4])
    timeout_s = parse_timeout_s(argv[5])
    return _block_move(c, argv, argv[1], argv[2], from_left, to_left, timeout_s)


@command("brpoplpush")
def brpoplpush(c: Client, argv: list[bytes]) -> bytes:
    timeout_s = parse_timeout_s(argv[3])
    return _block_move(c, argv, argv[1], argv[2], False, True, timeout_s)


# --- blocking pops --------------------------------------------------------------------------


def _key_reply(key: bytes, x: bytes) -> bytes:
    return b"*2\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(key), key, len(x), x)


def _bpop(c: Client, argv: list[bytes], left: bool) -> bytes:
    pop_name = b"LPOP" if left else b"RPOP"

    def pop(bc: Client, db: Database, key: bytes, v: RList) -> bytes:
        x = _pop_n(db, key, v, left, 1)[0]
        bc.ks.dirty += 1
        bc.propagate_as = [[pop_name, key]]
        return _key_reply(key, x)

    return block_pop(c, argv, RList, _get, pop)


@command("blpop")
def blpop(c: Client, argv: list[bytes]) -> bytes:
    return _bpop(c, argv, True)


@command("brpop")
def brpop(c: Client, argv: list[bytes]) -> bytes:
    return _bpop(c, argv, False)


def _mpop_reply(key: bytes, items: list[bytes]) -> bytes:
    return b"*2\r\n$%d\r\n%s\r\n%s" % (len(key), key, bulks(items))


def _mpop(left: bool, count: int) -> Callable[[Client, Database, bytes, RList], bytes]:
    def pop(c: Client, db: Database, key: bytes, v: RList) -> bytes:
        items = _pop_n(db, key, v, left, count)
        c.ks.dirty += len(items)
        c.propagate_as = [[b"LPOP" if left else b"RPOP", key, b"%d" % len(items)]]
        return _mpop_reply(key, items)

    return pop


@command("lmpop")
def lmpop(c: Client, argv: list[bytes]) -> bytes:
    return mpop(c, argv, _SIDES, _get, _mpop)


@command("blmpop")
def blmpop(c: Client, argv: list[bytes]) -> bytes:
    return block_mpop(c, argv, _SIDES, RList, _get, _mpop)
