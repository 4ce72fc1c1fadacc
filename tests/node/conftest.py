"""Fixtures for the node's differential tests (see tests/node/diff.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.node.diff import Pair
from tests.support import RawClient, node_and_redis


@pytest.fixture(scope="module")
def diff_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    """Our node and a real redis-server 7.0, fresh for the test module, both debug-enabled."""
    with node_and_redis(tmp_path_factory.mktemp("diff")) as procs:
        yield Pair(procs["ours"].port, procs["real"].port)


@pytest.fixture(scope="module")
def raw_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RawClient, RawClient]]:
    """One connection to each of a fresh node and redis-server pair for the test module:
    (ours, real). For tests that compare parsed replies with ``diff.both``."""
    with node_and_redis(tmp_path_factory.mktemp("raw")) as procs:
        with RawClient(procs["ours"].port) as ours, RawClient(procs["real"].port) as real:
            yield ours, real
