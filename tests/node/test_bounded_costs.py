"""Commands whose cost could explode on a small input: the same replies as redis-server 7.0
(errors included) where Redis bounds them, and the node answering PING from another client
within 2 s while the worst case runs and right after it.

- LCS: Redis refuses when its table would pass ``proto-max-bulk-len``; below that ours is
  bit-parallel (a 10 KB string against itself used to take minutes of Python); IDX and the
  string itself walk back one Python step per character, refused beyond lcs.WALK_MAX
  characters, LEN beyond lcs.LEN_MAX.
- SRANDMEMBER / ZRANDMEMBER / HRANDFIELD with a negative count: Redis emits every pick (a count
  of -2**62 keeps it busy for ever); ours refuses more than RANDOM_PICKS_MAX.
- SETRANGE / APPEND / SETBIT / BITFIELD at the proto-max-bulk-len limits, LPOS MAXLEN 0, SORT
  LIMIT with huge bounds: Redis' replies and errors.
- RESTORE payloads claiming huge lengths: ``Bad data format`` at once.
- BITPOS over tens of MB made by one SETRANGE: whole blocks skipped at memory speed; the
  CRC-64 of DUMP / RESTORE payloads skips blocks of zeros likewise.
"""

from __future__ import annotations

import random
import time

import pytest

from slotgate.node.types.lcs import LEN_MAX, LEN_TOO_LONG, WALK_MAX, WALK_TOO_LONG
from slotgate.node.types.typeutil import RANDOM_PICKS_MAX, TOO_MANY_PICKS
from tests.node.diff import Case, Pair, check_cases
from tests.support import RawClient

PING_BOUND_S = 2.0
SMALL_BULK = 1048576  # proto-max-bulk-len's minimum: the limits reached with 1 MB strings
RESET_BULK = "CONFIG SET proto-max-bulk-len 536870912"

_rng = random.Random(12)
_A = "".join(_rng.choice("acgt") for _ in range(1500))
_B = "".join(_rng.choice("acgt") for _ in range(1300))

CASES = [
    Case("lcs results", [
        f"SET a {_A}", f"SET b {_B}", "LCS a b", "LCS a b LEN", "LCS b a",
        "LCS a b IDX MINMATCHLEN 4 WITHMATCHLEN", "LCS b a IDX", "LCS a a LEN",
        "SET x ohmytext", "SET y mynewtext", "LCS x y", "LCS x y IDX WITHMATCHLEN",
        "LCS x nokey", "LCS nokey x IDX", "LCS x y IDX LEN", "LCS x y FOO",
        "LPUSH l 1", "LCS l x",
    ]),
    Case("lcs table limit", [
        f"CONFIG SET proto-max-bulk-len {SMALL_BULK}", "SETRANGE a 510 x", "SETRANGE b 510 y",
        "LCS a b LEN", "LCS a b", "SETRANGE b 511 y", "LCS a b LEN", "LCS a b IDX",
        "LCS b a", "LCS a b IDX LEN", RESET_BULK,
    ]),
    Case("random counts", [
        "SADD s a b c", "ZADD z 1 a 2 b", "HSET h a 1 b 2",
        "SRANDMEMBER s -9223372036854775808", "ZRANDMEMBER z -9223372036854775808",
        "HRANDFIELD h -9223372036854775808", "ZRANDMEMBER z -9223372036854775807 WITHSCORES",
        "ZRANDMEMBER z -4611686018427387904 WITHSCORES",
        "HRANDFIELD h 4611686018427387904 WITHVALUES", "SRANDMEMBER nokey -9223372036854775807",
        "ZRANDMEMBER nokey -9223372036854775807", "HRANDFIELD nokey -9223372036854775807",
        ("SRANDMEMBER s 9223372036854775807", "sorted"),
    ]),
    Case("string size limits", [
        f"CONFIG SET proto-max-bulk-len {SMALL_BULK}",
        f"SETRANGE big {SMALL_BULK} x", f"SETRANGE big {SMALL_BULK - 1} x", "STRLEN big",
        "APPEND big x", "SETRANGE big 0 ''", f"SETRANGE big2 {SMALL_BULK} ''", "EXISTS big2",
        f"SETBIT bb {SMALL_BULK * 8} 1", f"SETBIT bb {SMALL_BULK * 8 - 1} 1", "STRLEN bb",
        f"BITFIELD bf SET u8 {SMALL_BULK * 8 - 1} 255", "STRLEN bf",
        f"BITFIELD_RO bf GET u8 {SMALL_BULK * 8 - 1}", f"BITFIELD bf SET u8 {SMALL_BULK * 8} 1",
        f"BITFIELD bf2 SET i64 {SMALL_BULK * 8 - 1} -1 GET i64 {SMALL_BULK * 8 - 1}",
        "STRLEN bf2", "DEL big bb bf bf2", RESET_BULK,
    ]),
    Case("lpos and sort bounds", [
        "RPUSH l a b c a", "LPOS l a MAXLEN 0", "LPOS l z MAXLEN 0", "LPOS l a COUNT 0 MAXLEN 0",
        "LPOS l a RANK -9223372036854775808", "LPOS l a RANK 9223372036854775807",
        "LPOS l a MAXLEN -1", "SORT l ALPHA LIMIT 0 9223372036854775807",
        "SORT l ALPHA LIMIT -9223372036854775808 9223372036854775807",
        "SORT l ALPHA LIMIT 9223372036854775807 9223372036854775807",
        "SORT l BY nosort GET # GET # GET # LIMIT 1 2",
    ]),
    Case("debug populate", [
        "DEBUG POPULATE -1", "DEBUG POPULATE abc", "DEBUG POPULATE 2 k -5",
        "DEBUG POPULATE 2 k abc", "DEBUG POPULATE 3 k 0", "GET k:0", "DEBUG POPULATE 2 p 3",
        "GET p:1", "DEBUG POPULATE 2 q 20", "GET q:1", "DEBUG POPULATE 0", "DBSIZE",
    ]),
]


