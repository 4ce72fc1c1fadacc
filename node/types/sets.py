"""Set commands: SADD SREM SMEMBERS SISMEMBER SMISMEMBER SCARD SPOP SRANDMEMBER SMOVE SINTER
SUNION SDIFF SINTERSTORE SUNIONSTORE SDIFFSTORE SINTERCARD SSCAN.

A set is an ``RSet`` (a ``set`` subclass). ``ht`` records whether Redis 7.0 would have left
the intset encoding (a member that is not a 64-bit integer in canonical form, or more than
``set-max-intset-entries`` members); the conversion is one-way, as in Redis. An intset
iterates in ascending integer order, so replies of intset-encoded sets (SMEMBERS, SSCAN,
whole-set SRANDMEMBER/SPOP) are sorted numerically and match Redis byte for byte; a
hashtable's order is unspecified in Redis too.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from itertools import islice
from typing import TYPE_CHECKING, Any

from mypy_extensions import mypyc_attr

from slotgate.node.commands.registry import command
from slotgate.node.commands.replies import EMPTY_ARRAY, ONE, ZERO
from slotgate.node.commands.util import LONG_MAX
from slotgate.node.core.errors import SYNTAX, WRONGTYPE, CommandError
from slotgate.node.core.keyspace import NOTIFY_GENERIC, NOTIFY_SET, is_strict_int, register_type
from slotgate.node.types.typeutil import (
    Match,
    bulks,
    check_picks,
    collection_scan,
    delete_emptied,
    parse_numkeys,
    parse_positive,
    parse_range,
    remove_members,
    scan_items,
    typed_lookups,
    xor_digest,
)

if TYPE_CHECKING:
    from slotgate.node.core.client import Client

TOO_MANY_KEYS = "ERR Number of keys can't be greater than number of args"
LIMIT_NEGATIVE = "ERR LIMIT can't be negative"

# set-max-intset-entries, refreshed from the config by every write
LIMITS = {"intset": 512}


@mypyc_attr(native_class=False)  # compiled: a subclass of a builtin stays a Python class
class RSet(set):  # type: ignore[type-arg]
    """A set value; ``ht`` is True once Redis would use the hashtable encoding."""

    __slots__ = ("ht",)

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.ht = False


def _max_intset(c: Client) -> int:
    n = LIMITS["intset"] = c.server.config.values["set-max-intset-entries"]
    return n


def _fix_encoding(s: RSet, added: Iterable[bytes], max_intset: int) -> None:
    """setTypeAdd's conversions after ``added`` joined ``s``."""
    if s.ht:
        return
    for m in added:
        if not is_strict_int(m):
            s.ht = True
            return
    if len(s) > max_intset:
        s.ht = True


def ordered(s: RSet) -> Iterable[bytes]:
    """Members in Redis' iteration order where it is defined (intset: ascending)."""
    return s if s.ht else sorted(s, key=int)


def _copy(s: RSet) -> RSet:
    n = RSet(s)
    n.ht = s.ht
    return n


def _digest(s: RSet) -> bytes:
    d = bytearray(20)
    for m in s:
        xor_digest(d, m)
    return bytes(d)


register_type(RSet, b"set", lambda s: b"hashtable" if s.ht else b"intset", _digest, _copy)


def new_set(members: Iterable[bytes], max_intset: int | None = None) -> RSet:
    """A fresh set encoded as Redis encodes a set built member by member from an intset."""
    s = RSet(members)
    _fix_encoding(s, s, LIMITS["intset"] if max_intset is None else max_intset)
    return s


def rdb_adapters() -> list[tuple[type, str, Callable[..., object], Callable[..., object]]]:
    """DUMP/RESTORE: a set travels as ``set[bytes]``."""
    return [(RSet, "set", set, new_set)]


_get, _get_read = typed_lookups(RSet)


def _set_reply(c: Client, members: Iterable[bytes], n: int) -> bytes:
    head = b"~%d\r\n" % n if c.resp == 3 else b"*%d\r\n" % n
    return head + b"".join([b"$%d\r\n%s\r\n" % (len(m), m) for m in members])


def _empty_set(c: Client) -> bytes:
    return b"~0\r\n" if c.resp == 3 else EMPTY_ARRAY


def _bulk(x: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(x), x)


# --- single-set commands --------------------------------------------------------------------


@command("sadd")
def sadd(c: Client, argv: list[bytes]) -> bytes:
    db = c.db
    key = argv[1]
    s = db.lookup(key)
    if s is None:
        s = RSet(argv[2:])
        _fix_encoding(s, s, _max_intset(c))
        db.set(key, s)
        added = len(s)
    elif type(s) is RSet:
        before = len(s)
        members = argv[2:]
        s.update(members)
        added = len(s) - before
        if added:
            if not s.ht:
                _fix_encoding(s, members, _max_intset(c))
            db.modified(key)
    else:
        raise CommandError(WRONGTYPE)
    if added:
        db.notify(NOTIFY_SET, b"sadd", key)
        c.ks.dirty += added
    return b":%d\r\n" % added


