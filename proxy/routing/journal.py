"""Moves across slots that no proxy crash loses: each move's journal entry, and its settling.

A move (``sourcefirst.py``) writes its source (step 2), then its destination (step 3).
Between the two the element is in neither key; a proxy process that dies there would lose
it. So step 2's own transaction also writes a *journal entry* in the source's slot (it is
replicated with the source's write, so a failover keeps both or neither)::

    {T}slotgate-journal:<process token>:<n>   a hash: the command (argc, a0, a1 ...), the
                                              source and the destination as step 1 read
                                              them (src, src_ttl, dst, dst_ttl: DUMP, PTTL),
                                              step 3's marker (mark), step 2's (smark)
    {T}slotgate-jlease:<process token>:<n>    its lease: the owner's token, PX ``lease_ms``
    {T}slotgate-jindex                        the slot's index: a set of its entries' names

``T`` is a hash tag of the source's slot. The entry joins its slot's index in the
transaction that writes it and leaves it in every transaction that deletes it. Step 3's marker (``mark``, in the destination's
slot) is the one marker every try of step 3 sets, so that marker says whether step 3 ran.
The owner deletes the entry once the move is settled: after step 3 and its ``WAIT`` (then
the marker), or in the transaction that puts the element back into the source; at once
when step 2 moved nothing. While the move lasts, the owner renews the lease at each try.

A proxy that dies leaves the entry. ``sweep_forever`` (every proxy's first worker, at start
and every ``SWEEP_PERIOD_S``) reads the index of every slot, one pipelined round trip per
master (``SMEMBERS`` of each slot it owns: its cost grows with the slots, not with the
keys; an index member whose entry is gone is removed), and settles each entry whose
lease has ended, having taken the lease itself (``SET … NX`` in a script, only while the
entry exists: two sweepers never settle one entry at once, and none leaves a lease behind
an entry gone; an entry with a live lease is looked at again when it ends):

1. Did step 2 move anything? The command runs again on copies of the source and the
   destination as step 1 read them (made and deleted in one transaction on the source's
   master): its reply is step 2's. Nothing moved: the entry is deleted.
2. Did step 3 run? ``SET mark 0 NX GET`` on the destination's master (the fate check of
   ``moveundo.py``). ``1``: the move is done, the entry is deleted.
3. It did not: step 3 is run now (the same transaction the owner would have sent, under
   ``WATCH`` of the marker), *finishing* the move: the client never had a reply, and the
   move having run is what one server could have done with it. If the destination refuses
   the element now (another type meanwhile, a ``RENAMENX`` target created meanwhile), the
   element is put back into the source instead (``crossslot.put_back``), in one
   transaction with the entry's deletion.

Anything unanswered leaves the entry as it is, for the next sweep; every step above can be
run again. An owner that stalls longer than its lease (``lease_ms``: the retry deadline and
two command timeouts) may find its entry settled by a sweeper meanwhile.

``MSETNX`` across slots has an entry of its own (``msetnxjournal.py``), a string of the first
key's slot that the same sweep settles.

``SLOTGATE_FAULT=kill-after-move-source`` (``kill-after-msetnx-first-slot``) in the
environment at start-up makes the process kill itself (SIGKILL) right after a move's source
write (an ``MSETNX``'s write of its first key's slot): the tests' way to stop a proxy
exactly there. ``SLOTGATE_JOURNAL_SWEEP_S`` (seconds, read at start-up) sets
``SWEEP_PERIOD_S``.
"""

from __future__ import annotations

import logging
import os
import signal
from functools import partial
from typing import TYPE_CHECKING, NamedTuple

import trio

from slotgate.protocol.resp import encode_command
from slotgate.protocol.slots import key_slot
from slotgate.proxy.backend.connections import BackendError, DirectConnection
from slotgate.proxy.front.pinned import _direct, _on_owner
from slotgate.proxy.routing import crossslot, msetnxjournal
from slotgate.proxy.routing.crossslot import Value
from slotgate.proxy.routing.splitter import array_elements

if TYPE_CHECKING:
    from slotgate.proxy.front.routes import RouteSession
    from slotgate.proxy.ops.metrics import ProxyMetrics
    from slotgate.proxy.ops.settings import ProxySettings
    from slotgate.proxy.routing.topology import Topology

log = logging.getLogger(__name__)

