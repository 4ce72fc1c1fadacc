"""Function libraries in snapshots: a restart from the snapshot file, a restart from an AOF
whose base was rewritten, and a replica's full sync all leave the node with the libraries."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from tests.node.test_replication import in_sync, make_replica
from tests.support import running, slotgate_node, wait_until

LIBS = [
    "#!lua name=lib1\nredis.register_function('setget', function(k, a) "
    "redis.call('set', k[1], a[1]) return redis.call('get', k[1]) end)",
    "#!lua name=lib2\nredis.register_function{function_name='ro', flags={'no-writes'}, "
    "callback=function(k, a) return redis.call('get', k[1]) end, description='read'}",
]
LIST = ("FUNCTION", "LIST", "WITHCODE")


def _load_libs(c: redis.Redis) -> object:
    for code in LIBS:
        c.execute_command("FUNCTION", "LOAD", code)
    listing = c.execute_command(*LIST)
    assert len(listing) == 2
    return listing


def test_restart_from_the_snapshot_keeps_the_libraries(tmp_path: Path) -> None:
    node = slotgate_node(tmp_path)
    with running(node):
        c = node.client()
        before = _load_libs(c)
        c.save()
        node.kill()
        node.start()
        c = node.client()
        assert c.execute_command(*LIST) == before
        assert c.execute_command("FCALL", "setget", "1", "k", "v") == b"v"


def test_restart_from_the_aof_before_and_after_a_rewrite_keeps_the_libraries(tmp_path: Path) -> None:
    node = slotgate_node(tmp_path, extra=["--appendonly", "yes", "--appendfsync", "always"])
    with running(node):
        before = _load_libs(node.client())
        node.kill()  # replayed from the AOF's FUNCTION LOAD commands
        node.start()
        c = node.client()
        assert c.execute_command(*LIST) == before
        c.bgrewriteaof()
        wait_until(lambda: c.info("persistence")["aof_rewrite_in_progress"] == 0
                   and c.info("persistence")["aof_rewrites"] >= 1, what="AOF rewrite done")
        node.kill()
        node.start()
        assert node.client().execute_command(*LIST) == before


def test_a_replica_after_full_sync_holds_and_runs_the_libraries(tmp_path: Path) -> None:
    master = slotgate_node(tmp_path, extra=["--repl-ping-replica-period", "1"])
    replica = slotgate_node(tmp_path, extra=["--repl-ping-replica-period", "1"])
    with running(master, replica):
        m = master.client()
        before = _load_libs(m)
        m.execute_command("FCALL", "setget", "1", "k", "v")
        replica.client().execute_command("FUNCTION", "LOAD", LIBS[0].replace("lib1", "stale"))
        r = make_replica(replica, master)
        wait_until(lambda: in_sync(m, r), what="replica in sync")
        assert r.execute_command(*LIST) == before
        assert r.execute_command("FCALL_RO", "ro", "1", "k") == b"v"
        with pytest.raises(redis.ReadOnlyError):  # READONLY, as a 7.0 replica answers
            r.execute_command("FCALL", "setget", "1", "k", "w")
