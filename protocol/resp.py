"""RESP2/RESP3 codec, sans-IO: bytes in, values (or raw frames) out. No sockets here.

Three parts:

* ``RequestReader`` -- what a server reads from a client. Redis decides per request by its
  first byte: ``*`` starts a multibulk request, anything else is an inline command (a line
  typed by hand). Multibulk runs through ``hiredis.Reader`` (C speed); inline commands, and
  every stream hiredis cannot be trusted with, run through a pure-Python parser that mirrors
  Redis' ``processMultibulkBuffer``/``processInlineBuffer`` exactly, limits and error texts
  included.
* ``ReplyFramer`` -- what a proxy reads from a backend: where each complete reply frame ends,
  and its type byte, without building Python objects, so replies can be forwarded as raw bytes.
* Encoders -- ``bulk()``, ``integer()``, ... and a convenience ``encode(value, proto)``.

How the request reader keeps hiredis fast and still exact
----------------------------------------------------------
hiredis parses *replies*: it accepts ``+``/``:``/nested items inside an array, RESP3 types, and
enforces no size limits; after an error its buffered bytes are lost. So we keep our own buffer
and only hand hiredis a span ``[pos, stop)`` that

1. starts with ``*`` and ends just before the ``*`` of the last ``\\r\\n*`` (or at the end
   of the buffer if it ends in ``\\r\\n``), so a request still arriving normally stays with the
   Python parser, which checks its headers *before* anything is buffered for them (hiredis only
   ever sees bytes already fed, and is reset whenever it is left mid-request);
2. contains no ``\\r\\n`` followed by a type byte that hiredis would turn into ``bytes`` or a
   list (``+ = ( | ~ >``) -- those would hide a Redis protocol error. Payloads that merely
   start with such a byte (``+inf``) only cost a trip through the slow path.

Every hiredis result must be a list of ``bytes`` (checked by ``b"".join`` in C), and after the
span we feed hiredis a probe ``*0\\r\\n``: it comes back as ``[]`` only if hiredis consumed the
span exactly, ending at a request boundary. Anything else (a hiredis error, a non-list, a
non-bytes item, a failed probe, an oversized argument) discards the hiredis results and the
same span is parsed again by the exact Python parser, which raises the Redis error.

Known difference: Redis skips the two bytes after a bulk payload without looking at them. If
a client puts something other than CRLF there *and* follows it with a ``+``/``=``/``(`` item
(or, at the top level, a ``~``/``>``/``|`` one), hiredis may accept what Redis rejects or
reads as inline commands. Only such malformed streams differ; limits hold regardless.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from itertools import chain
from typing import Any, Final

import hiredis
from mypy_extensions import i64, mypyc_attr

from slotgate.build import BUILD

__all__ = [
    "Attribute", "BigNumber", "ProtocolError", "Push", "Raw", "ReplyFramer", "RequestReader",
    "RespError", "Verbatim", "array", "array_header", "attribute_header", "big_number",
    "boolean", "bulk", "double", "encode", "encode_command", "error", "format_double",
    "format_long_double", "integer", "map_header", "null", "null_array", "push_header",
    "set_header", "simple", "split_args", "to_long_double", "verbatim",
]

# Limits, named as in redis.conf / server.h.
PROTO_MAX_BULK_LEN = 512 * 1024 * 1024  # bytes, proto-max-bulk-len default
PROTO_INLINE_MAX_SIZE = 64 * 1024  # bytes; also bounds an unterminated multibulk header line
PROTO_MAX_MULTIBULK_LEN = 1024 * 1024  # elements; Redis 7.0 itself allows up to INT_MAX
PROTO_MBULK_BIG_ARG = 32 * 1024  # bytes; bigger payloads are collected outside the buffer
INT_MAX = 2**31 - 1

# Client-visible error texts, exactly as redis-server 7.0 sends them (without the "-").
ERR_MULTIBULK_LEN = "ERR Protocol error: invalid multibulk length"
ERR_BULK_LEN = "ERR Protocol error: invalid bulk length"
ERR_INLINE_TOO_BIG = "ERR Protocol error: too big inline request"
ERR_MBULK_COUNT_TOO_BIG = "ERR Protocol error: too big mbulk count string"
ERR_BULK_COUNT_TOO_BIG = "ERR Protocol error: too big bulk count string"
ERR_UNBALANCED_QUOTES = "ERR Protocol error: unbalanced quotes in request"
ERR_EXPECTED_DOLLAR = "ERR Protocol error: expected '$', got '{}'"


class ProtocolError(Exception):
    """Bad protocol bytes. ``str(e)`` is the exact Redis error text without the leading ``-``.

    A server answers with ``e.as_reply()`` and closes that connection only. Texts may carry
    one raw byte (``got '\\x80'``); they are kept as latin-1 so ``as_reply`` restores it.
    """

    def as_reply(self) -> bytes:
        return b"-" + str(self).encode("latin-1") + b"\r\n"


def _expected_dollar(byte: int) -> ProtocolError:
    # Redis maps CR and LF inside error texts to spaces.
    ch = " " if byte in (10, 13) else chr(byte)
    return ProtocolError(ERR_EXPECTED_DOLLAR.format(ch))


def string2ll(s: bytes) -> int | None:
    """Redis' strict string2ll: optional '-', no '+', no spaces, no leading zeros; None if bad."""
    if not s or len(s) > 20:
        return None
    digits = s[1:] if s[:1] == b"-" else s
    if not digits.isdigit() or (digits[0] == 48 and len(s) > 1):  # "0" alone is fine, "-0" not
        return None
    v = int(s)
    return v if -(2**63) <= v < 2**63 else None


# --------------------------------------------------------------------------------------------
# Inline commands: sdssplitargs()
# --------------------------------------------------------------------------------------------

_C_ISSPACE = b" \t\n\v\f\r"  # isspace() in the C locale: skipped between arguments
_TOKEN_END = b" \n\r\t"  # what ends an unquoted argument (\v and \f do not)
_ESCAPES = {ord("n"): 10, ord("r"): 13, ord("t"): 9, ord("b"): 8, ord("a"): 7}
_HEX = frozenset(b"0123456789abcdefABCDEF")


