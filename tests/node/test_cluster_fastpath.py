"""Routing on the dispatcher's fast path follows every cluster change, even inside one pipelined
batch: the same batches go, in one write each, to our node and to a real cluster-enabled
redis-server 7.0 that both own all 16384 slots, and the raw replies must be identical."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from slotgate.protocol.resp import encode_command
from slotgate.protocol.slots import key_slot
from tests.support import ManagedProcess, RawClient, node_and_redis, wait_until

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
    with RawClient(node.port) as c:
        assert c.call(b"CLUSTER", b"ADDSLOTSRANGE", b"0", b"16383") == b"+OK\r\n"
        wait_until(lambda: b"cluster_state:ok" in c.call(b"CLUSTER", b"INFO"), 20,
                   "cluster state ok", interval_s=0.1)


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, int]]:
    with node_and_redis(tmp_path_factory.mktemp("fast"), cluster=True) as procs:
        _own_all_slots(procs["ours"])
        _own_all_slots(procs["real"])
        yield procs["ours"].port, procs["real"].port


def _run(port: int, batches: list[list[str]]) -> list[list[bytes]]:
    c = RawClient(port)
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
