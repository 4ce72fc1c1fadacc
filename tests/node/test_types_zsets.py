"""Sorted-set commands on our node vs a real redis-server 7.0: raw reply bytes, RESP2 and
RESP3 (doubles, WITHSCORES pairs), score formatting and parse errors."""

from __future__ import annotations

from tests.node.types_diff import Pair, flush, parse, run_script, servers  # noqa: F401

SCRIPT = """
zadd z 1 a 2 b 3 c
zadd z 1.5 x 0.1 y 1e20 w inf i -inf ni
zscore z x
zscore z y
zscore z w
zscore z i
zscore z ni
zscore z a
zscore z nope
zscore nokey a
zadd z -0 mz
zscore z mz
zrange z 0 -1 withscores
zadd z nx 5 a 6 new
zadd z xx 5 a 6 new2
zadd z xx ch 7 a 6 new3
zadd z gt 1 a
zadd z gt ch 10 a
zadd z lt ch 10 a
zadd z nx xx 1 a
zadd z gt lt 1 a
zadd z nx gt 1 a
zadd z incr 1 a 2 b
zadd z incr 1 a
zadd z incr nx 1 a
zadd z incr xx 1 nope
zadd z incr gt -100 a
zadd z 1
zadd z
zadd z abc a
zadd z nan a
zadd z 1e400 a
zadd z 1e-400 a
zadd z " 1" a
zadd z "1 " a
zadd z 0x10 hx
zadd z 1 a 2
zincrby z 1 a
zincrby z abc a
zincrby z inf i
zincrby z -inf i
zincrby newz 5 m
zincrby z 1.1 y
zcard z
zcard nokey
zcount z -inf +inf
zcount z (1 3
zcount z 1 (3
zcount z abc 3
zcount z 1 (abc
zcount z "" 5
zcount z ( 5
zcount nokey 0 1
zrank z a
zrank z nope
zrevrank z a
zrank nokey a
zmscore z a nope b
zmscore nokey a b
zrange z 0 -1
zrange z 0 -1 withscores
zrange z 2 1
zrange z -3 -1 withscores
zrange z 0 -1 rev withscores
zrange z -inf +inf byscore
zrange z (1 3 byscore withscores
zrange z +inf -inf byscore rev withscores
zrange z -inf +inf byscore limit 1 2
zrange z -inf +inf byscore limit 1 -1
zrange z -inf +inf byscore limit -1 2
zrange z -inf +inf byscore limit 0 0
zrange z +inf -inf byscore rev limit 1 2 withscores
zrange z 0 -1 limit 1 2
zrange z - + bylex withscores
zrange z 0 -1 byscore bylex
zrange z 0 -1 rev rev
zrange z 0 -1 bogus
zrange z a b
zrange z abc 1 byscore
zrange z [a [z bylex
zrange nokey 0 -1
zrange nokey a b
zrevrange z 0 2 withscores
zrevrange z 0 2 rev
zrangebyscore z -inf +inf withscores limit 0 3
zrangebyscore z -inf +inf rev
zrevrangebyscore z +inf -inf withscores
zrevrangebyscore z 3 1
zrangebyscore z (1 (3
zadd lz 0 a 0 b 0 c 0 d 0 e 0 ff
zrangebylex lz - +
zrangebylex lz [b (e
zrangebylex lz (b [e limit 1 2
zrevrangebylex lz + -
zrevrangebylex lz [e (b
zrangebylex lz b e
zrangebylex lz - + withscores
zrangebylex lz + -
zrangebylex lz [f +
zlexcount lz - +
zlexcount lz [b [d
zlexcount lz b d
zlexcount nokey - +
zrangestore dst z 0 2
zrange dst 0 -1 withscores
object encoding dst
zrangestore dst z -inf +inf byscore
object encoding dst
zrangestore dst lz [b [c bylex
zrangestore dst z 5 1
exists dst
zrangestore dst z 0 -1 withscores
zrangestore dst nokey 0 -1
zrem z a nope
zrem nokey a
zremrangebyrank z 0 0
zremrangebyscore z (1 3
zremrangebyscore z abc 3
zremrangebylex lz [a [b
zremrangebylex lz a b
zremrangebyrank nokey 0 1
zrange z 0 -1 withscores
zremrangebyrank lz 0 -1
exists lz
set str x
zadd str 1 a
zscore str a
zrange str 0 1
zcard str
zadd z1 1 a 2 b 3 c
zadd z2 10 b 20 c 30 d
sadd s1 a d e
zunion 2 z1 z2
zunion 2 z1 z2 withscores
zunion 2 z1 z2 weights 2 3 withscores
zunion 2 z1 z2 aggregate min withscores
zunion 2 z1 z2 aggregate max withscores
zunion 3 z1 z2 s1 withscores
zunion 2 z1 nokey withscores
zinter 2 z1 z2 withscores
zinter 2 z1 s1 withscores
zinter 2 z1 nokey
zdiff 2 z1 z2 withscores
zdiff 2 z1 z2 weights 1 2
zdiff 1 z1 withscores
zunion 0 z1
zunion -1 z1
zunion abc z1
zunion 3 z1 z2
zunion 2 z1 z2 weights 1
zunion 2 z1 z2 weights 1 abc
zunion 2 z1 z2 aggregate avg
zunion 2 z1 str
zunionstore out 2 z1 z2
zrange out 0 -1 withscores
zunionstore out 2 z1 z2 withscores
zinterstore out 2 z1 z2 weights 1 0.5
zrange out 0 -1 withscores
zdiffstore out 2 z1 z2
zrange out 0 -1 withscores
zinterstore out 2 z1 nokey
exists out
zintercard 2 z1 z2
zintercard 2 z1 z2 limit 1
zintercard 2 z1 z2 limit -1
zintercard 0 z1
zintercard 2 z1 z2 withscores
zadd zi 1 a
zadd zi2 inf a
zadd zi3 -inf a
zunion 2 zi2 zi3 withscores
zinter 2 zi2 zi3 withscores
zunion 2 zi2 zi3 weights 0 1 withscores
zpopmin z1
zpopmax z1 2
zpopmin z1 0
zpopmin z1 -1
zpopmin nokey
zpopmin nokey 2
zpopmin z1 1 2
zpopmin str
exists z1
zadd pz 1 a 2 b 3 c 4 d
zmpop 1 pz min
zmpop 1 pz max count 2
zmpop 2 nokey pz min count 10
zmpop 1 nokey min
zmpop 0 pz min
zmpop 1 pz middle
zmpop 1 pz min count 0
zmpop 1 pz
bzpopmin nokey 0.01
zadd bz 1 a 2 b
bzpopmin nokey bz 0
bzpopmax bz 0
bzpopmax bz abc
bzpopmax bz -1
bzmpop 0.01 1 bz min
zadd bz 5 q
bzmpop 0 1 bz max count 5
bzmpop abc 0 bz max
multi
bzpopmin nokey 0
bzmpop 0 1 nokey min
exec
zadd rz 1 a 2 b 3 c
zrandmember nokey
zrandmember nokey 3
zrandmember rz 0
zrandmember rz 10
zrandmember rz 10 withscores
zrandmember rz 1 bogus
zrandmember rz abc
zrandmember rz -4611686018427387904 withscores
zscan rz 0
zscan nokey 0
zscan rz 0 match b*
zscan rz abc
object encoding rz
zadd bigm 1 0000000000000000000000000000000000000000000000000000000000000000000000000000000000000
object encoding bigm
type rz
"""