def split_args(line: bytes) -> list[bytes] | None:
    """Split an inline command line like Redis' sdssplitargs; None means unbalanced quotes."""
    if b'"' not in line and b"'" not in line and b"\v" not in line and b"\f" not in line:
        return line.split()  # same separators as Redis when no quotes/\v/\f are involved
    out: list[bytes] = []
    n = len(line)
    i = 0
    while True:
        while i < n and line[i] in _C_ISSPACE:
            i += 1
        if i >= n:
            return out
        cur = bytearray()
        inq = insq = False
        while True:
            c = line[i] if i < n else 0
            nxt = line[i + 1] if i + 1 < n else 0
            if inq:
                if c == 92 and nxt == 120 and i + 3 < n and line[i + 2] in _HEX and line[i + 3] in _HEX:
                    cur.append(int(line[i + 2 : i + 4], 16))
                    i += 3
                elif c == 92 and nxt:
                    i += 1
                    cur.append(_ESCAPES.get(nxt, nxt))
                elif c == 34:  # closing '"' must be followed by a space or the end
                    if nxt and nxt not in _C_ISSPACE:
                        return None
                    i += 1
                    break
                elif i >= n:
                    return None
                else:
                    cur.append(c)
            elif insq:
                if c == 92 and nxt == 39:
                    i += 1
                    cur.append(39)
                elif c == 39:
                    if nxt and nxt not in _C_ISSPACE:
                        return None
                    i += 1
                    break
                elif i >= n:
                    return None
                else:
                    cur.append(c)
            elif i >= n or c in _TOKEN_END:
                break
            elif c == 34:
                inq = True
            elif c == 39:
                insq = True
            else:
                cur.append(c)
            i += 1
        out.append(bytes(cur))


# --------------------------------------------------------------------------------------------
# Request reader
# --------------------------------------------------------------------------------------------

# A "\r\n" followed by a type byte hiredis would accept as bytes or a list where Redis wants
# "$" (or, at the top level, an inline command): such spans go to the exact parser.
_HIREDIS_UNSAFE = re.compile(rb"\r\n[+=(|~>]")
# The same type bytes alone: a span holding none of them (most do) needs no regex scan
# (deleting them with ``translate`` and comparing lengths costs a fraction of one). A span
# holding some is also checked after hiredis: the requests' multibulk length must be the
# span's, or a type byte hid behind a payload's two unchecked bytes ("$3\r\nfooXY+bar").
_UNSAFE_TYPE_BYTES = b"+=(|~>"
# An element count of 5+ digits: hiredis allocates each array of the claimed size as soon as
# it reads its header (8 MB for "*999999", 64 MB for 79 bytes of nested ones, seconds to free
# "*2000000000"; Redis preallocates 1024 arguments at most). A span where such a count claims
# more arguments than the rest of the span can hold (6 bytes each at least) goes to the exact
# parser, which checks the count against the limit and refuses nesting before keeping
# anything; so what hiredis allocates stays in proportion to the bytes it was given.
_BIG_COUNT = re.compile(rb"\*(\d{5,})")
_MIN_ARG_BYTES = 6  # "$0\r\n\r\n"
_PROBE = b"*0\r\n"
# RequestReader._canonical, the compiled build's parser for everyday requests (in pure Python
# hiredis costs less): its bounds, past which the general parsers take over.
_CANONICAL = "slotgate.protocol.resp" in BUILD.modules and BUILD.compiled
_CANON_MAX_BULK = 64 * 1024
_CANON_MAX_COUNT = 1024
_HIREDIS_FAILURES = (hiredis.HiredisError, MemoryError, TypeError)


# The hiredis reader every RequestReader parses its spans with (about 1 KiB of C state each,
# so not one per connection): a span is handed over whole and the probe that ends ``_fast``
# proves the reader holds nothing afterwards; after any failure it is replaced.
_hiredis = [hiredis.Reader()]


def _claims_more_than_held(buf: bytes | bytearray, pos: int, stop: int) -> bool:
    """Whether a count of 5+ digits in [pos, stop) claims more arguments than the bytes after
    it could hold (see _BIG_COUNT)."""
    for m in _BIG_COUNT.finditer(buf, pos, stop):
        if int(m.group(1)) * _MIN_ARG_BYTES > stop - m.end():
            return True
    return False


def _encoded_len(requests: list[list[bytes]], empty: int) -> int:
    """The bytes ``requests`` (and ``empty`` "*0" requests) take in the multibulk form:
    "*N\r\n" each, "$L\r\n" + payload + 2 per argument. The digits come from ``str`` of a
    list of counts ("[N, N]": the digits plus 2 characters per item), all in C loops."""
    if not requests:
        return 4 * empty
    counts = list(map(len, requests))
    lens = list(map(len, chain.from_iterable(requests)))
    return (4 * empty + len(str(counts)) + len(counts) + sum(lens) + 3 * len(lens)
            + len(str(lens)))


