"""XREAD and XREADGROUP over streams in several slots.

1. read   each run of consecutive keys of one slot (with their IDs) is sent, in the client's
          key order, to the slot's master as ``MULTI; <the command over those streams>;
          EXEC`` (inside a transaction ``BLOCK`` never blocks). Redis checks each stream
          (type, ID) in key order before reading any: the first run answering an error is
          the client's reply, its first error being the first in key order. XREAD's ``$``
          IDs are resolved in the same transaction (``XREVRANGE k + - COUNT 1``: the stream's
          last entry, ``0-0`` when it has none), for step 2.
2. merge  the runs' streams with entries, in the client's order, as one reply (an array of
          [stream, entries] pairs, a map in RESP3); none: the null reply, unless ``BLOCK``:
3. wait   each slot's streams wait at once on a connection of their own to its master
          (``blockmulti.wait_each``), with what is left of ``BLOCK``. When one answers, every
          other wait is ended (``CLIENT UNBLOCK``), and every stream that received entries
          meanwhile is in the reply too, in the client's order: an XREADGROUP's entries with
          ``>`` were delivered (added to the consumer's pending list) by whichever node
          answered, so none is dropped.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, NamedTuple

import trio

from slotgate.protocol.commands import CommandInfo, key_positions
from slotgate.protocol.resp import encode_command
from slotgate.protocol.slots import key_slot
from slotgate.proxy.backend.connections import DirectConnection
from slotgate.proxy.front.pinned import _direct, after_writes, on_owner_at
from slotgate.proxy.routing import blockmulti
from slotgate.proxy.routing.crossslot import is_null
from slotgate.proxy.routing.splitter import array_elements

if TYPE_CHECKING:
    from slotgate.proxy.front.routes import RouteSession

HANDLED: frozenset[str] = frozenset({"xread", "xreadgroup"})
_MULTI = encode_command(b"MULTI")
_EXEC = encode_command(b"EXEC")
_LAST_ID_UNKNOWN = b"$"


class Parsed(NamedTuple):
    """``head`` (the command and its options, up to ``STREAMS`` included), the streams and
    their IDs, and where ``BLOCK``'s value is in ``head`` (None: no BLOCK)."""

    head: list[bytes]
    keys: list[bytes]
    ids: list[bytes]
    block_at: int | None


def parse(argv: list[bytes]) -> Parsed | None:
    positions = key_positions(argv)
    if not positions:
        return None
    first = positions[0]
    n = len(positions)
    block_at = None
    for i in range(1, first - 1):
        if argv[i].lower() == b"block":
            block_at = i + 1
    return Parsed(argv[:first], argv[first:first + n], argv[first + n:first + 2 * n], block_at)


def build(p: Parsed, idx: list[int], block: bytes | None = None) -> bytes:
    head = list(p.head)
    if block is not None and p.block_at is not None:
        head[p.block_at] = block
    return encode_command(*head, *[p.keys[i] for i in idx], *[p.ids[i] for i in idx])


def runs(keys: list[bytes]) -> list[list[int]]:
    """Positions of consecutive keys of one slot."""
    out: list[list[int]] = []
    last = -1
    for i, key in enumerate(keys):
        slot = key_slot(key)
        if out and slot == last:
            out[-1].append(i)
        else:
            out.append([i])
        last = slot
    return out


def pairs(raw: bytes) -> list[tuple[bytes, bytes]]:
    """A reply's (stream name, entries) frames: RESP2 [name, entries] arrays, RESP3 a map."""
    if is_null(raw):
        return []
    if raw[:1] == b"%":
        end = raw.index(b"\r\n")
        flat = array_elements(b"*%d\r\n" % (2 * int(raw[1:end])) + raw[end + 2:])
        return list(zip(flat[0::2], flat[1::2], strict=True))
    out: list[tuple[bytes, bytes]] = []
    for elem in array_elements(raw):
        name, entries = array_elements(elem)
        out.append((name, entries))
    return out


def encode_pairs(found: list[tuple[bytes, bytes]], proto: int) -> bytes:
    if proto == 3:
        return b"%%%d\r\n" % len(found) + b"".join(n + e for n, e in found)
    return b"*%d\r\n" % len(found) + b"".join(b"*2\r\n" + n + e for n, e in found)


def _name(frame: bytes) -> bytes:
    return frame[frame.index(b"\r\n") + 2:-2]


