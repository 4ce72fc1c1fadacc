"""What a worker process and its supervisor share: the worker's role on the command line, the
control link, and a tiny HTTP GET for the internal metrics. (Both bind the shared address with
SO_REUSEPORT through ``eventcore.listen``.)

The supervisor (proxy/ops/supervisor.py) starts each worker as ``python -m slotgate.proxy <the same flags>
--listen HOST:PORT --worker INDEX/COUNT/FD``. ``FD`` is the worker's end of a socketpair: the
worker writes ``ready <metrics port>\\n`` on it once it listens, and stops (draining, as on
SIGTERM) when it reads end-of-file, i.e. when the supervisor is gone, whatever killed it.
"""

from __future__ import annotations

from dataclasses import dataclass

import trio

READY = b"ready"


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


async def wait_link_closed(link: trio.SocketStream) -> None:
    """Returns when the other end (the supervisor) is gone."""
    try:
        while await link.receive_some(1024):
            pass
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass  # gone is gone, however it went


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
