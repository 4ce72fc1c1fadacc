"""Fuzz targets for the inputs a peer controls: each takes bytes and either returns or raises
``Finding`` (an AssertionError) naming what went wrong. The module's own rejection
(ProtocolError, ConfigError, BusError, a RESTORE error reply) is the expected outcome for bad
input; any other exception propagates as a finding too.

Targets:

- ``resp``: the request reader, fed whole and in small chunks, with hiredis and with the exact
  parser alone: the same requests and the same error in every way; bytes held never more than
  fed (a header claiming 512 MB holds nothing up front).
- ``framer``: the reply framer, whole and chunked: the same frames, which are the input's
  prefix, and only ``ProtocolError``.
- ``config``: the proxy's YAML loader: a ``Config`` or a ``ConfigError`` whose every problem
  names a key (``path: ...``), never another exception.
- ``bus``: the cluster bus: frames split by ``FrameReader``, each given to a gossip engine
  that knows one other node; only ``BusError`` from the framing, nothing from the engine.
- ``rdb``: a RESTORE payload (checksum not checked, so mutations reach the body): a value or
  Redis' error text, within ``RDB_BOUND_S``.

The kept corpus lives in tests/fuzz/corpus/<target>/ (``seed-*`` files written by
``write_seeds``, other files added by bench/fuzz.py runs and by findings); tests replay it
whole and mutate it.
"""

from __future__ import annotations

import logging
import random
import re
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from slotgate.node.cluster import bus
from slotgate.node.cluster.gossip import Engine, FixedSettings, Hooks
from slotgate.node.cluster.state import ClusterState, Node
from slotgate.node.commands import dump as dump_cmds
from slotgate.node.core.errors import CommandError
from slotgate.node.persistence import rdb
from slotgate.protocol.resp import ProtocolError, ReplyFramer, RequestReader, encode_command
from slotgate.proxy.ops import config

CORPUS_DIR = Path(__file__).parent / "corpus"
RDB_BOUND_S = 5.0  # a payload of a few KB decoding longer than this is a hang
CHUNK_BYTES = 7  # the chunked feeds' piece size: splits every header somewhere


class Finding(AssertionError):
    """Bad behaviour on one input (the target's name and what happened)."""


# -- resp: the request reader ------------------------------------------------------------------
def _read_requests(data: bytes, chunk: int, use_hiredis: bool) -> tuple[list[list[bytes]], str | None]:
    reader = RequestReader()
    reader.use_hiredis = use_hiredis
    out: list[list[bytes]] = []
    fed = 0
    try:
        for i in range(0, len(data), chunk):
            reader.feed(data[i : i + chunk])
            fed += len(data[i : i + chunk])
            out += reader.get_requests()
            held = reader.buffered_bytes()
            if held > fed:
                raise Finding(f"resp: {held} bytes held after {fed} fed")
        out += reader.get_requests()  # an error met after good requests comes on the next call
        return out, None
    except ProtocolError as exc:
        return out, str(exc)


def fuzz_resp(data: bytes) -> None:
    runs = {(len(data) or 1, True), (len(data) or 1, False), (CHUNK_BYTES, True), (1, False)}
    results = {key: _read_requests(data, *key) for key in sorted(runs)}
    first_key, first = next(iter(results.items()))
    for key, got in results.items():
        if got != first:
            raise Finding(f"resp: (chunk, hiredis)={key} gave {got!r:.300}, {first_key} gave {first!r:.300}")


# -- framer: the reply framer ------------------------------------------------------------------
def _frames(data: bytes, chunk: int, one_by_one: bool) -> tuple[list[tuple[int, bytes]], bool]:
    framer = ReplyFramer()
    out: list[tuple[int, bytes]] = []
    try:
        for i in range(0, len(data), chunk):
            framer.feed(data[i : i + chunk])
            if one_by_one:
                while (f := framer.next_frame()) is not None:
                    out.append(f)
            else:
                out += framer.frames()
        out += framer.frames()  # an error met after good frames comes on the next call
        if framer.buffered_bytes() > len(data):
            raise Finding("framer: holds more bytes than fed")
        return out, False
    except ProtocolError:
        return out, True