def place(p: Parsed, idx: list[int], raw: bytes) -> list[tuple[int, tuple[bytes, bytes]]]:
    """A reply over the streams at ``idx``, each of its pairs with its stream's position
    (the streams answer in the order they were asked, repeated names included)."""
    out = []
    at = 0
    for pair in pairs(raw):
        name = _name(pair[0])
        while at < len(idx) and p.keys[idx[at]] != name:
            at += 1
        out.append((idx[min(at, len(idx) - 1)], pair))
        at += 1
    return out


def route(s: RouteSession, argv: list[bytes], info: CommandInfo) -> Awaitable[None] | None:
    if info.name not in HANDLED:
        return None
    p = parse(argv)
    if p is None:
        return None
    return _run(s, p, info.name == "xread", s.new_slot(info.name))


async def _run(s: RouteSession, p: Parsed, resolve: bool,
               reply_slot: Callable[[bytes], None]) -> None:
    await s.wait_idle()
    reply_slot(await _serve(s, p, resolve))


async def _serve(s: RouteSession, p: Parsed, resolve: bool) -> bytes:
    started = trio.current_time()
    found: list[tuple[int, tuple[bytes, bytes]]] = []
    ids = list(p.ids)
    null = b""
    delivered: list[DirectConnection | None] = []  # XREADGROUP: where entries were delivered
    for idx in runs(p.keys):
        dollars = [i for i in idx if resolve and p.ids[i] == _LAST_ID_UNKNOWN]
        payload = _MULTI + build(p, idx) + b"".join(
            encode_command(b"XREVRANGE", p.keys[i], b"+", b"-", b"COUNT", b"1")
            for i in dollars) + _EXEC
        raw, node = await on_owner_at(s, key_slot(p.keys[idx[0]]), payload,
                                      3 + len(dollars), resolve, partial(_direct, s))
        if raw[:1] != b"*" or is_null(raw):
            return raw  # the router's error, EXECABORT
        elems = array_elements(raw)
        if elems[0][:1] in (b"-", b"!"):
            return elems[0]
        if not null and is_null(elems[0]):
            null = elems[0]
        elif not resolve and not is_null(elems[0]):
            delivered.append(s.tx.direct.get(node))
        found.extend(place(p, idx, elems[0]))
        for i, last in zip(dollars, elems[1:], strict=True):
            entries = array_elements(last)
            ids[i] = _name(array_elements(entries[0])[0]) if entries else b"0-0"
    if found or p.block_at is None:
        return await after_writes(s, delivered, _reply(s, found, null))
    block_ms = int(p.head[p.block_at])
    left = b"0"
    if block_ms > 0:
        elapsed_ms = int((trio.current_time() - started) * 1000)
        left = b"%d" % max(block_ms - elapsed_ms, 1)
    waiting = p._replace(ids=ids)
    by_slot: dict[int, list[int]] = {}
    for i, key in enumerate(p.keys):
        by_slot.setdefault(key_slot(key), []).append(i)
    parts = [(slot, build(waiting, idx, left)) for slot, idx in by_slot.items()]
    return await blockmulti.wait_each(s, parts, partial(_settle, s, waiting,
                                                       list(by_slot.values())))


def _reply(s: RouteSession, found: list[tuple[int, tuple[bytes, bytes]]], null: bytes) -> bytes:
    if not found:
        return null or (b"_\r\n" if s.proto == 3 else b"*-1\r\n")
    found.sort(key=lambda f: f[0])
    return encode_pairs([pair for _, pair in found], s.proto)


async def _settle(s: RouteSession, p: Parsed, groups: list[list[int]],
                  waiters: list[blockmulti.Waiter], winner: blockmulti.Waiter | None) -> bytes:
    """Every wait's entries (not only the winner's), in the client's order; an error (a
    stream deleted meanwhile, a lost connection) only when no wait brought entries."""
    found: list[tuple[int, tuple[bytes, bytes]]] = []
    error = b""
    delivered: list[DirectConnection | None] = []
    for w, idx in zip(waiters, groups, strict=True):
        raw = w.reply
        if raw is None or is_null(raw):
            continue
        if raw[:1] in (b"-", b"!"):
            error = error or raw
            continue
        found.extend(place(p, idx, raw))
        delivered.append(w.conn)
    if not found and error:
        return error
    reply = _reply(s, found, waiters[0].reply or b"")
    return await after_writes(s, delivered, reply) if p.head[0].lower() == b"xreadgroup" \
        else reply
