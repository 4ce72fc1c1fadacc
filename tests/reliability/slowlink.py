"""A delaying TCP relay, for kernels without sch_netem (tc's delay): run in a node's network
namespace in front of the node, it forwards every connection to ``--listen ADDR:PORT`` to
``--to HOST:PORT`` and holds what the node sends back for ``--delay-ms`` before passing it on,
as netem on the node's egress would (requests pass at once; replies, order kept, leave late).
The delay is off at start; SIGUSR1 turns it on, SIGUSR2 off again.

    python -m tests.reliability.slowlink --listen 10.77.0.2:7000 --to 127.0.0.1:7000 \\
        --listen 10.77.0.2:17000 --to 127.0.0.1:17000 --delay-ms 200
"""

from __future__ import annotations

import argparse
import signal
import socket

import trio

CHUNK_BYTES = 65536


class Delay:
    def __init__(self, delay_ms: int) -> None:
        self.delay_s = delay_ms / 1000
        self.on = False


async def pump(src: trio.SocketStream, dst: trio.SocketStream, delay: Delay | None) -> None:
    """``src`` to ``dst``; with ``delay``, each chunk sent that long after it arrived (while the
    delay is on). When either side ends, both streams are closed (the other pump ends too)."""
    send, receive = trio.open_memory_channel[tuple[float, bytes]](1024)

    async def later() -> None:
        async with receive:
            async for due_s, data in receive:
                await trio.sleep_until(due_s)
                await dst.send_all(data)

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(later)
            async with send:
                while data := await src.receive_some(CHUNK_BYTES):
                    lag_s = delay.delay_s if delay is not None and delay.on else 0.0
                    await send.send((trio.current_time() + lag_s, data))
    except Exception:  # a connection ending, from either side, ends the relay of it
        pass
    finally:
        await src.aclose()
        await dst.aclose()


async def relay(listen: tuple[str, int], to: tuple[str, int], delay: Delay) -> None:
    async def serve(client: trio.SocketStream) -> None:
        try:
            node = await trio.open_tcp_stream(*to)
        except OSError:
            await client.aclose()
            return
        for stream in (client, node):
            stream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(pump, client, node, None)
            nursery.start_soon(pump, node, client, delay)

    await trio.serve_tcp(serve, listen[1], host=listen[0])


def address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


async def main_async(pairs: list[tuple[str, str]], delay_ms: int) -> None:
    delay = Delay(delay_ms)
    with trio.open_signal_receiver(signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            for listen, to in pairs:
                nursery.start_soon(relay, address(listen), address(to), delay)
            async for sig in signals:
                if sig == signal.SIGTERM:
                    nursery.cancel_scope.cancel()
                    return
                delay.on = sig == signal.SIGUSR1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", action="append", required=True)
    ap.add_argument("--to", action="append", required=True)
    ap.add_argument("--delay-ms", type=int, default=200)
    args = ap.parse_args()
    trio.run(main_async, list(zip(args.listen, args.to, strict=True)), args.delay_ms)


if __name__ == "__main__":
    main()
