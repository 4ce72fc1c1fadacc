"""Routing on the dispatcher's fast path follows every cluster change, even inside one pipelined
batch: the same batches go, in one write each, to our node and to a real cluster-enabled
redis-server 7.0 that both own all 16384 slots, and the raw replies must be identical."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from protocol.resp import encode_command
from protocol.slots import key_slot
from tests.node.diff import Conn
from tests.support import ManagedProcess, redis_server, slotgate_node

K_SLOT = str(key_slot(b"k"))

# Each batch is sent as one write; replies are read after the whole batch went out.
BATCHES: list[list[str]] = [
    ["SET k v", "GET k", "SET {t}a 1", "SET {t}b 2", "MGET {t}a {t}b", "MGET k {t}a",
     "DEL k {t}a", "EXISTS {t}a {t}b", "PING", "DBSIZE"],
    # per-connection flags: ASKING lasts one command, READONLY changes nothing on a master
    ["ASKING", "GET k", "GET k", "READONLY", "GET k", "SET k w", "READWRITE", "GET k"],
    # a transaction: queued on the full path, keys checked at EXEC
    ["MULTI", "GET k", "SET k x", "EXEC", "MULTI", "GET k", "GET {t}a", "EXEC", "GET k"],
    # the slot table changes between two commands of one batch
    [f"CLUSTER DELSLOTS {K_SLOT}", "GET k", "SET k y", "MGET k", "GET {t}a",
     f"CLUSTER ADDSLOTS {K_SLOT}", "GET k", "SET k z", "GET k"],
    ["GET k", "CLUSTER COUNTKEYSINSLOT " + K_SLOT, f"CLUSTER GETKEYSINSLOT {K_SLOT} 10"],
]


def _own_all_slots(node: ManagedProcess) -> None:
    c = Conn(node.port)
    try:
        assert c.call([b"CLUSTER", b"ADDSLOTSRANGE", b"0", b"16383"]) == b"+OK\r\n"
        deadline = time.monotonic() + 20
        while b"cluster_state:ok" not in c.call([b"CLUSTER", b"INFO"]):
            assert time.monotonic() < deadline, "cluster state did not become ok"
            time.sleep(0.1)
    finally:
        c.close()


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, int]]:
    ours = slotgate_node(tmp_path_factory.mktemp("fast-ours"), cluster=True).start()
    try:
        real = redis_server(tmp_path_factory.mktemp("fast-real"), cluster=True).start()
        try:
            _own_all_slots(ours)
            _own_all_slots(real)
            yield ours.port, real.port
        finally:
            real.stop()
    finally:
        ours.stop()


def _run(port: int, batches: list[list[str]]) -> list[list[bytes]]:
    c = Conn(port)
    try:
        out = []
        for batch in batches:
            c.send_raw(b"".join(encode_command(*line.encode().split()) for line in batch))
            out.append([c.read() for _ in batch])
        return out
    finally:
        c.close()


def test_pipelined_routing_matches_redis(nodes: tuple[int, int]) -> None:
    ours, real = _run(nodes[0], BATCHES), _run(nodes[1], BATCHES)
    problems = [
        f"batch {b} `{BATCHES[b][i]}`: ours {o!r} real {r!r}"
        for b, (ob, rb) in enumerate(zip(ours, real, strict=True))
        for i, (o, r) in enumerate(zip(ob, rb, strict=True)) if o != r
    ]
    assert not problems, "\n".join(problems)
    # the batches did exercise redirects (not only plain replies)
    flat = b"".join(r for batch in real for r in batch)
    assert b"-CROSSSLOT" in flat and b"-CLUSTERDOWN Hash slot not served" in flat
