"""HyperLogLog (PFADD PFCOUNT PFMERGE PFDEBUG PFSELFTEST), differential against a real
redis-server 7.0: the same replies, and the same bytes in the values (GET, DUMP) after the same
commands, across the sparse -> dense promotion; values made by one server read by the other."""

from __future__ import annotations

import functools
import random
import shlex
import socket
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slotgate.node.types.hll import pat_len, raw_to_dense
from slotgate.protocol.resp import RequestReader
from tests.node.diff import Case, Pair, check_cases, run_argvs, run_lines, show_difference
from tests.node.gen import command
from tests.support import RawClient, node_and_redis


@pytest.fixture(scope="module")
def diff_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    with node_and_redis(tmp_path_factory.mktemp("hll")) as procs:
        yield Pair(procs["ours"].port, procs["real"].port)


def elements(n: int, seed: int, prefix: str = "e") -> list[str]:
    """``n`` distinct-ish elements, the same on every run (fixed seed)."""
    rng = random.Random(seed)
    return [f"{prefix}{rng.getrandbits(48):x}" for _ in range(n)]


def pfadd_lines(key: str, elems: list[str], batch: int) -> list[str]:
    return [f"PFADD {key} " + " ".join(elems[i:i + batch]) for i in range(0, len(elems), batch)]


def arg(value: bytes) -> str:
    """``value`` as one word of a case line (split_line encodes with surrogateescape)."""
    return shlex.quote(value.decode("utf-8", "surrogateescape"))


HDR = b"HYLL\x01" + bytes(10) + b"\x80"  # sparse, stale cache
# A header cut short, a header only (no registers), a bad magic, an unknown encoding, a dense
# header with a sparse length, sparse forms whose runs cover too few / too many registers, a
# VAL that overflows, an XZERO cut off at the end, and a valid one with a valid cache of 5.
CORRUPT = {name: arg(value) for name, value in {
    "short": b"HYLL\x01\x00\x00",
    "header_only": HDR,
    "magic": b"HYLX" + HDR[4:] + b"\x7f\xff",
    "encoding": b"HYLL\x02" + HDR[5:] + b"\x7f\xff",
    "dense_short": b"HYLL\x00" + HDR[5:] + b"\x7f\xff",
    "few_regs": HDR + b"\x7f\xfe",
    "many_regs": HDR + b"\x7f\xff\x80",
    "val_overflow": HDR + b"\x7f\xfe\x83",
    "cut_xzero": HDR + b"\x80\x7f",
    "stale_ok": b"HYLL\x01" + bytes(3) + b"\x05" + bytes(7) + b"\x7f\xff",
}.items()}


@functools.cache
def element_at(register: int) -> str:
    """The first ``x<n>`` element that hashes to ``register`` (Redis' hash, so both agree)."""
    n = 0
    while pat_len(f"x{n}".encode())[0] != register:
        n += 1
    return f"x{n}"


