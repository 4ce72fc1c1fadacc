"""Multi-key commands whose keys span slots, run by a real node on copies: the plan (pure).

Redis Cluster refuses SUNIONSTORE, ZINTER, BITOP, RENAME, LMOVE, MSETNX … over keys of several slots
(``CROSSSLOT``). The proxy sees every shard, so it runs them in three steps
(``gather.py`` does the I/O):

    1. gather   every key outside the *anchor* key's slot is read where it lives:
                ``MULTI PTTL k DUMP k … EXEC``, one transaction per slot (moves: ``WATCH``
                first, on a connection of their own, kept until step 3; MSETNX: every
                key is "moved").
    2. run      on the anchor's master, one transaction: ``MULTI``, ``RESTORE`` of each
                gathered value under a temporary key in the anchor's slot, the client's
                command with its foreign keys renamed to the temporaries, (moves: ``PTTL`` and
                ``DUMP`` of what the command left in the temporaries and of the keys it
                wrote in the anchor's slot), ``DEL`` of the temporaries, ``EXEC``. The
                command's element of EXEC's reply is the client's.
    3. commit   (MSETNX, scripts) each foreign key the command changed is written back on
                its own master, ``MULTI … EXEC`` per slot under the ``WATCH`` of step 1; if
                one fails, what was written is taken back (``Undo``) and the command runs
                again. A move (RENAME, LMOVE …) instead writes its source first
                (``source_payload``), then its destination (``destination_payload``):
                ``sourcefirst.py``.

The anchor is the key the command writes (the destination), else its first key: the result
then lands directly in its real key. Temporaries are named ``{T}slotgate-tmp:<token>:<n>``
where ``T`` is a hash tag of the anchor's slot (``tag_for_slot``), so the node accepts them
beside the anchor in one command. They exist only inside step 2's ``MULTI … EXEC``: created
and deleted by the same transaction, no other client ever sees one, and an interrupted
transaction (proxy crash, lost connection) never runs at all, so none can be left behind.
They carry the source's own TTL (COPY and RENAME keep it, as on one server).

Argument checks, ``WRONGTYPE``, missing keys and empty results are the node's own: the real
command runs, only on copies.
"""

from __future__ import annotations

import os
from binascii import crc_hqx
from dataclasses import dataclass, field
from typing import Final, NamedTuple

from slotgate.protocol.commands import key_positions
from slotgate.protocol.resp import encode_command
from slotgate.protocol.slots import SLOT_COUNT, key_slot


class Spec(NamedTuple):
    """How one command runs across slots: ``anchor``, the index in its key list of the key
    the command runs beside (0 first, -1 last); ``writes``: which of its keys besides the
    anchor the command may change, to be written back in step 3 (``""`` none, ``"first"``
    the first key, a move's source; ``"all"`` every key, MSETNX)."""

    anchor: int
    writes: str = ""


_FIRST = Spec(0)
_LAST = Spec(-1)
_MOVE = Spec(-1, "first")

SPECS: dict[str, Spec] = {
    # Destination first, sources read only.
    **dict.fromkeys(("sunionstore", "sinterstore", "sdiffstore", "zunionstore", "zinterstore",
                     "zdiffstore", "zrangestore", "bitop", "pfmerge", "geosearchstore"), _FIRST),
    # Read only: next to the first key.
    **dict.fromkeys(("sunion", "sinter", "sdiff", "sintercard", "zunion", "zinter", "zdiff",
                     "zintercard", "pfcount", "lcs"), _FIRST),
    # Destination last (STORE / STOREDIST, COPY's target).
    **dict.fromkeys(("georadius", "georadiusbymember", "sort", "copy"), _LAST),
    # Moves: the source (first key) changes too.
    **dict.fromkeys(("rename", "renamenx", "lmove", "rpoplpush", "smove"), _MOVE),
    # Every key may be written.
    "msetnx": Spec(0, "all"),
    # Scripts and functions over their declared KEYS, next to the first one: every declared
    # key the script changed is written back; the read-only forms write nothing.
    **dict.fromkeys(("eval", "evalsha", "fcall"), Spec(0, "all")),
    **dict.fromkeys(("eval_ro", "evalsha_ro", "fcall_ro"), _FIRST),
}
# Routed ``single`` (one slot: forwarded as is); across slots by ``gather.route``.
SCRIPTS = frozenset({"eval", "evalsha", "fcall", "eval_ro", "evalsha_ro", "fcall_ro"})

