"""RequestReader: every reader parses with one shared hiredis reader (protocol/resp.py), so
one connection's bytes must never leak into another's requests, whatever the chunking."""

from __future__ import annotations

import random

from slotgate.protocol.resp import ProtocolError, RequestReader, encode_command


def _parse_alone(data: bytes) -> list[list[bytes]]:
    r = RequestReader()
    r.feed(data)
    return r.get_requests()


def test_partial_request_in_one_reader_does_not_reach_another() -> None:
    # A bulk holding "\r\n*" makes the fast path's span end inside that argument.
    a_data = encode_command(b"SET", b"k", b"x\r\n*1\r\n$4\r\nPING\r\n") + encode_command(b"GET", b"k")
    b_data = encode_command(b"PING") + encode_command(b"ECHO", b"hello")
    cut = a_data.index(b"PING")  # inside SET's value
    a, b = RequestReader(), RequestReader()
    a.feed(a_data[:cut])
    got_a = a.get_requests()
    b.feed(b_data)
    assert b.get_requests() == [[b"PING"], [b"ECHO", b"hello"]]
    a.feed(a_data[cut:])
    got_a += a.get_requests()
    assert got_a == [[b"SET", b"k", b"x\r\n*1\r\n$4\r\nPING\r\n"], [b"GET", b"k"]]


def test_interleaved_readers_match_each_reader_alone() -> None:
    rng = random.Random(15)
    streams = []
    for n in range(6):
        reqs = [encode_command(b"SET", b"key:%d:%d" % (n, i),
                               rng.choice([b"v", b"a\r\n*2\r\n", b"$3\r\n", b"x" * 300]))
                for i in range(40)]
        streams.append(b"".join(reqs))
    readers = [RequestReader() for _ in streams]
    got: list[list[list[bytes]]] = [[] for _ in streams]
    offsets = [0] * len(streams)
    while any(off < len(s) for off, s in zip(offsets, streams, strict=True)):
        i = rng.randrange(len(streams))
        step = rng.randint(1, 64)
        chunk = streams[i][offsets[i]:offsets[i] + step]
        offsets[i] += len(chunk)
        readers[i].feed(chunk)
        got[i] += readers[i].get_requests()
        if rng.random() < 0.1:  # another connection sends garbage meanwhile
            bad = RequestReader()
            bad.feed(b"*2\r\n$3\r\nGET\r\n$x\r\n")
            try:
                bad.get_requests()
            except ProtocolError:
                pass
    assert got == [_parse_alone(s) for s in streams]
