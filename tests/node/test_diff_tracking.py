"""Client-side caching and the CLIENT subcommands around it, against redis-server 7.0.15.

Single-connection cases use tests/node/diff.py. Invalidations need several connections: a
scenario runs the same steps on both servers with named connections (``{name}`` in a line is
that connection's client id there) and compares every frame each connection receives: the
reply and whatever arrives after it (pushes, Pub/Sub messages) within a short wait.
"""

from __future__ import annotations

import shlex
import time

import pytest

from tests.node.diff import Case, Pair, check_cases
from tests.support import RawClient

CASES = [
    Case("tracking errors", [
        "CLIENT TRACKING ON PREFIX a",
        "CLIENT TRACKING ON BCAST PREFIX a PREFIX ab",
        "CLIENT TRACKING ON BCAST PREFIX ab PREFIX a",
        "CLIENT TRACKING ON BCAST PREFIX a PREFIX a",
        "CLIENT TRACKING ON OPTIN OPTOUT",
        "CLIENT TRACKING ON OPTIN BCAST",
        "CLIENT TRACKING ON OPTOUT BCAST",
        "CLIENT TRACKING ON REDIRECT 99999",
        "CLIENT TRACKING ON REDIRECT abc",
        "CLIENT TRACKING ON REDIRECT",
        "CLIENT TRACKING ON PREFIX",
        "CLIENT TRACKING foo",
        "CLIENT TRACKING ON foo",
        "CLIENT TRACKING",
        "CLIENT TRACKINGINFO",
        "CLIENT GETREDIR",
        "CLIENT CACHING yes",
        "CLIENT CACHING maybe",
        "CLIENT TRACKINGINFO extra",
    ]),
    Case("tracking modes", [
        "CLIENT TRACKING ON",
        "CLIENT TRACKINGINFO",
        "CLIENT GETREDIR",
        "CLIENT CACHING yes",
        "CLIENT CACHING no",
        "CLIENT TRACKING ON BCAST",
        "CLIENT TRACKING ON OPTIN",
        "CLIENT TRACKINGINFO",
        "CLIENT CACHING yes",
        "CLIENT TRACKINGINFO",
        "GET k",
        "CLIENT TRACKINGINFO",
        "CLIENT CACHING no",
        "CLIENT CACHING maybe",
        "CLIENT TRACKING ON OPTOUT",
        "CLIENT TRACKING OFF",
        "CLIENT TRACKING ON OPTOUT NOLOOP",
        "CLIENT CACHING no",
        "CLIENT TRACKINGINFO",
        "CLIENT TRACKING OFF",
        "CLIENT TRACKING ON BCAST",
        "CLIENT TRACKINGINFO",
        "CLIENT TRACKING ON BCAST PREFIX x",
        "CLIENT TRACKING OFF",
        "CLIENT TRACKING ON BCAST PREFIX x PREFIX y NOLOOP",
        "CLIENT TRACKINGINFO",
        "CLIENT TRACKING ON BCAST PREFIX xy",
        "CLIENT TRACKING ON BCAST PREFIX x",
        "CLIENT TRACKING ON BCAST PREFIX z",
        "CLIENT TRACKINGINFO",
        "CLIENT TRACKING ON",
        "CLIENT TRACKING OFF",
        "CLIENT TRACKINGINFO",
        "CLIENT GETREDIR",
        "CLIENT TRACKING ON BCAST PREFIX a NOLOOP",
        "RESET",
        "CLIENT TRACKINGINFO",
        "CLIENT TRACKING ON OPTIN",
        "CLIENT CACHING yes",
        "MULTI",
        "GET a",
        "CLIENT TRACKINGINFO",
        "EXEC",
        "CLIENT TRACKINGINFO",
    ]),
    Case("pause and no-evict errors", [
        "CLIENT PAUSE abc",
        "CLIENT PAUSE -1",
        "CLIENT PAUSE 1.5",
        "CLIENT PAUSE +5",
        "CLIENT PAUSE 05",
        "CLIENT PAUSE 9223372036854775808",
        "CLIENT PAUSE 100 foo",
        "CLIENT PAUSE 100 write extra",
        "CLIENT UNPAUSE x",
        "CLIENT UNPAUSE",
        "CLIENT NO-EVICT maybe",
        "CLIENT NO-EVICT on",
        "CLIENT NO-EVICT OFF",
        "CLIENT PAUSE 0 WRITE",
        "CLIENT UNPAUSE",
    ]),
    Case("kill errors", [
        "CLIENT KILL id 0",
        "CLIENT KILL id x",
        "CLIENT KILL type foo",
        "CLIENT KILL user nobody",
        "CLIENT KILL user default skipme maybe",
        "CLIENT KILL foo bar",
        "CLIENT KILL id 1 type",
        "CLIENT KILL 1.2.3.4:5",
        "CLIENT KILL maxage 5",
        "CLIENT KILL laddr 1.2.3.4:5",
        "CLIENT KILL addr 1.2.3.4:5 skipme no",
        "CLIENT KILL type master",
        "CLIENT KILL type slave",
        "CLIENT KILL type replica",
        "CLIENT KILL type pubsub",
        "CLIENT KILL id 999999",
        "CLIENT KILL user default type pubsub",
        "CLIENT HELP",
    ]),
]


