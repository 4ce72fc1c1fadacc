"""A 20 MB dataset full-syncs to a new replica while the master keeps serving writes; every
write made during the sync reaches the replica. (Latency is measured by
bench/bench_replication.py, never asserted here.)"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from tests.support import slotgate_node, wait_until

SIZE_BYTES = 20 * 1024 * 1024
VALUE = b"v" * 1000


def test_large_full_sync_while_master_serves_writes(tmp_path: Path) -> None:
    master = slotgate_node(tmp_path).start()
    replica = slotgate_node(tmp_path).start()
    try:
        m = master.client()
        keys = SIZE_BYTES // len(VALUE)
        for start in range(0, keys, 1000):
            pipe = m.pipeline(transaction=False)
            for i in range(start, min(keys, start + 1000)):
                pipe.set(f"key:{i}", VALUE)
            pipe.execute()
        written: list[int] = []
        stop = threading.Event()
        errors: list[BaseException] = []

        def writer() -> None:
            w = master.client(socket_timeout=10)
            i = 0
            try:
                while not stop.is_set():
                    w.set(f"during:{i}", i)
                    w.incr("key:0:counter")
                    written.append(i)
                    i += 1
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)

        t = threading.Thread(target=writer)
        t.start()
        r = replica.client(socket_timeout=60)
        try:
            assert r.execute_command("REPLICAOF", "127.0.0.1", master.port) == b"OK"
            wait_until(lambda: r.info("replication")["master_link_status"] == "up", 60,
                       "the full sync to finish")
            saw_sync = "Full resync requested" in master.log_text()
            time.sleep(0.3)  # the scenario: writes go on a little after the link is up
        finally:
            stop.set()
            t.join(10)
        assert not errors, errors
        assert saw_sync
        assert len(written) > 0
        wait_until(lambda: r.info("replication")["slave_repl_offset"]
                   == m.info("replication")["master_repl_offset"], 30, "the replica to catch up")
        assert r.dbsize() == m.dbsize() == keys + len(written) + 1
        assert r.get("key:0:counter") == str(len(written)).encode()
        for start in range(0, len(written), 1000):
            chunk = written[start:start + 1000]
            assert r.mget([f"during:{i}" for i in chunk]) == [str(i).encode() for i in chunk]
        sample = list(range(0, keys, 997))
        assert r.mget([f"key:{i}" for i in sample]) == [VALUE] * len(sample)
    finally:
        replica.stop()
        master.stop()