class RequestReader:
    """Parse client requests: ``feed(data)`` then ``get_request()`` / ``get_requests()``.

    Raises ``ProtocolError`` (exact Redis text) on bad input; after that the connection is
    finished and the reader must not be used again. Memory stays bounded: headers are checked
    before their payload is buffered, lines without a newline are cut at ``max_inline_len``.
    """

    use_hiredis = True  # False: the exact Python parser alone (reference for tests, benches)
    # the canonical-request parser (``_canonical``) before hiredis: on in the compiled build
    use_canonical = _CANONICAL

    def __init__(
        self,
        max_bulk_len: int = PROTO_MAX_BULK_LEN,
        max_inline_len: int = PROTO_INLINE_MAX_SIZE,
        max_multibulk_len: int = PROTO_MAX_MULTIBULK_LEN,
    ) -> None:
        self.max_bulk_len = max_bulk_len
        self.max_inline_len = max_inline_len
        self.max_multibulk_len = min(max_multibulk_len, INT_MAX)
        # A span shorter than this cannot hold an oversized argument or argument count.
        self._span_check_bytes = min(max_bulk_len, 6 * self.max_multibulk_len)
        self._buf: bytes | bytearray = b""  # bytes while fed whole, bytearray once appended to
        self._pos = 0
        self._ready: list[list[bytes]] = []
        self._head = 0  # next request of _ready to hand out
        # With ``get_requests_packed``: beside each request of ``_ready``, its bytes as they
        # came when the canonical parser took it (its packed form), else b"". None: not kept.
        self._raws: list[bytes] | None = None
        self._error: ProtocolError | None = None
        self._slow_until = 0  # parse with the exact parser up to here (a span hiredis failed)
        # Exact parser state for a multibulk request in progress.
        self._mb_left = 0  # arguments still to read; 0 = between requests
        self._mb_args: list[bytes] = []
        self._bulk_len = -1  # payload length of the argument being read; -1 = header next
        # A big argument's payload is collected as chunks, never appended to _buf.
        self._big: list[bytes] = []
        self._big_left = 0  # payload bytes still to come
        self._skip_left = 0  # bytes of the two after the payload still to come

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if self._error is not None or not data:
            return  # after a protocol error the connection is done: keep no more bytes
        if self._big_left or self._skip_left:
            data = self._feed_big(data)
            if not data:
                return
        buf = self._buf
        pos = self._pos
        if pos >= len(buf):
            self._buf = data if type(data) is bytes else bytes(data)
            self._pos = self._slow_until = 0
        elif type(buf) is bytearray:
            buf += data
        else:
            grown = bytearray(memoryview(buf)[pos:])
            grown += data
            self._buf = grown
            self._pos = 0
            self._slow_until = max(0, self._slow_until - pos)

    def get_request(self) -> list[bytes] | None:
        """One complete request, or None if more bytes are needed. Raises ProtocolError."""
        ready = self._ready
        if self._head >= len(ready):
            ready.clear()
            if self._raws is not None:
                self._raws.clear()
            self._head = 0
            self._parse()
            if not ready:
                if self._error is not None:
                    raise self._error
                return None
        self._head += 1
        return ready[self._head - 1]

    def get_requests(self) -> list[list[bytes]]:
        """All complete requests. Bad bytes raise only once the good requests before them
        have been returned (by this call or an earlier one)."""
        self._parse()
        out = self._ready
        if self._head:
            out = out[self._head :]
            self._head = 0
        self._ready = []
        if self._raws is not None:
            self._raws = []
        if not out and self._error is not None:
            raise self._error
        return out

    def get_requests_packed(self) -> tuple[list[list[bytes]], list[bytes]]:
        """As ``get_requests``, with each request's bytes as they came when they are its
        canonical multibulk, exactly what ``encode_command``/``hiredis.pack_command`` make of
        the request (a proxy forwards them as they are), else b"" (not kept: the caller packs
        the request). The canonical parser runs in the compiled build only: pure Python gets
        b"" for every request."""
        if self._raws is None:
            self._raws = []
        self._parse()
        out = self._ready
        raws: list[bytes] = self._raws
        if len(raws) < len(out):
            raws.extend([b""] * (len(out) - len(raws)))  # taken by the other parsers
        if self._head:
            out = out[self._head :]
            raws = raws[self._head :]
            self._head = 0
        self._ready = []
        self._raws = []
        if not out and self._error is not None:
            raise self._error
        return out, raws

    def buffered_bytes(self) -> int:
        """Bytes held for requests not yet complete (for query-buffer stats and limits)."""
        held = len(self._buf) - self._pos
        if self._mb_args:
            held += sum(map(len, self._mb_args))
        if self._big:
            held += sum(map(len, self._big))
        return held

    # -- parsing ------------------------------------------------------------------------------

    def _parse(self) -> None:
        if self._error is not None:
            return
        ready = self._ready
        try:
            while True:
                buf = self._buf
                pos = self._pos
                end = len(buf)
                if pos >= end:
                    break
                if buf[pos] == 42 and not self._mb_left and pos >= self._slow_until and self.use_hiredis:
                    if self.use_canonical and type(buf) is bytes:
                        done = self._canonical(buf, pos, end)
                        if done != pos:
                            self._pos = done
                            continue
                    if buf.endswith(b"\r\n"):
                        stop = end
                    else:
                        # The last request may be partial: keep it from hiredis.
                        stop = buf.rfind(b"\r\n*", pos) + 2
                    if stop > pos + 1 and self._fast(buf, pos, stop):
                        continue
                argv = self._slow_multibulk() if self._mb_left or buf[pos] == 42 else self._slow_inline()
                if argv is None:
                    break
                if argv:
                    ready.append(argv)
        except ProtocolError as exc:
            self._error = exc
            self._mb_args = []  # the dead request's arguments: neither kept nor counted
            self._big = []
        # Drop consumed bytes: cheaply when all is consumed, else once a lot piled up.
        pos = self._pos
        if pos:
            buf = self._buf
            if pos >= len(buf):
                self._buf = b""
                self._slow_until = self._pos = 0
            elif pos > 65536 and type(buf) is bytearray:
                del buf[:pos]
                self._slow_until = max(0, self._slow_until - pos)
                self._pos = 0

    def _canonical(self, buf: bytes, pos: int, end: int) -> int:
        """Parse complete requests of the canonical form from ``pos``: ``*N\\r\\n`` then N
        times ``$L\\r\\n`` + L bytes + ``\\r\\n``, counts in plain digits (no sign, no leading
        zero), at most 1,024 arguments of at most 64 KiB (and proto-max-bulk-len). Returns where
        the first request not of that form (or not complete) starts: that one and the rest
        go to the general parsers. The compiled build's path for everyday requests: in C
        loops it costs less than a hiredis round trip and its checks."""
        ready = self._ready
        raws = self._raws
        if raws is not None and len(raws) < len(ready):
            raws.extend([b""] * (len(ready) - len(raws)))  # taken by the other parsers
        max_bulk = min(self.max_bulk_len, _CANON_MAX_BULK)
        max_count = min(self.max_multibulk_len, _CANON_MAX_COUNT)
        while pos + 3 < end and buf[pos] == 42:
            i = pos + 1
            ch = buf[i]
            if ch < 49 or ch > 57:
                return pos
            count = ch - 48
            i += 1
            while i < end and 48 <= (ch := buf[i]) <= 57 and count <= max_count:
                count = count * 10 + ch - 48
                i += 1
            if count > max_count or i + 1 >= end or buf[i] != 13 or buf[i + 1] != 10:
                return pos
            i += 2
            argv: list[bytes] = []
            while count:
                if i + 1 >= end or buf[i] != 36:
                    return pos
                ch = buf[i + 1]
                i += 2
                if ch == 48:
                    size = 0
                elif 49 <= ch <= 57:
                    size = ch - 48
                    while i < end and 48 <= (ch := buf[i]) <= 57 and size <= max_bulk:
                        size = size * 10 + ch - 48
                        i += 1
                else:
                    return pos
                if size > max_bulk or i + 1 >= end or buf[i] != 13 or buf[i + 1] != 10:
                    return pos
                i += 2
                stop = i + size
                if stop + 1 >= end or buf[stop] != 13 or buf[stop + 1] != 10:
                    return pos
                argv.append(buf[i:stop])
                i = stop + 2
                count -= 1
            ready.append(argv)
            if raws is not None:
                raws.append(buf[pos:i])
            pos = i
        return pos

    def _fast(self, buf: bytes | bytearray, pos: int, stop: int) -> bool:
        """Parse the span [pos, stop) with hiredis; False (nothing consumed) if not trusted."""
        span = buf if pos == 0 and stop == len(buf) else buf[pos:stop]
        suspect = len(span.translate(None, _UNSAFE_TYPE_BYTES)) != stop - pos
        unsafe = suspect and _HIREDIS_UNSAFE.search(buf, pos, stop) is not None
        big = _BIG_COUNT.search(buf, pos, stop) is not None  # rare: the loop below only then
        if unsafe or (big and _claims_more_than_held(buf, pos, stop)):
            self._slow_until = stop
            return False
        reader = _hiredis[0]
        out: list[list[bytes]] = []
        append = out.append
        join = b"".join
        gets = reader.gets
        empty = 0
        try:
            reader.feed(buf, pos, stop - pos)  # type: ignore[arg-type]  # any buffer works
            got = gets()
            while got is not False:
                if type(got) is not list:
                    raise TypeError
                join(got)  # TypeError unless every argument is bytes
                if got:  # "*0\r\n" is skipped, as Redis does
                    append(got)
                else:
                    empty += 1
                got = gets()
            reader.feed(_PROBE)
            if gets() != []:
                raise TypeError
            if suspect and _encoded_len(out, empty) != stop - pos:
                # A type byte right after a payload's two unchecked bytes ("$3\r\nSETxx+k"):
                # hiredis takes it as an element, Redis wants '$' there.
                raise TypeError
            if stop - pos >= self._span_check_bytes:
                for argv in out:
                    if len(argv) > self.max_multibulk_len or max(map(len, argv)) > self.max_bulk_len:
                        raise TypeError
        except _HIREDIS_FAILURES:
            _hiredis[0] = hiredis.Reader()
            self._slow_until = stop
            return False
        except BaseException:
            _hiredis[0] = hiredis.Reader()  # never left holding part of a request
            raise
        self._pos = stop
        self._ready += out
        return True

    def _slow_inline(self) -> list[bytes] | None:
        buf = self._buf
        pos = self._pos
        nl = buf.find(b"\n", pos)
        if nl < 0 or buf.find(b"\0", pos, nl) >= 0:  # C strchr stops at a NUL byte
            if len(buf) - pos > self.max_inline_len:
                raise ProtocolError(ERR_INLINE_TOO_BIG)
            return None
        line_end = nl - 1 if nl > pos and buf[nl - 1] == 13 else nl
        argv = split_args(bytes(buf[pos:line_end]))
        if argv is None:
            raise ProtocolError(ERR_UNBALANCED_QUOTES)
        self._pos = nl + 1
        return argv

    def _header_end(self, buf: bytes | bytearray, pos: int, error: str) -> int:
        """Where a header line starting at pos ends ('\\r'), as Redis finds it; -1 = wait."""
        cr = buf.find(b"\r", pos)
        if cr >= 0 and buf.find(b"\0", pos, cr) < 0:  # C strchr stops at a NUL byte
            # Redis also needs the byte after '\r' (it skips it unseen).
            return cr if cr + 1 < len(buf) else -1
        if len(buf) - pos > self.max_inline_len:
            raise ProtocolError(error)
        return -1

    def _slow_multibulk(self) -> list[bytes] | None:
        """Exact multibulk parser: a request, ``[]`` (skipped), or None (more bytes needed)."""
        buf = self._buf
        pos = self._pos
        if not self._mb_left:
            cr = self._header_end(buf, pos, ERR_MBULK_COUNT_TOO_BIG)
            if cr < 0:
                return None
            count = string2ll(bytes(buf[pos + 1 : cr]))
            if count is None or count > self.max_multibulk_len:
                raise ProtocolError(ERR_MULTIBULK_LEN)
            self._pos = cr + 2
            if count <= 0:
                return []
            self._mb_left = count
            self._mb_args = []
            pos = cr + 2
        args = self._mb_args
        left = self._mb_left
        n = self._bulk_len
        end = len(buf)
        find = buf.find
        copy = type(buf) is bytearray
        max_bulk = self.max_bulk_len
        while left:
            if n < 0:
                # Common case inline: "$<digits>\r?" with no leading zero and within limits.
                cr = find(b"\r", pos)
                h = buf[pos + 1 : cr]
                if (
                    pos < cr < end - 1 and buf[pos] == 36 and h.isdigit() and len(h) < 19
                    and (h[0] != 48 or len(h) == 1) and int(h) <= max_bulk
                ):
                    n = int(h)
                    pos = cr + 2
                else:
                    n = self._bulk_header(buf, pos)
                    if n < 0:
                        break
                    pos = find(b"\r", pos) + 2
            if end - pos < n + 2:
                if n >= PROTO_MBULK_BIG_ARG:
                    self._pos = end
                    self._mb_left = left
                    self._bulk_len = n
                    self._start_big(bytes(buf[pos:]), n)
                    return None
                break
            args.append(bytes(buf[pos : pos + n]) if copy else buf[pos : pos + n])  # type: ignore[arg-type]
            pos += n + 2  # the two bytes after the payload are not checked (as Redis)
            n = -1
            left -= 1
        self._pos = pos
        self._mb_left = left
        self._bulk_len = n
        if left:
            return None
        self._mb_args = []
        return args

    def _bulk_header(self, buf: bytes | bytearray, pos: int) -> int:
        """The exact path for a bulk header at pos: its length, -1 to wait, or raise."""
        cr = self._header_end(buf, pos, ERR_BULK_COUNT_TOO_BIG)
        if cr < 0:
            return -1
        if buf[pos] != 36:
            raise _expected_dollar(buf[pos])
        n = string2ll(bytes(buf[pos + 1 : cr]))
        if n is None or n < 0 or n > self.max_bulk_len:
            raise ProtocolError(ERR_BULK_LEN)
        return n

    def _start_big(self, head: bytes, n: int) -> None:
        self._big = []
        self._big_left = n
        self._skip_left = 0
        self._feed_big(head)

    def _feed_big(self, data: bytes | bytearray | memoryview) -> bytes | bytearray | memoryview:
        """Take a big argument's payload (and the two bytes after it) from data; the rest back."""
        if not data:
            return data
        take = min(len(data), self._big_left)
        if take:
            whole = take == len(data) and type(data) is bytes
            self._big.append(data if whole else bytes(data[:take]))  # type: ignore[arg-type]
            self._big_left -= take
            data = data[take:]
            if self._big_left:
                return b""
            big = self._big
            self._mb_args.append(big[0] if len(big) == 1 else b"".join(big))
            self._big = []
            self._skip_left = 2
        skip = min(len(data), self._skip_left)
        self._skip_left -= skip
        if self._skip_left:
            return b""
        self._bulk_len = -1
        self._mb_left -= 1
        if not self._mb_left:
            self._ready.append(self._mb_args)
            self._mb_args = []
        return data[skip:]


