"""Sending one request to the node that owns its slot, following redirects: the thin loop
around ``redirect.py``'s decisions.

A ``Call`` is one backend request (a client command, or one part of a split/fan-out). It is
its own reply callback: the backend connection calls ``on_frame`` with the raw reply frame or
``on_failure`` when the connection died. Non-error replies go straight to ``call.done`` as raw
bytes — nothing is decoded on that path. Error replies are classified:

- MOVED: patch the slot map, ask for a debounced refresh, resend at once (synchronously, so
  a client's later requests for the slot cannot overtake it on the new node).
- ASK: ``ASKING`` and the command queued back to back on the target's connection.
- TRYAGAIN / CLUSTERDOWN / LOADING, lost connections, unserved slots: resent after a backoff
  by a small task, until the request's deadline; then the client gets the error.

A call with ``fixed_node`` goes to that node only (all-nodes fan-out) and follows nothing.

The same loop serves requests that run on a client's own connection (transactions, blocking
commands, WATCH; see ``pinned.py``): an ``AwaitedCall`` takes the router's decisions like any
call, but its task does the I/O (a round trip on that connection, the backoff sleeps), and a
redirect or retry in any of its replies decides for all of them. Every call, awaited or not,
is bounded by ``max_redirects`` and by its retry deadline.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import trio
from mypy_extensions import mypyc_attr

from slotgate.eventcore.backoff import backoff_ms
from slotgate.protocol.resp import encode_command
from slotgate.proxy import errors
from slotgate.proxy.backend.connections import (
    DISCARD,
    BackendError,
    BackendPool,
    DirectConnection,
    Reply,
)
from slotgate.proxy.ops.metrics import ProxyMetrics
from slotgate.proxy.ops.settings import ProxySettings
from slotgate.proxy.routing.redirect import (
    Action,
    Decision,
    classify_error,
    decide_lost,
    error_frame,
)

if TYPE_CHECKING:
    from slotgate.proxy.routing.topology import Topology

ASKING = encode_command(b"ASKING")
_MINUS = ord("-")
# Retry reasons that mean our map may be wrong: ask for a refresh before retrying.
_REFRESH_ON = {"CLUSTERDOWN": "retry", "LOST": "conn_lost", "UNSERVED": "retry"}


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled: session.py's SlotCall extends it
class Call(Reply):
    """One backend request and where its reply goes."""

    __slots__ = (
        "router", "payload", "slot", "readonly", "proto", "sticky", "done", "redirects",
        "attempts", "deadline", "node", "fixed_node",
    )

    def __init__(
        self,
        router: Router,
        payload: bytes,
        slot: int,
        readonly: bool,
        proto: int,
        sticky: int,
        done: Callable[[bytes], None],
        fixed_node: str = "",
    ) -> None:
        self.router = router
        self.payload = payload
        self.slot = slot
        self.readonly = readonly
        self.proto = proto
        self.sticky = sticky
        self.done = done
        self.redirects = 0
        self.attempts = 0
        self.deadline = 0.0  # set when the first retry starts
        self.node = fixed_node
        self.fixed_node = fixed_node

    def on_frame(self, type_byte: int, raw: bytes) -> None:
        if type_byte == _MINUS:
            self.router.on_error(self, raw)
        else:
            self.done(raw)

    def finish(self, raw: bytes) -> None:
        """The final reply (a subclass may be its own reply slot)."""
        self.done(raw)

    def on_failure(self, exc: Exception, sent: bool) -> None:
        self.router.on_lost(self, sent)

    def transmit(self, node: str, asking: bool) -> None:
        """Send to ``node`` on the client's shared connection (``ASKING`` first for an ASK)."""
        conn = self.router.pool.get(node, self.proto, self.sticky)
        if asking:
            conn.send(ASKING, DISCARD)
        conn.send(self.payload, self)

    def resend_after(self, delay_s: float) -> None:
        """Send again to the slot's owner in ``delay_s`` (a retry's backoff)."""
        self.router.nursery.start_soon(self.router.resend_later, self, delay_s)


# Opens (or reuses) the connection an awaited call runs on, to the node given.
Connect = Callable[[str], Awaitable[DirectConnection]]


class AwaitedCall(Call):
    """A request on a connection of the client's own, awaited by the client's task.

    The router decides exactly as for any call (``transmit`` and ``resend_after`` only note
    where and when to go next); ``run`` does the round trips and sleeps the backoffs, so that
    cancelling the task (the client went away) ends the request. ``n_replies``: the frames the
    payload is answered with (``MULTI … EXEC``: one per command)."""

    __slots__ = ("n_replies", "asking", "delay_s", "result")

    def __init__(self, router: Router, payload: bytes, slot: int, readonly: bool, proto: int,
                 sticky: int, n_replies: int) -> None:
        super().__init__(router, payload, slot, readonly, proto, sticky, self.finish)
        self.n_replies = n_replies
        self.asking = False
        self.delay_s: float | None = None
        self.result: bytes | None = None

    def transmit(self, node: str, asking: bool) -> None:
        self.asking = asking

    def resend_after(self, delay_s: float) -> None:
        self.delay_s = delay_s

    def finish(self, raw: bytes) -> None:
        self.result = raw

    async def run(self, connect: Connect) -> bytes:
        """Follow the router's decisions until the final reply frame (EXEC's, the blocking
        command's, WATCH's)."""
        router = self.router
        router.send(self)
        while self.result is None:
            delay_s = self.delay_s
            if delay_s is not None:
                self.delay_s = None
                await trio.sleep(delay_s)
                router.send(self)
                continue
            node, asking = self.node, self.asking
            self.asking = False
            payload, n_replies = self.payload, self.n_replies
            if asking:
                payload, n_replies = ASKING + payload, n_replies + 1
            sent = False
            try:
                conn = await connect(node)
                sent = True
                frames = await conn.roundtrip(payload, n_replies)
            except (BackendError, OSError, trio.TooSlowError):
                # As for a shared connection that died (the pool's on_failure).
                router.topology.request_refresh("conn_lost")
                router.on_lost(self, sent)
                continue
            router.on_replies(self, frames[1:] if asking else frames)
        return self.result


