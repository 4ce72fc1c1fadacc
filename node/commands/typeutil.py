"""Argument parsing and reply helpers shared by the collection types (lists, hashes, sets,
sorted sets), with Redis 7.0's exact error texts."""

from __future__ import annotations

import hashlib
import math

from node.commands.util import LONG_MAX, parse_int
from node.errors import NOT_INTEGER, TIMEOUT_NEGATIVE, TIMEOUT_NOT_FLOAT, CommandError

MUST_BE_POSITIVE = "ERR value is out of range, must be positive"
NUMKEYS_POSITIVE = "ERR numkeys should be greater than 0"
COUNT_POSITIVE = "ERR count should be greater than 0"


def parse_positive(arg: bytes, err: str = MUST_BE_POSITIVE) -> int:
    """getPositiveLongFromObjectOrReply: 0..LONG_MAX; any failure answers ``err``."""
    try:
        n = parse_int(arg)
    except CommandError:
        raise CommandError(err) from None
    if n < 0:
        raise CommandError(err)
    return n


def parse_range(arg: bytes, lo: int, hi: int, err: str | None = None) -> int:
    """getRangeLongFromObjectOrReply: with ``err`` every failure answers it, without it a
    non-integer is NOT_INTEGER and an out-of-range value names the bounds."""
    try:
        n = parse_int(arg)
    except CommandError:
        raise CommandError(err or NOT_INTEGER) from None
    if not lo <= n <= hi:
        raise CommandError(err or f"ERR value is out of range, must be between {lo} and {hi}")
    return n


def parse_timeout_s(arg: bytes) -> float:
    """getTimeoutFromObjectOrReply in seconds: a long double, truncated to whole ms; 0 (also
    anything below 1 ms) blocks forever. Values whose ms do not fit a long long (inf, 1e20)
    wrap negative in C, so Redis calls them negative; so do we."""
    if not arg or arg[:1].isspace() or arg[-1:].isspace() or b"_" in arg:
        raise CommandError(TIMEOUT_NOT_FLOAT)
    try:
        x = float(arg)
    except ValueError:
        if not arg.lstrip(b"+-")[:2].lower() == b"0x":  # strtold also reads hex floats
            raise CommandError(TIMEOUT_NOT_FLOAT) from None
        try:
            x = float.fromhex(arg.decode("ascii"))
        except (ValueError, UnicodeDecodeError):
            raise CommandError(TIMEOUT_NOT_FLOAT) from None
    if math.isnan(x):
        raise CommandError(TIMEOUT_NOT_FLOAT)
    if math.isinf(x) or abs(x * 1000.0) >= 2.0**63:
        raise CommandError(TIMEOUT_NEGATIVE)
    ms = int(x * 1000.0)
    if ms < 0:
        raise CommandError(TIMEOUT_NEGATIVE)
    return ms / 1000.0


def parse_numkeys(argv: list[bytes], idx: int) -> int:
    """The numkeys of LMPOP/ZMPOP-like commands (1..LONG_MAX)."""
    return parse_range(argv[idx], 1, LONG_MAX, NUMKEYS_POSITIVE)


def bulks(items: object) -> bytes:
    """An array reply of bulk strings from an iterable of bytes."""
    parts = [b"$%d\r\n%s\r\n" % (len(x), x) for x in items]  # type: ignore[attr-defined]
    return b"*%d\r\n%s" % (len(parts), b"".join(parts))


# --- DEBUG DIGEST-VALUE (debug.c: xorDigest / mixDigest over SHA1) ---------------------------


def _sha1(data: bytes) -> bytes:
    return hashlib.sha1(data).digest()


def xor_digest(digest: bytearray, data: bytes) -> None:
    h = _sha1(data)
    for i in range(20):
        digest[i] ^= h[i]


def mix_digest(digest: bytearray, data: bytes) -> None:
    xor_digest(digest, data)
    digest[:] = _sha1(bytes(digest))