@pytest.mark.parametrize("proto", [2, 3])
def test_same_replies_as_redis(diff_pair: Pair, proto: int) -> None:
    assert check_cases(diff_pair, CASES, proto) == []


def _served_meanwhile(port: int, *argv: str | bytes) -> bytes:
    """Run ``argv`` on one client; PING from another must be answered within PING_BOUND_S
    while it runs and once it has replied. Returns its reply."""
    with RawClient(port, timeout_s=60) as worker, RawClient(port, timeout_s=PING_BOUND_S) as probe:
        worker.send(*argv)
        deadline = time.monotonic() + 60
        while True:
            assert probe.call("PING") == b"+PONG\r\n"
            try:
                reply = worker.read(timeout_s=0.2)
                break
            except TimeoutError:
                assert time.monotonic() < deadline, "no reply"
        assert probe.call("PING") == b"+PONG\r\n"
        return reply


def _err(text: str) -> bytes:
    return b"-" + text.encode() + b"\r\n"


def test_lcs_worst_cases_keep_the_node_answering(diff_pair: Pair) -> None:
    port = diff_pair.ours_port
    rng = random.Random(5)
    with RawClient(port) as c:
        c.call("FLUSHALL")
        c.call("SET", "a", rng.randbytes(11000))
        c.call("SET", "b", rng.randbytes(11000))
        c.call("SET", "short", rng.randbytes(64))
        c.call("SETRANGE", "long", WALK_MAX - 65, "x")
        c.call("SETRANGE", "longer", WALK_MAX - 64, "x")
        c.call("SET", "one", "x")
        c.call("SETRANGE", "huge", LEN_MAX - 2, "x")
        c.call("SETRANGE", "huger", LEN_MAX - 1, "x")
    # 121 M cells of Redis' table: under 512 MB, so computed, LEN and IDX
    assert _served_meanwhile(port, "LCS", "a", "b", "LEN").startswith(b":")
    assert _served_meanwhile(port, "LCS", "a", "b", "IDX").startswith(b"*4\r\n$7\r\nmatches")
    # the longest walk allowed, and one character more
    assert _served_meanwhile(port, "LCS", "short", "long", "IDX").startswith(b"*4\r\n")
    assert _served_meanwhile(port, "LCS", "short", "longer") == _err(WALK_TOO_LONG)
    assert _served_meanwhile(port, "LCS", "longer", "short", "IDX") == _err(WALK_TOO_LONG)
    # a 1-byte string against the longest string LEN takes (Redis would take 4 times longer)
    assert _served_meanwhile(port, "LCS", "one", "huge", "LEN") == b":1\r\n"
    assert _served_meanwhile(port, "LCS", "huger", "one", "LEN") == _err(LEN_TOO_LONG)
    with RawClient(port) as c:
        c.call("FLUSHALL")


