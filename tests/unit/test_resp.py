"""protocol/resp.py: request reader, reply framer, encoders -- with a real redis-server as oracle."""

from __future__ import annotations

import random
import socket

import hiredis
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from slotgate.protocol import resp
from slotgate.protocol.resp import (
    Attribute,
    BigNumber,
    ProtocolError,
    Push,
    Raw,
    ReplyFramer,
    RequestReader,
    RespError,
    Verbatim,
    encode,
    encode_command,
    format_double,
    format_long_double,
    split_args,
    to_long_double,
)
from tests.support import RawClient, wait_until


def SlowReader(**limits: int) -> RequestReader:
    """The exact Python parser alone: the reference the hiredis fast path must agree with.
    (An instance setting, not a subclass: the compiled build's classes cannot be subclassed.)"""
    reader = RequestReader(**limits)
    reader.use_hiredis = False
    return reader


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    out, last = [], 0
    for p in points:
        out.append(data[last:p])
        last = p
    out.append(data[last:])
    return out


def read_all(reader: RequestReader, chunks: list[bytes]) -> tuple[list[list[bytes]], str | None]:
    """Feed chunk by chunk, collect requests; the error text if one was raised."""
    got: list[list[bytes]] = []
    try:
        for c in chunks:
            reader.feed(c)
            got.extend(reader.get_requests())
        while more := reader.get_requests():  # an error after good requests comes next call
            got.extend(more)
    except ProtocolError as exc:
        return got, str(exc)
    return got, None


# -- request reader: examples ------------------------------------------------------------------


def test_multibulk_pipeline_and_partial_tail() -> None:
    r = RequestReader()
    data = encode_command("SET", "k", "v") * 3 + encode_command("GET", "k")
    r.feed(data[:-3])
    assert r.get_requests() == [[b"SET", b"k", b"v"]] * 3
    assert r.get_request() is None
    r.feed(data[-3:])
    assert r.get_request() == [b"GET", b"k"]
    assert r.get_request() is None


def test_inline_and_multibulk_mixed_per_request() -> None:
    r = RequestReader()
    r.feed(b"PING\r\n" + encode_command("ECHO", "x") + b"\r\n\n  \r\nSET a 'b c'\n" + b"+PING\r\n$4\r\n")
    assert r.get_requests() == [[b"PING"], [b"ECHO", b"x"], [b"SET", b"a", b"b c"], [b"+PING"], [b"$4"]]


def test_payload_starting_with_type_byte_is_not_an_error() -> None:
    # "+inf" right after a header's CRLF makes the span unsafe for hiredis; the slow path parses it.
    r = RequestReader()
    r.feed(encode_command("ZADD", "z", "+inf", "m") + encode_command("ZRANGEBYSCORE", "z", "(1", "+inf"))
    assert r.get_requests() == [[b"ZADD", b"z", b"+inf", b"m"], [b"ZRANGEBYSCORE", b"z", b"(1", b"+inf"]]


def test_empty_and_negative_multibulk_are_skipped() -> None:
    r = RequestReader()
    r.feed(b"*0\r\n*-1\r\n*-5\r\n" + encode_command("PING"))
    assert r.get_requests() == [[b"PING"]]


def test_good_requests_come_before_the_error() -> None:
    r = RequestReader()
    r.feed(encode_command("PING") + b"PING\r\n" + b"*1\r\n:1\r\n")
    assert r.get_requests() == [[b"PING"], [b"PING"]]
    with pytest.raises(ProtocolError, match=r"expected '\$', got ':'"):
        r.get_requests()
    r2 = RequestReader()
    r2.feed(encode_command("PING") + b"*1\r\n:1\r\n")
    assert r2.get_request() == [b"PING"]
    with pytest.raises(ProtocolError):
        r2.get_request()


def test_bulk_header_over_limit_is_rejected_before_payload() -> None:
    r = RequestReader()
    r.feed(b"*1\r\n$600000000\r\n")
    with pytest.raises(ProtocolError, match="invalid bulk length"):
        r.get_request()
    small = RequestReader(max_bulk_len=10)
    small.feed(encode_command("x" * 10))
    assert small.get_request() == [b"x" * 10]
    small.feed(encode_command("x" * 11))
    with pytest.raises(ProtocolError, match="invalid bulk length"):
        small.get_request()