@pytest.mark.parametrize("proto", [2, 3])
def test_tracking_commands(diff_pair: Pair, proto: int) -> None:
    assert check_cases(diff_pair, CASES, proto) == []


# -- scenarios with several connections --------------------------------------------------------
def _frames(conn: RawClient, first_timeout_s: float) -> list[bytes]:
    got: list[bytes] = []
    timeout = first_timeout_s
    while True:
        try:
            got.append(conn.read(timeout_s=timeout))
        except (TimeoutError, ConnectionError):  # nothing more, or closed (QUIT)
            return got
        timeout = 0.15


def _run(port: int, steps: list[str], proto: int) -> list[str]:
    conns: dict[str, RawClient] = {}
    ids: dict[str, int] = {}
    seen: list[str] = []
    try:
        for step in steps:
            name, _, line = step.partition(" ")
            if name not in conns:
                conn = conns[name] = RawClient(port)
                ids[name] = int(conn.call("CLIENT", "ID")[1:-2])
                if proto == 3 and not name.startswith("r2"):
                    conn.call("HELLO", "3")
            conn = conns[name]
            if line.startswith("SLEEP "):
                time.sleep(float(line.split()[1]))
                continue
            if line == "READ":
                seen.append(f"{name} READ {_frames(conn, 0.3)!r}")
                continue
            for other, cid in ids.items():
                line = line.replace("{" + other + "}", str(cid))
            conn.send(*[w.encode() for w in shlex.split(line)])
            frames = _frames(conn, 2.0)
            for other, cid in ids.items():  # ids differ between the servers
                frames = [f.replace(b":%d\r\n" % cid, b":<" + other.encode() + b">\r\n")
                          for f in frames]
            seen.append(f"{name} {shlex.split(line)[0]}: {frames!r}")
    finally:
        for conn in conns.values():
            conn.close()
    return seen


def check_scenario(pair: Pair, steps: list[str], proto: int) -> None:
    with RawClient(pair.real_port) as r, RawClient(pair.ours_port) as o:
        r.call("FLUSHALL")
        o.call("FLUSHALL")
    real = _run(pair.real_port, steps, proto)
    ours = _run(pair.ours_port, steps, proto)
    assert ours == real


# Each kind of key change, seen by a default-mode tracking client ("t", RESP3 pushes when
# proto=3) and by a client redirecting to a RESP2 subscriber ("r2", always RESP2).
CHANGES = {
    "set": ["w SET k v"],
    "del": ["w DEL k"],
    "incr": ["w INCR n"],
    "in place": ["w RPUSH l x"],
    "expire cmd": ["w EXPIRE k 100"],
    "append": ["w APPEND k x"],
    "rename": ["w RENAME k k2"],
    "rename onto": ["w RENAME n k"],
    "lazy expiry": ["w PEXPIRE k 50", "w SLEEP 0.2", "w GET k"],
    "active expiry": ["w PEXPIRE k 50", "w SLEEP 0.4"],
    "flushdb": ["w FLUSHDB"],
    "flushall": ["w FLUSHALL"],
    "multi": ["w MULTI", "w SET k 1", "w INCR n", "w EXEC"],
    "own write": ["t SET k mine"],
    "swapdb": ["w SWAPDB 0 1"],
    "move": ["w MOVE k 1"],
    "copy": ["w COPY k2 k REPLACE"],
    "getdel": ["w GETDEL k"],
    "getex": ["w GETEX k PX 100000"],
    "persist": ["w EXPIRE k 100", "w PERSIST k"],
    "setrange": ["w SETRANGE k 1 zz"],
    "lpop": ["w LPOP l"],
    "linsert": ["w LINSERT l BEFORE a b"],
    "sort store": ["w SORT l ALPHA STORE k"],
    "incrbyfloat": ["w INCRBYFLOAT n 1.5"],
    "own flush": ["t FLUSHALL"],
    "own multi": ["t MULTI", "t SET k 1", "t GET n", "t EXEC"],
    "unlink": ["w UNLINK k n"],
    "select other db": ["w SELECT 1", "w SET k other"],
}
SETUP = ["w SET k v0", "w SET n 1", "w RPUSH l a", "w SET k2 x"]


