"""deploy/: the Dockerfile, compose stack, Prometheus and Grafana files.

Docker does not run on the test machine, so the stack is checked two ways:
1. Statically: every file parses, and every command a service runs is accepted by the real
   parser of the program it names (the node's redis.conf directives, the proxy's flags and
   config file), every mounted file exists, every metric the dashboard queries is exported.
2. In miniature, with real processes on loopback: the node services' exact command lines
   (addresses swapped for free loopback ports), their health check, the one-shot
   cluster-create script (run twice: it must be idempotent), the proxy with deploy/proxy.yaml,
   and the image's HEALTHCHECK command.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from slotgate.node.core import config as node_config
from slotgate.proxy.ops import config as proxy_config
from slotgate.proxy.ops.metrics import PrometheusMetrics
from slotgate.proxy.routing.topology import SlotMap
from tests.support import (
    CLUSTER_BUS_PORT_OFFSET,
    REDIS_SERVER,
    ManagedProcess,
    free_port,
    wait_cluster_ok,
    wait_until,
)

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
NODE_SERVICES = [f"node-{i}" for i in range(1, 7)]


def compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def console_scripts() -> set[str]:
    return set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"])


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = (REPO / "Dockerfile").read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


# --- static checks ---------------------------------------------------------------------------

def test_dockerfile_shape() -> None:
    ins = dockerfile_instructions()
    froms = [rest for word, rest in ins if word == "FROM"]
    assert froms and all(re.match(r"python:3\.1\d-slim", f) for f in froms), froms
    # Runs as a non-root user, declared after the last FROM.
    last_from = max(i for i, (w, _) in enumerate(ins) if w == "FROM")
    users = [rest for word, rest in ins[last_from:] if word == "USER"]
    assert users and users[-1] not in ("root", "0"), users
    # Exec form (JSON arrays) for ENTRYPOINT, CMD and HEALTHCHECK's CMD.
    entry = json.loads(dict(ins)["ENTRYPOINT"])
    assert entry == ["slotgate-proxy"] and entry[0] in console_scripts()
    cmd = json.loads(dict(ins)["CMD"])
    proxy_config.config_from_args(proxy_config.arg_parser().parse_args(cmd))  # valid flags
    health = dict(ins)["HEALTHCHECK"]
    check = json.loads(health[health.index("CMD ") + 4:])
    assert check[:2] == ["slotgate-proxy", "--check-health"]
    ns = proxy_config.arg_parser().parse_args(check[1:])
    assert ns.check_health.endswith("/healthz")
    # Its port is the one the default CMD serves metrics on.
    assert ns.check_health.split(":")[-1].split("/")[0] == cmd[cmd.index("--metrics") + 1].split(":")[-1]
    # The compose create job uses redis-cli: the image must carry it.
    assert any("redis-tools" in rest for word, rest in ins if word == "RUN")


def test_compose_structure() -> None:
    doc = compose()
    assert "version" not in doc
    services = doc["services"]
    assert set(NODE_SERVICES) <= set(services)
    assert {"cluster-create", "proxy", "prometheus", "grafana"} <= set(services)
    for name, svc in services.items():
        if name != "cluster-create":
            assert "healthcheck" in svc, f"{name} has no healthcheck"
        for dep, cond in svc.get("depends_on", {}).items():
            assert dep in services, (name, dep)
            assert cond["condition"] in ("service_started", "service_healthy",
                                         "service_completed_successfully")
    create_deps = services["cluster-create"]["depends_on"]
    assert {d: c["condition"] for d, c in create_deps.items()} == dict.fromkeys(NODE_SERVICES,
                                                                              "service_healthy")
    assert services["proxy"]["depends_on"]["cluster-create"]["condition"] == \
        "service_completed_successfully"
    # Nodes stay on the internal network: nothing of theirs is published.
    for n in NODE_SERVICES:
        assert "ports" not in services[n]
    # Every file mounted from the repository exists.
    for name, svc in services.items():
        for vol in svc.get("volumes", []):
            src = vol.split(":")[0]
            if src.startswith("."):
                assert (DEPLOY / src).exists(), (name, src)


def test_node_commands_are_accepted_by_the_node() -> None:
    services = compose()["services"]
    scripts = console_scripts()
    announced = []
    for name in NODE_SERVICES:
        svc = services[name]
        assert svc["entrypoint"][0] in scripts
        cfg = node_config.load(svc["command"])  # raises on an unknown directive or bad value
        assert cfg.get("cluster-enabled") is True
        ip = cfg.get("cluster-announce-ip")
        assert ip == svc["networks"]["cluster"]["ipv4_address"]
        assert cfg.get("cluster-announce-port") == cfg.get("port")
        assert cfg.get("cluster-announce-bus-port") == cfg.get("port") + CLUSTER_BUS_PORT_OFFSET
        announced.append(f"{ip}:{cfg.get('port')}")
    # The create job names exactly these nodes, with one replica each.
    script = services["cluster-create"]["command"][0]
    create = shlex.split(script.split("||", 1)[1])
    assert create[:3] == ["redis-cli", "--cluster", "create"]
    assert create[3:9] == announced
    assert create[9:] == ["--cluster-replicas", "1", "--cluster-yes"]
    assert services["cluster-create"]["entrypoint"] == ["/bin/sh", "-c"]


def test_proxy_service_config() -> None:
    services = compose()["services"]
    svc = services["proxy"]
    args = svc.get("command", [])
    ns = proxy_config.arg_parser().parse_args(args)
    mounted = {v.split(":")[1]: v.split(":")[0] for v in svc["volumes"]}
    ns.config = DEPLOY / mounted[str(ns.config)]
    cfg = proxy_config.config_from_args(ns)
    node_addrs = {(s["networks"]["cluster"]["ipv4_address"], 7000) for n, s in services.items()
                  if n in NODE_SERVICES}
    assert set(cfg.proxy.seeds) <= node_addrs
    assert cfg.metrics_listen is not None
    published = {int(p.split(":")[1]) for p in svc["ports"]}
    assert {cfg.proxy.listen_port, cfg.metrics_listen[1]} == published
    health = svc["healthcheck"]["test"]
    assert health[:3] == ["CMD", "slotgate-proxy", "--check-health"]
    assert f":{cfg.metrics_listen[1]}/healthz" in health[3]
    # Prometheus scrapes that port on the proxy service.
    prom = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    targets = [t for job in prom["scrape_configs"] for sc in job["static_configs"]
               for t in sc["targets"]]
    assert f"proxy:{cfg.metrics_listen[1]}" in targets


def test_grafana_provisioning_and_dashboard_metrics() -> None:
    ds = yaml.safe_load((DEPLOY / "grafana/provisioning/datasources/prometheus.yaml").read_text())
    uid = ds["datasources"][0]["uid"]
    assert ds["datasources"][0]["url"] == "http://prometheus:9090"
    prov = yaml.safe_load((DEPLOY / "grafana/provisioning/dashboards/slotgate.yaml").read_text())
    svc = compose()["services"]["grafana"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in svc["volumes"]}
    dash_dir = prov["providers"][0]["options"]["path"]
    assert dash_dir in mounts and (DEPLOY / mounts[dash_dir]).is_dir()
    dash = json.loads((DEPLOY / "grafana/dashboards/slotgate.json").read_text())
    # Every metric a panel queries is one the proxy exports.
    m = PrometheusMetrics(process_metrics=False)

    class Topo:
        version = 1
        slot_map = SlotMap(owners=["a:1"] * 16384, replicas={"a:1": ["b:1"]}, masters=["a:1"])

    m.topology = Topo()
    m.redirect("MOVED", "a:1")
    exported = {line.split("{")[0].split(" ")[0] for line in m.render().decode().splitlines()
                if line and not line.startswith("#")}
    titles = []
    for panel in dash["panels"]:
        titles.append(panel["title"].lower())
        assert panel["datasource"]["uid"] == uid
        for target in panel["targets"]:
            for name in re.findall(r"\bslotgate_[a-z_]+", target["expr"]):
                assert name in exported, (panel["title"], name)
    text = " ".join(titles)
    for topic in ("redirects by kind", "commands", "p50", "p99", "slots covered"):
        assert topic in text, topic


def test_docs_say_docker_was_not_run_here() -> None:
    text = (REPO / "deploy" / "README.md").read_text()
    assert "not run" in text.lower()


# --- the stack in miniature, real processes ----------------------------------------------------

def localize(argv: list[str], port: int, workdir: Path) -> list[str]:
    """A node service's command with its container address swapped for a loopback one."""
    swap = {"--port": str(port), "--cluster-announce-ip": "127.0.0.1",
            "--cluster-announce-port": str(port),
            "--cluster-announce-bus-port": str(port + CLUSTER_BUS_PORT_OFFSET),
            "--dir": str(workdir)}
    out = list(argv)
    for i, arg in enumerate(out[:-1]):
        if arg in swap:
            out[i + 1] = swap[arg]
    return out + ["--bind", "127.0.0.1"]


