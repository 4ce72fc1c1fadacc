"""Command execution: the fast path, Redis' processCommand checks, call(), blocked-client wakeups.

Sans-IO: requests (argv lists) in, encoded replies appended to ``c.out``. The trio shell
(node/core/server.py) feeds requests and sends ``c.out``.

Flow per request::

    argv -> TABLE lookup -> [fast: arity ok, client/server not "slow", not "special"
                             (a container, or INFO, which reads the run-folded stats),
                             cluster mode: keys in one slot served here]
                                -> handler (call() when writes propagate) -> reply
                            [slow: unknown/arity/auth/no-multi/cluster/pubsub/MULTI queue]
                                -> call() (stats, monitor, propagation) -> reply
         -> c.out ; then serve keys made ready (blocked clients), then the next request
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from slotgate.node.commands.registry import Command
from slotgate.node.commands.replies import QUEUED
from slotgate.node.core import errors
from slotgate.node.core.client import (
    BLOCKED,
    PUSHING_COMMANDS,
    REPLY_ON,
    REPLY_SKIP,
    REPLY_SKIP_NEXT,
    Client,
)
from slotgate.node.core.errors import CommandError
from slotgate.node.core.latency import SMALL_BUCKETS, record_long
from slotgate.protocol.commands import unknown_command_error
from slotgate.protocol.slots import key_slot

if TYPE_CHECKING:
    from slotgate.node.core.server import Server

log = logging.getLogger("node.dispatch")
_clock_ns = time.perf_counter_ns
_SMALL_NS = SMALL_BUCKETS << 10  # durations below this count in a command's ``lat_small``
_MULTI_PASSTHROUGH = frozenset({"exec", "discard", "multi", "watch", "quit", "reset"})
_PUBSUB_ERR = (
    "ERR Can't execute '%s': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are "
    "allowed in this context"
)


# None, typed as what a handler may set instead: assigning a literal None would let the type
# checker (and the compiled build, which trusts it) take the attribute for None after the call.
NOT_REWRITTEN: list[list[bytes]] | None = None


def _err(text: str) -> bytes:
    return b"-" + text.encode("utf-8", "replace").replace(b"\r", b" ").replace(b"\n", b" ") + b"\r\n"


def run_requests(c: Client, reqs: list[list[bytes]], start: int = 0) -> int:
    """Execute ``reqs[start:]`` for ``c``. Returns the index of the first request NOT yet run
    (``len(reqs)`` when all ran): execution stops after a command that blocked the client or
    asked to close the connection."""
    srv = c.server
    table = srv.table
    out = c.out
    ks = c.ks
    keypos = srv.cluster_keypos
    clock_ns = _clock_ns
    # slowlog-log-slower-than in ns (changed only by CONFIG SET: re-read after slow paths)
    slow_ns = srv.timing_threshold_us * 1000
    track = srv.latency_tracking
    oom = srv.oom_check is not None  # maxmemory: deny-oom commands may need the check
    # module globals as locals: compiled, each read of a global is a lookup in the module's
    # dict, twice per request here
    blocked = BLOCKED
    small_ns = _SMALL_NS
    # The clock read after one fast-path command is the start of the next: one read per
    # command. ``t_ns`` is re-read after anything that may take time outside a fast-path
    # handler (the slow path, blocked-client wake-ups).
    t_ns = clock_ns()
    # A run of the same fast-path command adds its calls (requests since ``run_i0``) and the
    # nanoseconds since it began (``run_t0``) to the command's stats (usec, and
    # total_commands_processed) once, when the run ends: before another command, the slow
    # path, blocked-client wake-ups, or returning. Commands that read these stats (INFO) take
    # the slow path, so what they report is what Redis would.
    run_cmd: Command | None = None
    run_i0 = run_t0 = 0  # the index and clock where the current run began
    # with latency-tracking: the run's durations below 1,024 ns, the histogram's first cell
    # (most fast-path commands), added once by _fold like the calls
    run_fast = 0
    for i in range(start, len(reqs)):
        argv = reqs[i]
        cmd = table.get(argv[0])
        if cmd is None:
            cmd = table.get(argv[0].lower())
        n = len(argv)
        if (
            cmd is None or cmd.special or c.slow
            or (n != arity if (arity := cmd.arity) > 0 else n < -arity)
            # cluster mode: keys in a slot served here without further checks stay fast
            or (keypos is not None and (kp := keypos[cmd]) != 0 and not (
                srv.cluster_slots[key_slot(argv[kp])] if kp > 0
                else srv.cluster_keys_here(cmd, argv)))
            or (oom and cmd.denyoom and ks.dirty >= srv.evictor.next_check_dirty)
        ):
            if run_cmd is not None:
                _fold(srv, run_cmd, i - run_i0, t_ns - run_t0, run_fast)
                run_cmd = None
            reply = process_command(c, cmd, argv)
            slow_ns = srv.timing_threshold_us * 1000
            track = srv.latency_tracking
            t_ns = clock_ns()
        elif ks.propagate_hooks:
            if run_cmd is not None:
                _fold(srv, run_cmd, i - run_i0, t_ns - run_t0, run_fast)
                run_cmd = None
            reply = call(c, cmd, argv)  # replicas / AOF: call() propagates the write
            slow_ns = srv.timing_threshold_us * 1000
            track = srv.latency_tracking
            t_ns = clock_ns()
        else:
            if cmd is not run_cmd:
                if run_cmd is not None:
                    _fold(srv, run_cmd, i - run_i0, t_ns - run_t0, run_fast)
                run_cmd = cmd
                run_i0 = i
                run_t0 = t_ns
                run_fast = 0
                c.last_cmd = cmd.full_name
            try:
                reply = cmd.handler(c, argv)  # type: ignore[misc]
            except CommandError as e:
                reply = _err(str(e))
                cmd.failed_calls += 1
                srv.count_error(reply)
            except Exception as e:  # noqa: BLE001 - a bug must not take the server down
                reply = _internal_error(cmd, argv, e)
                srv.count_error(reply)
            t0_ns = t_ns
            t_ns = clock_ns()
            took_ns = t_ns - t0_ns
            if track:  # latency-tracking: the command's histogram (node/core/latency.py)
                # (a test, not IndexError: commands preempted on a busy machine take the long
                # way often, and a raised exception costs more than the count)
                if took_ns < 1024:
                    run_fast += 1
                elif took_ns < small_ns:
                    cmd.lat_small[took_ns >> 10] += 1
                else:
                    record_long(cmd.lat_big, took_ns)
            if took_ns >= slow_ns:
                srv.command_took(c, cmd, argv, took_ns // 1000)
        if reply is blocked:
            if run_cmd is not None:
                _fold(srv, run_cmd, i + 1 - run_i0, t_ns - run_t0, run_fast)
            return i + 1
        out.append(reply)
        if ks.ready:
            if run_cmd is not None:  # the wake-ups' time is not the command's
                _fold(srv, run_cmd, i + 1 - run_i0, t_ns - run_t0, run_fast)
                run_cmd = None
            serve_ready_keys(srv)
            t_ns = clock_ns()
        if c.close_after_reply:
            if run_cmd is not None:
                _fold(srv, run_cmd, i + 1 - run_i0, t_ns - run_t0, run_fast)
            return i + 1
    if run_cmd is not None:
        _fold(srv, run_cmd, len(reqs) - run_i0, t_ns - run_t0, run_fast)
    return len(reqs)


def _fold(srv: Server, cmd: Command, calls: int, took_ns: int, fast: int) -> None:
    cmd.calls += calls
    cmd.usec += took_ns // 1000
    srv.stat_numcommands += calls
    if fast:
        cmd.lat_small[0] += fast


def _internal_error(cmd: Command, argv: list[bytes], exc: Exception) -> bytes:
    log.exception("command %s failed unexpectedly", cmd.full_name, exc_info=exc)
    cmd.failed_calls += 1
    return _err(f"ERR internal error in '{cmd.full_name}': {type(exc).__name__}")


def resolve(cmd: Command | None, argv: list[bytes]) -> tuple[Command | None, bytes | None]:
    """Container -> subcommand, then arity. Returns (command, None) or (None, error reply)."""
    if cmd is None:
        return None, b"-" + unknown_command_error(argv) + b"\r\n"
    if cmd.subcommands is not None and len(argv) >= 2:
        sub = cmd.subcommands.get(argv[1].lower())
        if sub is None:
            return None, b"-" + unknown_command_error(argv) + b"\r\n"
        cmd = sub
    n = len(argv)
    if (n != cmd.arity) if cmd.arity > 0 else (n < -cmd.arity):
        cmd.rejected_calls += 1
        return None, _err(errors.wrong_args(cmd.full_name))
    if cmd.handler is None:  # a bare container (e.g. "CONFIG") with right arity: nothing to run
        return None, _err(errors.wrong_args(cmd.full_name))
    return cmd, None


def process_command(c: Client, cmd: Command | None, argv: list[bytes]) -> bytes:
    """Redis' processCommand for everything off the fast path, then CLIENT REPLY's mode (a
    rejected command is the one a SKIP skips too)."""
    mode_before = c.reply_mode
    reply = _process(c, cmd, argv)
    applied = c.reply_mode_applied
    if applied:
        c.reply_mode_applied = False
    if (mode_before != REPLY_ON or c.reply_mode != REPLY_ON) and reply is not BLOCKED:
        reply = _apply_reply_mode(c, reply, argv[0].lower() in PUSHING_COMMANDS, applied)
    return reply


def _process(c: Client, cmd: Command | None, argv: list[bytes]) -> bytes:
    srv = c.server
    if cmd is None and argv[0].lower() in srv.renamed_away:
        return _rejected(c, False, b"-" + unknown_command_error(argv, removed=True) + b"\r\n",
                         formatted=True)
    real, rejected = resolve(cmd, argv)
    if rejected is not None:
        return _rejected(c, argv[0].lower() == b"exec", rejected, formatted=True)
    assert real is not None
    cmd = real
    if not c.authenticated and not cmd.no_auth:
        return _reject(c, cmd, errors.NOAUTH)
    if c.multi is not None and cmd.no_multi:
        return _reject(c, cmd, errors.NOT_IN_MULTI, formatted=True)
    user = c.acl_user
    if user is not None and not user.unrestricted:
        denied = srv.acl.check(c, cmd, argv)
        if denied is not None:
            return _reject(c, cmd, denied)
    route = srv.cluster_route
    if route is not None:
        redirect = route(c, cmd, argv)
        if redirect is not None:
            cmd.rejected_calls += 1
            if cmd.full_name == "exec":  # Redis discards the transaction; the reply stays as is
                c.discard_multi()
            elif c.multi is not None:
                c.multi_error = True
            c.server.count_error(redirect)
            return redirect
    checks = srv.command_checks if srv.oom_check is None else (*srv.command_checks, srv.oom_check)
    for check in checks:
        refused = check(c, cmd, argv)
        if refused is BLOCKED:  # held (CLIENT PAUSE): run again when the pause ends
            return refused
        if refused is not None:
            cmd.rejected_calls += 1
            return _rejected(c, cmd.full_name == "exec", refused)
    if c.subscriptions and c.resp == 2 and not cmd.pubsub_ok:
        return _reject(c, cmd, _PUBSUB_ERR % cmd.full_name, formatted=True)
    if c.multi is not None and cmd.full_name not in _MULTI_PASSTHROUGH:
        c.multi.append((cmd, argv))
        return QUEUED
    if c.tracking is None:
        reply = call(c, cmd, argv)
    else:  # CLIENT TRACKING: its reads remembered, its own invalidations after the reply
        srv.tracker.begin(c)
        reply = srv.tracker.end(c, cmd, call(c, cmd, argv))
    if c.asking and cmd.full_name != "asking" and c.multi is None:
        c.set_asking(False)
    return reply


def _reject(c: Client, cmd: Command, text: str, formatted: bool = False) -> bytes:
    cmd.rejected_calls += 1
    return _rejected(c, cmd.full_name == "exec", _err(text), formatted)


def _rejected(c: Client, is_exec: bool, reply: bytes, formatted: bool = False) -> bytes:
    """rejectCommand: flag an open MULTI; a rejected EXEC discards the transaction and
    answers ``EXECABORT Transaction discarded because of: <error>`` (Redis' formatted
    rejections -- unknown command, arity, no-multi, pub/sub context -- carry no "ERR ")."""
    if c.multi is not None:
        c.multi_error = True
    if is_exec and reply[:1] == b"-":
        c.discard_multi()
        text = reply[1:]
        if formatted and text.startswith(b"ERR "):
            text = text[4:]
        reply = b"-EXECABORT Transaction discarded because of: " + text
    c.server.count_error(reply)
    return reply


def _apply_reply_mode(c: Client, reply: bytes, pushing: bool, applied: bool) -> bytes:
    """CLIENT REPLY's mode after a command (Redis' resetClient): SKIP's next command skipped,
    the reply dropped under OFF or SKIP, but pushes and a reply the command filtered itself as
    it made it (``applied``: EXEC) are kept."""
    mode = c.reply_mode
    if mode == REPLY_SKIP_NEXT:  # CLIENT REPLY SKIP just ran: skip the NEXT reply
        c.set_reply_mode(REPLY_SKIP)
        return reply if applied else b""
    if mode == REPLY_SKIP:  # this command was skipped (CLIENT REPLY ON would have ended it)
        c.set_reply_mode(REPLY_ON)
    elif mode == REPLY_ON:
        return reply
    if applied or (pushing and reply[:1] in (b"*", b">")):
        return reply
    return b""


def call(c: Client, cmd: Command, argv: list[bytes]) -> bytes:
    """Redis' call(): run the handler with stats, MONITOR feed, slowlog and propagation."""
    srv = c.server
    ks = c.ks
    if srv.monitors and not cmd.skip_monitor:
        srv.feed_monitors(c, argv)
    dirty_before = ks.dirty
    c.propagate_as = NOT_REWRITTEN
    db_index = c.db.index
    reply = call_unobserved(c, cmd, argv)
    if c.tracking is not None:
        srv.tracker.remember(c, cmd, argv)
    if ks.propagate_hooks:
        if ks.dirty != dirty_before and (cmd.write or c.propagate_as):
            if c.in_exec and not c.exec_multi_propagated:
                c.exec_multi_propagated = True
                ks.propagate(db_index, [b"MULTI"])
            for p_argv in c.propagate_as or (argv,):
                ks.propagate(db_index, p_argv)
        # Redis' processCommand: after every command, c->woff = master_repl_offset (WAIT
        # waits for replicas to reach it). Without propagation hooks the offset stands still.
        repl = srv.replication
        if repl is not None:
            c.woff = repl.backlog.master_repl_offset
    c.propagate_as = None
    return reply


