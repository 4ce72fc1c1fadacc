"""deploy/'s Prometheus files run in a real Prometheus (Debian's package, on loopback).

promtool checks deploy/prometheus.yml and deploy/alerts.yml, and runs the rules' unit tests
(tests/deploy/data/alerts_test.yml: each alert fires on its condition, none on a healthy
proxy); then, for a cluster of bundled
nodes and one of real redis-servers, a proxy in front and a Prometheus scraping it with
deploy/prometheus.yml's job: the test moves a slot under the proxy's feet (ASK while keys are
half migrated, MOVED once it changed owner), kills a master (its replica takes over) and runs
the runbook's planned failover (`slotgate cluster failover`), and
finds all of it through Prometheus' HTTP API: redirects by kind and node, the failover, the
failed node, slots covered, the alert rules evaluating and firing. Every expression of the
Grafana dashboard is then evaluated by that Prometheus without error.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
import yaml

from slotgate.protocol.slots import SLOT_COUNT, key_slot
from tests.conftest import ClusterBackend, start_cluster, wait_replicas_up
from tests.deploy.promsupport import (
    DEPLOY,
    PROMTOOL,
    PromAPI,
    dashboard_exprs,
    needs_prometheus,
    prometheus_config,
    prometheus_process,
)
from tests.proxy.test_redirects import (
    finish_migration,
    masters,
    migrate_keys,
    open_migration,
    slot_owner,
)
from tests.support import ManagedProcess, free_port, wait_until

pytestmark = needs_prometheus


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=60)


def test_promtool_checks_config_and_rules() -> None:
    r = promtool("check", "config", str(DEPLOY / "prometheus.yml"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 rule files found" in r.stdout + r.stderr  # alerts.yml, resolved next to it
    r = promtool("check", "rules", str(DEPLOY / "alerts.yml"))
    assert r.returncode == 0, r.stdout + r.stderr
    # In the compose stack the rules file sits next to the config, as rule_files expects.
    svc = yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"]["prometheus"]
    mounts = {src: dst for src, dst, *_ in (v.split(":") for v in svc["volumes"])}
    assert Path(mounts["./alerts.yml"]).parent == Path(mounts["./prometheus.yml"]).parent


def test_promtool_rejects_a_broken_rule(tmp_path: Path) -> None:
    # The check above can fail: a rule with a PromQL syntax error is refused.
    doc = yaml.safe_load((DEPLOY / "alerts.yml").read_text())
    doc["groups"][0]["rules"][0]["expr"] = "slotgate_slots_covered <"
    bad = tmp_path / "alerts.yml"
    bad.write_text(yaml.safe_dump(doc))
    assert promtool("check", "rules", str(bad)).returncode != 0


ALERTS_TEST = Path(__file__).parent / "data" / "alerts_test.yml"


def test_alert_rules_fire_on_their_conditions_and_only_then() -> None:
    r = promtool("test", "rules", str(ALERTS_TEST))
    assert r.returncode == 0, r.stdout + r.stderr


def test_alert_rule_tests_catch_a_wrong_rule(tmp_path: Path) -> None:
    doc = yaml.safe_load((DEPLOY / "alerts.yml").read_text())
    (down,) = [r for r in doc["groups"][0]["rules"] if r["alert"] == "SlotgateNodeDown"]
    down["expr"] = "slotgate_cluster_node_online == 2"
    (tmp_path / "alerts.yml").write_text(yaml.safe_dump(doc))
    tests = yaml.safe_load(ALERTS_TEST.read_text())
    tests["rule_files"] = ["alerts.yml"]
    (tmp_path / "t.yml").write_text(yaml.safe_dump(tests))
    r = promtool("test", "rules", str(tmp_path / "t.yml"))
    assert r.returncode != 0 and "SlotgateNodeDown" in r.stdout + r.stderr


# --- a running stack ----------------------------------------------------------------------------

@dataclass
class Stack:
    backend: ClusterBackend
    proxy: ManagedProcess
    prometheus: PromAPI

    @staticmethod
    def addr(node: ManagedProcess) -> str:
        return f"127.0.0.1:{node.port}"


@pytest.fixture(scope="module", params=["bundled", "real"])
def stack(request: pytest.FixtureRequest,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp(f"prom-{request.param}")
    nodes = start_cluster(request.param, workdir / "cluster")
    procs = list(nodes)
    try:
        port, mport = free_port(), free_port()
        # A long periodic refresh: the slot map changes only through what the test does
        # (MOVED, lost connections), so the redirects it counts are deterministic.
        cfg = {"listen": f"127.0.0.1:{port}", "seeds": [f"127.0.0.1:{n.port}" for n in nodes[:3]],
               "metrics": {"listen": f"127.0.0.1:{mport}"},
               "topology": {"refresh_interval": "60s"}}
        path = workdir / "proxy.yaml"
        path.write_text(yaml.safe_dump(cfg))
        proxy = ManagedProcess([sys.executable, "-m", "slotgate.proxy", "--config", str(path)],
                               port, workdir, "proxy.log")
        procs.append(proxy.start())
        prom = prometheus_process(workdir / "prometheus", prometheus_config(f"127.0.0.1:{mport}"))
        procs.append(prom.start())
        api = PromAPI(f"http://127.0.0.1:{prom.port}")
        api.wait_ready()
        yield Stack(ClusterBackend(request.param, nodes), proxy, api)
    finally:
        for p in reversed(procs):
            p.stop()


def one(api: PromAPI, expr: str) -> float:
    """The single value of ``expr`` (waiting until there is one)."""
    (sample,) = api.wait(expr)
    return float(sample["value"][1])


def test_redirects_and_failover_seen_through_prometheus(stack: Stack) -> None:
    api, backend = stack.prometheus, stack.backend
    assert one(api, 'up{job="slotgate-proxy"}') == 1
    assert one(api, "slotgate_slots_covered") == SLOT_COUNT
    client = stack.proxy.client(socket_timeout=15)

    # 1. A slot moves under the proxy's feet: half its keys migrated (ASK from the source for
    #    each of those), then the slot handed over (MOVED from the source, once).
    tag = f"pm{uuid.uuid4().hex[:6]}"
    slot = key_slot(tag.encode())
    src = slot_owner(backend, slot)
    dst = next(m for m in masters(backend) if m is not src)
    keys = [f"{{{tag}}}:{i}" for i in range(20)]
    for k in keys:
        assert client.set(k, k)
    open_migration(slot, src, dst)
    migrate_keys(src, dst, keys[:10])
    for k in keys:
        assert client.get(k) == k.encode()
    finish_migration(backend, slot, src, dst)
    for k in keys:
        assert client.get(k) == k.encode()

    src_label = f'node="{stack.addr(src)}"'
    assert one(api, f'slotgate_redirects_total{{kind="ask",{src_label}}} >= 10') >= 10
    assert one(api, f'slotgate_redirects_total{{kind="moved",{src_label}}} >= 1') >= 1
    # As a rate by kind and node, as the dashboard shows it.
    rates = api.wait(f'sum by (kind, node) (rate(slotgate_redirects_total{{{src_label}}}[1m])) > 0')
    wait_until(lambda: {r["metric"]["kind"] for r in api.query(
        f'sum by (kind, node) (rate(slotgate_redirects_total{{{src_label}}}[1m])) > 0')}
        >= {"ask", "moved"}, 30, "ask and moved rates from the source node")
    assert all(r["metric"]["node"] == stack.addr(src) for r in rates)
    # No other node redirected anything.
    others = api.query(f'sum by (node) (slotgate_redirects_total{{node!="{stack.addr(src)}"}}) > 0')
    assert others == [], others

    # 2. A master dies; its replica takes over. Requests for its slots wait inside the proxy
    #    until the new master serves them.
    victim = next(m for m in masters(backend) if m not in (src, dst))
    info = victim.client().info("replication")
    replica = f"{info['slave0']['ip']}:{info['slave0']['port']}"
    vkey = next(f"fo{i}" for i in range(100_000)
                if any(lo <= key_slot(f"fo{i}".encode()) <= hi for lo, hi in slots_of(victim)))
    assert client.set(vkey, "before")
    victim.kill()
    deadline = time.monotonic() + 40
    while True:
        try:
            assert client.set(vkey, "after")
            break
        except redis.RedisError:
            if time.monotonic() > deadline:
                raise
    victim_label = f'node="{stack.addr(victim)}"'
    assert one(api, f'slotgate_failovers_total{{node="{replica}"}} >= 1') >= 1
    assert one(api, f"slotgate_cluster_node_online{{{victim_label}}} == 0") == 0
    assert one(api, f'slotgate_cluster_node_online{{node="{replica}",role="master"}}') == 1
    assert one(api, "slotgate_slots_covered") == SLOT_COUNT
    # The alert rules see it: the failover fires at once, the dead node is pending (for: 1m).
    api.wait(f'ALERTS{{alertname="SlotgateFailover",alertstate="firing",node="{replica}"}}')
    api.wait(f'ALERTS{{alertname="SlotgateNodeDown",{victim_label}}}')
    # The surviving replicas' lag is exported, in bytes.
    assert api.wait("slotgate_replica_lag_bytes >= 0")
    # Nothing claims slots are uncovered.
    assert api.query('ALERTS{alertname="SlotgateSlotsNotCovered"}') == []


def slots_of(node: ManagedProcess) -> list[tuple[int, int]]:
    return [(int(e[0]), int(e[1])) for e in node.client().execute_command("CLUSTER", "SLOTS")
            if int(e[2][1]) == node.port]


def test_planned_failover_drill(stack: Stack) -> None:
    # docs/OPERATIONS.md's planned drill: `slotgate cluster failover REPLICA:PORT`; the proxy
    # learns it from the old master's MOVED, and Prometheus shows it.
    api, backend = stack.prometheus, stack.backend
    live = [n for n in backend.nodes if n.alive()]
    wait_replicas_up(live, 30)
    roles = {n.port: n.client().info("replication") for n in live}
    master = next(n for n in live if roles[n.port]["role"] == "master"
                  and roles[n.port]["connected_slaves"] > 0)
    replica = f"{roles[master.port]['slave0']['ip']}:{roles[master.port]['slave0']['port']}"
    key = next(f"drill{i}" for i in range(100_000)
               if any(lo <= key_slot(f"drill{i}".encode()) <= hi for lo, hi in slots_of(master)))
    out = subprocess.run([sys.executable, "-m", "slotgate.proxy.ops.cli", "cluster", "failover",
                          replica], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    client = stack.proxy.client(socket_timeout=15)

    def seen() -> bool:
        # A refresh right after the MOVED may ask a node that has not heard of the failover
        # yet; the old master's next MOVED makes the proxy ask again.
        assert client.set(key, "drill")
        return bool(api.query(f'slotgate_failovers_total{{node="{replica}"}} >= 1'))

    wait_until(seen, 60, f"Prometheus to see {replica} promoted", interval_s=0.5)
    assert one(api, f'slotgate_redirects_total{{kind="moved",node="{stack.addr(master)}"}} >= 1')
    assert one(api, f'slotgate_cluster_node_online{{node="{stack.addr(master)}",role="replica"}}'
               ) == 1


def test_alert_rules_loaded_and_healthy(stack: Stack) -> None:
    api = stack.prometheus
    wanted = {r["alert"] for g in yaml.safe_load((DEPLOY / "alerts.yml").read_text())["groups"]
              for r in g["rules"]}
    got: dict[str, str] = {}

    def evaluated() -> bool:
        body = api.get("/api/v1/rules")
        got.clear()
        for group in body["data"]["groups"]:
            for rule in group["rules"]:
                got[rule["name"]] = f'{rule["health"]} {rule.get("lastError", "")}'.strip()
        return set(got) == wanted and all(h == "ok" for h in got.values())

    wait_until(evaluated, 30, lambda: f"every alert rule loaded and evaluated ok: {got}")


def test_every_dashboard_expression_evaluates(stack: Stack) -> None:
    api = stack.prometheus
    exprs = dashboard_exprs()
    assert len(exprs) >= 10
    empty = []
    for title, expr in exprs:
        body = api.get("/api/v1/query", query=expr)
        assert body["status"] == "success", (title, expr, body)
        if not body["data"]["result"]:
            empty.append(title)
    # Panels whose series exist from start-up have data here (errors by command may be empty).
    for title in ("Slots covered (16384 = all)", "Known nodes", "Redirects by kind",
                  "Redirects by node", "Commands by result", "Command latency p50 / p99"):
        assert title not in empty, (title, empty)
