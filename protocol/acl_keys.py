"""The keys of a command with what it does to each (read / write), as ACL checks them.

Redis' getKeysFromCommandWithSpecs: the key-specs give the positions and their flags
(``access`` is a read; ``insert``, ``delete``, ``update`` are writes); when a spec cannot be
used (unknown, incomplete, out of range) or its flags vary with the arguments, the command's
own key function decides, with the flags it sets (SORT, MIGRATE, SET, BITFIELD) or none at
all (the numkeys commands), and a key without flags passes any key pattern.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from slotgate.protocol.commands import (
    CommandInfo,
    KeySpec,
    _compile_spec,
    _sort_keys,
    key_finder,
)

READ, WRITE = 1, 2

KeyRefs = list[tuple[int, int]]  # (argument index, READ|WRITE)


def spec_perms(flags: frozenset[str]) -> int:
    perms = READ if "access" in flags else 0
    if flags & {"insert", "delete", "update"}:
        perms |= WRITE
    return perms


def _sort(argv: Sequence[bytes]) -> KeyRefs:
    """sortGetKeys: the sorted key is read, the last STORE target (if any) written."""
    positions = _sort_keys(argv)
    return [(positions[0], READ)] + [(p, WRITE) for p in positions[1:]]


def _set(argv: Sequence[bytes]) -> KeyRefs:
    """setGetKeys: with GET the key is read and written, else only written."""
    if any(a.lower() == b"get" for a in argv[3:]):
        return [(1, READ | WRITE)]
    return [(1, WRITE)]


def _bitfield(argv: Sequence[bytes]) -> KeyRefs:
    """bitfieldGetKeys: read-only when only GET and OVERFLOW appear (well formed)."""
    i, argc = 2, len(argv)
    while i < argc:
        rest = argc - i - 1
        arg = argv[i].lower()
        if arg == b"get" and rest >= 2:
            i += 3
        elif arg == b"overflow" and rest >= 1:
            i += 2
        else:
            return [(1, READ | WRITE)]
    return [(1, READ)]


def _migrate(info: CommandInfo) -> Callable[[Sequence[bytes]], KeyRefs]:
    find = key_finder(info)
    return lambda argv: [(p, READ | WRITE) for p in find(argv)]


_NATIVE_FLAGS: dict[str, Callable[[Sequence[bytes]], KeyRefs]] = {
    "sort": _sort, "set": _set, "bitfield": _bitfield,
}

_Finder = Callable[[Sequence[bytes]], KeyRefs]
_CACHE: dict[str, _Finder] = {}


def _compile(info: CommandInfo) -> _Finder:
    specs: tuple[KeySpec, ...] = tuple(s for s in info.key_specs if not s.not_key)
    native = _NATIVE_FLAGS.get(info.name)
    if native is None and info.name == "migrate":
        native = _migrate(info)
    if native is None:
        positions = key_finder(info)

        def unflagged(argv: Sequence[bytes]) -> KeyRefs:
            return [(p, 0) for p in positions(argv)]

        native = unflagged
    if not specs or any("variable_flags" in s.flags for s in specs):
        return native
    compiled = [(_compile_spec(s), spec_perms(s.flags)) for s in specs]

    def by_specs(argv: Sequence[bytes]) -> KeyRefs:
        argc = len(argv)
        out: KeyRefs = []
        for fn, perms in compiled:
            found = fn(argv, argc)
            if found is None:
                return native(argv)
            out.extend((p, perms) for p in found)
        return out

    return by_specs


def key_refs(info: CommandInfo, argv: Sequence[bytes]) -> KeyRefs:
    """The keys of ``argv`` (a command ``info`` runs) with their READ/WRITE needs."""
    finder = _CACHE.get(info.name)
    if finder is None:
        finder = _CACHE[info.name] = _compile(info)
    return finder(argv)
