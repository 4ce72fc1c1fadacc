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
