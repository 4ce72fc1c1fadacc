"""The command table against a real redis-server 7.0: drift, COMMAND GETKEYS, replies, arity."""

from __future__ import annotations

import shlex
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import redis

from slotgate.protocol import commands as C
from slotgate.protocol.overrides import MERGES, OVERRIDES, ROUTES
from tests.support import ManagedProcess, RawClient
from tools import gen_commands

CORPUS_PATH = Path(__file__).with_name("data") / "getkeys_corpus.txt"


def _corpus() -> list[list[bytes]]:
    rows = []
    for line in CORPUS_PATH.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            rows.append([a.encode() for a in shlex.split(line)])
    return rows


CORPUS = _corpus()


@pytest.fixture(scope="module")
def conn(redis_standalone: ManagedProcess) -> Iterator[redis.Connection]:
    c = redis.Connection(host="127.0.0.1", port=redis_standalone.port, socket_timeout=10)
    c.connect()
    try:
        yield c
    finally:
        c.disconnect()


def _call(conn: redis.Connection, *args: bytes | str) -> object:
    """One command, no reply callbacks; an error reply comes back as its full text."""
    conn.send_command(*args)
    try:
        return conn.read_response()
    except redis.ResponseError as exc:
        text = str(exc)
        # redis-py strips the "ERR " prefix of generic errors.
        return "ERROR " + (text if text.split(" ", 1)[0].isupper() else "ERR " + text)


# --------------------------------------------------------------------------- (a) drift
def test_checked_in_table_matches_real_server(redis_standalone: ManagedProcess) -> None:
    fresh = gen_commands.render(gen_commands.fetch(redis_standalone.port))
    checked_in = C.DATA_PATH.read_text(encoding="utf-8")
    assert fresh == checked_in, "protocol/commands.json drifted: run tools/gen_commands.py"


def test_table_counts_match_server(conn: redis.Connection) -> None:
    assert _call(conn, "COMMAND", "COUNT") == C.command_count() == len(C.COMMANDS)
    listed = _call(conn, "COMMAND", "LIST")
    assert isinstance(listed, list)
    assert sorted(listed) == sorted(C.command_list())
    assert len(C.ALL_COMMANDS) == len(listed)


# --------------------------------------------------------------------------- raw replies
def _frame_end(buf: bytes, pos: int) -> int | None:
    """End offset of the RESP frame starting at ``pos``, or None if incomplete."""
    eol = buf.find(b"\r\n", pos)
    if eol < 0:
        return None
    kind, head, nxt = buf[pos:pos + 1], buf[pos + 1:eol], eol + 2
    if kind in b"$=!" and head != b"-1":
        end = nxt + int(head) + 2
        return end if len(buf) >= end else None
    if kind in b"*~>%|" and head != b"-1":
        count = int(head) * (2 if kind in b"%|" else 1)
        for _ in range(count):
            item_end = _frame_end(buf, nxt)
            if item_end is None:
                return None
            nxt = item_end
    return nxt


def _raw_replies(port: int, proto: int, requests: Sequence[Sequence[bytes]]) -> list[bytes]:
    """Send ``requests`` pipelined after HELLO <proto>; the raw bytes of each reply."""
    with RawClient(port) as c:
        return c.pipeline([[b"HELLO", proto], *requests])[1:]


