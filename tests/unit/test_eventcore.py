"""eventcore: the poller, the writer, listeners and backoff, on real loopback sockets, in one
trio run."""

from __future__ import annotations

import select
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager

import pytest
import trio

from slotgate.eventcore.backoff import backoff_ms
from slotgate.eventcore.listen import Address, accept_loop, open_listeners, redis_bind, resolve
from slotgate.eventcore.poller import EOF, PASSES_PER_TURN, HandlerError, Poller, receive_ready
from slotgate.eventcore.sockets import close, take_over
from slotgate.eventcore.writer import Flusher, Writer

LOCAL = [Address(socket.AF_INET, "127.0.0.1")]
LINGER_0 = b"\x01\x00\x00\x00\x00\x00\x00\x00"  # struct linger {on, 0 s}: close sends RST


@contextmanager
def tcp_pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A connected pair of non-blocking TCP sockets on 127.0.0.1 (ours, the peer)."""
    (lsock,) = open_listeners(LOCAL, 0)
    with lsock:
        peer = socket.create_connection(lsock.getsockname()[:2])
        ours, _ = lsock.accept()
    ours.setblocking(False)
    peer.setblocking(False)
    with ours, peer:
        yield ours, peer


@asynccontextmanager
async def running(poller: Poller) -> AsyncIterator[trio.Nursery]:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(poller.run)
        yield nursery
        nursery.cancel_scope.cancel()


def collector(got: list[bytes], stop_at: bytes = b"") -> Callable[[bytes], object]:
    """A handler that collects what arrives and hands back all of it once ``stop_at``
    arrived."""

    def handler(data: bytes) -> object:
        got.append(data)
        if stop_at and b"".join(got).endswith(stop_at):
            return b"".join(got)
        return None

    return handler


# --- the poller -----------------------------------------------------------------------------

async def test_park_reads_for_the_handler_until_it_hands_back() -> None:
    poller = Poller()
    got: list[bytes] = []
    with tcp_pair() as (ours, peer):
        async with running(poller):
            peer.send(b"one ")
            with trio.move_on_after(0.2):
                await poller.park(ours, collector(got, stop_at=b"two"), 100)
            assert got == [b"one "]  # served, still parked: no value yet
            peer.send(b"two")
            value = await poller.park(ours, collector(got, stop_at=b"two"), 100)
            assert value == b"one two"
            peer.send(b"0123456789")
            got.clear()
            assert await poller.park(ours, collector(got, b"9"), 4) == b"0123456789"
            assert got == [b"0123", b"4567", b"89"]  # max_bytes per read
            peer.close()
            assert await poller.park(ours, collector(got), 100) is EOF


async def test_a_read_error_is_raised_by_park() -> None:
    poller = Poller()
    with tcp_pair() as (ours, peer):
        async with running(poller):
            peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_0)
            peer.send(b"unread")
            ours.send(b"x")  # unread on the peer's side: its close sends a reset
            peer.close()
            await trio.sleep(0.05)
            with pytest.raises(ConnectionResetError):
                while True:  # (the data before the reset may come first)
                    await poller.park(ours, lambda data: None, 100)


async def test_a_pass_serves_every_ready_socket_then_the_after_pass_hooks() -> None:
    poller = Poller()
    events: list[str] = []
    poller.after_pass.append(lambda: events.append("end of pass"))
    with tcp_pair() as (a, a_peer), tcp_pair() as (b, b_peer):

        async def owner(sock: socket.socket, name: str) -> None:
            handler = collector([], stop_at=b"x")

            def logged(data: bytes) -> object:
                events.append(name)
                return handler(data)

            assert await poller.park(sock, logged, 100) == b"x"

        async with trio.open_nursery() as nursery:
            async with trio.open_nursery() as owners:
                owners.start_soon(owner, a, "a")
                owners.start_soon(owner, b, "b")
                await trio.testing.wait_all_tasks_blocked()
                a_peer.send(b"x")  # (loopback: readable as soon as send returns)
                b_peer.send(b"x")
                nursery.start_soon(poller.run)  # its first pass finds both ready
            nursery.cancel_scope.cancel()
    assert sorted(events[:2]) == ["a", "b"] and events[2:] == ["end of pass"]


async def test_passes_run_in_a_row_but_other_tasks_get_their_turn() -> None:
    """A socket that stays readable (one byte read per pass of many sent) is served in
    several passes per trio turn, but never more than PASSES_PER_TURN before the other tasks
    run: a task that only checkpoints keeps pace with the passes (a poller that never
    yielded would starve it, and this test would time out)."""
    poller = Poller()
    passes: list[int] = []  # the other task's count of turns at each pass
    turns = [0]
    poller.after_pass.append(lambda: passes.append(turns[0]))
    with tcp_pair() as (ours, peer):
        peer.send(b"x" * 400)

        async def other() -> None:
            while True:
                turns[0] += 1
                await trio.lowlevel.checkpoint()

        def handler(data: bytes) -> object:
            return b"done" if len(passes) >= 200 else None

        async def owner() -> None:
            assert await poller.park(ours, handler, 1) == b"done"

        with trio.fail_after(10):
            async with running(poller) as nursery:
                nursery.start_soon(other)
                await owner()
    # (trio runs a batch of tasks in random order: the other task may count once before the
    # poller's turn and once after the next, so it sees up to two turns' passes in a row; a
    # poller that yields after every pass shows at most two)
    in_a_row = max(passes.count(turn) for turn in set(passes))
    assert 2 < in_a_row <= 2 * PASSES_PER_TURN


async def test_a_handler_that_raises_closes_only_its_own_connection(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The bug is logged with its traceback, its owner's park raises HandlerError (the
    original as the cause), and the other socket is served on by the same poller."""
    poller = Poller()

    def boom(data: bytes) -> object:
        raise ZeroDivisionError("handler bug")

    with tcp_pair() as (bad, bad_peer), tcp_pair() as (good, good_peer):
        got: list[bytes] = []
        async with running(poller):
            async with trio.open_nursery() as owners:
                results: dict[str, object] = {}

                async def bad_owner() -> None:
                    with pytest.raises(HandlerError) as info:
                        await poller.park(bad, boom, 100)
                    results["bad"] = info.value.__cause__

                async def good_owner() -> None:
                    results["good"] = await poller.park(good,
                                                        collector(got, stop_at=b"2"), 100)

                owners.start_soon(bad_owner)
                owners.start_soon(good_owner)
                await trio.testing.wait_all_tasks_blocked()
                good_peer.send(b"1")
                bad_peer.send(b"!")
                await trio.testing.wait_all_tasks_blocked()
                good_peer.send(b"2")
        assert isinstance(results["bad"], ZeroDivisionError)
        assert results["good"] == b"12"
    crash = [r for r in caplog.records if r.name == "eventcore" and r.exc_info]
    assert len(crash) == 1 and "closing that connection" in crash[0].getMessage()
    assert crash[0].exc_info is not None and crash[0].exc_info[0] is ZeroDivisionError


