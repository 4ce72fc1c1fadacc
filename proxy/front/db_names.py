"""Numbered databases (``databases: N``): the names the nodes know keys and notification
channels by. Pure: ``databases.py`` and ``pubsub.py`` use it.

A key of database ``d > 0`` is stored as ``{T}slotgate-db<d>:<key>``, ``T`` a short hash tag of
the key's own slot (``crossslot.tag_for_slot``: hex digits, so the stored name's tag is ``T``
whatever braces the key holds). Database 0's keys are stored as they are.

The nodes notify every key event in their database 0 (``__keyspace@0__:<stored name>``,
``__keyevent@0__:<event>`` with the stored name as the message). A client's subscription to
database ``d``'s channels is held on the nodes as the channel that carries them
(``node_name``), and each notification is given back the client's form (``client_message``):
the database number from the prefix, the prefix taken off.
"""

from __future__ import annotations

import re

from slotgate.protocol.slots import key_slot
from slotgate.proxy.routing.crossslot import tag_for_slot

MARK = b"slotgate-db"
ANY_DB = re.compile(rb"\A\{[0-9a-f]+\}slotgate-db(\d+):")
_NOTIFICATION = re.compile(rb"\A__key(space|event)@(\d+)__:")
_KEYSPACE = b"__keyspace@"
_KEYSPACE_0 = b"__keyspace@0__:"
_GLOB_SPECIAL = frozenset(b"*?[\\")
# The node pattern of every keyspace notification of a key of a database above 0.
EVERY_DB_KEYSPACE = b"__keyspace@0__:{*}" + MARK + b"*"


def prefixed(key: bytes, db: int) -> bytes:
    """The stored name of ``key`` of database ``db``."""
    if db == 0:
        return key
    return b"{%s}%s%d:%s" % (tag_for_slot(key_slot(key)), MARK, db, key)


def split_name(stored: bytes) -> tuple[int, bytes]:
    """(database, the client's key name) of a stored name."""
    m = ANY_DB.match(stored)
    if m is None:
        return 0, stored
    return int(m[1]), stored[m.end():]


def node_name(name: bytes, pattern: bool) -> bytes:
    """The channel (or pattern) a node is subscribed to for a client's ``name``: a keyspace
    channel of database ``d > 0`` names the stored key on database 0 (a pattern: any slot's
    tag); a keyevent channel of any database is database 0's (``client_message`` sorts the
    messages out). Every other name is the node's as it is."""
    m = _NOTIFICATION.match(name)
    if m is None or m[2] == b"0":
        return name
    db, rest = int(m[2]), name[m.end():]
    if m[1] == b"event":
        return b"__keyevent@0__:" + rest
    if pattern:
        return b"__keyspace@0__:{*}%s%d:%s" % (MARK, db, rest)
    return b"__keyspace@0__:" + prefixed(rest, db)


def node_names(name: bytes, pattern: bool) -> tuple[bytes, ...]:
    """What nodes hold for a client's channel or pattern: ``node_name``'s, and for a pattern
    that may match a keyspace channel of any database (its database part a wildcard:
    ``__keyspace@*__:k``, ``__key*``, ``*``) ``EVERY_DB_KEYSPACE`` too, which carries the
    keyspace notifications of every database above 0 (``wanted_via`` sorts them out)."""
    if pattern and _wild_keyspace(name):
        return (name, EVERY_DB_KEYSPACE)
    return (node_name(name, pattern),)


def _wild_keyspace(pattern: bytes) -> bool:
    if _NOTIFICATION.match(pattern) is not None:
        return False  # its database is a number
    end = next((i for i, c in enumerate(pattern) if c in _GLOB_SPECIAL), len(pattern))
    literal = pattern[:end]
    return _KEYSPACE.startswith(literal) or literal.startswith(_KEYSPACE)


def wanted_via(pattern: bytes, node_pattern: bytes, node_channel: bytes) -> bool:
    """Whether a client's ``pattern`` takes a node's notification on ``node_channel`` sent
    for the node's ``node_pattern``: each notification through exactly one of the patterns
    ``node_names`` holds for it (a keyspace channel of a database above 0 through
    ``EVERY_DB_KEYSPACE`` when the pattern has it, every other through the pattern's own)."""
    names = node_names(pattern, True)
    if len(names) == 1:
        return node_pattern == names[0]
    other_db = (node_channel.startswith(_KEYSPACE_0)
                and ANY_DB.match(node_channel[len(_KEYSPACE_0):]) is not None)
    return node_pattern == (EVERY_DB_KEYSPACE if other_db else pattern)


def client_message(channel: bytes, message: bytes) -> tuple[bytes, bytes]:
    """A node's keyspace notification (``channel``, ``message``) as a client of one server
    with numbered databases sees it."""
    m = _NOTIFICATION.match(channel)
    if m is None or m[2] != b"0":
        return channel, message
    if m[1] == b"space":
        db, key = split_name(channel[m.end():])
        return (b"__keyspace@%d__:%s" % (db, key), message) if db else (channel, message)
    db, key = split_name(message)
    return (b"__keyevent@%d__:%s" % (db, channel[m.end():]), key) if db else (channel, message)
