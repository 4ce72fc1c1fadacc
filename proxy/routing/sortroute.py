"""SORT / SORT_RO with BY and GET patterns: the proxy fetches what they name and sorts.

A cluster node refuses ``BY <pattern with *>`` and every ``GET`` (the keys they name live in
any slot). The proxy sees every shard, so such a SORT runs here (``protocol/sort.py`` is the
pure part: options, the targets a pattern names, the order), once the client's earlier
requests are answered:

    1. the collection   ``MULTI; TYPE k; SORT k BY nosort; EXEC`` on the key's master: its
                        kind and its elements in its own order (WRONGTYPE is the node's).
    2. BY               each element's BY target read where it lives: per slot one
                        ``MGET <string keys>`` and ``HGET k f`` per hash field (a key of
                        another type: missing, as lookupKeyByPattern has it); one master's
                        slots pipelined in one round trip, masters in parallel; a slot whose
                        reads failed there (it moved) again, as ``MULTI … EXEC``, through the
                        redirect loop. Then the sort.
    3. GET              the same for the GET targets of the chosen elements (LIMIT applied).
    4. reply / STORE    the array; or ``MULTI; DEL dest; RPUSH dest …; EXEC`` on the
                        destination's master (nil GET values stored as empty strings; an empty
                        result only deletes dest), replying the count.

Not atomic across shards: each slot is read at its own instant, so a client writing the
pattern keys meanwhile may see a SORT that mixes values from before and after its writes.
A user whose ACL does not let it read every key gets Redis' refusal of the patterns.
SORT without patterns is not handled here (``gather.py`` forwards it, or runs it next to its
STORE destination).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING

import hiredis
import trio

from slotgate.protocol import sort as sortcore
from slotgate.protocol.commands import CommandInfo
from slotgate.protocol.glob import glob_match
from slotgate.protocol.resp import array_header, bulk, encode_command, integer, null
from slotgate.protocol.slots import key_slot
from slotgate.proxy.backend.connections import BackendError, DirectConnection
from slotgate.proxy.front.pinned import _direct, _on_owner, after_writes, write_on_owner
from slotgate.proxy.routing.redirect import error_frame

if TYPE_CHECKING:
    from slotgate.proxy.front.routes import RouteSession

HANDLED: frozenset[str] = frozenset({"sort", "sort_ro"})
_KINDS = {b"list", b"set", b"zset"}
_MULTI = encode_command(b"MULTI")
_EXEC = encode_command(b"EXEC")
_RPUSH_CHUNK = 1000  # elements per RPUSH of a STORE

Values = dict[sortcore.Target, bytes | None]


def route(s: RouteSession, argv: list[bytes],
          info: CommandInfo) -> tuple[bool, Awaitable[None] | None]:
    """``(False, None)`` when a node answers the SORT as a standalone server would (no BY/GET
    pattern; the caller routes it as before); else ``(True, pending)``: answered here, the
    session held until ``pending`` (if any) ends."""
    readonly = info.name == "sort_ro"
    user = s.login.user
    full = user.unrestricted or user.reads_every_key(info, argv, glob_match)
    args = sortcore.parse(argv, readonly, reads_every_key=full)
    if isinstance(args, str):
        if sortcore.parse(argv, readonly, cluster=True, reads_every_key=full) == args:
            return False, None  # the node answers the same error
        s.reply(info.name, error_frame(args))  # not its refusal of a BY/GET met first
        return True, None
    if not args.needs_lookups:
        return False, None
    if args.store is not None:
        s.last_write_slot = key_slot(args.store)  # WAIT waits there (proxy/front/wait.py)
    return True, _run(s, argv[1], args, s.new_slot(info.name))


async def _run(s: RouteSession, key: bytes, args: sortcore.SortArgs,
               reply_slot: Callable[[bytes], None]) -> None:
    await s.wait_idle()
    reply_slot(await run_sort(s, key, args))


def _decode(raw: bytes) -> object:
    reader = hiredis.Reader()
    reader.feed(raw)
    return reader.gets()


async def run_sort(s: RouteSession, key: bytes, args: sortcore.SortArgs) -> bytes:
    """Steps 1 to 4: the client's reply."""
    payload = _MULTI + encode_command(b"TYPE", key) + \
        encode_command(b"SORT", key, b"BY", b"nosort") + _EXEC
    raw = await _on_owner(s, key_slot(key), payload, 4, True, partial(_direct, s))
    got = _decode(raw)
    if not isinstance(got, list):
        return raw  # the router's error, EXECABORT
    kind, elements = got
    if isinstance(elements, hiredis.ReplyError):
        return error_frame(str(elements))
    kind = kind if kind in _KINDS else b"list"  # none: an empty list
    args = sortcore.effective(args, kind)
    by_values = None
    if args.sortby is not None and not args.dontsort:
        targets = [sortcore.pattern_target(args.sortby, e) for e in elements]
        fetched = await _fetch(s, targets)
        if isinstance(fetched, bytes):
            return fetched
        by_values = [_value(t, e, fetched) for t, e in zip(targets, elements, strict=True)]
    chosen = sortcore.order(args, kind, elements, by_values)
    if isinstance(chosen, str):
        return error_frame(chosen)
    values: list[bytes | None] = list(chosen)
    if args.gets:
        targets = [sortcore.pattern_target(p, e) for e in chosen for p in args.gets]
        fetched = await _fetch(s, targets)
        if isinstance(fetched, bytes):
            return fetched
        elems = [e for e in chosen for _ in args.gets]
        values = [_value(t, e, fetched) for t, e in zip(targets, elems, strict=True)]
    if args.store is None:
        nil = null(s.proto)
        return array_header(len(values)) + b"".join(
            nil if v is None else bulk(v) for v in values)
    return await _store(s, args.store, [b"" if v is None else v for v in values])