def test_limits_apply_inside_a_complete_fast_span() -> None:
    r = RequestReader(max_bulk_len=3, max_multibulk_len=2)
    r.feed(encode_command("a", "b") + encode_command("abcd"))
    assert r.get_request() == [b"a", b"b"]
    with pytest.raises(ProtocolError, match="invalid bulk length"):
        r.get_request()
    r = RequestReader(max_multibulk_len=2)
    r.feed(encode_command("a", "b", "c"))
    with pytest.raises(ProtocolError, match="invalid multibulk length"):
        r.get_request()


def test_multibulk_count_over_limit() -> None:
    r = RequestReader()
    r.feed(b"*1048577\r\n")
    with pytest.raises(ProtocolError, match="invalid multibulk length"):
        r.get_request()
    r = RequestReader()
    r.feed(b"*1048576\r\n")
    assert r.get_request() is None


def test_endless_inline_line_is_bounded() -> None:
    r = RequestReader()
    for _ in range(16):
        r.feed(b"a" * 4096)
        assert r.get_request() is None  # exactly 64 KiB buffered: still waiting, as Redis
    assert r.buffered_bytes() == 65536
    r.feed(b"a")
    with pytest.raises(ProtocolError, match="too big inline request"):
        r.get_request()


def test_big_bulk_in_many_chunks_is_linear() -> None:
    value = bytes(range(256)) * 4096  # 1 MiB
    data = encode_command("SET", "k", value)
    r = RequestReader()
    for i in range(0, len(data), 1000):
        r.feed(data[i : i + 1000])
        got = r.get_requests()
        if got:
            assert got == [[b"SET", b"k", value]]
            assert i + 1000 >= len(data)
    assert r.buffered_bytes() == 0


def test_split_args_quoting() -> None:
    assert split_args(b'set "a\\x41\\n\\t\\"" \'b\\\'c\' x"y z"') == [b"set", b'aA\n\t"', b"b'c", b"xy z"]
    assert split_args(b"a\x0bb \x0bc") == [b"a\x0bb", b"c"]
    assert split_args(b'"\\xZZ"') == [b"xZZ"]
    for bad in [b'"abc', b"'abc", b'"a"b', b"'a'b", b'"a\\"']:
        assert split_args(bad) is None, bad
    assert split_args(b"   ") == []


# -- request reader: properties -----------------------------------------------------------------

argv_st = st.lists(st.binary(max_size=40), min_size=1, max_size=6)
inline_token = st.binary(min_size=1, max_size=10).filter(
    lambda b: not set(b) & set(b" \t\r\n\v\f\"'\0")
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(argv_st, min_size=1, max_size=20), st.lists(st.integers(0, 10**6), max_size=8))
def test_roundtrip_multibulk_random_chunks(requests: list[list[bytes]], cuts: list[int]) -> None:
    data = b"".join(encode_command(*a) for a in requests)
    got, err = read_all(RequestReader(), chunked(data, cuts))
    assert err is None
    assert got == requests


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.one_of(argv_st.map(lambda a: ("mb", a)), st.lists(inline_token, min_size=1, max_size=4).map(lambda a: ("in", a))), min_size=1, max_size=12),
    st.lists(st.integers(0, 10**6), max_size=8),
)
def test_roundtrip_mixed_inline_and_multibulk(reqs: list[tuple[str, list[bytes]]], cuts: list[int]) -> None:
    assume(all(kind == "mb" or a[0][:1] != b"*" for kind, a in reqs))
    data = b"".join(encode_command(*a) if kind == "mb" else b" ".join(a) + b"\r\n" for kind, a in reqs)
    got, err = read_all(RequestReader(), chunked(data, cuts))
    assert err is None
    assert got == [a for _, a in reqs]


@settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(st.sampled_from([b"", b"k", b"x" * 40_000, bytes(range(256)) * 300]),
                         min_size=1, max_size=4), min_size=1, max_size=4),
       st.lists(st.integers(0, 10**7), max_size=12))
def test_roundtrip_big_arguments_random_chunks(requests: list[list[bytes]], cuts: list[int]) -> None:
    # Arguments over 32 KiB are collected outside the buffer while they arrive.
    data = b"".join(encode_command(*a) for a in requests) + b"PING\r\n"
    for reader in (RequestReader(), SlowReader()):
        got, err = read_all(reader, chunked(data, cuts))
        assert err is None
        assert got == [*requests, [b"PING"]]
        assert reader.buffered_bytes() == 0


