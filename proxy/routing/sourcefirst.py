"""Moves across slots (RENAME, RENAMENX, LMOVE, RPOPLPUSH, SMOVE; BLMOVE and BRPOPLPUSH
through ``blockmove.py``): the source is written first, then the destination, so the moved
element is never in both keys — no other client can take it from each.

``gather.py`` has read the source under ``WATCH`` (with its marker) and the destination.
Then (docs/COMMANDS.md, "Moves across slots"):

2. source   on the watching connection: ``MULTI``, ``SET`` of the source's marker,
            ``RESTORE`` of the destination's copy beside the source, the client's command
            over the real source and that copy, ``DEL`` of the copy, ``EXEC``. The command's
            reply (the element, ``WRONGTYPE`` of either key, a null, ``:0``) tells whether it
            moved anything; if not, nothing else is done: it is the client's reply.
3. destination  on the destination's master: ``MULTI``, ``RESTORE`` of the source as step 1
            read it under a temporary, the command over that copy and the real destination,
            ``DEL`` of the copy, ``SET`` of a marker of its own, ``EXEC``. The same reply as
            step 2's: the destination has the element, the move is done. Another reply (the
            destination changed type meanwhile, a ``RENAMENX`` target created meanwhile):
            the destination was not changed; the element is put back into the source
            (``crossslot.put_back``) and the client gets that reply.

Between steps 2 and 3 the element is in neither key: a reader may miss it for that moment,
never see it twice. Every lost reply is settled by its step's marker (``moveundo.fate``):
step 2 not run, nothing changed, the move starts again; step 3 not run, it is sent again
(its marker deleted after each try found not run) until it runs or the retry deadline
passes; step 3 never run before the deadline, the element is put back. Each step, once its
reply is in, waits for a replica of its master (``WAIT 1 500``) before the next, so a
failover right after it keeps it.

Step 2 also writes the move's journal entry (``journal.py``), deleted once the move is
settled: a proxy that dies between the steps leaves it to a sweep, which finishes the move.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

import trio

from slotgate.protocol.slots import key_slot
from slotgate.proxy import errors
from slotgate.proxy.backend.connections import BackendError, DirectConnection
from slotgate.proxy.front.pinned import _direct, _on_owner, after_writes, on_owner_at
from slotgate.proxy.routing import crossslot, journal, moveundo
from slotgate.proxy.routing.crossslot import Plan, Value
from slotgate.proxy.routing.redirect import error_frame
from slotgate.proxy.routing.splitter import array_elements

if TYPE_CHECKING:
    from slotgate.proxy.front.routes import RouteSession

_UNKNOWN_FATE = error_frame(errors.UNKNOWN_FATE_WRITE).split(b"{node}")[0]
_NULL3 = b"_\r\n"


async def run(s: RouteSession, p: Plan, values: dict[bytes, Value],
              conn: DirectConnection, mark: bytes, dst_before: dict[bytes, Value],
              on_exec: list[DirectConnection]) -> bytes | None:
    """Steps 2 and 3 of the move ``p`` whose source step 1 read (``values``) under
    ``WATCH`` on ``conn`` (with ``mark``); ``dst_before``: its destination read then. The
    client's reply, or None: nothing was changed, the move starts again from step 1.
    ``conn`` is added to ``on_exec`` once an EXEC ended its WATCH."""
    src = p.written[0]
    src_slot = key_slot(src)
    name = p.argv[0].decode(errors="replace").lower()
    m = crossslot.mirror(p)
    entry = journal.new_entry(src_slot, p.anchor_slot)
    opened = journal.open_commands(entry, crossslot.client_argv(p), values[src],
                                   dst_before[p.anchor_key], mark, journal.lease_ms(s.settings))
    layout = crossslot.source_payload(p, dst_before, mark, tuple(opened))
    try:
        raw = (await moveundo.roundtrip(s, conn, layout.payload, layout.n_replies))[-1][1]
    except BackendError:
        ran = await moveundo.fate(s, src_slot, mark)
        if ran is None:
            s.metrics.unknown_fate_write()
            return error_frame(errors.UNKNOWN_FATE_WRITE.format(node=conn.address))
        if not ran:
            return None  # never ran, never will: nothing changed
        reply = await _again(s, m, src_slot, {**values, **dst_before})
        if reply is None:
            s.metrics.unknown_fate_write()
            return error_frame(errors.UNKNOWN_FATE_WRITE.format(node=conn.address))
        if not crossslot.moved(reply):
            await journal.close(s, entry, None)
            return reply  # it ran and changed nothing but its marker
    else:
        on_exec.append(conn)
        if crossslot.is_null(raw):
            return None  # the source changed since step 1: start again
        if raw[:1] != b"*":
            return moveundo.refused(raw)  # EXECABORT, a redirect: nothing changed
        reply = array_elements(raw)[layout.command_at]
        if not crossslot.moved(reply):
            await journal.close(s, entry, conn, mark)
            return _NULL3 if s.proto == 3 and crossslot.is_null(reply) else reply
        journal.fault_point(journal.KILL_AFTER_SOURCE)
        if not await moveundo.after_write(s, src_slot, mark, True, conn):
            # Its master went silent after step 2: did step 2 survive the failover?
            ran = await moveundo.fate(s, src_slot, mark)
            if ran is None:
                s.metrics.unknown_fate_write()
                return error_frame(errors.UNKNOWN_FATE_WRITE.format(node=conn.address))
            if not ran:
                return None
    return await _destination(s, p, values, reply, name, conn, entry)


async def _again(s: RouteSession, m: Plan, slot: int,
                 values: dict[bytes, Value]) -> bytes | None:
    """Step 2's reply, lost with its connection although step 2 ran: the command again on
    copies of what it started from (made and deleted in one transaction: it changes
    nothing). None: no answer before the retry deadline."""
    scratch = crossslot.scratch(m)
    scratch.written.clear()
    layout = crossslot.run_payload(scratch, values)
    raw = await _on_owner(s, slot, layout.payload, layout.n_replies, True,
                          partial(_direct, s))
    if raw[:1] != b"*" or crossslot.is_null(raw):
        return None
    return array_elements(raw)[layout.command_at]


async def _destination(s: RouteSession, p: Plan, values: dict[bytes, Value], reply: bytes,
                       name: str, src_conn: DirectConnection, entry: journal.Entry) -> bytes:
    """Step 3, sent until it runs (the element is in neither key meanwhile). Every try sets
    the journal entry's marker (deleted after a try that did not run, so that the next
    try's fate can be told too); the entry goes once the move is settled, then the marker."""
    deadline = trio.current_time() + s.settings.retry_deadline_ms / 1000
    node = moveundo.owner(s, p.anchor_slot) or "?"
    mark = entry.mark
    src_key = p.written[0]
    argv = crossslot.client_argv(p)
    first = True
    while True:
        if not first:
            await journal.renew(s, entry)
        first = False
        layout = crossslot.destination_payload(p, values, mark, journal.kept(p, entry))
        raw, ran_at = await on_owner_at(s, p.anchor_slot, layout.payload, layout.n_replies,
                                        False, partial(_direct, s))
        node = ran_at or node
        got: bytes | None = None
        if raw.startswith(_UNKNOWN_FATE):
            ran = await moveundo.fate(s, p.anchor_slot, mark, keep_done=True)
            if ran is None:
                s.metrics.unknown_fate_write()
                return raw
            if ran:  # did it move the element? what it kept of its copy of the source says
                moved = await journal.step3_ran_moved(s, p.anchor_slot, argv, values[src_key],
                                                      entry)
                if moved is None:
                    s.metrics.unknown_fate_write()
                    return raw  # the entry stays: a sweep settles it
                # refused (the destination changed meanwhile): put back, answered as Redis
                # would have answered then, as far as the proxy can tell: not done
                got = reply if moved else error_frame(
                    errors.MOVE_NOT_DONE.format(name=name, node=node))
            else:
                got = None
        elif raw[:1] == b"*" and not crossslot.is_null(raw):
            elems = array_elements(raw)
            # A RESTORE refused (a payload this node cannot read): the command saw no source.
            got = crossslot.first_error(elems[: layout.before_at]) or elems[layout.command_at]
            if got == reply and not await moveundo.after_write(s, p.anchor_slot, mark, True,
                                                                drop=False):
                # did it survive?
                ran = await moveundo.fate(s, p.anchor_slot, mark, keep_done=True)
                if ran is None:
                    s.metrics.unknown_fate_write()
                    return error_frame(errors.UNKNOWN_FATE_WRITE.format(node=node))
                got = got if ran else None
        if got == reply:
            await journal.close(s, entry, src_conn)
            await journal.drop_marks(s, p.anchor_slot, entry)
            # durable_writes, read-your-writes: both writes
            src = None if src_conn.closed else src_conn
            return await after_writes(s, [src, s.tx.direct.get(ran_at)], got)
        if got is not None:
            # It ran and changed nothing (the destination changed meanwhile): the element
            # goes back; the client gets this reply, as if the move ran now.
            answer = await _put_back(s, p, values, reply, got, entry)
            await journal.drop_marks(s, p.anchor_slot, entry)
            return answer
        if trio.current_time() >= deadline:
            return await _put_back(s, p, values, reply, error_frame(
                errors.MOVE_NOT_DONE.format(name=name, node=node)), entry)
        await trio.sleep(0.1)


async def _put_back(s: RouteSession, p: Plan, values: dict[bytes, Value], reply: bytes,
                    answer: bytes, entry: journal.Entry) -> bytes:
    """The element back into the source (with a marker: a lost reply is settled, never
    guessed; the journal entry deleted in the same transaction), until the retry deadline;
    then ``answer`` is the client's."""
    src = p.written[0]
    argv = crossslot.mirror(p).argv
    op = crossslot.put_back(argv, reply, values[src])
    await journal.renew(s, entry)
    ran = await moveundo.write_marked(s, key_slot(src), op, *journal.close_commands(entry.name))
    if ran is None:
        s.metrics.unknown_fate_write()
        return error_frame(errors.UNKNOWN_FATE_WRITE.format(
            node=moveundo.owner(s, key_slot(src)) or "?"))
    if not ran:
        return error_frame(errors.MOVE_STRANDED.format(
            src=src.decode(errors="replace"), dst=p.anchor_key.decode(errors="replace")))
    return answer
