"""MONITOR's line and the secrets kept out of it (and out of SLOWLOG), as Redis 7.0.

    +1700000000.123456 [0 127.0.0.1:54321] "SET" "k" "v"

Shared by the node (node/core/server.py) and the proxy (proxy/front/monitor.py).
"""

from __future__ import annotations

from collections.abc import Callable

from slotgate.protocol.sdsrepr import sds_repr

REDACTED = b"(redacted)"


def _after_keywords(argv: list[bytes], words: dict[bytes, int]) -> set[int]:
    """Indexes of the arguments after each keyword of ``words`` (keyword -> how many)."""
    hidden: set[int] = set()
    for i, arg in enumerate(argv):
        n = words.get(arg.lower(), 0)
        hidden.update(range(i + 1, min(i + 1 + n, len(argv))))
    return hidden


_REDACT: dict[bytes, Callable[[list[bytes]], set[int]]] = {
    b"auth": lambda argv: set(range(1, len(argv))),
    b"hello": lambda argv: _after_keywords(argv, {b"auth": 2}),
    b"migrate": lambda argv: _after_keywords(argv, {b"auth": 1, b"auth2": 2}),
}


def redacted(argv: list[bytes]) -> list[bytes]:
    """``argv`` as MONITOR and SLOWLOG show it: passwords and ACL SETUSER's rules replaced by
    ``(redacted)``, as Redis' redactClientCommandArgument does."""
    name = argv[0].lower()
    if name == b"acl" and len(argv) > 2 and argv[1].lower() == b"setuser":
        return argv[:2] + [REDACTED] * (len(argv) - 2)
    find = _REDACT.get(name)
    if find is None:
        return argv
    hidden = find(argv)
    return [REDACTED if i in hidden else a for i, a in enumerate(argv)]


def shown(flags: frozenset[str]) -> bool:
    """Whether MONITOR shows a command with these flags (not admin, not skip_monitor)."""
    return "admin" not in flags and "skip_monitor" not in flags


def line(now_s: float, db: int, addr: str, argv: list[bytes]) -> bytes:
    """One MONITOR line (a simple-string frame)."""
    args = " ".join([sds_repr(a) for a in redacted(argv)])
    return f"+{now_s:.6f} [{db} {addr}] {args}\r\n".encode()
