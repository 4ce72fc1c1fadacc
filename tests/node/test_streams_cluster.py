"""Streams with consumer groups and pending entries across a reshard: ``redis-cli --cluster
reshard`` moves their slots between our nodes (MIGRATE of stream payloads), and every stream
arrives whole — entries, groups, consumers, PELs, delivery times."""

from __future__ import annotations

from pathlib import Path

from slotgate.protocol.slots import key_slot
from tests.node.test_cluster_tools import addr, check, wait_agree
from tests.support import RawClient, redis_cli, start_nodes, wait_cluster_ok

STREAMS = [f"stream:{i}" for i in range(60)]


def _owner_port(ports: list[int], key: str) -> int:
    for port in ports:
        c = RawClient(port)
        try:
            if c.call("CLUSTER", "COUNTKEYSINSLOT", str(key_slot(key.encode()))) != b":0\r\n":
                return port
        finally:
            c.close()
    raise AssertionError(f"{key} on no node")


def _full(port: int, key: str) -> bytes:
    c = RawClient(port)
    try:
        return c.call("XINFO", "STREAM", key, "FULL", "COUNT", "0")
    finally:
        c.close()


def test_reshard_moves_streams_with_groups_intact(tmp_path: Path) -> None:
    nodes = start_nodes(tmp_path, 3)
    try:
        redis_cli("--cluster", "create", *[addr(n) for n in nodes], "--cluster-yes",
                  timeout_s=120)
        wait_cluster_ok(nodes)
        ports = [n.port for n in nodes]
        owners = {}
        for i, key in enumerate(STREAMS):
            owners[key] = next(p for p in ports if _try_add(p, key, i))
        before = {key: _full(owners[key], key) for key in STREAMS}
        src = nodes[0].client().execute_command("CLUSTER", "MYID").decode()
        dst = nodes[1].client().execute_command("CLUSTER", "MYID").decode()
        out = redis_cli("--cluster", "reshard", addr(nodes[0]), "--cluster-from", src,
                        "--cluster-to", dst, "--cluster-slots", "3000", "--cluster-yes",
                        timeout_s=600)
        assert "[ERR]" not in out.stdout, out.stdout[-2000:]
        wait_agree(nodes)
        moved = 0
        for key in STREAMS:
            port = _owner_port(ports, key)
            moved += port != owners[key]
            assert _full(port, key) == before[key], key
        assert moved > 0
        assert "[OK] All 16384 slots covered." in check(nodes[2])
    finally:
        for n in nodes:
            n.stop()


def _try_add(port: int, key: str, i: int) -> bool:
    """Build ``key`` on its owner (MOVED elsewhere: False): entries, two groups, a PEL."""
    c = RawClient(port)
    try:
        if c.call("XADD", key, "1-1", "f", "v").startswith(b"-MOVED"):
            return False
        for j in range(2, 120 + i):
            c.call("XADD", key, f"{j}-{j % 3}", "f", "v" * (j % 40), "n", str(j))
        c.call("XDEL", key, "5-2")
        c.call("XGROUP", "CREATE", key, "g1", "0")
        c.call("XGROUP", "CREATE", key, "g2", "$")
        c.call("XREADGROUP", "GROUP", "g1", "c1", "COUNT", "7", "STREAMS", key, ">")
        c.call("XREADGROUP", "GROUP", "g1", "c2", "COUNT", "3", "STREAMS", key, ">")
        c.call("XACK", key, "g1", "3-0")
        return True
    finally:
        c.close()