JOURNAL_PREFIX = b"slotgate-journal:"
LEASE_PREFIX = b"slotgate-jlease:"
INDEX_NAME = b"slotgate-jindex"
TOKEN = os.urandom(4).hex().encode()
_entries = [0]
_DONE = b"$1\r\n" + crossslot.MARK_DONE + b"\r\n"
_MULTI = encode_command(b"MULTI")
_EXEC = encode_command(b"EXEC")
# Read once, at start-up: a test's way to stop the process between a move's two writes.
FAULT = os.environ.get("SLOTGATE_FAULT", "")
KILL_AFTER_SOURCE = "kill-after-move-source"
KILL_AFTER_FIRST_SLOT = "kill-after-msetnx-first-slot"


def _period_s(text: str) -> float:
    try:
        period_s = float(text)
    except ValueError:
        return 60.0
    return period_s if 0.1 <= period_s <= 86400 else 60.0


# Read once, at start-up: how often every slot's index is read (a test shortens it).
SWEEP_PERIOD_S = _period_s(os.environ.get("SLOTGATE_JOURNAL_SWEEP_S", ""))


def fault_point(name: str) -> None:
    if FAULT == name:
        os.kill(os.getpid(), signal.SIGKILL)


class Entry(NamedTuple):
    """A move's journal entry (``name``, ``lease``: the source's slot) and its step 3's
    marker (``mark``: the destination's slot)."""

    name: bytes
    lease: bytes
    mark: bytes


def lease_ms(settings: ProxySettings) -> int:
    """How long an entry's lease lasts: longer than one try of a step (the router's retry
    deadline, a command timeout on each side)."""
    return settings.retry_deadline_ms + 2 * settings.command_timeout_ms


def new_entry(src_slot: int, dst_slot: int) -> Entry:
    _entries[0] += 1
    tail = b"%s:%d" % (TOKEN, _entries[0])
    tag = crossslot.tag_for_slot(src_slot)
    return Entry(b"{%s}%s%s" % (tag, JOURNAL_PREFIX, tail),
                 b"{%s}%s%s" % (tag, LEASE_PREFIX, tail), crossslot.marker(dst_slot))


def lease_of(name: bytes) -> bytes:
    return name.replace(JOURNAL_PREFIX, LEASE_PREFIX, 1)


def index_of(name: bytes) -> bytes:
    """The index of the entry ``name``'s slot (its hash tag, then ``INDEX_NAME``)."""
    return name[: name.index(b"}") + 1] + INDEX_NAME


def slot_index(slot: int) -> bytes:
    return b"{%s}%s" % (crossslot.tag_for_slot(slot), INDEX_NAME)


def is_entry(name: bytes) -> bool:
    """Whether ``name`` is a journal entry's (``{T}slotgate-journal:<token>:<n>``, ``T`` the
    tag ``tag_for_slot`` gives its slot), not a client's key that happens to match."""
    head, _, tail = name.partition(b"}" + JOURNAL_PREFIX)
    token, _, n = tail.partition(b":")
    return (head == b"{" + crossslot.tag_for_slot(key_slot(name)) and len(token) == 8
            and n.isdigit())


def open_commands(e: Entry, argv: list[bytes], src: Value, dst: Value, smark: bytes,
                  lease: int) -> list[bytes]:
    """What step 2's transaction adds: the entry, its lease, its place in the index."""
    fields = [b"argc", b"%d" % len(argv)]
    for i, arg in enumerate(argv):
        fields += [b"a%d" % i, arg]
    for field, v in ((b"src", src), (b"dst", dst)):
        if v.payload is not None:
            fields += [field, v.payload, field + b"_ttl", b"%d" % v.ttl_ms]
    fields += [b"mark", e.mark, b"smark", smark]
    return [encode_command(b"HSET", e.name, *fields),
            encode_command(b"SET", e.lease, TOKEN, b"PX", b"%d" % lease),
            encode_command(b"SADD", index_of(e.name), e.name)]


def left_of(e: Entry) -> bytes:
    """Where step 3 keeps what it left of its copy of the source (the marker's slot)."""
    return e.mark + b":left"


def kept(p: crossslot.Plan, e: Entry) -> tuple[bytes, ...]:
    """What step 3's transaction adds: its copy of the source kept (``RENAME``, so that a
    sweep can tell whether the command moved anything; the copy is gone after a ``RENAME``
    that moved it, which the error inside ``EXEC`` says harmlessly)."""
    left = left_of(e)
    return (encode_command(b"RENAME", p.temps[p.written[0]], left),
            encode_command(b"PEXPIRE", left, b"%d" % crossslot.MARK_TTL_MS))


