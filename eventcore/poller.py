"""One epoll set served by one trio task: all of a wake-up's ready sockets in one pass.

    owner task: await poller.park(sock, handler, max_bytes) ───▶ returns the handler's value,
                        │ watched (level-triggered)                    ▲  or EOF, or raises
    poller task: epoll ready ─▶ recv ─▶ handler(data) ─▶ None: keep serving
                                │ EOF, error           └▶ a value / an exception
                                └───────────────────────────────────────┘ (unwatched)
                 end of pass ─▶ after_pass hooks (the owners' batched writes)

trio's ``wait_readable`` registers and unregisters a socket with its own epoll on every wait
and costs a task switch per read. Here each socket is registered once while its owner is
parked, and the task waits on the epoll fd alone, so a pass costs one trio wait however many
sockets are ready; while sockets keep being ready, up to ``PASSES_PER_TURN`` passes run in a
row before the other tasks get their turn (one trio turn per few passes). The poller reads; the handler runs synchronously on the bytes (parse,
dispatch, queue output). When the socket needs its owner (a request that must be awaited,
backpressure, …) the handler returns why, and the owner's ``park`` returns that value (or
raises it, if it is an exception); at EOF ``park`` returns ``EOF``, a read error (reset…) is
raised there. A handler that raises is a bug: the traceback is logged, the owner's ``park``
raises ``HandlerError``, the owner closes that connection, and every other socket is served
on.

An owner may also leave its socket watched with no task at all (``watch``): the handler is
called the same way, and when it returns a value (or at EOF, or a read error) ``resume`` is
called with it, from the pass, to start a task again (an idle connection then costs no task
and no coroutine frames).

Sockets are stdlib sockets in non-blocking mode (``sockets.take_over``): their ``recv`` and
``send`` cost less than ``os.read``/``os.write`` on the descriptor (measured: about 0.4 µs
per write to a peer that is woken by it).
"""

from __future__ import annotations

import logging
import select
import socket
from collections.abc import Callable
from typing import Any, cast

import outcome
import trio

log = logging.getLogger("eventcore")

MAX_EVENTS = 512  # ready sockets taken per pass
# Passes served in a row, while sockets keep being ready, before the other tasks run: a trio
# turn (its own epoll_wait, deadlines, the run queue) costs about as much as serving a few
# requests, and at one request per client per pass it was paid every pass.
PASSES_PER_TURN = 4

# A handler gets the bytes read; it returns None to go on being called, anything else to
# wake its owner with it.
Handler = Callable[[bytes], object]
Recv = Callable[[int], bytes]
# Called with what a handler returned (or EOF, or the read error) for a socket ``watch``ed
# with no task; called from the poller's pass, so it must not block or raise.
Resume = Callable[[object], None]


class _Eof:
    __slots__ = ()

    def __repr__(self) -> str:
        return "EOF"


EOF: Any = _Eof()  # what ``park`` returns when the peer closed its side


class HandlerError(Exception):
    """A socket's handler raised (a bug): already logged with its traceback. The owner that
    gets this closes that connection and nothing else."""


def _wake_with(value: object) -> outcome.Outcome[Any]:
    return outcome.Error(value) if isinstance(value, BaseException) else outcome.Value(value)


def _resume(owner: object, value: object) -> None:
    """Wake a socket's owner: its parked task, or the ``Resume`` it was watched with."""
    if isinstance(owner, trio.lowlevel.Task):
        trio.lowlevel.reschedule(owner, _wake_with(value))
    else:
        cast(Resume, owner)(value)


def _crashed(fd: int, exc: Exception) -> HandlerError:
    log.error("unexpected error serving fd %d; closing that connection", fd, exc_info=exc)
    err = HandlerError(f"fd {fd}: {exc!r}")
    err.__cause__ = exc  # raised in the owner's task: the original shows as the cause
    return err


