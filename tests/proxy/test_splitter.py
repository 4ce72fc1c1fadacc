"""splitter.py: per-slot planning and reply merging (pure functions)."""

from __future__ import annotations

from slotgate.protocol.slots import key_slot
from slotgate.proxy.routing import splitter


def test_split_groups_by_slot_in_first_appearance_order() -> None:
    argv = [b"MGET", b"{a}1", b"{b}1", b"{a}2", b"{c}1", b"{b}2"]
    parts = splitter.split_by_slot(argv, 1, 1)
    assert [p.slot for p in parts] == [key_slot(b"a"), key_slot(b"b"), key_slot(b"c")]
    assert [p.argv for p in parts] == [
        [b"MGET", b"{a}1", b"{a}2"], [b"MGET", b"{b}1", b"{b}2"], [b"MGET", b"{c}1"]]
    assert [p.key_indices for p in parts] == [[0, 2], [1, 4], [3]]


def test_split_mset_keeps_values_with_keys() -> None:
    parts = splitter.split_by_slot([b"MSET", b"{a}x", b"1", b"{b}y", b"2", b"{a}z", b"3"], 1, 2)
    assert [p.argv for p in parts] == [[b"MSET", b"{a}x", b"1", b"{a}z", b"3"],
                                       [b"MSET", b"{b}y", b"2"]]


def test_merge_in_order_restores_key_order() -> None:
    argv = [b"MGET", b"{a}1", b"{b}1", b"{a}2"]
    parts = splitter.split_by_slot(argv, 1, 1)
    replies = [b"*2\r\n$2\r\nA1\r\n$-1\r\n", b"*1\r\n$2\r\nB1\r\n"]
    assert splitter.merge_in_order(parts, replies, 3) == b"*3\r\n$2\r\nA1\r\n$2\r\nB1\r\n$-1\r\n"


def test_merges_report_first_error() -> None:
    err = b"-CLUSTERDOWN The cluster is down\r\n"
    assert splitter.merge_sum([b":1\r\n", err, b"-ERR x\r\n"]) == err
    assert splitter.merge_all_ok([b"+OK\r\n", err]) == err
    assert splitter.merge_all_ok([b"+OK\r\n", b"+OK\r\n"]) == b"+OK\r\n"
    assert splitter.merge_sum([b":1\r\n", b":0\r\n", b":5\r\n"]) == b":6\r\n"


def test_merge_concat_and_and() -> None:
    assert splitter.merge_concat([b"*1\r\n$1\r\na\r\n", b"*0\r\n", b"*1\r\n$1\r\nb\r\n"]) == \
        b"*2\r\n$1\r\na\r\n$1\r\nb\r\n"
    assert splitter.merge_and_ints([b"*2\r\n:1\r\n:1\r\n", b"*2\r\n:1\r\n:0\r\n"]) == \
        b"*2\r\n:1\r\n:0\r\n"


def test_scan_cursor_round_trip_and_rejects_garbage() -> None:
    for index, cursor in [(0, 0), (1, 0), (2, 12345), (1023, (1 << 40) + 7)]:
        encoded = splitter.scan_encode_cursor(index, cursor)
        assert splitter.scan_decode_cursor(encoded) == (index, cursor)
    assert splitter.scan_decode_cursor(b"-1") is None
    assert splitter.scan_decode_cursor(b"abc") is None
    assert splitter.scan_decode_cursor(str(1 << 64).encode()) is None
