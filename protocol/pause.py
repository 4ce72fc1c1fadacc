"""CLIENT PAUSE: its arguments and which commands a pause holds, as Redis 7.0.

Both the node (node/core/pause.py) and the proxy (proxy/front/pause.py) hold clients the
same way: WRITE holds the commands that may change data or be replicated (write commands and
Redis' CMD_MAY_REPLICATE ones, which COMMAND INFO does not show; EXEC with one of those
queued); ALL holds every command.
"""

from __future__ import annotations

from collections.abc import Callable

PAUSE_OFF, PAUSE_WRITE, PAUSE_ALL = 0, 1, 2
# Redis' CMD_MAY_REPLICATE commands (not shown by COMMAND INFO)
MAY_REPLICATE = frozenset({"eval", "evalsha", "fcall", "publish", "spublish", "pfcount"})
TIMEOUT_NOT_INT = "ERR timeout is not an integer or out of range"
TIMEOUT_NEGATIVE = "ERR timeout is negative"
PAUSE_MODE = "ERR CLIENT PAUSE mode must be WRITE or ALL"
WRONG_ARGS = "ERR unknown subcommand or wrong number of arguments for '{sub}'. Try CLIENT HELP."
MAX_END_MS = 2**63 - 1


class PauseError(Exception):
    """``str(e)`` is Redis' error text."""


def may_replicate(name: str, write: bool) -> bool:
    """Whether WRITE holds the command ``name`` (full lower-case name)."""
    return write or name in MAY_REPLICATE


def parse(argv: list[bytes], parse_int: Callable[[bytes], int]) -> tuple[int, int]:
    """CLIENT PAUSE timeout [WRITE|ALL] -> (kind, timeout in ms). ``parse_int`` raises on a
    bad number; every other refusal is a ``PauseError``."""
    timeout_ms = parse_int(argv[2])
    if timeout_ms < 0:
        raise PauseError(TIMEOUT_NEGATIVE)
    kind = PAUSE_ALL
    if len(argv) == 4:
        mode = argv[3].lower()
        if mode == b"write":
            kind = PAUSE_WRITE
        elif mode != b"all":
            raise PauseError(PAUSE_MODE)
    elif len(argv) > 4:
        raise PauseError(WRONG_ARGS.format(sub=argv[1].split(b"\0", 1)[0].decode(
            "utf-8", "replace")))
    return kind, timeout_ms
