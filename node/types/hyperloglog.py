"""HyperLogLog commands: PFADD PFCOUNT PFMERGE PFDEBUG PFSELFTEST (Redis' hyperloglog.c).

An HLL is a plain string (``bytes``) in Redis' own representation (see hll.py), so GET, SET,
DUMP/RESTORE, COPY and replication carry it unchanged. A command copies the value into a
``bytearray``, changes it, and stores ``bytes`` back, keeping the TTL (Redis changes it in
place). What Redis does around the change is kept: PFADD signals ``pfadd`` and counts one
change per grown register; PFMERGE always signals ``pfadd`` and counts one; PFCOUNT of one key
with a stale cache writes the new cache back, counts one change and so replicates itself
(without an event); PFDEBUG GETREG/TODENSE replicate a sparse -> dense conversion. Every
command that unshares the string (all but PFCOUNT of several keys) leaves it "raw" for OBJECT
ENCODING, as dbUnshareStringValue does. PFADD on a sparse value walks from SparseMarks it kept
for that very value object (``_MARKS``), not from the header; PFADD on a dense value changes a
bytearray it kept holding that value's bytes (``_MIRRORS``) and copies the new value out of it.
The bytes are the same.
"""

from __future__ import annotations

import math
import random
import struct
from typing import TYPE_CHECKING, Final, TypeVar

from slotgate.node.commands.registry import command
from slotgate.node.commands.replies import OK, ONE, ZERO
from slotgate.node.core.errors import INVALID_HLL, NOT_HLL, WRONGTYPE, CommandError
from slotgate.node.core.keyspace import NOTIFY_STRING
from slotgate.node.types import hll
from slotgate.protocol.resp import bulk, integer

if TYPE_CHECKING:
    from slotgate.node.core.client import Client

T = TypeVar("T")
_NO_KEY = "ERR The specified key does not exist"
_NOT_SPARSE = "ERR HLL encoding is not sparse"
_UNKNOWN_SUB = "ERR Unknown PFDEBUG subcommand '%s'"


def _checked(v: object) -> bytes:
    """isHLLObjectOrReply: the value as an HLL string, or Redis' WRONGTYPE errors."""
    if type(v) is not bytes:
        raise CommandError(WRONGTYPE)
    if (len(v) < hll.HDR_SIZE or v[:4] != b"HYLL" or v[4] > hll.SPARSE
            or (v[4] == hll.DENSE and len(v) != hll.DENSE_SIZE)):
        raise CommandError(NOT_HLL)
    return v


def _max_bytes(c: Client) -> int:
    return int(c.server.config.values["hll-sparse-max-bytes"])


# What PFADD keeps for the values it stored last, by the value's id: for a sparse value its
# SparseMarks (``_MARKS``), for a dense one a bytearray holding exactly its bytes (``_MIRRORS``:
# the next PFADD changes it in place and copies the new value out of it once). An entry holds
# the value itself, so an id can't be reused while it is here and `is` proves the entry
# describes the value a key holds now. A few entries: one per hot key is what pays.
_MARKS: Final[dict[int, tuple[bytes, hll.SparseMarks]]] = {}
_MIRRORS: Final[dict[int, tuple[bytes, bytearray]]] = {}
_KEPT_MAX: Final = 16


def _kept(cache: dict[int, tuple[bytes, T]], v: bytes) -> T | None:
    """What ``cache`` kept for ``v`` (taken out: whoever changes ``v`` keeps it again)."""
    entry = cache.pop(id(v), None)
    return entry[1] if entry is not None and entry[0] is v else None


def _keep(cache: dict[int, tuple[bytes, T]], v: bytes, x: T) -> None:
    if len(cache) >= _KEPT_MAX:
        del cache[next(iter(cache))]
    cache[id(v)] = (v, x)