def moved_check(argv: list[bytes], src: Value, e: Entry) -> tuple[bytes, int]:
    """The request (on the destination's master) whose last reply ``step3_moved`` reads:
    what step 3 left of its copy of the source, against the source as step 1 read it."""
    left = left_of(e)
    name = argv[0].lower()
    if name in (b"rename", b"renamenx"):
        return encode_command(b"EXISTS", left), 1
    if name == b"smove":
        return encode_command(b"SISMEMBER", left, argv[3]), 1
    assert src.payload is not None
    copy = left + b":n"
    return (encode_command(b"MULTI")
            + encode_command(b"RESTORE", copy, b"0", src.payload, b"REPLACE")
            + encode_command(b"LLEN", copy) + encode_command(b"DEL", copy)
            + encode_command(b"LLEN", left) + encode_command(b"EXEC")), 6


def step3_moved(argv: list[bytes], raw: bytes) -> bool | None:
    """Whether step 3 (known to have run) moved the element: its copy of the source lost
    it. None: no answer."""
    name = argv[0].lower()
    if name in (b"rename", b"renamenx", b"smove"):
        return raw == b":0\r\n" if raw[:1] == b":" else None
    if raw[:1] != b"*" or crossslot.is_null(raw):
        return None
    _, before, _, after = array_elements(raw)
    return int(after[1:-2]) == int(before[1:-2]) - 1


def close_commands(name: bytes, *more: bytes) -> tuple[bytes, bytes]:
    """The two commands (for one transaction) that delete the entry ``name`` (``more``:
    other keys of its slot, a marker), its lease, its place in the index."""
    return (encode_command(b"DEL", name, lease_of(name), *more),
            encode_command(b"SREM", index_of(name), name))


def close_transaction(name: bytes, *more: bytes) -> tuple[bytes, int]:
    """``close_commands`` in a transaction of their own; its number of replies."""
    return _MULTI + b"".join(close_commands(name, *more)) + _EXEC, 4


# --- the owner's side ------------------------------------------------------------------------
async def close(s: RouteSession, e: Entry, conn: DirectConnection | None, *more: bytes) -> None:
    """The entry deleted, the move being settled (on ``conn`` if given: step 2's). Not
    answered: a sweep deletes it later (it finds the move settled)."""
    payload, n = close_transaction(e.name, *more)
    try:
        if conn is not None and not conn.closed:
            with trio.fail_after(s.settings.command_timeout_ms / 1000):
                await conn.roundtrip(payload, n)
        else:
            await _on_owner(s, key_slot(e.name), payload, n, False, partial(_direct, s))
    except (OSError, BackendError, trio.TooSlowError):
        pass


async def drop_marks(s: RouteSession, slot: int, e: Entry) -> None:
    """Step 3's marker and what it kept, deleted once the entry is (on the client's own
    connection to the slot's master; not answered, they expire)."""
    node = s.router.topology.owners[slot]
    if node is None:
        return
    try:
        conn = await _direct(s, node)
        with trio.fail_after(s.settings.command_timeout_ms / 1000):
            await conn.roundtrip(encode_command(b"DEL", e.mark, left_of(e)), 1)
    except (OSError, BackendError, trio.TooSlowError):
        pass


async def step3_ran_moved(s: RouteSession, slot: int, argv: list[bytes], src: Value,
                          e: Entry) -> bool | None:
    """Step 3 ran (its marker says so) but its reply was lost: did it move the element?"""
    payload, n = moved_check(argv, src, e)
    try:
        raw = await _on_owner(s, slot, payload, n, False, partial(_direct, s))
    except (OSError, BackendError, trio.TooSlowError):
        return None
    return step3_moved(argv, raw)


async def renew(s: RouteSession, e: Entry) -> None:
    """The lease renewed, before another try of a step (not waiting longer than a command
    timeout: the source's master may be failing over)."""
    payload = encode_command(b"PEXPIRE", e.lease, b"%d" % lease_ms(s.settings))
    with trio.move_on_after(s.settings.command_timeout_ms / 1000):
        try:
            await _on_owner(s, key_slot(e.name), payload, 1, False, partial(_direct, s))
        except (OSError, BackendError, trio.TooSlowError):
            pass


