"""SortedEntries.pick (node/types/zset.py): the entries at many positions in one walk, the same
as indexing each position (ZRANDMEMBER's picks: a chunk scan per position took seconds on a
sorted set of 200,000 members)."""

from __future__ import annotations

import random

from slotgate.node.types.zset import ZSet


def test_pick_is_indexing_each_position() -> None:
    rng = random.Random(2)
    for _ in range(40):
        z = ZSet()
        for _ in range(rng.randrange(1, 3000)):
            z.insert(b"m%d" % rng.randrange(10**6), float(rng.randrange(100)))
        size = len(z)
        positions = [rng.randrange(size) for _ in range(rng.randrange(500))]
        positions += [0, size - 1, 0]
        assert z.entries.pick(positions) == [z.entries[p] for p in positions]
