"""Shared fixtures: real processes on free loopback ports, always stopped by PID."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import ManagedProcess, create_cluster, redis_server


@pytest.fixture(scope="session")
def redis_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagedProcess]:
    """One real redis-server, standalone. Tests must not rely on its data from other tests."""
    proc = redis_server(tmp_path_factory.mktemp("redis-standalone")).start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="session")
def redis_cluster_enabled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagedProcess]:
    """One real cluster-enabled redis-server that owns no slots (for CLUSTER KEYSLOT etc.)."""
    proc = redis_server(tmp_path_factory.mktemp("redis-clustered"), cluster=True).start()
    try:
        yield proc
    finally:
        proc.stop()


def start_real_cluster(workdir: Path, masters: int = 3, replicas: int = 1) -> list[ManagedProcess]:
    nodes = [redis_server(workdir, cluster=True) for _ in range(masters * (1 + replicas))]
    try:
        for n in nodes:
            n.start()
        create_cluster(nodes, replicas=replicas)
    except Exception:
        for n in nodes:
            n.stop()
        raise
    return nodes


@pytest.fixture(scope="session")
def real_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ManagedProcess]]:
    """A real redis-server 7 cluster: 3 masters + 3 replicas made with redis-cli --cluster create."""
    nodes = start_real_cluster(tmp_path_factory.mktemp("real-cluster"))
    try:
        yield nodes
    finally:
        for n in nodes:
            n.stop()


class ClusterBackend:
    """What the proxy tests need from a cluster: seed ports and node handles.

    ``kind`` names the implementation ("real" redis-server; later our bundled nodes), so the
    same proxy tests can run against each.
    """

    def __init__(self, kind: str, nodes: list[ManagedProcess]) -> None:
        self.kind = kind
        self.nodes = nodes

    @property
    def ports(self) -> list[int]:
        return [n.port for n in self.nodes]


@pytest.fixture(scope="session", params=["real"])
def cluster_backend(request: pytest.FixtureRequest) -> ClusterBackend:
    """The cluster behind the proxy; parametrize ``params`` to add more implementations."""
    if request.param == "real":
        return ClusterBackend("real", request.getfixturevalue("real_cluster"))
    raise ValueError(f"unknown cluster backend {request.param!r}")


@pytest.fixture(scope="session")
def slotgate(cluster_backend: ClusterBackend,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagedProcess]:
    """The proxy (a real ``python -m proxy`` process) in front of ``cluster_backend``."""
    from tests.support import slotgate_proxy

    proc = slotgate_proxy(tmp_path_factory.mktemp("slotgate"), cluster_backend.ports[:2]).start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="session")
def node_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagedProcess]:
    """One of our nodes, standalone (debug command on). Tests must not rely on its data."""
    from tests.support import slotgate_node

    proc = slotgate_node(tmp_path_factory.mktemp("node-standalone"),
                         extra=["--enable-debug-command", "yes"]).start()
    try:
        yield proc
    finally:
        proc.stop()