def _srem_one(s: RSet, member: bytes) -> bool:
    if member in s:
        s.discard(member)
        return True
    return False


@command("srem")
def srem(c: Client, argv: list[bytes]) -> bytes:
    return remove_members(c, argv, _get, _srem_one, NOTIFY_SET, b"srem")


@command("smembers")
def smembers(c: Client, argv: list[bytes]) -> bytes:
    s = _get_read(c.db, argv[1])
    if s is None:
        return _empty_set(c)
    return _set_reply(c, ordered(s), len(s))


@command("sismember")
def sismember(c: Client, argv: list[bytes]) -> bytes:
    s = _get_read(c.db, argv[1])
    return ONE if s is not None and argv[2] in s else ZERO


@command("smismember")
def smismember(c: Client, argv: list[bytes]) -> bytes:
    s = _get_read(c.db, argv[1])
    members = argv[2:]
    if s is None:
        return b"*%d\r\n" % len(members) + ZERO * len(members)
    return b"*%d\r\n" % len(members) + b"".join(ONE if m in s else ZERO for m in members)


@command("scard")
def scard(c: Client, argv: list[bytes]) -> bytes:
    s = _get_read(c.db, argv[1])
    return b":%d\r\n" % (len(s) if s is not None else 0)


def _random_member(s: RSet) -> bytes:
    n = len(s)
    return next(islice(iter(s), random.randrange(n), None))


@command("spop")
def spop(c: Client, argv: list[bytes]) -> bytes:
    db = c.db
    key = argv[1]
    if len(argv) == 2:
        s = _get(db, key)
        if s is None:
            return c.null_bulk
        # set.pop() takes an arbitrary member in O(1); small sets draw a uniform one.
        if len(s) <= 64:
            m = _random_member(s)
            s.discard(m)
        else:
            m = s.pop()
        db.notify(NOTIFY_SET, b"spop", key)
        c.propagate_as = [[b"SREM", key, m]]
        if not s:
            delete_emptied(db, key)
        else:
            db.modified(key)
        c.ks.dirty += 1
        return _bulk(m)
    if len(argv) > 3:
        raise CommandError(SYNTAX)
    count = parse_positive(argv[2])
    s = _get(db, key)
    if s is None or count == 0:
        return _empty_set(c)
    if count >= len(s):
        out = list(ordered(s))
        delete_emptied(db, key)
        db.notify(NOTIFY_SET, b"spop", key)
        c.propagate_as = [[b"DEL", key]]
    else:
        out = random.sample(list(s), count)
        s.difference_update(out)
        db.modified(key)
        db.notify(NOTIFY_SET, b"spop", key)
        c.propagate_as = [[b"SREM", key, *out]]
    c.ks.dirty += len(out)
    return _set_reply(c, out, len(out))


@command("srandmember")
def srandmember(c: Client, argv: list[bytes]) -> bytes:
    if len(argv) == 2:
        s = _get_read(c.db, argv[1])
        if s is None:
            return c.null_bulk
        return _bulk(_random_member(s))
    if len(argv) > 3:
        raise CommandError(SYNTAX)
    n = parse_range(argv[2], -LONG_MAX, LONG_MAX)
    s = _get_read(c.db, argv[1])
    if s is None or n == 0:
        return EMPTY_ARRAY
    if n < 0:
        check_picks(n)
        return bulks(random.choices(list(s), k=-n))
    if n >= len(s):
        return bulks(ordered(s))
    return bulks(random.sample(list(s), n))


@command("smove")
def smove(c: Client, argv: list[bytes]) -> bytes:
    db = c.db
    src, dst, m = argv[1], argv[2], argv[3]
    sv = db.lookup(src)
    dv = db.lookup(dst)
    if sv is None:
        return ZERO
    if type(sv) is not RSet or (dv is not None and type(dv) is not RSet):
        raise CommandError(WRONGTYPE)
    if sv is dv:
        return ONE if m in sv else ZERO
    if m not in sv:
        return ZERO
    sv.discard(m)
    db.notify(NOTIFY_SET, b"srem", src)
    if not sv:
        delete_emptied(db, src)
    else:
        db.modified(src)
    if dv is None:
        dv = new_set((m,), _max_intset(c))
        db.set(dst, dv)
        db.notify(NOTIFY_SET, b"sadd", dst)
    elif m not in dv:
        dv.add(m)
        _fix_encoding(dv, (m,), _max_intset(c))
        db.modified(dst)
        db.notify(NOTIFY_SET, b"sadd", dst)
    c.ks.dirty += 1
    return ONE


# --- multi-set commands ---------------------------------------------------------------------


