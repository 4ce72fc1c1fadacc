"""Pre-encoded replies used on hot paths (protocol independent)."""

from __future__ import annotations

OK = b"+OK\r\n"
QUEUED = b"+QUEUED\r\n"
PONG = b"+PONG\r\n"
ZERO = b":0\r\n"
ONE = b":1\r\n"
EMPTY_ARRAY = b"*0\r\n"
EMPTY_BULK = b"$0\r\n\r\n"
NOREPLY = b""  # nothing is sent (CLIENT REPLY OFF/SKIP)
