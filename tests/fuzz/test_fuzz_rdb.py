"""Fuzzing the DUMP payload reader (node/persistence/rdb.py), which RESTORE runs on bytes a
client sends: every value dumped loads back equal (big ones are in the corpus); any payload, a dumped one mangled (a type
byte, a length, a blob header, cut short) or the kept corpus (every RDB object type a 7.0
server loads), loads or raises RdbError (Redis' reply text), in bounded time and without
building anything much larger than the payload."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slotgate.node.persistence import rdb
from tests.fuzz.corpus import bounded, corpus_params, fuzz_settings, mutated

MEMBERS = st.binary(max_size=12) | st.integers(-(1 << 63), (1 << 63) - 1).map(
    lambda n: str(n).encode())
VALUES = st.one_of(
    st.tuples(st.just("string"), MEMBERS | st.binary(max_size=100)),
    st.tuples(st.just("list"), st.lists(MEMBERS, min_size=1, max_size=20)),
    st.tuples(st.just("set"), st.sets(MEMBERS, min_size=1, max_size=20)),
    st.tuples(st.just("hash"), st.dictionaries(MEMBERS, MEMBERS, min_size=1, max_size=12)),
    st.tuples(st.just("zset"), st.dictionaries(
        MEMBERS, st.floats(allow_nan=False) | st.integers(-1000, 1000).map(float),
        min_size=1, max_size=12).map(lambda d: sorted(((m, s) for m, s in d.items()),
                                                       key=lambda p: (p[1], p[0])))),
)
LZF_RATIO_MAX = 100  # LZF expands at most about 88 times (a 264-byte match per 3 bytes)


def loads_or_refuses(payload: bytes) -> object:
    with bounded("rdb.load"):
        try:
            kind, value = rdb.load(payload, check_crc=False)
        except rdb.RdbError as exc:
            assert str(exc).startswith("ERR "), exc
            return None
    size = len(value) if hasattr(value, "__len__") else 1
    assert size <= len(payload) * LZF_RATIO_MAX, (kind, size)  # nothing built from thin air
    return value


@fuzz_settings()
@given(VALUES)
def test_round_trip(kv: tuple[str, rdb.Value]) -> None:
    kind, value = kv
    assert rdb.load(rdb.dump(kind, value)) == (kind, value)


@fuzz_settings()
@given(VALUES, st.lists(st.tuples(st.integers(0, 1 << 12), st.integers(0, 255)), min_size=1,
                        max_size=4), st.integers(0, 40))
def test_mangled_dump(kv: tuple[str, rdb.Value], edits: list[tuple[int, int]], cut: int) -> None:
    data = bytearray(rdb.dump(*kv))
    for where, byte in edits:
        data[where % len(data)] = byte
    loads_or_refuses(bytes(data))
    loads_or_refuses(bytes(data[:max(0, len(data) - cut)]))


@pytest.mark.parametrize("data", corpus_params("dump"))
def test_corpus(data: bytes) -> None:
    loads_or_refuses(data)


@fuzz_settings()
@given(mutated("dump"))
def test_mutated(data: bytes) -> None:
    loads_or_refuses(data)