# --------------------------------------------------------------------------------------------
# Reply framer
# --------------------------------------------------------------------------------------------

_LINE, _BULK, _AGG, _MAP, _ATTR = range(5)
# Type byte -> how its frame is delimited.
_FRAME_KIND: dict[int, int] = {
    ord("+"): _LINE, ord("-"): _LINE, ord(":"): _LINE, ord("_"): _LINE, ord(","): _LINE,
    ord("#"): _LINE, ord("("): _LINE,
    ord("$"): _BULK, ord("="): _BULK, ord("!"): _BULK,
    ord("*"): _AGG, ord("~"): _AGG, ord(">"): _AGG,
    ord("%"): _MAP, ord("|"): _ATTR,
}


def _frame_len(buf: bytes, start: int, end: int) -> int:
    """Length field of a header line ``buf[start:end]``; -1 for a null; raises if malformed."""
    digits = buf[start:end]
    if digits.isdigit():
        return int(digits)
    if digits == b"-1":
        return -1
    raise ProtocolError(f"Protocol error: bad length {digits[:32]!r} in reply")


# Compiled (mypyc), ``frames`` cuts the commonest replies byte by byte (41 ns a frame against
# 363 with ``find``, a slice and ``int``); interpreted, that loop is the slower way.
COMPILED: Final = BUILD.compiled and __name__ in BUILD.modules