async def test_a_handler_returning_an_exception_has_its_owner_raise_it() -> None:
    poller = Poller()
    with tcp_pair() as (ours, peer):
        async with running(poller):
            peer.send(b"x")
            with pytest.raises(ValueError):
                await poller.park(ours, lambda data: ValueError("bad input"), 100)


async def test_wake_resumes_a_parked_owner_and_cancel_unwatches() -> None:
    poller = Poller()
    calls: list[bytes] = []

    def count(data: bytes) -> None:
        calls.append(data)

    with tcp_pair() as (ours, peer):
        async with running(poller) as nursery:
            assert not poller.wake(ours, "nobody parked")
            value: list[object] = []

            async def owner() -> None:
                value.append(await poller.park(ours, count, 100))

            nursery.start_soon(owner)
            await trio.testing.wait_all_tasks_blocked()
            assert poller.wake(ours, "go")
            await trio.testing.wait_all_tasks_blocked()
            assert value == ["go"] and calls == []
            with trio.move_on_after(0.05):  # cancelled while parked: no longer watched
                await poller.park(ours, count, 100)
            peer.send(b"x")
            await trio.sleep(0.05)
            assert calls == [] and ours.recv(10) == b"x"  # not read by the poller


async def test_watch_serves_with_no_task_and_resumes_with_the_value() -> None:
    """A socket watched with no task: its handler is served as in ``park``; the value it hands
    back (then EOF, a read error) goes to ``resume``, once, and the socket is unwatched;
    ``wake`` and ``unwatch`` work on it as on a parked one."""
    poller = Poller()
    got: list[bytes] = []
    resumed: list[object] = []
    with tcp_pair() as (ours, peer):
        async with running(poller):
            poller.watch(ours, collector(got, stop_at=b"two"), 100, resumed.append)
            peer.send(b"one ")
            await wait_until_async(lambda: got)
            assert resumed == []  # served, still watched
            peer.send(b"two")
            await wait_until_async(lambda: resumed)
            assert resumed == [b"one two"]
            peer.send(b"more")
            await trio.sleep(0.05)
            assert resumed == [b"one two"] and ours.recv(10) == b"more"  # unwatched
            poller.watch(ours, collector(got), 100, resumed.append)
            assert poller.wake(ours, "woken") and resumed[-1] == "woken"
            assert not poller.unwatch(ours)
            poller.watch(ours, collector(got), 100, resumed.append)
            assert poller.unwatch(ours)
            poller.watch(ours, collector(got), 100, resumed.append)
            peer.close()
            await wait_until_async(lambda: resumed[-1] is EOF)
            assert len(resumed) == 3
    poller = Poller()
    with tcp_pair() as (ours, peer):
        async with running(poller):
            poller.watch(ours, collector(got), 100, resumed.append)
            peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_0)
            ours.send(b"x")  # unread on the peer's side: its close sends a reset
            peer.close()
            await wait_until_async(lambda: len(resumed) == 4)
            assert isinstance(resumed[-1], ConnectionResetError)


