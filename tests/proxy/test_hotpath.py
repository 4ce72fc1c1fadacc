"""The proxy's hot path: many pipelining clients served in the same poller passes, and the
exact-spelling fast dispatch agreeing with the generic one."""

from __future__ import annotations

import threading
import uuid

from slotgate.protocol.resp import encode_command
from tests.support import ManagedProcess, RawClient


def _bulk(value: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(value), value)


def test_concurrent_pipelining_clients_get_their_own_replies_in_order(
    slotgate: ManagedProcess,
) -> None:
    """16 clients pipeline at once over keys of many slots (so every node connection carries
    all of them): each client gets exactly its own replies, in its order."""
    run = uuid.uuid4().hex[:8]
    failures: list[BaseException] = []
    start = threading.Barrier(16)

    def client(c: int) -> None:
        try:
            with RawClient(slotgate.port) as rc:
                start.wait()
                for chunk in range(3):
                    cmds: list[list[bytes]] = []
                    want: list[bytes] = []
                    for i in range(chunk * 150, chunk * 150 + 150):
                        key = f"hp:{run}:{c}:{i}".encode()
                        value = f"v{c}.{i}".encode() * (1 + i % 7)
                        cmds += [[b"SET", key, value], [b"INCR", f"hp:{run}:{c}:n".encode()],
                                 [b"GET", key], [b"get", key + b":missing"]]
                        want += [b"+OK\r\n", b":%d\r\n" % (i + 1), _bulk(value), b"$-1\r\n"]
                    rc.send_raw(b"".join(encode_command(*cmd) for cmd in cmds))
                    got = rc.read_frames(len(cmds))
                    assert got == want, f"client {c} chunk {chunk}"
        except BaseException as exc:  # reported by the test thread below
            failures.append(exc)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    assert failures == []
    # The cluster is shared by the session's proxy tests: leave no keys behind.
    r = slotgate.client()
    written = list(r.scan_iter(f"hp:{run}:*", count=1000))
    assert r.delete(*written) == 16 * 451


def test_every_spelling_of_a_command_gets_the_same_reply(
    slotgate: ManagedProcess, redis_standalone: ManagedProcess
) -> None:
    """Lower and upper case take the fast dispatch, other spellings the generic one: same
    replies, and the same as one real server for single-slot requests."""
    run = uuid.uuid4().hex[:8]
    key, other = f"sp:{{{run}}}:a", f"sp:{{{run}}}:b"
    with RawClient(slotgate.port) as p, RawClient(redis_standalone.port) as d:
        for spelled in ("set", "SET", "sEt"):
            assert p.call(spelled, key, "1") == d.call(spelled, key, "1") == b"+OK\r\n"
        cases: list[list[str]] = [
            ["get", key], ["GET", key], ["gEt", key],
            ["get"], ["GET"], ["Get"], ["get", key, key], ["GET", key, key],
            ["strlen", key], ["STRLEN", key], ["StrLen", key],
            ["rename", key, other], ["RENAME", other, key], ["ReName", key, other],
            ["exists", other], ["EXISTS", other, key],
        ]
        for argv in cases:
            assert p.call(*argv) == d.call(*argv), argv
        # Keys of different slots in a command routed ``single``: the fast dispatch hands
        # them to the generic one (scripts across slots), whatever the spelling.
        for spelled in ("eval", "EVAL", "eVaL"):
            argv = [spelled, "return KEYS", "2", f"{{a}}{run}", f"{{b}}{run}"]
            assert p.call(*argv) == d.call(*argv), argv
        assert p.call("DEL", key, other) == b":1\r\n"  # leave the shared cluster empty
