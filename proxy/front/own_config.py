"""The proxy's own directives in CONFIG GET / CONFIG SET (Redis' names, the proxy's values).

    CONFIG SET  ─▶ the proxy's own parameters checked and applied here (Redis' errors);
                   any other parameters go on as before (proxy/front/guard.py: every node)
    CONFIG GET  ─▶ only the proxy's own names asked: answered here; else one master answers
                   and the proxy's own names in its reply get the proxy's values

Today's own directives: ``slowlog-log-slower-than`` and ``slowlog-max-len`` (the proxy's
SLOWLOG, proxy/front/slowlog.py); ``latency-monitor-threshold``, ``latency-tracking`` and
``latency-tracking-info-percentiles`` (its LATENCY, proxy/front/latency.py);
``tracking-table-max-keys`` (its CLIENT TRACKING table, proxy/front/tracking.py). A value set here
lasts until the next reload of the config file. A CONFIG SET that mixes the proxy's and the nodes' parameters applies the proxy's first,
then sends the rest to the nodes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import hiredis

from slotgate.protocol.glob import glob_match
from slotgate.protocol.resp import bulk, encode_command, string2ll
from slotgate.proxy import errors
from slotgate.proxy.front import latency
from slotgate.proxy.front.clients import ANSWERED
from slotgate.proxy.routing.redirect import error_frame
from slotgate.proxy.routing.router import Call

if TYPE_CHECKING:
    from slotgate.proxy.front.routes import RouteSession as Session

_LONG_MAX = 2**63 - 1
SET_FAILED = "ERR CONFIG SET failed (possibly related to argument '{name}') - {why}"
NOT_INTEGER = "argument couldn't be parsed into an integer"
OUT_OF_RANGE = "argument must be between {lo} and {hi} inclusive"
DUPLICATE = "duplicate parameter"
YES_NO = "argument must be 'yes' or 'no'"


def _integer(lo: int) -> Callable[[bytes], object]:
    """An integer from ``lo`` up (Redis' errors otherwise)."""
    def parse(raw: bytes) -> object:
        value = string2ll(raw)
        if value is None:
            return Invalid(NOT_INTEGER)
        if value < lo:
            return Invalid(OUT_OF_RANGE.format(lo=lo, hi=_LONG_MAX))
        return value
    return parse


def _yes_no(raw: bytes) -> object:
    word = raw.lower()
    if word not in (b"yes", b"no"):
        return Invalid(YES_NO)
    return word == b"yes"


def _percentiles(raw: bytes) -> object:
    parsed = latency.parse_percentiles(raw.decode("utf-8", "replace"))
    return Invalid(parsed) if isinstance(parsed, str) else tuple(parsed)


class Invalid(str):
    """Why a CONFIG SET value was refused (the text after Redis' prefix)."""


class Directive:
    """One of the proxy's own directives: how its value is parsed (to ``Invalid`` when
    refused), shown and applied."""

    def __init__(self, parse: Callable[[bytes], object], get: Callable[[Session], bytes],
                 put: Callable[[Session, Any], None]) -> None:
        self.parse = parse
        self.get = get
        self.put = put


def _set_slower_than(s: Session, value: int) -> None:
    s.settings.slowlog_log_slower_than_us = value
    s.proxy.slowlog.configure(value, s.proxy.slowlog.max_len)


def _set_max_len(s: Session, value: int) -> None:
    s.settings.slowlog_max_len = value
    s.proxy.slowlog.configure(s.proxy.slowlog.slower_than_us, value)


def _set_latency(s: Session, **changes: Any) -> None:
    for key, value in changes.items():
        setattr(s.settings, key, value)
    lat = s.proxy.latency
    lat.configure(s.settings.latency_monitor_threshold_ms, s.settings.latency_tracking,
                  s.settings.latency_tracking_info_percentiles)


def _set_tracking_max_keys(s: Session, value: int) -> None:
    s.settings.tracking_table_max_keys = value


OWN: dict[bytes, Directive] = {
    b"slowlog-log-slower-than": Directive(_integer(-1),
                                          lambda s: b"%d" % s.proxy.slowlog.slower_than_us,
                                          _set_slower_than),
    b"slowlog-max-len": Directive(_integer(0), lambda s: b"%d" % s.proxy.slowlog.max_len,
                                  _set_max_len),
    b"latency-monitor-threshold": Directive(
        _integer(0), lambda s: b"%d" % s.proxy.latency.threshold_ms,
        lambda s, v: _set_latency(s, latency_monitor_threshold_ms=v)),
    b"latency-tracking": Directive(
        _yes_no, lambda s: b"yes" if s.proxy.latency.tracking else b"no",
        lambda s, v: _set_latency(s, latency_tracking=v)),
    b"latency-tracking-info-percentiles": Directive(
        _percentiles,
        lambda s: " ".join(map(latency.format_percentile, s.proxy.latency.percentiles)).encode(),
        lambda s, v: _set_latency(s, latency_tracking_info_percentiles=v)),
    b"tracking-table-max-keys": Directive(
        _integer(0), lambda s: b"%d" % s.settings.tracking_table_max_keys,
        _set_tracking_max_keys),
}


def config_set(s: Session, argv: list[bytes]) -> tuple[bytes | None, list[bytes]]:
    """(an error frame or None, the CONFIG SET argv of the parameters that are not the
    proxy's). The proxy's own parameters are applied when nothing is wrong."""
    if len(argv) % 2:
        return error_frame(errors.WRONG_ARITY.format(name="config|set")), []
    pairs = list(zip(argv[2::2], argv[3::2], strict=True))
    own: list[tuple[Directive, object]] = []
    rest: list[bytes] = []
    seen: set[bytes] = set()
    for name, raw in pairs:
        key = name.lower()
        shown = name.decode("utf-8", "replace")
        if key in seen:
            return error_frame(SET_FAILED.format(name=shown, why=DUPLICATE)), []
        seen.add(key)
        d = OWN.get(key)
        if d is None:
            rest += [name, raw]
            continue
        value = d.parse(raw)
        if isinstance(value, Invalid):
            return error_frame(SET_FAILED.format(name=shown, why=value)), []
        own.append((d, value))
    for d, value in own:
        d.put(s, value)
    return None, argv[:2] + rest if rest else []


def _own_pairs(s: Session, patterns: list[bytes]) -> list[tuple[bytes, bytes]]:
    return [(name, d.get(s)) for name, d in OWN.items()
            if any(glob_match(p.lower(), name) for p in patterns)]


def _encode(pairs: list[tuple[bytes, bytes]], proto: int) -> bytes:
    head = b"%%%d\r\n" % len(pairs) if proto == 3 else b"*%d\r\n" % (2 * len(pairs))
    return head + b"".join(bulk(k) + bulk(v) for k, v in pairs)


def _node_pairs(raw: bytes) -> list[tuple[bytes, bytes]] | None:
    reader = hiredis.Reader()
    reader.feed(raw)
    parsed: Any = reader.gets()
    if isinstance(parsed, dict):
        return list(parsed.items())
    if isinstance(parsed, list):
        return list(zip(parsed[::2], parsed[1::2], strict=False))
    return None


def config_get(s: Session, argv: list[bytes]) -> bytes:
    """CONFIG GET: the reply frame, or ``ANSWERED`` (clients.py) when a master answers."""
    patterns = argv[2:]
    if all(p.lower() in OWN for p in patterns):
        return _encode(_own_pairs(s, patterns), s.proto)
    slot = s.new_slot("config|get")
    own = _own_pairs(s, patterns)
    proto = s.proto

    def done(raw: bytes) -> None:
        pairs = None if raw[:1] == b"-" else _node_pairs(raw)
        if pairs is None:
            slot(raw)
            return
        pairs = [(k, v) for k, v in pairs if k not in OWN] + own
        slot(_encode(pairs, proto))

    s.router.send(Call(s.router, encode_command(*argv), s.any_slot, True, s.proto, s.id, done))
    return ANSWERED
