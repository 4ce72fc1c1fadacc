"""Pops that serve the first non-empty key or block on them: the scaffolding BLPOP BRPOP
BLMPOP LMPOP (lists.py) and BZPOPMIN BZPOPMAX BZMPOP ZMPOP (zsetops.py) share.

A type brings its typed lookup ``get(db, key) -> value | None`` (WRONGTYPE for a value of
another type) and its ``pop(c, db, key, value) -> reply``, which takes from a non-empty value,
deletes an emptied key, counts ``dirty``, sets ``c.propagate_as`` and encodes the reply. This
module owns the rest: the timeout argument, the MPOP arguments ``numkeys key [key ...] <where>
[COUNT n]`` with Redis' checks in Redis' order, the search for the first key that holds a
value, and parking the client on the keys (``c.block``) with a ``serve`` callback that pops
from the key a later write made ready.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, TypeVar

from slotgate.node.commands.util import LONG_MAX
from slotgate.node.core.errors import SYNTAX, TIMEOUT_NEGATIVE, TIMEOUT_NOT_FLOAT, CommandError
from slotgate.node.types.typeutil import COUNT_POSITIVE, parse_numkeys, parse_range

V = TypeVar("V")

if TYPE_CHECKING:
    from slotgate.node.core.client import Client
    from slotgate.node.core.keyspace import Database

    Get = Callable[[Database, bytes], V | None]  # a type's lookup: WRONGTYPE for another type
    Pop = Callable[[Client, Database, bytes, V], bytes]  # pop from a non-empty value: the reply


def parse_timeout_s(arg: bytes) -> float:
    """getTimeoutFromObjectOrReply in seconds: a long double, truncated to whole ms; 0 (also
    anything below 1 ms) blocks forever. Values whose ms do not fit a long long (inf, 1e20)
    wrap negative in C, so Redis calls them negative; so do we."""
    if not arg or arg[:1].isspace() or arg[-1:].isspace() or b"_" in arg:
        raise CommandError(TIMEOUT_NOT_FLOAT)
    try:
        x = float(arg)
    except ValueError:
        if not arg.lstrip(b"+-")[:2].lower() == b"0x":  # strtold also reads hex floats
            raise CommandError(TIMEOUT_NOT_FLOAT) from None
        try:
            x = float.fromhex(arg.decode("ascii"))
        except (ValueError, UnicodeDecodeError):
            raise CommandError(TIMEOUT_NOT_FLOAT) from None
    if math.isnan(x):
        raise CommandError(TIMEOUT_NOT_FLOAT)
    if math.isinf(x) or abs(x * 1000.0) >= 2.0**63:
        raise CommandError(TIMEOUT_NEGATIVE)
    ms = int(x * 1000.0)
    if ms < 0:
        raise CommandError(TIMEOUT_NEGATIVE)
    return ms / 1000.0


def pop_first(c: Client, keys: list[bytes], get: Get[V], pop: Pop[V]) -> bytes | None:
    """``pop`` the first of ``keys`` that holds a value, in order (``get`` answers WRONGTYPE
    for a key of another type on the way, as Redis does); None when every key is empty."""
    db = c.db
    for key in keys:
        v = get(db, key)
        if v is not None:
            return pop(c, db, key, v)
    return None


def pop_or_block(c: Client, keys: list[bytes], timeout_s: float, argv: list[bytes],
                 kind: type[V], get: Get[V], pop: Pop[V]) -> bytes:
    """A blocking pop: served at once like :func:`pop_first`, else the client blocks on the
    keys (each once, first-seen order) and is served by the first push of a ``kind`` value
    to one of them."""
    served = pop_first(c, keys, get, pop)
    if served is not None:
        return served

    def serve(bc: Client, sdb: Database, key: bytes) -> bytes | None:
        v = sdb.lookup(key)
        if type(v) is not kind:
            return None
        return pop(bc, sdb, key, v)

    return c.block(list(dict.fromkeys(keys)), timeout_s, serve, argv)


def block_pop(c: Client, argv: list[bytes], kind: type[V], get: Get[V], pop: Pop[V]) -> bytes:
    """``BLPOP key [key ...] timeout`` and its kin (BRPOP BZPOPMIN BZPOPMAX): the timeout is
    checked before any key is looked at."""
    timeout_s = parse_timeout_s(argv[-1])
    return pop_or_block(c, argv[1:-1], timeout_s, argv, kind, get, pop)


def mpop_args(argv: list[bytes], numkeys_idx: int, where: Mapping[bytes, bool]
              ) -> tuple[list[bytes], bool, int]:
    """``numkeys key [key ...] <where> [COUNT n]`` from ``argv[numkeys_idx]`` on -> (keys, the
    flag ``where`` maps the lower-cased <where> word to, count), with Redis' checks in its
    order; any other word, a missing <where> or a second COUNT is a syntax error."""
    numkeys = parse_numkeys(argv, numkeys_idx)
    where_idx = numkeys_idx + numkeys + 1
    if where_idx >= len(argv):
        raise CommandError(SYNTAX)
    flag = where.get(argv[where_idx].lower())
    if flag is None:
        raise CommandError(SYNTAX)
    count = -1
    j = where_idx + 1
    while j < len(argv):
        if count == -1 and argv[j].lower() == b"count" and j + 1 < len(argv):
            count = parse_range(argv[j + 1], 1, LONG_MAX, COUNT_POSITIVE)
            j += 2
        else:
            raise CommandError(SYNTAX)
    return argv[numkeys_idx + 1 : where_idx], flag, max(count, 1)


def mpop(c: Client, argv: list[bytes], where: Mapping[bytes, bool], get: Get[V],
         make_pop: Callable[[bool, int], Pop[V]]) -> bytes:
    """``LMPOP numkeys key [key ...] <where> [COUNT n]`` and ZMPOP: ``make_pop(flag, count)``
    pops from the first non-empty key; a null array when every key is empty."""
    keys, flag, count = mpop_args(argv, 1, where)
    served = pop_first(c, keys, get, make_pop(flag, count))
    return c.null_array if served is None else served


def block_mpop(c: Client, argv: list[bytes], where: Mapping[bytes, bool], kind: type[V],
               get: Get[V], make_pop: Callable[[bool, int], Pop[V]]) -> bytes:
    """``BLMPOP timeout numkeys key [key ...] <where> [COUNT n]`` and BZMPOP: the arguments
    after the timeout are checked first, then the timeout, as Redis does."""
    keys, flag, count = mpop_args(argv, 2, where)
    timeout_s = parse_timeout_s(argv[1])
    return pop_or_block(c, keys, timeout_s, argv, kind, get, make_pop(flag, count))