TEMP_PREFIX = b"slotgate-tmp:"
# A move's *marker*: a key of the slot a step writes, set by that step's own transaction, so
# that the step's fate can always be told afterwards (``moveundo.py``).
MARK_PREFIX = b"slotgate-mark:"
# How long a marker lives if the proxy dies before deleting it (the fate is decided well
# before: within the retry deadline).
MARK_TTL_MS = 600_000
MARK_DONE: Final[bytes] = b"1"  # what a step's transaction writes into its marker
MARK_GIVEN_UP = b"0"  # what the fate check writes into an absent marker
# Distinguishes this process's temporaries (they never outlive one transaction anyway).
_TOKEN = os.urandom(4).hex().encode()
_MULTI = encode_command(b"MULTI")
_EXEC = encode_command(b"EXEC")
_ASKING = encode_command(b"ASKING")
_NULLS = (b"$-1\r\n", b"_\r\n", b"*-1\r\n")

_tags: list[bytes] = []
_marks = [0]


def tag_for_slot(slot: int) -> bytes:
    """A short hash tag whose slot is ``slot`` (the table is built on first use, ~0.1 s)."""
    if not _tags:
        table: list[bytes | None] = [None] * SLOT_COUNT
        left = SLOT_COUNT
        n = 0
        while left:
            tag = b"%x" % n
            s = crc_hqx(tag, 0) & (SLOT_COUNT - 1)
            if table[s] is None:
                table[s] = tag
                left -= 1
            n += 1
        _tags.extend(t for t in table if t is not None)
    return _tags[slot]


def marker(slot: int) -> bytes:
    """A fresh marker key in ``slot``: ``{T}slotgate-mark:<process token>:<n>``."""
    _marks[0] += 1
    return b"{%s}%s%s:%d" % (tag_for_slot(slot), MARK_PREFIX, _TOKEN, _marks[0])


def set_marker(mark: bytes) -> bytes:
    return encode_command(b"SET", mark, MARK_DONE, b"PX", b"%d" % MARK_TTL_MS)


def fate_payload(mark: bytes) -> bytes:
    """The fate check: sets an absent marker to "given up" (so that a step still on its way
    can never run: the marker is under that step's WATCH) and answers what it held before:
    null (or "given up", a check sent again) the step did not run, "done" it ran."""
    return encode_command(b"SET", mark, MARK_GIVEN_UP, b"NX", b"GET", b"PX",
                          b"%d" % MARK_TTL_MS)


@dataclass
class Plan:
    """One cross-slot request: where it runs and which keys are copied there."""

    argv: list[bytes]
    anchor_slot: int
    anchor_key: bytes
    # Foreign key -> its temporary, in the order of the command's keys.
    temps: dict[bytes, bytes] = field(default_factory=dict)
    # Foreign keys by their slot (one gather transaction each).
    by_slot: dict[int, list[bytes]] = field(default_factory=dict)
    # Foreign keys the command may change (moves, MSETNX): written back in step 3.
    written: list[bytes] = field(default_factory=list)
    # Keys in the anchor's slot it may change (moves: the destination; MSETNX: its keys
    # there): read before and after the command, for compensation.
    local_written: list[bytes] = field(default_factory=list)


