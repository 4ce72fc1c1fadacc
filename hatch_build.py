"""The compiled build: the hot modules compiled with mypyc from the same Python source.

Hatchling runs this hook for every wheel and editable install. It compiles the modules named
by `compiled` in pyproject.toml ([tool.hatch.build.targets.wheel.hooks.custom]) into one
extension group, and writes `slotgate/_compiled.json`: each compiled module with the SHA-256
of the source it was compiled from. `import slotgate` checks those hashes and loads the pure
Python source of every one of them when any differs (slotgate/__init__.py), so a stale
extension never shadows an edited module.

SLOTGATE_COMPILE=0 builds pure Python (and removes an earlier editable build's extensions);
SLOTGATE_COMPILE=1 makes a failed compilation fail the install; unset, a failure (no C
compiler, a mypyc error) leaves a pure-Python install and one line on stderr.

`python hatch_build.py` compiles in place, as an editable install does.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

GROUP = "slotgate._hot"  # the extension that holds every compiled module: slotgate/_hot__mypyc
MANIFEST = "slotgate/_compiled.json"
MYPY = "mypy>=1.10"  # mypyc ships with mypy


def compile_setting() -> str:
    """'0' (pure Python), '1' (compiled or fail) or '' (compiled, pure Python if that fails)."""
    value = os.environ.get("SLOTGATE_COMPILE", "").strip()
    return value if value in ("0", "1") else ""


def source_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def module_name(rel: str) -> str:
    return rel.removesuffix(".py").replace("/", ".")


def built_files(root: Path) -> list[Path]:
    """Every file an in-place build leaves in the source tree (of this build or an earlier
    one that compiled other modules)."""
    found = [root / MANIFEST, *root.glob(f"{GROUP.replace('.', '/')}__mypyc.*.so")]
    for package in ("protocol", "eventcore", "proxy", "node"):
        found.extend((root / "slotgate" / package).rglob("*.so"))
    return [p for p in found if p.exists()]


def remove_built(root: Path) -> None:
    for path in built_files(root):
        path.unlink()


def compile_modules(root: Path, rels: list[str], out_dir: Path) -> list[Path]:
    """Compile `rels` (paths under root) into out_dir, laid out as in the package; returns the
    extension files written. Raises on any failure."""
    from mypyc.build import mypycify  # imported here: only the compiling build needs mypy
    from setuptools import Distribution
    from setuptools.command.build_ext import build_ext

    here = os.getcwd()
    os.chdir(root)  # mypyc names modules from paths relative to the project root
    try:
        with tempfile.TemporaryDirectory(prefix="slotgate-mypyc-") as c_dir:
            extensions = mypycify(rels, group_name=GROUP, target_dir=c_dir,
                                  opt_level=os.environ.get("MYPYC_OPT_LEVEL", "3"))
            dist = Distribution({"name": "slotgate", "ext_modules": extensions})
            cmd = build_ext(dist)
            cmd.build_lib = str(out_dir)
            cmd.build_temp = os.path.join(c_dir, "obj")
            cmd.parallel = os.cpu_count() or 1
            cmd.ensure_finalized()
            cmd.run()
            return [Path(p) for p in cmd.get_outputs()]
    finally:
        os.chdir(here)


def manifest(root: Path, rels: list[str]) -> dict[str, Any]:
    return {
        "group": GROUP,
        "suffix": sysconfig.get_config_var("EXT_SUFFIX"),
        "modules": {module_name(rel): source_hash(root / rel) for rel in rels},
    }


def build(root: Path, rels: list[str], out_dir: Path) -> list[Path] | None:
    """Compile into out_dir and write its manifest; None when the build stays pure Python."""
    setting = compile_setting()
    if setting == "0":
        return None
    started = time.monotonic()
    # the sources as they are compiled: one edited during the compilation (minutes) must not
    # be recorded as compiled
    recorded = manifest(root, rels)
    try:
        outputs = compile_modules(root, rels, out_dir)
    except BaseException as exc:  # SystemExit too: distutils reports a compiler error that way
        if setting == "1" or isinstance(exc, KeyboardInterrupt):
            raise
        print(f"slotgate: compiled build failed ({type(exc).__name__}: {exc}); "
              "installing pure Python", file=sys.stderr)
        return None
    path = out_dir / MANIFEST
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
    print(f"slotgate: compiled {len(rels)} modules with mypyc in "
          f"{time.monotonic() - started:.0f} s", file=sys.stderr)
    return outputs + [path]


def compile_in_place(root: Path, rels: list[str]) -> bool:
    """The editable build: extensions next to their sources (ignored by git)."""
    remove_built(root)
    return build(root, rels, root) is not None


try:
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface
except ImportError:  # run as a script, outside a build
    BuildHookInterface = object  # type: ignore[misc,assignment]


class CustomBuildHook(BuildHookInterface):  # type: ignore[misc,valid-type]
    PLUGIN_NAME = "custom"

    def _rels(self) -> list[str]:
        return list(self.config.get("compiled", []))

    def dependencies(self) -> list[str]:
        if compile_setting() == "0":
            return []
        # mypyc type-checks the whole package: with the runtime dependencies and their types
        # installed, as in development (missing, the import cycles type differently and fail).
        import tomllib

        with open(Path(self.root) / "pyproject.toml", "rb") as f:
            project = tomllib.load(f)["project"]
        return [MYPY, "setuptools>=65", "types-PyYAML", *project["dependencies"]]

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        root = Path(self.root)
        rels = self._rels()
        if version == "editable":
            if compile_in_place(root, rels):
                build_data["pure_python"] = False
                build_data["infer_tag"] = True
            return
        # (an editable build's extensions in the tree are git-ignored, so never in a wheel)
        self._out = Path(tempfile.mkdtemp(prefix="slotgate-wheel-"))
        outputs = build(root, rels, self._out)
        if outputs is None:
            return
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        for path in outputs:
            build_data["force_include"][str(path)] = str(path.relative_to(self._out))

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        out = getattr(self, "_out", None)
        if out is not None:
            shutil.rmtree(out, ignore_errors=True)


def _pyproject_rels(root: Path) -> list[str]:
    import tomllib

    with open(root / "pyproject.toml", "rb") as f:
        data = tomllib.load(f)
    return list(data["tool"]["hatch"]["build"]["targets"]["wheel"]["hooks"]["custom"]["compiled"])


if __name__ == "__main__":
    ROOT = Path(__file__).resolve().parent
    sys.exit(0 if compile_in_place(ROOT, _pyproject_rels(ROOT)) else 1)
