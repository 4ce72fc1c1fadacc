"""MONITOR through the proxy streams what its clients send, in Redis' line format.

The same requests go to one standalone redis-server and through the proxy while a second
client monitors; the lines compare equal once the timestamp and the client's port are masked
(passwords redacted, admin commands and refused requests left out, a transaction's commands
in order, a cross-slot MGET as the client sent it).
"""

from __future__ import annotations

import re
import uuid

from tests.support import ManagedProcess, RawClient

_MASK = re.compile(rb"^\+\d+\.\d{6} \[0 127\.0\.0\.1:\d+\] ")


def _script(run: str) -> list[list[str]]:
    k, k2 = f"mon{run}:a", f"mon{run}:b"
    return [["SET", k, "a b"], ["GET", k], ["MULTI"], ["SET", k, "1\n\x01"], ["GET", k],
            ["EXEC"], ["AUTH", "secret"], ["HELLO", "2", "AUTH", "default", "pw"],
            ["CONFIG", "GET", "maxmemory"], ["NOSUCHCOMMAND"], ["GET"], ["PING"],
            ["CLIENT", "ID"], ["MGET", k, k2], ["DEL", k, k2], ["ECHO", f"end{run}"]]


def _lines(port: int, run: str) -> list[bytes]:
    with RawClient(port) as m, RawClient(port) as c:
        assert m.call("MONITOR") == b"+OK\r\n"
        for argv in _script(run):
            c.call(*argv)
        lines = []
        while not lines or f"end{run}".encode() not in lines[-1]:
            line = m.read(timeout_s=10)
            assert _MASK.match(line), line
            lines.append(_MASK.sub(b"+<ts> [0 <addr>] ", line))
        assert m.call("RESET") == b"+RESET\r\n"
    return lines


def test_monitor_lines_match_standalone(slotgate: ManagedProcess,
                                        redis_standalone: ManagedProcess) -> None:
    run = uuid.uuid4().hex[:6]
    want = _lines(redis_standalone.port, run)
    assert b'+<ts> [0 <addr>] "AUTH" "(redacted)"\r\n' in want
    assert _lines(slotgate.port, run) == want


def test_commands_of_the_proxys_own_state_are_refused_inside_multi(
        slotgate: ManagedProcess) -> None:
    """MONITOR, CLIENT PAUSE / TRACKING, SLOWLOG and ACL inside MULTI: refused as the other
    commands of the proxy's own state (docs/COMMANDS.md "Inside MULTI"), never run on the
    transaction's node connection; the transaction then ends in EXECABORT."""
    for argv in (["MONITOR"], ["CLIENT", "PAUSE", "10"], ["CLIENT", "UNPAUSE"],
                 ["CLIENT", "TRACKING", "ON"], ["SLOWLOG", "LEN"], ["ACL", "WHOAMI"]):
        name = "|".join(argv[:2]).lower() if len(argv) > 1 else argv[0].lower()
        with RawClient(slotgate.port) as c:
            assert c.call("MULTI") == b"+OK\r\n"
            assert c.call(*argv) == (b"-ERR slotgate: '%s' cannot run inside MULTI through "
                                     b"the proxy\r\n" % name.encode())
            assert c.call("EXEC").startswith(b"-EXECABORT")
            assert c.call("PING") == b"+PONG\r\n"
