"""Streams, part two: consumer groups (XGROUP XREADGROUP XACK XPENDING XCLAIM XAUTOCLAIM),
XREAD and XINFO against redis-server 7.0, RESP2 and RESP3, errors included. Replies that carry
clock readings (delivery, seen and idle times) are compared with the "times" normalizer."""

from __future__ import annotations

import pytest

from tests.node.diff import Case, Pair, check_cases

T = "times"

CASES = [
 Case("xgroup errors", ["XADD s 1-1 a 1", "XGROUP", "XGROUP foo", "XGROUP CREATE s", "XGROUP CREATE nokey g 0", "XGROUP CREATE s g x", "XGROUP CREATE s g 0 foo",
   "XGROUP CREATE s g 0 ENTRIESREAD -2", "XGROUP CREATE s g 0 ENTRIESREAD x", "XGROUP CREATE s g 0 ENTRIESREAD 5", "XGROUP CREATE s g 0", "XGROUP SETID s nog 0",
   "XGROUP SETID s g 0 ENTRIESREAD -5", "XGROUP SETID s g 0 foo 1", "XGROUP SETID s g 0 ENTRIESREAD 1 2", "XGROUP SETID s g 0 x", "XGROUP SETID nokey g 0 x", "XGROUP SETID s g +",
   ("XINFO GROUPS s", T), "XGROUP SETID s g -", "XGROUP CREATECONSUMER s nog c", "XGROUP CREATECONSUMER s g c", "XGROUP CREATECONSUMER s g c", "XGROUP DELCONSUMER s g x",
   "XGROUP DESTROY s nog", "XGROUP DESTROY s g g", "XGROUP foo s g", "XGROUP CREATE s g2 $ MKSTREAM ENTRIESREAD 3", "XGROUP CREATE s g3 -", "XGROUP CREATE s g4 +",
   "XGROUP HELP", "XGROUP HELP x", "XGROUP CREATE n g $ MKSTREAM", "XLEN n", "TYPE n", ("XINFO STREAM n", T), ("XINFO STREAM n FULL", T), "SET str x",
   "XGROUP CREATE str g $", "XGROUP CREATE str g $ MKSTREAM", "XGROUP CREATE s g 0 MKSTREAM MKSTREAM MKSTREAM MKSTREAM", "XGROUP CREATE nokey g 0 MKSTREAM MKSTREAM MKSTREAM MKSTREAM", "EXISTS nokey",
   "XGROUP SETID s g 0 ENTRIESREAD", "XGROUP DESTROY s g", "XGROUP DESTROY s g", ("XINFO GROUPS s", T)]),
 Case("read and ack", ["XADD s 1-1 a 1", "XADD s 2-1 b 2 c 3", "XADD s 3-1 a 3", "XGROUP CREATE s g 0", "XREADGROUP GROUP g c1 COUNT 1 STREAMS s >",
   "XREADGROUP GROUP g c2 STREAMS s >", "XREADGROUP GROUP g c2 STREAMS s >", "XREADGROUP GROUP g c1 STREAMS s 0", "XREADGROUP GROUP g c2 COUNT 1 STREAMS s 0",
   "XREADGROUP GROUP g c2 STREAMS s 2-1", "XREADGROUP GROUP g c3 STREAMS s 0", ("XPENDING s g", T), ("XPENDING s g - + 10", T), ("XPENDING s g - + 10 c2", T),
   ("XPENDING s g IDLE 100000 - + 10", T), ("XPENDING s g (1-1 + 1", T), ("XPENDING s g - (3-1 10 c2", T), "XPENDING s g - + x", ("XPENDING s g - + 10 nobody", T),
   "XPENDING s g IDLE x - + 10", "XPENDING s g IDLE 10", "XPENDING s g x + 10", ("XPENDING s g - + -1", T), "XPENDING s g - +", "XPENDING s g foo", "XPENDING s nog", "XPENDING nokey g",
   ("XINFO GROUPS s", T), ("XINFO CONSUMERS s g", T), ("XINFO STREAM s FULL", T), ("XINFO STREAM s FULL COUNT 1", T), ("XINFO STREAM s", T),
   "XACK s g 1-1 9-9", "XACK s g x", "XACK s nog 1-1", "XACK nokey g 1-1", "XDEL s 2-1", "XREADGROUP GROUP g c2 STREAMS s 0", ("XINFO GROUPS s", T), ("XPENDING s g", T),
   "XADD s 4-1 z 1", ("XINFO GROUPS s", T), "XREADGROUP GROUP g c1 NOACK STREAMS s >", ("XINFO GROUPS s", T), ("XPENDING s g", T),
   "XGROUP DELCONSUMER s g c2", ("XPENDING s g", T), ("XINFO CONSUMERS s g", T), "XGROUP SETID s g 0", ("XINFO GROUPS s", T), "XREADGROUP GROUP g c1 STREAMS s >", ("XPENDING s g - + 10", T),
   "XGROUP SETID s g 0 ENTRIESREAD 1", ("XINFO GROUPS s", T), "XREADGROUP GROUP g c9 COUNT 1 STREAMS s >", ("XINFO GROUPS s", T)]),
 Case("xread", ["XADD s 1-1 a 1", "XADD t 5-5 b 2", "XREAD STREAMS s t 0 0", "XREAD COUNT 1 STREAMS s t 0 0", "XREAD STREAMS s t $ $", "XREAD STREAMS s t 1-1 0", "XREAD STREAMS nokey 0",
   "XREAD", "XREAD STREAMS s", "XREAD STREAMS s s2", "XREAD COUNT x STREAMS s 0", "XREAD BLOCK -1 STREAMS s 0", "XREAD BLOCK x STREAMS s 0", "XREAD foo STREAMS s 0",
   "XREAD STREAMS s x", "XREAD STREAMS s +", "XREAD STREAMS s -", "XREAD COUNT -5 STREAMS s 0", "XREAD COUNT 0 STREAMS s 0", "XREAD STREAMS s >", "XREAD NOACK STREAMS s 0",
   "XREAD GROUP g c STREAMS s 0", "XREAD BLOCK 10 STREAMS s $", "XREAD BLOCK 10 STREAMS nokey 0", "SET str x", "XREAD STREAMS str 0", "XREAD STREAMS s str 0 0",
   "XREADGROUP GROUP g c STREAMS s >", "XREADGROUP STREAMS s 0", "XREADGROUP GROUP g c STREAMS s 0 1", "XGROUP CREATE s g 0", "XREADGROUP GROUP g c STREAMS s $",
   "XREADGROUP GROUP g c STREAMS s x", "XREADGROUP GROUP g c BLOCK -1 STREAMS s >", "XREADGROUP GROUP g c COUNT x STREAMS s >", "XREADGROUP GROUP g c STREAMS nokey >",
   "XREADGROUP GROUP g c STREAMS s nokey > >", "XREADGROUP GROUP g c STREAMS s str > >", "XREADGROUP GROUP g c BLOCK 10 STREAMS s >", "XREADGROUP GROUP g c BLOCK 10 STREAMS s >",
   "MULTI", "XREAD BLOCK 0 STREAMS s $", "XREADGROUP GROUP g c BLOCK 0 STREAMS s >", "EXEC"]),
 Case("claim", ["XADD s 1-1 a 1", "XADD s 2-1 b 2", "XADD s 3-1 c 3", "XADD s 4-1 d 4", "XGROUP CREATE s g 0", "XREADGROUP GROUP g c1 STREAMS s >",
   "XCLAIM s g c2 0 1-1", ("XPENDING s g - + 10", T), "XCLAIM s g c2 0 2-1 JUSTID", ("XPENDING s g - + 10", T), "XCLAIM s g c2 0 3-1 RETRYCOUNT 7 IDLE 5000",
   ("XPENDING s g - + 10", T), "XCLAIM s g c2 100000 4-1", "XCLAIM s g c3 0 9-9 FORCE", "XADD s 5-1 e 5", "XCLAIM s g c3 0 5-1 FORCE", ("XPENDING s g - + 10", T),
   "XCLAIM s g c3 0 5-1 FORCE LASTID 5-1", ("XINFO GROUPS s", T), "XCLAIM s g c3 0 1-1 LASTID 7-7 TIME 1000", ("XINFO GROUPS s", T),
   "XCLAIM s g c", "XCLAIM s g c 0", "XCLAIM s g c x 1-1", "XCLAIM s g c -1 1-1", "XCLAIM s nog c 0 1-1", "XCLAIM nokey g c 0 1-1",
   "XCLAIM s g c 0 1-1 IDLE x", "XCLAIM s g c 0 1-1 TIME x", "XCLAIM s g c 0 1-1 RETRYCOUNT x", "XCLAIM s g c 0 1-1 LASTID x",
   "XCLAIM s g c 0 1-1 foo", "XCLAIM s g c 0 x", "XDEL s 2-1", "XCLAIM s g c4 0 2-1", ("XPENDING s g", T), "XREADGROUP GROUP g c2 STREAMS s 0",
   "XAUTOCLAIM s g c5 0 0 COUNT 2", "XAUTOCLAIM s g c5 0 0 COUNT 2 JUSTID", "XAUTOCLAIM s g c5 0 (3-1", "XAUTOCLAIM s g c5 100000 0", ("XPENDING s g", T), ("XINFO CONSUMERS s g", T),
   "XDEL s 3-1 4-1", "XAUTOCLAIM s g c6 0 0 COUNT 1", "XAUTOCLAIM s g c6 0 0", ("XPENDING s g", T),
   "XAUTOCLAIM s g c 0", "XAUTOCLAIM s g c x 0", "XAUTOCLAIM s g c -1 0", "XAUTOCLAIM s g c 0 x", "XAUTOCLAIM s g c 0 0 COUNT 0", "XAUTOCLAIM s g c 0 0 COUNT x",
   "XAUTOCLAIM s g c 0 0 COUNT 100000000", "XAUTOCLAIM s g c 0 0 foo", "XAUTOCLAIM s g c 0 0 JUSTID foo", "XAUTOCLAIM s nog c 0 0", "XAUTOCLAIM nokey g c 0 0",
   "XAUTOCLAIM s g c 0 (18446744073709551615-18446744073709551615"]),
 Case("xinfo", ["XINFO", "XINFO foo", "XINFO STREAM", "XINFO STREAM nokey", "XINFO STREAM nokey foo", "XADD s 1-1 a 1", "XINFO STREAM s foo", "XINFO STREAM s FULL COUNT x", "XINFO STREAM s FULL foo",
   "XINFO STREAM s FULL COUNT -1", "XINFO GROUPS nokey", "XINFO CONSUMERS s nog", "XINFO CONSUMERS nokey g", "XINFO HELP", "XINFO HELP x", "XDEL s 1-1", "XINFO STREAM s",
   "XINFO STREAM s FULL", "SET str x", "XINFO STREAM str", "XINFO GROUPS str"]),
]


@pytest.mark.parametrize("proto", [2, 3])
def test_stream_groups_match_redis(diff_pair: Pair, proto: int) -> None:
    problems = check_cases(diff_pair, CASES, proto)
    assert not problems, "\n".join(problems)