def test_random_counts_are_bounded(diff_pair: Pair) -> None:
    port = diff_pair.ours_port
    with RawClient(port) as c:
        c.call("FLUSHALL")
        c.call("SADD", "s", "a", "b", "c")
        c.call("ZADD", "z", "1", "a", "2", "b")
        c.call("HSET", "h", "a", "1", "b", "2")
    n = RANDOM_PICKS_MAX
    for argv in (("SRANDMEMBER", "s"), ("ZRANDMEMBER", "z"), ("HRANDFIELD", "h")):
        assert _served_meanwhile(port, *argv, str(-n)).startswith(b"*%d\r\n" % n)
        assert _served_meanwhile(port, *argv, str(-n - 1)) == _err(TOO_MANY_PICKS)
        assert _served_meanwhile(port, *argv, "-9223372036854775807") == _err(TOO_MANY_PICKS)
    assert _served_meanwhile(port, "ZRANDMEMBER", "z", str(-n), "WITHSCORES").startswith(
        b"*%d\r\n" % (2 * n))
    assert _served_meanwhile(port, "HRANDFIELD", "h", str(-n - 1), "WITHVALUES") == _err(
        TOO_MANY_PICKS)


def test_debug_populate_is_bounded(diff_pair: Pair) -> None:
    """Redis tries any count and size (DEBUG POPULATE 2**62 never answers); ours refuses more
    than POPULATE_MAX keys or values over 512 MB with Redis' error for a count too big."""
    port = diff_pair.ours_port
    with RawClient(port) as c:
        c.call("FLUSHALL")
    oom = b"-ERR OOM in dictTryExpand\r\n"
    assert _served_meanwhile(port, "DEBUG", "POPULATE", "4611686018427387904") == oom
    assert _served_meanwhile(port, "DEBUG", "POPULATE", "1", "k", "100000000000000") == oom
    assert _served_meanwhile(port, "DEBUG", "POPULATE", "100000", "many") == b"+OK\r\n"
    with RawClient(port) as c:
        assert c.call("DBSIZE") == b":100000\r\n"
        c.call("FLUSHALL")


def test_random_members_of_a_big_sorted_set(diff_pair: Pair) -> None:
    """ZRANDMEMBER of nearly all of 200,000 members, and of many repeated picks: each pick
    scanned the chunks of the set (seconds for 200,000)."""
    port = diff_pair.ours_port
    size = 200_000
    with RawClient(port, timeout_s=60) as c:
        c.call("FLUSHALL")
        for start in range(0, size, 10_000):
            argv: list[str] = ["ZADD", "z"]
            for i in range(start, start + 10_000):
                argv += [str(i), f"m{i}"]
            c.call(*argv)
    assert _served_meanwhile(port, "ZRANDMEMBER", "z", str(size - 1)).startswith(
        b"*%d\r\n" % (size - 1))
    assert _served_meanwhile(port, "ZRANDMEMBER", "z", str(-RANDOM_PICKS_MAX),
                             "WITHSCORES").startswith(b"*%d\r\n" % (2 * RANDOM_PICKS_MAX))
    with RawClient(port) as c:
        c.call("FLUSHALL")


def test_bitpos_over_a_long_run(diff_pair: Pair) -> None:
    """BITPOS over 32 MB of zeros (and of ones) made by one SETRANGE: it was a Python loop per
    byte (a minute for 100 MB); the same answers as redis-server."""
    size = 32 * 1024 * 1024
    lines = [("SETRANGE", "big", str(size), "x"), ("BITPOS", "big", "1"),
             ("BITPOS", "big", "1", "0", "-1", "BIT"), ("BITPOS", "big", "0", "-1"),
             ("BITOP", "NOT", "ones", "big"), ("BITPOS", "ones", "0"),
             ("BITPOS", "ones", "0", "3", "-2"), ("DEL", "big", "ones")]
    for port in (diff_pair.real_port, diff_pair.ours_port):
        with RawClient(port) as c:
            c.call("FLUSHALL")
    for argv in lines:
        with RawClient(diff_pair.real_port, timeout_s=60) as real:
            want = real.call(*argv)
        assert _served_meanwhile(diff_pair.ours_port, *argv) == want, argv


