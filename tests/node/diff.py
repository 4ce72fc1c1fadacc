"""Differential harness: the same command lines go to our node and to a real redis-server 7.0
over raw sockets; the RAW reply bytes must be identical, errors included.

Adding cases (other engineers: this is all you need)::

    from tests.node.diff import Case, check_cases

    CASES = [
        Case("incr on a string", ["SET k abc", "INCR k"]),
        Case("keys, any order", ["MSET a 1 b 2", ("KEYS *", "sorted")]),
    ]

    @pytest.mark.parametrize("proto", [2, 3])
    def test_mine(diff_pair, proto):
        assert check_cases(diff_pair, CASES, proto) == []

- A case runs on fresh connections after ``FLUSHALL`` on both servers, after ``HELLO 3`` for
  ``proto=3``. A line is shell-quoted as typed in redis-cli (``SET k "a b"``), or a
  ``(line, normalizer)`` pair.
- Normalizers are for replies Redis leaves nondeterministic; each is a named, documented
  function in ``NORMALIZERS`` (add yours there, with the reason). A normalizer gets the raw
  reply bytes and returns what is compared. ``"sorted"``: array elements in sorted order
  (KEYS, SMEMBERS of a hashtable set); ``"pairs"``: map entries sorted by key (CONFIG GET
  with a pattern); ``"libraries"``: FUNCTION LIST's libraries and their functions sorted;
  ``"type"``: only the reply's type byte (a value that
  differs by nature, e.g. TIME); ``"noreply"``: nothing is read (CLIENT REPLY OFF and the
  commands after it; a later reply shows any stray bytes); ``"ttl"``: an integer within 1 of the other side's (clock
  ticks between the two sends); ``"scan"``: a SCAN reply's keys sorted, cursor ignored.
- The ``diff_pair`` fixture (see tests/node/conftest.py) is module scoped: our node and a
  real redis-server, both with ``enable-debug-command yes``.

``check_cases`` returns a list of human-readable mismatches (empty = identical), so one
assertion shows all differences at once.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import hiredis

from slotgate.protocol.resp import ReplyFramer
from tests.support import RawClient

Line = str | tuple[str, str]


@dataclass
class Case:
    """One scenario: command lines run in order on fresh connections after FLUSHALL."""

    name: str
    lines: list[Line]
    setup: list[str] = field(default_factory=list)  # run on both, replies not compared


# -- normalizers ---------------------------------------------------------------------------------
def _parse(raw: bytes) -> object:
    r = hiredis.Reader(notEnoughData=None)
    r.feed(raw)
    return r.gets()


def both(pair: tuple[RawClient, RawClient], *args: str) -> tuple[object, object]:
    """The parsed replies of (ours, real) to the same command."""
    ours, real = pair
    return _parse(ours.call(*args)), _parse(real.call(*args))


def _frames_of_array(raw: bytes) -> list[bytes]:
    """The raw element frames of an array/set reply (one level)."""
    framer = ReplyFramer()
    nl = raw.index(b"\r\n")
    framer.feed(raw[nl + 2 :])
    return [f[1] for f in framer.frames()]


def norm_sorted(raw: bytes) -> bytes:
    """Array/set elements in sorted order: Redis returns hash-table order (KEYS, SMEMBERS)."""
    if raw[:1] not in (b"*", b"~") or raw.startswith((b"*-1", b"*0")):
        return raw
    return raw[: raw.index(b"\r\n") + 2] + b"".join(sorted(_frames_of_array(raw)))


def norm_type(raw: bytes) -> bytes:
    """Only the RESP type byte: the value differs by nature (TIME, run ids, CLIENT ID)."""
    return raw[:1]


def norm_scan(raw: bytes) -> bytes:
    """SCAN-like replies: cursor values are implementation-defined; keys compared sorted."""
    frames = _frames_of_array(raw)
    if len(frames) != 2:
        return raw
    return b"scan:" + norm_sorted(frames[1])


def norm_pairs(raw: bytes) -> bytes:
    """Map (or RESP2 flat key/value array) entries sorted by key: CONFIG GET walks a dict."""
    if raw[:1] not in (b"*", b"%") or raw.startswith((b"*-1", b"*0", b"%0")):
        return raw
    frames = _frames_of_array(raw)
    pairs = sorted(zip(frames[::2], frames[1::2], strict=True))
    return raw[: raw.index(b"\r\n") + 2] + b"".join(k + v for k, v in pairs)


def _header(raw: bytes) -> bytes:
    return raw[: raw.index(b"\r\n") + 2]


def norm_libraries(raw: bytes) -> bytes:
    """FUNCTION LIST: libraries, and the functions of each, sorted. Redis keeps both in
    dicts whose hash seed is drawn per process (the order changes between restarts)."""
    if raw[:1] != b"*" or raw.startswith((b"*-1", b"*0")):
        return raw
    libraries = []
    for lib in _frames_of_array(raw):
        fields = _frames_of_array(lib)
        for i in range(0, len(fields) - 1, 2):
            if fields[i].endswith(b"\r\nfunctions\r\n"):
                fields[i + 1] = norm_sorted(fields[i + 1])
        libraries.append(_header(lib) + b"".join(fields))
    return _header(raw) + b"".join(sorted(libraries))


def _untime(v: object) -> object:
    if isinstance(v, int) and v >= 10**12:
        return "T"
    if isinstance(v, dict):
        return {k: ("I" if k == b"idle" else _untime(x)) for k, x in v.items()}
    if isinstance(v, list):
        if (len(v) == 4 and isinstance(v[0], bytes) and isinstance(v[1], bytes)
                and isinstance(v[2], int) and isinstance(v[3], int)):
            return [v[0], v[1], "I", v[3]]  # an XPENDING entry: id, owner, idle ms, deliveries
        out = [_untime(x) for x in v]
        for i in range(len(out) - 1):
            if out[i] == b"idle":
                out[i + 1] = "I"
        return out
    return v


def norm_stream_times(raw: bytes) -> bytes:
    """Stream replies with clock readings: delivery and seen times (unix ms) and idle times
    differ between two servers by nature; everything else in the reply is compared."""
    return raw[:1] + repr(_untime(_parse(raw))).encode()


NORMALIZERS: dict[str, Callable[[bytes], bytes]] = {
    "times": norm_stream_times,
    "sorted": norm_sorted,
    "libraries": norm_libraries,
    "pairs": norm_pairs,
    "type": norm_type,
    "scan": norm_scan,
}


def _ttl_close(a: bytes, b: bytes) -> bool:
    """TTL/PTTL: both integers within 1 unit... or 50 ms for PTTL-scale values."""
    if a[:1] != b":" or b[:1] != b":":
        return a == b
    x, y = int(a[1:-2]), int(b[1:-2])
    return abs(x - y) <= (1 if max(abs(x), abs(y)) < 10_000 else 100)


# -- running ------------------------------------------------------------------------------------
def split_line(line: str) -> list[bytes]:
    return [w.encode("utf-8", "surrogateescape") for w in shlex.split(line)]


class Pair:
    """Our node and the real server, as ports."""

    def __init__(self, ours_port: int, real_port: int) -> None:
        self.ours_port = ours_port
        self.real_port = real_port

    def connect(self, proto: int = 2) -> tuple[RawClient, RawClient]:
        ours, real = RawClient(self.ours_port), RawClient(self.real_port)
        for conn in (ours, real):
            conn.call("FLUSHALL")
            if proto == 3:
                conn.call("HELLO", "3")
        return ours, real


def compare(ours: RawClient, real: RawClient, argv: list[bytes],
            normalizer: str | None) -> str | None:
    """Send ``argv`` to both; a description of the difference, or None."""
    real.send(*argv)
    ours.send(*argv)
    if normalizer == "noreply":
        return None
    r_reply = real.read()
    o_reply = ours.read()
    if normalizer == "ttl":
        same = _ttl_close(o_reply, r_reply)
    elif normalizer is not None:
        fn = NORMALIZERS[normalizer]
        same = fn(o_reply) == fn(r_reply)
    else:
        same = o_reply == r_reply
    if same:
        return None
    return show_difference(o_reply, r_reply)


def show_difference(ours: bytes, real: bytes) -> str:
    """Both replies around their first differing byte."""
    i = 0
    while i < min(len(ours), len(real)) and ours[i] == real[i]:
        i += 1
    start = max(0, i - 120)
    return (f"(first difference at byte {i})\n      ours={ours[start:start + 300]!r}"
            f"\n      real={real[start:start + 300]!r}")


def run_lines(pair: Pair, lines: Sequence[Line], proto: int = 2,
              setup: Sequence[str] = ()) -> list[str]:
    ours, real = pair.connect(proto)
    problems: list[str] = []
    try:
        for line in setup:
            argv = split_line(line)
            ours.call(*argv)
            real.call(*argv)
        for item in lines:
            text, norm = (item, None) if isinstance(item, str) else item
            diff = compare(ours, real, split_line(text), norm)
            if diff is not None:
                problems.append(f"RESP{proto} {text!r}:\n      {diff}")
    finally:
        ours.close()
        real.close()
    return problems


def check_cases(pair: Pair, cases: Sequence[Case], proto: int = 2) -> list[str]:
    """Run every case; all mismatches as text (empty when identical)."""
    out: list[str] = []
    for case in cases:
        for p in run_lines(pair, case.lines, proto, case.setup):
            out.append(f"[{case.name}] {p}")
    return out


# Generated sequences: the normalizer each command needs (by lower-case name).
NORMALIZER_BY_COMMAND: dict[bytes, str] = {
    b"ttl": "ttl", b"pttl": "ttl", b"expiretime": "ttl", b"pexpiretime": "ttl",
    b"keys": "sorted", b"smembers": "sorted", b"sinter": "sorted", b"sunion": "sorted",
    b"sdiff": "sorted", b"xpending": "times", b"xinfo": "times",
}
_TIME_DEPENDENT = frozenset({b"ttl", b"pttl", b"expiretime", b"pexpiretime"})


def _close(a: object, b: object) -> bool:
    """Structural equality with ttl-like tolerance on integers (EXEC of TTL commands)."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, int) and isinstance(b, int) and not isinstance(a, bool):
        return abs(a - b) <= (1 if max(abs(a), abs(b)) < 10_000 else 100)
    if isinstance(a, Exception) and isinstance(b, Exception):  # hiredis ReplyError
        return type(a) is type(b) and str(a) == str(b)
    return a == b


