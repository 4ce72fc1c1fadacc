"""requirepass: NOAUTH / WRONGPASS / HELLO AUTH flows, identical to redis-server 7.0."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.node.diff import Case, Pair, check_cases
from tests.support import node_and_redis

PASSWORD = "s3cret"

CASES = [
    Case("auth flow", [
        "PING", "GET a", "FOO", "AUTH", "AUTH wrong", "AUTH default wrong", "AUTH nouser s3cret",
        "HELLO 3", "HELLO 2 AUTH default wrong", "HELLO 2 SETNAME x", "MULTI", "EXEC",
        ("HELLO 2 AUTH default s3cret", "type"), "PING", "SET a 1", "GET a",
        "AUTH s3cret", "AUTH default s3cret", "RESET", "GET a", "AUTH s3cret", "GET a"]),
    # HELLO's options act one by one, before its NOAUTH check: a name set stays, an AUTH that
    # went through stays even when a later option is wrong.
    Case("hello options before noauth", [
        "HELLO 2 SETNAME early", "AUTH s3cret", "CLIENT GETNAME", "RESET",
        "HELLO 2 SETNAME late AUTH default wrong", "AUTH s3cret", "CLIENT GETNAME", "RESET",
        "HELLO 2 AUTH default s3cret BAD", "SET a 2", "GET a", "RESET", "GET a"]),
]


@pytest.fixture(scope="module")
def auth_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    with node_and_redis(tmp_path_factory.mktemp("auth"), ["--requirepass", PASSWORD]) as procs:
        yield Pair(procs["ours"].port, procs["real"].port)


def test_auth_matches_redis(auth_pair: Pair) -> None:
    problems = check_cases(auth_pair, CASES, 2)
    assert not problems, "\n".join(problems)
