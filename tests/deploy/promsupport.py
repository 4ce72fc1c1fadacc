"""A real Prometheus (Debian's `prometheus` package) for the deploy tests: its config made
from deploy/prometheus.yml, started on a free loopback port, queried over its HTTP API."""

from __future__ import annotations

import json
import re
import shutil
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import ManagedProcess, free_port, wait_until

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
SCRAPE_INTERVAL = "1s"
# What a Grafana panel's $__rate_interval becomes here: several scrapes of SCRAPE_INTERVAL.
RATE_INTERVAL = "15s"

needs_prometheus = pytest.mark.skipif(
    PROMETHEUS is None or PROMTOOL is None,
    reason="prometheus/promtool not installed (.ci/run installs Debian's prometheus package)")


def prometheus_config(target: str, rules: Path = DEPLOY / "alerts.yml") -> dict[str, Any]:
    """deploy/prometheus.yml with its proxy job scraping ``target`` every SCRAPE_INTERVAL,
    rules evaluated as often, and its rule files as absolute paths."""
    doc = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    doc["global"]["scrape_interval"] = SCRAPE_INTERVAL
    doc["global"]["evaluation_interval"] = SCRAPE_INTERVAL
    assert doc["rule_files"] == [rules.name]
    doc["rule_files"] = [str(rules)]
    (job,) = doc["scrape_configs"]
    (static,) = job["static_configs"]
    static["targets"] = [target]
    return doc


def prometheus_process(workdir: Path, config: dict[str, Any], host: str = "127.0.0.1",
                       port: int | None = None,
                       command: tuple[str, ...] = ()) -> ManagedProcess:
    """Prometheus with ``config``, its storage under ``workdir`` (not yet started).
    ``command`` is more flags (the compose service's)."""
    assert PROMETHEUS is not None
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    port = port if port is not None else free_port()
    argv = [PROMETHEUS, f"--config.file={path}", f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address={host}:{port}", *command]
    return ManagedProcess(argv, port, workdir, "prometheus.log")


class PromAPI:
    """Prometheus' HTTP API at ``base`` (``http://host:port``)."""

    def __init__(self, base: str) -> None:
        self.base = base

    def get(self, path: str, **params: str) -> Any:
        url = f"{self.base}{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - loopback
                body = json.loads(resp.read())
        except urllib.error.HTTPError as exc:  # 400/422: the error is in the body
            body = json.loads(exc.read())
        return body

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result vector; fails the test on an error reply."""
        body = self.get("/api/v1/query", query=expr)
        assert body["status"] == "success", (expr, body)
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def values(self, expr: str) -> dict[tuple[tuple[str, str], ...], float]:
        """An instant query's samples: sorted label pairs -> value."""
        return {tuple(sorted(r["metric"].items())): float(r["value"][1])
                for r in self.query(expr)}

    def wait(self, expr: str, timeout_s: float = 30.0) -> list[dict[str, Any]]:
        """Poll ``expr`` until it returns samples; them."""
        got: list[list[dict[str, Any]]] = [[]]

        def some() -> bool:
            got[0] = self.query(expr)
            return bool(got[0])

        wait_until(some, timeout_s, f"Prometheus to answer {expr!r} with samples", interval_s=0.5)
        return got[0]

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        def ready() -> bool:
            try:
                with urllib.request.urlopen(f"{self.base}/-/ready", timeout=2) as resp:  # noqa: S310
                    return bool(resp.status == 200)
            except OSError:
                return False

        wait_until(ready, timeout_s, f"Prometheus ready at {self.base}", interval_s=0.2)


def dashboard_exprs() -> list[tuple[str, str]]:
    """(panel title, PromQL) for every target of the Grafana dashboard, Grafana's
    ``$__rate_interval`` and ``$__interval`` replaced by RATE_INTERVAL."""
    dash = json.loads((DEPLOY / "grafana/dashboards/slotgate.json").read_text())
    out = []
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            expr = re.sub(r"\$__(rate_)?interval", RATE_INTERVAL, target["expr"])
            assert "$" not in expr, (panel["title"], expr)
            out.append((panel["title"], expr))
    return out