def run_argvs(pair: Pair, argvs: Sequence[list[bytes]], proto: int = 2) -> list[str]:
    """Like ``run_lines`` for already-split argvs (generated sequences), with
    ``NORMALIZER_BY_COMMAND`` applied; stops at 20 differences."""
    ours, real = pair.connect(proto)
    problems: list[str] = []
    queued: list[bytes] = []
    in_multi = False
    try:
        for argv in argvs:
            name = argv[0].lower()
            norm = NORMALIZER_BY_COMMAND.get(name)
            if in_multi and norm in ("sorted", "times"):
                continue  # its unordered reply would sit inside EXEC's array: not comparable
            diff = None
            if name == b"exec" and _TIME_DEPENDENT.intersection(queued):
                real.send(*argv)
                ours.send(*argv)
                r_reply, o_reply = real.read(), ours.read()
                if not _close(_parse(o_reply), _parse(r_reply)):
                    diff = show_difference(o_reply, r_reply)
            else:
                diff = compare(ours, real, argv, None if in_multi else norm)
            if name == b"multi":
                in_multi, queued = True, []
            elif name in (b"exec", b"discard"):
                in_multi, queued = False, []
            elif in_multi:
                queued.append(name)
            if diff is not None:
                problems.append(f"RESP{proto} {argv!r}:\n      {diff}")
                if len(problems) >= 20:
                    break
    finally:
        ours.close()
        real.close()
    return problems
