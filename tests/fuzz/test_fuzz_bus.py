"""Fuzzing the cluster bus decoder (node/cluster/bus.py): any message a peer can send, valid or
mangled (a header field, a count, a length, an extension, cut short), decodes or raises
BusError (the link is then closed), in bounded time; a stream of messages cut anywhere splits
into the same messages; a valid message decodes back to what was encoded."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slotgate.node.cluster import bus
from tests.fuzz.corpus import bounded, chunked, corpus_params, fuzz_settings, mutated

NAMES = st.binary(min_size=bus.NAME_LEN, max_size=bus.NAME_LEN)
U16 = st.integers(0, 0xFFFF)
IP = st.from_regex(r"\A[0-9a-f.:]{0,45}\Z")


@st.composite
def messages(draw: st.DrawFn) -> bus.Message:
    t = draw(st.sampled_from(sorted(bus._BODY)) | st.integers(0, 12))
    m = bus.Message(type=t, sender=draw(NAMES), current_epoch=draw(st.integers(0, 1 << 40)),
                    config_epoch=draw(st.integers(0, 1 << 40)), myip=draw(IP),
                    port=draw(U16), cport=draw(U16), pport=draw(U16),
                    flags=draw(U16), state=draw(st.integers(0, 1)))
    if t in (bus.PING, bus.PONG, bus.MEET):
        m.gossip = draw(st.lists(st.builds(
            bus.Gossip, NAMES, st.integers(0, 0xFFFFFFFF), st.integers(0, 0xFFFFFFFF), IP,
            U16, U16, U16, U16), max_size=3))
        m.hostname = draw(st.none() | st.from_regex(r"\A[a-z0-9.-]{1,30}\Z"))
    elif t == bus.FAIL:
        m.fail_name = draw(NAMES)
    elif t in (bus.PUBLISH, bus.PUBLISHSHARD):
        m.channel, m.message = draw(st.binary(max_size=30)), draw(st.binary(max_size=60))
    elif t == bus.UPDATE:
        m.update_epoch, m.update_name = draw(st.integers(0, 1 << 40)), draw(NAMES)
        m.update_slots = draw(st.binary(max_size=8)).ljust(bus.SLOTS_BYTES, b"\0")
    elif t == bus.MODULE:
        m.module_id, m.module_type = draw(st.integers(0, 1 << 60)), draw(st.integers(0, 255))
        m.module_payload = draw(st.binary(max_size=40))
    return m


def decodes_or_refuses(data: bytes) -> bus.Message | None:
    with bounded("bus.decode"):
        try:
            return bus.decode(data)
        except bus.BusError:
            return None


def field_edits(data: bytes, edits: list[tuple[int, int]]) -> bytes:
    """``data`` with 32-bit words overwritten where the header's counts and lengths live
    (and anywhere in the body)."""
    out = bytearray(data)
    for where, value in edits:
        at = where % max(1, len(out) - 4)
        out[at:at + 4] = struct.pack(">I", value)
    return bytes(out)


@fuzz_settings()
@given(messages())
def test_round_trip(m: bus.Message) -> None:
    data = bus.encode(m)
    got = bus.decode(data)
    if m.type in bus._BODY or m.type < bus.TYPE_COUNT:
        if m.type in (bus.PING, bus.PONG, bus.MEET):
            m.mflags = bytes([m.mflags[0] | bus.MF_EXT_DATA]) + m.mflags[1:]
        assert got == m


@fuzz_settings()
@given(messages(), st.lists(st.tuples(st.sampled_from((4, 8, 12, 1994, 2240, 2256, 2260, 2264)) |
                                      st.integers(0, 1 << 13),
                                      st.sampled_from((0, 1, 7, 8, 104, 0xFFFF, 0x7FFFFFFF,
                                                       0xFFFFFFFF)) | st.integers(0, (1 << 32) - 1)),
                             min_size=1, max_size=3),
       st.integers(0, 1 << 13))
def test_mangled_fields(m: bus.Message, edits: list[tuple[int, int]], cut: int) -> None:
    data = field_edits(bus.encode(m), edits)
    decodes_or_refuses(data)
    decodes_or_refuses(data[:len(data) - cut % 64])


@pytest.mark.parametrize("data", corpus_params("bus"))
def test_corpus(data: bytes) -> None:
    decodes_or_refuses(data)


@fuzz_settings()
@given(mutated("bus"))
def test_mutated(data: bytes) -> None:
    decodes_or_refuses(data)


@fuzz_settings()
@given(st.lists(messages(), min_size=1, max_size=3), st.lists(st.integers(0, 1 << 14),
                                                                max_size=6))
def test_stream(ms: list[bus.Message], cuts: list[int]) -> None:
    stream = [bus.encode(m) for m in ms]
    reader = bus.FrameReader()
    got: list[bytes] = []
    for piece in chunked(b"".join(stream), cuts):
        reader.feed(piece)
        got += reader.messages()
    assert got == stream
