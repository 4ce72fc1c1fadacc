"""Locks on key names that hold across proxy processes (``workers: N``), for the writes of
``gather.py`` across slots (moves, MSETNX).

Within one process, ``gather.KEY_LOCKS`` runs two moves sharing a key one after the other.
A supervisor's workers are separate processes, so there each key's lock is also a key on the
cluster itself, in the key's own slot (on the master that holds the key)::

    {<tag of the key's slot>}slotgate-lock:<key>     value: a token of the holder

taken with ``SET <lock> <token> NX PX LOCK_TTL_MS`` in sorted key order (no deadlock), tried
again every few milliseconds while another process holds it (at most ``LOCK_WAIT_S``: then
the move answers ``MOVE_CONTENDED``), and dropped at the end by a script that deletes it only
if it still holds the token. A holder that dies leaves its lock to expire after
``LOCK_TTL_MS``; a lock lost in a failover (written to a master that failed before its
replica had it) only weakens the exclusion back to what WATCH and compensation guarantee
alone, as in one process without the lock. A lock key exists only while its move runs: a
``KEYS`` or ``SCAN`` at that instant may list it, as it may list the key being moved.

One process (no supervisor) takes none of these: ``SHARED`` is set by a worker at start.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING

import trio

from slotgate.protocol.resp import encode_command
from slotgate.protocol.slots import key_slot
from slotgate.proxy.front.pinned import _direct, _on_owner
from slotgate.proxy.routing.crossslot import tag_for_slot

if TYPE_CHECKING:
    from slotgate.proxy.front.routes import RouteSession

LOCK_TTL_MS = 30_000
LOCK_WAIT_S = 10.0
_RETRY_S = (0.001, 0.05)  # first and longest pause between two tries
_UNLOCK = (b"if redis.call('get', KEYS[1]) == ARGV[1] then "
           b"return redis.call('del', KEYS[1]) end return 0")


class _Flags:
    shared = False


FLAGS = _Flags()


class Contended(Exception):
    """A lock stayed held by another process for ``LOCK_WAIT_S``."""


def share_across_processes() -> None:
    """This process is one of several workers: moves take their keys' locks on the cluster."""
    FLAGS.shared = True


def lock_key(key: bytes) -> bytes:
    return b"{%s}slotgate-lock:%s" % (tag_for_slot(key_slot(key)), key)


@asynccontextmanager
async def held(s: RouteSession, keys: list[bytes]) -> AsyncIterator[None]:
    """Every key's cluster lock, while the block runs (nothing unless ``FLAGS.shared``)."""
    if not FLAGS.shared or not keys:
        yield
        return
    token = os.urandom(8).hex().encode()
    taken: list[bytes] = []
    try:
        for key in sorted(set(keys)):
            await _take(s, lock_key(key), token)
            taken.append(lock_key(key))
        yield
    finally:
        with trio.CancelScope(shield=True):
            for lock in reversed(taken):
                await _call(s, lock, encode_command(b"EVAL", _UNLOCK, b"1", lock, token))


async def _call(s: RouteSession, lock: bytes, payload: bytes) -> bytes:
    return await _on_owner(s, key_slot(lock), payload, 1, False, partial(_direct, s))


async def _take(s: RouteSession, lock: bytes, token: bytes) -> None:
    payload = encode_command(b"SET", lock, token, b"NX", b"PX", b"%d" % LOCK_TTL_MS)
    pause_s = _RETRY_S[0]
    with trio.move_on_after(LOCK_WAIT_S):
        while True:
            raw = await _call(s, lock, payload)
            if raw == b"+OK\r\n":
                return
            if raw[:1] in (b"-", b"!"):
                raise Contended(raw)
            await trio.sleep(pause_s)
            pause_s = min(pause_s * 2, _RETRY_S[1])
    raise Contended(lock)
