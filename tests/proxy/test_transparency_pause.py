"""CLIENT PAUSE / UNPAUSE through the proxy hold its clients as one redis-server holds its own.

Each scenario runs against one standalone redis-server and through the proxy, and what the
clients observe is compared: a write held under WRITE is not applied (a read by another client
is served meanwhile and sees the old value) and is answered after CLIENT UNPAUSE; a write
queued inside MULTI is held too, EXEC of reads is not; ALL holds reads until the timeout;
the argument errors are Redis' own; a held client counts in ``blocked_clients`` and shows flag
``b`` in CLIENT LIST.
"""

from __future__ import annotations

import time
import uuid

from tests.support import ManagedProcess, RawClient

LONG_MS = "60000"  # ended by CLIENT UNPAUSE long before


def _nothing_yet(c: RawClient) -> bool:
    """No reply within a short window (a held request's reply never comes before the
    pause ends; under load a reply that is not held may come late and go unseen)."""
    try:
        c.read(timeout_s=0.3)
    except TimeoutError:
        return True
    return False


def _info_field(frame: bytes, name: str) -> str:
    return next(line.split(":", 1)[1] for line in frame.decode().splitlines()
                if line.startswith(name + ":"))


def _write_pause(port: int, run: str) -> list[object]:
    k = f"pz{run}"
    seen: list[object] = []
    with RawClient(port) as a, RawClient(port) as b, RawClient(port) as c:
        b_id = b.call("CLIENT", "ID")[1:-2].decode()
        seen.append(a.call("CLIENT", "PAUSE", LONG_MS, "WRITE"))
        b.send("SET", k, "v")  # held
        seen.append(c.call("GET", k))  # a read is served, the write not applied yet
        seen.append(c.call("EXISTS", k))
        seen.append(_nothing_yet(b))
        # A held client counts as blocked (7.0.15), and CLIENT LIST shows it so.
        seen.append(_info_field(c.call("INFO", "clients"), "blocked_clients"))
        line = c.call("CLIENT", "LIST", "ID", b_id).decode()
        seen.append([f for f in line.split() if f.startswith(("flags=", "cmd="))])
        c.send("MULTI")
        seen.append(c.read())
        c.send("GET", k)
        seen.append(c.read())  # queued: reads are not held
        seen.append(c.call("EXEC"))
        seen.append(a.call("CLIENT", "UNPAUSE"))
        seen.append(b.read())  # the held SET, answered now
        seen.append(c.call("GET", k))
        seen.append(a.call("CLIENT", "PAUSE", LONG_MS, "WRITE"))
        c.send("MULTI")
        seen.append(c.read())
        c.send("DEL", k)  # a write inside MULTI is held too
        seen.append(_nothing_yet(c))
        seen.append(b.call("GET", k))
        seen.append(a.call("CLIENT", "UNPAUSE"))
        seen.append(c.read())
        seen.append(c.call("EXEC"))
        seen.append(b.call("EXISTS", k))
    return seen


def _all_pause(port: int, run: str) -> list[object]:
    k = f"pz{run}"
    seen: list[object] = []
    with RawClient(port) as a, RawClient(port) as b:
        seen.append(a.call("SET", k, "v"))
        seen.append(a.call("CLIENT", "PAUSE", "500"))
        start = time.monotonic()
        seen.append(b.call("GET", k))  # held until the pause times out
        seen.append(time.monotonic() - start >= 0.4)
        seen.append(b.call("DEL", k))
        for argv in (["x"], ["-1"], ["10", "READ"], ["10", "WRITE", "x"]):
            seen.append(a.call("CLIENT", "PAUSE", *argv))
    return seen


def test_write_pause_matches_standalone(slotgate: ManagedProcess,
                                        redis_standalone: ManagedProcess) -> None:
    run = uuid.uuid4().hex[:6]
    want = _write_pause(redis_standalone.port, run)
    assert want[1] == b"$-1\r\n" and want[9] == b"+OK\r\n"
    assert want[4:6] == ["1", ["flags=b", "cmd=set"]]
    assert _write_pause(slotgate.port, run) == want


def test_all_pause_matches_standalone(slotgate: ManagedProcess,
                                      redis_standalone: ManagedProcess) -> None:
    run = uuid.uuid4().hex[:6]
    want = _all_pause(redis_standalone.port, run)
    assert want[3] is True
    assert _all_pause(slotgate.port, run) == want
