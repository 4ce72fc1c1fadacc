"""The house's layout: one import name for the whole distribution, and the map in
docs/ARCHITECTURE.md that matches the folders as they are."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("protocol", "eventcore", "proxy", "node")
ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"


def _tracked(pattern: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", pattern], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    return [ROOT / line for line in out.splitlines() if not (ROOT / line).is_symlink()]


def test_code_imports_the_packages_only_by_their_slotgate_names() -> None:
    # A module imported as both ``proxy.x`` and ``slotgate.proxy.x`` would be loaded twice,
    # with two copies of its state; the top-level names are folders, not import names.
    bare = re.compile(rf"^\s*(?:from|import)\s+(?:{'|'.join(PACKAGES)})\b")
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
             for path in _tracked("*.py")
             for n, line in enumerate(path.read_text().splitlines(), 1) if bare.match(line)]
    assert found == []


def test_the_import_package_links_every_top_level_package() -> None:
    for name in PACKAGES:
        link = ROOT / "slotgate" / name
        assert link.is_symlink() and link.resolve() == (ROOT / name).resolve(), name


def test_the_wheel_installs_one_top_level_name(tmp_path: Path) -> None:
    # A pure-Python wheel (compiling takes minutes): the tree's own compiled build, if any,
    # is git-ignored and must not leak into it.
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                    str(tmp_path), str(ROOT)], check=True, capture_output=True,
                   env={**os.environ, "SLOTGATE_COMPILE": "0"})
    (wheel,) = tmp_path.glob("slotgate-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert [n for n in names if n.endswith(".so") or n.endswith("_compiled.json")] == []
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"slotgate"}
    for name in PACKAGES:
        assert f"slotgate/{name}/__init__.py" in names
    assert "slotgate/protocol/commands.json" in names
    assert "slotgate/proxy/__main__.py" in names and "slotgate/node/__main__.py" in names


def _map_entries() -> set[str]:
    """Paths named by the fenced block under '## Map' (two spaces of indent per level)."""
    text = ARCHITECTURE.read_text()
    section = text.split("\n## Map", 1)[1]
    block = section.split("```", 2)[1]
    stack: list[str] = []
    entries: set[str] = set()
    for line in block.splitlines()[1:]:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        assert indent % 2 == 0, line
        name = line.split()[0]
        depth = indent // 2
        stack = stack[:depth] + [name.rstrip("/")]
        entries.add("/".join(stack) + ("/" if name.endswith("/") else ""))
    return entries


def _folder_entries() -> set[str]:
    entries: set[str] = set()
    for top in PACKAGES:
        entries.add(top + "/")
        for path in (ROOT / top).rglob("*"):
            rel = path.relative_to(ROOT)
            if "__pycache__" in rel.parts or path.name == "__init__.py":
                continue
            if path.is_dir():
                entries.add(f"{rel}/")
            elif path.suffix in (".py", ".json"):
                entries.add(str(rel))
    return entries


def test_the_architecture_map_matches_the_folders() -> None:
    assert _map_entries() == _folder_entries()


def test_the_image_build_copies_every_package_and_the_import_package() -> None:
    copied = {line.split()[1] for line in (ROOT / "Dockerfile").read_text().splitlines()
              if line.startswith("COPY ") and "--from" not in line}
    assert {*PACKAGES, "slotgate"} <= copied