@pytest.mark.parametrize("proto", [2, 3])
def test_command_info_and_docs_bytes(redis_standalone: ManagedProcess, proto: int) -> None:
    # Containers list their subcommands in hash-table order, which differs per server run;
    # their contents are covered by the drift test.
    plain = [n for n, info in C.COMMANDS.items() if not info.subcommands]
    subs = [s.name.encode() for info in C.COMMANDS.values() for s in info.subcommands.values()]
    names = plain + subs[:40] + [b"GeT", b"nosuchcommand"]
    requests = [[b"COMMAND", b"INFO", n] for n in names] + [[b"COMMAND", b"DOCS", n] for n in names]
    replies = _raw_replies(redis_standalone.port, proto, requests)
    for name, reply in zip(names, replies[: len(names)], strict=True):
        assert C.command_info_reply([name], proto) == reply, name
    for name, reply in zip(names, replies[len(names):], strict=True):
        assert C.command_docs_reply([name], proto) == reply, name
    several = [b"get", b"nosuch", b"set"]
    want = _raw_replies(redis_standalone.port, proto,
                        [[b"COMMAND", b"INFO", *several], [b"COMMAND", b"DOCS", *several]])
    assert want == [C.command_info_reply(several, proto), C.command_docs_reply(several, proto)]


# --------------------------------------------------------------------------- (b) GETKEYS
def test_corpus_is_large_and_covers_every_keyed_command() -> None:
    assert len(CORPUS) >= 200
    seen = {info.name for argv in CORPUS if (info := C.lookup(argv)) is not None}
    keyed = {info.name for info in C.ALL_COMMANDS.values() if info.has_keys}
    assert keyed - seen == set()
    assert any(C.lookup(argv) is None for argv in CORPUS)  # unknown commands too
    assert {"spublish", "ping", "config|get"} <= seen  # and keyless ones


@pytest.mark.parametrize("argv", CORPUS, ids=[b" ".join(a).decode() for a in CORPUS])
def test_getkeys_matches_server(conn: redis.Connection, argv: list[bytes]) -> None:
    want = _call(conn, "COMMAND", "GETKEYS", *argv)
    try:
        got: object = [argv[i] for i in C.getkeys_command(argv)]
    except C.GetKeysError as exc:
        got = "ERROR " + str(exc)
    assert got == want
    if isinstance(want, list):
        # The unchecked hot-path API agrees whenever the server finds keys.
        assert C.get_keys(argv) == want


@pytest.mark.parametrize("argv", CORPUS, ids=[b" ".join(a).decode() for a in CORPUS])
def test_getkeysandflags_matches_server(conn: redis.Connection, argv: list[bytes]) -> None:
    want = _call(conn, "COMMAND", "GETKEYSANDFLAGS", *argv)
    try:
        got: object = [[argv[i], [f.encode() for f in flags]]
                       for i, flags in C.getkeysandflags_command(argv)]
    except C.GetKeysError as exc:
        got = "ERROR " + str(exc)
    assert got == want


def test_key_positions_are_positions() -> None:
    argv = [b"ZUNIONSTORE", b"d", b"2", b"a", b"b", b"WEIGHTS", b"1", b"2"]
    assert C.key_positions(argv) == [1, 3, 4]
    assert C.key_positions([b"MSET", b"a", b"1", b"b", b"2"]) == [1, 3]
    assert C.key_positions([b"nosuch", b"a"]) == []
    assert C.key_positions([]) == []
    # Shard channels are not keys, but route by slot.
    assert C.key_positions([b"SPUBLISH", b"ch", b"m"]) == []
    assert C.key_positions([b"SPUBLISH", b"ch", b"m"], include_not_key=True) == [1]
    assert C.get_keys([b"SSUBSCRIBE", b"a", b"b"], include_not_key=True) == [b"a", b"b"]
    # Too few arguments: only positions that exist, never an IndexError.
    assert C.key_positions([b"RENAME", b"a"]) == [1]
    assert C.key_positions([b"EVAL"]) == []
    assert C.key_positions([b"SORT", b"k", b"STORE"]) == [1]