def fuzz_framer(data: bytes) -> None:
    whole, whole_err = _frames(data, len(data) or 1, False)
    joined = b"".join(f for _, f in whole)
    if not data.startswith(joined) or any(f[:1] != bytes([t]) for t, f in whole):
        raise Finding(f"framer: frames {whole!r:.300} are not the input's prefix")
    for chunk, one in ((CHUNK_BYTES, False), (1, True), (len(data) or 1, True)):
        got, err = _frames(data, chunk, one)
        # Chunked feeds may stop at an error earlier (a frame is only checked when complete),
        # never later, and never give other frames.
        if got != whole[: len(got)] or (not err and got != whole) or (err and not whole_err):
            raise Finding(f"framer: chunk {chunk} gave {got!r:.300} (error {err}), whole "
                          f"gave {whole!r:.300} (error {whole_err})")


# -- config: the proxy's YAML loader ------------------------------------------------------------
_NAMED = re.compile(r"[^\n]+?: \S")  # "KEY: what is wrong"


def fuzz_config(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "proxy.yaml"
        path.write_bytes(data)
        try:
            config.load(path)
        except config.ConfigError as exc:
            for problem in exc.problems:
                named = problem.startswith(f"{path}:") or _NAMED.match(problem) is not None
                if not named:
                    raise Finding(f"config: problem names no key: {problem!r}") from None


# -- bus: framing + the gossip engine ------------------------------------------------------------
PEER_NAME = b"b" * bus.NAME_LEN
SELF_NAME = b"a" * bus.NAME_LEN


def _engine() -> Engine:
    clock = [1_000_000]
    me = Node(SELF_NAME, bus.F_MYSELF | bus.F_MASTER, clock[0])
    me.ip, me.port, me.cport = "127.0.0.1", 7000, 17000
    st = ClusterState(me, lambda: clock[0])
    peer = Node(PEER_NAME, bus.F_MASTER, clock[0])
    peer.ip, peer.port, peer.cport = "127.0.0.2", 7001, 17001
    st.add_node(peer)
    return Engine(st, FixedSettings(15000, 7000, 17000), Hooks(), lambda: clock[0], random.Random(1))


def fuzz_bus(data: bytes) -> None:
    gossip_log = logging.getLogger("node.cluster")
    level = gossip_log.level
    gossip_log.setLevel(logging.ERROR)  # "Dropping bad cluster bus message" for most inputs
    try:
        _bus_both(data)
    finally:
        gossip_log.setLevel(level)


def _bus_both(data: bytes) -> None:
    _bus_stream(data)
    if len(data) >= bus.MIN_READ_LEN:  # the same bytes with a consistent header, to reach the body
        _bus_stream(bus.SIG + len(data).to_bytes(4, "big") + data[bus.MIN_READ_LEN :])


def _bus_stream(data: bytes) -> None:
    eng = _engine()
    link = eng.accept("127.0.0.2", "127.0.0.1")
    reader = bus.FrameReader()
    reader.feed(data)
    try:
        messages = reader.messages()
    except bus.BusError:
        return
    for msg in messages:
        eng.on_message(link, msg)
        if link.closed:
            return


_CONFIG_VALUES: tuple[object, ...] = (
    None, True, False, 0, -1, 1, 2**31, 2**64, 1.5, float("nan"), float("inf"), "", "x",
    "127.0.0.1:7000", "[::1]:7000", "host:0", "host:99999", "10ms", "1.5s", "-3m", "99999999m",
    "debug", "yes", "no", ["127.0.0.1:7000"], [], [1, None], {"a": 1}, {"listen": "x"},
    "../../etc/passwd", "a b", "\x00", "on",
)


def random_config(rng: random.Random) -> bytes:
    """A YAML file setting a few random keys (sections nested) to random values."""
    doc: dict[str, object] = {}
    for path in rng.sample(sorted(config.KEYS), rng.randint(1, 6)):
        *sections, leaf = path.split(".")
        where = doc
        for s in sections:
            nxt = where.setdefault(s, {})
            if not isinstance(nxt, dict):
                break
            where = nxt
        else:
            where[leaf] = rng.choice(_CONFIG_VALUES)
    if rng.random() < 0.8:
        doc.setdefault("seeds", ["127.0.0.1:7000"])
    return yaml.safe_dump(doc).encode()


# -- rdb: RESTORE payloads -----------------------------------------------------------------------
def fuzz_rdb(data: bytes) -> None:
    t0 = time.monotonic()
    try:
        dump_cmds.load_value(data, check_crc=False)
    except CommandError as exc:
        if not str(exc).startswith("ERR "):
            raise Finding(f"rdb: error reply {exc!s:.200} is not an ERR") from None
    took_s = time.monotonic() - t0
    if took_s > RDB_BOUND_S:
        raise Finding(f"rdb: {len(data)} bytes took {took_s:.1f} s")


TARGETS: dict[str, Callable[[bytes], None]] = {
    "resp": fuzz_resp, "framer": fuzz_framer, "config": fuzz_config, "bus": fuzz_bus,
    "rdb": fuzz_rdb,
}


# -- the corpus ------------------------------------------------------------------------------------
def corpus(target: str) -> list[bytes]:
    """Every kept input of a target, in name order."""
    folder = CORPUS_DIR / target
    return [p.read_bytes() for p in sorted(folder.iterdir())] if folder.is_dir() else []


def _seed_resp() -> dict[str, bytes]:
    return {
        "set-get": encode_command("SET", "k", "v") + encode_command("GET", "k"),
        "inline": b"PING\r\nSET a 'b c' \"d\\x41\"\r\n",
        "empty-multibulk": b"*0\r\n*-1\r\n*1\r\n$4\r\nPING\r\n",
        "big-claims": b"*1\r\n$536870912\r\nxx",
        "huge-count": b"*2000000000\r\n$1\r\na\r\n",
        "bad-dollar": b"*2\r\n$1\r\na\r\n:5\r\n",
        "nested": b"*1\r\n*1\r\n$1\r\na\r\n",
        "resp3-types": b"*3\r\n$3\r\nSET\r\n+k\r\n$1\r\nv\r\n",
        "quotes": b"SET \"unbalanced\r\n",
    }


def _seed_framer() -> dict[str, bytes]:
    return {
        "simple": b"+OK\r\n-ERR x\r\n:12\r\n$3\r\nbar\r\n$-1\r\n*-1\r\n_\r\n",
        "nested": b"*2\r\n*1\r\n:1\r\n%1\r\n+a\r\n~1\r\n,1.5\r\n",
        "resp3": b"|1\r\n+ttl\r\n:3\r\n$1\r\nv\r\n>2\r\n+message\r\n=7\r\ntxt:abc\r\n#t\r\n(123\r\n",
        "deep": b"*1\r\n" * 200 + b":1\r\n",
        "bad": b"+OK\r\n$x\r\n",
        "unknown-type": b":1\r\n@oops\r\n",
    }


def _seed_config() -> dict[str, bytes]:
    return {
        "minimal": b"seeds: ['127.0.0.1:7000']\n",
        "full": Path(__file__).parents[2].joinpath("config.example.yaml").read_bytes(),
        "wrong-types": b"seeds: 5\nlisten: [1, 2]\ntimeouts: 3\nworkers: -1\nlog_level: {a: 1}\n",
        "not-yaml": b"seeds: [\n  - : :\n",
        "twice": b"seeds: ['a:1']\nseeds: ['b:2']\n",
        "top-list": b"- a\n- b\n",
        "tags": b"seeds: !!binary aGVsbG8=\nworkers: !!float .inf\n",
    }


def _bus_message(mtype: int, **fields: object) -> bytes:
    m = bus.Message(type=mtype, sender=PEER_NAME, myip="127.0.0.2", port=7001, cport=17001,
                    flags=bus.F_MASTER, state=bus.STATE_OK, mflags=bytes([bus.MF_EXT_DATA, 0, 0]))
    for k, v in fields.items():
        setattr(m, k, v)
    return bus.encode(m)


def _seed_bus() -> dict[str, bytes]:
    gossip = [bus.Gossip(b"c" * 40, 0, 0, "127.0.0.3", 7002, 17002, bus.F_MASTER | bus.F_PFAIL)]
    return {
        "ping": _bus_message(bus.PING, gossip=gossip, hostname="node-b"),
        "pong": _bus_message(bus.PONG, myslots=b"\xff" * 16 + bytes(bus.SLOTS_BYTES - 16)),
        "meet": _bus_message(bus.MEET),
        "fail": _bus_message(bus.FAIL, fail_name=b"c" * 40),
        "update": _bus_message(bus.UPDATE, update_epoch=5, update_name=PEER_NAME,
                               update_slots=bytes(bus.SLOTS_BYTES)),
        "publish": _bus_message(bus.PUBLISH, channel=b"ch", message=b"hello"),
        "auth-request": _bus_message(bus.FAILOVER_AUTH_REQUEST),
        "mfstart": _bus_message(bus.MFSTART),
        "module": _bus_message(bus.MODULE, module_id=1, module_type=2, module_payload=b"xyz"),
    }


def _seed_rdb() -> dict[str, bytes]:
    return {
        "string": rdb.dump("string", b"hello"),
        "int-string": rdb.dump("string", b"12345"),
        "list": rdb.dump("list", [b"a", b"bb", b"123"]),
        "long-list": rdb.dump("list", [b"x" * 70] * 200),
        "set-intset": rdb.dump("set", {b"1", b"2", b"300000"}),
        "set": rdb.dump("set", {b"a", b"b"}),
        "hash": rdb.dump("hash", {b"f": b"v", b"g": b"1"}),
        "big-hash": rdb.dump("hash", {b"f%d" % i: b"v" * 80 for i in range(200)}),
        "zset": rdb.dump("zset", [(b"a", 1.0), (b"b", 2.5)]),
        "big-zset": rdb.dump("zset", [(b"m%d" % i, float(i)) for i in range(200)]),
    }


SEEDS: dict[str, Callable[[], dict[str, bytes]]] = {
    "resp": _seed_resp, "framer": _seed_framer, "config": _seed_config, "bus": _seed_bus,
    "rdb": _seed_rdb,
}


def write_seeds() -> None:
    """(Re)write every target's ``seed-*`` files."""
    for target, make in SEEDS.items():
        folder = CORPUS_DIR / target
        folder.mkdir(parents=True, exist_ok=True)
        for name, data in make().items():
            (folder / f"seed-{name}").write_bytes(data)


# -- mutation ------------------------------------------------------------------------------------
_INTERESTING = (b"\r\n", b"-1", b"0", b"4294967295", b"2147483648", b"-9223372036854775809",
                b"\xff\xff\xff\xff", b"\x00\x00\x00\x00", b"*", b"$", b"%", b"|", b"99999999999")


def mutate(data: bytes, rng: random.Random, rounds: int = 4) -> bytes:
    """A few random edits: flip, insert, delete, splice in a boundary value, truncate, repeat."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, rounds)):
        op = rng.randrange(7)
        at = rng.randint(0, len(buf))
        if op == 0 and buf:
            i = rng.randrange(len(buf))
            buf[i] ^= 1 << rng.randrange(8)
        elif op == 1:
            buf[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif op == 2:
            del buf[at : at + rng.randint(1, 16)]
        elif op == 3:
            word = rng.choice(_INTERESTING)
            buf[at : at + len(word)] = word
        elif op == 4:
            del buf[at:]
        elif op == 5 and buf:
            i = rng.randrange(len(buf))
            buf[i] = rng.randrange(256)
        elif op == 6 and len(buf) < 1 << 16:
            j = rng.randint(0, len(buf))
            buf[at:at] = buf[min(at, j) : max(at, j)][:4096]
    return bytes(buf)