CASES = [
    Case("pfadd new, again, no elements", [
        "PFADD h a b c", "PFADD h a", "PFADD h", "PFADD fresh", "GET fresh", "GET h",
        "PFCOUNT h", "GET h", "PFCOUNT h", "PFADD h d", "GET h", "PFCOUNT h nokey h",
        "OBJECT ENCODING h", "TYPE h", "STRLEN h"]),
    Case("arity and wrong types", [
        "PFADD", "PFCOUNT", "PFMERGE", "PFDEBUG", "PFDEBUG getreg", "PFDEBUG getreg a b",
        "PFSELFTEST x", "SET s notanhll", "PFADD s a", "PFCOUNT s", "PFCOUNT s s",
        "PFMERGE s", "PFMERGE d s", "EXISTS d", "PFDEBUG encoding s", "LPUSH l a",
        "PFADD l a", "PFCOUNT l", "PFCOUNT nokey l", "PFMERGE l", "PFMERGE d2 l",
        "PFDEBUG encoding l", "SET n 12345", "PFCOUNT n", "PFCOUNT nokey", "PFCOUNT a b c"]),
    Case("pfdebug", [
        "PFDEBUG encoding nokey", "PFDEBUG nosuch nokey", "PFADD h a b c d",
        "PFDEBUG ENCODING h", "PFDEBUG decode h", "PFDEBUG nosuch h", "PFDEBUG GETREG h",
        "PFDEBUG encoding h", "PFDEBUG decode h", "GET h", "PFDEBUG todense h",
        "PFDEBUG todense h", "PFADD fresh", "PFDEBUG DECODE fresh", "PFDEBUG TODENSE fresh",
        "GET fresh", "PFCOUNT fresh", "GET fresh"]),
    Case("pfmerge", [
        "PFADD a 1 2 3", "PFADD b 3 4 5", "PFMERGE dst a b", "GET dst", "PFCOUNT dst",
        "PFMERGE dst", "GET dst", "PFMERGE new", "GET new", "PFMERGE a a", "GET a",
        "PFMERGE b nokey a", "GET b", "PFCOUNT a b nokey", "PFMERGE c", "PFDEBUG todense c",
        "PFMERGE c a", "PFDEBUG encoding c", "GET c", "PFMERGE e c", "PFDEBUG encoding e",
        "GET e", "SET x 1", "EXPIRE a 1000", "PFMERGE a b", "TTL a", "PFADD a zz", "TTL a"]),
    Case("corrupted values", [
        line for name, value in CORRUPT.items() for line in (
            f"SET {name} {value}", f"PFCOUNT {name}", f"PFADD {name} a b c", f"GET {name}",
            f"PFCOUNT {name} nokey", f"PFMERGE d{name} {name}", f"EXISTS d{name}",
            f"PFDEBUG decode {name}", f"PFDEBUG getreg {name}", f"PFDEBUG todense {name}",
            f"PFDEBUG encoding {name}", f"PFCOUNT {name}", f"GET {name}")]),
    Case("pfadd changes a corrupted value before it meets the corruption", [
        f"SET few {CORRUPT['few_regs']}", f"PFADD few {element_at(5)} {element_at(16383)}",
        "GET few", "PFCOUNT few", f"PFADD few {element_at(6)}", "GET few"]),
    # (not PFDEBUG DECODE after it: Redis then reads the byte past the string's end, which its
    # split overwrote; see docs/COMPATIBILITY.md)
    Case("a split of an XZERO cut off at the end", [
        f"SET cut {CORRUPT['cut_xzero']}", "PFADD cut a", "GET cut", "PFADD cut b", "GET cut"]),
    Case("the cache write-back is a modification (WATCH)", [
        "PFADD h a b", "WATCH h", "PFCOUNT h", "MULTI", "PING", "EXEC",
        "WATCH h", "PFCOUNT h", "PFADD h a", "MULTI", "PING", "EXEC",
        "WATCH h", "PFDEBUG todense h", "MULTI", "PING", "EXEC"]),
    Case("encodings: embstr until a command unshares the string", [
        f"SET h {CORRUPT['stale_ok']}", "OBJECT ENCODING h", "PFCOUNT h nokey",
        "OBJECT ENCODING h", "PFCOUNT h", "OBJECT ENCODING h", f"SET h2 {CORRUPT['stale_ok']}",
        "PFADD h2", "OBJECT ENCODING h2", "SET h3 x", "OBJECT ENCODING h3", "PFADD h3 a",
        "OBJECT ENCODING h3"]),
    Case("hll-sparse-max-bytes as a config", [
        "CONFIG GET hll-sparse-max-bytes", "CONFIG SET hll-sparse-max-bytes -1",
        "CONFIG SET hll-sparse-max-bytes abc", "CONFIG SET hll-sparse-max-bytes 1kb",
        "CONFIG GET hll-sparse-max-bytes", "CONFIG SET hll-sparse-max-bytes 3000"]),
    Case("PFADD onto an empty HLL that was SET", [
        "SET big " + arg(HDR + b"\x7f\xff"),
        "PFADD big " + " ".join(elements(300, 7)), "PFDEBUG encoding big", "GET big",
        "PFCOUNT big"]),
]


@pytest.mark.parametrize("proto", [2, 3])
def test_commands_match_redis(diff_pair: Pair, proto: int) -> None:
    assert check_cases(diff_pair, CASES, proto) == []


