"""docs/OPERATIONS.md's scale out, scale in and backup, run as the runbook writes them (its
placeholders filled in) on bundled nodes, with a proxy in front and a client writing through it
the whole time: no client error, every key readable after each step, the proxy's /metrics
following the number of masters, and a snapshot file per master after the backup step.
A long scenario (run with --run-slow); that the runbook still writes these commands is checked
on every run."""

from __future__ import annotations

import shlex
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import yaml

from tests.conftest import start_cluster
from tests.support import ManagedProcess, free_port, slotgate_node, wait_until

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "OPERATIONS.md"

ADD_NODE = "slotgate cluster add-node NEW:7000 N1:7000"
REBALANCE = "slotgate cluster rebalance N1:7000 --use-empty-masters"
CHECK = "slotgate cluster check N1:7000"
EMPTY = "slotgate cluster reshard N1:7000 --from ID --to OTHER_ID --slots 4096 --yes"
DEL_NODE = "slotgate cluster del-node N1:7000 ID"
BACKUP = "slotgate cluster call N1:7000 BGSAVE --only-masters"


def test_the_runbook_writes_these_commands() -> None:
    text = DOC.read_text()
    for command in (ADD_NODE, REBALANCE, CHECK, EMPTY, DEL_NODE, BACKUP):
        assert f"`{command}`" in text or f"\n{command}\n" in text, command


def run(command: str, **fill: str) -> subprocess.CompletedProcess[str]:
    """A runbook command line with its placeholders replaced, run as the operator would."""
    words = shlex.split(command)
    assert words[0] == "slotgate"
    argv = [fill.get(w, w) for w in words[1:]]
    r = subprocess.run([sys.executable, "-m", "slotgate.proxy.ops.cli", *argv],
                       capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"{argv}: {r.stdout[-2000:]} {r.stderr[-2000:]}"
    return r


class Writer(threading.Thread):
    """Writes and reads back keys through the proxy until stopped; keeps any error."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.written = 0

    def run(self) -> None:
        c = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=30)
        while not self.stop.is_set():
            k = f"rb:{self.written % 2000}"
            try:
                c.set(k, k)
                assert c.get(k) == k.encode()
            except BaseException as exc:  # reported to the test thread
                self.errors.append(exc)
                return
            self.written += 1


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[list[ManagedProcess], ManagedProcess,
                                              ManagedProcess, int]]:
    """Three bundled masters, one empty node, and a proxy (metrics on) in front."""
    nodes = start_cluster("bundled", tmp_path / "cluster", masters=3, replicas=0)
    procs = list(nodes)
    try:
        new = slotgate_node(tmp_path, cluster=True, extra=["--appendonly", "no"]).start()
        procs.append(new)
        port, mport = free_port(), free_port()
        cfg = {"listen": f"127.0.0.1:{port}", "seeds": [f"127.0.0.1:{n.port}" for n in nodes],
               "metrics": {"listen": f"127.0.0.1:{mport}"},
               "topology": {"refresh_interval": "1s"}}
        (tmp_path / "proxy.yaml").write_text(yaml.safe_dump(cfg))
        proxy = ManagedProcess([sys.executable, "-m", "slotgate.proxy", "--config",
                                str(tmp_path / "proxy.yaml")], port, tmp_path, "proxy.log")
        procs.append(proxy.start())
        yield nodes, new, proxy, mport
    finally:
        for p in reversed(procs):
            p.stop()


def masters_in_metrics(mport: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=5) as resp:  # noqa: S310
        for line in resp.read().decode().splitlines():
            if line.startswith('slotgate_nodes{role="master"}'):
                return int(float(line.split()[1]))
    raise AssertionError("no slotgate_nodes series")


def node_id(n: ManagedProcess) -> str:
    return n.client().execute_command("CLUSTER", "MYID").decode()


@pytest.mark.slow  # two moves of ~4,000 slots: about two minutes here
def test_scale_out_scale_in_and_backup(cluster: tuple[list[ManagedProcess], ManagedProcess,
                                                      ManagedProcess, int]) -> None:
    nodes, new, proxy, mport = cluster
    n1, new_addr = f"127.0.0.1:{nodes[0].port}", f"127.0.0.1:{new.port}"
    writer = Writer(proxy.port)
    writer.start()
    try:
        wait_until(lambda: writer.written > 100 or writer.errors, 30, "the client under way")
        # Scale out.
        run(ADD_NODE, **{"NEW:7000": new_addr, "N1:7000": n1})
        run(REBALANCE, **{"N1:7000": n1})
        run(CHECK, **{"N1:7000": n1})
        wait_until(lambda: masters_in_metrics(mport) == 4, 30, "the proxy to see 4 masters")
        # Scale in: the new master emptied to the first one, then removed.
        owned = sum(hi - lo + 1 for lo, hi, *rest in
                    new.client().execute_command("CLUSTER", "SLOTS")
                    if int(rest[0][1]) == new.port)
        assert owned > 3000
        run(EMPTY, **{"N1:7000": n1, "ID": node_id(new), "OTHER_ID": node_id(nodes[0]),
                      "4096": str(owned)})
        run(DEL_NODE, **{"N1:7000": n1, "ID": node_id(new)})
        run(CHECK, **{"N1:7000": n1})
        wait_until(lambda: masters_in_metrics(mport) == 3, 30, "the proxy to see 3 masters")
        written = writer.written
        wait_until(lambda: writer.written > written + 100 or writer.errors, 30, "more writes")
    finally:
        writer.stop.set()
        writer.join(60)
    assert not writer.errors, writer.errors
    c = proxy.client(socket_timeout=10)
    keys = [f"rb:{i}" for i in range(min(writer.written, 2000))]
    assert c.mget(keys) == [k.encode() for k in keys]
    # Backup: a snapshot on every master.
    before = {n.port: n.client().lastsave() for n in nodes}
    run(BACKUP, **{"N1:7000": n1})
    wait_until(lambda: all(n.client().lastsave() != before[n.port] for n in nodes), 30,
               "every master's LASTSAVE to change")
    for n in nodes:
        d, name = (str(n.client().config_get(k)[k]) for k in ("dir", "dbfilename"))
        assert (Path(d) / name).stat().st_size > 0
