"""(being built)"""

from __future__ import annotations

from typing import Any


def install(server: Any) -> None:
    """Attach this subsystem to ``server``."""