@pytest.mark.parametrize("max_bytes", [3000, 200, 0, 20000])
def test_promotion_byte_identical(diff_pair: Pair, max_bytes: int) -> None:
    """The same PFADDs on both: identical values (GET), encodings and counts at every step,
    across the sparse -> dense promotion at ``hll-sparse-max-bytes``."""
    elems = elements(4000, seed=max_bytes)
    lines: list[str] = [f"CONFIG SET hll-sparse-max-bytes {max_bytes}"]
    for i, line in enumerate(pfadd_lines("h", elems, 25)):
        lines += [line, "GET h", "PFDEBUG encoding h"]
        if i % 8 == 0:
            lines += ["PFCOUNT h", "GET h"]
    lines += ["PFCOUNT h", "GET h", "CONFIG GET hll-sparse-max-bytes",
              "CONFIG SET hll-sparse-max-bytes 3000"]
    assert run_lines(diff_pair, lines) == []


def test_one_by_one_near_the_boundary(diff_pair: Pair) -> None:
    elems = elements(2200, seed=11)
    lines = [f"PFADD h {e}" for e in elems[1400:2200]]
    lines = pfadd_lines("h", elems[:1400], 50) + [
        x for line in lines for x in (line, "PFDEBUG encoding h", "STRLEN h")] + ["GET h"]
    assert run_lines(diff_pair, lines) == []


def test_pfcount_several_and_pfmerge(diff_pair: Pair) -> None:
    sizes = {"s1": 50, "s2": 700, "d1": 3000, "d2": 6000}
    lines: list[str] = []
    for seed, (key, n) in enumerate(sizes.items()):
        lines += pfadd_lines(key, elements(n, seed=100 + seed), 100)
    lines += pfadd_lines("s3", elements(50, seed=100), 100)  # the same elements as s1
    lines += [
        "PFCOUNT s1 s3", "PFCOUNT s1 s2", "PFCOUNT s1 s2 d1", "PFCOUNT d1 d2 nokey",
        "PFCOUNT s1 s2 d1 d2 s3", "GET s1", "GET d1",  # several keys write no cache
        "PFMERGE m1 s1 s2", "GET m1", "PFDEBUG encoding m1", "PFCOUNT m1",
        "PFMERGE m2 s1 d1", "GET m2", "PFCOUNT m2",
        "PFMERGE s1 s2 s3", "GET s1", "PFDEBUG encoding s1",
        "PFMERGE s2 d2", "GET s2", "PFDEBUG encoding s2",
        "PFMERGE d1 s1", "GET d1", "PFCOUNT d1",
        "CONFIG SET hll-sparse-max-bytes 300", "PFMERGE m3 s3 s1", "GET m3",
        "PFDEBUG encoding m3", "CONFIG SET hll-sparse-max-bytes 3000",
        "PFMERGE m4 nokey", "GET m4", "PFCOUNT m4",
    ]
    assert run_lines(diff_pair, lines) == []
    assert run_lines(diff_pair, lines, proto=3) == []


def _raw_get(conn: RawClient, key: bytes) -> bytes:
    reply = conn.call(b"GET", key)
    assert reply.startswith(b"$"), reply
    return reply[reply.index(b"\r\n") + 2 : -2]


