"""What a worker process and its supervisor share: the worker's role on the command line, the
control link, and a tiny HTTP GET for the internal metrics. (Both bind the shared address with
SO_REUSEPORT through ``eventcore.listen``.)

The supervisor (proxy/ops/supervisor.py) starts each worker as ``python -m slotgate.proxy <the same flags>
--listen HOST:PORT --worker INDEX/COUNT/FD``. ``FD`` is the worker's end of a socketpair: the
worker writes ``ready <metrics port>\\n`` on it once it listens, and stops (draining, as on
SIGTERM) when it reads end-of-file, i.e. when the supervisor is gone, whatever killed it.

After that line the link carries RESP arrays both ways (``Link``): what the workers tell each
other through the supervisor, so that the proxy's clients are one server's (MONITOR, CLIENT
PAUSE, CLIENT LIST/KILL: proxy/front/siblings.py; the relay: proxy/ops/supervisor.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import trio

from slotgate.protocol.resp import ProtocolError, RequestReader, encode_command

READY = b"ready"
LINK_QUEUE_FRAMES = 10_000  # frames waiting to be written on a link; more are dropped (counted)
LINK_WRITE_BATCH = 256  # frames joined into one write


@dataclass(frozen=True)
class WorkerRole:
    index: int  # 0-based
    count: int
    fd: int  # the control link (a socketpair end)

    def flag(self) -> str:
        return f"{self.index}/{self.count}/{self.fd}"

    @classmethod
    def parse(cls, text: str) -> WorkerRole:
        """``"INDEX/COUNT/FD"``; raises ``ValueError``."""
        index, count, fd = (int(part) for part in text.split("/"))
        if not 0 <= index < count or fd < 0:
            raise ValueError(f"bad worker role {text!r}")
        return cls(index, count, fd)


async def announce_ready(link: trio.SocketStream, metrics_port: int) -> None:
    await link.send_all(READY + b" %d\n" % metrics_port)


async def http_get(port: int, path: str, timeout_s: float) -> tuple[int, bytes]:
    """GET ``http://127.0.0.1:<port><path>`` -> (status, body). Raises ``OSError``,
    ``trio.TooSlowError``, ``trio.BrokenResourceError`` or ``ValueError`` (a bad answer)."""
    with trio.fail_after(timeout_s):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                  "Connection: close\r\n\r\n".encode("ascii"))
            chunks = []
            while data := await stream.receive_some(65536):
                chunks.append(data)
    head, sep, body = b"".join(chunks).partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].split()
    if not sep or len(status_line) < 2 or not status_line[1].isdigit():
        raise ValueError(f"bad HTTP answer from 127.0.0.1:{port}{path}")
    return int(status_line[1]), body


class Link:
    """One end of the control link once ``ready`` is said: RESP arrays of bulk strings.

    ``send`` never waits: frames queue (at most ``LINK_QUEUE_FRAMES``; beyond that they are
    dropped and counted, so a flood of MONITOR lines cannot grow a process without bound) and
    ``run_writer`` writes them. ``frames`` yields what the other end sends until it is gone."""

    def __init__(self, stream: trio.SocketStream, leftover: bytes = b"") -> None:
        self.stream = stream
        self._in, self._out = trio.open_memory_channel[bytes](LINK_QUEUE_FRAMES)
        self._reader = RequestReader()
        self._reader.feed(leftover)
        self.dropped = 0

    def send(self, *args: bytes) -> None:
        try:
            self._in.send_nowait(encode_command(*args))
        except (trio.WouldBlock, trio.ClosedResourceError):
            self.dropped += 1

    async def run_writer(self) -> None:
        async for frame in self._out:
            batch = [frame]
            while len(batch) < LINK_WRITE_BATCH:
                try:
                    batch.append(self._out.receive_nowait())
                except trio.WouldBlock:
                    break
            try:
                await self.stream.send_all(b"".join(batch))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return

    async def frames(self) -> AsyncIterator[list[bytes]]:
        while True:
            try:
                ready = self._reader.get_requests()
            except ProtocolError:
                return  # (both ends are this code: a bad frame means the link is unusable)
            for frame in ready:
                if frame:
                    yield frame
            try:
                data = await self.stream.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return
            if not data:
                return
            self._reader.feed(data)