@pytest.mark.parametrize("change", sorted(CHANGES))
@pytest.mark.parametrize("proto", [2, 3])
def test_invalidation_per_key_change(diff_pair: Pair, change: str, proto: int) -> None:
    steps = [*SETUP,
             "r2 SUBSCRIBE __redis__:invalidate",
             "t CLIENT TRACKING ON", "t GET k", "t GET n", "t LRANGE l 0 -1", "t GET k2",
             "u CLIENT TRACKING ON REDIRECT {r2}", "u MGET k n k2", "u LLEN l",
             *CHANGES[change], "t PING", "u PING", "r2 READ", "t READ"]
    check_scenario(diff_pair, steps, proto)


@pytest.mark.parametrize("proto", [2, 3])
def test_bcast_and_noloop(diff_pair: Pair, proto: int) -> None:
    steps = ["r2 SUBSCRIBE __redis__:invalidate",
             "b CLIENT TRACKING ON BCAST PREFIX x PREFIX y",
             "n CLIENT TRACKING ON BCAST NOLOOP",
             "c CLIENT TRACKING ON BCAST PREFIX z REDIRECT {r2}",
             "w MSET x2 1 x1 2 y 3 zz 4 other 5",
             "n SET x3 1", "n MSET x4 1 q 2", "b SET y1 2",
             "w FLUSHDB", "b PING", "n PING", "r2 READ"]
    check_scenario(diff_pair, steps, proto)


@pytest.mark.parametrize("proto", [2, 3])
def test_optin_optout_noloop_and_broken_redirect(diff_pair: Pair, proto: int) -> None:
    steps = ["i CLIENT TRACKING ON OPTIN", "i GET a", "i CLIENT CACHING yes", "i GET b",
             "i GET c",
             "o CLIENT TRACKING ON OPTOUT", "o GET d", "o CLIENT CACHING no", "o GET e",
             "l CLIENT TRACKING ON NOLOOP", "l GET f", "l SET f 1", "l GET g",
             "gone PING", "x CLIENT TRACKING ON REDIRECT {gone}", "x GET h", "gone QUIT",
             "w MSET a 1 b 1 c 1 d 1 e 1 f 2 g 1 h 1",
             "i PING", "o PING", "l PING", "x PING", "x CLIENT TRACKINGINFO",
             "x CLIENT GETREDIR"]
    check_scenario(diff_pair, steps, proto)


# -- CLIENT PAUSE, several clients -------------------------------------------------------------
HELD_WRITE = ["SET a 1", "PUBLISH ch m", "PFCOUNT h", "EXPIRE a 10", "SPUBLISH ch m"]
NOT_HELD_WRITE = ["GET a", "PING", "EVAL_RO \"return 1\" 0", "SCRIPT EXISTS x", "TTL a",
                  "CLIENT ID"]


def test_pause_write_holds_writes_only(diff_pair: Pair) -> None:
    for port in (diff_pair.real_port, diff_pair.ours_port):
        _check_pause_write(port, "real" if port == diff_pair.real_port else "ours")


def _check_pause_write(port: int, side: str) -> None:
    with RawClient(port) as admin, RawClient(port) as reader:
        held = [RawClient(port) for _ in HELD_WRITE]
        try:
            admin.call("FLUSHALL")
            assert admin.call("CLIENT", "PAUSE", "100000", "WRITE") == b"+OK\r\n"
            for conn, line in zip(held, HELD_WRITE, strict=True):
                conn.send(*shlex.split(line))
            for line in NOT_HELD_WRITE:
                reader.send(*shlex.split(line))
                reader.read(timeout_s=2)  # answered during the pause
            for conn, line in zip(held, HELD_WRITE, strict=True):
                assert conn.nothing_pending(0.05), (side, line)
            assert b"blocked_clients:%d" % len(HELD_WRITE) in admin.call("INFO", "clients")
            assert admin.call("CLIENT", "UNPAUSE") == b"+OK\r\n"
            for conn, line in zip(held, HELD_WRITE, strict=True):
                assert conn.read(timeout_s=5)[:1] in (b"+", b":"), (side, line)
        finally:
            for conn in held:
                conn.close()


