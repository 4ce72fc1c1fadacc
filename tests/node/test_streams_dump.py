"""Streams in Redis 7.0's RDB form: DUMP payloads of our node RESTORE on redis-server and back
with identical XINFO STREAM FULL (groups, PELs, consumers, delivery times included); small
payloads (where Redis' LZF compression does not apply) are byte-identical; snapshots keep
streams across a restart; damaged payloads are refused, never crash the node."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import hiredis
import pytest
import redis

from slotgate.node.persistence import lzf, rdb
from slotgate.node.types.stream_rdb import LZF_MAX_STREAM_BYTES
from tests.node.diff import Pair
from tests.support import ManagedProcess, RawClient, running, slotgate_node, wait_until


def _value(raw: bytes) -> object:
    r = hiredis.Reader()
    r.feed(raw)
    return r.gets()


def _build(c: RawClient) -> None:
    c.call("FLUSHALL")
    c.call("XADD", "small", "1-1", "a", "1", "b", "2")
    c.call("XADD", "small", "2-1", "a", "1", "b", "3")
    c.call("XADD", "plain", "1-1", "a", "1", "b", "2")
    c.call("XADD", "plain", "5-0", "x", "12345678901")
    c.call("XDEL", "plain", "1-1")
    c.call("XGROUP", "CREATE", "small", "g", "0")
    c.call("XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "STREAMS", "small", ">")
    for i in range(1, 700):
        c.call("XADD", "big", f"{i}-{i % 5}", f"f{i % 4}", "v" * (i % 90), "n", str(i))
    c.call("XDEL", "big", "3-3", "500-0", "501-1")
    c.call("XTRIM", "big", "MAXLEN", "650")
    c.call("XGROUP", "CREATE", "big", "g2", "$", "ENTRIESREAD", "7")
    c.call("XGROUP", "CREATE", "big", "a-group-name-longer-than-twenty-bytes-" * 2, "0")
    c.call("XGROUP", "CREATE", "big", "12345", "0")
    c.call("XGROUP", "CREATE", "small", "g1", "0")
    c.call("XGROUP", "CREATE", "small", "12345", "0")
    c.call("XGROUP", "CREATECONSUMER", "small", "12345", "678")
    c.call("XREADGROUP", "GROUP", "g1", "c1", "COUNT", "5", "STREAMS", "small", ">")
    c.call("XADD", "empty", "1-1", "a", "1")
    c.call("XDEL", "empty", "1-1")
    c.call("XGROUP", "CREATE", "empty", "g", "$")
    c.call("XGROUP", "CREATE", "bare", "g", "$", "MKSTREAM")


KEYS = ("small", "plain", "big", "empty", "bare")
SAME_BYTES = ("plain", "big", "empty", "bare")  # no clock readings in them


def _full(c: RawClient, key: str) -> bytes:
    return c.call("XINFO", "STREAM", key, "FULL", "COUNT", "0")


def test_payloads_restore_across_servers(diff_pair: Pair) -> None:
    ours, real = RawClient(diff_pair.ours_port), RawClient(diff_pair.real_port)
    try:
        _build(ours)
        _build(real)
        for key in KEYS:
            mine, theirs = _value(ours.call("DUMP", key)), _value(real.call("DUMP", key))
            assert isinstance(mine, bytes) and isinstance(theirs, bytes)
            if key in SAME_BYTES:  # LZF-compressed listpacks included
                assert mine == theirs, key
            assert ours.call("RESTORE", key + ":r", "0", theirs) == b"+OK\r\n"
            assert real.call("RESTORE", key + ":r", "0", mine) == b"+OK\r\n"
            # each side's copy equals the other side's original, clock readings included
            assert _full(ours, key + ":r") == _full(real, key)
            assert _full(real, key + ":r") == _full(ours, key)
            assert ours.call("TYPE", key + ":r") == b"+stream\r\n"
        for conn in (ours, real):  # rdbcompression no: plain listpacks on both sides
            conn.call("CONFIG", "SET", "rdbcompression", "no")
        try:
            assert ours.call("DUMP", "big") == real.call("DUMP", "big")
        finally:
            for conn in (ours, real):
                conn.call("CONFIG", "SET", "rdbcompression", "yes")
    finally:
        ours.close()
        real.close()


@pytest.mark.skipif(not lzf.COMPILED, reason="pure Python compresses streams up to 256 KB only")
def test_large_stream_dump_is_redis_bytes(diff_pair: Pair) -> None:
    """A stream of more than LZF_MAX_STREAM_BYTES of listpacks (and a group): the compiled
    build LZF-compresses every listpack as Redis does, so the DUMP is redis-server's."""
    rng = random.Random(5)
    words = [b"alpha", b"beta", b"gamma", b"delta", b"%d" % rng.getrandbits(40)]
    conns = [redis.Redis(port=port) for port in (diff_pair.ours_port, diff_pair.real_port)]
    try:
        entries = []
        for i in range(1, 3001):
            value = b" ".join(rng.choice(words) + b"%d" % rng.randrange(1000) for _ in range(14))
            entries.append((f"{i}-{i % 3}", {b"f%d" % (i % 5): value, b"n": b"%d" % i}))
        for r in conns:
            r.delete("huge")
            pipe = r.pipeline(transaction=False)
            for sid, fields in entries:
                pipe.xadd("huge", fields, id=sid)
            pipe.xgroup_create("huge", "readers", id="1500-0")
            pipe.execute()
        mine, theirs = (r.dump("huge") for r in conns)
        assert mine is not None and theirs is not None
        assert len(theirs) > LZF_MAX_STREAM_BYTES // 2  # compressed, yet large
        assert mine == theirs
        assert conns[0].restore("huge:r", 0, theirs) and conns[1].restore("huge:r", 0, mine)
        assert conns[0].xlen("huge:r") == conns[1].xlen("huge:r") == 3000
    finally:
        for r in conns:
            r.delete("huge", "huge:r")
            r.close()


