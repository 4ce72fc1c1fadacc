"""The command table: one row per command, from a real redis-server 7.0's COMMAND INFO / DOCS.

``commands.json`` (written by ``tools/gen_commands.py``) holds the raw replies with their RESP
types; this module loads it once and offers:

- ``COMMANDS``: ``bytes`` lower-case top-level name -> ``CommandInfo``; ``ALL_COMMANDS`` adds
  subcommands under their full names (``b"config|get"``).
- ``lookup(argv)``: the ``CommandInfo`` Redis would run, container commands resolved to the
  subcommand. Like Redis' own lookup: a container alone (``[b"CONFIG"]``) gives the container
  (whose arity check then fails), an unknown subcommand gives ``None`` (Redis answers
  ``unknown_command_error(argv)``).
- ``key_positions(argv)`` / ``get_keys(argv)``: the keys ``COMMAND GETKEYS`` reports, in its
  order, movable keys included (key-specs first, Redis' per-command fallbacks when a spec is
  incomplete or cannot be read). No arity check: with too few arguments the positions that
  exist are returned. ``getkeys_command(argv)`` is the checked form that raises
  ``GetKeysError`` with the exact text ``COMMAND GETKEYS`` answers; ``getkeysandflags_command``
  adds each key's flags as ``COMMAND GETKEYSANDFLAGS`` prints them.
- ``arity_ok``, ``arity_error``, ``unknown_command_error``: Redis' exact checks and texts.
- ``command_info_reply``, ``command_docs_reply``, ``command_count``, ``command_list``: the
  bytes of ``COMMAND [INFO]``, ``COMMAND DOCS``, ``COMMAND COUNT``, ``COMMAND LIST`` in RESP2/3.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slotgate.protocol.errors import wrong_args
from slotgate.protocol.overrides import route_for
from slotgate.protocol.resp import string2ll

DATA_PATH = Path(__file__).with_name("commands.json")

KeyFn = Callable[[Sequence[bytes]], list[int]]


class GetKeysError(Exception):
    """``COMMAND GETKEYS`` would answer an error; ``str(e)`` is the text without ``-``."""


@dataclass(frozen=True, slots=True)
class KeySpec:
    """One parsed key-spec. ``begin`` is ``index`` / ``keyword`` / ``unknown``; ``find`` is
    ``range`` / ``keynum`` / ``unknown``. Unused numeric fields are 0."""

    flags: frozenset[str]
    begin: str
    index: int = 0
    keyword: bytes = b""
    startfrom: int = 0
    find: str = "unknown"
    lastkey: int = 0
    keystep: int = 0
    limit: int = 0
    keynumidx: int = 0
    firstkey: int = 0

    @property
    def not_key(self) -> bool:
        return "not_key" in self.flags


@dataclass(frozen=True, slots=True, eq=False)
class CommandInfo:
    """One command's row. ``flags``, ``tips``, ``acl_categories`` (``@read``...) as Redis
    prints them; ``group`` from COMMAND DOCS; ``subcommands`` keyed by the part after ``|``;
    ``route`` / ``merge`` / ``reason`` from ``protocol.overrides``: how the proxy handles it
    (a ``split`` row's keys are ``first_key`` and every ``step``-th argument after it)."""

    name: str
    arity: int
    flags: frozenset[str]
    first_key: int
    last_key: int
    step: int
    key_specs: tuple[KeySpec, ...]
    tips: tuple[str, ...]
    acl_categories: tuple[str, ...]
    group: str
    subcommands: dict[str, CommandInfo]
    route: str
    merge: str | None
    has_keys: bool  # COMMAND GETKEYS does not answer "The command has no key arguments"
    container: str | None = None  # "config" for "config|get"
    reason: str | None = None  # why an "unsupported" row is refused
    _keys: KeyFn = field(repr=False, default=lambda argv: [])
    _keys_all: KeyFn = field(repr=False, default=lambda argv: [])

    @property
    def movable(self) -> bool:
        return "movablekeys" in self.flags


# --------------------------------------------------------------------------- key finding
# C atoi: leading whitespace, optional sign, digits up to the first non-digit; 0 if none.
def _atoi(raw: bytes) -> int:
    s = raw.lstrip(b" \t\n\v\f\r")
    sign = 1
    if s[:1] in (b"+", b"-"):
        sign = -1 if s[:1] == b"-" else 1
        s = s[1:]
    n = 0
    for ch in s:
        if not 48 <= ch <= 57:
            break
        n = n * 10 + ch - 48
    return max(-(1 << 31), min(sign * n, (1 << 31) - 1))


_SpecFn = Callable[[Sequence[bytes], int], "range | None"]
_NO_KEYS = range(0)
_INT32 = 1 << 32


def _numkeys(raw: bytes) -> int | None:
    """A keynum argument as Redis reads it: string2ll, then cast to a C int."""
    if raw.isdigit() and raw[0] != 48 and len(raw) < 10:  # the common case
        return int(raw)
    value = string2ll(raw)
    if value is None or value < 0:
        return None
    return (value + (1 << 31)) % _INT32 - (1 << 31)


def _compile_begin(spec: KeySpec) -> Callable[[Sequence[bytes], int], int]:
    """begin_search: the first key's index, 0 when the keyword is absent."""
    if spec.begin == "index":
        index = spec.index
        return lambda argv, argc: index
    keyword, startfrom = spec.keyword, spec.startfrom

    def search(argv: Sequence[bytes], argc: int) -> int:
        if startfrom > 0:
            start, end = startfrom, argc - 1
        else:
            start, end = argc + startfrom, 1
        delta = 1 if start <= end else -1
        i = start
        while i != end:  # Redis stops before end_index
            if i >= argc or i < 1:
                break
            if argv[i].lower() == keyword:
                return i + 1
            i += delta
        return 0

    return search


def _compile_spec(spec: KeySpec) -> _SpecFn:
    """One key-spec as a function: its positions, or None when Redis deems it unusable
    (unknown or incomplete spec, bad numkeys, a range outside argv)."""
    if spec.begin not in ("index", "keyword") or spec.find not in ("range", "keynum"):
        return lambda argv, argc: None
    begin = _compile_begin(spec)
    incomplete = "incomplete" in spec.flags
    lastkey, keystep, limit = spec.lastkey, spec.keystep, spec.limit
    keynumidx, firstkey = spec.keynumidx, spec.firstkey
    is_range = spec.find == "range"

    def positions(argv: Sequence[bytes], argc: int) -> range | None:
        first = begin(argv, argc)
        if not first:
            return _NO_KEYS  # keyword not found: this spec has no keys
        if is_range:
            if lastkey >= 0:
                last = first + lastkey
            elif not limit:
                last = argc + lastkey
            else:
                last = first + ((argc - first) // limit + lastkey)
        else:
            if first + keynumidx >= argc:
                return None
            numkeys = _numkeys(argv[first + keynumidx])
            if numkeys is None:
                return None
            first += firstkey
            last = first + numkeys - 1
        if incomplete:
            return None
        # Out of bounds means a syntax error: Redis drops the specs' answer (numkeys 0 too).
        if last >= argc or last < first or first >= argc:
            return None
        return range(first, last + 1, keystep)

    return positions


def _generic(store: int, count_at: int, first: int) -> KeyFn:
    """Redis' genericGetKeys: numkeys by atoi; the store key (if any) comes last."""

    def keys(argv: Sequence[bytes]) -> list[int]:
        argc = len(argv)
        if count_at >= argc:
            return []
        num = _atoi(argv[count_at])
        if num < 1 or num > argc - first:
            return []
        out = list(range(first, first + num))
        if store:
            out.append(store)
        return out

    return keys


def _sort_keys(argv: Sequence[bytes]) -> list[int]:
    """Redis' sortGetKeys: the sorted key, plus the last STORE target."""
    out = [1]
    store = 0
    i = 2
    argc = len(argv)
    while i < argc:
        arg = argv[i].lower()
        if arg == b"limit":
            i += 2
        elif arg == b"store" and i + 1 < argc:
            store = i + 1
        elif arg in (b"get", b"by"):
            i += 1
        i += 1
    return out + [store] if store else out


def _migrate_keys(argv: Sequence[bytes]) -> list[int]:
    """Redis' migrateGetKeys: argv[3], or everything after KEYS when argv[3] is empty."""
    argc = len(argv)
    first, num = 3, 1
    i = 6
    while i < argc:
        arg = argv[i].lower()
        if arg == b"auth":
            i += 1
        elif arg == b"auth2":
            i += 2
        elif arg == b"keys":
            if argv[3]:
                return []
            first, num = i + 1, argc - i - 1
            break
        i += 1
    return [p for p in range(first, first + num) if p < argc]


def _first_key(argv: Sequence[bytes]) -> list[int]:
    return [1] if len(argv) > 1 else []


# Commands with a native key-finding function in Redis 7.0, used when the key-specs fail
# (or, for variable_flags specs, always; those return the same positions).
_NATIVE: dict[str, KeyFn] = {
    "sort": _sort_keys,
    "sort_ro": _first_key,
    "migrate": _migrate_keys,
    "set": _first_key,
    "bitfield": _first_key,
    "eval": _generic(0, 2, 3),
    "evalsha": _generic(0, 2, 3),
    "eval_ro": _generic(0, 2, 3),
    "evalsha_ro": _generic(0, 2, 3),
    "fcall": _generic(0, 2, 3),
    "fcall_ro": _generic(0, 2, 3),
    "zunionstore": _generic(1, 2, 3),
    "zinterstore": _generic(1, 2, 3),
    "zdiffstore": _generic(1, 2, 3),
    "zunion": _generic(0, 1, 2),
    "zinter": _generic(0, 1, 2),
    "zdiff": _generic(0, 1, 2),
    "zintercard": _generic(0, 1, 2),
    "sintercard": _generic(0, 1, 2),
    "lmpop": _generic(0, 1, 2),
    "zmpop": _generic(0, 1, 2),
    "blmpop": _generic(0, 2, 3),
    "bzmpop": _generic(0, 2, 3),
}


def _fixed_fn(specs: Sequence[KeySpec]) -> KeyFn | None:
    """Fast paths for plain index/range specs; None when the specs need walking."""
    if any(s.begin != "index" or s.find != "range" or s.limit or s.flags & _SLOW_FLAGS
           for s in specs):
        return None
    if not specs:
        return lambda argv: []
    if all(s.lastkey >= 0 for s in specs):
        fixed = tuple(p for s in specs for p in range(s.index, s.index + s.lastkey + 1, s.keystep))
        top = max(fixed)
        if fixed == (1,):
            return _first_key
        return lambda argv: list(fixed) if len(argv) > top else [p for p in fixed if p < len(argv)]
    if len(specs) == 1:
        first, last, step = specs[0].index, specs[0].lastkey, specs[0].keystep
        by_argc: dict[int, tuple[int, ...]] = {}  # list(tuple) is faster than list(range)

        def ranged(argv: Sequence[bytes]) -> list[int]:
            argc = len(argv)
            hit = by_argc.get(argc)
            if hit is None:
                hit = tuple(range(first, argc + last + 1, step))
                if argc <= _RANGE_CACHE_MAX_ARGC:
                    by_argc[argc] = hit
            return list(hit)

        return ranged
    return None


_RANGE_CACHE_MAX_ARGC = 64


_SLOW_FLAGS = frozenset({"not_key", "incomplete", "variable_flags"})


def _make_keyfn(name: str, specs: tuple[KeySpec, ...], include_not_key: bool) -> KeyFn:
    usable = specs if include_not_key else tuple(s for s in specs if not s.not_key)
    fast = _fixed_fn(usable)
    if fast is not None:
        return fast
    native = _NATIVE.get(name)
    if any("variable_flags" in s.flags for s in usable) and native is not None:
        return native
    fallback = native if native is not None else (lambda argv: [])
    fns = tuple(_compile_spec(s) for s in usable)
    if len(fns) == 1:
        only = fns[0]

        def one(argv: Sequence[bytes]) -> list[int]:
            found = only(argv, len(argv))
            return list(found) if found is not None else fallback(argv)

        return one

    def walk(argv: Sequence[bytes]) -> list[int]:
        argc = len(argv)
        out: list[int] = []
        for fn in fns:
            found = fn(argv, argc)
            if found is None:
                return fallback(argv)
            out.extend(found)
        return out

    return walk


# --------------------------------------------------------------------------- loading
def _text(v: str) -> str:
    return v[1:]


def _items(v: Any) -> list[Any]:
    return v["~"] if isinstance(v, dict) else v


def _parse_spec(raw: dict[str, Any]) -> KeySpec:
    bs, fk = raw["begin_search"], raw["find_keys"]
    bspec, fspec = bs["spec"], fk["spec"]
    return KeySpec(
        flags=frozenset(_text(f).lower() for f in _items(raw["flags"])),
        begin=_text(bs["type"]),
        index=bspec.get("index", 0),
        keyword=_text(bspec["keyword"]).lower().encode() if "keyword" in bspec else b"",
        startfrom=bspec.get("startfrom", 0),
        find=_text(fk["type"]),
        lastkey=fspec.get("lastkey", 0),
        keystep=fspec.get("keystep", 0),
        limit=fspec.get("limit", 0),
        keynumidx=fspec.get("keynumidx", 0),
        firstkey=fspec.get("firstkey", 0),
    )


def _build(entry: list[Any], docs: dict[str, Any], container: str | None) -> CommandInfo:
    name = _text(entry[0])
    flags = frozenset(_text(f) for f in _items(entry[2]))
    specs = tuple(_parse_spec(s) for s in _items(entry[8]))
    tips = tuple(_text(t) for t in _items(entry[7]))
    doc = docs.get(name, {})
    sub_docs = doc.get("subcommands", {})
    subs = {}
    for sub_entry in _items(entry[9]):
        sub = _build(sub_entry, sub_docs, name)
        subs[sub.name.partition("|")[2]] = sub
    has_keys = name in _NATIVE or any(not s.not_key for s in specs)
    row = route_for(name, flags, tips, has_keys)
    return CommandInfo(
        name=name, arity=entry[1], flags=flags, first_key=entry[3], last_key=entry[4],
        step=entry[5], key_specs=specs, tips=tips,
        acl_categories=tuple(_text(c) for c in _items(entry[6])),
        group=_text(doc["group"]) if "group" in doc else "", subcommands=subs,
        route=row.route, merge=row.merge, has_keys=has_keys, container=container,
        reason=row.reason,
        _keys=_make_keyfn(name, specs, False), _keys_all=_make_keyfn(name, specs, True),
    )


def _load() -> tuple[dict[str, Any], dict[bytes, CommandInfo], dict[bytes, CommandInfo]]:
    raw = json.loads(DATA_PATH.read_text(encoding="utf-8"))
    top: dict[bytes, CommandInfo] = {}
    every: dict[bytes, CommandInfo] = {}
    for name, entry in raw["info"].items():
        info = _build(entry, raw["docs"], None)
        top[name.encode()] = info
        every[name.encode()] = info
        for sub in info.subcommands.values():
            every[sub.name.encode()] = sub
    return raw, top, every


_RAW, COMMANDS, ALL_COMMANDS = _load()
REDIS_VERSION: str = _RAW["redis_version"]
_SUBS: dict[bytes, dict[bytes, CommandInfo]] = {
    name: {s.encode(): sub for s, sub in info.subcommands.items()}
    for name, info in COMMANDS.items() if info.subcommands
}
# Hot-path indexes: plain (non-container) commands under their lower- and upper-case names,
# so the usual spellings skip bytes.lower().
_PLAIN: dict[bytes, CommandInfo] = {}
_PLAIN_KEYS: dict[bytes, KeyFn] = {}
for _name, _info in COMMANDS.items():
    if not _info.subcommands:
        for _spelling in (_name, _name.upper()):
            _PLAIN[_spelling] = _info
            _PLAIN_KEYS[_spelling] = _info._keys


# --------------------------------------------------------------------------- public API
def lookup(argv: Sequence[bytes]) -> CommandInfo | None:
    """The command Redis would run for ``argv`` (case-insensitive), or None if unknown.

    A container with a subcommand resolves to the subcommand; an unknown subcommand is None
    (as in Redis), a container alone is the container itself.
    """
    if not argv:
        return None
    info = _PLAIN.get(argv[0])
    if info is not None:
        return info
    name = argv[0].lower()
    info = COMMANDS.get(name)
    if info is None or len(argv) == 1 or not info.subcommands:
        return info
    return _SUBS[name].get(argv[1].lower())


def lookup_name(name: bytes | str) -> CommandInfo | None:
    """By full name, as COMMAND INFO takes it: ``get``, ``CONFIG|GET``."""
    key = name.encode() if isinstance(name, str) else name
    return ALL_COMMANDS.get(key.lower())


def key_positions(argv: Sequence[bytes], include_not_key: bool = False) -> list[int]:
    """Indexes into ``argv`` of its keys, as COMMAND GETKEYS reports them ([] if unknown).

    ``include_not_key`` adds arguments that key-specs mark ``not_key`` (the shard channel of
    SPUBLISH / SSUBSCRIBE / SUNSUBSCRIBE), which route by slot but are not keys.
    """
    if not include_not_key and argv:
        fn = _PLAIN_KEYS.get(argv[0])
        if fn is not None:
            return fn(argv)
    info = lookup(argv)
    if info is None:
        return []
    return info._keys_all(argv) if include_not_key else info._keys(argv)


def key_finder(info: CommandInfo, include_not_key: bool = False) -> KeyFn:
    """``info``'s own key finder: for an argv that ``lookup`` resolves to ``info``,
    ``key_finder(info, x)(argv) == key_positions(argv, x)``. For callers that already hold
    the row (one table lookup per request instead of two)."""
    return info._keys_all if include_not_key else info._keys


def get_keys(argv: Sequence[bytes], include_not_key: bool = False) -> list[bytes]:
    return [argv[i] for i in key_positions(argv, include_not_key)]


def arity_ok(info: CommandInfo, argc: int) -> bool:
    """Redis' arity rule: exactly ``arity`` arguments, or at least ``-arity`` when negative."""
    arity = info.arity
    return argc == arity if arity > 0 else argc >= -arity


def arity_error(info: CommandInfo) -> str:
    return wrong_args(info.name)


def _c_arg(raw: bytes, limit: int) -> bytes:
    return raw.split(b"\0", 1)[0][:limit]


def unknown_command_error(argv: Sequence[bytes], removed: bool = False) -> bytes:
    """Redis' text for a command ``lookup`` returned None for (without the leading ``-``);
    ``removed``: the name is not in the server's table at all (``rename-command``)."""
    container = COMMANDS.get(argv[0].lower()) if argv and not removed else None
    if container is not None and container.subcommands and len(argv) > 1:
        text = b"ERR unknown subcommand '%s'. Try %s HELP." % (
            _c_arg(argv[1], 128), _c_arg(argv[0], 1 << 30).upper())
    else:
        args = b""
        for arg in argv[1:]:
            if len(args) >= 128:
                break
            args += b"'" + _c_arg(arg, 128 - len(args)) + b"' "
        text = b"ERR unknown command '%s', with args beginning with: %s" % (
            _c_arg(argv[0], 128) if argv else b"", args)
    return text.replace(b"\r", b" ").replace(b"\n", b" ")


def getkeys_command(argv: Sequence[bytes]) -> list[int]:
    """``COMMAND GETKEYS <argv>``: key positions, or GetKeysError with Redis' exact text."""
    info = _checked_lookup(argv, b"command|getkeys")
    positions = info._keys(argv)
    if not positions and "no_mandatory_keys" not in info.flags:
        raise GetKeysError("ERR Invalid arguments specified for command")
    return positions


# Key-spec flags in the order COMMAND GETKEYSANDFLAGS / COMMAND INFO print them.
KEY_FLAG_ORDER: tuple[tuple[str, str], ...] = (
    ("ro", "RO"), ("rw", "RW"), ("ow", "OW"), ("rm", "RM"), ("access", "access"),
    ("update", "update"), ("insert", "insert"), ("delete", "delete"), ("not_key", "not_key"),
    ("incomplete", "incomplete"), ("variable_flags", "variable_flags"),
)
_RO_ACCESS = ("RO", "access")
_OW_UPDATE = ("OW", "update")
_RW_ACCESS_UPDATE = ("RW", "access", "update")

KeyFlags = tuple[str, ...]


def _shown_flags(flags: frozenset[str]) -> KeyFlags:
    return tuple(shown for name, shown in KEY_FLAG_ORDER if name in flags)


def _set_flags(argv: Sequence[bytes]) -> list[KeyFlags]:
    """Redis' setGetKeys: RW access update with a GET option, else OW update."""
    has_get = any(a.lower() == b"get" for a in argv[3:])
    return [_RW_ACCESS_UPDATE if has_get else _OW_UPDATE]


def _bitfield_flags(argv: Sequence[bytes]) -> list[KeyFlags]:
    """Redis' bitfieldGetKeys: read-only unless a SET / INCRBY (or a syntax error) shows up."""
    i, argc = 2, len(argv)
    while i < argc:
        arg, remaining = argv[i].lower(), argc - i - 1
        if arg == b"get" and remaining >= 2:
            i += 2
        elif arg == b"overflow" and remaining >= 1:
            i += 1
        else:
            return [_RW_ACCESS_UPDATE]
        i += 1
    return [_RO_ACCESS]


# Flags the native key finders give (Redis' genericGetKeys gives none).
_NATIVE_FLAGS: dict[str, Callable[[Sequence[bytes]], list[KeyFlags]]] = {
    "set": _set_flags,
    "bitfield": _bitfield_flags,
    "sort": lambda argv: [_RO_ACCESS, _OW_UPDATE],
    "sort_ro": lambda argv: [_RO_ACCESS],
    "migrate": lambda argv: [("RW", "access", "delete")] * len(argv),
}


def _keys_and_flags(info: CommandInfo, argv: Sequence[bytes]) -> list[tuple[int, KeyFlags]]:
    """Redis' getKeysFromCommandWithSpecs: the key-specs when they all apply and none has
    variable flags, else the command's native finder."""
    usable = [s for s in info.key_specs if not s.not_key]
    if usable and not any("variable_flags" in s.flags for s in info.key_specs):
        argc = len(argv)
        out: list[tuple[int, KeyFlags]] = []
        for spec in usable:
            found = _compile_spec(spec)(argv, argc)
            if found is None:
                break
            shown = _shown_flags(spec.flags)
            out.extend((p, shown) for p in found)
        else:
            return out
    finder = _NATIVE.get(info.name)
    if finder is None:
        return []
    positions = finder(argv)
    flags_fn = _NATIVE_FLAGS.get(info.name)
    flags = flags_fn(argv) if flags_fn is not None else [()] * len(positions)
    return list(zip(positions, flags, strict=False))


def _checked_lookup(argv: Sequence[bytes], container: bytes) -> CommandInfo:
    """The checks COMMAND GETKEYS / GETKEYSANDFLAGS make before finding keys."""
    if not arity_ok(ALL_COMMANDS[container], len(argv) + 2):
        raise GetKeysError(arity_error(ALL_COMMANDS[container]))
    info = lookup(argv)
    if info is None:
        raise GetKeysError("ERR Invalid command specified")
    if not info.has_keys:
        raise GetKeysError("ERR The command has no key arguments")
    if not arity_ok(info, len(argv)):
        raise GetKeysError("ERR Invalid number of arguments specified for command")
    return info


def getkeysandflags_command(argv: Sequence[bytes]) -> list[tuple[int, KeyFlags]]:
    """``COMMAND GETKEYSANDFLAGS <argv>``: (position, flags as Redis prints them) per key, or
    GetKeysError with Redis' exact text."""
    info = _checked_lookup(argv, b"command|getkeysandflags")
    found = _keys_and_flags(info, argv)
    if not found and "no_mandatory_keys" not in info.flags:
        raise GetKeysError("ERR Invalid arguments specified for command")
    return found


# --------------------------------------------------------------------------- COMMAND replies
def _encode(v: Any, proto: int, out: list[bytes]) -> None:
    if isinstance(v, str):
        if v[0] == "+":
            out.append(b"+%s\r\n" % v[1:].encode())
        else:
            raw = v[1:].encode()
            out.append(b"$%d\r\n%s\r\n" % (len(raw), raw))
    elif isinstance(v, bool) or v is None:
        out.append(b"_\r\n" if proto == 3 else b"$-1\r\n")
    elif isinstance(v, int):
        out.append(b":%d\r\n" % v)
    elif isinstance(v, list):
        out.append(b"*%d\r\n" % len(v))
        for item in v:
            _encode(item, proto, out)
    elif list(v) == ["~"]:
        out.append(b"%s%d\r\n" % (b"~" if proto == 3 else b"*", len(v["~"])))
        for item in v["~"]:
            _encode(item, proto, out)
    else:
        out.append(b"%%%d\r\n" % len(v) if proto == 3 else b"*%d\r\n" % (2 * len(v)))
        for key, item in v.items():
            _encode("$" + key, proto, out)
            _encode(item, proto, out)


def encode_value(v: Any, proto: int = 2) -> bytes:
    """Encode a typed value of commands.json (see tools/gen_commands.py) as RESP."""
    out: list[bytes] = []
    _encode(v, proto, out)
    return b"".join(out)


def _index_raw() -> tuple[dict[str, Any], dict[str, Any]]:
    infos: dict[str, Any] = {}
    docs: dict[str, Any] = {}
    for name, entry in _RAW["info"].items():
        infos[name] = entry
        for sub in _items(entry[9]):
            infos[_text(sub[0])] = sub
    for name, doc in _RAW["docs"].items():
        docs[name] = doc
        for sub_name, sub in doc.get("subcommands", {}).items():
            docs[sub_name] = sub
    return infos, docs


_RAW_INFO, _RAW_DOCS = _index_raw()
_CACHE: dict[tuple[str, str, int], bytes] = {}


def _cached(kind: str, name: str, proto: int) -> bytes:
    key = (kind, name, proto)
    hit = _CACHE.get(key)
    if hit is None:
        source = _RAW_INFO if kind == "info" else _RAW_DOCS
        hit = _CACHE[key] = encode_value(source[name], proto)
    return hit


def command_info_reply(names: Iterable[bytes] | None = None, proto: int = 2) -> bytes:
    """``COMMAND`` (names None: every top-level command) or ``COMMAND INFO name...``."""
    if names is None:
        chosen: list[str | None] = list(_RAW["info"])
    else:
        chosen = []
        for n in names:
            info = lookup_name(n)
            chosen.append(info.name if info is not None else None)
    parts = [b"*%d\r\n" % len(chosen)]
    for name in chosen:
        if name is None:
            parts.append(b"_\r\n" if proto == 3 else b"$-1\r\n")
        else:
            parts.append(_cached("info", name, proto))
    return b"".join(parts)


def command_docs_reply(names: Iterable[bytes] | None = None, proto: int = 2) -> bytes:
    """``COMMAND DOCS [name...]``: a map of name -> docs; unknown names are left out."""
    if names is None:
        chosen = list(_RAW["docs"])
    else:
        chosen = []
        for n in names:
            info = lookup_name(n)
            if info is not None and info.name in _RAW_DOCS:
                chosen.append(info.name)
    parts = [b"%%%d\r\n" % len(chosen) if proto == 3 else b"*%d\r\n" % (2 * len(chosen))]
    for name in chosen:
        parts.append(encode_value("$" + name, proto))
        parts.append(_cached("docs", name, proto))
    return b"".join(parts)


def command_count() -> int:
    return len(COMMANDS)


def command_list() -> list[bytes]:
    """Every command name, each top-level command followed by its subcommands."""
    out: list[bytes] = []
    for name, info in COMMANDS.items():
        out.append(name)
        out.extend(sub.name.encode() for sub in info.subcommands.values())
    return out
