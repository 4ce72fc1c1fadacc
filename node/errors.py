"""Client-visible error strings, in one place, exactly as Redis 7.0 prints them.

Handlers ``raise CommandError(TEXT)``; the dispatcher answers ``-TEXT\\r\\n``. Raising is
free when nothing is raised (Python 3.11 zero-cost try), so error paths stay out of the way of
the hot path.
"""

from __future__ import annotations


class CommandError(Exception):
    """A command failed; ``str(self)`` is the error text without the leading ``-``."""

    __slots__ = ()


WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"
NOT_INTEGER = "ERR value is not an integer or out of range"
NOT_FLOAT = "ERR value is not a valid float"
SYNTAX = "ERR syntax error"
OVERFLOW = "ERR increment or decrement would overflow"
NO_SUCH_KEY = "ERR no such key"
NOAUTH = "NOAUTH Authentication required."
WRONGPASS = "WRONGPASS invalid username-password pair or user is disabled."
DB_INDEX_OUT_OF_RANGE = "ERR DB index is out of range"
SELECT_CLUSTER = "ERR SELECT is not allowed in cluster mode"
MAX_CLIENTS = "ERR max number of clients reached"
INVALID_EXPIRE = "ERR invalid expire time in '%s' command"
OFFSET_OUT_OF_RANGE = "ERR offset is out of range"
BIT_OFFSET = "ERR bit offset is not an integer or out of range"
STRING_TOO_LONG = "ERR string exceeds maximum allowed size (proto-max-bulk-len)"
EXECABORT = "EXECABORT Transaction discarded because of previous errors."
NESTED_MULTI = "ERR MULTI calls can not be nested"
EXEC_WITHOUT_MULTI = "ERR EXEC without MULTI"
DISCARD_WITHOUT_MULTI = "ERR DISCARD without MULTI"
WATCH_IN_MULTI = "ERR WATCH inside MULTI is not allowed"
NOT_IN_MULTI = "ERR Command not allowed inside a transaction"
TIMEOUT_NOT_FLOAT = "ERR timeout is not a float or out of range"
TIMEOUT_NEGATIVE = "ERR timeout is negative"
UNBLOCKED = "UNBLOCKED client unblocked via CLIENT UNBLOCK"


def wrong_args(name: str) -> str:
    """The arity error for ``name`` (lower case, ``container|sub`` for subcommands)."""
    return f"ERR wrong number of arguments for '{name}' command"


def unknown_subcommand(sub: bytes, container: str) -> str:
    return (
        f"ERR unknown subcommand '{_shown(sub, 128)}'. Try {container.upper()} HELP."
    )


def _shown(arg: bytes, limit: int) -> str:
    # Redis prints at most `limit` bytes of a user argument and sanitizes it (sdscatrepr-like:
    # the bytes go out raw but newlines and spaces become spaces).
    text = arg[:limit].decode("utf-8", "replace")
    return "".join(" " if ch in "\r\n" else ch for ch in text)


def unknown_command(argv: list[bytes]) -> str:
    """``ERR unknown command 'x', with args beginning with: 'a' 'b' `` like Redis 7.0."""
    # Redis keeps appending "'arg' " while the listing is shorter than 128 bytes, each arg
    # cut to what is left of those 128.
    args = ""
    for a in argv[1:]:
        if len(args) >= 128:
            break
        args += f"'{_shown(a, 128 - len(args))}' "
    return f"ERR unknown command '{_shown(argv[0], 128)}', with args beginning with: {args}"
