"""A script that runs long: Redis' scriptInterrupt, busy-reply-threshold, SCRIPT/FUNCTION KILL.

The sandbox's count hook (sandbox.py) calls ``tick`` every ``HOOK_EVERY_INSTRUCTIONS`` Lua
instructions of a run. Until the run is ``busy-reply-threshold`` ms old that is a clock read;
after it the run is *timed out*, as in Redis:

    tick ─▶ past the threshold? ─▶ (once) a command check answering -BUSY to every command
             │                      without Redis' ``allow_busy`` flag (a server command check
             │                      forces the slow path), SHUTDOWN without NOSAVE included
             └▶ server.blocked.serve(caller) (node/core/blocked.py): a nested poller pass
                over every other client's socket (their replies flushed by it), new
                connections, the cluster bus
             ─▶ True once SCRIPT KILL / FUNCTION KILL marked the run killed: the hook raises
                Redis' killed-script error (and from then on on every line, so a ``pcall``
                in the script cannot keep it alive)

A run that wrote cannot be killed (``-UNKILLABLE``): only SHUTDOWN NOSAVE ends it, by ending
the process without saving. The run's caller is never served while its script runs.
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING

from slotgate.node.commands.replies import OK
from slotgate.node.core.errors import CommandError
from slotgate.protocol.resp import array_header, bulk, map_header

if TYPE_CHECKING:
    from slotgate.node.commands.registry import Command
    from slotgate.node.core.client import Client
    from slotgate.node.core.server import Server
    from slotgate.node.scripting.engine import Run, ScriptEngine

log = logging.getLogger("node.scripting")

# Lua instructions between two ticks (Redis' count hook uses the same period): about half a
# millisecond of a busy loop, a Python call each time
HOOK_EVERY_INSTRUCTIONS = 100_000

BUSY_EVAL = "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."
BUSY_FUNCTION = ("BUSY Redis is busy running a script. You can only call FUNCTION KILL or "
                 "SHUTDOWN NOSAVE.")
UNKILLABLE = ("UNKILLABLE Sorry the script already executed write commands against the dataset. "
              "You can either wait the script termination or kill the server in a hard way "
              "using the SHUTDOWN NOSAVE command.")
UNKILLABLE_MASTER = ("UNKILLABLE The busy script was sent by a master instance in the context "
                     "of replication and cannot be killed.")
NOTBUSY = "NOTBUSY No scripts in execution right now."
# what the count hook raises in the script (or library code) it ends
KILLED = b"ERR Script killed by user with SCRIPT KILL..."
LOAD_TIMEOUT = b"ERR FUNCTION LOAD timeout"
LOAD_TIMEOUT_MS = 500  # a library's code (FUNCTION LOAD/RESTORE) may run this long
SYNTAX = b"-ERR syntax error\r\n"
_SHUTDOWN_OPTIONS = frozenset({b"nosave", b"save", b"now", b"force", b"abort"})


def tick(eng: ScriptEngine) -> bytes | None:
    """The count hook's Python side: the error that ends the running code (the script was
    killed, a library's code ran past LOAD_TIMEOUT_MS), or None to go on."""
    run = eng.run
    if run is None:  # a library's load code, or between runs
        started_ns = eng.load_started_ns
        if started_ns and (time.monotonic_ns() - started_ns) // 1_000_000 > LOAD_TIMEOUT_MS:
            return LOAD_TIMEOUT
        return None
    if run.killed:
        return KILLED
    srv = eng.server
    if not run.timed_out:
        elapsed_ms = (time.monotonic_ns() - run.start_ns) // 1_000_000
        if elapsed_ms < int(srv.config.get("busy-reply-threshold")):
            return None
        _time_out(eng, run, elapsed_ms)
    srv.blocked.serve(run.caller)
    return KILLED if run.killed else None


