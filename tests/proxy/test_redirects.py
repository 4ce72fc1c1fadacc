"""Slot moves under load: MOVED and ASK are followed inside the proxy and never reach clients.

These tests change which master owns a slot (the cluster stays valid); they restore nothing,
so they only rely on the topology they read themselves.
"""

from __future__ import annotations

import threading
import time
import uuid

import redis

from slotgate.protocol.slots import key_slot
from tests.conftest import ClusterBackend
from tests.support import ManagedProcess, wait_until


def node_by_port(backend: ClusterBackend, port: int) -> ManagedProcess:
    return next(n for n in backend.nodes if n.port == port)


def slot_owner(backend: ClusterBackend, slot: int) -> ManagedProcess:
    for node in backend.nodes:
        try:
            slots = node.client(socket_timeout=2).execute_command("CLUSTER", "SLOTS")
        except redis.RedisError:
            continue
        for entry in slots:
            if entry[0] <= slot <= entry[1]:
                return node_by_port(backend, int(entry[2][1]))
    raise AssertionError(f"nobody owns slot {slot}")


def masters(backend: ClusterBackend) -> list[ManagedProcess]:
    return [n for n in backend.nodes if n.client().info("replication")["role"] == "master"]


def myid(node: ManagedProcess) -> str:
    return node.client().execute_command("CLUSTER", "MYID").decode()


def open_migration(slot: int, src: ManagedProcess, dst: ManagedProcess) -> None:
    dst.client().execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", myid(src))
    src.client().execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", myid(dst))


def migrate_keys(src: ManagedProcess, dst: ManagedProcess, keys: list[str]) -> None:
    if keys:
        src.client().execute_command("MIGRATE", "127.0.0.1", dst.port, "", 0, 5000,
                                     "KEYS", *keys)


def finish_migration(backend: ClusterBackend, slot: int, src: ManagedProcess,
                     dst: ManagedProcess) -> None:
    while True:
        left = src.client().execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100)
        if not left:
            break
        migrate_keys(src, dst, [k.decode() for k in left])
    dst_id = myid(dst)
    for node in [dst, src] + [m for m in masters(backend) if m not in (src, dst)]:
        node.client().execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)


def keys_in_slot(node: ManagedProcess, slot: int, tag: str) -> set[str]:
    """This test's keys (hash tag ``tag``) that ``node`` holds in ``slot``; other tests may
    have left keys of their own in the same slot."""
    found = node.client().execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100_000)
    return {k.decode() for k in found if k.startswith(f"{{{tag}}}".encode())}


def proxy_redirects(proxy: ManagedProcess) -> dict[str, int]:
    info = proxy.client().info("proxy")
    return {k: int(info[f"redirects_{k}"]) for k in ("moved", "ask", "tryagain")}


def test_slot_moved_while_clients_run(slotgate: ManagedProcess,
                                      cluster_backend: ClusterBackend) -> None:
    tag = f"mv{uuid.uuid4().hex[:6]}"
    keys = [f"{{{tag}}}:{i}" for i in range(40)]
    slot = key_slot(tag.encode())
    src = slot_owner(cluster_backend, slot)
    dst = next(m for m in masters(cluster_backend) if m is not src)
    r = slotgate.client()
    r.mset({k: "0" for k in keys})
    errors: list[BaseException] = []
    stop = threading.Event()
    ops = [0]

    def worker(mine: list[str]) -> None:
        # each worker writes keys of its own: another worker's SET between this SET and
        # GET would change what the GET must see
        c = slotgate.client()
        n = 0
        try:
            while not stop.is_set():
                n += 1
                k = mine[n % len(mine)]
                c.set(k, str(n))
                assert c.get(k) == str(n).encode()
                assert len(c.mget(keys)) == len(keys)
                ops[0] += 1
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(keys[i::3],)) for i in range(3)]
    before = proxy_redirects(slotgate)
    for t in threads:
        t.start()
    try:
        wait_until(lambda: ops[0] or errors, what="the clients under way")
        open_migration(slot, src, dst)
        for i in range(0, len(keys), 10):
            migrate_keys(src, dst, keys[i : i + 10])
            time.sleep(0.05)  # the scenario: clients run between the batches (ASK)
        finish_migration(cluster_backend, slot, src, dst)
        time.sleep(0.5)  # the scenario: clients run on once the slot has moved (MOVED)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not errors, errors
    assert ops[0] > 30
    after = proxy_redirects(slotgate)
    # The proxy followed the move: ASK while keys left, MOVED once the slot changed owner,
    # unless a topology refresh taught it the new owner first (also right; it happens when
    # one lands between the two SETSLOT NODEs).
    assert after["ask"] + after["moved"] > before["ask"] + before["moved"]
    assert slot_owner(cluster_backend, slot) is dst
    assert keys_in_slot(dst, slot, tag) == set(keys)
    assert r.delete(*keys) == len(keys)