async def wait_until_async(cond: Callable[[], object]) -> None:
    with trio.fail_after(5):
        while not cond():  # noqa: ASYNC110 (a handler's effects have no event)
            await trio.sleep(0.01)


async def test_serve_now_serves_once_as_a_pass_would(caplog: pytest.LogCaptureFixture) -> None:
    poller = Poller()

    def boom(data: bytes) -> object:
        raise KeyError("bug")

    with tcp_pair() as (ours, peer):
        assert poller.serve_now(ours, collector([], b"x"), 100) is None  # nothing there yet
        peer.send(b"x")
        assert poller.serve_now(ours, collector([], b"x"), 100) == b"x"
        peer.send(b"y")
        with pytest.raises(HandlerError) as info:
            poller.serve_now(ours, boom, 100)
        assert isinstance(info.value.__cause__, KeyError)
        assert [r.exc_info[0] for r in caplog.records if r.exc_info] == [KeyError]
        peer.close()
        assert poller.serve_now(ours, boom, 100) is EOF


async def test_receive_ready_waits_then_reads() -> None:
    with tcp_pair() as (ours, peer):
        async with trio.open_nursery() as nursery:
            got: list[bytes] = []

            async def read() -> None:
                got.append(await receive_ready(ours, 100))

            nursery.start_soon(read)
            await trio.testing.wait_all_tasks_blocked()
            assert got == []
            peer.send(b"hello")
        assert got == [b"hello"]
        peer.close()
        assert await receive_ready(ours, 100) == b""


# --- the writer -----------------------------------------------------------------------------

def drain(sock: socket.socket) -> bytes:
    chunks: list[bytes] = []
    while True:
        try:
            data = sock.recv(1 << 20)
        except BlockingIOError:
            return b"".join(chunks)
        if not data:
            return b"".join(chunks)
        chunks.append(data)


async def test_write_now_writes_everything_queued_at_once() -> None:
    with tcp_pair() as (ours, peer):
        w = Writer(sock=ours)
        w.out += [b"a", b"bc"]
        w.unsent = 2
        assert w.write_now() == 3
        assert (w.out, w.unsent) == ([], 0)
        await trio.sleep(0.01)
        assert drain(peer) == b"abc"
        w.sock = None  # closed: nothing is written, nothing is lost from the queue
        w.out.append(b"late")
        assert w.write_now() == 0 and w.out == [b"late"]


