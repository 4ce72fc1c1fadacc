"""``except*`` as a context manager, for the modules compiled with mypyc (which cannot compile
``except*``; pyproject.toml lists them): ``with on_group(kinds, handle):`` around a body is
``try: body`` / ``except* kinds as eg: handle(eg.exceptions[0])``. What does not match is
raised on, as ``except*`` does."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def on_group(kinds: tuple[type[Exception], ...],
             handle: Callable[[Exception], None]) -> Iterator[None]:
    try:
        yield
    except* kinds as eg:
        handle(eg.exceptions[0])
