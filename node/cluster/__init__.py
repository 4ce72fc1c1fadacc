"""Redis Cluster for the node: state, bus wire format, gossip and failure detection, transport,
routing. ``install(server)`` is the subsystem entry point (a no-op unless cluster-enabled)."""

from __future__ import annotations

from typing import Any


def install(server: Any) -> None:
    """Subsystem hook: turn cluster mode on when ``cluster-enabled yes``."""
    if not server.cluster_enabled:
        return
    from node.cluster.node import install as install_cluster

    install_cluster(server)