async def test_a_queued_bytearray_is_sent_alone_or_joined() -> None:
    """The node's pub/sub deliveries queue a coalescing ``bytearray``: alone in the queue or
    with bytes, by write_now or send_rest, it goes out as bytes would (compiled, the writer
    once read its queue as ``list[bytes]`` and raised TypeError on a lone bytearray)."""
    with tcp_pair() as (ours, peer):
        w = Writer(sock=ours)
        w.out.append(bytearray(b"lone"))
        assert w.write_now() == 4
        w.out += [bytearray(b"with "), b"bytes"]
        assert w.write_now() == 10
        w.out.append(bytearray(b"; rest"))
        assert await w.send_rest() == 6
        w.out += [b"; ", bytearray(b"both")]
        assert await w.send_rest() == 6
        await trio.sleep(0.01)
        assert drain(peer) == b"lonewith bytes; rest; both"


async def test_a_full_socket_hands_the_rest_to_the_writer_task_in_order() -> None:
    """What the kernel does not take waits in ``out``; the writer task sends it as the peer
    reads, with what was queued meanwhile after it; write_now stays out of its way."""
    with tcp_pair() as (ours, peer):
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        big = bytes(range(256)) * 4096  # 1 MiB: far more than both buffers
        w = Writer(sock=ours)
        w.out.append(big)
        chunks: list[int] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(w.run, lambda: chunks.append(1))
            written = w.write_now()
            assert 0 < written < len(big)
            assert w.out == [big[written:]]
            await trio.testing.wait_all_tasks_blocked()
            assert w.sending and w.out == []  # the task took the rest and waits for room
            received = [drain(peer)]
            # Room again, before the task can run: write_now must not jump the queue.
            select.select([], [ours], [], 5)
            w.out.append(b"after")
            assert w.write_now() == 0 and w.out == [b"after"]  # the task's, in order
            while sum(map(len, received)) < len(big) + 5:
                await trio.lowlevel.wait_readable(peer)
                received.append(drain(peer))
            await trio.testing.wait_all_tasks_blocked()
            assert not w.sending and w.out == [] and chunks == [1, 1]
            nursery.cancel_scope.cancel()
        assert b"".join(received) == big + b"after"


async def test_send_rest_sends_a_large_output_once_through_many_partial_writes() -> None:
    """Output far larger than the socket buffers, taken by a slow reader a little at a time:
    every byte arrives once, in order (compiled, a send loop with an ``await`` in a ``try``
    handler restarted its chunk from the start after each wait)."""
    with tcp_pair() as (ours, peer):
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
        first = b"".join(b"%08d" % i for i in range(100_000))  # no run repeats anywhere
        second = b"".join(b"%08x" % i for i in range(50_000))
        w = Writer([first, second], ours)
        received: list[bytes] = []
        sent: list[int] = []
        chunks: list[int] = []

        async def send() -> None:
            sent.append(await w.send_rest(lambda: chunks.append(1)))

        expected = len(first) + len(second)
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(send)
                while not sent and sum(map(len, received)) <= expected:
                    await trio.lowlevel.wait_readable(peer)
                    received.append(peer.recv(4096))
                    await trio.lowlevel.checkpoint()  # the writer waits for room many times
                nursery.cancel_scope.cancel()  # a writer sending too much
            await trio.sleep(0.01)
            received.append(drain(peer))
        data = b"".join(received)
        assert len(data) == expected and data == first + second
        assert sent == [len(data)] and chunks == [1] and not w.sending and w.out == []


async def test_send_rest_raises_when_the_peer_is_gone() -> None:
    with tcp_pair() as (ours, peer):
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_0)
        peer.close()  # RST
        await trio.sleep(0.05)
        w = Writer([b"x" * 100_000], ours)
        with pytest.raises(OSError):
            await w.send_rest()
        assert not w.sending


async def test_a_socket_taken_over_from_trio_and_closed_under_a_waiting_writer() -> None:
    (lsock,) = open_listeners(LOCAL, 0)
    with lsock:
        peer = socket.create_connection(lsock.getsockname()[:2])
        tsock = trio.socket.from_stdlib_socket(lsock.accept()[0])
    with peer:
        sock = take_over(tsock)
        assert not sock.getblocking() and tsock.fileno() == -1
        w = Writer([b"x" * (16 << 20)], sock)  # more than the buffers take: send_rest waits
        async with trio.open_nursery() as nursery:

            async def send() -> None:
                with pytest.raises(trio.ClosedResourceError):
                    await w.send_rest()

            nursery.start_soon(send)
            await trio.testing.wait_all_tasks_blocked()
            assert w.sending
            w.sock = None
            close(sock)  # wakes the writer
        assert sock.fileno() == -1 and not w.sending
        close(sock)  # closed already: nothing happens
        with pytest.raises(OSError):  # no socket
            await Writer([b"x"]).send_rest()


