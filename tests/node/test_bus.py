"""Cluster bus wire format: byte layouts built from the header's documented offsets, and a real
redis-server 7.0 answering a MEET we encode."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from slotgate.node.cluster import bus
from tests.support import ManagedProcess, during, redis_server

NAME_A = b"a" * 40
NAME_B = b"0123456789abcdef0123456789abcdef01234567"


def _spec_header(mtype: int, totlen: int, count: int = 0, exts: int = 0) -> bytearray:
    """A header written field by field at the offsets of Redis' clusterMsg (cluster.h)."""
    h = bytearray(2256)
    h[0:4] = b"RCmb"
    struct.pack_into(">I", h, 4, totlen)
    struct.pack_into(">H", h, 8, 1)  # ver
    struct.pack_into(">H", h, 10, 7000)  # port
    struct.pack_into(">H", h, 12, mtype)
    struct.pack_into(">H", h, 14, count)
    struct.pack_into(">Q", h, 16, 11)  # currentEpoch
    struct.pack_into(">Q", h, 24, 7)  # configEpoch
    struct.pack_into(">Q", h, 32, 12345)  # offset
    h[40:80] = NAME_A
    h[80 + 0] |= 1 << 0  # slot 0
    h[80 + 1] |= 1 << 1  # slot 9
    h[80 + 2047] |= 1 << 7  # slot 16383
    h[2128:2168] = NAME_B  # slaveof
    h[2168:2168 + 9] = b"127.0.0.1"
    struct.pack_into(">H", h, 2214, exts)
    struct.pack_into(">H", h, 2246, 0)  # pport
    struct.pack_into(">H", h, 2248, 17000)  # cport
    struct.pack_into(">H", h, 2250, bus.F_SLAVE)
    h[2252] = 0  # state ok
    h[2253] = bus.MF_EXT_DATA if exts else 0
    return h


def test_header_offsets_decode() -> None:
    gossip = bytearray(104)
    gossip[0:40] = NAME_B
    struct.pack_into(">II", gossip, 40, 1700000000, 1700000001)
    gossip[48:48 + 8] = b"10.0.0.1"
    struct.pack_into(">HHHH", gossip, 94, 7001, 17001, bus.F_MASTER | bus.F_PFAIL, 0)
    ext = struct.pack(">IHH", 16, 0, 0) + b"hostA\0\0\0"
    totlen = 2256 + 104 + len(ext)
    raw = bytes(_spec_header(bus.PING, totlen, count=1, exts=1) + gossip + ext)
    m = bus.decode(raw)
    assert (m.type, m.port, m.cport, m.current_epoch, m.config_epoch, m.offset) == (
        bus.PING, 7000, 17000, 11, 7, 12345)
    assert m.sender == NAME_A and m.slaveof == NAME_B and m.myip == "127.0.0.1"
    assert m.flags == bus.F_SLAVE and m.state == bus.STATE_OK
    assert bus.bitmap_slots(m.myslots) == [0, 9, 16383]
    assert len(m.gossip) == 1
    g = m.gossip[0]
    assert (g.name, g.ping_sent_s, g.pong_received_s, g.ip, g.port, g.cport, g.flags) == (
        NAME_B, 1700000000, 1700000001, "10.0.0.1", 7001, 17001, bus.F_MASTER | bus.F_PFAIL)
    assert m.hostname == "hostA"


def test_encode_matches_spec_layout() -> None:
    slots = bytearray(2048)
    for s in (0, 9, 16383):
        bus.bitmap_set(slots, s)
    m = bus.Message(type=bus.PING, sender=NAME_A, current_epoch=11, config_epoch=7,
                    offset=12345, myslots=bytes(slots), slaveof=NAME_B, myip="127.0.0.1",
                    port=7000, cport=17000, flags=bus.F_SLAVE, state=bus.STATE_OK)
    m.gossip = [bus.Gossip(NAME_B, 1700000000, 1700000001, "10.0.0.1", 7001, 17001,
                           bus.F_MASTER | bus.F_PFAIL)]
    m.hostname = "hostA"
    raw = bus.encode(m)
    gossip = bytearray(104)
    gossip[0:40] = NAME_B
    struct.pack_into(">II", gossip, 40, 1700000000, 1700000001)
    gossip[48:48 + 8] = b"10.0.0.1"
    struct.pack_into(">HHHH", gossip, 94, 7001, 17001, bus.F_MASTER | bus.F_PFAIL, 0)
    ext = struct.pack(">IHH", 16, 0, 0) + b"hostA\0\0\0"
    expected = bytes(_spec_header(bus.PING, 2256 + 104 + 16, count=1, exts=1) + gossip + ext)
    assert raw == expected


