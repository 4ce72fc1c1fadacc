"""Script flags: the ``#!lua flags=...`` line of Redis 7.0 (evalExtractShebangFlags), pure.

A script without a shebang runs under 7.0's legacy ("compat") rules: no flags checked before
the run, writes allowed, keys in cluster mode checked per command only.
"""

from __future__ import annotations

from slotgate.protocol.resp import split_args

FLAG_NO_WRITES = 1 << 0
FLAG_ALLOW_OOM = 1 << 1
FLAG_ALLOW_STALE = 1 << 2
FLAG_NO_CLUSTER = 1 << 3
FLAG_ALLOW_CROSS_SLOT = 1 << 4

FLAGS = {
    b"no-writes": FLAG_NO_WRITES,
    b"allow-oom": FLAG_ALLOW_OOM,
    b"allow-stale": FLAG_ALLOW_STALE,
    b"no-cluster": FLAG_NO_CLUSTER,
    b"allow-cross-slot-keys": FLAG_ALLOW_CROSS_SLOT,
}

INVALID_SHEBANG = "ERR Invalid script shebang"
INVALID_ENGINE = "ERR Invalid engine in script shebang"
UNEXPECTED_ENGINE = "ERR Unexpected engine in script shebang: %s"
UNEXPECTED_FLAG = "ERR Unexpected flag in script shebang: %s"
UNKNOWN_OPTION = "ERR Unknown lua shebang option: %s"


class ShebangError(ValueError):
    """The reply text (``ERR ...``) for a bad shebang line."""


def parse(body: bytes) -> tuple[int, bool, bytes]:
    """(flags, compat, the code Lua compiles). The shebang line is left out of the code but its
    newline is kept, so line numbers stay the user's."""
    if not body.startswith(b"#!"):
        return 0, True, body
    end = body.find(b"\n")
    if end < 0:
        raise ShebangError(INVALID_SHEBANG)
    parts = split_args(body[:end])
    if not parts:
        raise ShebangError(INVALID_ENGINE)
    if parts[0] != b"#!lua":
        raise ShebangError(UNEXPECTED_ENGINE % _shown(parts[0]))
    flags = 0
    for part in parts[1:]:
        if not part.startswith(b"flags="):
            raise ShebangError(UNKNOWN_OPTION % _shown(part))
        spec = part[6:]
        for name in spec.split(b",") if spec else ():
            bit = FLAGS.get(name)
            if bit is None:
                raise ShebangError(UNEXPECTED_FLAG % _shown(name))
            flags |= bit
    return flags, False, body[end:]


def _shown(b: bytes) -> str:
    return b.decode("utf-8", "replace")