def _value(target: sortcore.Target | str | None, element: bytes, fetched: Values) -> bytes | None:
    if target is None:
        return None
    if isinstance(target, str):
        return element  # GET #
    return fetched[target]


async def _fetch(s: RouteSession, targets: list[sortcore.Target | str | None]) -> Values | bytes:
    """The value of each key (and hash field) target; bytes: the error that ended a read."""
    from slotgate.proxy.front.databases import prefixed  # databases imports the routes

    by_slot: dict[int, list[sortcore.Target]] = {}
    for t in dict.fromkeys(targets):
        if isinstance(t, sortcore.Target):
            by_slot.setdefault(key_slot(t.key), []).append(t)
    split = {slot: ([t for t in wanted if t.field is None], [t for t in wanted if t.field])
             for slot, wanted in by_slot.items()}
    out: Values = {}
    failed: list[bytes] = []

    def request(slot: int, tx: bool) -> tuple[bytes, int]:
        """The slot's reads: one MGET, one HGET per field; in ``MULTI … EXEC`` if ``tx``."""
        strings, fields = split[slot]
        parts = []
        if strings:
            parts.append(encode_command(b"MGET", *[prefixed(t.key, s.db) for t in strings]))
        parts.extend(encode_command(b"HGET", prefixed(t.key, s.db), t.field or b"")
                     for t in fields)
        if tx:
            parts = [_MULTI, *parts, _EXEC]
        return b"".join(parts), len(parts)

    def absorb(slot: int, replies: object) -> bool:
        """The reads' replies into ``out``; False: one is an error (a redirect, EXECABORT)."""
        strings, fields = split[slot]
        if not isinstance(replies, list):
            return False
        replies = list(replies)
        if strings:
            mget = replies.pop(0)
            if not isinstance(mget, list):
                return False
            out.update(zip(strings, mget, strict=True))
        for t, v in zip(fields, replies, strict=True):
            if isinstance(v, hiredis.ReplyError):
                if not str(v).startswith("WRONGTYPE"):
                    return False
                v = None  # a key that is not a hash: missing, as lookupKeyByPattern has it
            out[t] = v if isinstance(v, bytes) else None
        return True

    async def read_node(node: str | None, slots: list[int]) -> None:
        # Every slot's reads pipelined in one round trip to the slot map's owner; a slot
        # whose reads failed there (moved meanwhile...) again in a transaction through the
        # redirect loop.
        again = slots
        if node is not None and len(slots) > 1:
            requests = [request(slot, tx=False) for slot in slots]
            try:
                conn = await _direct(s, node)
                with trio.fail_after(s.settings.command_timeout_ms / 1000):
                    frames = await conn.roundtrip(b"".join(p for p, _ in requests),
                                                  sum(n for _, n in requests))
            except (BackendError, OSError, trio.TooSlowError):
                pass
            else:
                again = []
                at = 0
                for slot, (_, n) in zip(slots, requests, strict=True):
                    if not absorb(slot, [_decode(raw) for _, raw in frames[at:at + n]]):
                        again.append(slot)
                    at += n
        for slot in again:
            payload, n = request(slot, tx=True)
            raw = await _on_owner(s, slot, payload, n, True, partial(_direct, s))
            if not absorb(slot, _decode(raw)):
                failed.append(raw)
                return

    by_node: dict[str | None, list[int]] = {}
    for slot in by_slot:
        by_node.setdefault(s.router.topology.owners[slot], []).append(slot)
    async with trio.open_nursery() as nursery:
        for node, slots in by_node.items():
            nursery.start_soon(read_node, node, slots)
    return failed[0] if failed else out


async def _store(s: RouteSession, dest: bytes, values: list[bytes]) -> bytes:
    """The result as a list at ``dest`` (replaced; deleted when empty): the count."""
    parts = [_MULTI, encode_command(b"DEL", dest)]
    for i in range(0, len(values), _RPUSH_CHUNK):
        parts.append(encode_command(b"RPUSH", dest, *values[i:i + _RPUSH_CHUNK]))
    parts.append(_EXEC)
    written: list[DirectConnection | None] = []
    raw = await write_on_owner(s, key_slot(dest), b"".join(parts), len(parts), written)
    got = _decode(raw)
    if not isinstance(got, list):
        return raw
    for v in got:
        if isinstance(v, hiredis.ReplyError):
            return error_frame(str(v))
    return await after_writes(s, written, integer(len(values)))  # the client's write policies