def _store(c: Client, dst: bytes, result: set[bytes], event: bytes) -> bytes:
    db = c.db
    if result:
        db.set(dst, new_set(result, _max_intset(c)))
        db.notify(NOTIFY_SET, event, dst)
        c.ks.dirty += 1
    elif db.delete(dst):
        db.notify(NOTIFY_GENERIC, b"del", dst)
        c.ks.dirty += 1
    return b":%d\r\n" % len(result)


def _inter(c: Client, keys: list[bytes], write: bool) -> list[RSet] | None:
    """The sets of ``keys``, or None when one is missing (the result is empty); every key is
    type-checked first, as Redis 7.0 does."""
    db = c.db
    sets = []
    missing = False
    for k in keys:
        s = db.lookup(k) if write else db.lookup_read(k)
        if s is None:
            missing = True
            continue
        if type(s) is not RSet:
            raise CommandError(WRONGTYPE)
        sets.append(s)
    return None if missing else sets


def _intersect(sets: list[RSet]) -> list[bytes]:
    sets = sorted(sets, key=len)
    first, rest = sets[0], sets[1:]
    return [m for m in ordered(first) if all(m in o for o in rest)]


@command("sinter")
def sinter(c: Client, argv: list[bytes]) -> bytes:
    sets = _inter(c, argv[1:], False)
    if sets is None:
        return _empty_set(c)
    out = _intersect(sets)
    return _set_reply(c, out, len(out))


@command("sinterstore")
def sinterstore(c: Client, argv: list[bytes]) -> bytes:
    sets = _inter(c, argv[2:], True)
    return _store(c, argv[1], set(_intersect(sets)) if sets else set(), b"sinterstore")


@command("sintercard")
def sintercard(c: Client, argv: list[bytes]) -> bytes:
    numkeys = parse_numkeys(argv, 1)
    if numkeys > len(argv) - 2:
        raise CommandError(TOO_MANY_KEYS)
    limit = 0
    j = 2 + numkeys
    while j < len(argv):
        if argv[j].lower() == b"limit" and j + 1 < len(argv):
            limit = parse_positive(argv[j + 1], LIMIT_NEGATIVE)
            j += 2
        else:
            raise CommandError(SYNTAX)
    sets = _inter(c, argv[2 : 2 + numkeys], False)
    if sets is None:
        return ZERO
    sets.sort(key=len)
    first, rest = sets[0], sets[1:]
    n = 0
    for m in first:
        if all(m in o for o in rest):
            n += 1
            if limit and n >= limit:
                break
    return b":%d\r\n" % n


def _all_sets(c: Client, keys: list[bytes], write: bool) -> list[RSet | None]:
    db = c.db
    out: list[RSet | None] = []
    for k in keys:
        s = db.lookup(k) if write else db.lookup_read(k)
        if s is not None and type(s) is not RSet:
            raise CommandError(WRONGTYPE)
        out.append(s)
    return out


def _union(sets: list[RSet | None]) -> set[bytes]:
    out: set[bytes] = set()
    for s in sets:
        if s:
            out |= s
    return out


def _diff(sets: list[RSet | None]) -> set[bytes]:
    first = sets[0]
    if not first:
        return set()
    out = set(first)
    for s in sets[1:]:
        if s:
            out -= s
            if not out:
                break
    return out


def _result_reply(c: Client, result: set[bytes]) -> bytes:
    """A computed set's members in the order Redis' temporary set (intset first) iterates."""
    tmp = new_set(result)
    return _set_reply(c, ordered(tmp), len(tmp))


@command("sunion")
def sunion(c: Client, argv: list[bytes]) -> bytes:
    return _result_reply(c, _union(_all_sets(c, argv[1:], False)))


@command("sdiff")
def sdiff(c: Client, argv: list[bytes]) -> bytes:
    return _result_reply(c, _diff(_all_sets(c, argv[1:], False)))


@command("sunionstore")
def sunionstore(c: Client, argv: list[bytes]) -> bytes:
    return _store(c, argv[1], _union(_all_sets(c, argv[2:], True)), b"sunionstore")


@command("sdiffstore")
def sdiffstore(c: Client, argv: list[bytes]) -> bytes:
    return _store(c, argv[1], _diff(_all_sets(c, argv[2:], True)), b"sdiffstore")


# --- SSCAN ----------------------------------------------------------------------------------


def _sscan_page(s: RSet, cursor: int, count: int, match: Match | None
                ) -> tuple[int, list[bytes]]:
    nxt, page = scan_items(cursor, count, s.ht, lambda: list(ordered(s)))
    return nxt, [m for m in page if (match is None or match(m)) and m in s]


@command("sscan")
def sscan(c: Client, argv: list[bytes]) -> bytes:
    return collection_scan(c, argv, _get_read, _sscan_page)
