"""DUMP and RESTORE: real Redis 7.0 payloads (node/persistence/rdb.py) to and from the keyspace.

The keyspace keeps strings as ``bytes`` and other types as their modules' classes; rdb.py
speaks a plain value model (see its doc). ``ADAPTERS`` maps a value class to its rdb kind and
converters, so a type module plugs in with one ``register_adapter`` call; the collection types
are wired lazily (``_wire_types``) so this module loads before or without them.

RESTORE mirrors ``restoreCommand`` step by step, including its order of checks: options, then
BUSYKEY, then the TTL, then the payload footer, then the body. An already-expired absolute TTL
answers OK without creating the key (deleting the old one under REPLACE, propagated as DEL).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from slotgate.node.commands.registry import command
from slotgate.node.commands.replies import OK
from slotgate.node.core.errors import NOT_INTEGER, SYNTAX, CommandError
from slotgate.node.core.keyspace import NOTIFY_GENERIC, now_ms
from slotgate.node.persistence import rdb
from slotgate.protocol.resp import bulk

if TYPE_CHECKING:
    from slotgate.node.core.client import Client

BUSYKEY = "BUSYKEY Target key name already exists."
INVALID_TTL = "ERR Invalid TTL value, must be >= 0"
INVALID_IDLETIME = "ERR Invalid IDLETIME value, must be >= 0"
INVALID_FREQ = "ERR Invalid FREQ value, must be >= 0 and <= 255"


@dataclass(frozen=True)
class Adapter:
    """How one value class travels through a DUMP payload."""

    kind: str  # rdb kind: string list set hash zset
    to_rdb: Callable[[Any], rdb.Value]  # keyspace value -> rdb value model
    from_rdb: Callable[[Any], Any]  # rdb value model -> a new keyspace value


ADAPTERS: dict[type, Adapter] = {bytes: Adapter("string", lambda v: v, lambda v: v)}
BUILDERS: dict[str, Callable[[Any], Any]] = {"string": lambda v: v}


def register_adapter(cls: type, kind: str, to_rdb: Callable[[Any], rdb.Value],
                     from_rdb: Callable[[Any], Any]) -> None:
    """Let values of ``cls`` be DUMPed as ``kind`` and RESTOREd (``kind`` -> ``cls``)."""
    ADAPTERS[cls] = Adapter(kind, to_rdb, from_rdb)
    BUILDERS[kind] = from_rdb


# Type modules that provide ``rdb_adapters() -> list[(cls, kind, to_rdb, from_rdb)]``.
_TYPE_MODULES = ("slotgate.node.types.lists", "slotgate.node.types.hashes", "slotgate.node.types.sets",
                 "slotgate.node.types.zsets", "slotgate.node.types.streams")
_wired = False


def _wire_types() -> None:
    """Pick up the collection types' adapters once all command modules are imported."""
    global _wired
    if _wired:
        return
    _wired = True
    for name in _TYPE_MODULES:
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        for cls, kind, to_rdb, from_rdb in getattr(mod, "rdb_adapters", list)():
            register_adapter(cls, kind, to_rdb, from_rdb)


def dump_value(value: Any) -> bytes:
    """The DUMP payload of a keyspace value."""
    _wire_types()
    adapter = ADAPTERS.get(type(value))
    if adapter is None:
        raise CommandError(f"ERR DUMP is not supported for values of type {type(value).__name__}")
    return rdb.dump(adapter.kind, adapter.to_rdb(value))


def load_value(payload: bytes, *, check_crc: bool = True) -> Any:
    """A new keyspace value from a DUMP payload; CommandError with Redis' text on failure."""
    _wire_types()
    try:
        kind, value = rdb.load(payload, check_crc=check_crc)
    except rdb.RdbError as exc:
        raise CommandError(str(exc)) from None
    builder = BUILDERS.get(kind)
    if builder is None:  # a type this node does not store yet
        raise CommandError(rdb.ERR_BAD_FORMAT)
    return builder(value)


@command("dump")
def dump_cmd(c: Client, argv: list[bytes]) -> bytes:
    value = c.db.lookup_read(argv[1])
    if value is None:
        return c.null_bulk
    return bulk(dump_value(value))


def _int_arg(arg: bytes) -> int:
    """``getLongLongFromObject``: a canonical int64 (string2ll), else the integer error."""
    n = rdb.strict_int(arg)
    if n is None:
        raise CommandError(NOT_INTEGER)
    return n


def _idletime(c: Client, argv: list[bytes], j: int, opts: dict[str, int]) -> int:
    if "freq" in opts:
        raise CommandError(SYNTAX)
    n = _int_arg(argv[j + 1])
    if n < 0:
        raise CommandError(INVALID_IDLETIME)
    opts["idletime"] = n
    return j + 2


def _freq(c: Client, argv: list[bytes], j: int, opts: dict[str, int]) -> int:
    if "idletime" in opts:
        raise CommandError(SYNTAX)
    n = _int_arg(argv[j + 1])
    if not 0 <= n <= 255:
        raise CommandError(INVALID_FREQ)
    opts["freq"] = n
    return j + 2


def _flag(name: str) -> Callable[[Client, list[bytes], int, dict[str, int]], int]:
    def set_flag(c: Client, argv: list[bytes], j: int, opts: dict[str, int]) -> int:
        opts[name] = 1
        return j + 1

    return set_flag


_RESTORE_OPTS: dict[bytes, tuple[int, Callable[[Client, list[bytes], int, dict[str, int]], int]]] = {
    b"replace": (0, _flag("replace")),
    b"absttl": (0, _flag("absttl")),
    b"idletime": (1, _idletime),
    b"freq": (1, _freq),
}


@command("restore-asking")  # what MIGRATE sends in cluster mode; the router honours "asking"
@command("restore")
def restore_cmd(c: Client, argv: list[bytes]) -> bytes:
    key = argv[1]
    opts: dict[str, int] = {}
    j = 4
    while j < len(argv):
        spec = _RESTORE_OPTS.get(argv[j].lower())
        if spec is None or len(argv) - j - 1 < spec[0]:
            raise CommandError(SYNTAX)
        j = spec[1](c, argv, j, opts)
    db = c.db
    replace = "replace" in opts
    if not replace and db.lookup(key) is not None:
        raise CommandError(BUSYKEY)
    ttl_ms = _int_arg(argv[2])
    if ttl_ms < 0:
        raise CommandError(INVALID_TTL)
    value = load_value(argv[3], check_crc=not c.server.skip_checksum_validation)
    deleted = db.delete(key) if replace else False
    when_ms = 0
    if ttl_ms:
        when_ms = ttl_ms if "absttl" in opts else ttl_ms + now_ms()
        if when_ms <= now_ms():
            if deleted:
                c.propagate_as = [[b"DEL", key]]
                db.notify(NOTIFY_GENERIC, b"del", key)
                c.ks.dirty += 1
            return OK
    db.set(key, value)
    if when_ms:
        db.set_expire(key, when_ms)
        if "absttl" not in opts:
            c.propagate_as = [[argv[0], key, b"%d" % when_ms, *argv[3:], b"ABSTTL"]]
    _set_access_info(c, key, opts)
    db.notify(NOTIFY_GENERIC, b"restore", key)
    c.ks.dirty += 1
    return OK


def _set_access_info(c: Client, key: bytes, opts: dict[str, int]) -> None:
    """IDLETIME / FREQ: handed to the keyspace when it keeps LRU/LFU data, else accepted."""
    hook = getattr(c.db, "set_access_info", None)
    if hook is not None:
        hook(key, idle_s=opts.get("idletime"), freq=opts.get("freq"))