def test_script(servers):  # noqa: F811
    assert run_script(servers, SCRIPT) == []


def test_score_formatting(servers):  # noqa: F811
    text = """
zadd z 1.5 a 0.1 b 1e20 c 3 d inf e -inf f 1e-300 g 123456789.123 h -2.5e-5 i 0.30000000000000004 j
zscore z a
zscore z b
zscore z c
zscore z d
zscore z e
zscore z f
zscore z g
zscore z h
zscore z i
zscore z j
zrange z 0 -1 withscores
zincrby z 0.2 b
zadd z incr 1e300 c
zmscore z a b nope
zscan z 0
zrangebyscore z 1e-301 1e-299 withscores
zrangebyscore z (1e-300 1 withscores
"""
    assert run_script(servers, text) == []


def test_encoding_thresholds_and_big_zsets(servers):  # noqa: F811
    pairs = " ".join(f"{i} m{i:03d}" for i in range(128))
    more = " ".join(f"{i}.5 n{i}" for i in range(300))
    text = f"""
zadd z {pairs}
object encoding z
zadd z 200 extra
object encoding z
zrem z extra m000
object encoding z
zcard z
zadd w 1 {"x" * 64}
object encoding w
zadd w 1 {"x" * 65}
object encoding w
zadd big {more}
object encoding big
zrange big 0 9 withscores
zrange big -5 -1 withscores
zrange big 100 110 rev withscores
zrangebyscore big (10 20 withscores
zrangebyscore big 10 20 limit 3 4
zrevrangebyscore big 200 100 limit 5 3 withscores
zcount big 50 (250
zrank big n150
zrevrank big n150
zremrangebyrank big 10 19
zremrangebyscore big 100 (120
zcard big
zrange big 95 105
zpopmin big 3
zpopmax big 3
zunionstore u 2 z big weights 2 0.5
zcard u
object encoding u
zrange u 0 20 withscores
zinterstore i 2 z big
zrangestore rs big 0 50
object encoding rs
zrangestore rs big 0 200
object encoding rs
zrangestore rs big 10 20 byscore
object encoding rs
zdiffstore d 2 big z
zcard d
"""
    assert run_script(servers, text) == []


def test_lex_ranges_on_big_zset(servers):  # noqa: F811
    members = " ".join(f"0 {a}{b}" for a in "abcdefghijklm" for b in "abcdefghijklm")
    text = f"""
zadd lz {members}
zrangebylex lz [c (d
zrangebylex lz (ka + limit 2 5
zrevrangebylex lz (e [c limit 0 4
zlexcount lz - +
zlexcount lz [b [bz
zremrangebylex lz [a (b
zrange lz 0 3
zrange lz [m + bylex rev
"""
    assert run_script(servers, text) == []


def test_zscan_and_zrandmember_on_big_zset(servers):  # noqa: F811
    flush(servers)
    p = Pair(servers, 3)
    try:
        args = []
        for i in range(500):
            args += [str(i / 7), f"m{i}"]
        assert p.ours.call("ZADD", "z", *args) == b":500\r\n"
        seen = {}
        cursor = b"0"
        for _ in range(1000):
            reply = parse(p.ours.call("ZSCAN", "z", cursor, "COUNT", "37"))
            assert isinstance(reply, list)
            cursor, flat = reply
            seen.update(zip(flat[::2], flat[1::2], strict=True))
            if cursor == b"0":
                break
        assert len(seen) == 500
        assert seen[b"m7"] == b"1"
        picks = parse(p.ours.call("ZRANDMEMBER", "z", "20", "WITHSCORES"))
        assert isinstance(picks, list) and len(picks) == 20
        assert all(isinstance(pair, list) and len(pair) == 2 for pair in picks)
        assert len({pair[0] for pair in picks}) == 20
        rep = parse(p.ours.call("ZRANDMEMBER", "z", "-600"))
        assert isinstance(rep, list) and len(rep) == 600
    finally:
        p.close()
