"""The scripting engine: one Lua 5.1 interpreter per node (lupa's ``lupa.lua51``, the
PUC-Rio Lua 5.1 that Redis embeds), the script cache, and a script run.

A run (Redis' scriptPrepareForRun / scriptCall / scriptResetRun)::

    EVAL -> flags checks (shebang.py) -> KEYS/ARGV -> xpcall(script)      [sandbox.py]
         redis.call(...) -> ScriptEngine.call: lookup, arity, noscript, read-only script,
             write on a read-only replica, cluster keys -> dispatch.call(script client)
             (or, when nothing observes it, _run_command: the handler and its stats)
             -> reply bytes -> Lua values (convert.py)
         result -> RESP for the caller's protocol (sandbox.py's encode; a string: bulk())

The commands a script runs go through ``dispatch.call`` as a client of the engine's own (no
socket; MONITOR shows it as ``lua``), so they are counted, logged and propagated as any
command. What they propagate is collected during the run and sent afterwards: one command
as it is, several wrapped in MULTI/EXEC (Redis 7.0's effects replication); ``redis.set_repl``
picks the targets. ``SCRIPT FLUSH`` drops the cache and the interpreter.

The interpreter's memory is bounded (``LUA_MAX_MEMORY_BYTES``): a script that allocates past
it fails with an error reply; an error in a script never reaches the node.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import lupa.lua51 as lua51

from slotgate.node.core import dispatch
from slotgate.node.core.client import Client
from slotgate.node.core.config import LOG_VERBOSE
from slotgate.node.core.errors import CommandError
from slotgate.node.core.memory import dict_table_slots, jemalloc_size, sds_size
from slotgate.node.scripting import busy, libs
from slotgate.node.scripting.convert import ReplyToLua, error_text
from slotgate.node.scripting.sandbox import SANDBOX_LUA
from slotgate.node.scripting.shebang import (
    FLAG_ALLOW_CROSS_SLOT,
    FLAG_ALLOW_OOM,
    FLAG_ALLOW_STALE,
    FLAG_NO_WRITES,
)
from slotgate.protocol import commands as pc
from slotgate.protocol.resp import bulk
from slotgate.protocol.slots import key_slot

if TYPE_CHECKING:
    from slotgate.node.commands.registry import Command
    from slotgate.node.core.server import Server

log = logging.getLogger("node.scripting")
_clock_ns = time.perf_counter_ns  # (dispatch's clock for command durations)

LUA_MAX_MEMORY_BYTES = 512 * 1024 * 1024
# the script cache as Redis counts it (evalScriptsMemory): per script its sha1 key (an sds of
# 40 characters), its body (a client argument: an embstr up to 44 bytes), a dict entry and a
# luaScript; and the dict's buckets
SCRIPT_SHA_BYTES = 48
SCRIPT_ENTRY_BYTES = 40
EMBSTR_MAX_BYTES = 44
ROBJ_BYTES = 16
REDIS_VERSION = b"7.0.15"
REDIS_VERSION_NUM = 0x07000F
REPL_NONE, REPL_AOF, REPL_REPLICA, REPL_ALL = 0, 1, 2, 3
# KEYS and ARGV of up to this many items go to Lua as call arguments (cheaper than tables
# made from Python); more as tables (Lua's stack holds at most 8000 values)
MAX_ARGS_ON_STACK = 32
# Redis treats may-replicate commands as writes in a read-only script
_MAY_REPLICATE = frozenset({"publish", "spublish", "pfcount"})
# redis.log's LOG_DEBUG, LOG_VERBOSE, LOG_NOTICE, LOG_WARNING
_LOG_LEVELS = (logging.DEBUG, LOG_VERBOSE, logging.INFO, logging.WARNING)

# scriptCall's errors (the script sees them as "ERR <text>")
UNKNOWN_COMMAND = b"ERR Unknown Redis command called from script"
WRONG_ARGS = b"ERR Wrong number of args calling Redis command from script"
NOT_ALLOWED = b"ERR This Redis command is not allowed from script"
STALE_REPLICA = b"ERR Can not execute the command on a stale replica"
RO_SCRIPT = b"ERR Write commands are not allowed from read-only scripts."
CLUSTER_DOWN_RO = b"ERR Script attempted to execute a write command while the cluster is down and readonly"
CLUSTER_DOWN = b"ERR Script attempted to execute a command while the cluster is down"
NON_LOCAL_KEY = b"ERR Script attempted to access a non local key in a cluster node"
CROSS_SLOT = b"ERR Script attempted to access keys that do not hash to the same slot"
_CLUSTER_REFUSALS = {  # a redirect for a script's command -> what the script sees
    b"-CLUSTERDOWN The cluster is down and only accepts read commands\r\n": CLUSTER_DOWN_RO,
    b"-CLUSTERDOWN The cluster is down\r\n": CLUSTER_DOWN,
}
COMPILE_ERROR = "ERR Error compiling script (new function): %s"
_CONVERT = (None, None, None, True)  # redis.call's answer: the Lua side converts the arguments


def sha1hex(body: bytes) -> str:
    return hashlib.sha1(body).hexdigest()


@dataclass
class Script:
    """A cached script: its body, the compiled Lua function and its shebang flags."""

    sha: str
    body: bytes
    fn: Any
    flags: int  # shebang.FLAG_* bits
    compat: bool  # no shebang: 7.0's legacy rules
    is_function: bool = False  # a library's function (FCALL): called with (keys, args)


class Run:
    """The state of the running script (Redis' scriptRunCtx). (A plain class: the compiled
    build makes a dataclass's ``__init__`` an interpreted one, a cost paid on every run.)"""

    def __init__(self, caller: Client, sha: str, flags: int, read_only: bool, slot: int,
                 cross_slot_ok: bool, keys: list[bytes] | None = None, start_ns: int = 0,
                 argv: list[bytes] | None = None) -> None:
        self.caller = caller
        self.sha = sha
        self.flags = flags
        self.read_only = read_only
        # the slot of the declared keys (-1: none), then of the first key touched
        self.slot = slot
        self.cross_slot_ok = cross_slot_ok  # a script without shebang, or allow-cross-slot-keys
        self.resp = 2
        self.repl = REPL_ALL
        self.wrote = False
        # the caller's user may be refused commands (else the check is skipped)
        self.acl_checked = True
        self.keys = keys  # the declared keys (client tracking remembers them)
        # a long run (node/scripting/busy.py): started at (monotonic ns), past
        # busy-reply-threshold, marked by SCRIPT/FUNCTION KILL, the command check refusing
        # others
        self.start_ns = start_ns
        self.timed_out = False
        self.killed = False
        self.busy_check: Callable[[Client, Command, list[bytes]], bytes | None] | None = None
        self.argv = argv  # the caller's command (FUNCTION STATS shows it)
        self.stale = False  # on a stale replica (an allow-stale script): stale commands only
        # redis.call's commands must pass _refused (the ACL, a read-only script, cluster keys)
        self.guarded = True
        # the server's settings a command's stats read, taken once per run (only CONFIG SET
        # changes them, which a script cannot run), and the commands not yet added to
        # total_commands_processed
        self.track = True
        self.slow_us = 0
        self.commands = 0


class ScriptEngine:
    """The node's Lua interpreter and script cache (``server.scripting``)."""

    def __init__(self, server: Server, *, functions: bool = False) -> None:
        self.server = server
        self.ks = server.ks
        self.cluster_enabled = server.cluster_enabled
        self.tracker = server.tracker
        self.functions = functions  # the interpreter of FUNCTION libraries
        self.scripts: dict[str, Script] = {}
        self.scripts_by_sha: dict[bytes, Script] = {}  # the same, by the sha1 as bytes
        self.scripts_bytes = 0  # the cached keys and bodies (INFO used_memory_scripts_eval)
        self.run: Run | None = None
        cid = server._next_client_id
        server._next_client_id += 1
        self.client = Client(server, cid, "lua", "lua")
        self.client.script = True
        self.client.set_authenticated(True)
        self._effects: list[tuple[int, list[bytes], int]] = []
        # redis.call's commands without subcommands, by their name as scripts write it
        self._commands: dict[bytes, Command] = {}
        # math.random's state: the server's, shared with the other interpreter
        shared = server.scripting
        self.rand: libs.Rand48 = (shared.rand if functions and shared is not None
                                  else libs.Rand48())
        self.load_started_ns = 0  # a library's code is running (node/scripting/busy.py)
        self._new_interpreter()

    # -- the interpreter -------------------------------------------------------------------
    def _new_interpreter(self) -> None:
        lua = lua51.LuaRuntime(encoding=None, unpack_returned_tuples=True, register_eval=False,
                               register_builtins=False, max_memory=LUA_MAX_MEMORY_BYTES)
        api = lua.table_from({
            b"call": self.call,
            b"log": self._log,
            b"sha1hex": lambda s: sha1hex(s).encode(),
            b"setresp": self._setresp,
            b"set_repl": self._set_repl,
            b"known_command": self._known_command,
            b"version": REDIS_VERSION,
            b"version_num": REDIS_VERSION_NUM,
            b"libs": lua.table_from(libs.SOURCES),
            b"float_bytes": libs.float_bytes,
            b"lrand48": self.rand.lrand48,
            b"srand48": self.rand.srand48,
            b"bytes_float": libs.bytes_float,
            b"functions": self.functions,
            b"tick": lambda: busy.tick(self),
            b"hook_every": busy.HOOK_EVERY_INSTRUCTIONS,
        })
        setup = lua.globals().loadstring(SANDBOX_LUA.encode(), b"=lualib")
        self.lua = lua
        self.handle = setup(api)
        self.to_lua = ReplyToLua(lua)
        self._status_ok = self.handle.status_ok  # redis.call's answer for +OK
        self._run_v, self._run_t = self.handle.run_v, self.handle.run_t
        self._call_v, self._call_t = self.handle.call_function_v, self.handle.call_function_t
        self._count_hook = self.handle.count_hook

    def flush(self) -> None:
        """SCRIPT FLUSH: an empty cache and a new interpreter."""
        self.scripts = {}
        self.scripts_by_sha = {}
        self.scripts_bytes = 0
        self._new_interpreter()

    def memory_bytes(self) -> int:
        """INFO used_memory_lua: what the interpreter holds."""
        return int(self.lua.get_memory_used())

    def cache_bytes(self) -> int:
        """INFO used_memory_scripts_eval: the cached bodies, their sha1 keys and entries."""
        n = len(self.scripts)
        return self.scripts_bytes + SCRIPT_ENTRY_BYTES * n + 8 * dict_table_slots(n)

    # -- the cache -------------------------------------------------------------------------
    def create(self, body: bytes, flags: int, compat: bool, code: bytes) -> Script:
        """Compile and cache ``body`` (``code`` is what Lua compiles: the shebang line left
        out, its newline kept). Raises ValueError with the reply text on a compile error."""
        sha = sha1hex(body)
        found = self.scripts.get(sha)
        if found is not None:
            return found
        fn, err = self.handle.compile(code)
        if fn is None:
            raise ValueError(COMPILE_ERROR % _text(err))
        script = Script(sha, body, fn, flags, compat)
        self.scripts[sha] = script
        self.scripts_by_sha[sha.encode()] = script
        self.scripts_bytes += SCRIPT_SHA_BYTES + _body_bytes(len(body))
        return script

    def load_library(self, fn: Any) -> tuple[bool, Any]:
        """Run a library's code (``handle.load_library``), ended past busy.LOAD_TIMEOUT_MS."""
        self.load_started_ns = time.monotonic_ns()
        try:
            ok, got = self.handle.load_library(fn)
        finally:
            self.load_started_ns = 0
            self._count_hook()  # (a timed-out load leaves it firing on every line)
        return ok, got

    # -- a run -----------------------------------------------------------------------------
    def execute(self, c: Client, script: Script, keys: list[bytes], args: list[bytes],
                read_only: bool, argv: list[bytes] | None = None) -> bytes:
        """Run ``script`` for ``c`` (``argv``: the command that runs it); the reply for
        ``c``'s protocol."""
        flags = script.flags
        srv = self.server
        ro = read_only or bool(flags & FLAG_NO_WRITES)
        cluster = srv.cluster_route is not None
        slot = key_slot(keys[0]) if keys and self.cluster_enabled else -1
        cross_ok = script.compat or bool(flags & FLAG_ALLOW_CROSS_SLOT)
        self.run = run = Run(c, script.sha, flags, ro, slot, cross_ok, keys=keys,
                             start_ns=time.monotonic_ns(), argv=argv)
        repl = self.server.replication
        if flags & FLAG_ALLOW_STALE and repl is not None:
            run.stale = repl.running_stale()
        user = c.acl_user  # a script cannot change ACL rules: decided once per run
        # (a client of an unrestricted user, or none, is not ``slow`` for it)
        run.acl_checked = acl_checked = c.slow and user is not None and not user.unrestricted
        run.guarded = acl_checked or ro or cluster or run.stale
        run.track = srv.latency_tracking
        run.slow_us = srv.timing_threshold_us
        sc = self.client
        sc.db = c.db
        if sc.resp != 2:
            sc.set_resp(2)
        if c.asking:
            sc.set_asking(True)
        sc.readonly = c.readonly
        ks = self.ks
        hooks = ks.propagate_hooks
        if hooks:
            ks.propagate_hooks = [self._collect]
            self._effects = []
        lua = self.lua
        tracker = self.tracker
        tracker.in_script = True
        errors: Any = None  # the error replies written (with the reply of a run that ended)
        try:
            if len(keys) + len(args) <= MAX_ARGS_ON_STACK:
                run_fn = self._call_v if script.is_function else self._run_v
                got = run_fn(script.fn, c.resp, len(keys), *keys, *args)
            else:
                table_from = lua.table_from
                run_fn = self._call_t if script.is_function else self._run_t
                got = run_fn(script.fn, c.resp, table_from(keys), table_from(args))
            if got.__class__ is bytes:  # a string (the Lua side leaves its encoding to us)
                reply = bulk(got)
            elif got[0]:
                reply = got[1]
                if len(got) > 2:
                    errors = got
            else:
                reply, marked = self._failure(script.sha, got[1])
                if marked:
                    errors = (True, reply, None, 1)
        except lua51.LuaMemoryError:
            reply = b"-ERR Error running script %s, not enough memory\r\n" % script.sha.encode()
        except lua51.LuaError as e:
            log.warning("script %s: %s", script.sha, e)
            reply = b"-ERR Error running script %s, %s\r\n" % (
                script.sha.encode(), _oneline(str(e))[:100].encode())
        finally:
            self.run = None
            tracker.in_script = False
            if run.commands:
                srv.stat_numcommands += run.commands
            if run.timed_out:
                busy.end(self, run)
                if run.killed:
                    self._count_hook()  # the hook was left firing on every line
            if hooks:
                ks.propagate_hooks = hooks
                self._emit_effects(c)
            if sc.asking:
                sc.set_asking(False)
        if errors is not None:
            self._count_errors(c, errors[2], int(errors[3]))
        elif reply[0] == 45:  # "-"
            self._count_errors(c, [reply], 0)
        return reply

    def _count_errors(self, c: Client, counted: Any, marked: int) -> None:
        """The error replies a run wrote to ``c`` (Redis' afterErrorReply): ``counted`` (a Lua
        table or a list of them) go to the error stats; ``marked`` ones were counted when the
        command that failed ran. The caller's command fails once if any was counted, and once
        more for each marked one."""
        srv = self.server
        n = 0
        if counted is not None:
            for e in (counted.values() if not isinstance(counted, list) else counted):
                srv.count_error(e)
                n += 1
        cmd = srv.table.get(c.last_cmd.encode())
        if cmd is not None:
            cmd.failed_calls += (1 if n else 0) + marked

    def _failure(self, sha: str, err: Any) -> tuple[bytes, bool]:
        """A run that raised: the error reply, and whether the error was counted already."""
        msg, source, line, plain, marked = self.handle.error_info(err)
        if plain is not None:  # not an error table (a memory error): Redis' own wording
            return b"-ERR Error running script %s, %s\r\n" % (sha.encode(), plain[:100]), False
        if msg is None:
            msg = b"ERR unknown error"
        text = msg
        if source is not None and line is not None:
            text += b" script: %s, on %s:%s." % (sha.encode(), source, line)
        text = text.rstrip(b"\r\n").replace(b"\r", b" ").replace(b"\n", b" ")
        return b"-" + text + b"\r\n", bool(marked)

    # -- effects replication ---------------------------------------------------------------
    def _collect(self, db_index: int, argv: list[bytes]) -> None:
        run = self.run
        self._effects.append((db_index, argv, REPL_ALL if run is None else run.repl))

    def _emit_effects(self, caller: Client) -> None:
        effects = [e for e in self._effects if e[2] != REPL_NONE]
        self._effects = []
        if not effects:
            return
        ks = self.server.ks
        wrap = len(effects) > 1
        if caller.in_exec:
            wrap = False
            if not caller.exec_multi_propagated:
                caller.exec_multi_propagated = True
                ks.propagate(effects[0][0], [b"MULTI"])
        if wrap:
            ks.propagate(effects[0][0], [b"MULTI"])
        for db_index, argv, target in effects:
            if target == REPL_ALL:
                ks.propagate(db_index, argv)
            else:
                for hook in self._hooks_for(target):
                    hook(db_index, argv)
        if wrap:
            ks.propagate(effects[-1][0], [b"EXEC"])

    def _hooks_for(self, target: int) -> list[Callable[[int, list[bytes]], None]]:
        repl = self.server.replication
        feed = repl.feed_command if repl is not None else None
        hooks = self.server.ks.propagate_hooks
        if target == REPL_REPLICA:
            return [h for h in hooks if h == feed]
        return [h for h in hooks if h != feed]

    # -- the redis.* callbacks -------------------------------------------------------------
    def call(self, *argv: Any) -> Any:
        """redis.call / redis.pcall: the value, (None, error text), for a status reply
        (None, None, its text) or the Lua side's STATUS_OK for +OK, or (None, None, None,
        True) when an argument is not a string (the Lua side converts them as Redis does and
        calls again)."""
        for a in argv:
            if a.__class__ is not bytes:
                return _CONVERT
        if not argv:
            return _CONVERT
        run = self.run
        if run is None:
            return None, b"ERR redis.call/pcall can only be called inside a script invocation"
        n = len(argv)
        cmd = self._commands.get(argv[0])  # (known: a handler, no subcommands, not noscript)
        if cmd is None:
            cmd = self._command(argv)
            if cmd is None:
                return self._reject(None, UNKNOWN_COMMAND)
            if (n != cmd.arity) if cmd.arity > 0 else (n < -cmd.arity):
                return self._reject(cmd, WRONG_ARGS)
            if "noscript" in cmd.flags:
                return self._reject(cmd, NOT_ALLOWED)
        elif (n != cmd.arity) if cmd.arity > 0 else (n < -cmd.arity):
            return self._reject(cmd, WRONG_ARGS)
        argv_l = list(argv)
        srv = self.server
        if run.guarded or (cmd.write and not run.wrote
                           and (srv.command_checks or srv.oom_check is not None)):
            refused = self._refused(run, cmd, argv_l)
            if refused is not None:
                return self._reject(cmd, refused)
        if cmd.write:
            run.wrote = True
        sc = self.client
        if sc.resp != run.resp:
            sc.set_resp(run.resp)
        ks = self.ks
        if ks.propagate_hooks or srv.monitors or sc.tracking is not None:
            reply = dispatch.call(sc, cmd, argv_l)
        else:
            reply = self._run_command(run, sc, cmd, argv_l)
        if run.caller.tracking is not None and "readonly" in cmd.flags and run.keys:
            srv.tracker.remember_for_script(run.caller, run.keys)
        if ks.ready:
            dispatch.serve_ready_keys(srv)
        kind = reply[0]
        if kind == 36:  # "$": a bulk string (``reply`` is exactly one reply), the common case
            return False if reply[1] == 45 else reply[reply.index(b"\r\n") + 2 : -2]
        if kind == 43:  # "+": the Lua side builds its {ok=} table
            return self._status_ok if reply == b"+OK\r\n" else (None, None, reply[1:-2])
        if kind == 58:  # ":"
            return int(reply[1:-2])
        if kind == 45:  # "-"
            return None, error_text(reply[: reply.index(b"\r\n")])
        return self.to_lua.convert(reply)

    def _reject(self, cmd: Command | None, err: bytes) -> tuple[None, bytes]:
        """A command the script may not run: counted as Redis counts a rejected command (its
        ``rejected_calls``, the error stats), then the error for redis.call / redis.pcall."""
        if cmd is not None:
            cmd.rejected_calls += 1
        self.server.count_error(b"-" + err)
        return None, err

    def _refused(self, run: Run, cmd: Command, argv: list[bytes]) -> bytes | None:
        """Why the script may not run ``argv`` (a stale replica, the ACL, writes, cluster
        keys), or None."""
        if run.stale and "stale" not in cmd.flags:
            return STALE_REPLICA
        srv = self.server
        refused = srv.acl.check_script(run.caller, cmd, argv) if run.acl_checked else None
        if refused is None and (run.read_only or (cmd.write and not run.wrote)):
            refused = self._check_write(run, cmd, argv)
        if refused is None and srv.cluster_route is not None:
            refused = self._check_cluster(run, cmd, argv)
        return refused

    def _command(self, argv: tuple[bytes, ...]) -> Command | None:
        """The command ``argv`` names (None: unknown; a container named alone is returned for
        the arity check to refuse); one without subcommands that scripts may run is
        remembered by its name as written."""
        table = self.server.table
        cmd = table.get(argv[0]) or table.get(argv[0].lower())
        if cmd is not None and cmd.subcommands is not None:
            if len(argv) < 2:  # a container alone: its arity refuses it, as Redis'
                return cmd
            cmd = cmd.subcommands.get(argv[1].lower())
        elif cmd is not None and cmd.handler is not None and "noscript" not in cmd.flags:
            self._commands[argv[0]] = cmd
        return cmd if cmd is not None and cmd.handler is not None else None

    def _run_command(self, run: Run, sc: Client, cmd: Command, argv: list[bytes]) -> bytes:
        """dispatch.call_unobserved for a script's command, with the run's copy of the
        server settings it reads; total_commands_processed gets the run's commands when the
        run ends (or before a command that reads it)."""
        if cmd.special and run.commands:
            self.server.stat_numcommands += run.commands
            run.commands = 0
        sc.last_cmd = cmd.full_name
        t0 = _clock_ns()
        try:
            reply = cmd.handler(sc, argv)  # type: ignore[misc]
        except CommandError as e:
            reply = dispatch._err(str(e))
            cmd.failed_calls += 1
            self.server.count_error(reply)
        except Exception as e:  # noqa: BLE001 - a bug must not take the server down
            reply = dispatch._internal_error(cmd, argv, e)
            self.server.count_error(reply)
        us = (_clock_ns() - t0) // 1000
        dispatch.count_call(cmd, us, run.track)
        run.commands += 1
        if us >= run.slow_us:
            self.server.command_took(sc, cmd, argv, us)
        return reply

    def _check_write(self, run: Run, cmd: Command, argv: list[bytes]) -> bytes | None:
        if run.read_only and (cmd.write or cmd.full_name in _MAY_REPLICATE):
            return RO_SCRIPT
        if not cmd.write or run.wrote:
            return None
        srv = self.server
        for check in srv.command_checks:
            refused = check(self.client, cmd, argv)
            if refused is not None:
                return error_text(refused[: refused.index(b"\r\n")])
        # scriptVerifyOOM: out of memory, the first write of a script without allow-oom is
        # refused if deny-oom (past it, a script is not stopped half way)
        oom_check = srv.oom_check
        if (oom_check is not None and cmd.denyoom and not run.flags & FLAG_ALLOW_OOM
                and not run.caller.is_master and srv.ks.dirty >= srv.evictor.next_check_dirty):
            refused = oom_check(self.client, cmd, argv)
            if refused is not None:
                return error_text(refused[: refused.index(b"\r\n")])
        return None

    def _check_cluster(self, run: Run, cmd: Command, argv: list[bytes]) -> bytes | None:
        info = pc.lookup_name(cmd.full_name)
        if info is None or not (info.has_keys or info.movable):
            return None
        route = self.server.cluster_route
        assert route is not None
        redirect = route(self.client, cmd, argv)
        if redirect is not None:
            return _CLUSTER_REFUSALS.get(redirect, NON_LOCAL_KEY)
        positions = info._keys(argv)
        if positions and not run.cross_slot_ok:
            slot = key_slot(argv[positions[0]])
            if run.slot == -1:
                run.slot = slot
            elif run.slot != slot:
                return CROSS_SLOT
        return None

    def _log(self, level: int, text: bytes) -> None:
        log.log(_LOG_LEVELS[int(level)], "%s", text.decode("utf-8", "replace"))

    def _setresp(self, proto: float) -> None:
        if self.run is not None:
            self.run.resp = int(proto)

    def _set_repl(self, flags: float) -> None:
        if self.run is not None:
            self.run.repl = int(flags)

    def _known_command(self, *argv: bytes) -> bool:
        table = self.server.table
        cmd = table.get(argv[0]) or table.get(argv[0].lower())
        if cmd is not None and cmd.subcommands is not None and len(argv) >= 2:
            cmd = cmd.subcommands.get(argv[1].lower())
        return cmd is not None


def _body_bytes(n: int) -> int:
    """What a script body of ``n`` bytes takes, as the client argument Redis keeps."""
    if n <= EMBSTR_MAX_BYTES:
        return jemalloc_size(ROBJ_BYTES + 3 + n + 1) - ROBJ_BYTES
    return sds_size(n)


def _text(v: Any) -> str:
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return str(v)


def _oneline(s: str) -> str:
    return s.replace("\r", " ").replace("\n", " ")
