"""docs/OPERATIONS.md checked against what it names: every alert rule has its runbook section,
every metric the proxy exports is explained and every metric named exists, every complete
`slotgate cluster ...` command line parses with the real CLI, and every link resolves."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from slotgate.protocol.slots import SLOT_COUNT
from slotgate.proxy.ops import cli
from slotgate.proxy.ops.metrics import PrometheusMetrics
from slotgate.proxy.routing.topology import SlotMap
from tests.unit.test_docs import _anchors, github_anchor

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "OPERATIONS.md"
ALERTS = ROOT / "deploy" / "alerts.yml"


def doc() -> str:
    return DOC.read_text(encoding="utf-8")


def exported_families() -> set[str]:
    """Every slotgate_* family a proxy exports, with every optional part present."""
    m = PrometheusMetrics(process_metrics=False)

    class Topo:
        version = 1
        slot_map = SlotMap(owners=["a:1"] * SLOT_COUNT, replicas={"a:1": ["b:1"]},
                           masters=["a:1"], members={"a:1": ("master", "online")},
                           replica_lag_bytes={"b:1": ("a:1", 0)})

    m.topology = Topo()
    m.failover("a:1")
    names = set()
    for line in m.render().decode().splitlines():
        if line.startswith("# TYPE slotgate_"):
            names.add(line.split()[2])
    return names


def test_every_alert_has_its_runbook_section() -> None:
    rules = [r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]
    anchors = _anchors(doc())
    alerts_section = doc().split("\n## Alerts\n", 1)[1]
    for rule in rules:
        name = rule["alert"]
        assert f"\n### {name}\n" in alerts_section, name
        assert rule["annotations"]["runbook"] == f"docs/OPERATIONS.md#{github_anchor(name)}"
        assert github_anchor(name) in anchors


def test_every_exported_metric_is_explained_and_every_named_one_exists() -> None:
    text = doc()
    table = text.split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0]
    families = exported_families()
    assert len(families) >= 18
    for family in families:
        assert f"`{family}" in table, family
    # The supervisor's own (workers) are exported by the supervisor, not by PrometheusMetrics.
    supervisor = {"slotgate_workers", "slotgate_worker_restarts_total",
                  "slotgate_worker_scrape_errors_total"}
    for name in set(re.findall(r"\bslotgate_[a-z_]+", text)) - supervisor:
        assert name in families, name


def test_worker_metrics_named_exist_in_the_supervisor() -> None:
    source = "".join(p.read_text() for p in (ROOT / "proxy" / "ops").glob("*.py"))
    for name in ("workers", "worker_restarts", "worker_scrape_errors"):
        assert f'"{name}"' in source or f"slotgate_{name}" in source, name


def complete_commands(text: str) -> list[str]:
    """Inline code spans and code-block lines that are whole `slotgate cluster` command lines
    (no [optional] parts, alternatives or ellipses)."""
    spans = re.findall(r"`(slotgate cluster [^`]+)`", text)
    for block in re.findall(r"```\n(.*?)```", text, re.S):
        spans += [line.split("#", 1)[0].strip() for line in block.splitlines()
                  if line.startswith("slotgate cluster ")]
    return [s for s in spans if not re.search(r"[\[\]|]|\.\.\.", s) and len(s.split()) > 3]


def test_cluster_command_lines_parse() -> None:
    commands = complete_commands(doc())
    assert len(commands) >= 12
    parser = cli.arg_parser()
    actions = set()
    for command in commands:
        try:
            ns = parser.parse_args(shlex.split(command)[1:])
        except SystemExit:
            pytest.fail(f"does not parse: {command}")
        actions.add(ns.action)
    # The runbook uses the commands an operator needs.
    assert {"check", "add-node", "rebalance", "reshard", "del-node", "failover", "fix",
            "call"} <= actions, actions


def test_a_broken_command_would_be_caught() -> None:
    parser = cli.arg_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["cluster", "reshard", "N1:7000", "--no-such-option"])


def test_actions_named_exist() -> None:
    parser = cli.arg_parser()
    cluster = next(a for a in parser._subparsers._group_actions[0].choices.items()  # type: ignore[union-attr]
                   if a[0] == "cluster")[1]
    known = set(cluster._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
    named = set(re.findall(r"`slotgate cluster ([a-z-]+)", doc()))
    assert named and named <= known, named - known


def test_links_resolve() -> None:
    links = re.findall(r"\]\(([^)\s]+)\)", doc())
    assert len(links) >= 8
    for link in links:
        target, _, anchor = link.partition("#")
        path = (DOC.parent / target).resolve() if target else DOC
        assert path.exists(), link
        if anchor:
            assert anchor in _anchors(path.read_text(encoding="utf-8")), link
