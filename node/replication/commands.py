"""Replication commands: REPLICAOF/SLAVEOF, REPLCONF, PSYNC/SYNC, WAIT, ROLE.

Imported by node/replication/master.py (so the handlers register before the command table is
built); the state they act on is ``replication.get(server)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slotgate.node.commands.registry import command
from slotgate.node.commands.replies import OK
from slotgate.node.core.errors import CommandError
from slotgate.node.replication import failover
from slotgate.node.replication.master import (
    ERR_CLUSTER,
    ERR_NOT_INT,
    ERR_WAIT_REPLICA,
    GETACK_CMD,
    get,
)
from slotgate.protocol.resp import integer, simple

if TYPE_CHECKING:
    from slotgate.node.core.client import Client

ERR_INVALID_PORT = "ERR Invalid master port"
ERR_TIMEOUT_NOT_INT = "ERR timeout is not an integer or out of range"


def _parse_long(arg: bytes) -> int:
    try:
        n = int(arg)
    except ValueError:
        raise CommandError(ERR_NOT_INT) from None
    if str(n).encode() != arg.lstrip(b"+") and arg != b"-0":
        raise CommandError(ERR_NOT_INT)
    return n


@command("replicaof")
def replicaof_cmd(c: Client, argv: list[bytes]) -> bytes:
    return _replicaof(c, argv)


@command("slaveof")
def slaveof_cmd(c: Client, argv: list[bytes]) -> bytes:
    return _replicaof(c, argv)


def _replicaof(c: Client, argv: list[bytes]) -> bytes:
    repl = get(c.server)
    if c.server.cluster_enabled:
        raise CommandError(ERR_CLUSTER)
    if failover.get(repl).state != failover.NO_FAILOVER:
        raise CommandError(failover.ERR_REPLICAOF)
    if argv[1].lower() == b"no" and argv[2].lower() == b"one":
        if repl.role == "slave":
            repl.stop_replication()
        return OK
    if c.is_replica:
        raise CommandError("ERR Command is not valid when client is a replica.")
    try:
        port = _parse_long(argv[2])
    except CommandError:
        raise CommandError(ERR_INVALID_PORT) from None
    if not 0 <= port <= 65535:
        raise CommandError(ERR_INVALID_PORT)
    host = argv[1].decode("utf-8", "replace")
    if repl.role == "slave" and repl.master_host == host and repl.master_port == port:
        return simple("OK Already connected to specified master")
    repl.start_replication(host, port)
    return OK


@command("replconf")
def replconf_cmd(c: Client, argv: list[bytes]) -> bytes:
    repl = get(c.server)
    if len(argv) % 2 == 0:
        raise CommandError("ERR syntax error")
    for i in range(1, len(argv), 2):
        opt, val = argv[i].lower(), argv[i + 1]
        if opt == b"listening-port":
            c.repl_listening_port = _parse_long(val)
            r = repl.replicas.get(c.id)
            if r is not None:
                r.port = c.repl_listening_port
        elif opt == b"ip-address":
            c.repl_ip = val.decode("utf-8", "replace")
        elif opt == b"capa":
            if val.lower() == b"eof":  # can read a diskless snapshot (diskless.py)
                c.repl_capa_eof = True
        elif opt in (b"rdb-only", b"rdb-filter-only"):
            pass
        elif opt == b"ack":
            try:
                off = int(val)
            except ValueError:
                return b""
            repl.ack(c, off)
            return b""  # never answered
        elif opt == b"getack":
            link = repl.link
            if link is not None and link.is_master_client(c):
                link.request_ack()
            return b""
        else:
            raise CommandError(f"ERR Unrecognized REPLCONF option: {argv[i].decode('utf-8', 'replace')}")
    return OK


@command("psync")
def psync_cmd(c: Client, argv: list[bytes]) -> bytes:
    repl = get(c.server)
    if c.is_replica:
        return b""
    failover.get(repl).accept_psync(argv)
    try:
        offset = int(argv[2])
    except ValueError:
        raise CommandError(ERR_NOT_INT) from None
    return repl.psync(c, argv[1].decode("utf-8", "replace"), offset)


@command("sync")
def sync_cmd(c: Client, argv: list[bytes]) -> bytes:
    repl = get(c.server)
    if c.is_replica:
        return b""
    failover.get(repl).accept_psync(argv)
    return repl.psync(c, "?", -1, send_fullresync=False)


@command("wait")
def wait_cmd(c: Client, argv: list[bytes]) -> bytes:
    repl = get(c.server)
    if repl.role == "slave":
        raise CommandError(ERR_WAIT_REPLICA)
    want = _parse_long(argv[1])
    try:
        timeout_ms = _parse_long(argv[2])
    except CommandError:
        raise CommandError(ERR_TIMEOUT_NOT_INT) from None
    if timeout_ms < 0:
        raise CommandError("ERR timeout is negative")
    # The offset at the end of this client's previous command, as Redis: a first command
    # (or a client whose offset every replica has acknowledged) is answered at once.
    target = c.woff
    n = repl.acked(target)
    if n >= want or c.in_exec:
        return integer(n)
    reply = c.block([], timeout_ms / 1000.0, _never_serve, argv, timeout_reply=integer(n))
    repl.waiting.append((c, want, target))
    repl.feed_raw(GETACK_CMD)
    return reply


def _never_serve(c: Client, db: object, key: bytes) -> bytes | None:
    return None


@command("role")
def role_cmd(c: Client, argv: list[bytes]) -> bytes:
    return get(c.server).role_reply()