class Poller:
    """One epoll set and the task that serves it (``run``). Owners are trio tasks of the
    same run."""

    __slots__ = ("_ep", "_watched", "after_pass")

    def __init__(self) -> None:
        self._ep = select.epoll()
        # fd -> (handler, parked owner task or the Resume of a socket watched with no task,
        # the socket's recv, bytes per read)
        self._watched: dict[int, tuple[Handler, object, Recv, int]] = {}
        # Called after every pass, in order (the owners' batched output).
        self.after_pass: list[Callable[[], None]] = []

    async def park(self, sock: socket.socket, handler: Handler, max_bytes: int) -> Any:
        """Whenever ``sock`` is readable, read up to ``max_bytes`` and call ``handler`` with
        them, until it returns something other than None (or ``wake`` is called); return
        that, or raise it if it is an exception. At EOF returns ``EOF``; a read error is
        raised, and ``HandlerError`` if the handler raised. Cancellable: ``sock`` is then no
        longer watched."""
        task = trio.lowlevel.current_task()
        fd = sock.fileno()
        self._ep.register(fd, select.EPOLLIN)
        self._watched[fd] = (handler, task, sock.recv, max_bytes)

        def abort(_: Any) -> trio.lowlevel.Abort:
            self._unwatch(fd)
            return trio.lowlevel.Abort.SUCCEEDED

        return await trio.lowlevel.wait_task_rescheduled(abort)

    def watch(self, sock: socket.socket, handler: Handler, max_bytes: int,
              resume: Resume) -> None:
        """As ``park``, with no task waiting: once ``handler`` returns something other than
        None (or at EOF, or a read error), ``sock`` is no longer watched and ``resume`` is
        called with that value (EOF, the exception) from the pass."""
        fd = sock.fileno()
        self._ep.register(fd, select.EPOLLIN)
        self._watched[fd] = (handler, resume, sock.recv, max_bytes)

    def unwatch(self, sock: socket.socket) -> bool:
        """Stop watching ``sock`` (``watch``ed, or parked: its owner is then not woken).
        False if it was not watched."""
        fd = sock.fileno()
        if fd not in self._watched:
            return False
        self._unwatch(fd)
        return True

    def wake(self, sock: socket.socket, value: object) -> bool:
        """Stop watching ``sock`` and resume its parked owner with ``value`` (as a handler's
        return value), or call its ``resume``. False if it is not watched."""
        fd = sock.fileno()
        entry = self._watched.get(fd)
        if entry is None:
            return False
        self._unwatch(fd)
        _resume(entry[1], value)
        return True

    def serve_now(self, sock: socket.socket, handler: Handler, max_bytes: int) -> object:
        """Serve ``sock`` once outside a pass, as a pass would (a new connection may have
        sent something already): None, or what ``park`` would give (an exception is
        raised)."""
        try:
            data = sock.recv(max_bytes)
        except BlockingIOError:
            return None
        if not data:
            return EOF
        try:
            value = handler(data)
        except Exception as exc:  # a bug in the handler: this connection only
            raise _crashed(sock.fileno(), exc) from exc
        if isinstance(value, BaseException):
            raise value
        return value

    def _unwatch(self, fd: int) -> None:
        del self._watched[fd]
        try:
            self._ep.unregister(fd)
        except (OSError, ValueError):
            pass  # closed already: the kernel dropped it from the set

    async def run(self) -> None:
        """Serve until cancelled; the epoll set is closed then."""
        ep = self._ep
        poll = ep.poll
        serve = self._serve
        epfd = ep.fileno()
        passes = 0  # passes since other tasks last ran
        try:
            events = poll(0, MAX_EVENTS)
            while True:
                if not events:
                    passes = 0
                    # other tasks run meanwhile: one trip through trio's scheduler per wake-up
                    await trio.lowlevel.wait_readable(epfd)
                    events = poll(0, MAX_EVENTS)
                    continue
                serve(events, -1)
                passes += 1
                if passes >= PASSES_PER_TURN:
                    # other tasks (owners handed their socket back, writers, timers) run
                    # between turns
                    passes = 0
                    await trio.lowlevel.checkpoint()
                events = poll(0, MAX_EVENTS)
        finally:
            ep.close()

    def serve_nested(self, skip_fd: int) -> None:
        """One pass now, from inside a handler that runs long (a busy script): every ready
        socket but ``skip_fd`` (the one whose handler is running), then the after-pass
        hooks. Owners woken meanwhile run once the outer handler has returned."""
        events = self._ep.poll(0, MAX_EVENTS)
        if events:
            self._serve(events, skip_fd)

    def _serve(self, events: list[tuple[int, int]], skip_fd: int) -> None:
        """A pass: each ready socket read once and its handler called with the bytes."""
        watched = self._watched
        for fd, _ in events:
            entry = watched.get(fd)
            if entry is None or fd == skip_fd:
                continue  # its owner was woken earlier in this pass, or it is being served
            # (inline: this is the hot path of every request)
            try:
                data = entry[2](entry[3])
            except BlockingIOError:
                continue  # spurious wakeup
            except OSError as exc:
                value: object = exc
            else:
                if not data:
                    value = EOF
                else:
                    try:
                        value = entry[0](data)
                    except Exception as exc:  # a bug in the handler: this connection
                        value = _crashed(fd, exc)
            # (a handler may have cancelled its own owner, SHUTDOWN: unwatched and woken then)
            # (==, not is: mypyc-compiled code copies a typed tuple, so its identity is not
            # kept; the same owner and handler still parked is what this asks)
            if value is not None and watched.get(fd) == entry:
                self._unwatch(fd)
                _resume(entry[1], value)
        for hook in self.after_pass:
            hook()


_POLLER: trio.lowlevel.RunVar[Poller] = trio.lowlevel.RunVar("eventcore_poller")


def run_poller() -> Poller:
    """This trio run's shared Poller; its task is started on first use, as a system task."""
    try:
        return _POLLER.get()
    except LookupError:
        p = Poller()
        _POLLER.set(p)
        trio.lowlevel.spawn_system_task(p.run, name="eventcore-poller")
        return p


async def receive_ready(sock: socket.socket, max_bytes: int) -> bytes:
    """Read from a socket that is usually empty when asked (a parked client's input): wait
    until readable, then read. (Reading first would, for a request/reply socket, almost
    always fail with EAGAIN: a wasted syscall.) b"" means EOF; errors (reset…) raise
    ``OSError``. The caller must be the only reader of ``sock``."""
    while True:
        await trio.lowlevel.wait_readable(sock)
        try:
            return sock.recv(max_bytes)
        except BlockingIOError:
            continue  # spurious wakeup
