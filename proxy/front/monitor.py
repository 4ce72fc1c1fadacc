"""MONITOR: every command the proxy's clients send, streamed to its monitoring clients.

    client's request ─▶ session (slow path while anyone monitors) ─▶ feed() ─▶ one line
        ``+1700000000.123456 [0 127.0.0.1:54321] "SET" "k" "v"`` to every other monitor

Lines are Redis' (protocol/monitor.py: the format, the passwords redacted, admin and
skip_monitor commands left out, as are requests refused before they could run: unknown
commands, wrong arity, NOAUTH/NOPERM). The address is the client's as the proxy sees it;
the database is 0. A line is written when the proxy dispatches the request, so lines follow
each client's order and the order in which the proxy read the clients' requests. While any
client monitors, every session leaves its fast routes (so every request reaches ``feed``);
nothing is done while none does. With ``workers: N`` a monitor sees the clients of every
worker: while another worker has a monitor, this one sends it each line (front/siblings.py);
lines of one client stay in order, lines of clients on different workers arrive as the link
carries them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from slotgate.protocol import monitor
from slotgate.protocol.commands import arity_ok, lookup
from slotgate.protocol.resp import OK

if TYPE_CHECKING:
    from slotgate.proxy.front.routes import RouteSession
    from slotgate.proxy.front.server import Proxy
    from slotgate.proxy.front.session import Session


class Monitors:
    """The proxy's monitoring sessions (one per Proxy)."""

    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy
        self.sessions: dict[Session, None] = {}
        self.active = False  # someone monitors: here, or on another worker

    def add(self, s: Session) -> None:
        if s in self.sessions:
            return
        self.sessions[s] = None
        if len(self.sessions) == 1:
            self._tell_siblings(True)
            self.derive()

    def remove(self, s: Session) -> None:
        if self.sessions.pop(s, 0) is None and not self.sessions:
            self._tell_siblings(False)
            self.derive()

    def _tell_siblings(self, on: bool) -> None:
        if self.proxy.siblings is not None:
            self.proxy.siblings.monitoring(on)

    def derive(self) -> None:
        siblings = self.proxy.siblings
        active = bool(self.sessions) or (siblings is not None and siblings.peer_monitors)
        if active != self.active:
            self.active = active
            for s in self.proxy.sessions:
                s.set_checked(s.checked)  # fast routes off while anyone monitors

    def feed(self, s: Session, argv: list[bytes]) -> None:
        """One request of ``s``, shown to every other monitor if a server would show it."""
        info = lookup(argv)
        if info is None or not arity_ok(info, len(argv)) or not monitor.shown(info.flags):
            return
        line = monitor.line(time.time(), 0, s.peer, argv)
        for m in self.sessions:
            if m is not s:
                m.write_raw(line)
        siblings = self.proxy.siblings
        if siblings is not None and siblings.peer_monitors:
            siblings.line(line)

    def show(self, line: bytes) -> None:
        """A line of another worker's client: to every monitor here."""
        for m in self.sessions:
            m.write_raw(line)


def _full(s: RouteSession) -> Session:
    return s  # type: ignore[return-value]  # route code's view of the session is the session


def monitor_(s: RouteSession, argv: list[bytes]) -> bytes:
    me = _full(s)
    me.proxy.monitors.add(me)
    return OK


def reset(s: RouteSession) -> None:
    """RESET (and a closed connection): out of monitor mode."""
    me = _full(s)
    me.proxy.monitors.remove(me)


HANDLERS: dict[str, Callable[[RouteSession, list[bytes]], bytes]] = {"monitor": monitor_}
