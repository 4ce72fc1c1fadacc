"""What one idle client connection of the proxy costs, piece by piece (issue 15).

The proxy runs in this process (its real ``Proxy.run``, in front of the fake cluster of
tests/proxy/fakecluster.py: idle clients never reach a node). ``--connections`` idle
connections are opened after a baseline of 20; tracemalloc snapshots taken before and after
are diffed by the allocating line (``--frames`` frames of traceback), per connection; then the
objects one session holds, by ``sys.getsizeof``, and its task's await chain, frame by frame.
Python's allocations only: RSS (bench/bench_conn_memory.py) adds the allocator's overhead.

    .venv/bin/python bench/conn_memory_pieces.py [--connections 1000] [--frames 1] [--top 25]
        [--request]   # each connection sends one GET before it is idle

``SLOTGATE_COMPILE=0`` measures the pure-Python build.
"""

from __future__ import annotations

import argparse
import gc
import socket
import sys
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import trio  # noqa: E402

from slotgate.build import BUILD  # noqa: E402
from slotgate.proxy.front.server import Proxy  # noqa: E402
from slotgate.proxy.ops.settings import ProxySettings  # noqa: E402
from tests.conn_memory import raise_nofile  # noqa: E402
from tests.proxy.fakecluster import FakeCluster  # noqa: E402

BASELINE = 20


def _size_of_fields(obj: Any) -> list[tuple[str, int]]:
    """Each slot of ``obj`` that holds an object of its own (not shared with the proxy)."""
    rows = []
    for name in getattr(type(obj), "__slots__", ()):
        value = getattr(obj, name, None)
        if value is None or isinstance(value, (bool, int, float)):
            continue
        if sys.getrefcount(value) > 6:  # shared (the proxy's, a constant)
            continue
        rows.append((name, sys.getsizeof(value)))
    return rows


def _await_chain(task: Any) -> list[tuple[str, int]]:
    rows = []
    coro = task.coro
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        name = getattr(coro, "__qualname__", type(coro).__name__)
        size = sys.getsizeof(coro) + (sys.getsizeof(frame) if frame is not None else 0)
        rows.append((name, size))
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return rows


async def _measure(n: int, frames: int, top: int, request: bool) -> None:
    async with trio.open_nursery() as nursery:
        cluster = FakeCluster(3)
        await cluster.start(nursery)
        settings = ProxySettings(listen_port=0, seeds=cluster.seeds(),
                                 max_clients=n + BASELINE + 100)
        proxy = Proxy(settings)
        await nursery.start(proxy.run)
        proxy_port = int(proxy.listen_address.rpartition(":")[2])
        socks: list[socket.socket] = []
        get = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"

        async def open_more(count: int) -> None:
            want = len(proxy.sessions) + count
            for _ in range(count):
                s = socket.socket()
                s.setblocking(False)
                try:
                    s.connect(("127.0.0.1", proxy_port))
                except BlockingIOError:
                    pass
                socks.append(s)
            while len(proxy.sessions) < want:  # noqa: ASYNC110 (the proxy has no event for it)
                await trio.sleep(0.01)
            if request:  # each sends one GET and reads its reply, then stays idle
                for s in socks[-count:]:
                    s.send(get)
                    while True:
                        await trio.lowlevel.wait_readable(s)
                        if s.recv(64):
                            break
            await trio.sleep(0.2)  # every session settled (parked)

        await open_more(BASELINE)
        gc.collect()
        before = tracemalloc.take_snapshot()
        await open_more(n)
        gc.collect()
        after = tracemalloc.take_snapshot()
        stats = after.compare_to(before, "traceback" if frames > 1 else "lineno")
        total = sum(s.size_diff for s in stats)
        print(f"build: {BUILD.describe()}")
        print(f"\nPython allocations per idle connection: {total / n:.0f} bytes "
              f"({n} connections)\n")
        print("| bytes / conn | blocks / conn | where |\n|---:|---:|---|")
        for s in stats[:top]:
            where = " <- ".join(f"{Path(f.filename).name}:{f.lineno}"
                                for f in s.traceback[:frames])
            print(f"| {s.size_diff / n:.0f} | {s.count_diff / n:.1f} | {where} |")
        session = next(iter(proxy.sessions))
        print("\nthe session's own objects (sys.getsizeof):")
        print(f"  Session: {sys.getsizeof(session)}")
        for name, size in _size_of_fields(session):
            print(f"  .{name}: {size}")
        # a client's task (the newest: the last connection opened)
        tasks = [t for t in _all_tasks() if t.name.endswith(("._serve", "._run_session"))]
        task = tasks[-1] if tasks else None
        if task is None:
            print("\nno task holds the session (parked without one)")
        else:
            print(f"\nits task: {sys.getsizeof(task)} bytes, __dict__ "
                  f"{sys.getsizeof(getattr(task, '__dict__', {}))}; await chain:")
            for name, size in _await_chain(task):
                print(f"  {name}: {size}")
        for s in socks:
            s.close()
        nursery.cancel_scope.cancel()


def _all_tasks() -> list[Any]:
    out = []
    stack = [trio.lowlevel.current_root_task()]
    while stack:
        t = stack.pop()
        if t is None:
            continue
        out.append(t)
        for nursery in t.child_nurseries:
            stack.extend(nursery.child_tasks)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--connections", type=int, default=1000)
    ap.add_argument("--frames", type=int, default=1)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--request", action="store_true",
                    help="each connection sends one GET first (an idle connection of a pool)")
    args = ap.parse_args()
    raise_nofile(2 * args.connections + 500)
    tracemalloc.start(args.frames)
    trio.run(_measure, args.connections, args.frames, args.top, args.request)


if __name__ == "__main__":
    main()