# --- the sweeper's side ----------------------------------------------------------------------
class Links:
    """One sweep's connections, by node (RESP2), closed at its end."""

    def __init__(self, settings: ProxySettings, metrics: ProxyMetrics) -> None:
        self.settings, self.metrics = settings, metrics
        self.conns: dict[str, DirectConnection] = {}

    async def call(self, node: str, payload: bytes, n: int) -> list[bytes]:
        conn = self.conns.get(node)
        if conn is None or conn.closed:
            conn = await DirectConnection.open(node, 2, self.settings, self.metrics)
            self.conns[node] = conn
        with trio.fail_after(self.settings.command_timeout_ms / 1000):
            return [raw for _, raw in await conn.roundtrip(payload, n)]

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            for conn in self.conns.values():
                await conn.aclose()
        self.conns.clear()


class _Skip(Exception):
    """Not settled now (no master, an error, a lost reply): the next sweep tries again."""


# KEYS: an entry, its lease. ARGV: token, ms. The lease taken only while the entry exists (a
# sweeper never leaves a lease of its own behind an entry gone): {0, 0} gone, {1, 0} taken,
# {2, ms left} held by another.
_TAKE_SCRIPT = b"""
if redis.call('EXISTS', KEYS[1]) == 0 then return {0, 0} end
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return {1, 0} end
return {2, redis.call('PTTL', KEYS[2])}
"""


def _text(raw: bytes) -> bytes:
    if raw[:1] == b"$":
        return raw[raw.index(b"\r\n") + 2:-2]
    return raw[1:-2]


def _fields(raw: bytes) -> dict[bytes, bytes]:
    items = [_text(f) for f in array_elements(raw)] if raw[:1] == b"*" else []
    return dict(zip(items[::2], items[1::2], strict=True))


def _value(fields: dict[bytes, bytes], name: bytes) -> Value:
    payload = fields.get(name)
    return Value(payload, int(fields.get(name + b"_ttl", b"0")))


async def settle(links: Links, topology: Topology, node: str, name: bytes,
                 lease: int) -> float | None:
    """Settle the entry ``name`` found on ``node``: None done (or gone); else the seconds
    until its live lease ends (it is looked at again then). Raises ``_Skip``."""
    lease_key = lease_of(name)
    got = (await links.call(node, encode_command(
        b"EVAL", _TAKE_SCRIPT, b"2", name, lease_key, TOKEN, b"%d" % lease), 1))[0]
    if got[:1] != b"*":
        raise _Skip(got[:80])
    state, left_ms = (int(f[1:-2]) for f in array_elements(got))
    if state == 0:  # gone (settled meanwhile): its index member too
        await links.call(node, close_commands(name)[1], 1)
        return None
    if state == 2:
        return max(left_ms, 1) / 1000
    raw = (await links.call(node, encode_command(b"HGETALL", name), 1))[0]
    if raw.startswith(b"-WRONGTYPE"):  # a string: an MSETNX's entry
        try:
            await msetnxjournal.settle(links, topology, node, Entry(name, lease_key, b""),
                                       close_commands(name))
        except msetnxjournal.Unsettled as exc:
            raise _Skip(exc.args) from None
        return None
    fields = _fields(raw)
    if b"argc" not in fields:
        if raw[:1] == b"*" and not fields:  # gone (settled meanwhile): its index too
            await links.call(node, b"".join(close_commands(name)), 2)
            return None
        await links.call(node, encode_command(b"DEL", lease_key), 1)
        raise _Skip(raw[:80])
    argv = [fields[b"a%d" % i] for i in range(int(fields[b"argc"]))]
    src_key, mark, smark = argv[1], fields[b"mark"], fields[b"smark"]
    p = crossslot.plan(argv, crossslot.SPECS[argv[0].decode(errors="replace").lower()])
    if p is None:
        raise _Skip(name)
    src, dst = _value(fields, b"src"), _value(fields, b"dst")
    done = close_commands(name, smark)
    # 1. step 2's reply, from the command over copies of what it started from
    scratch = crossslot.scratch(crossslot.mirror(p))
    scratch.written.clear()
    layout = crossslot.run_payload(scratch, {src_key: src, p.anchor_key: dst})
    raw = (await links.call(node, layout.payload, layout.n_replies))[-1]
    if raw[:1] != b"*" or crossslot.is_null(raw):
        raise _Skip(raw)
    reply = array_elements(raw)[layout.command_at]
    if not crossslot.moved(reply):
        await links.call(node, *close_transaction(name, smark))
        return None
    # 2. did step 3 run?
    dst_node = topology.owners[p.anchor_slot]
    if dst_node is None:
        raise _Skip(name)
    e = Entry(name, lease_key, mark)
    drop_marks = encode_command(b"DEL", mark, left_of(e))
    ran = (await links.call(dst_node, crossslot.fate_payload(mark), 1))[0]
    if ran == _DONE:
        # it did; did it move the element (or did the destination refuse it)?
        payload, n = moved_check(argv, src, e)
        moved = step3_moved(argv, (await links.call(dst_node, payload, n))[-1])
        if moved is None:
            raise _Skip(name)
        refused = b"" if moved else b"refused"
    else:
        # 3. it did not: run it now
        layout = crossslot.destination_payload(p, {src_key: src}, mark, kept(p, e))
        raw = (await links.call(dst_node, layout.payload, layout.n_replies))[-1]
        if raw[:1] != b"*" or crossslot.is_null(raw):
            raise _Skip(raw)
        elems = array_elements(raw)
        now = crossslot.first_error(elems[: layout.before_at]) or elems[layout.command_at]
        refused = b"" if now == reply else now
    if refused:  # refused by the destination: back into the source
        back = _MULTI + crossslot.put_back(argv, reply, src) + b"".join(done) + _EXEC
        raw = (await links.call(node, back, 5))[-1]
        if raw[:1] != b"*" or crossslot.is_null(raw):
            raise _Skip(raw)
        log.warning("journal: %r put back into %r (its destination refused it: %r)",
                    argv[0], src_key, refused)
    else:
        await links.call(node, *close_transaction(name, smark))
    await links.call(dst_node, drop_marks, 1)
    return None


