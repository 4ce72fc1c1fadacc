from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.netns import FaultUnavailable, NetnsUnavailable, Network


@pytest.fixture
def network() -> Iterator[Network]:
    """A bridge in a namespace of its own on 10.77.0.0/24 (inside the namespaces only);
    every namespace, process and rule made on it is gone when the test ends, failed or not."""
    try:
        net = Network("10.77.0.0/24")
    except NetnsUnavailable as exc:
        pytest.skip(f"network namespaces are not allowed here ({exc}): the partition tests "
                    "need root or CAP_SYS_ADMIN and iproute2")
    try:
        yield net
    finally:
        net.close()
        assert net.leftovers() == []


def skip_unless_fault(exc: FaultUnavailable) -> None:
    pytest.skip(f"this fault cannot be made here: {exc}")
