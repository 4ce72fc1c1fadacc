"""Cluster bus wire format (Redis 7.0 ``clusterMsg``): pure encode/decode, no sockets.

Every message is one fixed 2256-byte header followed by a type-specific body::

    off  size  field                     off   size  field
    0    4     sig "RCmb"                2128  40    slaveof (all zero: a master)
    4    4     totlen (whole message)    2168  46    myip (announced ip, NUL padded)
    8    2     ver = 1                   2214  2     extensions (count, PING/PONG/MEET)
    10   2     port (client port)        2216  30    reserved
    12   2     type                      2246  2     pport (plaintext port with TLS)
    14   2     count (gossip entries)    2248  2     cport (bus port)
    16   8     currentEpoch              2250  2     flags (sender's node flags)
    24   8     configEpoch (master's)    2252  1     state (0 ok, 1 fail)
    32   8     offset (repl offset)      2253  3     mflags
    40   40    sender name
    80   2048  myslots (master's bitmap, LSB first: byte[slot/8] & (1 << (slot & 7)))

All integers are big-endian. Bodies:

- PING/PONG/MEET: ``count`` gossip entries of 104 bytes (name[40], ping_sent u32 s,
  pong_received u32 s, ip[46], port, cport, flags, pport, unused u16), then ``extensions``
  ping extensions, each ``{u32 length, u16 type, u16 unused, data}`` padded to 8 bytes
  (type 0 = hostname, NUL terminated; length includes the 8-byte header). A real 7.0 server
  sets mflags[0] EXT_DATA (4) on every PING/PONG/MEET it sends.
- FAIL: name[40]. UPDATE: configEpoch u64, name[40], slots[2048].
- PUBLISH/PUBLISHSHARD: channel_len u32, message_len u32, channel, message.
- FAILOVER_AUTH_REQUEST/ACK, MFSTART: header only. MODULE: module id u64, type u8, len u32.

``decode`` raises ``BusError`` for anything a real node would drop the link for (bad
signature, short or inconsistent length); the caller closes that link only.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

SIG = b"RCmb"
VERSION = 1
HEADER_LEN = 2256  # bytes before the body (sizeof(clusterMsg) - sizeof(union clusterMsgData))
NAME_LEN = 40
IP_LEN = 46
SLOTS_BYTES = 2048  # 16384 bits
GOSSIP_LEN = 104
MIN_READ_LEN = 8  # sig + totlen: enough to know how much to read
MAX_MSG_LEN = 64 * 1024 * 1024  # larger totlen: a corrupt stream, drop the link
NULL_NAME = b"\0" * NAME_LEN

# message types
PING, PONG, MEET, FAIL, PUBLISH = 0, 1, 2, 3, 4
FAILOVER_AUTH_REQUEST, FAILOVER_AUTH_ACK, UPDATE, MFSTART, MODULE, PUBLISHSHARD = 5, 6, 7, 8, 9, 10
TYPE_COUNT = 11
TYPE_NAMES = ("ping", "pong", "meet", "fail", "publish", "auth-req", "auth-ack", "update",
              "mfstart", "module", "publishshard")

# node flags (also the header's flags field and gossip entries' flags)
F_MASTER = 1
F_SLAVE = 2
F_PFAIL = 4
F_FAIL = 8
F_MYSELF = 16
F_HANDSHAKE = 32
F_NOADDR = 64
F_MEET = 128
F_MIGRATE_TO = 256
F_NOFAILOVER = 512
F_EXTENSIONS_SUPPORTED = 1024

# mflags[0]
MF_PAUSED = 1
MF_FORCEACK = 2
MF_EXT_DATA = 4

EXT_HOSTNAME = 0

STATE_OK, STATE_FAIL = 0, 1

_HDR = struct.Struct(">4sIHHHHQQQ40s2048s40s46sH30sHHHB3s")
assert _HDR.size == HEADER_LEN
_GOSSIP = struct.Struct(">40sII46sHHHHH")
assert _GOSSIP.size == GOSSIP_LEN
_EXT = struct.Struct(">IHH")
_UPDATE = struct.Struct(">Q40s2048s")
_PUBLISH = struct.Struct(">II")
_MODULE = struct.Struct(">QIB")


class BusError(Exception):
    """A malformed message: the receiving link must be closed."""


@dataclass(slots=True)
class Gossip:
    """One gossip entry: what the sender knows about another node."""

    name: bytes
    ping_sent_s: int
    pong_received_s: int
    ip: str
    port: int
    cport: int
    flags: int
    pport: int = 0


@dataclass(slots=True)
class Message:
    """A decoded cluster bus message (all types share the header fields)."""

    type: int
    sender: bytes
    current_epoch: int = 0
    config_epoch: int = 0
    offset: int = 0
    myslots: bytes = bytes(SLOTS_BYTES)
    slaveof: bytes = NULL_NAME
    myip: str = ""
    port: int = 0
    cport: int = 0
    pport: int = 0
    flags: int = 0
    state: int = STATE_FAIL
    mflags: bytes = b"\0\0\0"
    gossip: list[Gossip] = field(default_factory=list)
    hostname: str | None = None  # ping extension type 0
    fail_name: bytes = b""  # FAIL
    update_epoch: int = 0  # UPDATE
    update_name: bytes = b""
    update_slots: bytes = b""
    channel: bytes = b""  # PUBLISH / PUBLISHSHARD
    message: bytes = b""
    module_id: int = 0  # MODULE
    module_type: int = 0
    module_payload: bytes = b""
    version: int = VERSION


def _cstr(raw: bytes) -> str:
    end = raw.find(b"\0")
    return (raw if end < 0 else raw[:end]).decode("ascii", "replace")


def _pad(text: str, size: int) -> bytes:
    raw = text.encode("ascii", "replace")[: size - 1]
    return raw + b"\0" * (size - len(raw))


def _ext(ext_type: int, data: bytes) -> bytes:
    # length includes the 8-byte header; the whole extension is padded to 8 bytes
    body = data + b"\0" * (-len(data) % 8)
    return _EXT.pack(_EXT.size + len(body), ext_type, 0) + body


def encode(m: Message) -> bytes:
    """The bytes of ``m`` as a Redis 7.0 node sends them (totlen computed here)."""
    body: list[bytes] = []
    count = 0
    extensions = 0
    mflags = m.mflags
    t = m.type
    if t in (PING, PONG, MEET):
        count = len(m.gossip)
        for g in m.gossip:
            body.append(_GOSSIP.pack(g.name, g.ping_sent_s & 0xFFFFFFFF,
                                     g.pong_received_s & 0xFFFFFFFF, _pad(g.ip, IP_LEN),
                                     g.port, g.cport, g.flags, g.pport, 0))
        if m.hostname:
            # hostname ext: NUL terminated, padded to a multiple of 8
            body.append(_ext(EXT_HOSTNAME, m.hostname.encode() + b"\0"))
            extensions = 1
        mflags = bytes([mflags[0] | MF_EXT_DATA]) + mflags[1:]
    elif t == FAIL:
        body.append(m.fail_name)
    elif t == UPDATE:
        body.append(_UPDATE.pack(m.update_epoch, m.update_name, m.update_slots))
    elif t in (PUBLISH, PUBLISHSHARD):
        body.append(_PUBLISH.pack(len(m.channel), len(m.message)))
        body.append(m.channel)
        body.append(m.message)
    elif t == MODULE:
        body.append(_MODULE.pack(m.module_id, len(m.module_payload), m.module_type))
        body.append(m.module_payload)
    data = b"".join(body)
    header = _HDR.pack(
        SIG, HEADER_LEN + len(data), m.version, m.port, t, count, m.current_epoch,
        m.config_epoch, m.offset, m.sender, m.myslots, m.slaveof, _pad(m.myip, IP_LEN),
        extensions, bytes(30), m.pport, m.cport, m.flags, m.state, mflags,
    )
    return header + data


def frame_length(buf: bytes | bytearray) -> int | None:
    """The total length of the message starting ``buf`` (None: need 8 bytes first).

    Raises BusError on a bad signature or an impossible length (Redis frees the link)."""
    if len(buf) < MIN_READ_LEN:
        return None
    if bytes(buf[:4]) != SIG:
        raise BusError("bad signature")
    (totlen,) = struct.unpack_from(">I", buf, 4)
    if totlen < HEADER_LEN or totlen > MAX_MSG_LEN:
        raise BusError(f"bad message length {totlen}")
    return int(totlen)


def decode(data: bytes) -> Message:
    """Decode one whole message (``len(data)`` == its totlen)."""
    if len(data) < HEADER_LEN:
        raise BusError("message shorter than the header")
    (sig, totlen, ver, port, t, count, cur, cfg, off, sender, myslots, slaveof, myip, exts,
     _reserved, pport, cport, flags, state, mflags) = _HDR.unpack_from(data, 0)
    if sig != SIG or totlen != len(data):
        raise BusError("bad signature or length")
    m = Message(type=t, sender=sender, current_epoch=cur, config_epoch=cfg, offset=off,
                myslots=myslots, slaveof=slaveof, myip=_cstr(myip), port=port, cport=cport,
                pport=pport, flags=flags, state=state, mflags=mflags, version=ver)
    if ver != VERSION:
        return m  # the caller ignores other versions (as Redis does)
    body = memoryview(data)[HEADER_LEN:]
    decoder = _BODY.get(t)
    if decoder is not None:
        decoder(m, body, count, exts)
    return m


def _body_ping(m: Message, body: memoryview, count: int, exts: int) -> None:
    need = count * GOSSIP_LEN
    if len(body) < need:
        raise BusError("gossip section truncated")
    for i in range(count):
        name, ps, pr, ip, port, cport, flags, pport, _ = _GOSSIP.unpack_from(body, i * GOSSIP_LEN)
        m.gossip.append(Gossip(name, ps, pr, _cstr(ip), port, cport, flags, pport))
    pos = need
    has_ext = bool(m.mflags[0] & MF_EXT_DATA)
    for _ in range(exts if has_ext else 0):
        if len(body) - pos < _EXT.size:
            raise BusError("ping extension truncated")
        length, ext_type, _unused = _EXT.unpack_from(body, pos)
        if length < _EXT.size or pos + length > len(body):
            raise BusError("bad ping extension length")
        if ext_type == EXT_HOSTNAME:
            m.hostname = _cstr(bytes(body[pos + _EXT.size : pos + length]))
        pos += length  # unknown extension types are skipped (forward compatible)
    if pos != len(body):
        raise BusError("ping length mismatch")


def _body_fail(m: Message, body: memoryview, count: int, exts: int) -> None:
    if len(body) < NAME_LEN:
        raise BusError("FAIL truncated")
    m.fail_name = bytes(body[:NAME_LEN])


def _body_update(m: Message, body: memoryview, count: int, exts: int) -> None:
    if len(body) < _UPDATE.size:
        raise BusError("UPDATE truncated")
    m.update_epoch, m.update_name, m.update_slots = _UPDATE.unpack_from(body, 0)


def _body_publish(m: Message, body: memoryview, count: int, exts: int) -> None:
    if len(body) < _PUBLISH.size:
        raise BusError("PUBLISH truncated")
    clen, mlen = _PUBLISH.unpack_from(body, 0)
    if _PUBLISH.size + clen + mlen > len(body):
        raise BusError("PUBLISH length mismatch")
    start = _PUBLISH.size
    m.channel = bytes(body[start : start + clen])
    m.message = bytes(body[start + clen : start + clen + mlen])


def _body_module(m: Message, body: memoryview, count: int, exts: int) -> None:
    if len(body) < _MODULE.size:
        raise BusError("MODULE truncated")
    m.module_id, length, m.module_type = _MODULE.unpack_from(body, 0)
    m.module_payload = bytes(body[_MODULE.size : _MODULE.size + length])


_BODY = {
    PING: _body_ping, PONG: _body_ping, MEET: _body_ping, FAIL: _body_fail,
    UPDATE: _body_update, PUBLISH: _body_publish, PUBLISHSHARD: _body_publish,
    MODULE: _body_module,
}


class FrameReader:
    """Split a byte stream into whole messages: ``feed(data)`` then ``messages()``."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> None:
        self._buf += data

    def messages(self) -> list[bytes]:
        """Whole messages received so far (raises BusError on a corrupt stream)."""
        out: list[bytes] = []
        buf = self._buf
        pos = 0
        while True:
            n = frame_length(buf[pos : pos + MIN_READ_LEN])
            if n is None or len(buf) - pos < n:
                break
            out.append(bytes(buf[pos : pos + n]))
            pos += n
        if pos:
            del buf[:pos]
        return out


