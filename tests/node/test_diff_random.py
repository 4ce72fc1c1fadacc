"""Hypothesis-generated command sequences (strings, keys, bitmaps, transactions, mixed with the
collection types): our node and redis-server 7.0 must answer every command with the same raw
bytes, RESP2 and RESP3. 2 x 40 sequences of 40..100 commands: about 5,000 commands per run."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.node.diff import Pair, run_argvs
from tests.node.gen import command

_SETTINGS = settings(max_examples=40, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture,
                                            HealthCheck.too_slow, HealthCheck.data_too_large])


def _encode(cmds: list[list[str]]) -> list[list[bytes]]:
    return [[a.encode("latin-1") for a in argv] for argv in cmds]


@_SETTINGS
@given(proto=st.sampled_from([2, 3]),
       cmds=st.lists(command("strings", "keys", "bitmaps", "transactions"), min_size=40,
                     max_size=100))
def test_random_core_sequences(diff_pair: Pair, proto: int, cmds: list[list[str]]) -> None:
    problems = run_argvs(diff_pair, _encode(cmds), proto)
    assert not problems, "\n".join(problems)


@_SETTINGS
@given(proto=st.sampled_from([2, 3]), cmds=st.lists(command(), min_size=40, max_size=100))
def test_random_mixed_types(diff_pair: Pair, proto: int, cmds: list[list[str]]) -> None:
    problems = run_argvs(diff_pair, _encode(cmds), proto)
    assert not problems, "\n".join(problems)


@_SETTINGS
@given(proto=st.sampled_from([2, 3]),
       cmds=st.lists(command("streams", "keys"), min_size=40, max_size=100))
def test_random_stream_sequences(diff_pair: Pair, proto: int, cmds: list[list[str]]) -> None:
    problems = run_argvs(diff_pair, _encode(cmds), proto)
    assert not problems, "\n".join(problems)
