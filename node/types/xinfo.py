"""XINFO STREAM [FULL [COUNT n]], XINFO GROUPS, XINFO CONSUMERS, XINFO HELP, as Redis 7.0
replies (maps in RESP3). ``radix-tree-nodes`` counts the nodes of Redis' radix tree over the
16-byte big-endian master ids of the stream's listpack nodes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from slotgate.node.commands.registry import command
from slotgate.node.commands.util import parse_int
from slotgate.node.core.errors import NO_SUCH_KEY, WRONGTYPE, CommandError
from slotgate.node.types.stream import MAX_ID, MIN_ID, Group, Stream, ms_now
from slotgate.node.types.streams import bulk_id, entry_reply
from slotgate.node.types.xgroups import help_reply, no_such_group

if TYPE_CHECKING:
    from slotgate.node.core.client import Client


def rax_nodes(keys: list[bytes], depth: int = 0) -> int:
    """Nodes of a compressed radix tree holding ``keys`` (sorted, equal length, distinct)."""
    if not keys:
        return 1 if depth == 0 else 0
    first, last = keys[0], keys[-1]
    if len(keys) == 1:
        return 1 if depth == len(first) else 2
    common = 0
    while first[depth + common] == last[depth + common]:
        common += 1
    if common:
        return 1 + rax_nodes(keys, depth + common)
    total = 1
    i = 0
    while i < len(keys):
        ch = keys[i][depth]
        j = i
        while j < len(keys) and keys[j][depth] == ch:
            j += 1
        total += rax_nodes(keys[i:j], depth + 1)
        i = j
    return total


def _tree_nodes(s: Stream) -> int:
    keys = [n.master[0].to_bytes(8, "big") + n.master[1].to_bytes(8, "big") for n in s.nodes]
    return rax_nodes(keys)


def _bulk(b: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(b), b)


def _map(c: Client, pairs: list[tuple[bytes, bytes]]) -> bytes:
    head = b"*%d\r\n" % (2 * len(pairs)) if c.resp == 2 else b"%%%d\r\n" % len(pairs)
    return head + b"".join(_bulk(k) + v for k, v in pairs)


def _int(n: int) -> bytes:
    return b":%d\r\n" % n


def _lookup(c: Client, key: bytes) -> Stream:
    v = c.db.lookup_read(key)
    if v is None:
        raise CommandError(NO_SUCH_KEY)
    if type(v) is not Stream:
        raise CommandError(WRONGTYPE)
    return v


def _sub_syntax(argv: list[bytes]) -> CommandError:
    return CommandError(f"ERR unknown subcommand or wrong number of arguments for "
                        f"'{argv[1].decode('utf-8', 'replace')}'. Try XINFO HELP.")


def _head(c: Client, s: Stream) -> list[tuple[bytes, bytes]]:
    return [
        (b"length", _int(s.length)),
        (b"radix-tree-keys", _int(len(s.nodes))),
        (b"radix-tree-nodes", _int(_tree_nodes(s))),
        (b"last-generated-id", bulk_id(s.last_id)),
        (b"max-deleted-entry-id", bulk_id(s.max_deleted)),
        (b"entries-added", _int(s.entries_added)),
        (b"recorded-first-entry-id", bulk_id(s.first_id)),
    ]


def _lag(c: Client, s: Stream, g: Group) -> list[tuple[bytes, bytes]]:
    lag = s.lag(g)
    return [(b"entries-read", _int(g.entries_read) if g.entries_read != -1 else c.null_bulk),
            (b"lag", _int(lag) if lag is not None else c.null_bulk)]


def _full(c: Client, s: Stream, count: int) -> bytes:
    pairs = _head(c, s)
    entries: list[bytes] = []
    for e in s.range(MIN_ID, MAX_ID):
        if count and len(entries) == count:
            break
        entries.append(entry_reply(e[0], e[1], c.null_array))
    pairs.append((b"entries", b"*%d\r\n" % len(entries) + b"".join(entries)))
    groups = []
    for name, g in sorted(s.groups.items()):
        pel = g.pel.ids[:count] if count else g.pel.ids
        pend = b"".join(b"*4\r\n%s%s:%d\r\n:%d\r\n" % (
            bulk_id(sid), _bulk(g.pel[sid].consumer.name), g.pel[sid].delivery_ms,
            g.pel[sid].count) for sid in pel)
        conss = []
        for cname, cons in sorted(g.consumers.items()):
            cpel = cons.pel.ids[:count] if count else cons.pel.ids
            cpend = b"".join(b"*3\r\n%s:%d\r\n:%d\r\n" % (
                bulk_id(sid), cons.pel[sid].delivery_ms, cons.pel[sid].count) for sid in cpel)
            conss.append(_map(c, [(b"name", _bulk(cname)), (b"seen-time", _int(cons.seen_ms)),
                                  (b"pel-count", _int(len(cons.pel))),
                                  (b"pending", b"*%d\r\n" % len(cpel) + cpend)]))
        groups.append(_map(c, [(b"name", _bulk(name)), (b"last-delivered-id", bulk_id(g.last_id)),
                               *_lag(c, s, g), (b"pel-count", _int(len(g.pel))),
                               (b"pending", b"*%d\r\n" % len(pel) + pend),
                               (b"consumers", b"*%d\r\n" % len(conss) + b"".join(conss))]))
    pairs.append((b"groups", b"*%d\r\n" % len(groups) + b"".join(groups)))
    return _map(c, pairs)


@command("xinfo|stream")
def xinfo_stream(c: Client, argv: list[bytes]) -> bytes:
    s = _lookup(c, argv[2])
    full = False
    count = 10
    if len(argv) > 3:
        if len(argv) > 6 or argv[3].lower() != b"full":
            raise _sub_syntax(argv)
        full = True
        if len(argv) > 4:
            if len(argv) != 6 or argv[4].lower() != b"count":
                raise _sub_syntax(argv)
            count = max(parse_int(argv[5]), 0)
    if full:
        return _full(c, s, count)
    pairs = _head(c, s)
    pairs.append((b"groups", _int(len(s.groups))))
    for label, rev in ((b"first-entry", False), (b"last-entry", True)):
        e = next(s.range(MIN_ID, MAX_ID, rev), None)
        pairs.append((label, entry_reply(e[0], e[1], c.null_array) if e else c.null_bulk))
    return _map(c, pairs)


@command("xinfo|groups")
def xinfo_groups(c: Client, argv: list[bytes]) -> bytes:
    s = _lookup(c, argv[2])
    out = []
    for name, g in sorted(s.groups.items()):
        out.append(_map(c, [(b"name", _bulk(name)), (b"consumers", _int(len(g.consumers))),
                            (b"pending", _int(len(g.pel))),
                            (b"last-delivered-id", bulk_id(g.last_id)), *_lag(c, s, g)]))
    return b"*%d\r\n" % len(out) + b"".join(out)


@command("xinfo|consumers")
def xinfo_consumers(c: Client, argv: list[bytes]) -> bytes:
    s = _lookup(c, argv[2])
    g = s.groups.get(argv[3])
    if g is None:
        raise CommandError(no_such_group(argv[2], argv[3]))
    now = ms_now()
    out = []
    for name, cons in sorted(g.consumers.items()):
        out.append(_map(c, [(b"name", _bulk(name)), (b"pending", _int(len(cons.pel))),
                            (b"idle", _int(max(now - cons.seen_ms, 0)))]))
    return b"*%d\r\n" % len(out) + b"".join(out)


_XINFO_HELP = [
    b"XINFO <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    b"CONSUMERS <key> <groupname>",
    b"    Show consumers of <groupname>.",
    b"GROUPS <key>",
    b"    Show the stream consumer groups.",
    b"STREAM <key> [FULL [COUNT <count>]",
    b"    Show information about the stream.",
    b"HELP",
    b"    Prints this help.",
]


@command("xinfo|help")
def xinfo_help(c: Client, argv: list[bytes]) -> bytes:
    return help_reply(_XINFO_HELP)