def plan(argv: list[bytes], spec: Spec) -> Plan | None:
    """The plan, or None when every key is in one slot (the command is forwarded as is)."""
    positions = key_positions(argv)
    if not positions:
        return None
    anchor_slot = key_slot(argv[positions[spec.anchor]])
    tag = tag_for_slot(anchor_slot)
    p = Plan(list(argv), anchor_slot, argv[positions[spec.anchor]])
    for i in positions:
        key = argv[i]
        slot = key_slot(key)
        if slot == anchor_slot:
            continue
        temp = p.temps.get(key)
        if temp is None:
            temp = b"{%s}%s%s:%d" % (tag, TEMP_PREFIX, _TOKEN, len(p.temps))
            p.temps[key] = temp
            p.by_slot.setdefault(slot, []).append(key)
        p.argv[i] = temp
    if not p.temps:
        return None
    if spec.writes == "first":
        if argv[positions[0]] in p.temps:
            p.written.append(argv[positions[0]])
        p.local_written.append(p.anchor_key)
    elif spec.writes == "all":
        p.written.extend(p.temps)
        for i in positions:
            if key_slot(argv[i]) == anchor_slot and argv[i] not in p.local_written:
                p.local_written.append(argv[i])
    return p


def scratch(p: Plan) -> Plan:
    """``p``'s command over copies of all its keys, in the anchor's slot: its anchor-slot
    keys that it may change (``p.local_written``) become the copies read after the command
    (``written``). For ``run_payload`` with the values step 2 started from."""
    tag = tag_for_slot(p.anchor_slot)
    out = Plan(list(p.argv), p.anchor_slot, p.anchor_key)
    copies: dict[bytes, bytes] = {}
    for i in key_positions(p.argv):
        key = p.argv[i]
        original = next((k for k, t in p.temps.items() if t == key), key)
        copy = copies.get(original)
        if copy is None:
            copy = b"{%s}%s%s:s%d" % (tag, TEMP_PREFIX, _TOKEN, len(copies))
            copies[original] = copy
        out.argv[i] = copy
    out.temps = copies
    out.written = list(p.local_written)
    return out


def mirror(p: Plan) -> Plan:
    """A move's plan the other way round: the command beside its source (the first key),
    over a copy of its destination. The command then changes the real source (and the
    copy, deleted in the same transaction)."""
    out = plan(client_argv(p), _FIRST)
    assert out is not None  # the keys span slots, as in ``p``
    return out


def client_argv(p: Plan) -> list[bytes]:
    """``p``'s command with its own key names (the temporaries' names taken back)."""
    names = {temp: key for key, temp in p.temps.items()}
    argv = list(p.argv)
    for i in key_positions(argv):
        argv[i] = names.get(argv[i], argv[i])
    return argv


def bare(p: Plan) -> Plan:
    """``p`` without what compensation reads: the command over its copies, nothing more."""
    return Plan(p.argv, p.anchor_slot, p.anchor_key, p.temps, p.by_slot)


def moved(reply: bytes) -> bool:
    """Whether a move's reply says it changed its source: an element, ``+OK``, ``:1``; not
    a null, ``:0`` or an error."""
    return not (reply in _NULLS or reply == b":0\r\n" or reply[:1] in (b"-", b"!"))


def put_back(argv: list[bytes], reply: bytes, before: Value) -> bytes:
    """What takes a move's element back into its source, whatever other clients did to the
    source since: the element pushed back at the end it left (``LMOVE``, ``RPOPLPUSH``),
    the member added back (``SMOVE``), the value restored if the name is free again
    (``RENAME``, ``RENAMENX``; ``BUSYKEY`` if another client created it meanwhile)."""
    name = argv[0].lower()
    if name == b"smove":
        return encode_command(b"SADD", argv[1], argv[3])
    if name in (b"rename", b"renamenx"):
        assert before.payload is not None
        return encode_command(b"RESTORE", argv[1], b"%d" % before.ttl_ms, before.payload)
    element = _bulk(reply)
    assert element is not None
    left = name == b"lmove" and argv[3].upper() == b"LEFT"
    return encode_command(b"LPUSH" if left else b"RPUSH", argv[1], element)


# --- step 1: gather ---------------------------------------------------------------------------
def gather_payload(keys: list[bytes], watch: bool,
                   mark: bytes | None = None) -> tuple[bytes, int]:
    """The request that reads ``keys`` (one slot), and how many reply frames it gets.

    Read only: ``MULTI (PTTL DUMP)* EXEC`` (TTL and value from one instant). Under ``watch``:
    ``WATCH keys [mark] (PTTL DUMP)*`` — a transaction would end the watch; the watch itself
    makes step 3 fail if anything changed in between (or if a fate check set ``mark``)."""
    body = b"".join(encode_command(b"PTTL", k) + encode_command(b"DUMP", k) for k in keys)
    if watch:
        watched = [*keys, mark] if mark is not None else keys
        return encode_command(b"WATCH", *watched) + body, 1 + 2 * len(keys)
    return _MULTI + body + _EXEC, 2 * len(keys) + 2


