"""FUNCTION through the proxy: every master holds the same libraries, as one server would.

    FUNCTION LOAD / DELETE / FLUSH / RESTORE ─▶ all or nothing:
        every master's FUNCTION DUMP saved ─▶ the command on every master at once
        ─▶ all succeed: the (common) reply
        ─▶ one refuses: every master that took it gets its saved dump back
           (FUNCTION RESTORE <dump> FLUSH), and the reply is the refusal
    FUNCTION LIST / DUMP ─▶ every master's libraries (FUNCTION LIST WITHCODE) compared, as
        sets (a server lists them in no fixed order) ─▶ equal: the command on one master;
        else an error naming the masters that differ (``slotgate cluster fix`` repairs it)
    FUNCTION STATS ─▶ every master's, combined as one server's: ``running_script`` of the
        master running a function (if one is), ``engines`` (libraries and functions counted)
        of the most masters (the agreed set, which ``slotgate cluster fix`` copies)

Each step runs, after the client's earlier requests, on the client's own connections to the
masters (the ones its transactions and blocking commands use), so a master's shared
connections stuck behind a long script do not hold it up. Another client's FUNCTION change
between the saved dump and a rollback is undone with it (docs/COMMANDS.md).

The pure part (``libraries``, ``groups``, ``disagreement``) is shared with ``slotgate cluster
fix``, which copies the most common set to the masters that differ.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import hiredis
import trio

from slotgate.protocol.commands import CommandInfo
from slotgate.protocol.resp import ReplyFramer, encode_command
from slotgate.proxy import errors
from slotgate.proxy.backend.connections import BackendError
from slotgate.proxy.front.pinned import _direct, after_writes
from slotgate.proxy.routing.redirect import error_frame

if TYPE_CHECKING:
    from slotgate.proxy.front.routes import RouteSession as Session

log = logging.getLogger("slotgate.functions")

CLUSTER_DOWN = error_frame("CLUSTERDOWN The cluster is down")
LIST_WITHCODE = encode_command(b"FUNCTION", b"LIST", b"WITHCODE")
DUMP = encode_command(b"FUNCTION", b"DUMP")
DIFFER = ("ERR slotgate: the masters' function libraries differ ({groups}); "
          "'slotgate cluster fix' gives every master the most common set")

Libraries = frozenset[tuple[bytes, bytes]]  # (library name, code)


# --- pure ------------------------------------------------------------------------------------
def _fields(entry: Any) -> dict[bytes, Any]:
    """A library entry of FUNCTION LIST as a dict (RESP3: a map already; RESP2: pairs)."""
    if isinstance(entry, dict):
        return entry
    return dict(zip(entry[::2], entry[1::2], strict=False))


def libraries(reply: Any) -> Libraries:
    """FUNCTION LIST WITHCODE's reply (parsed) as a set of (name, code): the code determines
    everything else a library has (engine, functions, flags)."""
    out = set()
    for entry in reply:
        f = _fields(entry)
        out.add((f[b"library_name"], f[b"library_code"]))
    return frozenset(out)


def groups(by_master: dict[str, Libraries]) -> list[list[str]]:
    """Masters grouped by equal libraries, the most common set first (ties: the order of
    the masters given)."""
    out: dict[Libraries, list[str]] = {}
    for master, libs in by_master.items():
        out.setdefault(libs, []).append(master)
    return sorted(out.values(), key=len, reverse=True)


def disagreement(by_master: dict[str, Libraries]) -> str | None:
    """The error text when the masters' libraries differ, else None."""
    found = groups(by_master)
    if len(found) < 2:
        return None
    return DIFFER.format(groups=" | ".join(" ".join(g) for g in found))


def _parse(raw: bytes) -> Any:
    reader = hiredis.Reader()
    reader.feed(raw)
    return reader.gets()


def _bulk(raw: bytes) -> bytes:
    """The payload of a bulk string frame."""
    return raw[raw.index(b"\r\n") + 2 : -2]


def _is_error(raw: bytes) -> bool:
    return raw[:1] in (b"-", b"!")


# --- I/O -------------------------------------------------------------------------------------
async def _on(s: Session, node: str, payload: bytes) -> bytes:
    """``payload``'s one reply from ``node`` on the client's own connection to it, or the
    proxy's unreachable error."""
    try:
        conn = await _direct(s, node)
        return (await conn.roundtrip(payload, 1))[0][1]
    except (BackendError, OSError, trio.BrokenResourceError) as exc:
        log.debug("FUNCTION on %s: %s", node, exc)
        return error_frame(errors.NODE_UNREACHABLE.format(node=node))


async def _on_all(s: Session, masters: Sequence[str], payloads: Sequence[bytes]) -> list[bytes]:
    """Each master's reply to its payload, all at once."""
    replies = [b""] * len(masters)

    async def one(i: int) -> None:
        replies[i] = await _on(s, masters[i], payloads[i])

    async with trio.open_nursery() as nursery:
        for i in range(len(masters)):
            nursery.start_soon(one, i)
    return replies


