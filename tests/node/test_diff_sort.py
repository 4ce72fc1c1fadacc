"""SORT / SORT_RO: identical raw replies to redis-server 7.0."""

from __future__ import annotations

import pytest

from tests.node.diff import Case, Pair, check_cases

CASES = [
    Case("numeric and alpha", ["RPUSH l 3 1 2 10 -5 2.5", "SORT l", "SORT l DESC", "SORT l ALPHA",
                               "SORT l ALPHA DESC", "SORT l LIMIT 1 2", "SORT l LIMIT -5 2",
                               "SORT l LIMIT 2 -1", "SORT l LIMIT 10 2", "SORT l LIMIT 0 0",
                               "SORT l LIMIT x 1", "SORT l LIMIT 1", "SORT l FOO",
                               "RPUSH bad 1 a", "SORT bad", "SORT bad ALPHA", "SORT nokey",
                               "SET s x", "SORT s", "SORT_RO l", "SORT_RO l STORE d",
                               "SORT l STORE dst", "LRANGE dst 0 -1", "SORT nokey STORE dst",
                               "EXISTS dst", "RPUSH f ' 1' '' 1e2 0x10 inf -inf 1e400",
                               "SORT f", "RPUSH g 1e-400", "SORT g", "RPUSH h 'nan'", "SORT h"]),
    Case("sets and zsets", ["SADD s 5 3 9 1", "SORT s", "SORT s DESC LIMIT 0 2", "SADD t b a c",
                            "SORT t ALPHA", "SORT t BY nosort STORE out", "LRANGE out 0 -1",
                            "ZADD z 3 c 1 a 2 b", "SORT z ALPHA", "SORT z BY nosort",
                            "SORT z BY nosort DESC", "SORT z BY nosort LIMIT 1 5",
                            "SORT z BY nosort DESC LIMIT 1 1"]),
    Case("by and get patterns", ["RPUSH ids 1 2 3 4", "MSET w_1 30 w_2 10 w_3 20 n_1 one n_2 two",
                                 "HSET h_1 f x", "HSET h_3 f z", "SORT ids BY w_*",
                                 "SORT ids BY w_* DESC GET n_* GET # GET h_*->f",
                                 "SORT ids BY nosort GET # GET n_*", "SORT ids BY h_*->f ALPHA",
                                 "SORT ids GET n_* STORE out", "LRANGE out 0 -1",
                                 "SORT ids BY w_* LIMIT 1 2 GET #", "SORT ids GET nostar",
                                 "SORT ids BY w_* ALPHA", "SET w_4 abc", "SORT ids BY w_*",
                                 "SORT ids BY nosort DESC"]),
    Case("patterns need read access to every key", [
        "ACL SETUSER sorter on nopass ~a* +@all", "ACL SETUSER reader on nopass %R~* ~a* +@all",
        "RPUSH a1 2 1", "AUTH sorter x", "SORT a1 BY w_*", "SORT_RO a1 GET #",
        "SORT a1 BY nosort", "SORT a1 BY w_* FOO", "SORT a1 FOO BY w_*", "AUTH reader x",
        "SORT a1 BY w_* GET #", "AUTH default x", "ACL DELUSER sorter reader"]),
]


@pytest.mark.parametrize("proto", [2, 3])
def test_sort_matches_redis(diff_pair: Pair, proto: int) -> None:
    problems = check_cases(diff_pair, CASES, proto)
    assert not problems, "\n".join(problems)
