"""Redis Cluster for the node: state, bus wire format, gossip and failure detection, transport,
routing. ``install(server)`` is the subsystem entry point (a no-op unless cluster-enabled)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from slotgate.node.core.server import Server


def install(server: Server) -> None:
    """Subsystem hook: turn cluster mode on when ``cluster-enabled yes``.

    A config file that is locked by another node or corrupted is fatal, as in Redis: the
    reason is logged and the process exits with status 1."""
    if not server.cluster_enabled:
        return
    # Imported here: the engine, bus and transport load only when cluster mode is on.
    from slotgate.node.cluster.node import install as install_cluster
    from slotgate.node.cluster.nodesconf import ConfigFileError

    try:
        install_cluster(server)
    except ConfigFileError as e:
        logging.getLogger("node.cluster").warning("%s", e)
        raise SystemExit(1) from None