@command("pfadd")
def pfadd(c: Client, argv: list[bytes]) -> bytes:
    db = c.db
    key = argv[1]
    old = db.lookup(key)
    if (type(old) is bytes and len(old) == hll.DENSE_SIZE and old[4] == hll.DENSE
            and old[:4] == b"HYLL"):  # a valid dense HLL: read, copied only when it grows
        grown, updated, mirror = hll.dense_add(old, argv[2:], _kept(_MIRRORS, old))
        if mirror is not None:
            _keep(_MIRRORS, grown, mirror)
        if updated:
            db.set(key, grown, keep_ttl=True)
            db.notify(NOTIFY_STRING, b"pfadd", key)
            c.ks.dirty += updated
        db.mark_raw(key)
        return ONE if updated else ZERO
    if old is None:
        buf = bytearray(hll.EMPTY_SPARSE)
        updated = 1
    else:
        buf = bytearray(_checked(old))
        updated = 0
    marks = None
    if buf[4] == hll.SPARSE:
        marks = (None if old is None else _kept(_MARKS, old)) or hll.SparseMarks()
    r = hll.add_many(buf, argv[2:], _max_bytes(c) if marks is not None else 0, marks,
                     hll.EMPTY_SPARSE if old is None else old)
    if r < 0:
        if old is not None and buf != old:
            # Redis has changed the string in place before it met the corruption: the
            # value stays changed, without a modification signal, event or dirty count.
            db.data[key] = bytes(buf)
            db.mark_raw(key)
        raise CommandError(INVALID_HLL)
    updated += r
    stored = old if type(old) is bytes else None
    if updated:
        buf[15] |= 0x80  # HLL_INVALIDATE_CACHE
        stored = bytes(buf)
        db.set(key, stored, keep_ttl=True)
        db.notify(NOTIFY_STRING, b"pfadd", key)
        c.ks.dirty += updated
    if marks is not None and stored is not None and buf[4] == hll.SPARSE:
        _keep(_MARKS, stored, marks)
    db.mark_raw(key)
    return ONE if updated else ZERO


def _merged(c: Client, keys: list[bytes]) -> tuple[int, bool]:
    """The registers of ``keys`` merged (a raw as an int) and whether one of them is dense;
    missing keys count as empty, the others are checked in order as Redis does."""
    db = c.db
    acc = 0
    dense = False
    for key in keys:
        v = db.lookup_read(key)
        if v is None:
            continue
        v = _checked(v)
        dense = dense or v[4] == hll.DENSE
        raw = hll.to_raw(v)
        if raw is None:
            raise CommandError(INVALID_HLL)
        acc = hll.raw_max(acc, int.from_bytes(raw, "little"))
    return acc, dense


def _card_reply(card: int) -> bytes:
    """addReplyLongLong of the uint64 cardinality: 2**63 and above print negative."""
    return integer(card - (1 << 64) if card >> 63 else card)


@command("pfcount")
def pfcount(c: Client, argv: list[bytes]) -> bytes:
    if len(argv) > 2:  # the union, computed without writing anything
        acc, _ = _merged(c, argv[1:])
        return _card_reply(hll.estimate(hll.histogram(acc.to_bytes(hll.REGISTERS, "little"))))
    db = c.db
    key = argv[1]
    v = db.lookup_read(key)
    if v is None:
        return ZERO
    v = _checked(v)
    db.mark_raw(key)
    if not v[15] & 0x80:  # a valid cached cardinality
        return integer(int.from_bytes(v[8:16], "little"))
    card = hll.count(v)
    if card is None:
        raise CommandError(INVALID_HLL)
    # The cache is written back: the string changed, so the command replicates (as 7.0).
    db.set(key, v[:8] + card.to_bytes(8, "little") + v[16:], keep_ttl=True)
    db.mark_raw(key)
    c.ks.dirty += 1
    c.propagate_as = [argv]
    return _card_reply(card)


@command("pfmerge")
def pfmerge(c: Client, argv: list[bytes]) -> bytes:
    acc, use_dense = _merged(c, argv[1:])  # the destination is one of the sources
    db = c.db
    key = argv[1]
    old = db.lookup(key)
    buf = bytearray(hll.EMPTY_SPARSE if old is None else old)
    if use_dense and not hll.sparse_to_dense(buf):
        raise CommandError(INVALID_HLL)
    raw = acc.to_bytes(hll.REGISTERS, "little")
    if buf[4] == hll.SPARSE:
        # hllSparseSet register by register, in order: the bytes depend on the sequence
        max_bytes = _max_bytes(c)
        hint: list[tuple[int, int]] = []
        for i, val in enumerate(raw):
            if val:
                hll.sparse_set(buf, i, val, max_bytes, hint)
                if buf[4] == hll.DENSE:  # promoted: the rest is every register's maximum
                    break
    if buf[4] == hll.DENSE:
        # every register := max(itself, merged) = merged, the destination being a source
        buf[hll.HDR_SIZE:] = hll.raw_to_dense(raw)
    buf[15] |= 0x80
    db.set(key, bytes(buf), keep_ttl=True)
    db.mark_raw(key)
    db.notify(NOTIFY_STRING, b"pfadd", key)  # Redis: "a mass-add of elements"
    c.ks.dirty += 1
    return OK