class Value(NamedTuple):
    """A key's value as DUMP gives it (None: no such key) and its PTTL for RESTORE (0: none)."""

    payload: bytes | None
    ttl_ms: int


def _bulk(raw: bytes) -> bytes | None:
    if raw in _NULLS:
        return None
    if raw[:1] != b"$":
        raise ValueError(raw[:80])
    return raw[raw.index(b"\r\n") + 2 : -2]


def _int(raw: bytes) -> int:
    if raw[:1] != b":":
        raise ValueError(raw[:80])
    return int(raw[1:-2])


def read_values(keys: list[bytes], frames: list[bytes]) -> dict[bytes, Value]:
    """``PTTL``/``DUMP`` pairs (EXEC's elements, or the frames after WATCH's ``+OK``)."""
    out: dict[bytes, Value] = {}
    for i, key in enumerate(keys):
        ttl = _int(frames[2 * i])
        out[key] = Value(_bulk(frames[2 * i + 1]), ttl if ttl > 0 else 0)
    return out


def first_error(frames: list[bytes]) -> bytes | None:
    for raw in frames:
        if raw[:1] in (b"-", b"!"):
            return raw
    return None


# --- step 2: run ------------------------------------------------------------------------------
class RunLayout(NamedTuple):
    """Where step 2's answers are among EXEC's elements. A command that writes keys besides
    its anchor also reads, in the same transaction, every key of the anchor's slot it may
    change before the command (``PTTL``, ``DUMP``: what compensation puts back) and after
    it (``DUMP``: what compensation expects to find), and each written temporary after it
    (``PTTL``, ``DUMP``: what step 3 writes back)."""

    payload: bytes
    n_replies: int
    command_at: int  # the client's command
    before_at: int  # the local written keys' PTTL, DUMP pairs before the command
    after_at: int  # their DUMPs after it, then the written temporaries' PTTL, DUMP pairs


def _ttl_dump(key: bytes) -> bytes:
    return encode_command(b"PTTL", key) + encode_command(b"DUMP", key)


def run_payload(p: Plan, values: dict[bytes, Value], mark: bytes | None = None,
                watch: bool = True, extra: tuple[bytes, ...] = ()) -> RunLayout:
    """Step 2's request. With ``mark`` (a move's, in the anchor's slot): ``WATCH mark`` first
    and ``SET mark`` inside the transaction, so its fate can be told if its reply is lost;
    then ``ASKING`` before ``MULTI``, which keeps it for the whole transaction, as a
    redirect's ``ASKING`` in front of ``MULTI`` does without the ``WATCH`` (the redirect's
    is taken by the ``WATCH``; on a slot not being imported it has no effect). Without
    ``watch``: the connection watches already (a move's source, since step 1). ``extra``:
    commands queued after the command's answers, before the temporaries' ``DEL`` (a move's
    journal entry; what step 3 left of its copy of the source, ``journal.py``)."""
    watched = mark is not None and watch
    parts = [_MULTI]
    if mark is not None and watch:
        parts = [encode_command(b"WATCH", mark), _ASKING, _MULTI]
    restored: list[bytes] = []
    for key, temp in p.temps.items():
        v = values[key]
        if v.payload is not None:
            parts.append(encode_command(b"RESTORE", temp, b"%d" % v.ttl_ms, v.payload,
                                        b"REPLACE"))
            restored.append(temp)
    before_at = len(restored)
    parts.extend(_ttl_dump(k) for k in p.local_written)
    command_at = before_at + 2 * len(p.local_written)
    parts.append(encode_command(*p.argv))
    parts.extend(encode_command(b"DUMP", k) for k in p.local_written)
    parts.extend(_ttl_dump(p.temps[k]) for k in p.written)
    n = command_at + 1 + len(p.local_written) + 2 * len(p.written)
    # Every temporary, restored or not: the command may have created one (MSETNX).
    parts.extend(extra)
    parts.append(encode_command(b"DEL", *p.temps.values()))
    n += 1 + len(extra)
    if mark is not None:
        parts.append(set_marker(mark))
        n += 3 if watched else 1  # the SET's +QUEUED, WATCH's and ASKING's +OK
    parts.append(_EXEC)
    # MULTI's +OK, one +QUEUED per queued command, EXEC's array.
    return RunLayout(b"".join(parts), n + 2, command_at, before_at, command_at + 1)


