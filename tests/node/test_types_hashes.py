"""Hash commands on our node vs a real redis-server 7.0: raw reply bytes, RESP2 and RESP3."""

from __future__ import annotations

from tests.node.types_diff import Pair, flush, run_script, servers, unordered  # noqa: F401

SCRIPT = """
hset h f1 v1 f2 v2
hset h f1 x f3 v3
hset h f1
hmset h a 1 b 2
hmset h a
hsetnx h a 5
hsetnx h new 5
hsetnx nokey f v
hget h f1
hget h nope
hget nokey f
hmget h f1 nope f2
hmget nokey a b
hlen h
hlen nokey
hstrlen h f1
hstrlen h nope
hexists h f1
hexists h zz
hkeys h
hvals h
hgetall h
hgetall nokey
hkeys nokey
hdel h f1 f1 nope
hdel nokey a
hincrby h a 10
hincrby h a -100
hincrby h f2 1
hincrby h a abc
hincrby h a 9223372036854775807
hincrby h newint 5
hincrbyfloat h a 1.5
hincrbyfloat h fl 0.1
hincrbyfloat h fl 0.2
hincrbyfloat h fl 1e10
hincrbyfloat h fl inf
hincrbyfloat h fl nan
hincrbyfloat h fl abc
hincrbyfloat h f2 1
hset h inf inf
hincrbyfloat h inf 1
hincrbyfloat h e 3.0e3
hincrbyfloat h neg -5.5
hgetall h
hrandfield nokey
hrandfield nokey 5
hrandfield h 0
hrandfield h 100
hrandfield h 100 withvalues
hrandfield h -0 withvalues
hrandfield h 5 bogus
hrandfield h 5 withvalues x
hrandfield h abc
hrandfield h -9223372036854775808
hrandfield h 9223372036854775807 withvalues
hrandfield h -4611686018427387904 withvalues
hscan h 0
hscan h 0 match f*
hscan h 0 count 0
hscan h 0 count abc
hscan h abc
hscan h -1
hscan h 01
hscan nokey 0
hscan nokey 0 count 0
hscan h 18446744073709551615
hscan h 18446744073709551616
hscan h 0 type string
set s x
hget s f
hset s f v
hgetall s
hscan s 0
object encoding h
hset big f 0000000000000000000000000000000000000000000000000000000000000000000000000000000000000
object encoding big
hdel big f
exists big
hset h2 0000000000000000000000000000000000000000000000000000000000000000000000000000000000000 1
object encoding h2
hincrby h3 0000000000000000000000000000000000000000000000000000000000000000000000000000000000000 1
object encoding h3
type h
hdel h a b f2 f3 new newint fl e neg inf
exists h
hset hc a 1
hscan hc ""
hscan hc -
hscan hc +5
hscan hc " 1"
hscan hc 99999999999999999999
"""


def test_script(servers):  # noqa: F811
    assert run_script(servers, SCRIPT) == []


def test_encoding_thresholds(servers):  # noqa: F811
    fields = " ".join(f"f{i} v{i}" for i in range(512))
    text = f"""
hset h {fields}
object encoding h
hset h f512 v
object encoding h
hdel h f512 f511
object encoding h
hlen h
hset w f {"x" * 64}
object encoding w
hset w g {"x" * 65}
object encoding w
hsetnx w2 {"y" * 65} 1
object encoding w2
hincrbyfloat w3 {"z" * 65} 1.5
object encoding w3
"""
    assert run_script(servers, text) == []


def test_large_hash_unordered_replies_and_full_hscan(servers):  # noqa: F811
    flush(servers)
    p = Pair(servers, 3)
    try:
        args = []
        for i in range(600):
            args += [f"f{i}", f"v{i}"]
        real, ours = p.both("HSET", "h", *args)
        assert real == ours
        for cmd in (["HKEYS", "h"], ["HVALS", "h"], ["HRANDFIELD", "h", "1000"]):
            real, ours = p.both(*cmd)
            assert unordered(real) == unordered(ours), cmd
        real, ours = p.both("HGETALL", "h")
        from tests.node.types_diff import parse
        assert parse(real) == parse(ours)
        for proto_pair in (p,):
            seen: dict[bytes, bytes] = {}
            cursor = b"0"
            for _ in range(1000):
                raw = proto_pair.ours.call("HSCAN", "h", cursor, "COUNT", "50")
                reply = parse(raw)
                assert isinstance(reply, list)
                cursor, flat = reply
                seen.update(zip(flat[::2], flat[1::2], strict=True))
                if cursor == b"0":
                    break
            assert seen == {f"f{i}".encode(): f"v{i}".encode() for i in range(600)}
        for cmd in (["HRANDFIELD", "h", "5"], ["HRANDFIELD", "h", "-5", "WITHVALUES"]):
            reply = parse(p.ours.call(*cmd))
            assert isinstance(reply, list) and len(reply) == 5
        distinct = parse(p.ours.call("HRANDFIELD", "h", "300"))
        assert isinstance(distinct, list) and len(set(distinct)) == 300
    finally:
        p.close()
