"""A newcomer's path: a fresh `git clone`, the README's run command, a client through the
proxy, Ctrl-C, and no process left behind; then the same with `--backend redis-server`.

The command is read from the clone's README (the Quick start's first `sh` block): its set-up
steps run as written in the clone (a fresh venv, `pip install -e .`), its last step (`slotgate
up`) is started with free ports appended (`--port`, `--node-base-port`, `--metrics`), since
the machine running the tests is shared and the defaults may be taken.

In the bounded run the clone installs pure Python (SLOTGATE_COMPILE=0 for every step): the
compiled install is CI's own first step, and compiling a second time would cost minutes of
one CPU. With `--run-slow` the steps run with the environment as given, the compiled build
included."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
import redis

from tests.proxy.test_up import _consecutive_cluster_ports, kill_leftovers, read_until_up
from tests.support import free_port, pid_alive, wait_until

REPO = Path(__file__).resolve().parents[2]
PIP_TIMEOUT_S = 600


def readme_run_command(readme: str) -> list[str]:
    """The Quick start's run command, split at ``&&`` into its steps."""
    quick = readme.split("## Quick start", 1)[1]
    block = re.search(r"```sh\n(.*?)```", quick, re.S)
    assert block is not None, "no sh block under Quick start"
    lines = [ln for ln in block[1].splitlines() if ln.strip() and not ln.startswith("#")]
    assert len(lines) == 1, lines
    return [step.strip() for step in lines[0].split("&&")]


def clone_processes(clone: Path) -> list[int]:
    """PIDs of processes whose command line names the clone (its venv's python, its data dir)."""
    out = subprocess.run(["pgrep", "-f", str(clone)], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split() if int(p) != os.getpid()]


def run_and_interrupt(clone: Path, run: list[str], extra: list[str],
                      env: dict[str, str]) -> None:
    n_nodes = 6  # up's defaults: 3 masters x 1 replica
    base = _consecutive_cluster_ports(n_nodes)
    port, metrics = free_port(), free_port()
    argv = [*run, *extra, "--port", str(port), "--node-base-port", str(base), "--metrics",
            f"127.0.0.1:{metrics}"]
    proc = subprocess.Popen(argv, cwd=clone, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env)
    children: list[int] = []
    try:
        read_until_up(proc)
        records = (clone / "slotgate-data" / "slotgate-up.children").read_text().split()
        children = [int(p) for p in records[0::3]]
        assert len(children) == n_nodes + 1
        if not extra:  # (redis-server rewrites its command line: found by PID only)
            assert set(children) <= set(clone_processes(clone))  # found by the clone's path
        r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=5)
        for i in range(100):
            assert r.set(f"newcomer:{i}", i)
        assert r.mget([f"newcomer:{i}" for i in range(100)]) == [b"%d" % i for i in range(100)]
        r.close()
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        assert proc.wait(60) == 0
        wait_until(lambda: not clone_processes(clone), 15,
                   lambda: f"no process of the clone left: {clone_processes(clone)}",
                   interval_s=0.1)
        assert [c for c in children if pid_alive(c)] == []
    finally:
        kill_leftovers(proc, children)


def test_fresh_clone_readme_command_ctrl_c_leaves_nothing(
        tmp_path: Path, request: pytest.FixtureRequest) -> None:
    clone = tmp_path / "slotgate"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True, timeout=120)
    steps = readme_run_command((clone / "README.md").read_text())
    *setup, run = steps
    assert run.split()[-1] == "up" and len(setup) >= 1, steps
    env = dict(os.environ)
    if not request.config.getoption("--run-slow"):
        env["SLOTGATE_COMPILE"] = "0"
    for step in setup:
        done = subprocess.run(step, shell=True, cwd=clone, capture_output=True, text=True,
                              timeout=PIP_TIMEOUT_S, env=env)
        if done.returncode != 0 and "pip install" in step:
            pytest.skip(f"`{step}` failed here (no package index reachable?): "
                        f"{done.stderr[-500:]}")
        assert done.returncode == 0, (step, done.stdout, done.stderr)
    run_and_interrupt(clone, shlex.split(run), [], env)
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed: the --backend redis-server half is left out")
    shutil.rmtree(clone / "slotgate-data")
    run_and_interrupt(clone, shlex.split(run), ["--backend", "redis-server"], env)
