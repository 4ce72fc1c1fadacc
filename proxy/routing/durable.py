"""Durable writes: one ``WAIT N timeout`` after a batch's writes to a master, then the replies.

    write ─▶ its connection to the master ─▶ WaitBatch open on that connection (batches.py)
    its reply ─▶ held on the call (not yet the client's)
    end of the batch ─▶ WAIT N timeout, on the same connection, after every write it covers
    WAIT's reply n ─▶ each held reply to its client if n >= its own N, else NOT_DURABLE

N is the client's (a user's or a listener's policy may differ from the proxy's): one WAIT
asks for the largest N of the writes it covers.

WAIT counts the replicas that acknowledged the connection's last write (Redis) or the
master's whole stream (our node), either of which covers every write queued before it on
that connection. A write that failed (an error reply, a redirect) was not held and is
answered as always; a redirected write is held again by the batch of the connection it went
to next. While a WAIT waits (up to ``durable_timeout_ms`` when replicas are missing) the
requests behind it on that connection wait too.
"""

from __future__ import annotations

from typing import Protocol

from slotgate.eventcore.writer import Flusher
from slotgate.protocol.resp import encode_command
from slotgate.proxy import errors
from slotgate.proxy.backend.batches import ConnBatches
from slotgate.proxy.backend.connections import BackendConnection
from slotgate.proxy.ops.metrics import ProxyMetrics
from slotgate.proxy.ops.settings import ProxySettings
from slotgate.proxy.routing.redirect import error_frame

_COLON = ord(":")


class HeldWrite(Protocol):
    """A write whose reply waits for its WAIT (front/readwrite.py's ``DurableCall``)."""

    held: bytes | None
    batch: WaitBatch | None
    wanted: int  # replicas its client's policy asks for

    def finish(self, raw: bytes) -> None: ...


class WaitBatch:
    """The writes one WAIT covers; the WAIT's reply slot on the connection."""

    __slots__ = ("owner", "calls", "node", "wanted", "timeout_ms")

    def __init__(self, owner: DurableWrites) -> None:
        self.owner = owner
        self.calls: list[HeldWrite] = []
        self.node = ""
        self.wanted = 0
        self.timeout_ms = 0

    def on_frame(self, type_byte: int, raw: bytes) -> None:
        acked = int(raw[1:-2]) if type_byte == _COLON else 0
        self.owner.settle(self, acked, lost=False)

    def on_failure(self, exc: Exception, sent: bool) -> None:
        self.owner.settle(self, 0, lost=True)


class DurableWrites:
    def __init__(self, settings: ProxySettings, metrics: ProxyMetrics, flusher: Flusher) -> None:
        self.settings = settings
        self.metrics = metrics
        self._batches: ConnBatches[WaitBatch] = ConnBatches(flusher, lambda: WaitBatch(self),
                                                            self._send_wait)
        self.waits_sent = 0

    def hold(self, conn: BackendConnection, call: HeldWrite) -> None:
        """``call``'s write was just queued on ``conn``: its reply waits for the batch's WAIT."""
        batch = self._batches.open(conn)
        batch.calls.append(call)
        batch.wanted = max(batch.wanted, call.wanted)
        call.batch = batch
        call.held = None

    def _send_wait(self, conn: BackendConnection, batch: WaitBatch) -> None:
        s = self.settings
        batch.node = conn.address
        batch.timeout_ms = s.durable_timeout_ms
        self.waits_sent += 1
        conn.send(encode_command(b"WAIT", batch.wanted, batch.timeout_ms), batch)

    def settle(self, batch: WaitBatch, acked: int, lost: bool) -> None:
        """The WAIT answered (``acked`` replicas) or was lost: each held reply goes out, or
        an error for a write whose client asked for more replicas than acknowledged."""
        short = acked < batch.wanted
        self.metrics.durable_wait("lost" if lost else "short" if short else "ok")
        for call in batch.calls:
            raw = call.held
            if call.batch is not batch or raw is None:
                continue  # answered already (an error), or held by a later batch (redirected)
            call.held = None
            call.batch = None
            if lost:
                raw = error_frame(errors.DURABILITY_UNKNOWN.format(node=batch.node))
            elif acked < call.wanted:
                raw = error_frame(errors.NOT_DURABLE.format(
                    node=batch.node, acked=acked, wanted=call.wanted,
                    timeout_ms=batch.timeout_ms))
            call.finish(raw)