# --------------------------------------------------------------------------- (c) lookup, arity
@pytest.mark.parametrize("include_not_key", [False, True])
def test_key_finder_agrees_with_key_positions(include_not_key: bool) -> None:
    """The row's own key finder gives what key_positions gives, over the whole corpus."""
    extra = [[b"SPUBLISH", b"ch", b"m"], [b"ssubscribe", b"a", b"b"], [b"GET"], [b"mset", b"a"]]
    checked = 0
    for argv in [*CORPUS, *extra]:
        info = C.lookup(argv)
        if info is None:
            continue
        assert C.key_finder(info, include_not_key)(argv) == C.key_positions(argv, include_not_key)
        checked += 1
    assert checked >= 200
    assert C.key_finder(C.COMMANDS[b"spublish"], True)([b"SPUBLISH", b"ch", b"m"]) == [1]
    assert C.key_finder(C.COMMANDS[b"spublish"])([b"SPUBLISH", b"ch", b"m"]) == []


def test_lookup_resolves_subcommands() -> None:
    cases = {
        (b"CLUSTER", b"KEYSLOT", b"x"): "cluster|keyslot",
        (b"config", b"GET", b"maxmemory"): "config|get",
        (b"Object", b"encoding", b"k"): "object|encoding",
        (b"XINFO", b"STREAM", b"k"): "xinfo|stream",
        (b"CLIENT", b"ID"): "client|id",
        (b"SCRIPT", b"LOAD", b"return 1"): "script|load",
        (b"CONFIG",): "config",
        (b"GET", b"k"): "get",
    }
    for argv, name in cases.items():
        info = C.lookup(list(argv))
        assert info is not None and info.name == name, argv
    assert C.lookup([b"CONFIG", b"NOSUCH"]) is None
    assert C.lookup([b"NOSUCH"]) is None
    assert C.lookup([]) is None
    get = C.COMMANDS[b"config"].subcommands["get"]
    assert get is C.lookup_name(b"CONFIG|GET") and get.container == "config"
    assert C.COMMANDS[b"get"].group == "string" and "readonly" in C.COMMANDS[b"get"].flags


ARITY_SAMPLES = [
    [b"GET"], [b"GET", b"a", b"b"], [b"SET", b"k"], [b"MSET", b"a"], [b"CONFIG"],
    [b"CONFIG", b"GET"], [b"OBJECT", b"ENCODING"], [b"XINFO", b"STREAM"], [b"EVAL", b"s"],
    [b"ZUNIONSTORE", b"d", b"1"], [b"CLUSTER", b"KEYSLOT"], [b"HSET", b"k", b"f"],
    [b"LPUSH", b"k"], [b"SCRIPT", b"EXISTS"], [b"XREAD", b"STREAMS", b"a"],
]


@pytest.mark.parametrize("argv", ARITY_SAMPLES, ids=[b" ".join(a).decode() for a in ARITY_SAMPLES])
def test_arity_errors_match_server(conn: redis.Connection, argv: list[bytes]) -> None:
    info = C.lookup(argv)
    assert info is not None
    assert not C.arity_ok(info, len(argv))
    assert _call(conn, *argv) == "ERROR " + C.arity_error(info)


def test_arity_ok_accepts_valid_counts(conn: redis.Connection) -> None:
    for argv in ([b"GET", b"k"], [b"MSET", b"a", b"1", b"b", b"2"], [b"CONFIG", b"GET", b"x"],
                 [b"PING"], [b"PING", b"x"], [b"OBJECT", b"ENCODING", b"nokey"]):
        info = C.lookup(argv)
        assert info is not None and C.arity_ok(info, len(argv))
        reply = _call(conn, *argv)
        assert not (isinstance(reply, str) and "wrong number" in reply), (argv, reply)


@pytest.mark.parametrize("argv", [
    [b"NOSUCH"], [b"nosuch", b"a", b"b c"], [b"CONFIG", b"NOSUCH", b"x"],
    [b"object", b"nope"], [b"nosuch", b"x" * 200, b"y"], [b"nosuch", b"a\r\nb"],
])
def test_unknown_command_errors_match_server(conn: redis.Connection, argv: list[bytes]) -> None:
    assert C.lookup(argv) is None
    assert _call(conn, *argv) == "ERROR " + C.unknown_command_error(argv).decode()


