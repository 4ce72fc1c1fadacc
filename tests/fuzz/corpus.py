"""Fuzzing with hypothesis and a kept corpus: every target reads the seed inputs kept in
``tests/fuzz/corpus/<target>/`` (hand-made, plus every input that ever found a bug), runs each
as is, then lets hypothesis mutate them (flips, cuts, splices, insertions) and generate fresh
ones. The number of generated examples is bounded for CI (a few seconds a target); the
environment variable ``SLOTGATE_FUZZ_EXAMPLES`` raises it for long runs (bench/fuzz.py).

Every example must end in the target's own error or a result, within ``EXAMPLE_BUDGET_S``
(a hang is a finding too): anything else is a bug, and its input goes into the corpus.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

CORPUS = Path(__file__).parent / "corpus"
CI_EXAMPLES = 60
EXAMPLE_BUDGET_S = 5.0


def examples() -> int:
    return int(os.environ.get("SLOTGATE_FUZZ_EXAMPLES", CI_EXAMPLES))


def fuzz_settings() -> settings:
    return settings(max_examples=examples(), deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def seeds(target: str) -> list[bytes]:
    return [p.read_bytes() for p in sorted((CORPUS / target).iterdir()) if p.is_file()]


def corpus_params(target: str) -> list[Any]:
    """The corpus of ``target`` as pytest parameters, one per file, named after it."""
    return [pytest.param(p.read_bytes(), id=p.name)
            for p in sorted((CORPUS / target).iterdir()) if p.is_file()]


@st.composite
def mutated(draw: st.DrawFn, target: str) -> bytes:
    """A corpus entry with a few random edits, or fresh bytes now and then."""
    pool = seeds(target)
    if not pool or draw(st.integers(0, 9)) == 0:
        return draw(st.binary(max_size=512))
    data = bytearray(draw(st.sampled_from(pool)))
    for _ in range(draw(st.integers(1, 4))):
        edit = draw(st.sampled_from(("flip", "cut", "insert", "splice", "digit")))
        at = draw(st.integers(0, len(data)))
        if edit == "flip" and data:
            i = min(at, len(data) - 1)
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif edit == "cut":
            data = data[:at] + data[at + draw(st.integers(1, 16)):]
        elif edit == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif edit == "splice":
            other = draw(st.sampled_from(pool))
            data[at:] = other[draw(st.integers(0, len(other))):]
        else:  # a number where numbers are: huge, negative, empty
            data[at:at] = draw(st.sampled_from((b"-1", b"0", b"9223372036854775808",
                                                b"4294967296", b"-9223372036854775809", b"")))
    return bytes(data)


def chunked(data: bytes, cuts: list[int]) -> Iterator[bytes]:
    """``data`` in pieces, cut at ``cuts`` (positions, in any order)."""
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    for a, b in zip(points, points[1:], strict=False):
        yield data[a:b]


@contextmanager
def bounded(what: str) -> Iterator[None]:
    """The example must end within EXAMPLE_BUDGET_S."""
    t0 = time.monotonic()
    yield
    spent_s = time.monotonic() - t0
    assert spent_s < EXAMPLE_BUDGET_S, f"{what} took {spent_s:.1f}s on one input (a hang?)"


def expect_only(errors: tuple[type[BaseException], ...], fn: Callable[[], object]) -> object:
    """``fn()``'s result, or None when it raised one of ``errors``; any other exception fails."""
    try:
        return fn()
    except errors:
        return None
