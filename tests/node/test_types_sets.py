"""Set commands on our node vs a real redis-server 7.0: raw reply bytes, RESP2 and RESP3.
Intset-encoded sets iterate in integer order, so their replies are compared byte for byte;
hashtable-ordered replies are compared sorted."""

from __future__ import annotations

from tests.node.types_diff import Pair, flush, parse, run_script, servers  # noqa: F401

SCRIPT = """
sadd s 3 1 2 -5 100
sadd s 1 2
object encoding s
smembers s
smembers nokey
sadd t 2 3 4 x
object encoding t
sadd u 010
object encoding u
sadd v 9223372036854775807 -9223372036854775808
object encoding v
sadd w 9223372036854775808
object encoding w
sismember s 1
sismember s 9
sismember nokey 1
smismember s 1 9 2
smismember nokey 1 2
scard s
scard nokey
srem s 1 9
srem nokey 1
srem u 010
exists u
sinter s t
sinter s nokey
sinter nokey s
sinter s
sunion s v
sdiff s t
sdiff nokey s
sdiff s nokey
sinterstore d s t
smembers d
object encoding d
sinterstore d s nokey
exists d
sunionstore d s v
smembers d
sdiffstore d s t
smembers d
sdiffstore d nokey
exists d
sintercard 2 s t
sintercard 2 s t limit 1
sintercard 2 s t limit 0
sintercard 2 s t limit -1
sintercard 2 s t limit
sintercard 0 s
sintercard 3 s t
sintercard 2 s nokey
sintercard abc s
sintercard 1 s foo
smove s t 3
smove s t 99
smove nokey t 3
smove s s 2
smove s s 42
smove s newset 2
smembers newset
set str x
smove s str 100
smove str s 100
smove nokey str 100
sadd str a
smembers str
sinter str s
sinter nokey str
sinter s str
sunion s str
sinterstore d str
sintercard 1 str
srandmember nokey
srandmember nokey 5
srandmember s 0
srandmember s 100
srandmember s -0
srandmember s abc
srandmember s 1 2
srandmember s -9223372036854775808
spop nokey
spop nokey 3
spop s 0
spop s -1
spop s abc
spop s 1 2
sadd p 1 2 3
spop p 3
exists p
sadd p2 5
spop p2
exists p2
sscan s 0
sscan t 0 match y
sscan t 0 match x*
sscan nokey 0
sscan s abc
sscan s 0 count 0
sscan s 0 type set
sadd many 1 2 3 4 5 6 7 8 9 10
sscan many 0 count 2
sadd e1 a
sdiffstore e1 e1 e1
exists e1
"""

UNORDERED = frozenset({"smembers", "sinter", "sunion", "sdiff", "sscan", "srandmember", "spop"})


def test_script(servers):  # noqa: F811
    assert run_script(servers, SCRIPT) == []


def test_hashtable_sets_unordered(servers):  # noqa: F811
    text = """
sadd a x y z 1 2 3
sadd b y z w 2
sadd c 1 2 3 4
smembers a
sinter a b
sunion a b c
sdiff a b
sdiff c a
sinterstore d a b
smembers d
object encoding d
sunionstore d a c
smembers d
sdiffstore d c b
smembers d
object encoding d
sscan a 0
srandmember a 100
spop a 100
exists a
"""
    assert run_script(servers, text, UNORDERED) == []


def test_encoding_thresholds(servers):  # noqa: F811
    ints = " ".join(str(i) for i in range(512))
    text = f"""
sadd s {ints}
object encoding s
sadd s 512
object encoding s
srem s 512 511 510
object encoding s
scard s
sadd t 1 2 3
sadd t x
object encoding t
srem t x
object encoding t
sadd big 9223372036854775807
object encoding big
sadd big -9223372036854775809
object encoding big
"""
    assert run_script(servers, text) == []


def test_spop_and_srandmember_draw_members(servers):  # noqa: F811
    flush(servers)
    p = Pair(servers, 2)
    try:
        members = [f"m{i}".encode() for i in range(200)]
        assert p.ours.call("SADD", "s", *members) == b":200\r\n"
        some = parse(p.ours.call("SRANDMEMBER", "s", "50"))
        assert isinstance(some, list) and len(set(some)) == 50 and set(some) <= set(members)
        rep = parse(p.ours.call("SRANDMEMBER", "s", "-300"))
        assert isinstance(rep, list) and len(rep) == 300 and set(rep) <= set(members)
        popped = parse(p.ours.call("SPOP", "s", "150"))
        assert isinstance(popped, list) and len(set(popped)) == 150
        assert p.ours.call("SCARD", "s") == b":50\r\n"
        rest = parse(p.ours.call("SMEMBERS", "s"))
        assert isinstance(rest, list) and set(rest) | set(popped) == set(members)
        one = parse(p.ours.call("SPOP", "s"))
        assert one in rest
        assert p.ours.call("SISMEMBER", "s", one) == b":0\r\n"
    finally:
        p.close()
