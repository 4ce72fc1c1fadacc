"""SORT and SORT_RO: Redis 7.0's sortCommandGeneric (``protocol/sort.py`` holds the parsing
and the sort; here the collection and the patterns are looked up in the keyspace, and STORE
writes its list)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from slotgate.node.commands.registry import command
from slotgate.node.core.errors import WRONGTYPE, CommandError
from slotgate.node.core.glob import held_glob_match
from slotgate.node.core.keyspace import NOTIFY_GENERIC, NOTIFY_LIST, TYPES
from slotgate.node.types.lists import RList
from slotgate.node.types.sets import ordered
from slotgate.protocol import sort as sortcore
from slotgate.protocol.commands import COMMANDS
from slotgate.protocol.resp import array_header, bulk, integer

if TYPE_CHECKING:
    from slotgate.node.core.client import Client
    from slotgate.node.core.keyspace import Database


def lookup_by_pattern(db: Database, pattern: bytes, subst: bytes) -> bytes | None:
    """lookupKeyByPattern: ``#`` is the element; ``pre*post`` a string key;
    ``pre*post->field`` a hash field."""
    target = sortcore.pattern_target(pattern, subst)
    if target is None:
        return None
    if target == sortcore.ELEMENT:
        return subst
    assert isinstance(target, sortcore.Target)
    v = db.lookup_read(target.key)
    if v is None:
        return None
    if target.field is not None:
        if TYPES[type(v)].name != b"hash":
            return None
        got = v.get(target.field)
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
    user = c.acl_user
    full = user is None or user.unrestricted or user.reads_every_key(
        COMMANDS[b"sort_ro" if readonly else b"sort"], argv, held_glob_match)
    args = sortcore.parse(argv, readonly, c.server.cluster_enabled, full)
    if isinstance(args, str):
        raise CommandError(args)
    db = c.db
    sortval = db.lookup_read(argv[1])
    kind = TYPES[type(sortval)].name if sortval is not None else b"list"
    if kind not in (b"list", b"set", b"zset"):
        raise CommandError(WRONGTYPE)
    elems = _elements(sortval) if sortval is not None else []
    args = sortcore.effective(args, kind)
    by_values = None
    if args.sortby is not None and not args.dontsort:
        by_values = [lookup_by_pattern(db, args.sortby, el) for el in elems]
    chosen = sortcore.order(args, kind, elems, by_values)
    if isinstance(chosen, str):
        raise CommandError(chosen)
    gets = args.gets
    store = args.store
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