def test_empty_feeds_while_a_big_argument_arrives() -> None:
    value = b"v" * 100_000
    data = encode_command("SET", "k", value)
    r = RequestReader()
    r.feed(data[:30])
    for i in range(30, len(data), 25_000):
        r.feed(b"")
        assert r.get_request() is None
        r.feed(data[i : i + 25_000])
    r.feed(b"")
    assert r.get_requests() == [[b"SET", b"k", value]]


def test_get_request_and_get_requests_interleave() -> None:
    r = RequestReader()
    r.feed(b"".join(encode_command("ECHO", str(i)) for i in range(5)))
    assert r.get_request() == [b"ECHO", b"0"]
    assert r.get_requests() == [[b"ECHO", b"%d" % i] for i in range(1, 5)]
    assert r.get_request() is None and r.get_requests() == []


_FRAGMENTS = [b"*", b"$", b"\r\n", b"\r", b"\n", b"+", b":", b"-1", b"0", b"1", b"3", b"12",
              b"PING", b'"', b"'", b"\\x4", b" ", b"\0", b"%", b"~", b">", b"|", b"(", b"="]


@settings(max_examples=1000, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.sampled_from(_FRAGMENTS), st.binary(max_size=6)), max_size=40),
       st.lists(st.integers(0, 10**6), max_size=5))
def test_fuzz_fast_path_agrees_with_exact_parser(parts: list[bytes], cuts: list[int]) -> None:
    """Random protocol-ish bytes: only ProtocolError escapes, and hiredis changes nothing."""
    data = b"".join(parts)
    chunks = chunked(data, cuts)
    fast = read_all(RequestReader(max_bulk_len=20, max_multibulk_len=5), chunks)
    slow = read_all(SlowReader(max_bulk_len=20, max_multibulk_len=5), [data])
    assert fast == slow


_CANON_FRAGMENTS = [b"*1\r\n", b"*2\r\n", b"*3\r\n", b"$0\r\n", b"$1\r\n", b"$3\r\n", b"$4\r\n",
                    b"$20\r\n", b"$21\r\n", b"*01\r\n", b"$03\r\n", b"*6\r\n", b"\r\n", b"a",
                    b"abc", b"SET", b"*", b"$", b"\r", b"x\r\n", b"$-1\r\n", b"*0\r\n"]


@settings(max_examples=1000, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_CANON_FRAGMENTS), max_size=30),
       st.lists(st.integers(0, 10**6), max_size=5), st.booleans())
def test_fuzz_canonical_path_agrees_with_exact_parser(parts: list[bytes], cuts: list[int],
                                                      canonical: bool) -> None:
    """The canonical-request parser (the compiled build's first choice; forced on or off
    here, whichever build runs) changes nothing: near-canonical bytes, random chunks."""
    data = b"".join(parts)
    reader = RequestReader(max_bulk_len=20, max_multibulk_len=5)
    reader.use_canonical = canonical
    fast = read_all(reader, chunked(data, cuts))
    slow = read_all(SlowReader(max_bulk_len=20, max_multibulk_len=5), [data])
    assert fast == slow


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_CANON_FRAGMENTS), max_size=30),
       st.lists(st.integers(0, 10**6), max_size=5), st.booleans(), st.booleans())
def test_fuzz_packed_requests_are_their_own_bytes(parts: list[bytes], cuts: list[int],
                                                  canonical: bool, single_first: bool) -> None:
    """get_requests_packed: the same requests as the exact parser, each beside b"" or its
    bytes as sent, which are then exactly its packed form (the proxy forwards them as they
    are), whichever parser took it, after a get_request too."""
    data = b"".join(parts)
    reader = RequestReader(max_bulk_len=20, max_multibulk_len=5)
    reader.use_canonical = canonical
    got: list[list[bytes]] = []
    raws: list[bytes] = []
    error = None
    try:
        for c in chunked(data, cuts):
            reader.feed(c)
            if single_first:
                one = reader.get_request()
                if one is not None:
                    got.append(one)
                    raws.append(b"")
            reqs, packed = reader.get_requests_packed()
            assert len(reqs) == len(packed)
            got += reqs
            raws += packed
        while True:
            reqs, packed = reader.get_requests_packed()
            if not reqs:
                break
            got += reqs
            raws += packed
    except ProtocolError as exc:
        error = str(exc)
    assert (got, error) == read_all(SlowReader(max_bulk_len=20, max_multibulk_len=5), [data])
    for argv, raw in zip(got, raws, strict=True):
        assert raw in (b"", encode_command(*argv)), (argv, raw)
    if canonical:  # whole canonical requests in one chunk come with their bytes
        r = RequestReader()
        r.use_canonical = True
        wire = encode_command("SET", "k", "v") + encode_command("GET", "k")
        r.feed(wire)
        assert r.get_requests_packed() == ([[b"SET", b"k", b"v"], [b"GET", b"k"]],
                                           [encode_command("SET", "k", "v"),
                                            encode_command("GET", "k")])
        r.feed(encode_command("SET", "k", "v") + b"GET k\r\n" + encode_command("GET", "j"))
        assert r.get_requests_packed() == ([[b"SET", b"k", b"v"], [b"GET", b"k"], [b"GET", b"j"]],
                                           [encode_command("SET", "k", "v"), b"",
                                            encode_command("GET", "j")])


