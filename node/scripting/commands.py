"""EVAL EVALSHA EVAL_RO EVALSHA_RO and SCRIPT LOAD|EXISTS|FLUSH|KILL|HELP|DEBUG.

``install(server)`` gives the node its engine (``server.scripting``). SCRIPT KILL ends a
script that runs past busy-reply-threshold (node/scripting/busy.py). SCRIPT DEBUG is refused
(there is no Lua debugger).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from slotgate.node.commands.registry import command
from slotgate.node.commands.replies import OK
from slotgate.node.commands.util import parse_int
from slotgate.node.core.errors import CommandError
from slotgate.node.scripting import busy, shebang
from slotgate.node.scripting.engine import Script, ScriptEngine, sha1hex
from slotgate.protocol.resp import array_header, bulk, simple

if TYPE_CHECKING:
    from slotgate.node.core.client import Client
    from slotgate.node.core.server import Server

NOSCRIPT_TEXT = "NOSCRIPT No matching script. Please use EVAL."
KEYS_GT_ARGS = "ERR Number of keys can't be greater than number of args"
KEYS_NEGATIVE = "ERR Number of keys can't be negative"
NO_CLUSTER = "ERR Can not run script on cluster, 'no-cluster' flag is set."
WRITE_FLAG_RO = "ERR Can not execute a script with write flag using *_ro command."
READONLY_REPLICA = "READONLY You can't write against a read only replica."
MASTERDOWN = "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."
MASTERDOWN_NOT_STALE = ("MASTERDOWN Link with MASTER is down, replica-serve-stale-data is set to "
                        "'no' and 'allow-stale' flag is not set on the script.")
FLUSH_OPTION = "ERR SCRIPT FLUSH only support SYNC|ASYNC option"
DEBUG_UNSUPPORTED = "ERR SCRIPT DEBUG is not supported: this server has no Lua debugger"

SCRIPT_HELP = [
    "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DEBUG (YES|SYNC|NO)",
    "    Set the debug mode for subsequent scripts executed.",
    "EXISTS <sha1> [<sha1> ...]",
    "    Return information about the existence of the scripts in the script cache.",
    "FLUSH [ASYNC|SYNC]",
    "    Flush the Lua scripts cache. Very dangerous on replicas.",
    "    When called without the optional mode argument, the behavior is determined by the",
    "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
    "    * ASYNC: Asynchronously flush the scripts cache.",
    "    * SYNC: Synchronously flush the scripts cache.",
    "KILL",
    "    Kill the currently executing Lua script.",
    "LOAD <script>",
    "    Load a script into the scripts cache without executing it.",
    "HELP",
    "    Prints this help.",
]
_HELP_REPLY = array_header(len(SCRIPT_HELP)) + b"".join(simple(line) for line in SCRIPT_HELP)


def engine(c: Client) -> ScriptEngine:
    eng = c.server.scripting
    assert eng is not None
    return eng


def _load(eng: ScriptEngine, body: bytes) -> Script:
    try:
        flags, compat, code = shebang.parse(body)
        return eng.create(body, flags, compat, code)
    except ValueError as e:
        raise CommandError(str(e)) from None


def _eval(c: Client, argv: list[bytes], by_sha: bool, read_only: bool) -> bytes:
    srv = c.server
    if srv.monitors:  # EVAL is shown first, whatever it answers, then the commands it runs
        srv.feed_monitors(c, argv)  # (it skips call()'s feed)
    numkeys = parse_int(argv[2])
    if numkeys > len(argv) - 3:
        raise CommandError(KEYS_GT_ARGS)
    if numkeys < 0:
        raise CommandError(KEYS_NEGATIVE)
    eng = engine(c)
    if by_sha:
        found = (eng.scripts_by_sha.get(argv[1])
                 or eng.scripts.get(argv[1].lower().decode("latin-1")))
        if found is None:
            raise CommandError(NOSCRIPT_TEXT)
        script = found
    else:
        script = _load(eng, argv[1])
    if not script.compat:
        check_flags(c, script.flags, read_only)
    elif running_stale(srv):  # 7.0's legacy scripts do not run on a stale replica
        raise CommandError(MASTERDOWN)
    keys = argv[3 : 3 + numkeys]
    return eng.execute(c, script, keys, argv[3 + numkeys :], read_only)


def running_stale(srv: Server) -> bool:
    """A replica whose link to its master is down, with replica-serve-stale-data no."""
    repl = srv.replication
    return repl is not None and repl.running_stale()


def check_flags(c: Client, flags: int, read_only: bool) -> None:
    """scriptPrepareForRun's checks for a script with a shebang."""
    srv = c.server
    if flags & shebang.FLAG_NO_CLUSTER and srv.cluster_enabled:
        raise CommandError(NO_CLUSTER)
    if not flags & shebang.FLAG_ALLOW_STALE and running_stale(srv):
        raise CommandError(MASTERDOWN_NOT_STALE)
    if not flags & shebang.FLAG_NO_WRITES:
        repl = srv.replication
        if (repl is not None and repl.role == "slave" and srv.config.get("replica-read-only")
                and not c.is_master):
            raise CommandError(READONLY_REPLICA)
        if read_only:
            raise CommandError(WRITE_FLAG_RO)