# The node services' command lines are redis.conf directives, so the real redis-server takes
# them unchanged: it runs the same miniature stack as the oracle next to the bundled node.
NODE_PROGRAMS = {
    "bundled": [sys.executable, "-m", "slotgate.node"],
    "redis-server": [REDIS_SERVER],
}


@pytest.fixture(scope="module", params=list(NODE_PROGRAMS))
def mini_nodes(request: pytest.FixtureRequest,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ManagedProcess]]:
    services = compose()["services"]
    procs = []
    try:
        for name in NODE_SERVICES:
            port = free_port(cluster=True)
            d = tmp_path_factory.mktemp(name)
            argv = [*NODE_PROGRAMS[request.param], *localize(services[name]["command"], port, d)]
            procs.append(ManagedProcess(argv, port, d, "node.log").start())
        yield procs
    finally:
        for p in procs:
            p.stop()


def run_health(test: list[str], replace: dict[str, str], timeout_s: float = 30.0) -> None:
    """Run a compose/Docker health check command (exec form) until it exits 0."""
    assert test[0] == "CMD"
    argv = list(test[1:])
    for old, new in replace.items():
        argv = [a.replace(old, new) for a in argv]
    argv = [sys.executable if a == "python" else a for a in argv]
    if argv[0] == "slotgate-proxy":
        argv = [sys.executable, "-m", "slotgate.proxy", *argv[1:]]
    out = [""]

    def passes() -> bool:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        out[0] = f"{r.stdout} {r.stderr}"
        return r.returncode == 0

    wait_until(passes, timeout_s, lambda: f"health check {argv} to pass: {out[0]}",
               interval_s=0.2)


