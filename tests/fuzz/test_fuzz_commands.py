"""Random argument vectors from the command table against our node and redis-server 7.0 (see
tests/fuzz/cmdfuzz.py): the same reply class (error or not) for every vector, and no vector
taking ``TIME_RATIO`` times Redis' time. CI runs ``VECTORS`` vectors from a fixed seed (so a
failure reproduces); bench/fuzz_commands.py runs more with fresh seeds. The findings so far
are kept below as cases, with their exact replies."""

from __future__ import annotations

import pytest

from tests.fuzz import cmdfuzz
from tests.node.diff import Case, Pair, check_cases
from tests.support import RawClient

VECTORS = 1000
SEED = 17

FINDINGS = [
    Case("ZPOPMAX with count 0 checks the type first",
         ["XADD x 1-1 f v", "ZPOPMAX x 0", "ZPOPMIN x 0", "ZPOPMAX missing 0"]),
    Case("COPY DB beyond an int",
         ["SET a 1", "COPY a b DB 2147483648", "COPY a b DB -2147483649", "COPY a b DB 16",
          "COPY a b DB x", "COPY a b DB 100 DB x", "COPY a b DB 1 DB x", "MOVE a 2147483648", "MOVE a -2147483649", "MOVE a 16"]),
    Case("XGROUP SETID parses every ENTRIESREAD before the key and the argument count",
         ["XGROUP SETID x g 0 ENTRIESREAD $ $", "XGROUP SETID x g 0 ENTRIESREAD 1 $",
          "XGROUP SETID x g 0 ENTRIESREAD 1 ENTRIESREAD 2", "XADD x 1-1 f v",
          "XGROUP CREATE x g 0", "XGROUP SETID x g 0 ENTRIESREAD 1 ENTRIESREAD 2",
          "XGROUP SETID x g 0 ENTRIESREAD 1", "XGROUP SETID x g 0 ENTRIESREAD x"]),
    Case("ZRANGE by rank takes LIMIT with a count of -1",
         ["ZADD z 1 a 2 b", "ZRANGE z 0 -1 LIMIT 5 -1", "ZRANGE z 0 -1 LIMIT 0 -5",
          "ZRANGE z 0 -1 LIMIT 1 1", "ZRANGE z x 1 LIMIT 10 -1", "ZRANGESTORE d z 0 -1 LIMIT 3 -1"]),
    Case("scan cursors and score ranges read as C strings: a NUL ends them",
         ["ZADD z 1 a 2 b", "SADD s a", "HSET h f v", 'ZSCAN z "\\x00abc"', 'SSCAN s "7\\x00x"',
          'HSCAN h "\\x00"', 'SCAN "\\x00zz"', 'ZRANGEBYSCORE z "\\x00x" 5', 'ZCOUNT z "\\x00" 1',
          'ZRANGE z "(\\x00" 1 BYSCORE', 'ZRANGESTORE d l "\\x00" -1 BYSCORE']),
    Case("NOGROUP texts stop at a NUL byte as C strings do",
         ["XADD x 1-1 f v", 'XCLAIM x "g\\x00h" c 0 1-1', 'XCLAIM "mi\\x00ss" g c 0 1-1',
          'XREADGROUP GROUP "g\\x00h" c STREAMS x >', 'XPENDING x "g\\x00h"',
          'PEXPIREAT x 1 "NX\\x00GT"']),
]


@pytest.mark.parametrize("proto", [2, 3])
def test_findings(diff_pair: Pair, proto: int) -> None:
    assert check_cases(diff_pair, FINDINGS, proto) == []


def test_random_vectors(diff_pair: Pair) -> None:
    with RawClient(diff_pair.ours_port) as ours, RawClient(diff_pair.real_port) as real:
        res = cmdfuzz.run(ours, real, VECTORS, SEED)
    print(f"{res.vectors} vectors; worst time ratio {res.worst_ratio[0]:.1f}: {res.worst_ratio[1]}; "
          f"slowest {res.slowest_cpu_s * 1000:.0f} ms CPU; peak RSS +{res.rss_growth_bytes / 1e6:.1f} MB")
    assert not res.bounds, "\n".join(res.bounds)
    assert res.vectors == VECTORS
    assert not res.class_mismatches, "\n".join(res.class_mismatches)
    assert not res.slow, "\n".join(res.slow)
    assert not res.error_text_mismatches, "\n".join(res.error_text_mismatches)
