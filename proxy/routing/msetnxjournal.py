"""MSETNX across slots that a proxy crash leaves all or nothing: its journal entry.

``gather.py`` runs ``MSETNX`` on the first key's master over copies of the other slots'
keys (step 2), then writes those keys slot by slot (step 3, one ``MULTI … EXEC`` per
connection under step 1's ``WATCH``, each with a marker). A proxy that died in between
would leave the first slot's keys set and the others not. So step 2's ``MSETNX`` itself also
sets a journal entry, a key of the first key's slot named as a move's
(``journal.new_entry``): it exists exactly when ``MSETNX`` set its keys. Its value: the
client's command (key names as stored) and, for each step 3 write, its marker and its keys.
Its lease (the same ``slotgate-jlease:`` key, set by the same ``MSETNX``, given its expiry
in the same transaction) keeps other proxies away while its owner lives; a script in the
same transaction adds it to its slot's index (``journal.index_of``) if ``MSETNX`` set it.
The owner deletes the entry (and its index member) once every write of step 3 ran, or
before it takes step 2 back.

A sweep (``journal.sweep_forever``) that finds one left by a dead proxy (its lease ended,
taken by the sweeper) asks each step 3 write's marker whether it ran (``SET marker 0 NX
GET``: a write not run never will). All ran: the entry is deleted. Else it *rolls forward*:
each write not run is done now, under ``WATCH`` of its keys, if none of them exists; all
done, the entry is deleted. One of them exists (another client created it after the check
of step 2): ``MSETNX`` cannot end with all its keys set, so it *rolls back*: every key it
wrote that still holds the value it wrote is deleted (the first slot's in the transaction
that deletes the entry). A key changed since by another client keeps that client's value.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from slotgate.protocol.resp import encode_command
from slotgate.protocol.slots import key_slot
from slotgate.proxy.routing import crossslot
from slotgate.proxy.routing.splitter import array_elements

if TYPE_CHECKING:
    from slotgate.proxy.routing.journal import Entry, Links
    from slotgate.proxy.routing.topology import Topology

log = logging.getLogger(__name__)

_DONE = b"$1\r\n" + crossslot.MARK_DONE + b"\r\n"
_MULTI = encode_command(b"MULTI")
# The entry joins its slot's index only if step 2's MSETNX set it (in the same transaction).
_INDEX_SCRIPT = (b"if redis.call('EXISTS', KEYS[1]) == 1 then "
                 b"return redis.call('SADD', KEYS[2], KEYS[1]) end return 0")
_EXEC = encode_command(b"EXEC")


class Unsettled(Exception):
    """Not settled now (no master, a refusal, a key written meanwhile): the next sweep."""


def encode(argv: list[bytes], groups: list[tuple[bytes, list[bytes]]]) -> bytes:
    """The entry's value: the command, then each step 3 write's marker and keys."""
    items = [b"%d" % len(argv), *argv, b"%d" % len(groups)]
    for mark, keys in groups:
        items += [mark, b"%d" % len(keys), *keys]
    return encode_command(*items)


def decode(raw: bytes) -> tuple[list[bytes], list[tuple[bytes, list[bytes]]]]:
    items = [f[f.index(b"\r\n") + 2:-2] for f in array_elements(raw)]
    n = int(items[0])
    argv, at = items[1:1 + n], 1 + n
    groups: list[tuple[bytes, list[bytes]]] = []
    for _ in range(int(items[at])):
        mark, count = items[at + 1], int(items[at + 2])
        groups.append((mark, items[at + 3:at + 3 + count]))
        at += 2 + count
    return argv, groups


def step2_args(e: Entry, argv: list[bytes], groups: list[tuple[bytes, list[bytes]]],
               token: bytes) -> list[bytes]:
    """What step 2's ``MSETNX`` gets besides the client's pairs: the entry and its lease."""
    return [e.name, encode(argv, groups), e.lease, token]


def index_command(e: Entry, index: bytes) -> bytes:
    """The command, after step 2's ``MSETNX`` in its transaction, that adds the entry to
    its slot's ``index`` if ``MSETNX`` set it."""
    return encode_command(b"EVAL", _INDEX_SCRIPT, b"2", e.name, index)


