"""Streams, part one: XADD XRANGE XREVRANGE XLEN XDEL XTRIM XSETID against redis-server 7.0,
raw replies RESP2 and RESP3, errors and edge arguments included; approximate trimming over
Redis' node boundaries (entries and bytes), XINFO's radix-tree figures, DEBUG DIGEST."""

from __future__ import annotations

import pytest

from tests.node.diff import Case, Pair, check_cases

T = "times"  # delivery/seen/idle times differ between two servers by nature

CASES = [Case("basic", ["XADD s 1-1 a 1", "XADD s 1-1 a 1", "XADD s 0-0 a 1", "XADD s x a 1", "XADD s 5-* a", "XADD s MAXLEN x * a 1",
  "XADD s MAXLEN -1 * a 1", "XADD s LIMIT 10 MAXLEN 1 * a 1", "XADD s 1-* b 2", "XADD s 2-* b 2 c 3", "XADD s 2-* b 2 c 3", "XLEN s", "XRANGE s - +",
  "XREVRANGE s + -", "XRANGE s (1-1 +", "XRANGE s - (2-1", "XRANGE s 1 1", "XRANGE s 2 2 COUNT 1", "XRANGE s - + COUNT 0", "XRANGE s - + COUNT -1",
  "XRANGE s (18446744073709551615-18446744073709551615 +", "XRANGE s - (0-0", "XRANGE s - + foo", "XRANGE nokey - +", "TYPE s", "OBJECT ENCODING s",
  "XDEL s 1-2", "XDEL s 1-2 x", "XDEL s 1-2 9-9", "XRANGE s - +", "XLEN s", "DEBUG DIGEST-VALUE s", "DEBUG DIGEST", "XADD s NOMKSTREAM 3-0 a 1",
  "XADD n NOMKSTREAM * a 1", "EXISTS n", "SET str x", "XADD str * a 1", "XLEN str", "XRANGE str - +", "XTRIM s MAXLEN 1", "XRANGE s - +",
  "XTRIM s MAXLEN ~ 0", "XTRIM s MINID 9", "XLEN s", "EXISTS s", "XADD s ' 5-1' a 1", "XADD s '+6-1' a 1", "XADD s '-0' a 1", "XADD s 7-' 1' a 1",
  "XSETID s 0-1", "XSETID s 9-9 ENTRIESADDED 0", "XSETID s 9-9 ENTRIESADDED -1", "XSETID s 9-9 MAXDELETEDID 10-1", "XSETID nokey 1-1",
  "XSETID nokey 5-5 maxdeletedid 9-9", "XSETID s 9-9 ENTRIESADDED 50 MAXDELETEDID 2-2", "XSETID s +", "XSETID s 9-9 foo", "XADD s 9-9 a 1", "XADD s 9-* a 1",
  "XTRIM s", "XTRIM s MAXLEN", "XTRIM s foo 1", "XTRIM s MAXLEN ~ 1 LIMIT -1", "XTRIM s MAXLEN 1 MINID 1", "XTRIM s LIMIT 5 MAXLEN 1", "XTRIM s MAXLEN 1 LIMIT",
  "XTRIM s MAXLEN = 1 2", "XTRIM nokey MAXLEN 1", "XTRIM str MAXLEN 1", "XTRIM str MAXLEN x", "XADD s LIMIT 5 * a 1", "XADD s MAXLEN ~ x * a"]),
]

ADDS = [f"XADD s {i}-1 f{i % 3} {'v' * (i % 50)}" for i in range(1, 351)]
BIG = [f"XADD b {i}-0 field {'x' * (i * 37 % 700)} other {i}" for i in range(1, 120)]
SPREAD = [f"XADD s {i}-{i % 7} f{i % 3} {'v' * (i % 50)}" for i in range(1, 2600, 3)]

