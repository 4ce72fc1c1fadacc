"""Read-your-writes: the replication offset a client's last write to a shard reached.

    client write ─▶ its connection to the master ─▶ ticket = batch open on that connection
    end of the batch ─▶ ROLE on the same connection, after the writes (one per connection)
    ROLE's reply ─▶ the master's offset, which covers every write before it: the ticket's
    client read ─▶ ticket unanswered: the master;  answered: a replica whose processed offset
                   (replicas.py's checks) has reached it, else the master

Why it is right: the ROLE runs on the master after the writes it covers (same connection,
FIFO), so the offset it reports is at least theirs; a replica's processed offset, read by a
check, only grows; so a replica that showed an offset at least the ticket's has applied the
client's write. Why it is cheap: no round trip is waited for (a read whose ticket is not
answered yet goes to the master), one ROLE per connection per batch of work however many
writes it carried, and the replicas' offsets come from the checks that run anyway.

Tickets are numbers; their offsets are kept for the last ``KEPT_TICKETS``. An older ticket
counts as the highest offset seen from its master since (larger: only safer).
"""

from __future__ import annotations

from collections import deque

from slotgate.eventcore.writer import Flusher
from slotgate.protocol.resp import encode_command
from slotgate.proxy.backend.batches import ConnBatches
from slotgate.proxy.backend.connections import BackendConnection

ROLE = encode_command(b"ROLE")
_MASTER_HEAD = b"*3\r\n$6\r\nmaster\r\n:"
NEVER = 2**62  # a ticket whose offset cannot be known (lost, not a master): master reads
KEPT_TICKETS = 65536


def master_offset(raw: bytes) -> int:
    """A master's offset from its raw ROLE reply (RESP2 or RESP3); NEVER if not a master's."""
    if not raw.startswith(_MASTER_HEAD):
        return NEVER
    end = raw.find(b"\r\n", len(_MASTER_HEAD))
    digits = raw[len(_MASTER_HEAD):end]
    return int(digits) if digits.isdigit() else NEVER


class _Ticket:
    """ROLE's reply slot for one ticket (a backend connection's ``Pending``)."""

    __slots__ = ("owner", "number", "master")

    def __init__(self, owner: WriteOffsets, number: int, master: str) -> None:
        self.owner = owner
        self.number = number
        self.master = master

    def on_frame(self, type_byte: int, raw: bytes) -> None:
        self.owner.resolve(self, master_offset(raw))

    def on_failure(self, exc: Exception, sent: bool) -> None:
        self.owner.resolve(self, NEVER)


class WriteOffsets:
    """Tickets for writes, answered by one ROLE per connection per batch of work."""

    def __init__(self, flusher: Flusher) -> None:
        self._next = 0
        self._batches: ConnBatches[list[int]] = ConnBatches(flusher, self._new_batch,
                                                            self._send_role)
        self._offsets: dict[int, int] = {}  # ticket -> offset, the last KEPT_TICKETS
        self._order: deque[int] = deque()
        self._latest: dict[str, int] = {}  # master -> highest offset its ROLE showed
        self._unanswered: set[int] = set()
        self.roles_sent = 0

    def _new_batch(self) -> list[int]:
        self._next += 1
        self._unanswered.add(self._next)
        return [self._next]

    def ticket(self, conn: BackendConnection) -> int:
        """The ticket of a write just queued on ``conn`` (shared by the batch's writes)."""
        return self._batches.open(conn)[0]

    def _send_role(self, conn: BackendConnection, batch: list[int]) -> None:
        self.roles_sent += 1
        conn.send(ROLE, _Ticket(self, batch[0], conn.address))

    def resolve(self, ticket: _Ticket, offset: int) -> None:
        self._unanswered.discard(ticket.number)
        self._offsets[ticket.number] = offset
        self._order.append(ticket.number)
        if offset != NEVER and offset > self._latest.get(ticket.master, -1):
            self._latest[ticket.master] = offset
        while len(self._order) > KEPT_TICKETS:
            self._offsets.pop(self._order.popleft(), None)

    def known(self, master: str, offset: int) -> int:
        """A ticket for a write whose offset is known already (a transaction's, read with a
        ROLE on its own connection)."""
        self._next += 1
        self.resolve(_Ticket(self, self._next, master), offset)
        return self._next

    def needed(self, number: int, master: str) -> int | None:
        """The offset a replica needs for a read after the write of ticket ``number``; None
        while the ticket is unanswered (the read goes to the master)."""
        offset = self._offsets.get(number)
        if offset is not None:
            return offset
        if number in self._unanswered:
            return None
        return self._latest.get(master, NEVER)  # forgotten: the highest since