def _short_frame_end(buf: bytes, pos: i64, end: i64) -> i64:
    """End of the frame at ``pos`` if it is a complete bulk (``$``, up to 18 length digits),
    a null bulk, or a line (``+`` ``-`` ``:``) ended by the first CR in it; else -1, and the
    caller's exact scan decides. The proxy's commonest replies, cut byte by byte (no slice,
    ``find`` or ``int`` per frame: the compiled build's way)."""
    t = buf[pos]
    p = pos + 1
    if t == 36:  # "$"
        if p + 3 < end and buf[p] == 45:  # "$-1\r\n"
            if buf[p + 1] == 49 and buf[p + 2] == 13 and buf[p + 3] == 10:
                return p + 4
            return -1
        n: i64 = 0
        stop = min(end, p + 18)
        while p < stop:
            c = buf[p]
            if c < 48 or c > 57:
                break
            n = n * 10 + (c - 48)
            p += 1
        if p == pos + 1 or p + 1 >= end or buf[p] != 13 or buf[p + 1] != 10:
            return -1
        p += n + 4
        return p if p <= end else -1
    if t == 43 or t == 58 or t == 45:  # "+" ":" "-"
        while p < end:
            if buf[p] == 13:
                if p + 1 < end and buf[p + 1] == 10:
                    return p + 2
                return -1
            p += 1
    return -1


def _flat_aggregate_end(buf: bytes, pos: int, end: int) -> int:
    """End of the ``*``/``~``/``>`` frame at ``pos`` if it is complete and its items are all
    line or bulk items; -1 otherwise (nested, incomplete or malformed: the caller's slow path)."""
    find = buf.find
    e = find(b"\r\n", pos + 1)
    if e < 0:
        return -1
    h = buf[pos + 1 : e]
    if not h.isdigit():
        return e + 2 if h == b"-1" else -1
    n = int(h)
    p = e + 2
    kinds = _FRAME_KIND
    while n:
        if p >= end:
            return -1
        kind = kinds.get(buf[p])
        q = find(b"\r\n", p + 1)
        if q < 0:
            return -1
        if kind == _LINE:
            p = q + 2
        elif kind == _BULK:
            h = buf[p + 1 : q]
            if h.isdigit():
                p = q + int(h) + 4
            elif h == b"-1":
                p = q + 2
            else:
                return -1
            if p > end:
                return -1
        else:
            return -1
        n -= 1
    return p