def _time_out(eng: ScriptEngine, run: Run, elapsed_ms: int) -> None:
    run.timed_out = True
    log.warning("Slow script detected: still in execution after %d milliseconds. You can try "
                "killing the script using the %s command. Script name is: %s.", elapsed_ms,
                "FUNCTION KILL" if eng.functions else "SCRIPT KILL", run.sha)
    busy_reply = b"-%s\r\n" % (BUSY_FUNCTION if eng.functions else BUSY_EVAL).encode()
    own = eng.client

    def refuse_while_busy(c: Client, cmd: Command, argv: list[bytes]) -> bytes | None:
        if c is own:  # the script's own commands
            return None
        if "allow_busy" not in cmd.flags:
            return busy_reply
        if cmd.full_name == "shutdown":
            return _shutdown(eng.server, argv, busy_reply)
        return None

    run.busy_check = refuse_while_busy
    eng.server.add_command_check(refuse_while_busy)


def end(eng: ScriptEngine, run: Run) -> None:
    """The run is over: commands are served as usual again."""
    if run.busy_check is not None:
        eng.server.remove_command_check(run.busy_check)
        run.busy_check = None


def _shutdown(srv: Server, argv: list[bytes], busy_reply: bytes) -> bytes | None:
    """SHUTDOWN while a script is busy: NOSAVE ends the process at once, without saving;
    any other form is refused (bad options are the handler's syntax error)."""
    opts = {a.lower() for a in argv[1:]}
    if not opts <= _SHUTDOWN_OPTIONS or b"abort" in opts:
        return None
    if b"nosave" not in opts:
        return busy_reply
    if b"save" in opts:
        return SYNTAX
    log.warning("User requested shutdown...")
    persistence = srv.persistence
    if persistence is not None:
        persistence.save_params = []  # NOSAVE: no snapshot on the way out
    for hook in srv.shutdown_hooks:
        try:
            hook()
        except Exception:  # noqa: BLE001 - the process ends whatever a hook does
            log.exception("shutdown hook failed")
    log.warning("Redis is now ready to exit, bye bye...")
    logging.shutdown()
    os._exit(0)


def running(srv: Server) -> ScriptEngine | None:
    """The engine whose script is running (the EVAL one or the functions' one), if any."""
    eng = srv.scripting
    if eng is not None and eng.run is not None:
        return eng
    fns = srv.functions
    if fns is not None and fns.engine.run is not None:
        return fns.engine
    return None


def kill(c: Client, is_eval: bool) -> bytes:
    """SCRIPT KILL (``is_eval``) / FUNCTION KILL: Redis' scriptKill."""
    eng = running(c.server)
    if eng is None or eng.run is None:
        raise CommandError(NOTBUSY)
    run = eng.run
    if run.caller.is_master:
        raise CommandError(UNKILLABLE_MASTER)
    if run.wrote:
        raise CommandError(UNKILLABLE)
    if is_eval and eng.functions:
        raise CommandError(BUSY_FUNCTION)
    if not is_eval and not eng.functions:
        raise CommandError(BUSY_EVAL)
    run.killed = True
    log.warning("Lua script killed by user with SCRIPT KILL.")  # (FUNCTION KILL too, as Redis)
    return OK


def running_script(c: Client) -> bytes:
    """FUNCTION STATS' ``running_script``: nil, or the running function's name, command and
    duration (a running EVAL refuses FUNCTION STATS with -BUSY, as Redis)."""
    eng = running(c.server)
    if eng is None or eng.run is None:
        return c.null_bulk
    if not eng.functions:
        raise CommandError(BUSY_EVAL)
    run = eng.run
    argv = run.argv or []
    duration_ms = (time.monotonic_ns() - run.start_ns) // 1_000_000
    return b"".join([map_header(3, c.resp), bulk("name"), bulk(run.sha), bulk("command"),
                     array_header(len(argv)), *[bulk(a) for a in argv],
                     bulk("duration_ms"), b":%d\r\n" % duration_ms])
