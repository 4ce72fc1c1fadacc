"""One ready client served synchronously inside a poller pass: the node's per-request loop.

Called by the poller (``eventcore.poller``) with the bytes it read from a client's socket
(node/core/server.py binds the first arguments): parse every complete request, run them
(``dispatch.run_requests``); the replies go out with one non-blocking send per client at the
end of the pass (``Server._end_pass``). Anything unusual is returned, for the client's own task to finish with awaits (``server.py``): a blocking
command, a close, a protocol error, output the kernel did not take, the query-buffer limit.

A module of its own so that the compiled build compiles it (docs/ARCHITECTURE.md "The
compiled build"); server.py, which awaits, stays Python.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from slotgate.protocol.resp import ProtocolError, RequestReader

if TYPE_CHECKING:
    from slotgate.node.core.client import Client
    from slotgate.node.core.server import Server

# What the client's task is woken with (besides a ("batch", requests, index) to finish):
FLUSH = ("flush",)  # the kernel took only part of the output: the task sends the rest
QBUF = ("qbuf",)  # the query buffer is over its limit

Runner = Callable[["Client", list[list[bytes]], int], int]


def serve(srv: Server, c: Client, reader: RequestReader, qbuf_limit: int, run: Runner,
          data: bytes) -> tuple[Any, ...] | None:
    """One ready client: run every complete request in ``data`` (and before) with ``run``
    (``dispatch.run_requests``); its replies are sent at the end of the pass. Anything
    unusual is returned, for the client's task to finish."""
    if c.killed:
        return None
    srv.stat_net_input_bytes += len(data)
    reader.feed(data)
    c.running = True
    try:
        while True:
            try:
                reqs = reader.get_requests()
            except ProtocolError as e:
                return ("proto", e)
            if not reqs:
                break
            idx = run(c, reqs, 0)
            if idx < len(reqs) or c.close_after_reply or c.blocked is not None:
                if c.close_after_reply and srv.blocked.serving:
                    srv.blocked.close_now(c)  # (a QUIT while a script is busy)
                return ("batch", reqs, idx)
            c.last_interaction_ms = int(time.time() * 1000)
            if not reader.buffered_bytes():
                break
    finally:
        c.running = False
    if c.out and not c.writer.sending:
        # Sent at the end of the pass (Server._end_pass), as Redis writes replies before it
        # sleeps: the replicas' stream first, then every client's replies in one run, so a
        # peer that sleeps between requests is woken once per pass, not once per client (at
        # -P 1 those wake-ups cost a slow command's clients more than the command itself)
        srv.deferred_replies.append(c)
    if reader.buffered_bytes() > qbuf_limit:
        return QBUF
    return None


def send_deferred(srv: Server, deferred: list[Client]) -> None:
    """The end of a pass (``Server._end_pass``, after the replicas' stream): each client's
    replies in one non-blocking send; a client whose rest the kernel did not take is woken
    to send it (or closed, over its output limit). Here, compiled, rather than in server.py:
    it runs once per served client of every pass."""
    poller = srv.poller
    assert poller is not None
    sent = 0
    for c in deferred:
        w = c.writer
        sock = w.sock
        if c.killed or not c.out or w.sending or sock is None:
            continue  # its task sends (or drops) the output
        if srv.before_reply is not None:
            srv.before_reply()
        sent += w.write_now()
        if c.out and not (srv.normal_obuf_limits is not None and srv.obuf_over(c)):
            poller.wake(sock, FLUSH)
    srv.stat_net_output_bytes += sent
