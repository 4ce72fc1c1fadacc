"""Server/admin commands (in progress)."""

from __future__ import annotations

from node import keyspace as K

_NOTIFY_CHARS = {
    "g": K.NOTIFY_GENERIC, "$": K.NOTIFY_STRING, "l": K.NOTIFY_LIST, "s": K.NOTIFY_SET,
    "h": K.NOTIFY_HASH, "z": K.NOTIFY_ZSET, "x": K.NOTIFY_EXPIRED, "e": K.NOTIFY_EVICTED,
    "K": K.NOTIFY_KEYSPACE, "E": K.NOTIFY_KEYEVENT, "t": K.NOTIFY_STREAM,
    "m": K.NOTIFY_KEY_MISS, "n": K.NOTIFY_NEW,
}
_ALL = (K.NOTIFY_GENERIC | K.NOTIFY_STRING | K.NOTIFY_LIST | K.NOTIFY_SET | K.NOTIFY_HASH
        | K.NOTIFY_ZSET | K.NOTIFY_EXPIRED | K.NOTIFY_EVICTED | K.NOTIFY_STREAM)


def parse_notify_flags(text: str) -> int:
    """notify-keyspace-events letters -> flag bits (ValueError on an unknown letter)."""
    flags = 0
    for ch in text:
        if ch == "A":
            flags |= _ALL
        elif ch in _NOTIFY_CHARS:
            flags |= _NOTIFY_CHARS[ch]
        else:
            raise ValueError(ch)
    return flags
