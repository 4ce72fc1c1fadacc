"""MEMORY DOCTOR beside redis-server 7.0: the same texts for the conditions our accounting can
tell (getMemoryDoctorReport's rules: empty below 5 MB, a peak over 150 % of the data now,
client buffers over 200 KB per client, more than 1000 cached scripts). Fragmentation and RSS
findings need allocator figures we do not have (MEMORY STATS reports their ratios as 1): where
Redis adds those, ours must report a subset of its findings."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.node.diff import _parse
from tests.support import ManagedProcess, RawClient, node_and_redis, wait_until

BIG_VALUE = "x" * 100_000
FINDING = b"\n * "


@pytest.fixture(scope="module")
def procs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ManagedProcess]]:
    with node_and_redis(tmp_path_factory.mktemp("doctor")) as both:
        yield both


@pytest.fixture
def ports(procs: dict[str, ManagedProcess]) -> Iterator[dict[str, int]]:
    ports = {name: p.port for name, p in procs.items()}
    for port in ports.values():
        with RawClient(port) as c:
            c.call("FLUSHALL")
            c.call("SCRIPT", "FLUSH")
            # 40 MB: Redis' own RSS beside 6 MB of data already reads as fragmentation
            c.pipeline([["SET", f"big{i}", BIG_VALUE] for i in range(400)])
            c.call("CONFIG", "RESETSTAT")  # the memory peak too
    # Redis reads its allocator's figures in its cron: until then they predate the data
    wait_until(lambda: _stat(ports["real"], b"allocator.allocated") > 40_000_000,
               what="redis-server's cron to read the allocator")
    yield ports
    for port in ports.values():
        with RawClient(port) as c:
            c.call("FLUSHALL")
            c.call("SCRIPT", "FLUSH")


def _stat(port: int, name: bytes) -> int:
    with RawClient(port) as c:
        flat = _parse(c.call("MEMORY", "STATS"))
    assert isinstance(flat, list)
    value = dict(zip(flat[::2], flat[1::2], strict=True))[name]
    assert isinstance(value, int)
    return value


def _doctor(port: int) -> bytes:
    with RawClient(port) as c:
        report = _parse(c.call("MEMORY", "DOCTOR"))
    assert isinstance(report, bytes)
    return report


def _findings(report: bytes) -> list[bytes]:
    return [f.split(b":")[0] for f in report.split(FINDING)[1:]]


def test_fine_with_data(ports: dict[str, int]) -> None:
    ours, real = _doctor(ports["ours"]), _doctor(ports["real"])
    assert ours == real
    assert ours.startswith(b"Hi Sam, I can't find any memory issue")


def test_many_scripts(ports: dict[str, int]) -> None:
    for port in ports.values():
        with RawClient(port) as c:
            c.pipeline([["SCRIPT", "LOAD", f"return {i}"] for i in range(1001)])
    ours, real = _doctor(ports["ours"]), _doctor(ports["real"])
    assert ours == real
    assert _findings(ours) == [b"Many scripts"]


def test_big_client_buffers(ports: dict[str, int]) -> None:
    """A subscriber that reads nothing: what the kernel does not take of 30 messages of 1 MB
    piles up in its output buffer (the pub/sub buffer limit lifted for the test)."""
    subs = {name: RawClient(port) for name, port in ports.items()}
    try:
        for name, port in ports.items():
            with RawClient(port) as c:
                c.call("CONFIG", "SET", "client-output-buffer-limit", "pubsub 0 0 0")
                subs[name].call_frames("SUBSCRIBE", "ch")
                c.pipeline([["PUBLISH", "ch", "y" * 1_000_000] for _ in range(30)])
            wait_until(lambda port=port: b"Big client" in _doctor(port),  # type: ignore[misc]
                       what=f"{name}: the subscriber's buffer")
        ours, real = _doctor(ports["ours"]), _doctor(ports["real"])
        assert ours == real
        assert _findings(ours) == [b"Big client buffers"]
    finally:
        for c in subs.values():
            c.close()
        for port in ports.values():
            with RawClient(port) as c:
                c.call("CONFIG", "SET", "client-output-buffer-limit", "pubsub 32mb 8mb 60")


def test_peak(ports: dict[str, int]) -> None:
    """40 MB more data, then deleted: the peak is twice what is left. Redis may add
    fragmentation findings (its allocator keeps the freed pages); ours reports the peak."""
    for port in ports.values():
        with RawClient(port) as c:
            c.pipeline([["SET", f"more{i}", BIG_VALUE] for i in range(400)])
            c.call("INFO", "memory")  # the peak is taken (both also take it in their cron)
            c.call("DEL", *[f"more{i}" for i in range(400)])
    ours, real = _doctor(ports["ours"]), _doctor(ports["real"])
    assert _findings(ours) == [b"Peak memory"]
    assert b"Peak memory" in _findings(real)
    assert ours.split(FINDING)[0] == real.split(FINDING)[0]
    assert set(ours.split(b"\n")) <= set(real.split(b"\n"))