class ReplyFramer:
    """Split a reply stream into raw frames: ``feed(data)``, ``next_frame()``, ``frames()``.

    A frame is ``(type_byte, raw_bytes)``; aggregates come whole, nested ones included. An
    attribute (``|``) at the top level is a frame of its own, the value it annotates the next.
    Incomplete frames are resumed where the scan stopped, and data fed meanwhile is only
    joined once it can complete the frame, so a big bulk in many chunks costs linear time.
    Garbage raises ``ProtocolError`` once the frames before it have been returned.
    """

    def __init__(self) -> None:
        self._buf = b""
        self._pos = 0
        self._pending: list[bytes] = []  # data fed while a frame was incomplete
        self._pending_len = 0
        self._want = 0  # bytes (from pos) needed before a rescan can progress
        self._resume: tuple[int, int] | None = None  # (scan offset from pos, items still needed)

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if self._pos >= len(self._buf) and not self._pending:
            self._buf = data if type(data) is bytes else bytes(data)
            self._pos = 0
            return
        self._pending.append(bytes(data))
        self._pending_len += len(data)

    def buffered_bytes(self) -> int:
        return len(self._buf) - self._pos + self._pending_len

    def _merge(self) -> bool:
        """Join pending data into the buffer if it can complete something; False if not yet."""
        if len(self._buf) - self._pos + self._pending_len < self._want:
            return False
        self._buf = b"".join([self._buf[self._pos :], *self._pending])
        self._pos = 0
        self._pending = []
        self._pending_len = 0
        return True

    def frames(self) -> list[tuple[int, bytes]]:
        """All complete frames now buffered."""
        out: list[tuple[int, bytes]] = []
        if self._pending and not self._merge():
            return out
        buf = self._buf
        pos = self._pos
        end = len(buf)
        find = buf.find
        kinds = _FRAME_KIND
        # Single-item frames inline: the proxy's hot path (+OK, $3 bar, :1 ...).
        while pos < end and self._resume is None:
            t = buf[pos]
            if COMPILED:
                e = _short_frame_end(buf, pos, end)
                if e >= 0:
                    out.append((t, buf[pos:e]))
                    pos = e
                    continue
            kind = kinds.get(t)
            if kind == _LINE:
                e = find(b"\r\n", pos + 1)
                if e < 0:
                    break
                e += 2
            elif kind == _BULK:
                e = find(b"\r\n", pos + 1)
                if e < 0:
                    break
                h = buf[pos + 1 : e]
                if h.isdigit():
                    e += int(h) + 4
                elif h == b"-1":
                    e += 2
                else:
                    break  # next_frame raises
                if e > end:
                    break
            elif kind == _AGG:
                # Flat aggregates (MGET, KEYS, SCAN's keys…) inline too; anything nested,
                # incomplete or malformed is left to next_frame, which rescans it exactly.
                e = _flat_aggregate_end(buf, pos, end)
                if e < 0:
                    break
            else:
                break
            out.append((t, buf[pos:e]))
            pos = e
        self._pos = pos
        if out:
            self._want = 0
        try:
            while (frame := self.next_frame()) is not None:
                out.append(frame)
        except ProtocolError:
            if not out:
                raise
        return out

    def next_frame(self) -> tuple[int, bytes] | None:
        """One complete frame, or None if more bytes are needed. Raises ProtocolError."""
        if self._pending and not self._merge():
            return None
        buf = self._buf
        pos = self._pos
        end = len(buf)
        if pos >= end:
            return None
        t = buf[pos]
        if self._resume is not None:
            off, need = self._resume
            p = pos + off
        else:
            kind = _FRAME_KIND.get(t)
            if kind is None:
                raise ProtocolError(f"Protocol error: invalid reply type byte {chr(t)!r}")
            p, need = pos, 1
            if kind == _ATTR:  # at the top level an attribute is a frame of its own
                e = buf.find(b"\r\n", pos + 1)
                if e < 0:
                    self._want = end - pos + 1
                    return None
                n = _frame_len(buf, pos + 1, e)
                if n < 0:
                    raise ProtocolError("Protocol error: invalid attribute length in reply")
                p, need = e + 2, 2 * n
        p, need = self._scan(buf, p, need, end)
        if need:
            self._resume = (p - pos, need)
            return None
        self._resume = None
        self._want = 0
        self._pos = p
        return t, buf[pos:p]

    def _scan(self, buf: bytes, p: int, need: int, end: int) -> tuple[int, int]:
        """Advance over ``need`` items from ``p``; returns where it stopped and what is left."""
        kinds = _FRAME_KIND
        find = buf.find
        while need:
            if p >= end:
                break
            kind = kinds.get(buf[p])
            if kind is None:
                raise ProtocolError(f"Protocol error: invalid reply type byte {chr(buf[p])!r}")
            e = find(b"\r\n", p + 1)
            if e < 0:
                break
            if kind == _LINE:
                p = e + 2
                need -= 1
                continue
            h = buf[p + 1 : e]
            if h.isdigit():
                n = int(h)
            elif h == b"-1":
                n = -1
            else:
                raise ProtocolError(f"Protocol error: bad length {h[:32]!r} in reply")
            if kind == _BULK:
                stop = e + n + 4 if n >= 0 else e + 2
                if stop > end:
                    self._want = stop - self._pos
                    return p, need
                p = stop
                need -= 1
            elif kind == _AGG:
                p = e + 2
                need += n - 1 if n > 0 else -1
            elif kind == _MAP:
                p = e + 2
                need += 2 * n - 1 if n > 0 else -1
            else:  # an attribute annotates the next item and does not fill a slot itself
                p = e + 2
                need += 2 * n if n > 0 else 0
        else:
            return p, 0
        self._want = end - self._pos + 1
        return p, need


# --------------------------------------------------------------------------------------------
# Encoders
# --------------------------------------------------------------------------------------------

NULL2 = b"$-1\r\n"
NULL_ARRAY2 = b"*-1\r\n"
NULL3 = b"_\r\n"
OK = b"+OK\r\n"