def test_fail_update_publish_roundtrip() -> None:
    for m in (
        bus.Message(type=bus.FAIL, sender=NAME_A, fail_name=NAME_B),
        bus.Message(type=bus.UPDATE, sender=NAME_A, update_epoch=9, update_name=NAME_B,
                    update_slots=bytes([0xFF]) + bytes(2047)),
        bus.Message(type=bus.PUBLISH, sender=NAME_A, channel=b"ch", message=b"hello"),
        bus.Message(type=bus.PUBLISHSHARD, sender=NAME_A, channel=b"c", message=b""),
    ):
        raw = bus.encode(m)
        back = bus.decode(raw)
        assert (back.type, back.fail_name, back.update_epoch, back.update_name,
                back.update_slots, back.channel, back.message) == (
            m.type, m.fail_name, m.update_epoch, m.update_name, m.update_slots, m.channel,
            m.message)
    fail = bus.encode(bus.Message(type=bus.FAIL, sender=NAME_A, fail_name=NAME_B))
    assert len(fail) == 2256 + 40 and fail[2256:] == NAME_B
    upd = bus.encode(bus.Message(type=bus.UPDATE, sender=NAME_A, update_epoch=9,
                                 update_name=NAME_B, update_slots=bytes(2048)))
    assert len(upd) == 2256 + 8 + 40 + 2048
    assert struct.unpack_from(">Q", upd, 2256)[0] == 9 and upd[2264:2304] == NAME_B
    pub = bus.encode(bus.Message(type=bus.PUBLISH, sender=NAME_A, channel=b"ch",
                                 message=b"hello"))
    assert struct.unpack_from(">II", pub, 2256) == (2, 5) and pub[2264:] == b"chhello"


def test_frame_reader_splits_and_rejects() -> None:
    a = bus.encode(bus.Message(type=bus.PING, sender=NAME_A))
    b = bus.encode(bus.Message(type=bus.FAIL, sender=NAME_A, fail_name=NAME_B))
    r = bus.FrameReader()
    stream = a + b
    r.feed(stream[:5])
    assert r.messages() == []
    r.feed(stream[5:3000])
    assert r.messages() == [a]
    r.feed(stream[3000:])
    assert r.messages() == [b]
    bad = bus.FrameReader()
    bad.feed(b"XXXX" + bytes(10))
    with pytest.raises(bus.BusError):
        bad.messages()
    short = bus.FrameReader()
    short.feed(b"RCmb" + struct.pack(">I", 100))
    with pytest.raises(bus.BusError):
        short.messages()


def test_truncated_bodies_raise() -> None:
    raw = bytearray(bus.encode(bus.Message(type=bus.PING, sender=NAME_A)))
    struct.pack_into(">H", raw, 14, 3)  # claims 3 gossip entries, has none
    with pytest.raises(bus.BusError):
        bus.decode(bytes(raw))
    with pytest.raises(bus.BusError):
        bus.decode(b"RCmb" + bytes(100))


def test_bitmap_is_lsb_first() -> None:
    bm = bytearray(2048)
    bus.bitmap_set(bm, 10)
    assert bm[1] == 0b100
    assert bus.bitmap_test(bm, 10) and not bus.bitmap_test(bm, 11)
    bus.bitmap_clear(bm, 10)
    assert not any(bm)


@pytest.fixture
def real_node(tmp_path: Path) -> Iterator[ManagedProcess]:
    proc = redis_server(tmp_path, cluster=True,
                        extra=["--cluster-announce-hostname", "real-host"]).start()
    try:
        yield proc
    finally:
        proc.stop()


def _read_message(sock: socket.socket, timeout_s: float = 5.0) -> bytes:
    reader = bus.FrameReader()
    sock.settimeout(0.5)
    for _ in during(timeout_s, interval_s=0):
        try:
            data = sock.recv(65536)
        except TimeoutError:
            continue
        if not data:
            break
        reader.feed(data)
        msgs = reader.messages()
        if msgs:
            return msgs[0]
    raise AssertionError("no message from the real node")


def test_real_redis_answers_our_meet(real_node: ManagedProcess) -> None:
    """Our encoded MEET is accepted by redis-server 7.0 and its PONG decodes exactly."""
    myid = real_node.client().execute_command("CLUSTER", "MYID")
    real_node.client().execute_command("CLUSTER", "ADDSLOTS", 0, 9, 16383)
    meet = bus.Message(type=bus.MEET, sender=NAME_A, port=21999, cport=31999,
                       flags=bus.F_MASTER | bus.F_MYSELF, hostname="ours")
    with socket.create_connection(("127.0.0.1", real_node.port + 10000)) as s:
        s.sendall(bus.encode(meet))
        pong = bus.decode(_read_message(s))
    assert pong.type == bus.PONG
    assert pong.sender == myid
    assert pong.port == real_node.port and pong.cport == real_node.port + 10000
    assert pong.flags & bus.F_MASTER and pong.flags & bus.F_MYSELF
    assert bus.bitmap_slots(pong.myslots) == [0, 9, 16383]
    assert pong.slaveof == bus.NULL_NAME
    assert pong.hostname == "real-host"
    assert pong.mflags[0] & bus.MF_EXT_DATA
    # The real node recorded us as a handshake node at the address our MEET came from.
    nodes = real_node.client().execute_command("CLUSTER", "NODES").decode()
    assert "127.0.0.1:21999@31999" in nodes and "handshake" in nodes
