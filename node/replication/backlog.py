"""The replication backlog: the last ``size`` bytes of the replication stream (sans-IO).

Offsets are Redis': ``master_repl_offset`` counts every stream byte ever produced under the
current history; the byte at offset ``o`` is the o-th byte (the first byte of the stream has
offset 1). ``first_byte_offset`` and ``histlen`` describe what is kept. A replica that has
processed up to offset ``r`` asks for ``PSYNC <replid> <r+1>``; ``since(r+1)`` answers the
missing bytes, or None when they are no longer (or not yet) here.
"""

from __future__ import annotations


class Backlog:
    """A bounded byte history of the replication stream."""

    def __init__(self, size: int, offset: int = 0) -> None:
        self.size = max(1, size)
        self.buf = bytearray()
        self.master_repl_offset = offset  # offset of the last byte produced
        self.active = False  # Redis creates the backlog with the first replica

    @property
    def histlen(self) -> int:
        return len(self.buf)

    @property
    def first_byte_offset(self) -> int:
        if not self.active:
            return 0
        return self.master_repl_offset - len(self.buf) + 1

    def activate(self) -> None:
        self.active = True

    def feed(self, data: bytes) -> None:
        self.master_repl_offset += len(data)
        if not self.active:
            return
        buf = self.buf
        if len(data) >= self.size:
            buf[:] = data[-self.size :]
            return
        buf += data
        extra = len(buf) - self.size
        if extra > 0:
            del buf[:extra]  # cheap: CPython moves the start of a bytearray for front deletes

    def resize(self, size: int) -> None:
        self.size = max(1, size)
        extra = len(self.buf) - self.size
        if extra > 0:
            del self.buf[:extra]

    def reset(self, offset: int) -> None:
        """Empty history continuing at ``offset`` (after a full sync as a replica)."""
        self.buf = bytearray()
        self.master_repl_offset = offset

    def covers(self, wanted: int) -> bool:
        """Whether the bytes from offset ``wanted`` on are all here (wanted may be one past
        the end: nothing missing)."""
        if not self.active:
            return False
        return self.first_byte_offset <= wanted <= self.master_repl_offset + 1

    def since(self, wanted: int) -> bytes | None:
        if not self.covers(wanted):
            return None
        start = wanted - self.first_byte_offset
        return bytes(self.buf[start:])
