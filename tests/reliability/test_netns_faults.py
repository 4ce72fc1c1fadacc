"""The fault helper itself: services in namespaces of their own reach each other over the
bridge; a cut, a one-way link cut and packet loss stop what they should and nothing else; a
heal restores everything; nothing is left behind."""

from __future__ import annotations

import socket
import threading

import pytest

from tests.netns import FaultUnavailable, Network
from tests.reliability.conftest import skip_unless_fault

PORT_B = 7000
PORT_A = 7001


def listen(net: Network, service: str, port: int) -> socket.socket:
    """A listening socket inside ``service``'s namespace, accepting (and closing) forever."""
    srv = net.call_in(service, socket.create_server, (net.address(service), port))

    def accept() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            conn.sendall(b"hi")
            conn.close()

    threading.Thread(target=accept, daemon=True).start()
    return srv


def reaches_once(net: Network, src: str, dst: str, port: int) -> bool:
    def attempt() -> bool:
        try:
            with socket.create_connection((net.address(dst), port), timeout=0.5) as s:
                return s.recv(2) == b"hi"
        except OSError:
            return False

    return net.call_in(src, attempt)


def reaches(net: Network, src: str, dst: str, port: int, tries: int = 6) -> bool:
    """Whether ``src`` gets through to ``dst``:``port``: a few tries of up to 0.5 s each, as
    a new port on the bridge can drop a first packet (a cut drops every one: each try fails)."""
    return any(reaches_once(net, src, dst, port) for _ in range(tries))


@pytest.fixture
def three(network: Network) -> Network:
    for service in ("a", "b", "c"):
        network.add(service, None)
    return network


def test_cut_and_heal(three: Network) -> None:
    net = three
    servers = [listen(net, "b", PORT_B), listen(net, "a", PORT_A)]
    try:
        assert reaches(net, "a", "b", PORT_B) and reaches(net, "c", "b", PORT_B)
        net.cut(["a"], ["b", "c"])
        assert not reaches_once(net, "a", "b", PORT_B)
        assert not reaches_once(net, "b", "a", PORT_A)
        assert reaches(net, "c", "b", PORT_B)  # the majority side still talks
        net.heal()
        assert reaches(net, "a", "b", PORT_B) and reaches(net, "b", "a", PORT_A)
    finally:
        for s in servers:
            s.close()


def test_one_way_link_cut(three: Network) -> None:
    net = three
    servers = [listen(net, "b", PORT_B), listen(net, "a", PORT_A)]
    try:
        net.cut_link("a", "b", PORT_B)
        assert not reaches_once(net, "a", "b", PORT_B)  # a's link to b is dead
        assert reaches(net, "b", "a", PORT_A)  # b's link to a works
        assert reaches(net, "c", "b", PORT_B)
        net.heal()
        assert reaches(net, "a", "b", PORT_B)
    finally:
        for s in servers:
            s.close()


def test_total_loss(three: Network) -> None:
    net = three
    server = listen(net, "b", PORT_B)
    try:
        net.lose("a", "b", 100)
        net.lose("c", "a", 30)  # a share: a rule of its own, which the kernel takes
        assert not reaches_once(net, "a", "b", PORT_B)
        assert reaches(net, "c", "b", PORT_B)
        net.heal()
        assert reaches(net, "a", "b", PORT_B)
    finally:
        server.close()


def test_delay(three: Network) -> None:
    try:
        three.delay("a", 200)
    except FaultUnavailable as exc:
        skip_unless_fault(exc)
    three.heal()