def test_stack_in_miniature(mini_nodes: list[ManagedProcess], tmp_path: Path) -> None:
    doc = compose()
    services = doc["services"]
    # 1. Node health checks pass on every node.
    for proc in mini_nodes:
        run_health(services["node-1"]["healthcheck"]["test"], {"7000": str(proc.port)})
    # 2. The create job's script forms the cluster, and a second run changes nothing.
    script = services["cluster-create"]["command"][0]
    addrs = [f"172.28.0.{10 + i}:7000" for i in range(1, 7)]
    for addr, proc in zip(addrs, mini_nodes, strict=True):
        script = script.replace(addr, f"127.0.0.1:{proc.port}")
    first_ip, first_port = "172.28.0.11", "7000"
    script = script.replace(f"-h {first_ip} -p {first_port}", f"-h 127.0.0.1 -p {mini_nodes[0].port}")
    assert "172.28" not in script
    for _ in range(2):
        r = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        wait_cluster_ok(mini_nodes)
    # 3. The proxy with deploy/proxy.yaml (addresses swapped) becomes healthy and serves.
    port, mport = free_port(), free_port()
    cfg = yaml.safe_load((DEPLOY / "proxy.yaml").read_text())
    cfg["listen"] = f"127.0.0.1:{port}"
    cfg["seeds"] = [f"127.0.0.1:{p.port}" for p in mini_nodes[:3]]
    cfg["metrics"]["listen"] = f"127.0.0.1:{mport}"
    path = tmp_path / "proxy.yaml"
    path.write_text(yaml.safe_dump(cfg))
    proxy = ManagedProcess([sys.executable, "-m", "slotgate.proxy", "--config", str(path)], port,
                           tmp_path, "proxy.log").start()
    try:
        run_health(services["proxy"]["healthcheck"]["test"], {"9716": str(mport)})
        client = proxy.client(socket_timeout=5)
        for i in range(50):
            assert client.set(f"mini-{i}", i)
        assert client.mget([f"mini-{i}" for i in range(50)]) == [str(i).encode() for i in range(50)]
        client.close()
    finally:
        proxy.stop()