def _arg_bytes(a: Any) -> bytes:
    if isinstance(a, bytes | bytearray | memoryview):
        return bytes(a)
    if isinstance(a, str):
        return a.encode()
    if isinstance(a, int):
        return b"%d" % a
    if isinstance(a, float):
        return repr(a).encode()
    raise TypeError(f"cannot encode {type(a).__name__} as a command argument")


def encode_command(*args: bytes | str | int | float) -> bytes:
    """A multibulk request."""
    parts = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if type(a) is bytes else _arg_bytes(a)
        parts.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(parts)


def _b(s: str | bytes) -> bytes:
    return s.encode() if isinstance(s, str) else bytes(s)


def simple(s: str | bytes) -> bytes:
    """``+s`` (s must not contain CR or LF)."""
    return b"+" + _b(s) + b"\r\n"


def error(msg: str | bytes) -> bytes:
    """``-msg``, msg with its code (``ERR ...``, ``WRONGTYPE ...``); no CR/LF inside."""
    return b"-" + _b(msg) + b"\r\n"


def integer(n: int) -> bytes:
    return b":%d\r\n" % n


def bulk(b: bytes | str) -> bytes:
    b = _b(b)
    return b"$%d\r\n%s\r\n" % (len(b), b)


def null(proto: int = 2) -> bytes:
    return NULL3 if proto >= 3 else NULL2


def null_array(proto: int = 2) -> bytes:
    return NULL3 if proto >= 3 else NULL_ARRAY2


def array_header(n: int) -> bytes:
    return b"*%d\r\n" % n


def array(items_encoded: Iterable[bytes]) -> bytes:
    items = list(items_encoded)
    return b"*%d\r\n" % len(items) + b"".join(items)


def map_header(n: int, proto: int = 2) -> bytes:
    """``%n`` in RESP3, a flat ``*2n`` array in RESP2 (n = number of pairs)."""
    return b"%%%d\r\n" % n if proto >= 3 else b"*%d\r\n" % (2 * n)


def set_header(n: int, proto: int = 2) -> bytes:
    return b"~%d\r\n" % n if proto >= 3 else b"*%d\r\n" % n


def push_header(n: int, proto: int = 2) -> bytes:
    return b">%d\r\n" % n if proto >= 3 else b"*%d\r\n" % n


def attribute_header(n: int) -> bytes:
    """RESP3 only: ``|n`` followed by n key/value pairs, then the annotated value."""
    return b"|%d\r\n" % n


def format_double(x: float) -> bytes:
    """A double as Redis 7.0 prints it in replies: ``%.17g``, and ``inf``/``-inf``."""
    if math.isinf(x):
        return b"inf" if x > 0 else b"-inf"
    return b"%.17g" % x


def double(x: float, proto: int = 2) -> bytes:
    """``,x`` in RESP3; in RESP2 a bulk string of ``format_double(x)``."""
    s = format_double(x)
    if proto >= 3:
        return b"," + s + b"\r\n"
    return b"$%d\r\n%s\r\n" % (len(s), s)


def boolean(b: bool, proto: int = 2) -> bytes:
    if proto >= 3:
        return b"#t\r\n" if b else b"#f\r\n"
    return b":1\r\n" if b else b":0\r\n"


def big_number(s: str | bytes | int, proto: int = 2) -> bytes:
    """``(digits`` in RESP3; a bulk string in RESP2 (as Redis' addReplyBigNum)."""
    d = b"%d" % s if isinstance(s, int) else _b(s)
    return b"(" + d + b"\r\n" if proto >= 3 else bulk(d)


def verbatim(text: str | bytes, fmt: str = "txt", proto: int = 2) -> bytes:
    """``=len\\r\\nfmt:text`` in RESP3 (fmt is 3 characters); a plain bulk in RESP2."""
    t = _b(text)
    if proto >= 3:
        body = fmt.encode() + b":" + t
        return b"=%d\r\n%s\r\n" % (len(body), body)
    return bulk(t)


# --------------------------------------------------------------------------------------------
# Long doubles (INCRBYFLOAT, HINCRBYFLOAT)
# --------------------------------------------------------------------------------------------

# x86-64 long double: 64-bit significand. Values are exact Fractions rounded to that grid.
LONG_DOUBLE_MANT_BITS = 64


_DECIMAL_TEXT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
# Beyond these decimal exponents a long double is 0 or overflows (LDBL_MAX ~ 1.19e4932).
_LD_MIN_EXP10 = -4970
_LD_MAX_EXP10 = 4932
# Binary range: values at or above 2**16384 overflow; the subnormal grid is 2**-16445.
_LD_MAX_EXP2 = 16383
_LD_OVERFLOW = Fraction(2) ** (_LD_MAX_EXP2 + 1)
_LD_SUBNORMAL_SCALE_EXP2 = 16445


def to_long_double(v: float | int | str | bytes | Fraction) -> Fraction:
    """``v`` rounded (half to even) to the nearest long double (64-bit significand; below
    2**-16382 the subnormal grid of 2**-16445), exact.

    Text must be plain decimal (``b"10.5"``, ``"-1e3"``, no spaces): anything else raises
    ValueError, a magnitude beyond long double range OverflowError, and values below it give 0.
    Redis rejects those (and inf/nan) with its own error texts; that check is the caller's.
    """
    if isinstance(v, bytes | str):
        text = v.decode("ascii") if isinstance(v, bytes) else v
        if _DECIMAL_TEXT.fullmatch(text) is None:
            raise ValueError(f"not a decimal number: {text[:40]!r}")
        d = Decimal(text)
        if d and d.adjusted() > _LD_MAX_EXP10:
            raise OverflowError("long double overflow")
        if d.adjusted() < _LD_MIN_EXP10:
            return Fraction(0)
        f = Fraction(d)
    else:
        f = Fraction(v)
    if f == 0:
        return f
    sign = -1 if f < 0 else 1
    a = abs(f)
    exp = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** exp > a:
        exp -= 1
    # a in [2**exp, 2**(exp+1)): keep LONG_DOUBLE_MANT_BITS bits (fewer when subnormal).
    scale = Fraction(2) ** min(LONG_DOUBLE_MANT_BITS - 1 - exp, _LD_SUBNORMAL_SCALE_EXP2)
    m = round(a * scale)  # round() on a Fraction is half to even
    out = Fraction(m) / scale
    if out >= _LD_OVERFLOW:
        raise OverflowError("long double overflow")
    return sign * out


