"""Fan-out planning and reply merging: pure functions over argv lists and raw reply frames.

Two shapes, both named by the command table's row (``route``, ``merge``):
- **cross-slot split** (route ``split``: MGET, MSET, DEL, UNLINK, EXISTS, TOUCH): the keys (the
  row's ``first_key``, then every ``step``-th argument) are grouped by slot in
  first-appearance order, each group becomes one sub-command (same command name), and the
  parts' replies merge back into exactly what one server would have answered.
- **all masters** (DBSIZE, KEYS, FLUSHALL, SCRIPT LOAD …): the same argv goes to every master
  and the row's merge (``ALL_MERGES``) combines the replies.

Merging reads raw frames and only decodes what it must (array headers, integers). If any part
is an error, the merged reply is the first error in part order (MSET: ``OK`` only when every
part said ``OK``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from slotgate.protocol.resp import ReplyFramer
from slotgate.protocol.slots import key_slot

OK = b"+OK\r\n"


@dataclass(slots=True)
class Part:
    """One per-slot sub-command of a split request."""

    slot: int
    argv: list[bytes]
    # Index (in key order) of each key this part carries; used to put MGET values back.
    key_indices: list[int]


def split_by_slot(argv: Sequence[bytes], first: int, step: int) -> list[Part]:
    """Group the keys of ``argv`` (from ``first``, every ``step`` args) by slot.

    Each key carries its ``step - 1`` following args (MSET values). Parts come in the order
    their slot first appears; within a part, keys keep their original order.
    """
    name = argv[0]
    parts: dict[int, Part] = {}
    key_index = 0
    for i in range(first, len(argv), step):
        slot = key_slot(argv[i])
        part = parts.get(slot)
        if part is None:
            part = parts[slot] = Part(slot, [name], [])
        part.argv.extend(argv[i : i + step])
        part.key_indices.append(key_index)
        key_index += 1
    return list(parts.values())


def distinct_slots(argv: Sequence[bytes], first: int, step: int) -> list[int] | None:
    """The slot of each key when no two keys share one (the usual cross-slot request: each
    key is a part of its own, parts in key order), else None."""
    slots = [key_slot(k) for k in argv[first::step]]
    return slots if len(set(slots)) == len(slots) else None


def plan_split(argv: Sequence[bytes], first: int, step: int) -> tuple[list[Part], bool]:
    """``split_by_slot`` in one pass, plus whether the parts, taken in order, carry the keys
    in their original order (each slot's keys are one run): then MGET's merged reply is the
    parts' array bodies concatenated, with no framing."""
    name = argv[0]
    parts: dict[int, Part] = {}
    key_index = 0
    in_order = True
    prev = -1
    for i in range(first, len(argv), step):
        slot = key_slot(argv[i])
        part = parts.get(slot)
        if part is None:
            part = parts[slot] = Part(slot, [name], [])
        elif slot != prev:
            in_order = False
        prev = slot
        part.argv.extend(argv[i : i + step])
        part.key_indices.append(key_index)
        key_index += 1
    return list(parts.values()), in_order


def first_error(replies: Sequence[bytes]) -> bytes:
    """The first error among ``replies`` (the caller knows there is one)."""
    err = _first_error(replies)
    if err is None:
        raise ValueError("no part answered an error")
    return err


def _first_error(replies: Sequence[bytes]) -> bytes | None:
    for r in replies:
        if r[:1] == b"-" or r[:1] == b"!":
            return r
    return None


def array_elements(raw: bytes) -> list[bytes]:
    """The raw frames of an aggregate reply's elements (``*``/``~``/``>``); ``[]`` for nulls."""
    end = raw.index(b"\r\n")
    count = int(raw[1:end])
    if count <= 0:
        return []
    framer = ReplyFramer()
    framer.feed(raw[end + 2 :])
    elements = [frame for _, frame in framer.frames()]
    if len(elements) != count:
        raise ValueError(f"aggregate reply announced {count} elements, carried {len(elements)}")
    return elements


def merge_in_order(parts: Sequence[Part], replies: Sequence[bytes], total_keys: int) -> bytes:
    """MGET: one array with each value at its key's original position."""
    err = _first_error(replies)
    if err is not None:
        return err
    out: list[bytes] = [b""] * total_keys
    for part, reply in zip(parts, replies, strict=True):
        for idx, frame in zip(part.key_indices, array_elements(reply), strict=True):
            out[idx] = frame
    return b"*%d\r\n" % total_keys + b"".join(out)


def merge_concat_in_order(replies: Sequence[bytes], total_keys: int) -> bytes:
    """MGET when the parts carry the keys in order (``plan_split``): each part's array body
    (its reply without the ``*<n>`` header) appended as is; or the first error."""
    out = [b"*%d\r\n" % total_keys]
    for r in replies:
        if r.startswith(b"*1\r\n"):
            out.append(r[4:])
        elif r[:1] == b"*":
            out.append(r[r.index(b"\r\n") + 2 :])
        else:
            err = _first_error(replies)
            if err is not None:
                return err
            raise ValueError(f"MGET part answered a non-array {r[:20]!r}")
    return b"".join(out)


def merge_sum(replies: Sequence[bytes]) -> bytes:
    """Integer replies summed (DEL, EXISTS, DBSIZE …)."""
    err = _first_error(replies)
    if err is not None:
        return err
    return b":%d\r\n" % sum(int(r[1:-2]) for r in replies)


def merge_all_ok(replies: Sequence[bytes]) -> bytes:
    """``+OK`` only if every part succeeded; otherwise the first error."""
    err = _first_error(replies)
    if err is not None:
        return err
    return OK


def merge_first(replies: Sequence[bytes]) -> bytes:
    """Every node answers the same (SCRIPT LOAD's sha): the first reply, or the first error."""
    err = _first_error(replies)
    return err if err is not None else replies[0]


def merge_concat(replies: Sequence[bytes]) -> bytes:
    """Arrays concatenated (KEYS)."""
    err = _first_error(replies)
    if err is not None:
        return err
    total = 0
    bodies = []
    for r in replies:
        end = r.index(b"\r\n")
        n = int(r[1:end])
        if n > 0:
            total += n
            bodies.append(r[end + 2 :])
    return b"*%d\r\n" % total + b"".join(bodies)


def merge_and_ints(replies: Sequence[bytes]) -> bytes:
    """Element-wise AND of integer arrays (SCRIPT EXISTS: loaded only if loaded everywhere)."""
    err = _first_error(replies)
    if err is not None:
        return err
    columns = [array_elements(r) for r in replies]
    n = len(columns[0])
    merged = [b":1\r\n" if all(col[i] == b":1\r\n" for col in columns) else b":0\r\n"
              for i in range(n)]
    return b"*%d\r\n" % n + b"".join(merged)


def merge_one_ok(replies: Sequence[bytes]) -> bytes:
    """The first success if any part succeeded (SCRIPT KILL), else the first error."""
    for r in replies:
        if r[:1] not in (b"-", b"!"):
            return r
    return replies[0]


Merge = Callable[[Sequence[bytes]], bytes]

# Merge functions for all-masters fan-out, by the command table's ``merge`` name (those
# with a handler of their own are in ``fanout._SPECIAL``).
ALL_MERGES: dict[str, Merge] = {
    "one_ok": merge_one_ok,
    "sum": merge_sum,
    # Every part succeeded with the same reply (OK, or SCRIPT LOAD's sha): that reply.
    "all_ok": merge_first,
    "concat": merge_concat,
    "and": merge_and_ints,
}


# --- SCAN across masters -------------------------------------------------------------------
# The client cursor packs (node cursor, node index): cursor = node_cursor << SCAN_INDEX_BITS |
# index. Node 0 with cursor 0 is 0, which is also "start"; the proxy answers 0 ("done") only
# after the last node's scan returned 0. Each node's own SCAN keeps its guarantees, and nodes
# are visited one after the other, so every key present for the whole scan is returned.
SCAN_INDEX_BITS = 10
SCAN_MAX_NODES = 1 << SCAN_INDEX_BITS
_U64 = (1 << 64) - 1


def scan_decode_cursor(cursor: bytes) -> tuple[int, int] | None:
    """Client cursor -> (node index, node cursor), or None if it is not a valid cursor."""
    if not cursor.isdigit():
        return None
    value = int(cursor)
    if value > _U64:
        return None
    return value & (SCAN_MAX_NODES - 1), value >> SCAN_INDEX_BITS


def scan_encode_cursor(index: int, node_cursor: int) -> bytes:
    return str(node_cursor << SCAN_INDEX_BITS | index).encode()


def scan_split_reply(raw: bytes) -> tuple[int, bytes]:
    """A node's SCAN reply -> (its next cursor, the raw keys array frame)."""
    cursor_frame, keys_frame = array_elements(raw)
    # Bulk string: $<len>\r\n<digits>\r\n
    body = cursor_frame[cursor_frame.index(b"\r\n") + 2 : -2]
    return int(body), keys_frame


def scan_reply(cursor: bytes, keys_frame: bytes) -> bytes:
    return b"*2\r\n$%d\r\n%s\r\n" % (len(cursor), cursor) + keys_frame