async def test_flusher_writes_each_listed_writer_once() -> None:
    with tcp_pair() as (ours, peer):
        w = Writer(sock=ours)
        f = Flusher()
        w.out.append(b"1")
        f.add(w)
        w.out.append(b"2")
        f.add(w)
        assert f.pending == [w] and w.dirty
        f.flush()
        assert f.pending == [] and not w.dirty and w.out == []
        await trio.sleep(0.01)
        assert drain(peer) == b"12"


# --- listeners ------------------------------------------------------------------------------

def test_redis_bind_words() -> None:
    assert redis_bind(["*", "-::*", "127.0.0.1", "-::1"]) == [
        Address(socket.AF_INET, "0.0.0.0", False), Address(socket.AF_INET6, "::", True),
        Address(socket.AF_INET, "127.0.0.1", False), Address(socket.AF_INET6, "::1", True)]
    assert resolve("") == [Address(socket.AF_UNSPEC, None)]


def test_open_listeners_shares_port_zero_skips_optional_and_cleans_up() -> None:
    # 192.0.2.1 (TEST-NET-1) is no local address: binding it fails.
    socks = open_listeners([Address(socket.AF_INET, "127.0.0.1"),
                            Address(socket.AF_INET, "192.0.2.1", optional=True),
                            Address(socket.AF_INET, "127.0.0.2")], 0, backlog=16)
    try:
        assert len(socks) == 2
        port = socks[0].getsockname()[1]
        assert port != 0 and socks[1].getsockname() == ("127.0.0.2", port)
        for s in socks:
            assert s.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR)
            assert s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
        with pytest.raises(OSError):  # in use, and no SO_REUSEPORT
            open_listeners(LOCAL, port)
    finally:
        for s in socks:
            s.close()
    with pytest.raises(OSError):
        open_listeners([Address(socket.AF_INET, "127.0.0.1"),
                        Address(socket.AF_INET, "192.0.2.1")], port)
    open_listeners(LOCAL, port)[0].close()  # the first one was closed on the failure


def test_every_address_a_name_resolves_to_listens_on_one_port() -> None:
    socks = open_listeners(resolve("localhost"), 0)
    try:
        assert socks and len({s.getsockname()[1] for s in socks}) == 1
    finally:
        for s in socks:
            s.close()


def test_reuse_port_lets_a_reservation_and_listeners_share_an_address() -> None:
    reserved = open_listeners(resolve("127.0.0.1"), 0, reuse_port=True, listen=False)
    port = reserved[0].getsockname()[1]
    assert not reserved[0].getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
    a = open_listeners(resolve("127.0.0.1"), port, reuse_port=True)
    b = open_listeners(resolve("127.0.0.1"), port, reuse_port=True)
    for s in reserved + a + b:
        s.close()


async def test_accept_loop_starts_a_handler_per_connection() -> None:
    (lsock,) = open_listeners(LOCAL, 0)
    port = lsock.getsockname()[1]
    accepted: list[int] = []

    async def handler(sock: trio.socket.SocketType) -> None:
        accepted.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        sock.close()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(accept_loop, trio.socket.from_stdlib_socket(lsock), handler, nursery)
        for _ in range(3):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            assert await stream.receive_some(10) == b""  # the handler closed it
            await stream.aclose()
        nursery.cancel_scope.cancel()
    assert len(accepted) == 3 and all(accepted)


# --- backoff ----------------------------------------------------------------------------------

def test_backoff_doubles_from_min_up_to_max() -> None:
    assert [backoff_ms(n, 10, 500) for n in range(8)] == [10, 20, 40, 80, 160, 320, 500, 500]
    assert backoff_ms(10**6, 1, 10**9) == 65536  # the shift is capped (no huge ints)
    assert backoff_ms(0, 100, 5000) / 1000 == 0.1
