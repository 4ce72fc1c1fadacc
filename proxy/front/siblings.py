"""With ``workers: N``: the other worker processes, so the proxy's clients are one server's.

    this worker ──control link (proxy/ops/workers.py Link)──▶ supervisor ──▶ every other worker
      MONITOR      ``MON 1|0``: this worker has monitoring clients (none now)
                   ◀── ``PEERMON 1|0``: another worker has some; then every request's line
                   goes out as ``LINE <line>`` and comes in to the monitors as it is
      questions    ``ASK <id> <op> <args>...`` ─▶ each other worker answers ``ANS <seq> <...>``
                   ◀── ``ANS <id> <every answer>`` once all have (or ``ASK_TIMEOUT_S`` passed)

The questions (``ANSWERS``): PAUSE / UNPAUSE (CLIENT PAUSE holds every worker's clients; the
asker replies once every worker holds them), LIST (CLIENT LIST's lines of their clients), KILL
(CLIENT KILL's filters applied to their clients), REDIR / HAS (CLIENT TRACKING's REDIRECT to a client of
theirs: its invalidations, whether it is there), COUNTS (INFO's own facts, ``info.Own``, one
encoded answer per worker: INFO combines them with its own, the request waiting for them
before it goes to the masters), UNBLOCK (CLIENT UNBLOCK of a client of
theirs, answered once its node did), SWAPHOLD / SWAPEND (SWAPDB with numbered databases:
their clients of both databases held until it ends, answered once they are; db_swap.py).
A worker that does not answer in time is
left out of the reply. A worker started again while a pause is on is told of it by the
supervisor, and holds its clients until it ends.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from slotgate.protocol.commands import CommandInfo
from slotgate.proxy.front import clients, db_swap, info, pause, tracking
from slotgate.proxy.ops.workers import Link
from slotgate.proxy.routing import fanout

if TYPE_CHECKING:
    from slotgate.proxy.front.routes import RouteSession
    from slotgate.proxy.front.server import Proxy

log = logging.getLogger("slotgate.siblings")

ASK_TIMEOUT_S = 2.0  # a question unanswered by then is answered with what came
COUNTS_KEPT_MAX = 10_000  # other workers' counts waiting for their INFO's merge


class Siblings:
    """This worker's side of the control link (one per Proxy, with workers)."""

    def __init__(self, proxy: Proxy, link: Link) -> None:
        self.proxy = proxy
        self.link = link
        self.peer_monitors = False  # another worker has MONITOR clients
        self._ids = itertools.count(1)
        self._waiting: dict[bytes, Callable[[list[bytes]], None]] = {}
        # client id -> the other workers' own facts, for the INFO it is asking
        self.counts: dict[int, list[info.Own]] = {}

    async def run(self) -> None:
        """Serve the link until the supervisor is gone."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.link.run_writer)
            async for frame in self.link.frames():
                self._on_frame(frame)
                self.proxy.router.pool.after_batch()  # what it queued, written now
            nursery.cancel_scope.cancel()
        self.peer_monitors = False
        self.proxy.monitors.derive()

    def _on_frame(self, frame: list[bytes]) -> None:
        op = frame[0]
        if op == b"LINE" and len(frame) == 2:
            self.proxy.monitors.show(frame[1])
        elif op == b"PEERMON" and len(frame) == 2:
            self.peer_monitors = frame[1] == b"1"
            self.proxy.monitors.derive()
        elif op == b"ASK" and len(frame) >= 3:
            seq = frame[1]
            later = LATER.get(frame[2])
            if later is not None:
                later(self.proxy, frame[3:], lambda reply: self.link.send(b"ANS", seq, *reply))
                return
            answer = ANSWERS.get(frame[2])
            reply = [] if answer is None else answer(self.proxy, frame[3:])
            self.link.send(b"ANS", seq, *reply)
        elif op == b"ANS" and len(frame) >= 2:
            done = self._waiting.pop(frame[1], None)
            if done is not None:
                done(frame[2:])

    # --- what this worker tells or asks the others -----------------------------------------------
    def monitoring(self, on: bool) -> None:
        self.link.send(b"MON", b"1" if on else b"0")

    def line(self, raw: bytes) -> None:
        self.link.send(b"LINE", raw)

    def ask(self, question: list[bytes], done: Callable[[list[bytes]], None]) -> None:
        """``question`` to every other worker; ``done`` gets their answers (each op's own
        form, concatenated) once all answered, or what came within ``ASK_TIMEOUT_S``."""
        ask_id = b"%d" % next(self._ids)
        self._waiting[ask_id] = done
        self.link.send(b"ASK", ask_id, *question)
        self.proxy.router.nursery.start_soon(self._expire, ask_id)

    async def ask_all(self, question: list[bytes]) -> list[bytes]:
        got: list[bytes] = []
        done = trio.Event()

        def answered(answers: list[bytes]) -> None:
            got.extend(answers)
            done.set()

        self.ask(question, answered)
        await done.wait()
        return got

    async def info(self, s: RouteSession, argv: list[bytes], row: CommandInfo) -> None:
        """INFO: the other workers' own facts first, then the masters' INFO as usual
        (the client's later requests wait, so its replies stay in order)."""
        peers = [own for own in map(info.decode, await self.ask_all([b"COUNTS"]))
                 if own is not None]
        if len(self.counts) >= COUNTS_KEPT_MAX:  # (left by INFOs that got no masters' reply)
            self.counts.clear()
        self.counts[s.id] = peers
        fanout.info(s, argv, row)

    async def _expire(self, ask_id: bytes) -> None:
        await trio.sleep(ASK_TIMEOUT_S)
        done = self._waiting.pop(ask_id, None)
        if done is not None:
            log.warning("a worker did not answer in %.0f s; answered without it", ASK_TIMEOUT_S)
            done([])
            self.proxy.router.pool.after_batch()


# op -> what this worker answers another's question with.
ANSWERS: dict[bytes, Callable[[Proxy, list[bytes]], list[bytes]]] = {
    b"PAUSE": pause.asked_pause,
    b"UNPAUSE": pause.asked_unpause,
    b"LIST": clients.asked_list,
    b"KILL": clients.asked_kill,
    b"COUNTS": info.asked_counts,
    b"REDIR": tracking.asked_redirect,
    b"HAS": tracking.asked_has,
    b"SWAPEND": db_swap.asked_end,
}
# op -> what answers once something else has (it is handed the function that answers).
LATER: dict[bytes, Callable[[Proxy, list[bytes], Callable[[list[bytes]], None]], None]] = {
    b"UNBLOCK": clients.asked_unblock,
    b"SWAPHOLD": db_swap.asked_hold,
}
