"""The exponential backoff of every retry and reconnect: each caller passes its own bounds."""

from __future__ import annotations


def backoff_ms(attempt: int, min_ms: float, max_ms: float) -> float:
    """The wait before retry number ``attempt`` (0 for the first): min, 2*min, 4*min ...
    capped at max."""
    return float(min(max_ms, min_ms * (1 << min(attempt, 16))))
