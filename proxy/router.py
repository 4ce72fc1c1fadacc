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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from eventcore.backoff import backoff_ms
from protocol.resp import encode_command
from proxy import errors
from proxy.backend import DISCARD, BackendPool
from proxy.metrics import ProxyMetrics
from proxy.redirect import Action, classify_error, decide_lost, error_frame
from proxy.settings import ProxySettings

if TYPE_CHECKING:
    from proxy.topology import Topology

ASKING = encode_command(b"ASKING")
_MINUS = ord("-")
# Retry reasons that mean our map may be wrong: ask for a refresh before retrying.
_REFRESH_ON = {"CLUSTERDOWN": "retry", "LOST": "conn_lost", "UNSERVED": "retry"}


class Call:
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

    # --- sending ---------------------------------------------------------------------------
    def send(self, call: Call) -> None:
        if call.fixed_node:
            self.pool.get(call.fixed_node, call.proto, call.sticky).send(call.payload, call)
            return
        owner = self.topology.owners[call.slot]
        if owner is None:
            self._retry(call, "UNSERVED")
            return
        call.node = owner
        self.pool.get(owner, call.proto, call.sticky).send(call.payload, call)

    # --- replies that are errors -----------------------------------------------------------
    def on_error(self, call: Call, raw: bytes) -> None:
        if call.fixed_node:
            call.finish(raw)
            return
        expired = call.deadline != 0.0 and trio.current_time() >= call.deadline
        d = classify_error(raw, call.node, call.redirects, self._max_redirects, expired)
        action = d.action
        if action is Action.FORWARD:
            call.finish(raw)
            return
        self.metrics.redirect(d.kind, call.node)
        if action is Action.RESEND:
            call.redirects += 1
            self.topology.moved(d.slot, d.node)
            self.send(call)
        elif action is Action.ASK:
            call.redirects += 1
            call.node = d.node
            conn = self.pool.get(d.node, call.proto, call.sticky)
            conn.send(ASKING, DISCARD)
            conn.send(call.payload, call)
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
        self.nursery.start_soon(self._resend_later, call, min(delay_s, call.deadline - now))

    async def _resend_later(self, call: Call, delay_s: float) -> None:
        await trio.sleep(max(delay_s, 0.0))
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
