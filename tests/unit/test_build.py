"""The compiled build and its pure-Python fallback (slotgate/build.py, hatch_build.py): which one
loads is reported truly, a stale extension never loads, a failed compilation installs pure
Python with one line, and SLOTGATE_COMPILE chooses."""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import hatch_build
import slotgate
from slotgate.build import MANIFEST, SWITCH, SourceFirst, decide

ROOT = Path(__file__).resolve().parents[2]
SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]
PROBE = ("import slotgate, slotgate.protocol.resp as r, slotgate.node.core.dispatch as d; "
         "print(slotgate.BUILD.compiled, r.__file__, d.__file__)")


def test_the_modules_loaded_are_the_build_reported() -> None:
    from slotgate.protocol import resp

    build = slotgate.BUILD
    assert build.compiled == resp.__file__.endswith(SUFFIX)
    for name in build.modules:
        module = importlib.import_module(name)
        assert module.__file__ is not None
        assert module.__file__.endswith(SUFFIX) == build.compiled, name
    setting = os.environ.get(SWITCH, "")
    if setting in ("0", "1"):  # CI runs the suite under each and expects what it asked for
        assert build.compiled == (setting == "1"), build.describe()


def test_slotgate_compile_0_loads_the_python_source_even_beside_an_extension() -> None:
    env = {**os.environ, SWITCH: "0"}
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out[0] == "False" and out[1].endswith("resp.py") and out[2].endswith("dispatch.py")


def test_slotgate_version_says_which_build_runs() -> None:
    out = subprocess.run([sys.executable, "-m", "slotgate.proxy.ops.cli", "--version"],
                         capture_output=True, text=True, check=True).stdout
    assert out.startswith("slotgate ") and slotgate.BUILD.describe() in out, out


def _fake_install(here: Path) -> Path:
    """A package folder as a compiled install leaves it: one module, its extension, the
    group's library and the manifest (the extension files are empty: decide() never loads)."""
    source = here / "protocol" / "resp.py"
    source.parent.mkdir(parents=True)
    source.write_text("X = 1\n")
    source.with_suffix(SUFFIX).write_bytes(b"")
    (here / f"_hot__mypyc{SUFFIX}").write_bytes(b"")
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    (here / MANIFEST).write_text(json.dumps(
        {"group": "slotgate._hot", "modules": {"slotgate.protocol.resp": digest}}))
    return source


def test_the_compiled_build_is_used_only_while_every_source_is_the_one_compiled(
    tmp_path: Path,
) -> None:
    assert decide(tmp_path, "").why == "not compiled at install"
    source = _fake_install(tmp_path)
    assert decide(tmp_path, "").compiled
    assert decide(tmp_path, "1").compiled
    assert decide(tmp_path, "0").why == "SLOTGATE_COMPILE=0"
    source.write_text("X = 2\n")  # edited after the build: its extension is stale
    stale = decide(tmp_path, "")
    assert not stale.compiled and stale.modules == ("slotgate.protocol.resp",)
    assert stale.describe() == "pure Python (slotgate.protocol.resp changed since it was compiled)"
    with pytest.raises(ImportError, match="changed since it was compiled"):
        decide(tmp_path, "1")


def test_an_extension_missing_for_this_python_means_pure_python(tmp_path: Path) -> None:
    source = _fake_install(tmp_path)
    source.with_suffix(SUFFIX).unlink()
    assert decide(tmp_path, "").why == "slotgate.protocol.resp is not compiled for this Python"


def test_a_failed_compilation_installs_pure_python_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    def no_compiler(root: Path, rels: list[str], out_dir: Path) -> list[Path]:
        raise SystemExit("error: command 'gcc' failed: No such file or directory")

    monkeypatch.setattr(hatch_build, "compile_modules", no_compiler)
    monkeypatch.delenv(SWITCH, raising=False)
    assert hatch_build.build(ROOT, ["slotgate/protocol/resp.py"], tmp_path) is None
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "installing pure Python" in err and "gcc" in err
    assert not (tmp_path / MANIFEST).exists()
    monkeypatch.setenv(SWITCH, "1")  # asked for the compiled build: the install fails
    with pytest.raises(SystemExit):
        hatch_build.build(ROOT, ["slotgate/protocol/resp.py"], tmp_path)
    monkeypatch.setenv(SWITCH, "0")
    assert hatch_build.build(ROOT, ["slotgate/protocol/resp.py"], tmp_path) is None
    assert capsys.readouterr().err == ""


def test_a_source_edited_while_it_compiles_is_not_recorded_as_compiled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = tmp_path / "slotgate" / "protocol" / "resp.py"
    source.parent.mkdir(parents=True)
    source.write_bytes(b"x = 1\n")
    compiled = hashlib.sha256(source.read_bytes()).hexdigest()

    def edited_meanwhile(root: Path, rels: list[str], out_dir: Path) -> list[Path]:
        source.write_bytes(b"x = 2\n")  # saved by an editor during the compilation
        return []

    monkeypatch.setattr(hatch_build, "compile_modules", edited_meanwhile)
    monkeypatch.setenv(SWITCH, "1")
    assert hatch_build.build(tmp_path, ["slotgate/protocol/resp.py"], tmp_path) is not None
    modules = json.loads((tmp_path / hatch_build.MANIFEST).read_text())["modules"]
    assert modules == {"slotgate.protocol.resp": compiled}


def test_an_extension_the_manifest_does_not_list_is_never_loaded(tmp_path: Path) -> None:
    """An earlier build compiled more modules: their extensions are still there."""
    _fake_install(tmp_path)
    writer = tmp_path / "eventcore" / "writer.py"
    writer.parent.mkdir()
    writer.write_text("Y = 1\n")
    writer.with_suffix(SUFFIX).write_bytes(b"")
    finder = SourceFirst(tmp_path, decide(tmp_path, "").modules)
    spec = finder.find_spec("slotgate.eventcore.writer")
    assert spec is not None and spec.origin == str(writer)
    assert finder.find_spec("slotgate.protocol.resp") is None  # compiled: the usual finders
    assert finder.find_spec("slotgate.eventcore") is None  # a package