def test_ask_during_half_done_migration(slotgate: ManagedProcess,
                                        cluster_backend: ClusterBackend) -> None:
    tag = f"ask{uuid.uuid4().hex[:6]}"
    keys = [f"{{{tag}}}:{i}" for i in range(20)]
    slot = key_slot(tag.encode())
    src = slot_owner(cluster_backend, slot)
    dst = next(m for m in masters(cluster_backend) if m is not src)
    r = slotgate.client()
    r.mset({k: f"v{i}" for i, k in enumerate(keys)})
    open_migration(slot, src, dst)
    migrate_keys(src, dst, keys[:10])
    try:
        assert keys_in_slot(dst, slot, tag) == set(keys[:10])
        before = proxy_redirects(slotgate)
        # Keys on both sides, read one by one: the moved half needs ASK each time, because
        # ASK must not change the slot map.
        assert [r.get(k) for k in keys] == [f"v{i}".encode() for i in range(20)]
        # A new key in the slot belongs to the importing side.
        new_key = f"{{{tag}}}:new"
        assert r.set(new_key, "fresh") is True
        assert r.get(new_key) == b"fresh"
        after = proxy_redirects(slotgate)
        assert after["ask"] - before["ask"] >= 12
        assert after["moved"] == before["moved"]
        assert keys_in_slot(dst, slot, tag) == {*keys[:10], new_key}
        # A multi-key read over both sides gets TRYAGAIN until the migration completes:
        # the proxy keeps retrying instead of passing the error on.
        finisher = threading.Timer(0.5, finish_migration, (cluster_backend, slot, src, dst))
        finisher.start()
        try:
            assert r.mget(keys) == [f"v{i}".encode() for i in range(20)]
        finally:
            finisher.join()
        assert proxy_redirects(slotgate)["tryagain"] > before["tryagain"]
    finally:
        if src.client().execute_command("CLUSTER", "COUNTKEYSINSLOT", slot):
            finish_migration(cluster_backend, slot, src, dst)
    assert r.delete(*keys, f"{{{tag}}}:new") == 21


def test_cross_slot_mget_follows_ask_and_moved_per_part(slotgate: ManagedProcess,
                                                        cluster_backend: ClusterBackend) -> None:
    # Each key in a slot of its own: every key is a part. Two slots move while the proxy
    # reads them: first half-migrated (those parts get ASK), then finished behind the proxy's
    # back (MOVED). One of the moved keys holds a list, for which MGET answers a null even
    # when its part went through a redirect.
    prefix = f"am{uuid.uuid4().hex[:6]}:"
    keys: list[str] = []
    seen: set[int] = set()
    i = 0
    while len(keys) < 12:
        key = f"{prefix}{i}"
        i += 1
        if key_slot(key.encode()) not in seen:
            seen.add(key_slot(key.encode()))
            keys.append(key)
    str_key, list_key = keys[3], keys[8]
    r = slotgate.client()
    r.mset({k: f"v{n}" for n, k in enumerate(keys) if k != list_key})
    r.rpush(list_key, "x")
    expected = [None if k == list_key else f"v{n}".encode() for n, k in enumerate(keys)]
    assert r.mget(keys) == expected
    moves = []
    for key in (str_key, list_key):
        slot = key_slot(key.encode())
        src = slot_owner(cluster_backend, slot)
        dst = next(m for m in masters(cluster_backend) if m is not src)
        moves.append((slot, src, dst))
    before = proxy_redirects(slotgate)
    try:
        for slot, src, dst in moves:
            open_migration(slot, src, dst)
        migrate_keys(moves[0][1], moves[0][2], [str_key])
        migrate_keys(moves[1][1], moves[1][2], [list_key])
        assert r.mget(keys) == expected
        mid = proxy_redirects(slotgate)
        assert mid["ask"] - before["ask"] >= 2
        for slot, src, dst in moves:
            finish_migration(cluster_backend, slot, src, dst)
        assert r.mget(keys) == expected
        after = proxy_redirects(slotgate)
        assert after["moved"] > mid["moved"]
        assert r.mget(keys) == expected
    finally:
        for slot, src, dst in moves:
            if src.client().execute_command("CLUSTER", "COUNTKEYSINSLOT", slot):
                finish_migration(cluster_backend, slot, src, dst)
    assert r.delete(*keys) == len(keys)
