"""A node started with ``key-load-delay`` loads slowly and answers meanwhile as Redis does:
``-LOADING`` to commands that need the data, INFO ``loading:1`` with the ``loading_*`` fields,
the commands flagged ``loading`` (INFO, CONFIG) served; our node and a real redis-server 7.0
started the same way, with the same checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import RawClient, node_and_redis, wait_until

KEYS = 3000
LOADING = b"-LOADING Redis is loading the dataset in memory\r\n"


def _info(c: RawClient) -> dict[str, str]:
    text = c.call("INFO", "persistence").split(b"\r\n", 1)[1].decode()
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


@pytest.mark.parametrize("kind", ["ours", "real"])
def test_key_load_delay_answers_loading(kind: str, tmp_path: Path) -> None:
    with node_and_redis(tmp_path) as procs:
        proc = procs[kind]
        other = procs["real" if kind == "ours" else "ours"]
        other.stop()
        with RawClient(proc.port) as c:
            assert c.call("CONFIG", "GET", "key-load-delay") == (
                b"*2\r\n$14\r\nkey-load-delay\r\n$1\r\n0\r\n")
            assert c.call("CONFIG", "GET", "*load-delay*") == b"*0\r\n"  # hidden
            assert c.call("CONFIG", "SET", "loading-process-events-interval-bytes", "10") == (
                b"-ERR CONFIG SET failed (possibly related to argument "
                b"'loading-process-events-interval-bytes') - argument must be between 1024 "
                b"and 2147483647 inclusive\r\n")
            c.call("DEBUG", "POPULATE", KEYS)
            assert c.call("SAVE") == b"+OK\r\n"
        proc.stop()
        proc.argv += ["--key-load-delay", "1000", "--loading-process-events-interval-bytes",
                      "1024"]
        proc.start()
        with RawClient(proc.port) as c:
            assert c.call("GET", "key:1") == LOADING
            assert c.call("DBSIZE") == LOADING
            assert c.call("PING") == LOADING
            info = _info(c)
            assert info["loading"] == "1", info
            for field in ("loading_start_time", "loading_total_bytes", "loading_loaded_bytes",
                          "loading_loaded_perc", "loading_eta_seconds"):
                assert field in info, (field, info)
            assert c.call("CONFIG", "GET", "key-load-delay").endswith(b"$4\r\n1000\r\n")
            wait_until(lambda: c.call("DBSIZE") == b":%d\r\n" % KEYS, 30, "the load to end")
            assert _info(c)["loading"] == "0"
            assert "loading_start_time" not in _info(c)
            assert c.call("GET", "key:1") == b"$7\r\nvalue:1\r\n"


BIG_KEYS = 1_000_000  # a snapshot real Redis needs most of a second to load


def _probe_while_loading(c: RawClient, total_bytes: int) -> None:
    """What a client sees while the server loads: the same on both servers."""
    assert c.call("PING") == LOADING
    assert c.call("GET", "key:1") == LOADING
    assert c.call("ECHO", "x") == b"$1\r\nx\r\n"  # flagged ``loading``: served
    info = _info(c)
    assert info["loading"] == "1", info
    assert info["async_loading"] == "0"
    assert int(info["loading_total_bytes"]) == total_bytes
    assert 0 <= int(info["loading_loaded_bytes"]) <= total_bytes


@pytest.mark.parametrize("kind", ["ours", "real"])
def test_big_snapshot_loads_after_listening(kind: str, tmp_path: Path) -> None:
    """No key-load-delay: the server listens before it loads its snapshot, and answers
    ``-LOADING`` between the steps of a long load."""
    with node_and_redis(tmp_path) as procs:
        proc = procs[kind]
        procs["real" if kind == "ours" else "ours"].stop()
        with RawClient(proc.port, timeout_s=60) as c:
            c.call("DEBUG", "POPULATE", BIG_KEYS)
            assert c.call("SAVE") == b"+OK\r\n"
        proc.stop()
        size = (proc.cwd / "dump.rdb").stat().st_size
        proc.start()
        with RawClient(proc.port, timeout_s=60) as c:
            _probe_while_loading(c, size)
            wait_until(lambda: c.call("DBSIZE") == b":%d\r\n" % BIG_KEYS, 120, "the load to end")
            assert _info(c)["loading"] == "0"
            assert c.call("GET", "key:1") == b"$7\r\nvalue:1\r\n"


@pytest.mark.parametrize("kind", ["ours", "real"])
def test_aof_load_answers_loading(kind: str, tmp_path: Path) -> None:
    """An append-only file is loaded after listening too: its snapshot base slowed by
    ``key-load-delay``, then its incr file."""
    with node_and_redis(tmp_path, ["--appendonly", "yes"]) as procs:
        proc = procs[kind]
        procs["real" if kind == "ours" else "ours"].stop()
        with RawClient(proc.port) as c:
            c.call("DEBUG", "POPULATE", KEYS)
            assert c.call("BGREWRITEAOF").startswith(b"+Background append only file")
            wait_until(lambda: _info(c)["aof_rewrite_in_progress"] == "0", 30, "the rewrite")
            assert c.call("SET", "after", "1") == b"+OK\r\n"  # in the incr file
        proc.stop()
        aof_dir = proc.cwd / "appendonlydir"
        size = sum(p.stat().st_size for p in aof_dir.iterdir() if not p.name.endswith("manifest"))
        proc.argv += ["--key-load-delay", "1000", "--loading-process-events-interval-bytes",
                      "1024"]
        proc.start()
        with RawClient(proc.port) as c:
            _probe_while_loading(c, size)
            wait_until(lambda: c.call("DBSIZE") == b":%d\r\n" % (KEYS + 1), 60, "the load")
            assert c.call("GET", "after") == b"$1\r\n1\r\n"
