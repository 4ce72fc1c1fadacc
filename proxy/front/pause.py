"""CLIENT PAUSE / UNPAUSE: the proxy's clients held as one server holds its clients.

    CLIENT PAUSE ms [WRITE|ALL] ─▶ Pause (one per Proxy): kind, end
    a client's request ─▶ session (slow path while paused) ─▶ check(): held? ─▶ waits
        until the pause ends (its timeout, or CLIENT UNPAUSE), then dispatched as usual

ALL holds every request, CLIENT UNPAUSE included (as in Redis 7.0: only the timeout ends an
ALL pause); WRITE holds what may change data or be replicated (``protocol/pause.py``'s rule,
the node's too), a write queued inside MULTI, and EXEC of a transaction that queued one. A
held request holds up the client's later ones, in order, as a postponed client in Redis; a
held client counts in ``blocked_clients`` and shows flag ``b`` in CLIENT LIST, as there. A
second pause keeps the stronger kind and the later end. With ``workers: N`` a pause or
unpause is every worker's: the others are told (front/siblings.py) and the reply comes once
they all hold their clients. The nodes themselves are not paused: writes that do not come
through this proxy (other proxies, direct clients) still apply. While paused, every session leaves its fast routes (so every request reaches
``check``); nothing is checked while no pause is on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import trio

from slotgate.protocol import pause as args
from slotgate.protocol.commands import lookup
from slotgate.protocol.resp import OK
from slotgate.proxy.front.clients import ANSWERED
from slotgate.proxy.routing.redirect import error_frame

if TYPE_CHECKING:
    from slotgate.proxy.front.routes import RouteSession
    from slotgate.proxy.front.server import Proxy
    from slotgate.proxy.front.session import Session


class Pause:
    """The proxy's client pause: its kind and end (trio's clock)."""

    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy
        self.kind = args.PAUSE_OFF
        self.end_s = 0.0
        self.ended = trio.Event()  # set (then replaced) when a pause ends
        self._timer: trio.CancelScope | None = None
        # The sessions whose request is held now -> that command's name: they count in
        # blocked_clients and show flag b and that command in CLIENT LIST (as in 7.0.15).
        self.held: dict[Session, str] = {}

    def pause(self, kind: int, timeout_ms: int) -> None:
        end_s = trio.current_time() + timeout_ms / 1000
        if self.kind == args.PAUSE_OFF:
            self.kind, self.end_s = kind, end_s
            self._derive()
        else:
            self.kind = max(self.kind, kind)
            self.end_s = max(self.end_s, end_s)
        if self._timer is None:
            self.proxy.router.nursery.start_soon(self._wait_end)

    async def _wait_end(self) -> None:
        with trio.CancelScope() as self._timer:
            while True:  # a later pause may push the end further
                await trio.sleep_until(self.end_s)
                if trio.current_time() >= self.end_s:
                    break
            self.unpause()
        self._timer = None

    def unpause(self) -> None:
        if self.kind == args.PAUSE_OFF:
            return
        self.kind = args.PAUSE_OFF
        if self._timer is not None:
            self._timer.cancel()
        self._derive()
        self.ended.set()
        self.ended = trio.Event()

    def _derive(self) -> None:
        for s in self.proxy.sessions:
            s.set_checked(s.checked)  # fast routes off while paused, on again after

    def holds(self, s: Session, argv: list[bytes]) -> bool:
        """Whether the pause holds this request of ``s`` now (QUIT too, as in 7.0.15)."""
        if self.kind == args.PAUSE_ALL:
            return True
        if self.kind != args.PAUSE_WRITE:
            return False
        info = lookup(argv)
        if info is None:
            return False
        if info.name == "exec" and s.tx.queued is not None:
            return any(_may_replicate(q) for q in s.tx.queued)
        return args.may_replicate(info.name, "write" in info.flags)


def _may_replicate(argv: list[bytes]) -> bool:
    info = lookup(argv)
    return info is not None and args.may_replicate(info.name, "write" in info.flags)


async def _held(s: Session, argv: list[bytes]) -> None:
    pause = s.proxy.pause
    info = lookup(argv)
    pause.held[s] = info.name if info is not None else argv[0].lower().decode("utf-8", "replace")
    try:
        while pause.holds(s, argv):
            await pause.ended.wait()
    finally:
        pause.held.pop(s, None)
    pending = s.dispatch(argv)
    if pending is not None:
        await pending


def check(s: Session, argv: list[bytes]) -> Awaitable[None] | None:
    """While a pause is on: the request waits for its end if the pause holds it."""
    if not s.proxy.pause.holds(s, argv):
        return None
    return _held(s, argv)


def _timeout(raw: bytes) -> int:
    digits = raw[1:] if raw[:1] == b"-" else raw
    if not digits.isdigit() or len(raw) > 20 or (len(digits) > 1 and digits[:1] == b"0"):
        raise args.PauseError(args.TIMEOUT_NOT_INT)
    n = int(raw)
    if not -(1 << 63) <= n < (1 << 63):
        raise args.PauseError(args.TIMEOUT_NOT_INT)
    return n


def client_pause(s: RouteSession, argv: list[bytes]) -> bytes:
    try:
        kind, timeout_ms = args.parse(argv, _timeout)
    except args.PauseError as exc:
        return error_frame(str(exc))
    s.proxy.pause.pause(kind, timeout_ms)
    return _everywhere(s, "client|pause", [b"PAUSE", b"%d" % kind, b"%d" % timeout_ms])


def client_unpause(s: RouteSession, argv: list[bytes]) -> bytes:
    s.proxy.pause.unpause()
    return _everywhere(s, "client|unpause", [b"UNPAUSE"])


def _everywhere(s: RouteSession, name: str, question: list[bytes]) -> bytes:
    """OK at once, or with workers once every other worker did the same."""
    siblings = s.proxy.siblings
    if siblings is None:
        return OK
    slot = s.new_slot(name)
    siblings.ask(question, lambda answers: slot(OK))
    return ANSWERED


def asked_pause(proxy: Proxy, args_: list[bytes]) -> list[bytes]:
    """Another worker's CLIENT PAUSE (its kind and timeout, already checked)."""
    if (len(args_) == 2 and args_[0] in (b"%d" % args.PAUSE_WRITE, b"%d" % args.PAUSE_ALL)
            and args_[1].lstrip(b"-").isdigit()):
        proxy.pause.pause(int(args_[0]), int(args_[1]))
    return []


def asked_unpause(proxy: Proxy, args_: list[bytes]) -> list[bytes]:
    proxy.pause.unpause()
    return []


HANDLERS: dict[str, Callable[[RouteSession, list[bytes]], bytes]] = {
    "client|pause": client_pause, "client|unpause": client_unpause}