# --------------------------------------------------------------------------- routing
def test_every_row_has_a_known_route_and_merge() -> None:
    for info in C.ALL_COMMANDS.values():
        assert info.route in ROUTES, info.name
        assert info.merge is None or info.merge in MERGES, info.name
        fans_out = info.route in ("split", "all_masters", "all_nodes")
        assert fans_out == (info.merge is not None), info.name
    assert set(OVERRIDES) <= {i.name for i in C.ALL_COMMANDS.values()}


def test_routes_for_well_known_commands() -> None:
    def row(*argv: bytes) -> tuple[str, str | None]:
        info = C.lookup(list(argv))
        assert info is not None
        return info.route, info.merge

    assert row(b"GET", b"k") == ("single", None)
    assert row(b"MGET", b"a") == ("split", "mget")
    assert row(b"DEL", b"a") == ("split", "sum")
    assert row(b"MSETNX", b"a", b"1") == ("gather", None)
    assert row(b"SUNIONSTORE", b"d", b"a") == ("gather", None)
    assert row(b"TIME") == ("keyless", None)
    assert row(b"DBSIZE") == ("all_masters", "sum")
    assert row(b"KEYS", b"*") == ("all_masters", "concat")
    assert row(b"SCRIPT", b"EXISTS", b"x") == ("all_masters", "and")
    assert row(b"CONFIG", b"SET", b"a", b"b") == ("guarded", None)
    assert row(b"CLUSTER", b"KEYSLOT", b"x") == ("proxy", None)
    assert row(b"CLUSTER", b"ADDSLOTS", b"1") == ("unsupported", None)
    assert row(b"COMMAND", b"GETKEYS", b"GET", b"k") == ("proxy", None)
    assert row(b"BLPOP", b"a", b"0") == ("blocking", None)
    assert row(b"SUBSCRIBE", b"c") == ("pubsub", None)
    assert row(b"EXEC") == ("transaction", None)
    assert row(b"SHUTDOWN") == ("unsupported", None)


def _split_aggregate(reply: bytes) -> tuple[bytes, list[bytes]]:
    """The header line and the raw top-level elements of one aggregate reply."""
    head_end = reply.index(b"\r\n") + 2
    items, pos = [], head_end
    while pos < len(reply):
        end = _frame_end(reply, pos)
        assert end is not None
        items.append(reply[pos:end])
        pos = end
    return reply[:head_end], items


@pytest.mark.parametrize("proto", [2, 3])
def test_full_command_and_docs_replies(redis_standalone: ManagedProcess, proto: int) -> None:
    # Same entries as the server's, which come in its hash-table order; containers' entries
    # differ only in their subcommands' order (covered by the drift test).
    containers = {n.decode() for n, i in C.COMMANDS.items() if i.subcommands}
    server_info, server_docs = _raw_replies(redis_standalone.port, proto,
                                            [[b"COMMAND"], [b"COMMAND", b"DOCS"]])
    head, theirs = _split_aggregate(server_info)
    our_head, ours = _split_aggregate(C.command_info_reply(None, proto))
    assert head == our_head and len(ours) == len(theirs) == len(C.COMMANDS)

    def plain(entries: list[bytes]) -> list[bytes]:
        return sorted(e for e in entries
                      if not any(e.split(b"\r\n")[2] == c.encode() for c in containers))

    assert plain(ours) == plain(theirs)
    assert len(plain(ours)) == len(C.COMMANDS) - len(containers)
    head, theirs = _split_aggregate(server_docs)
    our_head, ours = _split_aggregate(C.command_docs_reply(None, proto))
    assert head == our_head
    pairs = {theirs[i]: theirs[i + 1] for i in range(0, len(theirs), 2)}
    our_pairs = {ours[i]: ours[i + 1] for i in range(0, len(ours), 2)}
    assert pairs.keys() == our_pairs.keys()
    for key, value in pairs.items():
        if key.split(b"\r\n")[1].decode() not in containers:
            assert our_pairs[key] == value, key