class Router:
    def __init__(
        self,
        settings: ProxySettings,
        metrics: ProxyMetrics,
        topology: Topology,
        pool: BackendPool,
        nursery: trio.Nursery,
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.topology = topology
        self.pool = pool
        self.nursery = nursery
        self._max_redirects = settings.max_redirects
        self._slot_requests = metrics.slot_requests

    # --- sending ---------------------------------------------------------------------------
    def send(self, call: Call) -> None:
        if call.fixed_node:
            self.pool.get(call.fixed_node, call.proto, call.sticky).send(call.payload, call)
            return
        self._slot_requests[call.slot] += 1
        owner = self.topology.owners[call.slot]
        if owner is None:
            self._retry(call, "UNSERVED")
            return
        call.node = owner
        call.transmit(owner, False)

    # --- replies that are errors -----------------------------------------------------------
    def on_error(self, call: Call, raw: bytes) -> None:
        if call.fixed_node:
            call.finish(raw)
            return
        expired = call.deadline != 0.0 and trio.current_time() >= call.deadline
        d = classify_error(raw, call.node, call.redirects, self._max_redirects, expired)
        if d.action is Action.FORWARD:
            call.finish(raw)
        else:
            self._follow(call, d)

    def on_replies(self, call: Call, frames: list[tuple[int, bytes]]) -> None:
        """The replies to one pipelined payload (``MULTI … EXEC``): a redirect or retry in any
        of them means nothing ran, and it decides; else the last reply is the answer."""
        expired = call.deadline != 0.0 and trio.current_time() >= call.deadline
        for type_byte, raw in frames:
            if type_byte == _MINUS:
                d = classify_error(raw, call.node, call.redirects, self._max_redirects, expired)
                if d.action is not Action.FORWARD:
                    self._follow(call, d)
                    return
        call.finish(frames[-1][1])

    def _follow(self, call: Call, d: Decision) -> None:
        self.metrics.redirect(d.kind, call.node)
        action = d.action
        if action is Action.RESEND:
            call.redirects += 1
            self.topology.moved(d.slot, d.node)
            self.send(call)
        elif action is Action.ASK:
            call.redirects += 1
            call.node = d.node
            call.transmit(d.node, True)
        elif action is Action.RETRY:
            self._retry(call, d.kind)
        else:
            call.finish(d.error)

    def on_lost(self, call: Call, sent: bool) -> None:
        expired = call.deadline != 0.0 and trio.current_time() >= call.deadline
        d = decide_lost(call.node, sent, call.readonly, expired)
        if d.action is Action.RETRY and not call.fixed_node:
            self._retry(call, "LOST")
            return
        if sent and not call.readonly:
            self.metrics.unknown_fate_write()
        call.finish(d.error or error_frame(errors.NODE_UNREACHABLE.format(node=call.node)))

    # --- delayed retries -------------------------------------------------------------------
    def _retry(self, call: Call, kind: str) -> None:
        now = trio.current_time()
        if call.deadline == 0.0:
            call.deadline = now + self.settings.retry_deadline_ms / 1000
        elif now >= call.deadline:
            if kind == "UNSERVED":
                call.finish(error_frame(errors.SLOT_NOT_SERVED))
            else:
                call.finish(error_frame(errors.NODE_UNREACHABLE.format(node=call.node)))
            return
        reason = _REFRESH_ON.get(kind)
        if reason is not None:
            self.topology.request_refresh(reason)
        s = self.settings
        delay_s = backoff_ms(call.attempts, s.retry_backoff_min_ms, s.retry_backoff_max_ms) / 1000
        call.attempts += 1
        call.resend_after(max(min(delay_s, call.deadline - now), 0.0))

    async def resend_later(self, call: Call, delay_s: float) -> None:
        await trio.sleep(delay_s)
        self.send(call)
        self.pool.after_batch()


class Gather:
    """Collects the replies of N parts, then hands them, in part order, to ``finish``."""

    __slots__ = ("replies", "remaining", "finish")

    def __init__(self, n: int, finish: Callable[[list[bytes]], None]) -> None:
        self.replies: list[bytes] = [b""] * n
        self.remaining = n
        self.finish = finish

    def part(self, index: int) -> Callable[[bytes], None]:
        def done(raw: bytes) -> None:
            self.replies[index] = raw
            self.remaining -= 1
            if self.remaining == 0:
                self.finish(self.replies)

        return done
