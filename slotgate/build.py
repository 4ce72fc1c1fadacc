"""Which build runs: the compiled modules (mypyc, hatch_build.py) or pure Python.

Decided once, when ``slotgate`` is first imported (before any of its modules): the compiled
build is used when the install compiled it (``_compiled.json`` lists each compiled module with
the SHA-256 of its source), every listed source still has that hash and every extension file is
there for this Python. Otherwise, and whenever ``SLOTGATE_COMPILE=0``, every module is loaded
from its ``.py`` source: a finder put first on ``sys.meta_path`` sends it there, so an
extension built from older source (or left by an interrupted build) never shadows it. The
same finder loads every module the manifest does not list from source in the compiled build. ``SLOTGATE_COMPILE=1``
makes a missing or stale compiled build an ImportError instead.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
MANIFEST = "_compiled.json"  # written by the compiling build
SWITCH = "SLOTGATE_COMPILE"


@dataclass(frozen=True)
class Build:
    compiled: bool
    modules: tuple[str, ...]  # the modules the install compiled (empty: none)
    why: str  # why pure Python, when it is

    def describe(self) -> str:
        if self.compiled:
            return f"compiled (mypyc, {len(self.modules)} modules)"
        return f"pure Python ({self.why})"


def _source(here: Path, name: str) -> Path:
    """slotgate.proxy.front.session -> <here>/proxy/front/session.py"""
    return here.joinpath(*name.split(".")[1:]).with_suffix(".py")


def _why_not(here: Path, data: dict[str, Any]) -> str | None:
    """None when the compiled build can be loaded; else the first reason it cannot."""
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    group = data["group"].split(".", 1)[1]  # slotgate._hot -> _hot__mypyc<suffix>
    if not (here / f"{group}__mypyc{suffix}").exists():
        return "not compiled for this Python"
    for name, digest in data["modules"].items():
        source = _source(here, name)
        try:
            if hashlib.sha256(source.read_bytes()).hexdigest() != digest:
                return f"{name} changed since it was compiled"
        except OSError:
            return f"{name} has no source"
        if not source.with_suffix(suffix).exists():
            return f"{name} is not compiled for this Python"
    return None


class SourceFirst(importlib.abc.MetaPathFinder):
    """Loads every module of the package at `here` but those in `compiled` from its .py
    source, whatever else lies beside it (an extension of an earlier build that compiled more
    modules, or of an interrupted one)."""

    def __init__(self, here: Path, compiled: tuple[str, ...] = ()) -> None:
        self.here = here
        self.compiled = frozenset(compiled)

    def find_spec(self, fullname: str, path: Any = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith("slotgate.") or fullname in self.compiled:
            return None
        source = _source(self.here, fullname)
        if not source.is_file():
            return None  # a package, the compiled group, or no such module: the usual finders
        return importlib.util.spec_from_file_location(fullname, source)


def decide(here: Path, setting: str) -> Build:
    """The build to load from the package folder `here`, given SLOTGATE_COMPILE's value."""
    try:
        data = json.loads((here / MANIFEST).read_text())
    except FileNotFoundError:
        data = None
    modules = tuple(data["modules"]) if data else ()
    if data is None:
        why: str | None = "not compiled at install"
    elif setting == "0":
        why = f"{SWITCH}=0"
    else:
        why = _why_not(here, data)
    if why is None:
        return Build(True, modules, "")
    if setting == "1":
        raise ImportError(f"{SWITCH}=1 but the compiled build cannot be used: {why}")
    return Build(False, modules, why)


def _load() -> Build:
    build = decide(HERE, os.environ.get(SWITCH, "").strip())
    sys.meta_path.insert(0, SourceFirst(HERE, build.modules if build.compiled else ()))
    return build


BUILD = _load()
