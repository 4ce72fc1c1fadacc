"""Fixtures for the node's differential tests (see tests/node/diff.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.node.diff import Pair
from tests.support import redis_server, slotgate_node


@pytest.fixture(scope="module")
def diff_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    """Our node and a real redis-server 7.0, fresh for the test module, both debug-enabled."""
    d = tmp_path_factory.mktemp("diff")
    ours = slotgate_node(d, extra=["--enable-debug-command", "yes"]).start()
    try:
        real = redis_server(d).start()
        try:
            yield Pair(ours.port, real.port)
        finally:
            real.stop()
    finally:
        ours.stop()