def source_payload(p: Plan, dst: dict[bytes, Value], mark: bytes,
                   journal: tuple[bytes, ...] = ()) -> RunLayout:
    """A move's write of its source (``sourcefirst.py``): ``mirror(p)``'s command over the
    real source and a copy of the destination (``dst``, as step 1 read it), with the
    source's marker and the move's journal entry (``journal.py``), on the connection that
    watches the source since step 1."""
    return run_payload(mirror(p), dst, mark, watch=False, extra=journal)


def destination_payload(p: Plan, values: dict[bytes, Value], mark: bytes,
                        extra: tuple[bytes, ...] = ()) -> RunLayout:
    """A move's write of its destination, once its source is written: the command over a
    copy of the source as step 1 read it (``values``) and the real destination."""
    return run_payload(bare(p), values, mark, extra=extra)


def changed(before: Value, after: Value, elapsed_ms: int) -> bool:
    """Whether the command changed a key read ``elapsed_ms`` before its value ``after``
    was: its value, or its TTL (added, removed, or set apart from the decay of that time:
    a script's ``PEXPIRE``/``PERSIST``)."""
    if before.payload != after.payload:
        return True
    if after.payload is None or (before.ttl_ms == 0) != (after.ttl_ms == 0):
        return after.payload is not None
    return not before.ttl_ms - elapsed_ms - 2 <= after.ttl_ms <= before.ttl_ms + 1


def dumps(frames: list[bytes]) -> list[bytes | None]:
    """DUMP replies' payloads (None: no such key)."""
    return [_bulk(f) for f in frames]


# --- step 3: commit (moves) -------------------------------------------------------------------
def commit_payload(changed: dict[bytes, Value], mark: bytes | None = None) -> tuple[bytes, int]:
    """Write back the sources the command changed: each deleted, then restored if the command
    left it a value; with ``mark``, the marker set in the same transaction. Runs under step
    1's WATCH: EXEC answers a null if a source changed (or a fate check set the marker)."""
    parts = [_MULTI]
    n = 0
    if mark is not None:
        parts.append(set_marker(mark))
        n += 1
    for key, v in changed.items():
        parts.append(encode_command(b"DEL", key))
        n += 1
        if v.payload is not None:
            parts.append(encode_command(b"RESTORE", key, b"%d" % v.ttl_ms, v.payload))
            n += 1
    parts.append(_EXEC)
    return b"".join(parts), n + 2


def restore_payload(key: bytes, before: Value) -> tuple[bytes, int]:
    """Compensation: ``key`` put back as it was (``before``), under a WATCH of it."""
    return commit_payload({key: before})


class Undo(NamedTuple):
    """A write the proxy made that compensation takes back: ``key`` (in ``slot``) goes back
    to ``before`` if it still holds ``after`` (a DUMP payload, None: absent)."""

    key: bytes
    slot: int
    before: Value
    after: bytes | None


def is_null(raw: bytes) -> bool:
    return raw in _NULLS


def unmask(raw: bytes, temps: dict[bytes, bytes]) -> bytes:
    """A script's reply with each temporary's name, as a whole bulk or status string (a
    script that returns its ``KEYS``), given back as the key's own."""
    if TEMP_PREFIX not in raw:
        return raw
    for key, temp in temps.items():
        raw = raw.replace(b"$%d\r\n%s\r\n" % (len(temp), temp),
                          b"$%d\r\n%s\r\n" % (len(key), key))
        raw = raw.replace(b"+%s\r\n" % temp, b"+%s\r\n" % key)
    return raw
