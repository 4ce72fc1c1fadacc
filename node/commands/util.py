"""Argument parsing shared by command modules, with Redis' exact error texts."""

from __future__ import annotations

import math

from slotgate.node.core.errors import NOT_FLOAT, NOT_INTEGER, SYNTAX, CommandError

LONG_MIN = -(2**63)
LONG_MAX = 2**63 - 1


def parse_int(arg: bytes, err: str = NOT_INTEGER) -> int:
    """string2ll: an optional '-', no '+', no spaces, no leading zeros, 64-bit signed."""
    if arg.isdigit() and len(arg) < 19 and (arg[0] != 48 or len(arg) == 1):
        # 1-18 ASCII digits without a leading zero: canonical and in range (the common case).
        return int(arg, 10)
    try:
        n = int(arg)
    except ValueError:
        raise CommandError(err) from None
    if not LONG_MIN <= n <= LONG_MAX or str(n).encode() != arg:
        raise CommandError(err)
    return n


def parse_float(arg: bytes, err: str = NOT_FLOAT) -> float:
    """string2ld/strtold-like: accepts 'inf', '-inf', '1e5', ' 1'? (no spaces), rejects nan."""
    if not arg or arg[:1].isspace() or arg[-1:].isspace():
        raise CommandError(err)
    try:
        x = float(arg)
    except ValueError:
        raise CommandError(err) from None
    if math.isnan(x) or b"_" in arg:
        raise CommandError(err)
    return x


def lower(arg: bytes) -> bytes:
    return arg.lower()


def syntax_error() -> CommandError:
    return CommandError(SYNTAX)
