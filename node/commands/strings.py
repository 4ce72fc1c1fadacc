"""strings commands (in progress)."""

from __future__ import annotations
