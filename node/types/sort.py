"""SORT and SORT_RO, following Redis 7.0's sortCommandGeneric step by step (option parsing,
LIMIT clamping, BY/GET patterns with ``->field``, numeric parsing like strtod, STORE)."""

from __future__ import annotations

import math
import re
from functools import cmp_to_key
from typing import TYPE_CHECKING, Any

from slotgate.node.commands.registry import command
from slotgate.node.commands.util import parse_int
from slotgate.node.core.errors import SYNTAX, WRONGTYPE, CommandError
from slotgate.node.core.keyspace import NOTIFY_GENERIC, NOTIFY_LIST, TYPES
from slotgate.node.types.lists import RList
from slotgate.node.types.sets import ordered
from slotgate.protocol.resp import array_header, bulk, integer

if TYPE_CHECKING:
    from slotgate.node.core.client import Client
    from slotgate.node.core.keyspace import Database

_SCORE_ERR = "ERR One or more scores can't be converted into double"
_C_SPACE = b" \t\n\v\f\r"
_DEC = re.compile(rb"[+-]?(\d+\.?\d*([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?|inf(inity)?|nan)",
                  re.IGNORECASE)
_HEXF = re.compile(rb"[+-]?0[xX]([0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)([pP][+-]?\d+)?")


def strtod_score(raw: bytes) -> float | None:
    """The double strtod reads from the whole of ``raw`` (None: SORT's conversion error)."""
    if raw == b"":
        return 0.0  # strtod consumes nothing and stops at the terminating NUL: accepted
    body = raw.lstrip(_C_SPACE)
    if _HEXF.fullmatch(body):
        text = body.decode()
        if "p" not in text.lower():
            text += "p0"
        x = float.fromhex(text)
    elif _DEC.fullmatch(body):
        x = float(body)
    else:
        return None
    if math.isnan(x):
        return None
    low = body.lower().lstrip(b"+-")
    if math.isinf(x) and not low.startswith(b"inf"):
        return None  # overflow: ERANGE
    if x == 0.0 or abs(x) < 2.2250738585072014e-308:
        mantissa = low[2:].split(b"p")[0] if low.startswith(b"0x") else low.split(b"e")[0]
        if re.search(rb"[1-9a-f]" if low.startswith(b"0x") else rb"[1-9]", mantissa):
            return None  # underflow: ERANGE
    return x


def lookup_by_pattern(db: Database, pattern: bytes, subst: bytes) -> bytes | None:
    """lookupKeyByPattern: ``#`` is the element; ``pre*post`` a string key;
    ``pre*post->field`` a hash field."""
    if pattern == b"#":
        return subst
    star = pattern.find(b"*")
    if star == -1:
        return None
    arrow = pattern.find(b"->", star + 1)
    field = None
    end = len(pattern)
    if arrow != -1 and arrow + 2 < len(pattern):
        field = pattern[arrow + 2 :]
        end = arrow
    key = pattern[:star] + subst + pattern[star + 1 : end]
    v = db.lookup_read(key)
    if v is None:
        return None
    if field is not None:
        if TYPES[type(v)].name != b"hash":
            return None
        got = v.get(field)
        return got if isinstance(got, bytes) else None
    return v if type(v) is bytes else None


def _elements(v: Any) -> list[bytes]:
    name = TYPES[type(v)].name
    if name == b"list":
        return list(v)
    if name == b"set":
        return list(ordered(v))
    return [member for _, member in v.entries]  # zset, in score order