# -- slot bitmaps -------------------------------------------------------------------------------

def bitmap_test(bitmap: bytes | bytearray, slot: int) -> bool:
    return bool(bitmap[slot >> 3] & (1 << (slot & 7)))


def bitmap_set(bitmap: bytearray, slot: int) -> None:
    bitmap[slot >> 3] |= 1 << (slot & 7)


def bitmap_clear(bitmap: bytearray, slot: int) -> None:
    bitmap[slot >> 3] &= ~(1 << (slot & 7)) & 0xFF


# BIT_OFFSETS[b]: the set bit positions of byte b, LSB first
BIT_OFFSETS: tuple[tuple[int, ...], ...] = tuple(
    tuple(i for i in range(8) if b & (1 << i)) for b in range(256))


def bitmap_ranges(bitmap: bytes | bytearray) -> list[tuple[int, int]]:
    """The runs of set slots in ``bitmap`` as ascending (first, last) pairs."""
    x = int.from_bytes(bitmap, "little")  # LSB-first: slot s is bit s
    starts = x & ~(x << 1)
    if starts.bit_count() > _FEW_BITS:
        return _pairs(bitmap_slots(bitmap))
    ends = x & ~(x >> 1)
    out: list[tuple[int, int]] = []
    while starts:
        low = starts & -starts
        low_end = ends & -ends
        out.append((low.bit_length() - 1, low_end.bit_length() - 1))
        starts ^= low
        ends ^= low_end
    return out