def test_canonical_path_takes_everyday_requests() -> None:
    data = encode_command("SET", "k", "v") + encode_command("GET", "k")
    r = RequestReader()
    tail = b"*2\r\n$3\r\nGET"  # incomplete: left to the general parsers
    assert r._canonical(data + tail, 0, len(data) + len(tail)) == len(data)
    assert r.get_requests() == [[b"SET", b"k", b"v"], [b"GET", b"k"]]
    for odd in (b"*01\r\n$1\r\na\r\n", b"*1\r\n$01\r\na\r\n", b"*1\r\n$1\r\nab\r\n",
                b"*1\r\n$1\r\na\n\n", b"*+1\r\n$1\r\na\r\n", b"*1\n$1\r\na\r\n"):
        assert r._canonical(odd, 0, len(odd)) == 0, odd


@settings(max_examples=300)
@given(st.binary(max_size=300))
def test_fuzz_random_bytes_only_protocol_error(data: bytes) -> None:
    r = RequestReader()
    r.feed(data)
    try:
        while r.get_request() is not None:
            pass
    except ProtocolError as exc:
        assert str(exc).startswith("ERR Protocol error: ")


# -- reply framer ----------------------------------------------------------------------------------

scalar3 = st.one_of(
    st.binary(max_size=30), st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\r\n"), max_size=20),
    st.integers(-(2**63), 2**63 - 1), st.booleans(), st.none(),
    st.floats(allow_nan=False), st.builds(RespError, st.just("ERR boom")),
    st.builds(Verbatim, st.binary(max_size=20)), st.builds(BigNumber, st.integers().map(str)),
)


def _nested(children: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.binary(max_size=5), children, max_size=3),
        st.frozensets(st.binary(max_size=5), max_size=3),
        st.builds(Push, st.lists(children, max_size=3)),
        st.builds(Attribute, st.dictionaries(st.binary(max_size=5), children, max_size=2), children),
    )


value_st = st.recursive(scalar3, _nested, max_leaves=20)


def expected_frames(value: object, proto: int) -> list[tuple[int, bytes]]:
    if isinstance(value, Attribute) and proto >= 3:
        head = resp.attribute_header(len(value.pairs)) + b"".join(
            encode(k, proto) + encode(v, proto) for k, v in value.pairs.items()
        )
        return [(ord("|"), head), *expected_frames(value.value, proto)]
    raw = encode(value, proto)
    return [(raw[0], raw)]


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(value_st, min_size=1, max_size=8), st.sampled_from([2, 3]),
       st.lists(st.integers(0, 10**6), max_size=10))
def test_framer_returns_exactly_the_encoded_frames(values: list[object], proto: int, cuts: list[int]) -> None:
    want = [f for v in values for f in expected_frames(v, proto)]
    data = b"".join(raw for _, raw in want)
    framer = ReplyFramer()
    got = []
    for c in chunked(data, cuts):
        framer.feed(c)
        got.extend(framer.frames())
    assert got == want
    assert framer.buffered_bytes() == 0


def test_framer_frames_agree_with_hiredis() -> None:
    # Every frame the framer cuts is one complete reply for hiredis too.
    data = (b"+OK\r\n" + b"$3\r\nbar\r\n" + b"*2\r\n$1\r\na\r\n*1\r\n:1\r\n" + b"%1\r\n+a\r\n~2\r\n,1.5\r\n#t\r\n"
            + b"*-1\r\n$-1\r\n_\r\n>2\r\n+message\r\n=7\r\ntxt:abc\r\n(12345678901234567890\r\n-ERR x\r\n")
    framer = ReplyFramer()
    framer.feed(data)
    frames = framer.frames()
    assert b"".join(raw for _, raw in frames) == data
    for _, raw in frames:
        reader = hiredis.Reader()
        reader.feed(raw)
        assert reader.gets() is not False
        assert not reader.has_data()