@command("pfdebug")
def pfdebug(c: Client, argv: list[bytes]) -> bytes:
    db = c.db
    key = argv[2]
    v = db.lookup(key)
    if v is None:
        raise CommandError(_NO_KEY)
    v = _checked(v)
    db.mark_raw(key)
    sub = argv[1].lower()
    if sub in (b"getreg", b"todense"):
        converted = False
        if v[4] == hll.SPARSE:
            buf = bytearray(v)
            if not hll.sparse_to_dense(buf):
                raise CommandError(INVALID_HLL)
            v = bytes(buf)
            # Redis changes the string in place: no modification signal, but a change counted
            # so the conversion replicates.
            db.data[key] = v
            db.mark_raw(key)
            c.ks.dirty += 1
            converted = True
        if sub == b"todense":
            return ONE if converted else ZERO
        raw = hll.dense_to_raw(v)
        return b"*%d\r\n" % hll.REGISTERS + b"".join(map(_INT_REPLY.__getitem__, raw))
    if sub == b"decode":
        if v[4] != hll.SPARSE:
            raise CommandError(_NOT_SPARSE)
        return bulk(hll.decode_sparse(v))
    if sub == b"encoding":
        return b"+dense\r\n" if v[4] == hll.DENSE else b"+sparse\r\n"
    raise CommandError(_UNKNOWN_SUB % argv[1].decode("utf-8", "replace"))


_INT_REPLY = [integer(i) for i in range(256)]

# PFSELFTEST's sizes. Redis runs 1000 register rounds and adds 10,000,000 elements, seconds of
# C; the same checks at these sizes keep the node responsive (docs/COMPATIBILITY.md).
_SELFTEST_REGISTER_ROUNDS = 4
_SELFTEST_MAX_CARD = 100_000


@command("pfselftest")
def pfselftest(c: Client, argv: list[bytes]) -> bytes:
    rng = random.Random()
    # Test 1: the 6-bit registers keep what is written and leave their neighbours alone.
    dense = bytearray(hll.DENSE_SIZE)
    for _ in range(_SELFTEST_REGISTER_ROUNDS):
        want = [rng.getrandbits(6) for _ in range(hll.REGISTERS)]
        for i, r in enumerate(want):
            hll.dense_set(dense, i, r)
        for i, r in enumerate(want):
            got = hll.dense_get(dense, i)
            if got != r:
                raise CommandError(f"TESTFAILED Register {i} should be {r} but is {got}")
        if list(hll.dense_to_raw(dense)) != want:
            raise CommandError("TESTFAILED unpacked registers differ")
    # Test 2: the estimate stays within bounds, dense and sparse agree.
    dense = bytearray(hll.DENSE_SIZE)
    dense[:5] = b"HYLL\x00"
    sparse = bytearray(hll.EMPTY_SPARSE)
    max_bytes = _max_bytes(c)
    relerr = 1.04 / math.sqrt(hll.REGISTERS)
    seed = rng.getrandbits(64)
    pack = struct.Struct("<Q").pack
    checkpoint = 1
    for j in range(1, _SELFTEST_MAX_CARD + 1):
        ele = pack(j ^ seed)
        hll.add(dense, ele, max_bytes)
        hll.add(sparse, ele, max_bytes)
        if j != checkpoint:
            continue
        if j < max_bytes / 2 and sparse[4] != hll.SPARSE:
            raise CommandError("TESTFAILED sparse encoding not used")
        card = hll.count(dense)
        if card != hll.count(sparse):
            raise CommandError("TESTFAILED dense/sparse disagree")
        maxerr = 1 if j == 10 else math.ceil(relerr * 6 * checkpoint)
        if abs(checkpoint - (card or 0)) > maxerr:
            raise CommandError(f"TESTFAILED Too big error. card:{checkpoint} "
                               f"abserr:{abs(checkpoint - (card or 0))}")
        checkpoint *= 10
    return OK
