"""The bus decoder's fuzz corpus, mutated, sent to a running node's bus port: the node keeps
serving (a PING answers after each input), its peak RSS stays within tests/fuzz/bounds.py's
bound, and it logs no failure of its own (a malformed message closes its link, nothing more).
Found this way: a MEET whose sender address is not ASCII made the node's connection attempt
raise UnicodeError, which ended the node."""

from __future__ import annotations

import random
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from slotgate.node.cluster import bus
from tests.fuzz import bounds
from tests.fuzz.corpus import CORPUS, examples
from tests.support import ManagedProcess, RawClient, during, slotgate_node


@pytest.fixture
def node(tmp_path: Path) -> Iterator[ManagedProcess]:
    n = slotgate_node(tmp_path, cluster=True).start()
    try:
        yield n
    finally:
        n.stop()


def send(n: ManagedProcess, data: bytes) -> None:
    try:
        with socket.create_connection(("127.0.0.1", n.port + 10000), timeout=5) as s:
            s.sendall(data)
    except OSError:
        pass  # the node may close the link before all of it is sent


def alive_and_clean(n: ManagedProcess) -> None:
    with RawClient(n.port) as c:
        assert c.call("PING") == b"+PONG\r\n"
    assert n.alive()
    log = n.log_text()
    assert "Traceback" not in log, log[-3000:]


def test_meet_from_an_address_no_resolver_takes(node: ManagedProcess) -> None:
    m = bus.Message(type=bus.MEET, sender=b"e" * bus.NAME_LEN, myip="AAAA", port=7005,
                    cport=17005, flags=bus.F_MASTER)
    data = bus.encode(m)
    at = data.index(b"AAAA\0")
    send(node, data[:at] + b"\xff\xfe\xfd\xfc" + data[at + 4:])
    # the node meets the sender: it tries to connect to that address at its next cron tick
    # and again after each failure; the window covers several attempts
    for _ in during(3.0):
        assert node.alive(), node.log_text()[-3000:]
    alive_and_clean(node)


def test_mutated_messages(node: ManagedProcess) -> None:
    corpus = [p.read_bytes() for p in sorted((CORPUS / "bus").iterdir())]
    rng = random.Random(17)
    control = RawClient(node.port, timeout_s=10)
    live = bounds.LiveBounds(node.pid)
    for _ in range(examples() * 2):
        data = bytearray(rng.choice(corpus))
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(min(len(data), bus.HEADER_LEN + 64))] = rng.randrange(256)
        if rng.random() < 0.8:  # a valid frame, so that the body is decoded and processed
            data[:8] = bus.SIG + len(data).to_bytes(4, "big")
        send(node, bytes(data))
        live.after(bytes(data), lambda: control.call("PING"))
    live.check()
    control.close()
    print(f"bus live: {live.stats}")
    alive_and_clean(node)