def bitmap_diff_slots(bitmap: bytes | bytearray, other: bytes | bytearray) -> list[int]:
    """The slots set in ``bitmap`` and not in ``other``, ascending."""
    x = int.from_bytes(bitmap, "little") & ~int.from_bytes(other, "little")
    if x.bit_count() > _FEW_BITS:
        return bitmap_slots(x.to_bytes(SLOTS_BYTES, "little"))
    out: list[int] = []
    while x:
        low = x & -x
        out.append(low.bit_length() - 1)
        x ^= low
    return out


def bitmap_count(bitmap: bytes | bytearray) -> int:
    return int.from_bytes(bitmap, "little").bit_count()


_FEW_BITS = 64  # up to this many bits, single-bit extraction beats the byte table scan


def _pairs(slots: list[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for s in slots:
        if out and out[-1][1] == s - 1:
            out[-1] = (out[-1][0], s)
        else:
            out.append((s, s))
    return out


def bitmap_slots(bitmap: bytes | bytearray) -> list[int]:
    """Every slot set in ``bitmap``, ascending."""
    out: list[int] = []
    extend = out.extend
    offsets = BIT_OFFSETS
    for i, byte in enumerate(bitmap):
        if byte:
            if byte == 255:
                extend(range(i << 3, (i << 3) + 8))
            else:
                base = i << 3
                extend([base + b for b in offsets[byte]])
    return out
