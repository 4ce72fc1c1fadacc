"""``slotgate cluster import``: a standalone Redis (or bundled node) copied or moved into the
cluster, as ``redis-cli --cluster import`` does it.

    source ──SCAN 0 COUNT n──▶ keys ──grouped by the master owning each key's slot──▶
    source ──MIGRATE host port "" 0 timeout [COPY] [REPLACE] [AUTH…] KEYS k…──▶ that master

The source does the moving (MIGRATE: DUMP there, RESTORE on the master), so values, types and
TTLs arrive exactly as they were. Without ``--copy`` MIGRATE deletes each key from the source
once the master has it. A key the master already holds stops the import with MIGRATE's
``BUSYKEY`` error unless ``--replace`` (as redis-cli stops). Keys of db 0 only: a cluster has
no other database. Progress counts keys (the total is the source's DBSIZE when the import
starts); ``--rate`` caps keys per second.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

import hiredis

from slotgate.protocol.slots import key_slot
from slotgate.proxy.ops.admin import (
    Address,
    AdminError,
    Credentials,
    NodeClient,
    check_cluster,
    parse_info,
)
from slotgate.proxy.ops.reshard import ClusterView, Progress, node_address
from slotgate.proxy.ops.reshard_plan import parse_slot_tokens

Say = Callable[[str], None]
SCAN_COUNT = 1000


@dataclass(frozen=True)
class ImportOptions:
    copy: bool = False
    replace: bool = False
    pipeline: int = 100            # keys per MIGRATE
    timeout_ms: int = 60000        # MIGRATE's timeout
    rate_keys_per_s: float = 0.0   # 0: as fast as the nodes go
    every_keys: int = 1000         # a progress line every N keys when not on a terminal
    stream: TextIO | None = None   # progress; stderr when None


def _migrate_auth(auth: Credentials) -> list[str]:
    """MIGRATE's login words for the cluster's masters."""
    if auth is None:
        return []
    user, password = auth
    return ["AUTH2", user, password] if user is not None else ["AUTH", password]


def _owners(view: ClusterView) -> list[Address | None]:
    owner: list[Address | None] = [None] * 16384
    for m in view.masters():
        addr = node_address(m, view.entry[0])
        for s in parse_slot_tokens(m.slots):
            owner[s] = addr
    return owner


def import_keys(entry: Address, auth: Credentials, source: Address, source_auth: Credentials,
                opts: ImportOptions, say: Say) -> int:
    say(f">>> Importing data from {source[0]}:{source[1]} to cluster {entry[0]}:{entry[1]}")
    problems = check_cluster(entry, auth)
    if problems:
        for p in problems:
            say(f"[ERR] {p}")
        raise AdminError("fix the cluster's problems before importing into it "
                         "(slotgate cluster fix)")
    view = ClusterView(entry, auth).load()
    owner = _owners(view)
    view.close()
    with NodeClient(source, timeout_s=opts.timeout_ms / 1000 + 5, auth=source_auth) as src:
        if parse_info(src.text("INFO", "cluster")).get("cluster_enabled") == "1":
            raise AdminError(f"the source {source[0]}:{source[1]} is a cluster node; import "
                             "reads a standalone server")
        total = int(src.check("DBSIZE"))  # type: ignore[call-overload]
        say(f"*** Importing {total} keys from DB 0")
        progress = Progress("import", total, opts.stream, opts.every_keys, unit="keys")
        flags = (["COPY"] if opts.copy else []) + (["REPLACE"] if opts.replace else [])
        flags += _migrate_auth(auth)
        cursor = b"0"
        while True:
            reply = src.check("SCAN", cursor, "COUNT", SCAN_COUNT)
            assert isinstance(reply, list)
            cursor, keys = reply[0], reply[1]
            by_owner: dict[Address, list[bytes]] = {}
            for key in keys:
                addr = owner[key_slot(key)]
                if addr is None:
                    raise AdminError(f"no master serves the slot of {key!r}")
                by_owner.setdefault(addr, []).append(key)
            for (host, port), group in by_owner.items():
                for i in range(0, len(group), opts.pipeline):
                    batch = group[i:i + opts.pipeline]
                    _throttle(progress, len(batch), opts.rate_keys_per_s)
                    got = src.call("MIGRATE", host, port, "", 0, opts.timeout_ms, *flags,
                                   "KEYS", *batch)
                    if isinstance(got, hiredis.ReplyError):
                        progress.done()
                        raise AdminError(f"migrating {len(batch)} keys (from {batch[0]!r}) to "
                                         f"{host}:{port}: {got}")
                    progress.advance(len(batch), slots=0)
            if cursor == b"0":
                break
        progress.done()
    say(f"[OK] {progress.keys} keys {'copied' if opts.copy else 'moved'} into the cluster")
    return 0


def _throttle(progress: Progress, batch: int, rate_keys_per_s: float) -> None:
    """Sleep so the keys sent so far plus ``batch`` never run ahead of the rate."""
    if rate_keys_per_s <= 0:
        return
    due = progress.started + (progress.keys + batch) / rate_keys_per_s
    wait_s = due - progress.clock()
    if wait_s > 0:
        time.sleep(wait_s)
