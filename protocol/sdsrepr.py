"""Redis' ``sdscatrepr``: the quoted, escaped form in which Redis shows a binary string to
people (MONITOR lines, command-line options turned into config lines, ...).

Redis 7.0 (sds.c)::

    "  then, per byte:  \\ and "  -> backslash + the byte
                        \n \r \t \a \b -> \\n \\r \\t \\a \\b
                        isprint()  -> the byte itself (C locale: 0x20..0x7e)
                        otherwise  -> \\xHH (two lower-case hex digits)
    "

Bytes from 0x80 up are never printable in the C locale Redis keeps for ``ctype``, so UTF-8
text comes out as ``\\xc3\\xa9``; \\v and \\f come out as ``\\x0b`` and ``\\x0c``.
"""

from __future__ import annotations

import re


def _escape(byte: int) -> str:
    named = {0x5C: "\\\\", 0x22: '\\"', 0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t", 0x07: "\\a",
             0x08: "\\b"}
    if byte in named:
        return named[byte]
    return chr(byte) if 0x20 <= byte <= 0x7E else f"\\x{byte:02x}"


_ESCAPED = tuple(_escape(b) for b in range(256))
# Printable ASCII other than backslash and double quote: copied as is.
_PLAIN = re.compile(rb'[ !#-\[\]-~]*')


def sds_repr(raw: bytes) -> str:
    """``raw`` as ``sdscatrepr`` prints it, quotes included (ASCII only)."""
    if _PLAIN.fullmatch(raw):
        return '"' + raw.decode("ascii") + '"'
    return '"' + "".join([_ESCAPED[b] for b in raw]) + '"'
