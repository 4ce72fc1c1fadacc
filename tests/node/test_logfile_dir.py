"""``dir ./x`` then ``logfile log.txt``: the log is written inside ./x, on our node and on a
real redis-server 7.0 started the same way (Redis applies ``dir`` while reading the config,
and opens the log file relative to it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import ManagedProcess, redis_server, slotgate_node, wait_until

ARGS = ["--dir", "./x", "--logfile", "log.txt"]


@pytest.mark.parametrize("kind", ["ours", "real"])
def test_logfile_opened_in_dir(kind: str, tmp_path: Path) -> None:
    proc: ManagedProcess = (slotgate_node(tmp_path, extra=ARGS) if kind == "ours"
                            else redis_server(tmp_path, extra=ARGS))
    (proc.cwd / "x").mkdir(parents=True)  # Redis needs the directory to exist
    proc.start()
    try:
        inside = proc.cwd / "x" / "log.txt"
        wait_until(lambda: inside.exists() and "Ready to accept connections" in inside.read_text(),
                   10, "the log inside ./x")
        assert not (proc.cwd / "log.txt").exists()
        assert proc.client().config_get("dir")["dir"] == str(proc.cwd / "x")
    finally:
        proc.stop()
