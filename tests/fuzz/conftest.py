"""The node tests' differential pair (our node and redis-server 7.0) for the command fuzzer."""

from __future__ import annotations

from tests.node.conftest import diff_pair  # noqa: F401 - a fixture, used by name
