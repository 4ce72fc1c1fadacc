"""`slotgate cluster reshard | rebalance | fix | add-node | del-node | failover | call | check`
on bundled nodes and on real redis-server clusters, driven as an operator drives them: the
CLI as a subprocess, a client load through the proxy meanwhile."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from slotgate.protocol.slots import key_slot
from tests.support import (
    ManagedProcess,
    free_port,
    redis_server,
    slotgate_node,
    slotgate_proxy,
    start_all,
    wait_cluster_ok,
    wait_until,
)

CLI = [sys.executable, "-m", "slotgate.proxy.ops.cli", "cluster"]
KEYS = 1000
PROGRESS = re.compile(r"^reshard: (\d+)/(\d+) slots, (\d+) keys moved, ([\d.]+) slots/s, ETA ")


def cli(*args: str, timeout_s: float = 180.0, answer: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout_s,
                          input=answer)


def addr(n: ManagedProcess) -> str:
    return f"127.0.0.1:{n.port}"


def node_id(n: ManagedProcess) -> str:
    return n.client().execute_command("CLUSTER", "MYID").decode()


def start(kind: str, workdir: Path, count: int) -> list[ManagedProcess]:
    if kind == "real":
        return start_all([redis_server(workdir, cluster=True) for _ in range(count)])
    return start_all([slotgate_node(workdir, cluster=True) for _ in range(count)])


@pytest.fixture
def nodes(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[list[ManagedProcess]]:
    """Five cluster-enabled nodes of ``request.param``'s kind, the first three formed into a
    cluster of masters by `slotgate cluster create`; the other two left empty."""
    procs = start(request.param, tmp_path, 5)
    try:
        out = cli("create", *[addr(n) for n in procs[:3]])
        assert out.returncode == 0, out.stderr
        wait_cluster_ok(procs[:3])
        yield procs
    finally:
        for p in procs:
            p.stop()


def owners(n: ManagedProcess) -> dict[int, str]:
    """slot -> owning node id, as ``n`` sees it (open-slot tokens left out)."""
    out: dict[int, str] = {}
    for line in n.client().execute_command("CLUSTER", "NODES").decode().splitlines():
        f = line.split()
        for tok in f[8:]:
            if tok.startswith("["):
                continue
            lo, _, hi = tok.partition("-")
            out.update(dict.fromkeys(range(int(lo), int(hi or lo) + 1), f[0]))
    return out


def open_slot_tokens(nodes: list[ManagedProcess]) -> list[str]:
    toks = []
    for n in nodes:
        for line in n.client().execute_command("CLUSTER", "NODES").decode().splitlines():
            if "myself" in line:
                toks += [t for t in line.split()[8:] if t.startswith("[")]
    return toks


def load(masters: list[ManagedProcess], count: int = KEYS) -> None:
    c = redis.RedisCluster(host="127.0.0.1", port=masters[0].port)
    try:
        pipe = c.pipeline()
        for i in range(count):
            pipe.set(f"key:{i}", f"v{i}")
            if i % 5000 == 4999:
                pipe.execute()
        pipe.execute()
    finally:
        c.close()


def assert_every_key_on_its_owner(masters: list[ManagedProcess], count: int = KEYS) -> None:
    wait_until(lambda: len({tuple(sorted(owners(m).items())) for m in masters}) == 1, 30,
               "masters agreeing on the slot owners")
    slot_owner = owners(masters[0])
    by_id = {node_id(m): m for m in masters}
    pipes = {i: m.client().pipeline(transaction=False) for i, m in by_id.items()}
    asked: dict[str, list[int]] = {i: [] for i in by_id}
    for i in range(count):
        owner = slot_owner[key_slot(f"key:{i}".encode())]
        pipes[owner].get(f"key:{i}")
        asked[owner].append(i)
    for owner, pipe in pipes.items():
        got = pipe.execute()
        wrong = [i for i, v in zip(asked[owner], got, strict=True) if v != f"v{i}".encode()]
        assert wrong == [], (owner, wrong[:5])


class Load:
    """A bounded SET/GET loop through the proxy; every error or wrong value is kept."""

    def __init__(self, port: int, max_ops: int = 200_000) -> None:
        self.client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=10)
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.ops = 0
        self.max_ops = max_ops
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        while not self.stop.is_set() and self.ops < self.max_ops:
            key = f"key:{i % KEYS}"
            try:
                if i % 2:
                    self.client.set(key, f"v{i % KEYS}")
                elif self.client.get(key) != f"v{i % KEYS}".encode():
                    self.errors.append(f"wrong value for {key}")
            except redis.RedisError as exc:
                self.errors.append(f"{key}: {exc!r}")
            i += 1
            self.ops += 1

    def __enter__(self) -> Load:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(30)
        self.client.close()


def reshard_killed_at_half(nodes: list[ManagedProcess], workdir: Path, slots: int, keys: int,
                           extra: list[str]) -> None:
    """Under a load through the proxy: reshard ``slots`` slots, SIGKILL the CLI once its
    progress shows half, re-run it for the rest; zero client errors, every key on its owner."""
    masters = nodes[:3]
    load(masters, keys)
    src, dst = node_id(masters[0]), node_id(masters[2])
    before = sum(1 for o in owners(masters[0]).values() if o == dst)
    dry = cli("reshard", addr(masters[0]), "--from", src, "--to", dst, "--slots", str(slots),
              "--dry-run")
    assert dry.returncode == 0 and f"Moving {slots} slots" in dry.stdout and "dry run" in dry.stdout
    assert sum(1 for o in owners(masters[0]).values() if o == dst) == before  # nothing moved
    proxy = slotgate_proxy(workdir, [m.port for m in masters]).start()
    try:
        with Load(proxy.port) as traffic:
            proc = subprocess.Popen(
                [*CLI, "reshard", addr(masters[0]), "--from", src, "--to", dst, "--slots",
                 str(slots), "--yes", *extra],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            seen, rates = [], []
            assert proc.stderr is not None
            try:
                for line in proc.stderr:
                    found = PROGRESS.match(line)
                    if found:
                        seen.append(int(found[1]))
                        rates.append(float(found[4]))
                        if int(found[1]) >= slots // 2:
                            proc.send_signal(signal.SIGKILL)
                            break
            finally:
                if proc.poll() is None:
                    proc.kill()
                proc.wait(10)
                proc.stderr.close()
            assert proc.returncode == -signal.SIGKILL and len(seen) >= 2, seen
            if "--rate" in extra:  # throttled: never ahead of the rate asked for
                assert max(rates) <= float(extra[extra.index("--rate") + 1]) * 1.05, rates
            moved = sum(1 for o in owners(masters[0]).values() if o == dst) - before
            assert slots // 2 - 10 <= moved < slots
            # the re-run finishes what the killed one left open, then moves the rest asked for
            still_open = len({t.split("-")[0] for t in open_slot_tokens(masters)})
            rerun = cli("reshard", addr(masters[0]), "--from", src, "--to", dst, "--slots",
                        str(slots - moved - still_open), "--yes")
            assert rerun.returncode == 0, rerun.stdout + rerun.stderr
            fixed = cli("fix", addr(masters[0]))
            assert fixed.returncode == 0, fixed.stderr
            assert traffic.ops > 100
        assert traffic.errors == []
    finally:
        proxy.stop()
    assert open_slot_tokens(masters) == []
    assert sum(1 for o in owners(masters[0]).values() if o == dst) - before == slots
    assert_every_key_on_its_owner(masters, keys)
    check = cli("check", addr(masters[0]))
    assert check.returncode == 0 and "[ERR]" not in check.stdout, check.stdout


@pytest.mark.parametrize("nodes", ["bundled", "real"], indirect=True)
def test_reshard_under_load_killed_at_half_then_finished(nodes: list[ManagedProcess],
                                                         tmp_path: Path) -> None:
    reshard_killed_at_half(nodes, tmp_path, 300, KEYS,
                           ["--rate", "60", "--progress-every", "10", "--pipeline", "5"])


@pytest.mark.slow
@pytest.mark.parametrize("nodes", ["bundled", "real"], indirect=True)
def test_reshard_4000_slots_100000_keys_killed_at_half(nodes: list[ManagedProcess],
                                                       tmp_path: Path) -> None:
    reshard_killed_at_half(nodes, tmp_path, 4000, 100_000, ["--progress-every", "100"])


@pytest.mark.parametrize("nodes", ["bundled", "real"], indirect=True)
def test_half_moved_slot_is_finished(nodes: list[ManagedProcess]) -> None:
    """A slot left MIGRATING/IMPORTING with half its keys moved (as a kill leaves it): fix
    carries it to the target and every key ends on the owner."""
    masters = nodes[:3]
    load(masters)
    slot = key_slot(b"key:0")
    owner = next(m for m in masters if node_id(m) == owners(masters[0])[slot])
    target = next(m for m in masters if m is not owner)
    for i in range(40):
        owner.client().set(f"{{key:0}}:{i}", "x")
    owner_c, target_c = owner.client(), target.client()
    target_c.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", node_id(owner))
    owner_c.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", node_id(target))
    keys = owner_c.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 20)
    owner_c.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
    assert len(open_slot_tokens(masters)) == 2
    out = cli("check", addr(masters[0]))
    assert out.returncode == 1 and "open slot" in out.stdout
    out = cli("fix", addr(masters[0]))
    assert out.returncode == 0 and f"Finishing open slot {slot}" in out.stdout, out
    assert open_slot_tokens(masters) == []
    wait_until(lambda: owners(owner)[slot] == node_id(target), 10, "the slot's new owner known")
    assert target_c.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) == 41
    assert_every_key_on_its_owner(masters)


@pytest.mark.parametrize("nodes", ["bundled", "real"], indirect=True)
def test_fix_covers_uncovered_slots(nodes: list[ManagedProcess]) -> None:
    """Slots no master owns go to the master holding their keys, else to the one with the
    fewest slots (as redis-cli's fix gives them)."""
    masters = nodes[:3]
    load(masters)
    before = owners(masters[0])
    holder, other = node_id(masters[0]), node_id(masters[1])  # slots 0-5460, 5461-10922
    with_keys = next(key_slot(f"key:{i}".encode()) for i in range(KEYS)
                     if before[key_slot(f"key:{i}".encode())] == holder)
    probe = masters[1].client()
    # four empty slots of the second master: it has the fewest slots when the keyed slot
    # (lower, so given first) is placed
    empty = [s for s in range(5461, 5600)
             if probe.execute_command("CLUSTER", "COUNTKEYSINSLOT", s) == 0][:4]
    for m in masters:
        m.client().execute_command("CLUSTER", "DELSLOTS", with_keys, *empty)
    wait_until(lambda: "only 16379 of 16384" in cli("check", addr(masters[0])).stdout, 10,
               "check seeing five uncovered slots")
    out = cli("fix", addr(masters[0]))
    assert out.returncode == 0 and "5 uncovered slots assigned" in out.stdout, out
    wait_until(lambda: cli("check", addr(masters[0])).returncode == 0, 20, "a clean check")
    now = owners(masters[0])
    assert now[with_keys] == holder  # where its keys are, not the master with fewest slots
    counts = {node_id(m): list(before.values()).count(node_id(m)) for m in masters}
    counts[other] -= len(empty)
    expected = []
    for _ in empty:  # each to the master with the fewest slots then (ties: lowest id)
        expected.append(min(counts, key=lambda i: (counts[i], i)))
        counts[expected[-1]] += 1
    assert [now[s] for s in empty] == expected
    assert_every_key_on_its_owner(masters)


@pytest.mark.parametrize("nodes", ["bundled", "real"], indirect=True)
def test_rebalance_add_node_failover_call_del_node(nodes: list[ManagedProcess]) -> None:
    masters, spare, extra = nodes[:3], nodes[3], nodes[4]
    load(masters)
    a, c = node_id(masters[0]), node_id(masters[2])
    asked = cli("reshard", addr(masters[0]), "--from", a, "--to", c, "--slots", "150",
                answer="no\n")  # without --yes: the plan, then a typed "yes" or nothing moves
    assert asked.returncode == 1 and "Moving 150 slots" in asked.stdout
    assert "type 'yes'" in asked.stdout and "Aborting" in asked.stdout
    assert cli("reshard", addr(masters[0]), "--from", a, "--to", c, "--slots", "150",
               answer="yes\n").returncode == 0
    sim = cli("rebalance", addr(masters[0]), "--simulate")
    assert sim.returncode == 0 and "dry run" in sim.stdout
    out = cli("rebalance", addr(masters[0]), "--threshold", "1", "--progress-every", "25")
    assert out.returncode == 0, out.stderr
    assert "rebalance: 25/" in out.stderr
    counts = sorted(list(owners(masters[0]).values()).count(node_id(m)) for m in masters)
    assert counts[-1] - counts[0] <= 1, counts
    assert "No rebalancing needed" in cli("rebalance", addr(masters[0])).stdout

    out = cli("add-node", addr(spare), addr(masters[0]))
    assert out.returncode == 0, out.stderr
    out = cli("add-node", addr(extra), addr(masters[0]), "--cluster-slave",
              "--cluster-master-id", a)
    assert out.returncode == 0, out.stderr
    wait_until(lambda: extra.client().info("replication").get("master_link_status") == "up", 30,
               "the new replica in sync")
    out = cli("call", addr(masters[0]), "ROLE", "--only-replicas")
    assert out.returncode == 0 and f"127.0.0.1:{extra.port}: slave" in out.stdout, out.stdout
    out = cli("call", addr(masters[0]), "DBSIZE", "--only-masters")
    sizes = [int(ln.rsplit(": ", 1)[1]) for ln in out.stdout.splitlines() if ln[0].isdigit()]
    assert len(sizes) == 4 and sum(sizes) == KEYS, out.stdout

    assert cli("failover", addr(masters[1])).returncode == 1  # a master: refused
    out = cli("failover", addr(extra))
    assert out.returncode == 0, out.stderr
    wait_until(lambda: masters[0].client().info("replication").get("role") == "slave", 30,
               "the old master turned replica")
    assert extra.client().get("key:0") in (None, b"v0")  # serves (or redirects) as a master

    spare_id = node_id(spare)
    out = cli("del-node", addr(masters[0]), spare_id)
    assert out.returncode == 0, out.stderr
    assert all(spare_id not in m.client().execute_command("CLUSTER", "NODES").decode()
               for m in (masters[1], masters[2], extra))
    assert cli("del-node", addr(extra), node_id(extra)).returncode == 1  # owns slots


@pytest.mark.parametrize("nodes", ["bundled", "real"], indirect=True)
def test_check_prints_the_operator_checklist(nodes: list[ManagedProcess]) -> None:
    masters = nodes[:3]
    assert cli("add-node", addr(nodes[3]), addr(masters[0])).returncode == 0  # 4 masters
    assert cli("add-node", addr(nodes[4]), addr(masters[0]), "--cluster-slave",
               "--cluster-master-id", node_id(masters[0])).returncode == 0
    # the new replica's role reaches the other masters by gossip: wait until check can see it
    replica_id = node_id(nodes[4])
    wait_until(lambda: all(
        f"{replica_id} " in line and " slave " in f" {line} " and node_id(masters[0]) in line
        for m in masters
        for line in m.client().execute_command("CLUSTER", "NODES").decode().splitlines()
        if line.startswith(replica_id)), 20, "every master seeing the new replica")
    masters[1].client().config_set("cluster-node-timeout", 500)
    masters[2].client().config_set("min-replicas-to-write", 1)
    masters[2].client().config_set("appendonly", "yes")
    big_owner = owners(masters[0])[key_slot(b"biglist")]
    big = next(m for m in masters if node_id(m) == big_owner)
    big.client().rpush("biglist", *range(300))
    out = cli("check", addr(masters[0]), "--bigkey-items", "200")
    assert out.returncode == 0, out.stdout + out.stderr  # warnings keep the exit status
    assert "[ERR]" not in out.stdout
    masters[0].client().execute_command("CLUSTER", "MEET", "127.0.0.1", free_port(cluster=True))
    out = cli("check", addr(masters[0]), "--bigkey-items", "200")
    assert out.returncode == 1  # as before the checklist: a node check cannot reach is an error
    warn = [ln for ln in out.stdout.splitlines() if ln.startswith("[WARNING]")]
    text = "\n".join(warn)
    assert "4 masters: an even number" in text
    assert f"replica 127.0.0.1:{nodes[4].port} and its master {addr(masters[0])} are on one host" in text
    assert f"{addr(masters[1])}: cluster-node-timeout 500 ms is outside 1000..60000" in text
    assert f"{addr(masters[0])}: min-replicas-to-write 0" in text
    assert f"{addr(masters[2])}: min-replicas-to-write" not in text
    assert f"{addr(masters[0])}: persistence is off" in text
    assert f"{addr(masters[2])}: persistence is off" not in text
    assert f"{addr(big)}: big key biglist: list, 300 items" in text
    assert f"{addr(masters[0])} cannot reach" in text and "handshake" in text


@pytest.mark.parametrize("nodes", ["bundled", "real"], indirect=True)
@pytest.mark.parametrize("user", [None, "default"])
def test_reshard_on_nodes_that_require_a_password(nodes: list[ManagedProcess],
                                                  user: str | None) -> None:
    """MIGRATE logs in to the target (AUTH, or AUTH2 with --user) with the nodes' password."""
    masters = nodes[:3]
    load(masters)
    src, dst = node_id(masters[0]), node_id(masters[1])
    for m in masters:
        m.client().config_set("requirepass", "s3cret")
    login = ["--password", "s3cret", *(["--user", user] if user else [])]
    try:
        out = cli("reshard", addr(masters[0]), "--from", src, "--to", dst, "--slots", "40",
                  "--yes", *login)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "40/40 slots" in out.stderr
        assert "NOAUTH" in cli("reshard", addr(masters[0]), "--from", src, "--to", dst,
                               "--slots", "1", "--yes").stderr
        assert cli("check", addr(masters[0]), *login).returncode == 0
    finally:
        for m in masters:
            m.client(password="s3cret").config_set("requirepass", "")
    assert_every_key_on_its_owner(masters)


@pytest.mark.parametrize("nodes", ["bundled", "real"], indirect=True)
def test_check_finds_hot_keys_under_an_lfu_policy(nodes: list[ManagedProcess]) -> None:
    """As redis-cli --hotkeys: OBJECT FREQ of sampled keys on a master with allkeys-lfu; the
    masters without an LFU policy get redis-cli's advice instead."""
    masters = nodes[:3]
    hot_owner = owners(masters[0])[key_slot(b"hot:1")]
    lfu = next(m for m in masters if node_id(m) == hot_owner)
    lfu.client().config_set("maxmemory-policy", "allkeys-lfu")  # before the keys are made
    c = lfu.client()
    local = [k for k in (f"cold:{i}" for i in range(400))
             if owners(masters[0])[key_slot(k.encode())] == hot_owner][:20]
    pipe = c.pipeline(transaction=False)
    for k in ["hot:1", *local]:
        pipe.set(k, "x")
    for _ in range(4000):
        pipe.get("hot:1")
    pipe.execute()
    out = cli("check", addr(masters[0]), "--hotkey-freq", "15")
    assert out.returncode == 0, out.stdout + out.stderr
    warn = [ln for ln in out.stdout.splitlines() if ln.startswith("[WARNING]")]
    hot = [ln for ln in warn if "hot key " in ln]
    assert len(hot) == 1 and f"{addr(lfu)}: hot key hot:1 (OBJECT FREQ " in hot[0], warn
    others = sorted(addr(m) for m in masters if m is not lfu)
    advice = [ln for ln in warn if "hot keys not sampled on" in ln]
    assert len(advice) == 1 and all(a in advice[0] for a in others), advice
    assert addr(lfu) not in advice[0] and "An LFU maxmemory policy is not selected" in advice[0]
