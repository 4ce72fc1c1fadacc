"""Transactions: MULTI EXEC DISCARD WATCH UNWATCH.

Queue-time rejections (unknown command, arity, NOAUTH, ...) flag the transaction in the
dispatcher, so EXEC answers EXECABORT. A watched key touched by a write, an expiry or a FLUSH
sets ``c.dirty_cas`` (see ``Database.touch_watched``); EXEC then answers a null array.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slotgate.node.commands.registry import command
from slotgate.node.commands.replies import OK
from slotgate.node.core import dispatch
from slotgate.node.core.client import PUSHING_COMMANDS, REPLY_MUTED
from slotgate.node.core.errors import (
    DISCARD_WITHOUT_MULTI,
    EXEC_WITHOUT_MULTI,
    EXECABORT,
    NESTED_MULTI,
    WATCH_IN_MULTI,
    CommandError,
)
from slotgate.node.core.keyspace import now_ms
from slotgate.protocol.resp import array_header

if TYPE_CHECKING:
    from slotgate.node.core.client import Client


@command("multi")
def multi(c: Client, argv: list[bytes]) -> bytes:
    if c.multi is not None:
        raise CommandError(NESTED_MULTI)
    c.set_multi([])
    c.multi_error = False
    return OK


@command("discard")
def discard(c: Client, argv: list[bytes]) -> bytes:
    if c.multi is None:
        raise CommandError(DISCARD_WITHOUT_MULTI)
    c.discard_multi()
    return OK


def _watched_key_expired(c: Client) -> bool:
    now = now_ms()
    for db, key in c.watched:
        clients = db.watched.get(key)
        if clients is None or clients.get(c, False):
            continue  # already expired when watched: not a change
        when = db.expires.get(key) if db.expires else None
        if when is not None and when <= now and key in db.data:
            return True
    return False


@command("exec")
def exec_(c: Client, argv: list[bytes]) -> bytes:
    queued = c.multi
    if queued is None:
        raise CommandError(EXEC_WITHOUT_MULTI)
    if _watched_key_expired(c):
        c.dirty_cas = True
    # CLIENT REPLY's mode applies to each part of the reply as it is made: a queued CLIENT
    # REPLY OFF or ON changes it for the replies after its own, the array header included
    c.reply_mode_applied = True
    if c.multi_error or c.dirty_cas:
        reply = b"-" + EXECABORT.encode() + b"\r\n" if c.multi_error else c.null_array
        c.discard_multi()
        return b"" if c.reply_mode in REPLY_MUTED else reply
    c.unwatch_all()
    c.set_multi(None)
    parts = [] if c.reply_mode in REPLY_MUTED else [array_header(len(queued))]
    c.in_exec = True
    c.exec_multi_propagated = False  # call() sends MULTI before the first write it propagates
    user = c.acl_user
    try:
        for cmd, q_argv in queued:
            if user is not None and not user.unrestricted:  # the rules may have changed
                denied = c.server.acl.check(c, cmd, q_argv, in_exec=True)
                if denied is not None:
                    error = b"-" + denied.encode() + b"\r\n"
                    c.server.count_error(error)
                    if c.reply_mode not in REPLY_MUTED:
                        parts.append(error)
                    continue
            reply = dispatch.call(c, cmd, q_argv)
            if c.reply_mode not in REPLY_MUTED or (
                    q_argv[0].lower() in PUSHING_COMMANDS and reply[:1] in (b"*", b">")):
                parts.append(reply)
    finally:
        c.in_exec = False
        if c.exec_multi_propagated:
            c.exec_multi_propagated = False
            c.ks.propagate(c.db.index, [b"EXEC"])
    c.multi_error = False
    return b"".join(parts)


@command("watch")
def watch(c: Client, argv: list[bytes]) -> bytes:
    if c.multi is not None:
        raise CommandError(WATCH_IN_MULTI)
    db = c.db
    now = now_ms()
    for key in argv[1:]:
        if (db, key) in c.watched:
            continue
        when = db.expires.get(key) if db.expires else None
        expired = when is not None and when <= now and key in db.data
        db.watched.setdefault(key, {})[c] = expired
        c.watched.append((db, key))
    return OK


@command("unwatch")
def unwatch(c: Client, argv: list[bytes]) -> bytes:
    c.unwatch_all()
    return OK