def flags_deny_oom(flags: int) -> bool:
    """scriptFlagsToCmdFlags: a script with a shebang is refused when out of memory unless it
    declares allow-oom or no-writes (a script without one is checked at its first write)."""
    return not flags & (shebang.FLAG_ALLOW_OOM | shebang.FLAG_NO_WRITES)


def _eval_flags(c: Client, argv: list[bytes]) -> int | None:
    """evalGetCommandFlags for EVAL: the cached script's flags, else its shebang's; None for a
    script without a shebang, or whose shebang does not parse (the command runs and answers
    its error)."""
    script = engine(c).scripts.get(sha1hex(argv[1]))
    if script is not None:
        return None if script.compat else script.flags
    try:
        flags, compat, _ = shebang.parse(argv[1])
    except shebang.ShebangError:
        return None
    return None if compat else flags


def _evalsha_flags(c: Client, argv: list[bytes]) -> int | None:
    script = engine(c).scripts.get(argv[1].lower().decode("latin-1"))
    return None if script is None or script.compat else script.flags


def set_script_flags(server: Server, names: tuple[str, ...],
                     flags_of: Callable[[Client, list[bytes]], int | None]) -> None:
    """Script commands are deny-oom, write and stale by their script's flags (``flags_of``:
    shebang.FLAG_* bits, None for the command's own flags), decided per call."""
    def denyoom(c: Client, argv: list[bytes]) -> bool:
        flags = flags_of(c, argv)
        return flags is not None and flags_deny_oom(flags)

    for name in names:
        cmd = server.table.get(name.encode())
        if cmd is not None:
            cmd.denyoom = True  # the OOM check looks at it, then asks ``denyoom``
            cmd.denyoom_of = denyoom
            server.script_flags_of[name] = flags_of


def _eval_handler(by_sha: bool, read_only: bool) -> Callable[[Client, list[bytes]], bytes]:
    def handler(c: Client, argv: list[bytes]) -> bytes:
        return _eval(c, argv, by_sha, read_only)
    return handler


for _name, _by_sha, _ro in (("eval", False, False), ("evalsha", True, False),
                            ("eval_ro", False, True), ("evalsha_ro", True, True)):
    command(_name)(_eval_handler(_by_sha, _ro))


@command("script|load")
def script_load(c: Client, argv: list[bytes]) -> bytes:
    return bulk(_load(engine(c), argv[2]).sha)


@command("script|exists")
def script_exists(c: Client, argv: list[bytes]) -> bytes:
    scripts = engine(c).scripts
    found = [b":1\r\n" if a.lower().decode("latin-1") in scripts else b":0\r\n"
             for a in argv[2:]]
    return array_header(len(found)) + b"".join(found)


@command("script|flush")
def script_flush(c: Client, argv: list[bytes]) -> bytes:
    if len(argv) > 3 or (len(argv) == 3 and argv[2].lower() not in (b"sync", b"async")):
        raise CommandError(FLUSH_OPTION)
    engine(c).flush()
    return OK


@command("script|kill")
def script_kill(c: Client, argv: list[bytes]) -> bytes:
    return busy.kill(c, is_eval=True)


@command("script|help")
def script_help(c: Client, argv: list[bytes]) -> bytes:
    return _HELP_REPLY


@command("script|debug")
def script_debug(c: Client, argv: list[bytes]) -> bytes:
    raise CommandError(DEBUG_UNSUPPORTED)


def install(server: Server) -> None:
    server.scripting = ScriptEngine(server)
    set_script_flags(server, ("eval", "eval_ro"), _eval_flags)
    set_script_flags(server, ("evalsha", "evalsha_ro"), _evalsha_flags)