# cardinalities: sparse (3 and 900 elements) and dense (5000); both servers LZF-compress the
# string as rdbSaveRawString does, so the DUMP payloads are the same bytes
@pytest.mark.parametrize("n", [3, 900, 5000])
def test_values_travel_between_servers(diff_pair: Pair, n: int) -> None:
    """A value built by one server, SET into the other: same counts, same value after more
    PFADDs on both sides; DUMP payloads are the same bytes and restore both ways."""
    ours, real = diff_pair.connect()
    try:
        elems = elements(n, seed=n)
        more = elements(300, seed=n + 1)
        for src, dst in ((ours, real), (real, ours)):
            for conn in (ours, real):
                conn.call(b"FLUSHALL")
            for i in range(0, n, 200):
                src.call(b"PFADD", b"h", *[e.encode() for e in elems[i:i + 200]])
            value = _raw_get(src, b"h")
            dst.call(b"SET", b"h", value)
            assert dst.call(b"PFCOUNT", b"h") == src.call(b"PFCOUNT", b"h")
            assert _raw_get(dst, b"h") == _raw_get(src, b"h")
            for conn in (src, dst):
                conn.call(b"PFADD", b"h", *[e.encode() for e in more])
            assert _raw_get(dst, b"h") == _raw_get(src, b"h")
            # DUMP / RESTORE: the same payload, restorable on the other side
            payload_src = src.call(b"DUMP", b"h")
            assert payload_src == dst.call(b"DUMP", b"h")
            body = payload_src[payload_src.index(b"\r\n") + 2 : -2]
            assert dst.call(b"RESTORE", b"r", b"0", body) == b"+OK\r\n"
            assert dst.call(b"PFCOUNT", b"r") == src.call(b"PFCOUNT", b"h")
            assert _raw_get(dst, b"r") == _raw_get(src, b"h")
    finally:
        ours.close()
        real.close()


def test_pfselftest(diff_pair: Pair) -> None:
    with RawClient(diff_pair.ours_port, timeout_s=120) as ours:
        assert ours.call(b"PFSELFTEST") == b"+OK\r\n"


def _events(port: int, lines: list[str]) -> bytes:
    cmd, sub = RawClient(port), RawClient(port)
    try:
        cmd.call(b"FLUSHALL")
        cmd.call(b"CONFIG", b"SET", b"notify-keyspace-events", b"KEA")
        sub.call(b"PSUBSCRIBE", b"__key*@0__:*")
        for line in lines:
            cmd.call(*[w.encode() for w in line.split()])
        cmd.call(b"CONFIG", b"SET", b"notify-keyspace-events", b"")
        msgs = []
        while True:
            try:
                msgs.append(sub.read(timeout_s=0.5))
            except TimeoutError:
                break
        return b"".join(msgs)
    finally:
        cmd.close()
        sub.close()


EVENT_LINES = ["PFADD h a b", "PFADD h a", "PFADD h", "PFCOUNT h", "PFCOUNT h", "PFMERGE h",
               "PFMERGE m h", "PFMERGE m", "PFDEBUG todense h", "PFDEBUG getreg m",
               "PFCOUNT m h", "PFADD e"]


def test_keyspace_events_match_redis(diff_pair: Pair) -> None:
    ours = _events(diff_pair.ours_port, EVENT_LINES)
    real = _events(diff_pair.real_port, EVENT_LINES)
    assert real.count(b"pfadd") >= 2 * 5, real  # the real server did notify
    assert ours == real, show_difference(ours, real)


