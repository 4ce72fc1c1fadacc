"""Something to send on a node connection after every request a batch of work queued on it.

    request 1 ─▶ conn.send ┐ open(conn) ─▶ the batch open on conn (made on first use)
    request 2 ─▶ conn.send ┘
    end of the batch (the pool's flush) ─▶ close(conn, batch): e.g. one WAIT or ROLE after them

The hook is listed in the pool's ``Flusher`` like a connection's writer: when the flush
reaches it, it queues each batch's closing request on its connection, whose writer then goes
out in the same flush (a later round of it, if that writer was written already). So the
closing request always leaves after the requests it covers, on the same connection, and one
is sent per connection per batch, whatever the number of requests.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from slotgate.eventcore.writer import Flusher, Writer
from slotgate.proxy.backend.connections import BackendConnection

T = TypeVar("T")


class ConnBatches(Writer, Generic[T]):
    """Batches open on node connections in this batch of work, closed when it is flushed."""

    __slots__ = ("_flusher", "_make", "_close", "_open")

    def __init__(self, flusher: Flusher, make: Callable[[], T],
                 close: Callable[[BackendConnection, T], None]) -> None:
        super().__init__()
        self._flusher = flusher
        self._make = make
        self._close = close
        self._open: dict[BackendConnection, T] = {}

    def open(self, conn: BackendConnection) -> T:
        """The batch open on ``conn`` (call it after queueing the request it covers)."""
        batch = self._open.get(conn)
        if batch is None:
            batch = self._open[conn] = self._make()
            if not self.dirty:
                self.dirty = True
                self._flusher.pending.append(self)
        return batch

    def write_now(self) -> int:
        """The flush reached us: close every open batch (queue its request)."""
        batches, self._open = self._open, {}
        for conn, batch in batches.items():
            self._close(conn, batch)
        return 0