def _bulk(raw: bytes) -> bytes | None:
    return None if raw[:1] != b"$" or raw.startswith(b"$-1") else raw[raw.index(b"\r\n") + 2:-2]


async def settle(links: Links, topology: Topology, node: str, e: Entry,
                 close: tuple[bytes, ...]) -> None:
    """Settle the entry ``e`` (its lease taken) found on ``node``; ``close``: the commands
    that delete it (``journal.close_commands``). Raises ``Unsettled``."""
    raw = (await links.call(node, encode_command(b"GET", e.name), 1))[0]
    if raw[:1] != b"$" or raw.startswith(b"$-1"):
        raise Unsettled(raw[:80])
    bulk = _bulk(raw)
    assert bulk is not None
    argv, groups = decode(bulk)
    pairs = dict(zip(argv[1::2], argv[2::2], strict=True))  # the last value of a key wins
    owners: dict[bytes, str] = {}
    for mark, keys in groups:
        owner = topology.owners[key_slot(keys[0])]
        if owner is None:
            raise Unsettled(mark)
        owners[mark] = owner
    not_run = [(mark, keys) for mark, keys in groups
               if (await links.call(owners[mark], crossslot.fate_payload(mark), 1))[0] != _DONE]
    for mark, keys in not_run:
        if not await _forward(links, owners[mark], mark, keys, pairs):
            await _back(links, topology, node, e, pairs, groups, close)
            log.warning("journal: msetnx rolled back (a key was created meanwhile): %r", e.name)
            return
    await links.call(node, _MULTI + b"".join(close) + _EXEC, 2 + len(close))
    for mark, _ in groups:
        await links.call(owners[mark], encode_command(b"DEL", mark), 1)


async def _forward(links: Links, owner: str, mark: bytes, keys: list[bytes],
                   pairs: dict[bytes, bytes]) -> bool:
    """One step 3 write done now, if none of its keys exists (False: one does)."""
    got = await links.call(owner, encode_command(b"WATCH", *keys) + b"".join(
        encode_command(b"EXISTS", k) for k in keys), 1 + len(keys))
    if any(f != b":0\r\n" for f in got[1:]):
        await links.call(owner, encode_command(b"UNWATCH"), 1)
        if any(f[:1] != b":" for f in got[1:]):
            raise Unsettled(got)
        return False
    payload = (_MULTI + b"".join(encode_command(b"SET", k, pairs[k]) for k in keys)
               + crossslot.set_marker(mark) + _EXEC)
    raw = (await links.call(owner, payload, len(keys) + 3))[-1]
    if raw[:1] != b"*" or crossslot.is_null(raw):
        raise Unsettled(raw[:80])  # written meanwhile: looked at again by the next sweep
    return True


async def _back(links: Links, topology: Topology, node: str, e: Entry,
                pairs: dict[bytes, bytes], groups: list[tuple[bytes, list[bytes]]],
                close: tuple[bytes, ...]) -> None:
    """Every key written that still holds its value deleted; the first slot's last, with
    the entry."""
    for mark, keys in groups:
        owner = topology.owners[key_slot(keys[0])]
        if owner is None:
            raise Unsettled(mark)
        await _delete_ours(links, owner, keys, pairs, (encode_command(b"DEL", mark),))
    anchor = [k for k in pairs if key_slot(k) == key_slot(e.name)]
    await _delete_ours(links, node, anchor, pairs, close)


async def _delete_ours(links: Links, owner: str, keys: list[bytes], pairs: dict[bytes, bytes],
                       also: tuple[bytes, ...]) -> None:
    got = await links.call(owner, encode_command(b"WATCH", *keys) + b"".join(
        encode_command(b"GET", k) for k in keys), 1 + len(keys)) if keys else [b""]
    ours = [k for k, f in zip(keys, got[1:], strict=True) if _bulk(f) == pairs[k]]
    payload = _MULTI + (encode_command(b"DEL", *ours) if ours else b"") + b"".join(also) + _EXEC
    raw = (await links.call(owner, payload, 2 + len(also) + bool(ours)))[-1]
    if raw[:1] != b"*" or crossslot.is_null(raw):
        raise Unsettled(raw[:80])
