"""Client-visible error strings, in one place, exactly as Redis 7.0 prints them.

Handlers ``raise CommandError(TEXT)``; the dispatcher answers ``-TEXT\\r\\n``. Raising is
free when nothing is raised (Python 3.11 zero-cost try), so error paths stay out of the way of
the hot path. Texts the proxy answers too are defined in ``protocol/errors.py`` and named here
for the node's modules.
"""

from __future__ import annotations

from slotgate.protocol.errors import DB_INDEX_OUT_OF_RANGE as DB_INDEX_OUT_OF_RANGE
from slotgate.protocol.errors import DISCARD_WITHOUT_MULTI as DISCARD_WITHOUT_MULTI
from slotgate.protocol.errors import EXEC_WITHOUT_MULTI as EXEC_WITHOUT_MULTI
from slotgate.protocol.errors import EXECABORT as EXECABORT
from slotgate.protocol.errors import INVALID_CURSOR as INVALID_CURSOR
from slotgate.protocol.errors import MAX_CLIENTS as MAX_CLIENTS
from slotgate.protocol.errors import NESTED_MULTI as NESTED_MULTI
from slotgate.protocol.errors import NOAUTH as NOAUTH
from slotgate.protocol.errors import NOT_INTEGER as NOT_INTEGER
from slotgate.protocol.errors import SELECT_CLUSTER as SELECT_CLUSTER
from slotgate.protocol.errors import SYNTAX as SYNTAX
from slotgate.protocol.errors import WATCH_IN_MULTI as WATCH_IN_MULTI
from slotgate.protocol.errors import WRONGPASS as WRONGPASS
from slotgate.protocol.errors import wrong_args as wrong_args


class CommandError(Exception):
    """A command failed; ``str(self)`` is the error text without the leading ``-``."""

    __slots__ = ()


WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"
NOT_FLOAT = "ERR value is not a valid float"
OVERFLOW = "ERR increment or decrement would overflow"
NO_SUCH_KEY = "ERR no such key"
INVALID_EXPIRE = "ERR invalid expire time in '%s' command"
OFFSET_OUT_OF_RANGE = "ERR offset is out of range"
BIT_OFFSET = "ERR bit offset is not an integer or out of range"
STRING_TOO_LONG = "ERR string exceeds maximum allowed size (proto-max-bulk-len)"
NOT_IN_MULTI = "ERR Command not allowed inside a transaction"
TIMEOUT_NOT_FLOAT = "ERR timeout is not a float or out of range"
TIMEOUT_NEGATIVE = "ERR timeout is negative"
UNBLOCKED = "UNBLOCKED client unblocked via CLIENT UNBLOCK"
# HyperLogLog (hyperloglog.c): a string that is no HLL, and an HLL whose registers do not add up
NOT_HLL = "WRONGTYPE Key is not a valid HyperLogLog string value."
INVALID_HLL = "INVALIDOBJ Corrupted HLL object detected"


def _shown(arg: bytes, limit: int) -> str:
    # Redis prints at most `limit` bytes of a user argument and sanitizes it (sdscatrepr-like:
    # the bytes go out raw but newlines and spaces become spaces).
    text = arg[:limit].decode("utf-8", "replace")
    return "".join(" " if ch in "\r\n" else ch for ch in text)
