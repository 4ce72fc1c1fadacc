"""Shared fixtures: real processes on free loopback ports, always stopped by PID."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import redis
from hypothesis import settings

from tests.support import (
    ManagedProcess,
    create_cluster,
    redis_server,
    running,
    slotgate_node,
    slotgate_proxy,
    start_all,
    start_nodes,
    wait_until,
)

# Property tests judge results, never speed: a shared 2-core machine under load can take longer
# than hypothesis' default 200 ms per example, which would fail a correct run.
settings.register_profile("slotgate", deadline=None)
settings.load_profile("slotgate")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-slow", action="store_true", default=False,
                     help="also run the long scenarios marked slow (big reshards, soaks, "
                          "10-node clusters); the default run leaves them out")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="a long scenario: run with --run-slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def redis_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagedProcess]:
    """One real redis-server, standalone. Tests must not rely on its data from other tests."""
    proc = redis_server(tmp_path_factory.mktemp("redis-standalone"))
    with running(proc):
        yield proc


@pytest.fixture(scope="session")
def redis_cluster_enabled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagedProcess]:
    """One real cluster-enabled redis-server that owns no slots (for CLUSTER KEYSLOT etc.)."""
    proc = redis_server(tmp_path_factory.mktemp("redis-clustered"), cluster=True)
    with running(proc):
        yield proc


def wait_replicas_up(nodes: Sequence[ManagedProcess], timeout_s: float = 60.0) -> None:
    """Wait until every replica among ``nodes`` reports ``master_link_status:up``."""
    down: list[int] = []

    def all_up() -> bool:
        infos = [n.client(socket_timeout=2).info("replication") for n in nodes]
        down[:] = [n.port for n, i in zip(nodes, infos, strict=True)
                   if i.get("role") == "slave" and i.get("master_link_status") != "up"]
        return not down

    wait_until(all_up, timeout_s, lambda: f"replicas in sync (not up: {down})",
               interval_s=0.1, ignore=(redis.RedisError,))


def start_cluster(kind: str, workdir: Path, masters: int = 3,
                  replicas: int = 1) -> list[ManagedProcess]:
    """A cluster of real redis-servers (``kind`` "real") or of our nodes ("bundled"), formed
    the same way: ``redis-cli --cluster create``, then every replica in sync."""
    count = masters * (1 + replicas)
    if kind == "real":
        nodes = start_all([redis_server(workdir, cluster=True) for _ in range(count)])
    else:
        nodes = start_nodes(workdir, count)
    try:
        create_cluster(nodes, replicas=replicas)
        wait_replicas_up(nodes)
    except Exception:
        for n in nodes:
            n.stop()
        raise
    return nodes


@pytest.fixture
def cleanup() -> Iterator[list[ManagedProcess]]:
    """Every process appended here is stopped by PID at the end of the test."""
    procs: list[ManagedProcess] = []
    try:
        yield procs
    finally:
        for p in procs:
            p.stop()


def _session_cluster(kind: str, tmp_path_factory: pytest.TempPathFactory, masters: int = 3,
                     replicas: int = 1) -> Iterator[list[ManagedProcess]]:
    """A fixture's body: the cluster while the fixture lasts, stopped by PID after."""
    nodes = start_cluster(kind, tmp_path_factory.mktemp(f"{kind}-cluster"), masters, replicas)
    try:
        yield nodes
    finally:
        for n in nodes:
            n.stop()


@pytest.fixture(scope="session")
def real_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ManagedProcess]]:
    """A real redis-server 7 cluster: 3 masters + 3 replicas made with redis-cli --cluster create."""
    yield from _session_cluster("real", tmp_path_factory)


@pytest.fixture(scope="session")
def bundled_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ManagedProcess]]:
    """Six of our nodes: 3 masters + 3 replicas made with redis-cli --cluster create."""
    yield from _session_cluster("bundled", tmp_path_factory)


class ClusterBackend:
    """What the proxy tests need from a cluster: seed ports and node handles.

    ``kind`` names the implementation ("real" redis-server 7.0, "bundled" for our nodes), so
    the same proxy tests run against each.
    """

    def __init__(self, kind: str, nodes: list[ManagedProcess]) -> None:
        self.kind = kind
        self.nodes = nodes

    @property
    def ports(self) -> list[int]:
        return [n.port for n in self.nodes]


CLUSTER_FIXTURES = {"real": "real_cluster", "bundled": "bundled_cluster"}


@pytest.fixture(scope="session", params=list(CLUSTER_FIXTURES))
def cluster_backend(request: pytest.FixtureRequest) -> ClusterBackend:
    """The cluster behind the proxy: every test using it runs once per implementation."""
    return ClusterBackend(request.param, request.getfixturevalue(CLUSTER_FIXTURES[request.param]))


@pytest.fixture(scope="session")
def slotgate(cluster_backend: ClusterBackend,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagedProcess]:
    """The proxy (a real ``python -m slotgate.proxy`` process) in front of ``cluster_backend``."""
    proc = slotgate_proxy(tmp_path_factory.mktemp("slotgate"), cluster_backend.ports[:2])
    with running(proc):
        yield proc


@pytest.fixture(scope="session")
def node_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagedProcess]:
    """One of our nodes, standalone (debug command on). Tests must not rely on its data."""
    proc = slotgate_node(tmp_path_factory.mktemp("node-standalone"),
                         extra=["--enable-debug-command", "yes"])
    with running(proc):
        yield proc