def test_framer_flat_aggregates_fast_path_matches_generic_scan() -> None:
    # Flat arrays/sets/pushes are cut inline by frames(); next_frame() scans generically.
    data = (b"*3\r\n$1\r\na\r\n$-1\r\n:7\r\n" + b"*0\r\n" + b"*-1\r\n" + b"~2\r\n+x\r\n,1.5\r\n"
            + b">2\r\n$7\r\nmessage\r\n=7\r\ntxt:abc\r\n" + b"*2\r\n*1\r\n:1\r\n$1\r\nb\r\n"
            + b"*1\r\n%1\r\n+k\r\n+v\r\n" + b"*2\r\n$3\r\nfoo\r\n+OK\r\n")
    generic = ReplyFramer()
    generic.feed(data)
    want = []
    while (frame := generic.next_frame()) is not None:
        want.append(frame)
    assert len(want) == 8
    framer = ReplyFramer()
    framer.feed(data)
    assert framer.frames() == want
    for cut in range(1, len(data)):  # every split point: same frames, none early
        framer = ReplyFramer()
        framer.feed(data[:cut])
        got = framer.frames()
        assert got == want[: len(got)]
        framer.feed(data[cut:])
        assert got + framer.frames() == want
    # Garbage inside a flat array raises, after the good frames before it.
    framer = ReplyFramer()
    framer.feed(b"*1\r\n:1\r\n*2\r\n$1\r\na\r\n?x\r\n")
    assert framer.frames() == [(ord("*"), b"*1\r\n:1\r\n")]
    with pytest.raises(ProtocolError):
        framer.frames()
    framer = ReplyFramer()
    framer.feed(b"*2\r\n$1x\r\na\r\n")
    with pytest.raises(ProtocolError):
        framer.frames()


def test_framer_short_frames_match_the_generic_scan() -> None:
    """A fan-out's replies (bulks, nulls, empty strings, +OK, integers, errors, RESP2 and
    RESP3), some big and some malformed, are cut inline by frames() byte by byte; cut at random
    points, they come out exactly as next_frame()'s generic scan cuts them, and garbage raises
    there too."""
    rng = random.Random(15)
    good = [b"$3\r\nbar\r\n", b"$0\r\n\r\n", b"$-1\r\n", b"_\r\n", b"+OK\r\n", b":12\r\n",
            b":-3\r\n", b"-WRONGTYPE Operation\r\n", b"-MOVED 3999 127.0.0.1:7001\r\n",
            b"=7\r\ntxt:abc\r\n", b"!5\r\nERR x\r\n", b"$5\r\na\r\nbc\r\n", b"+a\rb\r\n",
            resp.bulk(b"v" * 70_000), b"$000000000000000000003\r\nabc\r\n", b"*2\r\n$1\r\na\r\n:1\r\n"]
    bad = [b"$-2\r\n", b"$1x\r\na\r\n", b"$\r\n", b"$-\r\n", b"?\r\n", b"$1\ra\r\n:1\r\n", b"$-1\rx\r\n:1\r\n"]
    for _ in range(300):
        data = b"".join(rng.choice(good) for _ in range(rng.randrange(1, 12)))
        if rng.random() < 0.3:
            data += rng.choice(bad)
        generic = ReplyFramer()
        generic.feed(data)
        want: list[tuple[int, bytes]] = []
        generic_raises = False
        try:
            while (frame := generic.next_frame()) is not None:
                want.append(frame)
        except ProtocolError:
            generic_raises = True
        cuts = sorted(rng.randrange(len(data) + 1) for _ in range(rng.randrange(4)))
        got, raised = frame_all(chunked(data, cuts))
        assert (got, raised) == (want, generic_raises), data[:80]
        # The inline cut itself (frames() takes it in the compiled build only): the generic
        # scan's first frame, or -1.
        cut = resp._short_frame_end(data, 0, len(data))
        assert cut == -1 or (want and cut == len(want[0][1])), data[:80]
    assert resp._short_frame_end(b"$3\r\nbar\r\n+OK\r\n", 0, 14) == 9


def test_framer_big_bulk_in_chunks_waits_without_rescanning() -> None:
    payload = b"x" * 300_000
    data = resp.bulk(payload) + b"+OK\r\n"
    framer = ReplyFramer()
    head = len(data) - 6  # everything but the bulk's last byte and the +OK
    for i in range(0, head, 1000):
        framer.feed(data[i : min(i + 1000, head)])
        assert framer.next_frame() is None
    framer.feed(data[head:])
    assert framer.frames() == [(ord("$"), resp.bulk(payload)), (ord("+"), b"+OK\r\n")]


