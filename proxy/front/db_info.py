"""Numbered databases (``databases: N``): INFO's Keyspace section, one line per database.

The nodes have database 0 only, so their ``db0`` lines count every database's keys. When an
INFO's reply holds the Keyspace section (no argument, ``default``, ``all``, ``everything``,
``keyspace``), the proxy first walks every master's keys (once the client's earlier requests
are answered), then routes the INFO as usual, ``info.merge`` giving that section per database
as Redis formats it::

    db3:keys=2,expires=1,avg_ttl=99874

The walk, per master: ``DBSIZE``, then ``SCAN`` (``COUNT`` ``SCAN_COUNT``) with one
``PTTL`` per returned name in the same round trip, until the cursor is back to 0 or
``WALK_CAP_KEYS`` names were seen. Each name counts in the database its prefix names
(``db_names.py``; no prefix: database 0); ``expires`` counts names with a TTL; ``avg_ttl``
is their mean remaining TTL in ms (Redis' own is an estimate from its expire cycle's
samples). A master with more keys than the cap is counted from the names walked, scaled
by its ``DBSIZE`` (an estimate). A master that cannot be walked leaves the masters' own
Keyspace section in the reply.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING

import trio

from slotgate.protocol.commands import lookup
from slotgate.protocol.resp import encode_command
from slotgate.proxy.backend.connections import BackendError, DirectConnection
from slotgate.proxy.front.db_names import split_name
from slotgate.proxy.front.info import KEYSPACE_LINES
from slotgate.proxy.front.pinned import _direct
from slotgate.proxy.front.routes import ROUTES

if TYPE_CHECKING:
    from slotgate.proxy.front.routes import RouteSession

# Whether an INFO's arguments ask for the Keyspace section.
_WITH_KEYSPACE = frozenset({b"default", b"all", b"everything", b"keyspace"})
SCAN_COUNT = 1000
WALK_CAP_KEYS = 100_000  # per master
_KEPT_MAX = 10_000


def masters(s: RouteSession) -> list[tuple[str, int]]:
    """Every master with one slot it owns, in address order."""
    first: dict[str, int] = {}
    for slot, node in enumerate(s.router.topology.owners):
        if node is not None and node not in first:
            first[node] = slot
    return sorted(first.items())


def wants_keyspace(argv: list[bytes]) -> bool:
    return len(argv) == 1 or any(a.lower() in _WITH_KEYSPACE for a in argv[1:])


def info(s: RouteSession, argv: list[bytes]) -> Awaitable[None] | None:
    """INFO with the Keyspace section: once the client's earlier requests are answered,
    the walk, then INFO routed as usual, ``info.merge`` taking the walk's lines (None: an
    INFO without that section, routed as usual)."""
    if not wants_keyspace(argv):
        return None
    row = lookup(argv)
    assert row is not None

    async def run() -> None:
        await s.wait_idle(0)
        lines = await _keyspace_lines(s)
        if lines is not None:
            if len(KEYSPACE_LINES) >= _KEPT_MAX:  # (left by INFOs that got no masters' reply)
                KEYSPACE_LINES.clear()
            KEYSPACE_LINES[s.id] = lines
        routed = ROUTES[row.route](s, argv, row)
        if routed is not None:
            await routed

    return run()


async def _keyspace_lines(s: RouteSession) -> list[tuple[bytes, bytes]] | None:
    """Redis' Keyspace lines, one per non-empty database (None: a master failed)."""
    totals: dict[int, list[float]] = {}
    for node, _ in masters(s):
        try:
            counted = await walk(await _direct(s, node))
        except (BackendError, OSError, trio.TooSlowError, ValueError):
            return None
        for db, (keys, expires, ttl_sum) in counted.items():
            t = totals.setdefault(db, [0, 0, 0])
            t[0] += keys
            t[1] += expires
            t[2] += ttl_sum
    return [(b"db%d" % db, b"keys=%d,expires=%d,avg_ttl=%d" % (
                round(keys), round(expires), ttl_sum // expires if expires else 0))
            for db, (keys, expires, ttl_sum) in sorted(totals.items()) if round(keys)]


async def walk(conn: DirectConnection, cap_keys: int = WALK_CAP_KEYS,
               scan_count: int = SCAN_COUNT) -> dict[int, list[float]]:
    """Database -> [keys, expires, sum of TTLs in ms] on the master ``conn`` is connected to,
    from at most about ``cap_keys`` names (see the module)."""
    size = _integer((await conn.roundtrip(encode_command(b"DBSIZE"), 1))[0][1])
    counted: dict[int, list[float]] = {}
    seen: set[bytes] = set()
    cursor = b"0"
    while True:
        (_, raw), = await conn.roundtrip(
            encode_command(b"SCAN", cursor, b"COUNT", b"%d" % scan_count), 1)
        cursor, names = _scan_reply(raw)
        names = [n for n in names if n not in seen]
        seen.update(names)
        if names:
            ttls = await conn.roundtrip(b"".join(encode_command(b"PTTL", n) for n in names),
                                        len(names))
            for name, (_, ttl) in zip(names, ttls, strict=True):
                c = counted.setdefault(split_name(name)[0], [0, 0, 0])
                c[0] += 1
                ms = _integer(ttl) if ttl[:1] == b":" else -1
                if ms >= 0:
                    c[1] += 1
                    c[2] += ms
        if cursor == b"0" or len(seen) >= cap_keys:
            break
    if cursor != b"0" and seen and size > len(seen):  # capped: scaled to the master's size
        scale = size / len(seen)
        counted = {db: [v * scale for v in c] for db, c in counted.items()}
    return counted


def _integer(raw: bytes) -> int:
    if raw[:1] != b":":
        raise ValueError(raw)
    return int(raw[1:-2])


def _scan_reply(raw: bytes) -> tuple[bytes, list[bytes]]:
    """SCAN's (next cursor, names) from its raw reply."""
    if raw[:1] != b"*":
        raise ValueError(raw)
    _, cursor_len, cursor, rest = raw.split(b"\r\n", 3)
    count_line, _, rest = rest.partition(b"\r\n")
    names = []
    for _ in range(int(count_line[1:])):
        head, _, rest = rest.partition(b"\r\n")
        n = int(head[1:])
        names.append(rest[:n])
        rest = rest[n + 2:]
    return cursor, names
