"""A full synchronisation without a file (``repl-diskless-sync yes``, Redis' default).

The snapshot writer forked for a replica writes into a pipe and the master streams what comes
out to the replica at once, framed as Redis frames it when the replica announced ``REPLCONF
capa eof``: ``$EOF:<40-character mark>\\r\\n``, the snapshot bytes, the mark again. The
replica (node/replication/replica.py) reads until the mark; with ``repl-diskless-load``
``swapdb`` (or ``on-empty-db`` and no keys) it is loading (``-LOADING``) from the first line
on (``swapdb`` from its own history: loading beside the old data, still served), else it
serves its old data until the whole payload is in. Replicas without the
capability get the snapshot file (``$<len>``), see node/replication/master.py.

Not done: ``repl-diskless-sync-delay`` (Redis waits for more replicas to share one child; every
replica here gets its own child at once).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import trio

from slotgate.node.persistence import snapshot

if TYPE_CHECKING:
    from slotgate.node.replication.master import Replica, Replication

log = logging.getLogger("node.replication")

MARK_CHARS = 40  # Redis' RDB_EOF_MARK_SIZE
CHUNK_BYTES = 1 << 20  # pipe bytes read (and queued to the replica) at a time
CHILD_POLL_S = 0.01  # how often the sender looks whether the writer exited


def eof_preamble(mark: bytes) -> bytes:
    return b"$EOF:" + mark + b"\r\n"


def start(repl: Replication, r: Replica, aux: dict[str, bytes],
          functions: Sequence[bytes], key_delay_us: int) -> None:
    """Fork the writer for ``r`` (OSError when fork or pipe fail) and start streaming it."""
    rfd, wfd = os.pipe()
    try:
        r.child = snapshot.fork_stream(repl.server.ks, wfd, aux, functions, key_delay_us)
    except OSError:
        os.close(rfd)
        raise
    finally:
        os.close(wfd)
    r.diskless = True
    nursery = repl.server.nursery
    assert nursery is not None
    nursery.start_soon(_stream, repl, r, rfd)


async def _stream(repl: Replication, r: Replica, rfd: int) -> None:
    """Runs after the +FULLRESYNC reply went into the output: the preamble with the pipe's
    first bytes, the rest (at most about two chunks queued at a time), the mark, then the
    stream held meanwhile."""
    c = r.client
    mark = os.urandom(MARK_CHARS // 2).hex().encode()
    preamble = eof_preamble(mark)  # sent with the first bytes, as Redis' child writes it
    sent = 0
    async with trio.lowlevel.FdStream(rfd) as pipe:
        while True:
            chunk = await pipe.receive_some(CHUNK_BYTES)
            if not chunk:
                break
            if not await repl.queue_snapshot_chunk(r, preamble + chunk if not sent else chunk):
                return
            sent += len(chunk)
    code = 1
    while r.child:
        status = snapshot.child_status(r.child)
        if status is not None:
            code = status
            break
        await trio.sleep(CHILD_POLL_S)
    if c.killed or repl.replicas.get(c.id) is not r:
        return
    r.child = 0
    if code != 0:
        log.warning("Diskless snapshot for replica %s failed; closing it", c.addr)
        repl.server.kill_client(c)
        repl.forget(r)
        return
    c.out.append(mark)
    repl.replica_synced(r)
    log.info("Synchronization with replica %s succeeded (diskless, %d bytes)", c.addr, sent)
