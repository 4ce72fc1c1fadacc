"""Random command sequences over the collection types (tests/node/types_gen.py), run on our
node and on a real redis-server 7.0: every reply must be byte-identical (sorted only where
Redis' own order is its hashtable's)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.node.types_diff import Pair, flush, servers, unordered  # noqa: F401
from tests.node.types_gen import UNORDERED, command


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(proto=st.sampled_from([2, 3]), cmds=st.lists(command(), min_size=1, max_size=40))
def test_random_sequences_match_redis(servers, proto, cmds):  # noqa: F811
    flush(servers)
    p = Pair(servers, proto)
    try:
        for argv in cmds:
            real, ours = p.both(*argv)
            if argv[0].lower() in UNORDERED:
                assert unordered(ours) == unordered(real), (argv, real, ours)
            else:
                assert ours == real, (argv, real, ours)
    finally:
        p.close()
