"""The kept corpus of tests/fuzz/corpus/<target>/ as the live fuzz tests use it: the request
and bus inputs, mutated and sent to running processes. ``SLOTGATE_FUZZ_EXAMPLES`` raises the
number of inputs for long runs (the offline fuzzers and their budgets: tests/fuzz/targets.py).
"""

from __future__ import annotations

import os
from pathlib import Path

CORPUS = Path(__file__).parent / "corpus"
CI_EXAMPLES = 60


def examples() -> int:
    return int(os.environ.get("SLOTGATE_FUZZ_EXAMPLES", CI_EXAMPLES))