def call_unobserved(c: Client, cmd: Command, argv: list[bytes]) -> bytes:
    """The part of call() that does not involve observers: the handler with stats, latency
    and slowlog. Callers sure that nothing observes the command (no MONITOR, no propagation
    hooks, ``c`` not tracking) may call it alone: a script's commands do (scripting/engine.py)."""
    srv = c.server
    c.last_cmd = cmd.full_name
    t0 = _clock_ns()
    try:
        reply = cmd.handler(c, argv)  # type: ignore[misc]
    except CommandError as e:
        reply = _err(str(e))
        cmd.failed_calls += 1
        srv.count_error(reply)
    except Exception as e:  # noqa: BLE001 - a bug must not take the server down
        reply = _internal_error(cmd, argv, e)
        srv.count_error(reply)
    us = (_clock_ns() - t0) // 1000
    count_call(cmd, us, srv.latency_tracking)
    srv.stat_numcommands += 1
    if us >= srv.timing_threshold_us:
        srv.command_took(c, cmd, argv, us)
    return reply


def count_call(cmd: Command, us: int, track: bool) -> None:
    """A command's calls and usec, and with ``track`` (latency-tracking) its histogram."""
    cmd.calls += 1
    cmd.usec += us
    if track:
        if us * 1000 < _SMALL_NS:
            cmd.lat_small[us * 1000 >> 10] += 1
        else:
            record_long(cmd.lat_big, us * 1000)


def serve_ready_keys(srv: Server) -> None:
    """handleClientsBlockedOnKeys: for each ready key (in order), try its blocked clients FIFO."""
    ks = srv.ks
    while ks.ready:
        ready = ks.ready
        ks.ready = {}
        for db_index, key in ready:
            db = ks.dbs[db_index]
            queue = db.blocking.get(key)
            if not queue:
                continue
            for bc in list(queue):
                st = bc.blocked
                if st is None or st.db is not db:
                    continue
                bc.propagate_as = NOT_REWRITTEN
                dirty_before = ks.dirty
                reply = st.serve(bc, db, key)
                if reply is not None:
                    if ks.propagate_hooks and ks.dirty != dirty_before:
                        served: list[list[bytes]] = bc.propagate_as or []
                        for served_argv in served:
                            ks.propagate(db_index, served_argv)
                    bc.propagate_as = None
                    bc.unblock(reply)