def _first_error(replies: Sequence[bytes]) -> bytes | None:
    return next((r for r in replies if _is_error(r)), None)


async def _change(s: Session, argv: list[bytes], masters: list[str]) -> bytes:
    dumps = await _on_all(s, masters, [DUMP] * len(masters))
    err = _first_error(dumps)
    if err is not None:
        return err  # nothing changed yet
    replies = await _on_all(s, masters, [encode_command(*argv)] * len(masters))
    err = _first_error(replies)
    if err is None:  # with the client's write policies on every master
        return await after_writes(s, [s.tx.direct.get(m) for m in masters], replies[0])
    took = [i for i, r in enumerate(replies) if not _is_error(r)]
    undo = await _on_all(s, [masters[i] for i in took],
                         [encode_command(b"FUNCTION", b"RESTORE", _bulk(dumps[i]), b"FLUSH")
                          for i in took])
    for i, r in zip(took, undo, strict=True):
        if _is_error(r):
            log.warning("FUNCTION rollback on %s failed: %r", masters[i], r)
    return err


async def _agreed(s: Session, argv: list[bytes], masters: list[str]) -> bytes:
    replies = await _on_all(s, masters, [LIST_WITHCODE] * len(masters))
    err = _first_error(replies)
    if err is not None:
        return err
    text = disagreement({m: libraries(_parse(r)) for m, r in zip(masters, replies, strict=True)})
    if text is not None:
        return error_frame(text)
    return await _on(s, _home(s, masters), encode_command(*argv))


def _running(raw: bytes) -> bool:
    """Whether a FUNCTION STATS reply shows a running function."""
    parsed = _parse(raw)
    return _fields(parsed).get(b"running_script") is not None


def _pairs(raw: bytes) -> tuple[bytes, dict[bytes, bytes]]:
    """A FUNCTION STATS reply (RESP2 array or RESP3 map of two fields) as its header and
    field name -> the value's raw frame."""
    head_end = raw.index(b"\r\n") + 2
    framer = ReplyFramer()
    framer.feed(raw[head_end:])
    frames = [frame for _, frame in framer.frames()]
    return raw[:head_end], {_bulk(k): v for k, v in zip(frames[::2], frames[1::2], strict=False)}


def combined_stats(replies: Sequence[bytes]) -> bytes:
    """Every master's FUNCTION STATS as one server's: ``running_script`` of the first master
    running a function (else the first master's null), ``engines`` as most masters count them
    (ties: the first master's)."""
    parsed = [_pairs(r) for r in replies]
    head, first = parsed[0]
    running = next((fields for r, (_, fields) in zip(replies, parsed, strict=True)
                    if _running(r)), first)
    engines = [fields.get(b"engines", b"") for _, fields in parsed]
    agreed = max(engines, key=engines.count)  # (max keeps the first of equal counts)
    values = {b"running_script": running.get(b"running_script", b""), b"engines": agreed}
    return head + b"".join(b"$%d\r\n%s\r\n" % (len(k), k) + values.get(k, v)
                           for k, v in first.items())


async def _stats(s: Session, argv: list[bytes], masters: list[str]) -> bytes:
    replies = await _on_all(s, masters, [encode_command(*argv)] * len(masters))
    err = _first_error(replies)
    if err is not None:
        return err
    return combined_stats(replies)


def _home(s: Session, masters: list[str]) -> str:
    """The master of the client's keyless commands, else the first."""
    owner = s.router.topology.owners[s.any_slot]
    return owner if owner is not None else masters[0]


Step = Callable[["Session", list[bytes], list[str]], Awaitable[bytes]]
STEPS: dict[str, Step] = {
    "function|load": _change,
    "function|delete": _change,
    "function|flush": _change,
    "function|restore": _change,
    "function|list": _agreed,
    "function|dump": _agreed,
    "function|stats": _stats,
}


async def _run(s: Session, argv: list[bytes], step: Step, reply_slot: Callable[[bytes], None]
               ) -> None:
    await s.wait_idle()
    masters = list(s.router.topology.slot_map.masters)
    reply_slot(await step(s, argv, masters) if masters else CLUSTER_DOWN)


def route(s: Session, argv: list[bytes], info: CommandInfo) -> Awaitable[None]:
    """The ``functions`` route: FUNCTION LOAD/DELETE/FLUSH/RESTORE/LIST/DUMP/STATS."""
    if info.name in ("function|load", "function|delete", "function|flush", "function|restore"):
        s.last_write_slot = s.any_slot  # WAIT waits on one master (proxy/front/wait.py)
    return _run(s, argv, STEPS[info.name], s.new_slot(info.name))
