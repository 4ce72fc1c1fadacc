"""A full disk under the AOF, on our node and on redis-server 7.0 side by side: each server's
``dir`` is a small tmpfs of its own (mounted by the test: root only, skipped elsewhere),
filled up with a ballast file. Writes are then refused with Redis' exact ``-MISCONF``
(PING too, and writes queued in MULTI or made by a script), reads answered, and once the
ballast is gone writes are accepted again; every acknowledged write is in the AOF after a
restart (the failed write's bytes were kept and written later, not half written)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import ManagedProcess, RawClient, redis_server, slotgate_node, wait_until

DISK_KB = 1024
VALUE = b"x" * 3000
MISCONF = b"-MISCONF Errors writing to the AOF file: No space left on device\r\n"


@contextlib.contextmanager
def small_disk(path: Path) -> Iterator[Path]:
    path.mkdir(parents=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_KB}k", "tmpfs", str(path)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip() or done.returncode}): "
                    "the full-disk tests need root")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(disk: Path) -> Path:
    """A ballast file written until the disk is full."""
    ballast = disk / "ballast"
    with open(ballast, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass
    return ballast


@pytest.fixture(params=["ours", "real"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[ManagedProcess, Path]]:
    with small_disk(tmp_path / "disk") as disk:
        extra = ["--appendonly", "yes", "--dir", str(disk)]
        make = slotgate_node if request.param == "ours" else redis_server
        proc = make(tmp_path, extra=extra)
        proc.start()
        try:
            yield proc, disk
        finally:
            proc.stop()


def pong(port: int) -> bool:
    with RawClient(port) as c:
        return c.call("PING") == b"+PONG\r\n"


def test_full_disk_refuses_writes_until_space_returns(
        server: tuple[ManagedProcess, Path]) -> None:
    server, disk = server
    c = RawClient(server.port)
    assert c.call("SET", "before", "1") == b"+OK\r\n"
    ballast = fill(disk)
    acknowledged = []
    for i in range(20):  # the write that meets the full disk is still answered OK
        reply = c.call("SET", f"k{i}", VALUE)
        if reply == MISCONF:
            break
        assert reply == b"+OK\r\n"
        acknowledged.append(f"k{i}")
    else:
        raise AssertionError("no write was refused on a full disk")
    assert c.call("PING") == MISCONF
    assert c.call("GET", "before") == b"$1\r\n1\r\n"
    assert b"aof_last_write_status:err" in c.call("INFO", "persistence")
    assert c.call("EVAL", "return 1", 0) == b":1\r\n"
    script = c.call("EVAL", "return redis.call('set', 'z', '1')", 0)
    assert script.startswith(MISCONF[:-2] + b" script: "), script
    assert c.call("MULTI") == b"+OK\r\n"
    assert c.call("SET", "q", "1") == MISCONF
    assert c.call("EXEC") == b"-EXECABORT Transaction discarded because of previous errors.\r\n"
    assert c.call("DEL", "before") == MISCONF
    os.unlink(ballast)
    wait_until(lambda: c.call("SET", "after", "1") == b"+OK\r\n", 10, "writes accepted again")
    assert b"aof_last_write_status:ok" in c.call("INFO", "persistence")
    assert c.call("PING") == b"+PONG\r\n"
    c.close()
    server.stop()
    server.start()
    wait_until(lambda: pong(server.port), 15, "the AOF loaded", ignore=(OSError,))
    with RawClient(server.port) as again:
        for key in ["before", "after", *acknowledged]:
            assert again.call("EXISTS", key) == b":1\r\n", key
        assert again.call("STRLEN", acknowledged[-1]) == b":3000\r\n"