def _replication_stream(port: int, lines: list[str]) -> list[bytes]:
    """What a replica of the server at ``port`` receives while ``lines`` run (after the full
    sync; PINGs left out), as raw RESP commands."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    cmd = RawClient(port)
    try:
        cmd.call(b"FLUSHALL")
        sock.sendall(b"*3\r\n$5\r\nPSYNC\r\n$1\r\n?\r\n$2\r\n-1\r\n")
        buf = b""
        while True:  # +FULLRESYNC, keep-alive newlines, then $len\r\n<rdb> (no CRLF)
            buf += sock.recv(1 << 16)
            buf = buf.lstrip(b"\n")
            if b"\r\n" not in buf:
                continue
            head, _, rest = buf.partition(b"\r\n")
            if head.startswith(b"+FULLRESYNC"):
                buf = rest
                continue
            if head.startswith(b"$"):
                size = int(head[1:])
                while len(rest) < size:
                    rest += sock.recv(1 << 16)
                buf = rest[size:]
                break
        for line in lines:
            cmd.call(*[w.encode() for w in line.split()])
        cmd.call(b"SET", b"end", b"1")
        while b"$3\r\nend\r\n$1\r\n1\r\n" not in buf:
            buf += sock.recv(1 << 16)
        reader = RequestReader()
        reader.feed(buf)
        out = []
        while (argv := reader.get_request()) is not None:
            if argv and argv[0].lower() not in (b"ping", b"select"):
                out.append(b" ".join(argv))
        return out
    finally:
        sock.close()
        cmd.close()


PROPAGATION_LINES = ["PFADD h a b", "PFADD h a", "PFCOUNT h", "PFCOUNT h", "PFCOUNT h nokey",
                     "PFMERGE m h", "PFDEBUG todense m", "PFDEBUG todense m", "PFADD h c",
                     "PFDEBUG getreg h"]


def test_replication_matches_redis(diff_pair: Pair) -> None:
    ours = _replication_stream(diff_pair.ours_port, PROPAGATION_LINES)
    real = _replication_stream(diff_pair.real_port, PROPAGATION_LINES)
    assert b"PFCOUNT h" in real, real  # the cache write-back replicates on the real server
    assert ours == real


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(proto=st.sampled_from([2, 3]),
       cmds=st.lists(command("hll", "strings", "keys", "bitmaps"), min_size=30, max_size=80))
def test_random_sequences_with_hll(diff_pair: Pair, proto: int, cmds: list[list[str]]) -> None:
    problems = run_argvs(diff_pair, [[a.encode("latin-1") for a in argv] for argv in cmds],
                         proto)
    assert not problems, "\n".join(problems)


def test_crafted_dense_registers(diff_pair: Pair) -> None:
    """Dense values SET by hand with registers no element reaches (51 takes the estimator's
    tau branch, 52..63 are counted nowhere): the same PFCOUNT, alone and merged."""
    rng = random.Random(51)
    ours, real = diff_pair.connect()
    try:
        for n in range(21):
            raw = bytearray(rng.choice([0, 1, 2, 3, 5, 8, 12, 40]) for _ in range(16384))
            if n == 20:  # every register above 51: the estimator divides by zero
                raw = bytearray(rng.choice([52, 60, 63]) for _ in range(16384))
            for i in rng.sample(range(16384), rng.randrange(1, 16384)) if n < 20 else ():
                raw[i] = rng.choice([51, 51, 51, 52, 63])
            value = b"HYLL\x00" + bytes(10) + b"\x80" + bytes(raw_to_dense(raw))
            for conn in (ours, real):
                conn.call(b"SET", b"d", value)
                conn.call(b"PFADD", b"s", b"a", b"b")
            for argv in ([b"PFCOUNT", b"d", b"s"], [b"PFCOUNT", b"d"], [b"GET", b"d"],
                         [b"PFMERGE", b"m", b"s", b"d"], [b"GET", b"m"], [b"PFCOUNT", b"m"],
                         [b"GET", b"m"], [b"PFCOUNT", b"m"], [b"PFCOUNT", b"d"], [b"GET", b"d"]):
                assert ours.call(*argv) == real.call(*argv), argv
    finally:
        ours.close()
        real.close()


def test_random_sparse_bodies(diff_pair: Pair) -> None:
    """Sparse values with random opcode bytes (fixed seed), each SET afresh before every
    command, so no command reads what an earlier one left past the end (see the cut XZERO)."""
    rng = random.Random(1234)
    ours, real = diff_pair.connect()
    try:
        for n in range(300):
            body = bytes(rng.choice([0x00, 0x3F, 0x40, 0x7F, 0x80, 0x83, 0xFC, 0xFF,
                                     rng.randrange(256)]) for _ in range(rng.randrange(12)))
            value = (HDR if n % 2 else HDR[:-1] + b"\x00") + body
            elem = element_at(rng.choice([0, 1, 63, 64, 65, 200, 16383]))
            for seq in ([[b"PFADD", b"v", elem.encode()], [b"GET", b"v"]],
                        [[b"PFCOUNT", b"v"], [b"GET", b"v"]], [[b"PFDEBUG", b"DECODE", b"v"]],
                        [[b"PFCOUNT", b"v", b"nokey"]], [[b"PFMERGE", b"m", b"v"], [b"GET", b"m"]],
                        [[b"PFDEBUG", b"TODENSE", b"v"], [b"GET", b"v"]]):
                for conn in (ours, real):
                    conn.call(b"SET", b"v", value)
                    conn.call(b"DEL", b"m")
                for argv in seq:
                    assert ours.call(*argv) == real.call(*argv), (value, argv)
    finally:
        ours.close()
        real.close()