def test_damaged_payloads_are_refused(diff_pair: Pair) -> None:
    ours = RawClient(diff_pair.ours_port)
    try:
        _build(ours)
        payload = _value(ours.call("DUMP", "big"))
        assert isinstance(payload, bytes)
        body = payload[:-10]
        rnd = random.Random(7)
        for i in range(200):
            b = bytearray(body)
            if i % 2:
                b = b[: rnd.randrange(1, len(b))]
            else:
                for _ in range(rnd.randrange(1, 4)):
                    b[rnd.randrange(1, len(b))] = rnd.randrange(256)
            tail = bytes(b) + payload[-10:-8]
            forged = tail + rdb.crc64(tail).to_bytes(8, "little")
            reply = ours.call("RESTORE", f"bad{i}", "0", forged)
            assert reply == b"+OK\r\n" or reply.startswith(b"-ERR Bad data format"), reply
        assert ours.call("PING") == b"+PONG\r\n"
    finally:
        ours.close()


def _survives_restart(node: ManagedProcess, persist: Callable[[RawClient], None]) -> None:
    """Build the streams, ``persist`` them, restart: every stream reads back the same."""
    with running(node):
        c = RawClient(node.port)
        _build(c)
        persist(c)
        before = {k: _full(c, k) for k in KEYS}
        c.close()
        node.stop()
        node.start()
        c = RawClient(node.port)
        try:
            assert {k: _full(c, k) for k in KEYS} == before
        finally:
            c.close()


def test_snapshot_keeps_streams(tmp_path: Path) -> None:
    _survives_restart(slotgate_node(tmp_path), lambda c: c.call("SAVE"))


def _rewrite(c: RawClient) -> None:
    assert c.call("BGREWRITEAOF").startswith(b"+")
    wait_until(lambda: b"aof_rewrite_in_progress:0" in c.call("INFO", "persistence")
               and b"aof_last_bgrewrite_status:ok" in c.call("INFO", "persistence"),
               what="AOF rewrite done")
    c.call("XADD", "small", "9-9", "after", "rewrite")


def test_aof_rewrite_keeps_streams(tmp_path: Path) -> None:
    _survives_restart(slotgate_node(tmp_path, extra=["--appendonly", "yes"]), _rewrite)