def test_framer_rejects_garbage() -> None:
    framer = ReplyFramer()
    framer.feed(b"?what\r\n")
    with pytest.raises(ProtocolError):
        framer.next_frame()
    framer = ReplyFramer()
    framer.feed(b"$1x\r\nab\r\n")
    with pytest.raises(ProtocolError):
        framer.next_frame()


def test_framer_returns_good_frames_before_garbage() -> None:
    framer = ReplyFramer()
    framer.feed(b"+OK\r\n*1\r\n:1\r\n?bad\r\n")
    assert framer.frames() == [(ord("+"), b"+OK\r\n"), (ord("*"), b"*1\r\n:1\r\n")]
    with pytest.raises(ProtocolError):
        framer.frames()


def frame_all(chunks: list[bytes]) -> tuple[list[tuple[int, bytes]], bool]:
    framer = ReplyFramer()
    got: list[tuple[int, bytes]] = []
    try:
        for c in chunks:
            framer.feed(c)
            got.extend(framer.frames())
        got.extend(framer.frames())
    except ProtocolError:
        return got, True
    assert framer.buffered_bytes() == sum(map(len, chunks)) - sum(len(raw) for _, raw in got)
    return got, False


@settings(max_examples=500)
@given(st.lists(st.one_of(st.sampled_from(_FRAGMENTS), st.binary(max_size=6)), max_size=40),
       st.lists(st.integers(0, 10**6), max_size=5))
def test_framer_fuzz_chunking_changes_nothing(parts: list[bytes], cuts: list[int]) -> None:
    """Garbage raises only ProtocolError, and where the chunks end never changes the frames."""
    data = b"".join(parts)
    assert frame_all(chunked(data, cuts)) == frame_all([data])


_BULK_FRAGMENTS = [b"$", b"$3\r\n", b"$03\r\n", b"$-1\r\n", b"$0\r\n", b"$1", b"\r\n", b"\r",
                   b"abc", b"3", b"0", b"99999999999999", b"+OK\r\n", b":1\r\n", b"*1\r\n"]


@settings(max_examples=500)
@given(st.lists(st.sampled_from(_BULK_FRAGMENTS), max_size=30),
       st.lists(st.integers(0, 10**6), max_size=5))
@example([b"$\r\n", b"\r\n"], [])
@example([b"$3-1\r\n", b"+OK\r\n", b"abc", b"\r\n"], [])
@example([b"+OK\r", b"\r\n", b"$-1\r\n", b"+OK\r\n", b"$-1\r"], [5])
@example([b"$-1\r\n", b"$03\r\n", b"abc", b"\r\n", b"$3\r", b"abc\r\n"], [])
def test_framer_bulk_loop_agrees_with_next_frame(parts: list[bytes], cuts: list[int]) -> None:
    """frames()' own loop over "$" replies (digits read in place) frames exactly what
    next_frame's general scan does, error included, wherever the chunks end."""
    data = b"".join(parts)
    one = ReplyFramer()
    one.feed(data)
    expected: list[tuple[int, bytes]] = []
    try:
        while (frame := one.next_frame()) is not None:
            expected.append(frame)
        failed = False
    except ProtocolError:
        failed = True
    assert frame_all(chunked(data, cuts)) == (expected, failed)


# -- encoders ----------------------------------------------------------------------------------


def test_encoders_resp2_and_resp3() -> None:
    assert encode_command("SET", b"k", 5, 1.5) == b"*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\n5\r\n$3\r\n1.5\r\n"
    assert resp.null(2) == b"$-1\r\n" and resp.null(3) == b"_\r\n"
    assert resp.null_array(2) == b"*-1\r\n" and resp.null_array(3) == b"_\r\n"
    assert resp.map_header(2, 2) == b"*4\r\n" and resp.map_header(2, 3) == b"%2\r\n"
    assert resp.set_header(2, 2) == b"*2\r\n" and resp.set_header(2, 3) == b"~2\r\n"
    assert resp.push_header(3, 2) == b"*3\r\n" and resp.push_header(3, 3) == b">3\r\n"
    assert resp.boolean(True, 2) == b":1\r\n" and resp.boolean(False, 3) == b"#f\r\n"
    assert resp.double(1.5, 3) == b",1.5\r\n" and resp.double(float("-inf"), 2) == b"$4\r\n-inf\r\n"
    assert resp.big_number(12, 3) == b"(12\r\n" and resp.big_number("12", 2) == b"$2\r\n12\r\n"
    assert resp.verbatim("hi", proto=3) == b"=6\r\ntxt:hi\r\n" and resp.verbatim("hi") == b"$2\r\nhi\r\n"
    assert encode({b"a": [1, None, "OK"]}, 3) == b"%1\r\n$1\r\na\r\n*3\r\n:1\r\n_\r\n+OK\r\n"
    assert encode({b"a": [1, None, "OK"]}, 2) == b"*2\r\n$1\r\na\r\n*3\r\n:1\r\n$-1\r\n+OK\r\n"
    assert encode(RespError("ERR x")) == b"-ERR x\r\n" and encode(Raw(b"+OK\r\n")) == b"+OK\r\n"
    with pytest.raises(TypeError):
        encode(object())


