"""The proxy's own SLOWLOG: requests as the proxy served them, end to end.

    reply ready (session._filled) ─▶ took >= threshold? ─▶ SlowLog.add(...)   (rare path)
    SLOWLOG GET [count] / LEN / RESET ─▶ answered from the proxy's entries

The time of a request runs from reading it to its reply being ready (node round trips,
redirects and retries included): the one clock read per request the session already makes.
An entry has Redis 7.0's six fields, ``[id, unix time, microseconds, [args], client addr,
client name]``, with Redis' limits (32 arguments, 128 bytes each, the rest summarised) and
its redactions (AUTH, HELLO AUTH); the client name field is the client's name followed by
`` node=<host:port>``, the master that served it (a client name has no spaces, so the two
parts are apart), or the name alone for a request the proxy answered itself or fanned out.

Directives (Redis' names and meanings): ``slowlog-log-slower-than`` (µs, -1 off, 0 every
request) and ``slowlog-max-len``, from the config file (``slowlog`` section) and CONFIG
GET/SET through the proxy. The nodes' own slow logs: ``slotgate cluster call HOST:PORT
SLOWLOG GET``.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Sequence

import hiredis

from slotgate.protocol.resp import array, bulk, integer, string2ll

MAX_ARGS = 32  # Redis' SLOWLOG_ENTRY_MAX_ARGC
MAX_ARG_BYTES = 128  # Redis' SLOWLOG_ENTRY_MAX_STRING
COUNT_ERROR = "ERR count should be greater than or equal to -1"
DEFAULT_COUNT = 10
REDACTED = b"(redacted)"


def redacted(argv: Sequence[bytes]) -> list[bytes]:
    """argv with the secrets Redis keeps out of its slow log replaced."""
    out = list(argv)
    name = out[0].lower() if out else b""
    if name == b"auth":
        out[1:] = [REDACTED] * (len(out) - 1)
    elif name == b"hello":
        for i, a in enumerate(out):
            if a.lower() == b"auth":
                for j in (i + 1, i + 2):
                    if j < len(out):
                        out[j] = REDACTED
                break
    return out


def entry_args(argv: Sequence[bytes]) -> list[bytes]:
    """Redis' slowlogCreateEntry: at most 32 arguments, each at most 128 bytes."""
    argv = redacted(argv)
    n = min(len(argv), MAX_ARGS)
    out = []
    for i in range(n):
        if n == MAX_ARGS and i == n - 1 and len(argv) > MAX_ARGS:
            out.append(b"... (%d more arguments)" % (len(argv) - MAX_ARGS + 1))
            break
        a = argv[i]
        if len(a) > MAX_ARG_BYTES:
            a = a[:MAX_ARG_BYTES] + b"... (%d more bytes)" % (len(a) - MAX_ARG_BYTES)
        out.append(a)
    return out


# What ``add`` keeps of a request: id, unix seconds, seconds taken, the request (argv, or its
# multibulk as sent to a node), client address, client name, node ("": none).
Entry = tuple[int, float, float, "Sequence[bytes] | bytes", str, "bytes | None", str]


def _encode(e: Entry) -> bytes:
    entry_id, when_s, took_s, request, addr, client_name, node = e
    if isinstance(request, bytes):
        reader = hiredis.Reader()
        reader.feed(request)
        request = reader.gets()
    name = (client_name or b"").decode("utf-8", "replace")
    if node:
        name = f"{name} node={node}" if name else f"node={node}"
    return array([integer(entry_id), integer(int(when_s)), integer(int(took_s * 1_000_000)),
                  array(bulk(a) for a in entry_args(request)), bulk(addr), bulk(name)])


class SlowLog:
    """The entries (newest first) and the two directives. ``threshold_s`` is what the hot
    path compares with: infinite when off. An entry is kept as ``add`` got it and encoded
    only when SLOWLOG GET asks: a saturated proxy, whose every request may be slow end to
    end, pays one tuple per request, not an encoding."""

    def __init__(self, slower_than_us: int = 10000, max_len: int = 128) -> None:
        self.entries: deque[Entry] = deque(maxlen=max_len)
        self.next_id = 0
        self.slower_than_us: int = slower_than_us
        self.max_len: int = max_len
        self.threshold_s = math.inf
        self.configure(slower_than_us, max_len)

    def configure(self, slower_than_us: int, max_len: int) -> None:
        self.slower_than_us = slower_than_us
        self.threshold_s = math.inf if slower_than_us < 0 else slower_than_us / 1_000_000
        if max_len != self.entries.maxlen:
            self.entries = deque(list(self.entries)[:max_len], maxlen=max_len)
        self.max_len = max_len

    def add(self, request: Sequence[bytes] | bytes, took_s: float, addr: str,
            client_name: bytes | None, node: str) -> None:
        """One slow request (``request``: its argv, or its multibulk as sent)."""
        self.entries.appendleft((self.next_id, time.time(), took_s, request, addr,
                                 client_name, node))
        self.next_id += 1

    # --- SLOWLOG GET / LEN / RESET ----------------------------------------------------------
    def get(self, argv: Sequence[bytes]) -> bytes | str:
        """SLOWLOG GET's reply frame, or the error text."""
        count = DEFAULT_COUNT
        if len(argv) == 3:
            parsed = string2ll(argv[2])
            if parsed is None or parsed < -1:
                return COUNT_ERROR
            count = len(self.entries) if parsed == -1 else parsed
        return array(_encode(e) for e in list(self.entries)[:count])

    def length(self) -> bytes:
        return integer(len(self.entries))

    def reset(self) -> None:
        self.entries.clear()