# A master's slots -> the SMEMBERS of their indexes, pipelined (the sweep's request).
_listing: dict[tuple[int, ...], bytes] = {}
_LISTINGS_KEPT = 64


async def _listed(links: Links, node: str, slots: list[int]) -> list[bytes]:
    """The entries the indexes of ``slots`` (on their master ``node``) list: one pipelined
    round trip (a slot being migrated answers a redirect: its next owner lists it)."""
    key = tuple(slots)
    payload = _listing.get(key)
    if payload is None:  # a master's slots change rarely: built again only when they do
        payload = b"".join(encode_command(b"SMEMBERS", slot_index(slot)) for slot in slots)
        if len(_listing) >= _LISTINGS_KEPT:
            _listing.clear()
        _listing[key] = payload
    out: list[bytes] = []
    for raw in await links.call(node, payload, len(slots)):
        if raw[:1] == b"*" and raw != b"*0\r\n":
            out += [_text(f) for f in array_elements(raw)]
    return out


async def sweep_forever(settings: ProxySettings, metrics: ProxyMetrics,
                        topology: Topology) -> None:
    """Settle the entries left by proxies that died: at start, then every
    ``SWEEP_PERIOD_S``; an entry whose lease was live, again when the lease ends."""
    while not topology.slot_map.masters:
        await topology.refreshed.wait()
    due: dict[tuple[str, bytes], float] = {}
    next_read = trio.current_time()
    while True:
        now = trio.current_time()
        links = Links(settings, metrics)
        try:
            if now >= next_read:
                next_read = now + SWEEP_PERIOD_S
                by_node: dict[str, list[int]] = {}
                for slot, owner in enumerate(topology.slot_map.owners):
                    if owner is not None:
                        by_node.setdefault(owner, []).append(slot)
                for node, slots in by_node.items():
                    try:
                        for name in await _listed(links, node, slots):
                            if is_entry(name):
                                due.setdefault((node, name), now)
                    except (OSError, BackendError, trio.TooSlowError, ValueError) as exc:
                        log.warning("journal sweep of %s: %r", node, exc)
            for (node, name), at in sorted(due.items(), key=lambda item: item[1]):
                if at > now:
                    continue
                if node not in topology.slot_map.masters:
                    del due[(node, name)]  # the next read finds it on the slot's master
                    continue
                try:
                    left_s = await settle(links, topology, node, name, lease_ms(settings))
                except (OSError, BackendError, trio.TooSlowError, _Skip) as exc:
                    log.warning("journal entry %r on %s not settled yet: %r", name, node, exc)
                    due[(node, name)] = now + 1.0
                    continue
                except (ValueError, KeyError, IndexError, AssertionError):
                    # not an entry this proxy can read (written by hand?): left as it is
                    log.exception("journal entry %r on %s unreadable", name, node)
                    del due[(node, name)]
                    continue
                if left_s is None:
                    del due[(node, name)]
                    log.info("journal entry %r on %s settled", name, node)
                else:
                    due[(node, name)] = now + left_s + 0.05
        finally:
            await links.aclose()
        wake = min([next_read, *due.values()])
        await trio.sleep(max(wake - trio.current_time(), 0.05))