def test_to_long_double_rejects_what_is_not_plain_decimal() -> None:
    for bad in ["3/4", "1_0", " 1", "1 ", "inf", "nan", "0x10", "", "1e"]:
        with pytest.raises(ValueError):
            to_long_double(bad)
    with pytest.raises(OverflowError):
        to_long_double("1e99999")
    assert to_long_double("1e-99999") == 0  # underflow; Redis' string2ld rejects it (ERANGE)


def test_long_double_rounding() -> None:
    assert to_long_double("0.1") != to_long_double(0.1)  # 64-bit vs 53-bit significand
    assert format_long_double(to_long_double("10.5") + to_long_double("0.1")) == b"10.6"
    assert format_long_double(3) == b"3" and format_long_double("-0.0") == b"0"


# -- against a real redis-server -----------------------------------------------------------------


def raw_exchange(port: int, data: bytes, timeout_s: float = 2.0) -> bytes:
    """Send raw bytes, read until the server closes (or the timeout)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
        s.sendall(data)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except TimeoutError:
            pass
    return out


MALFORMED = [
    b"*2147483648\r\n", b"*01\r\n", b"*-\r\n", b"*1x\r\n", b"*1\r\n$600000000\r\n",
    b"*1\r\n$536870913\r\n", b"*1\r\n$-1\r\n", b"*1\r\n$01\r\n", b"*1\r\n+foo\r\n",
    b"*1\r\n:1\r\n", b"*1\r\n*1\r\n", b"*1\r\n\n$4\r\nPING\r\n", b"*1\r\n\x80\r\n",
    b'"a\r\n', b"a'b'c\r\n", b'ECHO "x"y\r\n', b"x" * 70000, b"*" + b"1" * 70000,
    b"*1\r\n$" + b"1" * 70000, b"PING\r\n*1\r\n%1\r\n",
]


@pytest.mark.parametrize("data", MALFORMED, ids=lambda d: repr(d[:24]))
def test_error_texts_match_real_redis(redis_standalone, data: bytes) -> None:
    reply = raw_exchange(redis_standalone.port, data)
    assert reply.count(b"-ERR Protocol error") == 1, reply[:200]
    server_error = reply[reply.index(b"-ERR Protocol error") :]
    r = RequestReader()
    r.feed(data)
    with pytest.raises(ProtocolError) as info:
        while r.get_request() is not None:
            pass
    assert info.value.as_reply() == server_error


def test_inline_parsing_matches_real_redis(redis_standalone) -> None:
    lines = [b'ECHO "a\\x41\\n\\t\\"\\\\"', b"ECHO 'b\\'c'", b"ECHO x\"y z\"", b"ECHO \x0bq\x0br"]
    data = b"".join(line + b"\r\n" for line in lines) + b"QUIT\r\n"
    reply = raw_exchange(redis_standalone.port, data)
    r = RequestReader()
    r.feed(data)
    want = b"".join(resp.bulk(argv[1]) for argv in r.get_requests()[:-1]) + b"+OK\r\n"
    assert reply == want


@pytest.fixture
def raw_client(redis_standalone):
    client = RawClient(redis_standalone.port, timeout_s=5)
    yield client
    client.close()


def test_format_double_matches_zscore(raw_client: RawClient) -> None:
    for x in [1.5, 0.1, 1e20, 3.0, -2.5e-7, 123456789.123, float("inf"), float("-inf"), 1 / 3]:
        raw_client.call("ZADD", "resp:z", repr(x), "m")
        assert raw_client.call("ZSCORE", "resp:z", "m") == resp.bulk(format_double(x)), x
    assert raw_client.call("HELLO", "3")[:1] == b"%"
    for x in [1.5, 0.1, 1e20, 3.0, float("inf"), float("-inf")]:
        raw_client.call("ZADD", "resp:z", repr(x), "m")
        assert raw_client.call("ZSCORE", "resp:z", "m") == resp.double(x, 3), x
    raw_client.call("DEL", "resp:z")


def test_format_long_double_matches_incrbyfloat(raw_client: RawClient) -> None:
    rng = random.Random(7)
    cases = [("10.5", "0.1"), ("0", "0.1"), ("1", "1e20"), ("3.0e3", "-3000"), ("5", "-5.5"),
             ("0.1", "0.2"), ("1e-5", "0"), ("0", "1e4000"), ("1e300", "-1e-300"), ("-0.0", "0"),
             ("0", "-1e-20"), (".5", "5."), ("123456789012345678901234567890", "1")]
    cases += [(f"{rng.uniform(-1e6, 1e6):.6f}", f"{rng.uniform(-10, 10):.3f}") for _ in range(20)]
    for start, incr in cases:
        raw_client.call("SET", "resp:f", start)
        got = raw_client.call("INCRBYFLOAT", "resp:f", incr)
        want = format_long_double(to_long_double(start) + to_long_double(incr))
        assert resp.bulk(want) == got, (start, incr)
    raw_client.call("DEL", "resp:f")


_SAFE_FRAGMENTS = [b"*", b"$", b"\r\n", b"\r\n", b"\r", b"\n", b"+", b":", b"-1", b"0", b"1", b"2",
                   b"3", b"12", b"PING", b"PING", b'"', b"'", b"\\x41", b"\\", b" ", b"\0", b"~",
                   b"a", b"\t", b"\x0b", b"*1\r\n", b"*2\r\n", b"$1\r\n", b"$4\r\n", b"*1\r\n$4\r\n",
                   b"*1\r\n$4\r\nPING\r\n", b"*2\r\n$4\r\nPING\r\n$1\r\n", b"$-1\r\n", b"*0\r\n"]


def test_random_streams_match_real_redis(redis_standalone) -> None:
    """Random protocol-ish streams (only PING or unknown commands can come of them): as many
    requests as the server answered, and the same protocol error if it sent one."""
    rng = random.Random(20240611)
    cases = [b"".join(rng.choice(_SAFE_FRAGMENTS) for _ in range(rng.randrange(1, 30)))
             for _ in range(400)]
    socks = []
    stats = RawClient(redis_standalone.port, timeout_s=5)
    try:
        read_before = net_input_bytes(stats)
        for data in cases:
            s = socket.create_connection(("127.0.0.1", redis_standalone.port), timeout=5)
            socks.append(s)
            s.sendall(data)
        polls = 0

        def all_read() -> bool:
            nonlocal polls
            polls += 1
            read = net_input_bytes(stats) - read_before - polls * INFO_STATS_BYTES
            return read >= sum(map(len, cases))

        # Once the server has read every byte sent, it has sent every reply it will send.
        wait_until(all_read, what="the server to read every case")
        for s, data in zip(socks, cases, strict=True):
            s.setblocking(False)
            framer = ReplyFramer()
            try:
                while chunk := s.recv(65536):
                    framer.feed(chunk)
            except BlockingIOError:
                pass
            frames = [raw for _, raw in framer.frames()]
            server_error = None
            if frames and frames[-1].startswith(b"-ERR Protocol error"):
                server_error = frames.pop()
            got, err = read_all(RequestReader(), [data])
            assert len(got) == len(frames), (data, got, frames)
            ours = ProtocolError(err).as_reply() if err is not None else None
            assert ours == server_error, data
    finally:
        stats.close()
        for s in socks:
            s.close()


INFO_STATS_BYTES = len(encode_command("INFO", "stats"))


def net_input_bytes(client: RawClient) -> int:
    """The server's total_net_input_bytes, counting this INFO request itself."""
    text = client.call("INFO", "stats").decode()
    return int(text.split("total_net_input_bytes:", 1)[1].split("\r\n", 1)[0])


def test_non_crlf_terminator_then_simple_string_item(redis_standalone) -> None:
    data = b"*2\r\n$3\r\nfooXY+bar\r\n"
    reply = raw_exchange(redis_standalone.port, data)
    assert reply == b"-ERR Protocol error: expected '$', got '+'\r\n"
    got, err = read_all(RequestReader(), [data])
    assert (got, err) == ([], "ERR Protocol error: expected '$', got '+'")