MORE_CASES = [
    Case("ids, duplicates, generic commands", ["XADD s 1-1 a 1", "SET k v", ("SCAN 0 TYPE stream", "scan"), "TYPE s", "OBJECT ENCODING s", "XADD s 2-1 a 2",
  "XREAD STREAMS s s 0 1-1", "XREAD COUNT 1 STREAMS s s 0 1-1", "EXPIRE s 100", "XADD s 3-1 a 1", "TTL s", "DEBUG DIGEST-VALUE s", "COPY s s2", "XLEN s2",
  "XGROUP CREATE s g 0", "XREADGROUP GROUP g c STREAMS s s > >", "XPENDING s g", "XREADGROUP GROUP g c STREAMS s s 0 0", "DEL s", "XINFO STREAM s2",
  "XADD s MAXLEN 0 5-5 a 1", "XLEN s", "XINFO STREAM s", "EXISTS s", "XADD s 6-* a", "XADD s 6-* a 1", "XADD s 6-* a 1", "XADD s 6 a 1", "XADD s 7 a 1",
  "XRANGE s 6 6", "XRANGE s 6-1 +", "XREVRANGE s + 6-1 COUNT 1", "XRANGE s - + COUNT 1 COUNT 2", "XRANGE s - + COUNT", "XDEL s 6-0 6-1 6-2 7-0", "XLEN s", "XINFO STREAM s",
  "XADD s 8-0 a 1 b", "XADD s 8-0 a", "XSETID s 5-5", "XSETID s 7-0", "XADD s 7-0 a 1", "XINFO STREAM s"]),
]

NODE_CASES = [
    Case("approximate trimming", ADDS + [
        "XTRIM s MAXLEN ~ 300", "XLEN s", "XTRIM s MAXLEN ~ 290 LIMIT 50", "XLEN s",
        "XDEL s 200-1 201-1", "XTRIM s MINID ~ 250", "XLEN s", "XRANGE s - + COUNT 2",
        "XADD s MAXLEN ~ 10 LIMIT 60 500-0 a 1", "XLEN s", "XTRIM s MAXLEN 7",
        "XRANGE s - + COUNT 3", "XTRIM s MINID 349-0", "XLEN s", "DEBUG DIGEST"]),
    Case("node bytes", BIG + [
        "XTRIM b MAXLEN ~ 100", "XLEN b", "XTRIM b MAXLEN ~ 50", "XLEN b", "XTRIM b MAXLEN ~ 5",
        "XLEN b", "XDEL b 119-0", "XADD b MAXLEN ~ 0 200-0 a 1", "XLEN b"]),
    Case("node limits from the config", [
        "CONFIG SET stream-node-max-entries 5", *ADDS[:40], "XTRIM s MAXLEN ~ 33", "XLEN s",
        "CONFIG SET stream-node-max-entries 0", "CONFIG SET stream-node-max-bytes 0",
        *[a.replace("XADD s", "XADD t") for a in ADDS[:300]], "XTRIM t MAXLEN ~ 100", "XLEN t",
        "CONFIG SET stream-node-max-entries 100", "CONFIG SET stream-node-max-bytes 4096"]),
    Case("radix tree", SPREAD + [
        ("XINFO STREAM s", T), "XDEL s 4-4 7-0", ("XINFO STREAM s", T), "XTRIM s MAXLEN ~ 500",
        ("XINFO STREAM s", T), "XTRIM s MAXLEN 333", ("XINFO STREAM s", T), "XTRIM s MINID 2000",
        ("XINFO STREAM s", T), "XADD s 18446744073709551615-0 a 1", ("XINFO STREAM s", T),
        "XADD s 18446744073709551615-1 a 1", "XADD s 18446744073709551615-* a 1", "XLEN s",
        "XINFO STREAM s FULL COUNT 3", "XTRIM s MAXLEN 0", ("XINFO STREAM s", T), "DEBUG DIGEST"]),
]


@pytest.mark.parametrize("proto", [2, 3])
def test_stream_basics_match_redis(diff_pair: Pair, proto: int) -> None:
    problems = check_cases(diff_pair, CASES, proto)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("proto", [2, 3])
def test_stream_nodes_match_redis(diff_pair: Pair, proto: int) -> None:
    problems = check_cases(diff_pair, NODE_CASES, proto)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("proto", [2, 3])
def test_stream_edges_match_redis(diff_pair: Pair, proto: int) -> None:
    problems = check_cases(diff_pair, MORE_CASES, proto)
    assert not problems, "\n".join(problems)