_HEX_TEXT = re.compile(r"([+-]?)0[xX]([0-9a-fA-F]*)(?:\.([0-9a-fA-F]*))?(?:[pP]([+-]?\d+))?")


def parse_long_double(text: str) -> Fraction | float:
    """Redis' string2ld (strtold, then its checks): decimal or hexadecimal text (``0x1.8p3``)
    or inf/infinity, nothing around it. Returns the long double (an exact Fraction), or a
    float infinity. Raises ValueError for anything else, for nan, and where strtold reports a
    range error: a magnitude beyond long double range, or a non-zero value that rounds to 0."""
    body = text[1:] if text[:1] in "+-" else text
    if body.lower() in ("inf", "infinity"):
        return -math.inf if text[:1] == "-" else math.inf
    m = _HEX_TEXT.fullmatch(text)
    if m is None:
        try:
            v = to_long_double(text)
        except OverflowError:
            raise ValueError("long double overflow") from None
        if v == 0 and Decimal(text) != 0:
            raise ValueError("long double underflow")
        return v
    sign, whole, frac, power = m.groups()
    frac = frac or ""
    if not whole and not frac:
        raise ValueError("no digits")
    mant = int(whole + frac or "0", 16)
    exp2 = int(power or "0") - 4 * len(frac)
    if mant == 0:
        return Fraction(0)
    top = mant.bit_length() + exp2  # the value is below 2**top
    if top > _LD_MAX_EXP2 + 1:
        raise ValueError("long double overflow")
    if top < -_LD_SUBNORMAL_SCALE_EXP2 - 1:
        raise ValueError("long double underflow")
    exact = Fraction(mant) * Fraction(2) ** exp2
    try:
        v = to_long_double(-exact if sign == "-" else exact)
    except OverflowError:
        raise ValueError("long double overflow") from None
    if v == 0:
        raise ValueError("long double underflow")
    return v


def format_long_double(x: float | int | str | bytes | Fraction) -> bytes:
    """A long double as Redis prints INCRBYFLOAT results: ``%.17Lf``, trailing zeros and a
    trailing ``.`` removed, ``-0`` as ``0``. ``x`` is first rounded to a long double."""
    if isinstance(x, float) and math.isinf(x):
        return b"inf" if x > 0 else b"-inf"
    v = to_long_double(x)
    q = round(v * 10**17)  # %.17Lf rounds the exact binary value half to even
    sign = "-" if q < 0 or (q == 0 and v < 0) else ""
    # Decimal: no int->str digit limit for the 4000-digit values a long double can hold.
    digits = format(Decimal(abs(q)), "f").rjust(18, "0")
    s = (sign + digits[:-17] + "." + digits[-17:]).rstrip("0").rstrip(".")
    return b"0" if s == "-0" else s.encode()


# --------------------------------------------------------------------------------------------
# Generic encoding (convenience; not for hot paths)
# --------------------------------------------------------------------------------------------


@mypyc_attr(native_class=False)  # a bytes subclass stays a Python class when compiled
class Raw(bytes):
    """Already-encoded RESP, written as is."""


@dataclass(frozen=True)
class RespError:
    """An error reply value; ``message`` includes its code (``ERR ...``)."""

    message: str


@dataclass(frozen=True)
class Verbatim:
    text: bytes
    fmt: str = "txt"


@dataclass(frozen=True)
class Push:
    """An out-of-band push (pub/sub message, invalidation): ``>`` in RESP3, ``*`` in RESP2."""

    items: list[Any]


@dataclass(frozen=True)
class BigNumber:
    digits: str


@dataclass(frozen=True)
class Attribute:
    """RESP3 attribute ``|``: ``pairs`` annotating ``value``. RESP2 drops the attribute."""

    pairs: dict[Any, Any]
    value: Any


def _enc_list(v: Any, proto: int) -> bytes:
    return b"*%d\r\n" % len(v) + b"".join(encode(x, proto) for x in v)


def _enc_map(v: Any, proto: int) -> bytes:
    return map_header(len(v), proto) + b"".join(
        encode(k, proto) + encode(x, proto) for k, x in v.items()
    )


def _enc_set(v: Any, proto: int) -> bytes:
    return set_header(len(v), proto) + b"".join(encode(x, proto) for x in v)


def _enc_push(v: Any, proto: int) -> bytes:
    return push_header(len(v.items), proto) + b"".join(encode(x, proto) for x in v.items)


def _enc_attribute(v: Any, proto: int) -> bytes:
    value = encode(v.value, proto)
    if proto < 3:
        return value
    return attribute_header(len(v.pairs)) + b"".join(
        encode(k, proto) + encode(x, proto) for k, x in v.pairs.items()
    ) + value


_ENCODERS: dict[type, Callable[[Any, int], bytes]] = {
    bytes: lambda v, p: bulk(v),
    bytearray: lambda v, p: bulk(bytes(v)),
    str: lambda v, p: simple(v),
    int: lambda v, p: integer(v),
    bool: boolean,
    float: double,
    type(None): lambda v, p: null(p),
    list: _enc_list,
    tuple: _enc_list,
    dict: _enc_map,
    set: _enc_set,
    frozenset: _enc_set,
    Raw: lambda v, p: bytes(v),
    RespError: lambda v, p: error(v.message),
    Verbatim: lambda v, p: verbatim(v.text, v.fmt, p),
    Push: _enc_push,
    BigNumber: lambda v, p: big_number(v.digits, p),
    Attribute: _enc_attribute,
}


def encode(value: Any, proto: int = 2) -> bytes:
    """Encode a Python value (see the table above) for RESP ``proto`` (2 or 3)."""
    enc = _ENCODERS.get(type(value))
    if enc is None:
        raise TypeError(f"cannot encode {type(value).__name__} as RESP")
    return enc(value, proto)