def test_pause_all_holds_every_command_in_order(diff_pair: Pair) -> None:
    for port in (diff_pair.real_port, diff_pair.ours_port):
        with RawClient(port) as admin, RawClient(port) as a, RawClient(port) as b:
            admin.call("FLUSHALL")
            a.call("PING")
            b.call("PING")
            assert admin.call("CLIENT", "PAUSE", "700", "ALL") == b"+OK\r\n"
            a.send("SET", "k", "first")
            time.sleep(0.05)
            b.send("SET", "k", "second")
            b.send("GET", "k")
            a.send("CLIENT", "UNPAUSE")  # held too: only the timeout ends an ALL pause
            assert a.nothing_pending(0.2) and b.nothing_pending(0.05)
            assert a.read(timeout_s=5) == b"+OK\r\n"
            assert b.read(timeout_s=5) == b"+OK\r\n"
            assert b.read(timeout_s=5) == b"$6\r\nsecond\r\n"
            assert a.read(timeout_s=5) == b"+OK\r\n"


def test_pause_keeps_expired_keys_until_it_ends(diff_pair: Pair) -> None:
    for port in (diff_pair.real_port, diff_pair.ours_port):
        with RawClient(port) as admin, RawClient(port) as reader:
            admin.call("FLUSHALL")
            admin.call("SET", "k", "v", "PX", "50")
            admin.call("CLIENT", "PAUSE", "100000", "WRITE")
            time.sleep(0.3)
            assert reader.call("GET", "k") == b"$-1\r\n"  # logically expired
            assert reader.call("DBSIZE") == b":1\r\n"  # but kept while paused
            admin.call("CLIENT", "UNPAUSE")
            assert reader.call("GET", "k") == b"$-1\r\n"
            assert reader.call("DBSIZE") == b":0\r\n"


@pytest.mark.parametrize("proto", [2, 3])
def test_kill_filters_kill(diff_pair: Pair, proto: int) -> None:
    steps = ["a PING", "b SUBSCRIBE ch", "c PING", "d PING",
             "k CLIENT KILL ID {a}", "a PING",
             "k CLIENT KILL TYPE pubsub", "b READ",
             "k CLIENT KILL ID {c} USER nobody", "k CLIENT KILL ID {c} TYPE master",
             "k CLIENT KILL ID {c} TYPE normal SKIPME no", "c PING",
             "k CLIENT KILL USER default SKIPME yes", "d PING", "k PING",
             "k CLIENT KILL ID {k} SKIPME no"]
    check_scenario(diff_pair, steps, proto)


@pytest.mark.parametrize("proto", [2, 3])
def test_pause_and_config(diff_pair: Pair, proto: int) -> None:
    steps = ["a CONFIG GET tracking-table-max-keys",
             "a CONFIG SET tracking-table-max-keys 5", "a CONFIG GET tracking-table-max-keys",
             "a CONFIG SET tracking-table-max-keys 1000000",
             "h PING", "m MULTI", "a CLIENT PAUSE 100000 WRITE", "h SET k 1", "h READ",
             "m GET k", "m SET k 2", "a CLIENT UNPAUSE", "h READ", "m READ",
             "m EXEC"]
    check_scenario(diff_pair, steps, proto)


def test_unblock_leaves_a_held_client_held(diff_pair: Pair) -> None:
    """Ours only: redis-server 7.0.15 crashes on CLIENT UNBLOCK of a client held by a pause;
    the node answers 0 and keeps it held, as later Redis versions do."""
    with RawClient(diff_pair.ours_port) as a, RawClient(diff_pair.ours_port) as h:
        hid = h.call("CLIENT", "ID")[1:-2]
        a.call("CLIENT", "PAUSE", "100000", "WRITE")
        h.send("SET", "k", "1")
        time.sleep(0.1)
        assert a.call("CLIENT", "UNBLOCK", hid) == b":0\r\n"
        assert h.nothing_pending(0.2)
        a.call("CLIENT", "UNPAUSE")
        assert h.read(timeout_s=5) == b"+OK\r\n"