def _sort(c: Client, argv: list[bytes], readonly: bool) -> bytes:
    desc = alpha = dontsort = False
    limit_start, limit_count = 0, -1
    sortby: bytes | None = None
    store: bytes | None = None
    gets: list[bytes] = []
    cluster = c.server.cluster_enabled
    j = 2
    n = len(argv)
    while j < n:
        opt = argv[j].lower()
        left = n - j - 1
        if opt == b"asc":
            desc = False
        elif opt == b"desc":
            desc = True
        elif opt == b"alpha":
            alpha = True
        elif opt == b"limit" and left >= 2:
            limit_start = parse_int(argv[j + 1])
            limit_count = parse_int(argv[j + 2])
            j += 2
        elif opt == b"store" and left >= 1 and not readonly:
            store = argv[j + 1]
            j += 1
        elif opt == b"by" and left >= 1:
            sortby = argv[j + 1]
            if b"*" not in sortby:
                dontsort = True
            elif cluster:
                raise CommandError("ERR BY option of SORT denied in Cluster mode.")
            j += 1
        elif opt == b"get" and left >= 1:
            if cluster:
                raise CommandError("ERR GET option of SORT denied in Cluster mode.")
            gets.append(argv[j + 1])
            j += 1
        else:
            raise CommandError(SYNTAX)
        j += 1
    db = c.db
    sortval = db.lookup_read(argv[1])
    kind = TYPES[type(sortval)].name if sortval is not None else b"list"
    if kind not in (b"list", b"set", b"zset"):
        raise CommandError(WRONGTYPE)
    elems = _elements(sortval) if sortval is not None else []
    if dontsort and kind == b"set" and store is not None:
        dontsort, alpha, sortby = False, True, None  # deterministic output for replication
    vlen = len(elems)
    start = max(limit_start, 0)
    end = vlen - 1 if limit_count < 0 else start + limit_count - 1
    if start >= vlen:
        start, end = vlen - 1, vlen - 2
    if end >= vlen:
        end = vlen - 1
    if dontsort and kind in (b"list", b"zset"):
        if desc:
            elems = elems[::-1]
        vector = elems[start : end + 1] if end >= start else []
        end -= start
        start = 0
    else:
        vector = elems
    conversion_error = False
    if not dontsort:
        scores: list[float] = [0.0] * len(vector)
        cmpobjs: list[bytes | None] = [None] * len(vector)
        for i, el in enumerate(vector):
            if sortby is not None:
                byval = lookup_by_pattern(db, sortby, el)
                if byval is None:
                    continue
            else:
                byval = el
            if alpha:
                if sortby is not None:
                    cmpobjs[i] = byval
            else:
                x = strtod_score(byval)
                if x is None:
                    conversion_error = True
                else:
                    scores[i] = x
        idxs = list(range(len(vector)))

        def cmp(a: int, b: int) -> int:
            if not alpha:
                if scores[a] != scores[b]:
                    r = 1 if scores[a] > scores[b] else -1
                else:
                    r = (vector[a] > vector[b]) - (vector[a] < vector[b])
            elif sortby is not None:
                x, y = cmpobjs[a], cmpobjs[b]
                if x is None or y is None:
                    r = 0 if x is y else (-1 if x is None else 1)
                else:
                    r = (x > y) - (x < y)
            else:
                r = (vector[a] > vector[b]) - (vector[a] < vector[b])
            return -r if desc else r

        idxs.sort(key=cmp_to_key(cmp))
        vector = [vector[i] for i in idxs]
    if conversion_error:
        raise CommandError(_SCORE_ERR)
    chosen = vector[start : end + 1] if end >= start else []
    if store is None:
        if not gets:
            return array_header(len(chosen)) + b"".join(bulk(e) for e in chosen)
        parts = [array_header(len(chosen) * len(gets))]
        for el in chosen:
            for pat in gets:
                val = lookup_by_pattern(db, pat, el)
                parts.append(c.null_bulk if val is None else bulk(val))
        return b"".join(parts)
    out: list[bytes] = []
    for el in chosen:
        if not gets:
            out.append(el)
        else:
            for pat in gets:
                val = lookup_by_pattern(db, pat, el)
                out.append(b"" if val is None else val)
    if out:
        db.set(store, RList(out))
        db.notify(NOTIFY_LIST, b"sortstore", store)
        c.ks.dirty += len(out)
    elif db.delete(store):
        db.notify(NOTIFY_GENERIC, b"del", store)
        c.ks.dirty += 1
    return integer(len(out))


@command("sort")
def sort(c: Client, argv: list[bytes]) -> bytes:
    return _sort(c, argv, False)


@command("sort_ro")
def sort_ro(c: Client, argv: list[bytes]) -> bytes:
    return _sort(c, argv, True)
