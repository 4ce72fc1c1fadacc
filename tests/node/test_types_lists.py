"""List commands on our node vs a real redis-server 7.0: raw reply bytes, RESP2 and RESP3."""

from __future__ import annotations

from tests.node.types_diff import run_script, servers  # noqa: F401 - fixture

BASIC = """
rpush l a b c d e f a b c a
lpush l2 x y z
lpushx nol a
rpushx nol a
lpushx l2 q
rpushx l2 q r
llen l
llen nol
lrange l 0 -1
lrange l -3 -1
lrange l 5 2
lrange l -100 100
lrange l 20 30
lrange l a 1
lrange nol 0 -1
lrange nol a b
lindex l 0
lindex l -1
lindex l 100
lindex l abc
lindex nol abc
lset l 0 A
lset l -1 Z
lset l 100 Z
lset nol 0 x
lset l abc x
linsert l before b B
linsert l after b B2
linsert l middle b B
linsert l before nope x
linsert nol before a x
lrem l 1 a
lrem l -1 a
lrem l 0 b
lrem l abc a
lrem nol 0 a
lrange l 0 -1
ltrim l 1 -2
lrange l 0 -1
ltrim l 100 200
exists l
ltrim nol 0 1
ltrim l2 a 1
rpush l 1 2 3 4 5
lpop l
rpop l
lpop l 2
rpop l 0
lpop l -1
lpop l abc
lpop l 1 2
lpop nol
lpop nol 2
rpop l 100
exists l
type l2
object encoding l2
"""

LPOS = """
rpush l a b c d c c a c
lpos l c
lpos l c rank 2
lpos l c rank -1
lpos l c rank -3
lpos l c count 0
lpos l c count 2 rank -1
lpos l c count 2 rank 2
lpos l c maxlen 3
lpos l c rank -1 maxlen 2
lpos l c count 0 maxlen 4
lpos l zz count 0
lpos l zz
lpos l c rank 0
lpos l c count -1
lpos l c count abc
lpos l c maxlen -1
lpos l c bogus
lpos l c rank
lpos l c rank abc
lpos nol c
lpos nol c count 1
lpos l c rank -9223372036854775808
lpos l c rank 9223372036854775807
"""

WRONGTYPE = """
set s x
lpush s a
rpush s a
lpushx s a
lpop s
rpop s 2
lrange s 0 1
lindex s 0
lset s 0 x
linsert s before a b
lrem s 0 a
ltrim s 0 1
llen s
lpos s a
lmove s d left left
rpoplpush s d
lmpop 1 s left
blpop s 0.01
brpop nol s 0.01
"""

MOVE = """
set s x
rpush src a b c
lmove src dst left right
lmove src dst right left
lrange dst 0 -1
lmove src dst up left
lmove src dst left down
lmove nosrc dst left left
lmove src s left left
lmove nosrc s left left
rpoplpush src src
rpoplpush dst dst
lrange dst 0 -1
rpoplpush src dst
exists src
rpush one x
lmove one one left right
lrange one 0 -1
lmpop 2 nol dst left
lmpop 2 nol dst right count 10
lmpop 0 dst left
lmpop -1 dst left
lmpop abc dst left
lmpop 1 dst
lmpop 1 dst middle
lmpop 1 dst left count 0
lmpop 1 dst left count a
lmpop 1 dst left count 1 count 1
lmpop 1 dst left extra
lmpop 1 nol left
lmpop 5 a b left
"""

BLOCKING_IMMEDIATE = """
rpush dst a b
blpop nol dst 0
brpop nol dst 0
blpop dst inf
blpop dst -1
blpop dst abc
blpop dst 1e20
blpop dst nan
blpop dst " 1"
blpop dst 0.01
blmpop 0.01 1 nol left
blmpop abc 1 nol left
blmpop abc 0 nol left
blmpop abc 1 nol middle
blmpop 0.01 1 nol left count 0
rpush bl 1 2 3
blmpop 0 1 bl right count 2
blmove bl dst2 left left 0
rpush bl z
brpoplpush bl dst2 0
brpoplpush bl dst2 0.01
blmove bl dst2 left left 0.01
blmove bl dst2 left up 0.01
blmove bl dst2 left left abc
lrange dst2 0 -1
multi
blpop nol 0
brpop nol 0
blmove nol x left left 0
brpoplpush nol x 0
blmpop 0 1 nol left
exec
"""


def test_basic(servers):  # noqa: F811
    assert run_script(servers, BASIC) == []


def test_lpos(servers):  # noqa: F811
    assert run_script(servers, LPOS) == []


def test_wrongtype(servers):  # noqa: F811
    assert run_script(servers, WRONGTYPE) == []


def test_move_and_mpop(servers):  # noqa: F811
    assert run_script(servers, MOVE) == []


def test_blocking_served_at_once_and_argument_errors(servers):  # noqa: F811
    assert run_script(servers, BLOCKING_IMMEDIATE) == []


def test_long_list_ranges(servers):  # noqa: F811
    items = " ".join(str(i) for i in range(700))
    text = f"""
rpush big {items}
llen big
lrange big 0 9
lrange big -10 -1
lrange big 300 320
lrange big 650 1000
lindex big 350
lindex big -351
lset big 400 X
lrange big 398 402
linsert big after 500 Y
lrem big -1 Y
ltrim big 100 -100
llen big
lrange big 0 2
lpos big 300
lpos big 300 maxlen 10
lpop big 5
rpop big 5
object encoding big
"""
    assert run_script(servers, text) == []
