"""Known differences of our bundled node from redis-server 7.0 that proxy tests run into.

A test calls ``node_gap(request, backend, reason)``: against the bundled backend it is then a
strict xfail (it must still fail; once the node is fixed, the XPASS fails the run and the
marker is removed). Against real Redis nothing changes.
"""

from __future__ import annotations

import pytest

from tests.conftest import ClusterBackend

NO_PUBSUB_STATS = "node: INFO stats pubsub_channels and pubsub_patterns stay 0"


def node_gap(request: pytest.FixtureRequest, backend: ClusterBackend, reason: str) -> None:
    if backend.kind == "bundled":
        request.applymarker(pytest.mark.xfail(reason=reason, strict=True))