def test_dump_and_restore_of_a_long_run(diff_pair: Pair) -> None:
    """DUMP and RESTORE of 32 MB made by one SETRANGE: the payload's CRC-64 took a second or
    more per 40 MB in Python; now zero blocks are skipped. Each side restores the other's."""
    size = 32 * 1024 * 1024
    for port in (diff_pair.real_port, diff_pair.ours_port):
        with RawClient(port) as c:
            c.call("FLUSHALL")
            c.call("SETRANGE", "big", str(size), "x")
    ours_payload = _served_meanwhile(diff_pair.ours_port, "DUMP", "big")
    with RawClient(diff_pair.real_port, timeout_s=60) as real:
        real_payload = real.call("DUMP", "big")
        body = ours_payload[ours_payload.index(b"\r\n") + 2 : -2]
        assert real.call("RESTORE", "copy", "0", body) == b"+OK\r\n"
        assert real.call("DEBUG", "DIGEST-VALUE", "copy") == real.call("DEBUG", "DIGEST-VALUE",
                                                                        "big")
        real.call("FLUSHALL")
    body = real_payload[real_payload.index(b"\r\n") + 2 : -2]
    assert _served_meanwhile(diff_pair.ours_port, "RESTORE", "copy", "0", body) == b"+OK\r\n"
    with RawClient(diff_pair.ours_port, timeout_s=60) as ours:
        assert ours.call("GETRANGE", "copy", str(size - 2), "-1") == b"$3\r\n\x00\x00x\r\n"
        ours.call("FLUSHALL")


def _restore_payload(body: bytes) -> bytes:
    from slotgate.node.persistence.rdb import crc64

    body += (10).to_bytes(2, "little")
    return body + crc64(body).to_bytes(8, "little")


HUGE_CLAIMS = {
    "lzf": bytes([0, 0xC3, 4, 0x80]) + (0xFFFFFFFF).to_bytes(4, "big") + b"\x03abcd",
    "string": bytes([0, 0x81]) + (1 << 62).to_bytes(8, "big") + b"abc",
    "set": bytes([2, 0x81]) + (1 << 62).to_bytes(8, "big") + b"\x01a",
    "quicklist": bytes([18, 0x81]) + (1 << 62).to_bytes(8, "big") + b"\x01\x01a",
}


@pytest.mark.parametrize("kind", sorted(HUGE_CLAIMS))
def test_restore_of_huge_claimed_lengths(diff_pair: Pair, kind: str) -> None:
    payload = _restore_payload(HUGE_CLAIMS[kind])
    with RawClient(diff_pair.real_port) as real:
        want = real.call("RESTORE", "k", "0", payload)
    assert want == b"-ERR Bad data format\r\n"
    assert _served_meanwhile(diff_pair.ours_port, "RESTORE", "k", "0", payload) == want


@pytest.mark.parametrize("body", [
    bytes([4, 0x81]) + (1 << 40).to_bytes(8, "big") + b"\x01a\x01b",  # redis-server stalls
    bytes([5, 0x81]) + (1 << 40).to_bytes(8, "big") + b"\x01a" + bytes(8),
    bytes([11, 12]) + (2).to_bytes(4, "little") + (1 << 31).to_bytes(4, "little") + b"\x01\x00",
])
def test_restore_of_huge_claims_redis_chokes_on(diff_pair: Pair, body: bytes) -> None:
    """A hash claiming 2**40 fields keeps redis-server 7.0 busy (not compared); ours refuses."""
    reply = _served_meanwhile(diff_pair.ours_port, "RESTORE", "k", "0", _restore_payload(body))
    assert reply == b"-ERR Bad data format\r\n"
