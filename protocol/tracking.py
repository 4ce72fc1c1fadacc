"""CLIENT TRACKING / CACHING / TRACKINGINFO: arguments, checks and replies, as Redis 7.0.

Both the node (node/commands/clients.py) and the proxy (proxy/front/tracking.py) keep a
tracking table of their own; what a client sends and is answered is the same, so it lives
here once. Checks run in Redis' order (clientCommand's TRACKING branch) with its texts.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Protocol

from slotgate.protocol.resp import array_header, bulk, integer, map_header, set_header

SYNTAX = "ERR syntax error"
CACHING_NOT_TRACKING = ("ERR CLIENT CACHING can be called only when the client is in tracking "
                        "mode with OPTIN or OPTOUT mode enabled")
CACHING_YES_NOT_OPTIN = "ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode."
CACHING_NO_NOT_OPTOUT = "ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode."
REDIRECT_ONE = "ERR A client can only redirect to a single other client"
REDIRECT_MISSING = "ERR The client ID you want redirect to does not exist"
PREFIX_NEEDS_BCAST = "ERR PREFIX option requires BCAST mode to be enabled"
SWITCH_BCAST = ("ERR You can't switch BCAST mode on/off before disabling tracking for this "
                "client, and then re-enabling it with a different mode.")
BCAST_OPTS = "ERR OPTIN and OPTOUT are not compatible with BCAST"
OPTIN_AND_OPTOUT = "ERR You can't specify both OPTIN mode and OPTOUT mode"
SWITCH_OPT = ("ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this "
              "client, and then re-enabling it with a different mode.")
PREFIX_OVERLAP_EXISTING = ("ERR Prefix '%s' overlaps with an existing prefix '%s'. "
                           "Prefixes for a single client must not overlap.")
PREFIX_OVERLAP_GIVEN = ("ERR Prefix '%s' overlaps with another provided prefix '%s'. "
                        "Prefixes for a single client must not overlap.")


class TrackingError(Exception):
    """``str(e)`` is Redis' error text (without the leading ``-``)."""


class State(Protocol):
    """A tracking client's state, as the checks and TRACKINGINFO read it."""

    @property
    def bcast(self) -> bool: ...
    @property
    def optin(self) -> bool: ...
    @property
    def optout(self) -> bool: ...
    @property
    def noloop(self) -> bool: ...
    @property
    def caching(self) -> bool: ...
    @property
    def broken_redirect(self) -> bool: ...
    @property
    def redirect(self) -> int: ...
    @property
    def prefixes(self) -> Collection[bytes]: ...


@dataclass
class Options:
    """CLIENT TRACKING's arguments once checked: ``on`` False is TRACKING OFF."""

    on: bool
    redirect: int = 0
    bcast: bool = False
    optin: bool = False
    optout: bool = False
    noloop: bool = False
    prefixes: list[bytes] = field(default_factory=list)


def _text(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


def parse(argv: list[bytes], parse_int: Callable[[bytes], int],
          redirect_exists: Callable[[int], bool], st: State | None) -> Options:
    """CLIENT TRACKING ON|OFF [REDIRECT id] [PREFIX p ...] [BCAST] [OPTIN] [OPTOUT] [NOLOOP],
    for a client whose current state is ``st`` (None: not tracking). Raises
    ``TrackingError`` (``parse_int`` raises its own error for a bad id)."""
    o = Options(on=False)
    j, n = 3, len(argv)
    while j < n:
        opt = argv[j].lower()
        more = j + 1 < n
        if opt == b"redirect" and more:
            j += 1
            if o.redirect != 0:
                raise TrackingError(REDIRECT_ONE)
            o.redirect = parse_int(argv[j])
            if not redirect_exists(o.redirect):
                raise TrackingError(REDIRECT_MISSING)
        elif opt in (b"bcast", b"optin", b"optout", b"noloop"):
            setattr(o, opt.decode(), True)
        elif opt == b"prefix" and more:
            j += 1
            o.prefixes.append(argv[j])
        else:
            raise TrackingError(SYNTAX)
        j += 1
    mode = argv[2].lower()
    if mode == b"off":
        return o
    if mode != b"on":
        raise TrackingError(SYNTAX)
    o.on = True
    if not o.bcast and o.prefixes:
        raise TrackingError(PREFIX_NEEDS_BCAST)
    if st is not None and st.bcast != o.bcast:
        raise TrackingError(SWITCH_BCAST)
    if o.bcast and (o.optin or o.optout):
        raise TrackingError(BCAST_OPTS)
    if o.optin and o.optout:
        raise TrackingError(OPTIN_AND_OPTOUT)
    if st is not None and ((o.optin and st.optout) or (o.optout and st.optin)):
        raise TrackingError(SWITCH_OPT)
    if o.bcast:
        _check_prefixes(sorted(st.prefixes) if st is not None else [], o.prefixes)
    return o


def _check_prefixes(existing: list[bytes], prefixes: list[bytes]) -> None:
    """checkPrefixCollisionsOrReply: no prefix may be a prefix of another."""
    for i, p in enumerate(prefixes):
        for old in existing:
            if old.startswith(p) or p.startswith(old):
                raise TrackingError(PREFIX_OVERLAP_EXISTING % (_text(p), _text(old)))
        for other in prefixes[i + 1:]:
            if other.startswith(p) or p.startswith(other):
                raise TrackingError(PREFIX_OVERLAP_GIVEN % (_text(p), _text(other)))


def check_caching(st: State | None, arg: bytes) -> None:
    """CLIENT CACHING YES|NO is allowed for this client (raises ``TrackingError``)."""
    if st is None:
        raise TrackingError(CACHING_NOT_TRACKING)
    opt = arg.lower()
    if opt == b"yes":
        if not st.optin:
            raise TrackingError(CACHING_YES_NOT_OPTIN)
    elif opt == b"no":
        if not st.optout:
            raise TrackingError(CACHING_NO_NOT_OPTOUT)
    else:
        raise TrackingError(SYNTAX)


def info_flags(st: State | None) -> list[bytes]:
    """TRACKINGINFO's flags, in Redis' order."""
    if st is None:
        return [b"off"]
    flags = [b"on"]
    if st.bcast:
        flags.append(b"bcast")
    for mode_on, mode, caching in ((st.optin, b"optin", b"caching-yes"),
                                   (st.optout, b"optout", b"caching-no")):
        if mode_on:
            flags.append(mode)
            if st.caching:
                flags.append(caching)
    if st.noloop:
        flags.append(b"noloop")
    if st.broken_redirect:
        flags.append(b"broken_redirect")
    return flags


def info_reply(st: State | None, proto: int) -> bytes:
    """CLIENT TRACKINGINFO's reply."""
    flags = info_flags(st)
    prefixes = sorted(st.prefixes) if st is not None else []
    return (
        map_header(3, proto)
        + bulk(b"flags") + set_header(len(flags), proto) + b"".join(bulk(f) for f in flags)
        + bulk(b"redirect") + integer(-1 if st is None else st.redirect)
        + bulk(b"prefixes") + array_header(len(prefixes)) + b"".join(bulk(p) for p in prefixes)
    )
