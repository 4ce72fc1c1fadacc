"""node/commands/typeutil.Snapshots: the cursor snapshots behind SCAN and the collection scans."""

from __future__ import annotations

from slotgate.node.types.typeutil import Snapshots


def _walk(snaps: Snapshots, owner: int, items: list[int], count: int) -> list[int]:
    cursor, out = snaps.start(owner, count, lambda: list(items))
    while cursor:
        served = snaps.resume(owner, cursor, count)
        assert served is not None
        cursor, page = served
        out += page
    return out


def test_a_walk_returns_every_item_once_and_forgets_its_snapshot() -> None:
    snaps = Snapshots()
    items = list(range(10))
    cursor, first = snaps.start(1, 3, lambda: list(items))
    assert first == [0, 1, 2] and cursor != 0
    assert _walk(snaps, 1, items, 3) == items
    assert _walk(snaps, 1, items, 100) == items
    assert _walk(snaps, 1, [], 5) == []


def test_the_snapshot_is_taken_at_cursor_zero() -> None:
    snaps = Snapshots()
    items = [1, 2, 3, 4]
    cursor, page = snaps.start(7, 2, lambda: list(items))
    items.append(5)
    items.remove(3)
    assert page == [1, 2]
    assert snaps.resume(7, cursor, 2) == (0, [3, 4])


def test_an_unknown_or_finished_cursor_is_none() -> None:
    snaps = Snapshots()
    assert snaps.resume(1, 5 << 32, 10) is None
    cursor, _ = snaps.start(1, 1, lambda: [1, 2, 3])
    assert snaps.resume(2, cursor, 10) is None  # another owner's cursor
    assert snaps.resume(1, cursor, 10) == (0, [2, 3])
    assert snaps.resume(1, cursor, 10) is None  # the last page forgot it


def test_the_least_recently_used_snapshot_is_dropped_past_the_limit() -> None:
    snaps = Snapshots(limit=2)
    a, _ = snaps.start(1, 1, lambda: [1, 2, 3])
    b, _ = snaps.start(1, 1, lambda: [1, 2, 3])
    served = snaps.resume(1, a, 1)  # a is now the more recently used
    assert served is not None and served[1] == [2]
    a = served[0]
    c, _ = snaps.start(1, 1, lambda: [1, 2])
    assert snaps.resume(1, b, 1) is None
    assert snaps.resume(1, a, 1) == (0, [3])
    assert snaps.resume(1, c, 1) == (0, [2])
