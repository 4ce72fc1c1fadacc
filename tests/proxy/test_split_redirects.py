"""Cross-slot MSET / EXISTS / TOUCH / DEL / UNLINK whose keys are each in a slot of their own
go out as one payload per node, encoded straight from the request (proxy/routing/fanout.py).
When one key's slot has moved behind the proxy's back, that key's node answers MOVED in the
middle of its batch: that key alone is sent again, as a request of its own, to the new
owner, and the merged reply is what one server would answer."""

from __future__ import annotations

import uuid

from slotgate.protocol.slots import key_slot
from tests.conftest import ClusterBackend
from tests.proxy.test_redirects import (
    finish_migration,
    masters,
    open_migration,
    proxy_redirects,
    slot_owner,
)
from tests.support import ManagedProcess


def _keys_in_distinct_slots(prefix: str, n: int) -> list[str]:
    keys: list[str] = []
    seen: set[int] = set()
    i = 0
    while len(keys) < n:
        key = f"{prefix}{i}"
        i += 1
        slot = key_slot(key.encode())
        if slot not in seen:
            seen.add(slot)
            keys.append(key)
    return keys


def _move_behind_proxy(backend: ClusterBackend, key: str) -> None:
    """``key``'s slot to another master, keys included, without the proxy hearing of it."""
    slot = key_slot(key.encode())
    src = slot_owner(backend, slot)
    dst = next(m for m in masters(backend) if m is not src)
    open_migration(slot, src, dst)
    finish_migration(backend, slot, src, dst)


def test_split_writes_and_counts_follow_moved_mid_batch(slotgate: ManagedProcess,
                                                        cluster_backend: ClusterBackend) -> None:
    keys = _keys_in_distinct_slots(f"sm{uuid.uuid4().hex[:6]}:", 12)
    r = slotgate.client()
    assert r.mset({k: "old" for k in keys})
    raw = slotgate.client()
    steps = [
        # (moved key, command, expected reply)
        (keys[4], ["MSET", *(w for k in keys for w in (k, f"new:{k}"))], True),
        (keys[7], ["EXISTS", *keys, "nokey:{x}"], 12),
        (keys[1], ["TOUCH", *keys], 12),
        (keys[2], ["DEL", *keys[:6]], 6),
        (keys[9], ["UNLINK", *keys], 6),
    ]
    followed = []
    for moved, command, expected in steps:
        before = proxy_redirects(slotgate)["moved"]
        _move_behind_proxy(cluster_backend, moved)
        if command[0] == "EXISTS":
            assert r.mget(keys) == [f"new:{k}".encode() for k in keys]
        assert raw.execute_command(*command) == expected, command[0]
        if proxy_redirects(slotgate)["moved"] > before:
            followed.append(command[0])
    assert r.exists(*keys) == 0
    # The refresh an earlier MOVED asked for can land after the next move and teach the proxy
    # the new owner first; most steps still meet the move mid-batch.
    assert len(followed) >= 2, followed
