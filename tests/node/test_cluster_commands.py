"""CLUSTER subcommands on one fresh cluster-enabled node: our node and a real redis-server 7.0
get the same command sequence and must give the same replies (node ids and ports replaced by
placeholders), errors included; plus MULTI/EXEC around CLUSTER commands as redis-cli fix uses."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.support import ManagedProcess, node_and_redis, start_nodes

UNKNOWN = "0123456789012345678901234567890123456789"

# (command words); "ID" is replaced by the node's own id
SEQUENCE: list[list[str]] = [
    ["CLUSTER", "KEYSLOT", "foo"], ["CLUSTER", "KEYSLOT", "{user1000}.following"],
    ["CLUSTER", "MYID"], ["CLUSTER", "SLOTS"], ["CLUSTER", "SHARDS"],
    ["CLUSTER", "COUNTKEYSINSLOT", "1"], ["CLUSTER", "COUNTKEYSINSLOT", "-1"],
    ["CLUSTER", "COUNTKEYSINSLOT", "x"], ["CLUSTER", "COUNTKEYSINSLOT", "16384"],
    ["CLUSTER", "GETKEYSINSLOT", "1", "10"], ["CLUSTER", "GETKEYSINSLOT", "1", "-1"],
    ["CLUSTER", "GETKEYSINSLOT", "x", "1"], ["CLUSTER", "GETKEYSINSLOT", "16384", "1"],
    ["CLUSTER", "ADDSLOTS", "x"], ["CLUSTER", "ADDSLOTS", "16384"],
    ["CLUSTER", "ADDSLOTS", "1", "1"], ["CLUSTER", "ADDSLOTS", "1", "2", "3"],
    ["CLUSTER", "ADDSLOTS", "3", "4"], ["CLUSTER", "DELSLOTS", "5"],
    ["CLUSTER", "ADDSLOTSRANGE", "10"], ["CLUSTER", "ADDSLOTSRANGE", "20", "10"],
    ["CLUSTER", "ADDSLOTSRANGE", "10", "20", "15", "30"],
    ["CLUSTER", "ADDSLOTSRANGE", "10", "20", "100", "100"],
    ["CLUSTER", "DELSLOTSRANGE", "10", "12"], ["CLUSTER", "DELSLOTSRANGE", "10", "12"],
    ["CLUSTER", "SLOTS"], ["CLUSTER", "SHARDS"],
    ["CLUSTER", "SETSLOT", "1", "FOO", "x"], ["CLUSTER", "SETSLOT", "1", "STABLE", "x"],
    ["CLUSTER", "SETSLOT", "x", "STABLE"], ["CLUSTER", "SETSLOT", "1", "MIGRATING", UNKNOWN],
    ["CLUSTER", "SETSLOT", "500", "MIGRATING", "ID"],
    ["CLUSTER", "SETSLOT", "2", "IMPORTING", "ID"],
    ["CLUSTER", "SETSLOT", "500", "IMPORTING", UNKNOWN],
    ["CLUSTER", "SETSLOT", "1", "NODE", UNKNOWN],
    ["CLUSTER", "SETSLOT", "1", "MIGRATING", "ID"], ["CLUSTER", "NODES"],
    ["CLUSTER", "SETSLOT", "1", "STABLE"], ["CLUSTER", "SETSLOT", "600", "NODE", "ID"],
    ["CLUSTER", "NODES"],
    ["CLUSTER", "MEET", "1.2.3"], ["CLUSTER", "MEET", "127.0.0.1", "x"],
    ["CLUSTER", "MEET", "127.0.0.1", "0"], ["CLUSTER", "MEET", "nohost", "7000"],
    ["CLUSTER", "MEET", "127.0.0.1", "7000", "x"],
    ["CLUSTER", "FORGET", UNKNOWN], ["CLUSTER", "FORGET", "ID"], ["CLUSTER", "FORGET", "x"],
    ["CLUSTER", "REPLICATE", UNKNOWN], ["CLUSTER", "REPLICATE", "ID"],
    ["CLUSTER", "REPLICAS", UNKNOWN], ["CLUSTER", "REPLICAS", "ID"], ["CLUSTER", "SLAVES", "ID"],
    ["CLUSTER", "COUNT-FAILURE-REPORTS", UNKNOWN], ["CLUSTER", "COUNT-FAILURE-REPORTS", "ID"],
    ["CLUSTER", "SET-CONFIG-EPOCH", "-1"], ["CLUSTER", "SET-CONFIG-EPOCH", "x"],
    ["CLUSTER", "SET-CONFIG-EPOCH", "5"], ["CLUSTER", "SET-CONFIG-EPOCH", "6"],
    ["CLUSTER", "BUMPEPOCH"], ["CLUSTER", "INFO"],
    ["CLUSTER", "RESET", "FOO"], ["CLUSTER", "FAILOVER"], ["CLUSTER", "FAILOVER", "FOO"],
    ["CLUSTER", "FOO"], ["CLUSTER"], ["CLUSTER", "HELP"], ["CLUSTER", "LINKS"],
    ["CLUSTER", "FLUSHSLOTS"], ["CLUSTER", "SLOTS"], ["CLUSTER", "NODES"],
    ["CLUSTER", "SAVECONFIG"], ["ASKING"], ["READONLY"], ["READWRITE"],
    ["CLUSTER", "RESET", "HARD"], ["CLUSTER", "INFO"],
]


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[ManagedProcess, ManagedProcess]]:
    with node_and_redis(tmp_path, cluster=True) as procs:
        # let both pass the 2 s start-up delay of the cluster state (CLUSTER_WRITABLE_DELAY),
        # so CLUSTER INFO's cluster_size is computed on both: nothing shows the delay's end
        time.sleep(2.2)
        yield procs["ours"], procs["real"]


def _normalize(value: Any, ids: list[str], port: int) -> Any:
    if isinstance(value, bytes):
        text = value.decode("utf-8", "replace")
        for i, node_id in enumerate(ids):
            text = text.replace(node_id, f"<ID{i}>")
        return text.replace(str(port + 10000), "<CPORT>").replace(str(port), "<PORT>")
    if isinstance(value, list):
        return [_normalize(v, ids, port) for v in value]
    if isinstance(value, dict):
        return {_normalize(k, ids, port): _normalize(v, ids, port) for k, v in value.items()}
    if isinstance(value, int) and value in (port, port + 10000):
        return "<PORT>" if value == port else "<CPORT>"
    if isinstance(value, Exception):
        return "ERR: " + _normalize(str(value).encode(), ids, port)
    return value


def _run(node: ManagedProcess) -> list[Any]:
    c = redis.Redis(host="127.0.0.1", port=node.port, protocol=2)
    ids = [c.execute_command("CLUSTER", "MYID").decode()]
    out = []
    for words in SEQUENCE:
        argv = [ids[0] if w == "ID" else w for w in words]
        try:
            reply: Any = c.execute_command(*argv)
        except redis.ResponseError as e:
            reply = e
        if words == ["CLUSTER", "RESET", "HARD"]:
            ids.append(c.execute_command("CLUSTER", "MYID").decode())
        out.append((" ".join(words), _normalize(reply, ids, node.port)))
    c.close()
    return out


def test_cluster_commands_match_real_redis(pair: tuple[ManagedProcess, ManagedProcess]) -> None:
    ours, real = pair
    got, want = _run(ours), _run(real)
    for (cmd, g), (_, w) in zip(got, want, strict=True):
        assert g == w, cmd


def test_cluster_commands_in_multi(pair: tuple[ManagedProcess, ManagedProcess]) -> None:
    """redis-cli --cluster fix: MULTI; DELSLOTS; ADDSLOTS; SETSLOT STABLE; BUMPEPOCH; EXEC."""
    for node in pair:
        c = redis.Redis(host="127.0.0.1", port=node.port)
        c.execute_command("CLUSTER", "ADDSLOTS", 7)
        p = c.pipeline(transaction=True)
        p.execute_command("CLUSTER", "DELSLOTS", 7)
        p.execute_command("CLUSTER", "ADDSLOTS", 7)
        p.execute_command("CLUSTER", "SETSLOT", 7, "STABLE")
        p.execute_command("CLUSTER", "BUMPEPOCH")
        p.execute_command("CLUSTER", "ADDSLOTS", 7)
        res = p.execute(raise_on_error=False)
        assert res[:3] == [True, True, True] or res[:3] == [b"OK", b"OK", b"OK"], res
        assert res[3] in (b"BUMPED 1", "BUMPED 1"), res
        assert isinstance(res[4], redis.ResponseError)
        assert str(res[4]) == "Slot 7 is already busy"
        c.close()


def test_random_cluster_arguments_never_break_the_node(tmp_path: Path) -> None:
    """Random arguments to every CLUSTER subcommand, MIGRATE, ASKING...: Redis-style errors,
    never an internal error, and the node keeps serving."""
    import random

    node = start_nodes(tmp_path, 1)[0]
    try:
        c = redis.Redis(host="127.0.0.1", port=node.port)
        subs = ["INFO", "NODES", "SLOTS", "SHARDS", "MYID", "KEYSLOT", "COUNTKEYSINSLOT",
                "GETKEYSINSLOT", "ADDSLOTS", "ADDSLOTSRANGE", "DELSLOTS", "DELSLOTSRANGE",
                "SETSLOT", "MEET", "FORGET", "REPLICATE", "REPLICAS", "SLAVES",
                "SET-CONFIG-EPOCH", "BUMPEPOCH", "COUNT-FAILURE-REPORTS", "LINKS", "FAILOVER",
                "SAVECONFIG", "FLUSHSLOTS"]
        words = [b"", b"-1", b"0", b"1", b"16383", b"16384", b"x", b"\xff\xfe", b"a" * 40,
                 b"127.0.0.1", b"::1", b"99999999999999999999", b"MIGRATING", b"IMPORTING",
                 b"NODE", b"STABLE", b"FORCE", b"TAKEOVER", b"KEYS", b"COPY", b"AUTH2"]
        rng = random.Random(11)
        for _ in range(1500):
            if rng.random() < 0.8:
                argv: list[bytes] = [b"CLUSTER", rng.choice(subs).encode()]
            else:
                argv = [rng.choice([b"MIGRATE", b"ASKING", b"READONLY", b"READWRITE"])]
            argv += [rng.choice(words) for _ in range(rng.randint(0, 6))]
            # never reach a real address: MEET's and MIGRATE's port become 1
            if argv[:2] == [b"CLUSTER", b"MEET"] and len(argv) > 3:
                argv[3] = b"1"
            if argv[0] == b"MIGRATE" and len(argv) > 2:
                argv[2] = b"1"
            try:
                c.execute_command(*argv)
            except redis.ResponseError as e:
                assert "internal error" not in str(e), argv
        assert c.ping()
    finally:
        node.stop()
