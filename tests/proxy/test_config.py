"""proxy/ops/config.py: YAML + flags -> validated settings; every bad value names its key."""

from __future__ import annotations

import dataclasses
import re
import textwrap
from pathlib import Path

import pytest
import yaml

from slotgate.proxy.ops import config
from slotgate.proxy.ops.config import (
    SCHEMA,
    Config,
    ConfigError,
    arg_parser,
    config_from_args,
    load,
    plan_reload,
)
from slotgate.proxy.ops.settings import ProxySettings

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "proxy.yaml"
    p.write_text(textwrap.dedent(text))
    return p


def problems(tmp_path: Path, text: str) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        load(write(tmp_path, text))
    # str() is what the user sees: one "config error: ..." line per problem.
    lines = str(exc.value).splitlines()
    assert all(line.startswith("config error: ") for line in lines), lines
    return exc.value.problems


def test_valid_file_fills_every_field(tmp_path: Path) -> None:
    cfg = load(write(tmp_path, """
        listen: "0.0.0.0:6380"
        seeds: ["10.0.0.1:7000", "node-2:7001", "[::1]:7002"]
        log_level: DEBUG
        workers: 3
        metrics:
          listen: "127.0.0.1:9716"
        backend:
          connections_per_node: 2
          connect_timeout: 250ms
          command_timeout: 1.5s
          reconnect_backoff_min: 5ms
          reconnect_backoff_max: 2s
        redirects:
          max: 5
        retry:
          deadline: 1m
          backoff_min: 1ms
          backoff_max: 100ms
        topology:
          refresh_interval: 30s
          refresh_min_gap: 0s
        clients:
          max_clients: 50
          max_pipeline_depth: 10
          max_bulk_bytes: 1024
          max_inline_bytes: 100
          max_multibulk_len: 7
        shutdown:
          grace: 0s
    """))
    p = cfg.proxy
    assert (p.listen_host, p.listen_port) == ("0.0.0.0", 6380)
    assert p.seeds == [("10.0.0.1", 7000), ("node-2", 7001), ("::1", 7002)]
    assert cfg.log_level == "debug"
    assert cfg.workers == 3
    assert cfg.metrics_listen == ("127.0.0.1", 9716)
    assert p.backend_connections_per_node == 2
    assert (p.connect_timeout_ms, p.command_timeout_ms) == (250, 1500)
    assert (p.reconnect_backoff_min_ms, p.reconnect_backoff_max_ms) == (5, 2000)
    assert p.max_redirects == 5
    assert (p.retry_deadline_ms, p.retry_backoff_min_ms, p.retry_backoff_max_ms) == (60000, 1, 100)
    assert (p.topology_refresh_interval_ms, p.topology_refresh_min_gap_ms) == (30000, 0)
    assert (p.max_clients, p.max_pipeline_depth) == (50, 10)
    assert (p.max_bulk_len, p.max_inline_len, p.max_multibulk_len) == (1024, 100, 7)
    assert p.shutdown_grace_ms == 0


def test_unset_keys_keep_the_core_defaults(tmp_path: Path) -> None:
    cfg = load(write(tmp_path, 'seeds: ["127.0.0.1:7000"]\n'))
    expected = ProxySettings(seeds=[("127.0.0.1", 7000)])
    assert cfg.proxy == expected
    assert cfg.metrics_listen is None and cfg.log_level == "info"


# (yaml snippet, key named in the message, words the message must contain)
BAD_VALUES = [
    ("backend:\n  command_timeout: fast\n", "backend.command_timeout",
     'expected a duration like "500ms" or "2s", got "fast"'),
    ("backend:\n  connect_timeout: 500\n", "backend.connect_timeout",
     'expected a duration like "500ms" or "2s", got 500'),
    ("backend:\n  connect_timeout: 5 s\n", "backend.connect_timeout", 'got "5 s"'),
    ("backend:\n  connect_timeout: -1s\n", "backend.connect_timeout", 'got "-1s"'),
    ("backend:\n  connect_timeout: 0s\n", "backend.connect_timeout", 'at least "1ms"'),
    ("backend:\n  connect_timeout: 2h\n", "backend.connect_timeout", 'got "2h"'),
    ("backend:\n  connect_timeout:\n", "backend.connect_timeout", "got nothing (null)"),
    ("backend:\n  connections_per_node: 0\n", "backend.connections_per_node",
     "expected a whole number from 1 to 64, got 0"),
    ("backend:\n  connections_per_node: 1.5\n", "backend.connections_per_node", "got 1.5"),
    ("backend:\n  connections_per_node: \"2\"\n", "backend.connections_per_node", 'got "2"'),
    ("clients:\n  max_clients: -1\n", "clients.max_clients", "1 or more, got -1"),
    ("clients:\n  max_clients: true\n", "clients.max_clients", "got true"),
    ("clients:\n  max_bulk_bytes: 1000000000\n", "clients.max_bulk_bytes",
     "from 1 to 536870912, got 1000000000"),
    ("redirects:\n  max: many\n", "redirects.max", 'got "many"'),
    ("log_level: loud\n", "log_level",
     'expected one of debug, info, warning, error, critical, got "loud"'),
    ("listen: 7777\n", "listen", 'expected HOST:PORT like "127.0.0.1:7000", got 7777'),
    ("listen: \"localhost\"\n", "listen", 'got "localhost"'),
    ("listen: \"host:99999\"\n", "listen", "port must be from 1 to 65535"),
    ("listen: \"bad host:80\"\n", "listen", 'got "bad host:80"'),
    ("metrics:\n  listen: nope\n", "metrics.listen", 'got "nope"'),
    ("workers: 0\n", "workers", "expected a whole number from 1 to 64, got 0"),
    ("workers: 65\n", "workers", "from 1 to 64, got 65"),
    ("workers: \"2\"\n", "workers", 'got "2"'),
    ("seeds: \"127.0.0.1:7000\"\n", "seeds", "expected a non-empty list of HOST:PORT"),
    ("seeds: []\n", "seeds", "expected a non-empty list"),
    ("seeds: [\"127.0.0.1:7000\", \"x\"]\n", "seeds", 'item 1: expected HOST:PORT'),
    ("backend: 5\n", "backend", "expected a section of keys, got 5"),
    ("backend:\n  password: 1234\n", "backend.password",
     'expected a password: a string (quote digits: "1234"), got 1234'),
    ("backend:\n  username: \"a b\"\n  password: p\n", "backend.username",
     "a string without spaces"),
    ("backend:\n  username: proxy\n", "backend.username", "needs backend.password too"),
    ("backend:\n  node_auth:\n    x: {password: p}\n", "backend.node_auth",
     "x: expected HOST:PORT"),
    ("backend:\n  node_auth:\n    \"127.0.0.1:7000\": {pass: p}\n", "backend.node_auth",
     "127.0.0.1:7000: expected {password: ..., username: ...}"),
    ("backend:\n  node_auth: [\"127.0.0.1:7000\"]\n", "backend.node_auth", "expected a mapping"),
    ("admin_commands: 1\n", "admin_commands", "expected true or false, got 1"),
    ("cluster_emulation:\n  enabled: maybe\n", "cluster_emulation.enabled",
     'expected true or false, got "maybe"'),
    ("cluster_emulation:\n  announce: nope\n", "cluster_emulation.announce", 'got "nope"'),
    ("cluster_emulation:\n  proxies: []\n", "cluster_emulation.proxies", "non-empty list"),
]


@pytest.mark.parametrize(("snippet", "key", "words"), BAD_VALUES)
def test_every_bad_value_names_its_key(tmp_path: Path, snippet: str, key: str, words: str) -> None:
    text = snippet if snippet.startswith("seeds") else 'seeds: ["127.0.0.1:7000"]\n' + snippet
    found = problems(tmp_path, text)
    assert len(found) == 1, found
    assert found[0].startswith(f"{key}: "), found
    assert words in found[0], found


def test_unknown_keys_are_errors_with_a_suggestion(tmp_path: Path) -> None:
    found = problems(tmp_path, """
        seeds: ["127.0.0.1:7000"]
        lsten: "127.0.0.1:1"
        backend:
          conect_timeout: 1s
          command_timeout: 2s
        nonsense:
          deep: 1
    """)
    assert sorted(found) == sorted([
        'lsten: unknown key (did you mean "listen"?)',
        'backend.conect_timeout: unknown key (did you mean "backend.connect_timeout"?)',
        "nonsense: unknown key",
    ])


def test_all_problems_are_reported_together(tmp_path: Path) -> None:
    found = problems(tmp_path, """
        seeds: ["127.0.0.1:7000"]
        log_level: loud
        backend:
          command_timeout: fast
        bogus: 1
    """)
    assert [p.split(":")[0] for p in found] == ["bogus", "log_level", "backend.command_timeout"]


def test_ordered_pairs(tmp_path: Path) -> None:
    found = problems(tmp_path, """
        seeds: ["127.0.0.1:7000"]
        retry:
          backoff_min: 2s
    """)
    assert found == ["retry.backoff_min: must not be larger than retry.backoff_max (2000ms > 500ms)"]


def test_seeds_are_required(tmp_path: Path) -> None:
    found = problems(tmp_path, 'listen: "127.0.0.1:7777"\n')
    assert found == ["seeds: at least one seed node is required (in the file or with --seed)"]


def test_file_level_problems(tmp_path: Path) -> None:
    found = problems(tmp_path, "a: 1\nb: [1\n")
    assert re.fullmatch(r".*proxy\.yaml: invalid YAML at line \d+, column \d+: .+", found[0]), found
    found = problems(tmp_path, "seeds: []\nseeds: []\n")
    assert "key 'seeds' given twice (lines 1 and 2)" in found[0]
    found = problems(tmp_path, "- 1\n- 2\n")
    assert found[0].endswith("expected a mapping of keys at the top level, got [1, 2]")
    with pytest.raises(ConfigError) as exc:
        load(tmp_path / "missing.yaml")
    assert "missing.yaml: cannot read: No such file or directory" in str(exc.value)


def parse(argv: list[str]) -> Config:
    return config_from_args(arg_parser().parse_args(argv))


def test_flags_override_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, """
        listen: "127.0.0.1:1111"
        seeds: ["127.0.0.1:7000", "127.0.0.1:7001"]
        log_level: error
        workers: 2
        metrics:
          listen: "127.0.0.1:2222"
        backend:
          command_timeout: 3s
    """)
    cfg = parse(["--config", str(path), "--listen", "0.0.0.0:3333", "--seed", "10.0.0.9:7000",
                 "--metrics", "127.0.0.1:4444", "--log-level", "debug", "--workers", "5"])
    assert cfg.workers == 5
    assert (cfg.proxy.listen_host, cfg.proxy.listen_port) == ("0.0.0.0", 3333)
    assert cfg.proxy.seeds == [("10.0.0.9", 7000)]
    assert cfg.metrics_listen == ("127.0.0.1", 4444)
    assert cfg.log_level == "debug"
    assert cfg.proxy.command_timeout_ms == 3000  # from the file: no flag for it
    # Without flags the file's values stand.
    cfg = parse(["--config", str(path)])
    assert cfg.proxy.listen_port == 1111 and cfg.log_level == "error" and cfg.workers == 2
    assert cfg.proxy.seeds == [("127.0.0.1", 7000), ("127.0.0.1", 7001)]


def test_flags_alone_and_bad_flags_named_as_flags() -> None:
    cfg = parse(["--listen", "127.0.0.1:5555", "--seed", "127.0.0.1:7000"])
    assert cfg.proxy.listen_port == 5555
    with pytest.raises(ConfigError) as exc:
        parse(["--listen", "nope", "--seed", "127.0.0.1:7000", "--log-level", "x"])
    assert exc.value.problems == [
        '--listen: expected HOST:PORT like "127.0.0.1:7000", got "nope"',
        '--log-level: expected one of debug, info, warning, error, critical, got "x"',
    ]


def test_example_file_documents_every_key_with_its_default() -> None:
    example = REPO / "config.example.yaml"
    # The file is generated from the schema and the code's defaults; regenerate it with
    # python -c "from proxy.config import example_yaml; print(example_yaml(), end='')"
    assert example.read_text() == config.example_yaml()
    cfg = load(example)
    doc = yaml.safe_load(example.read_text())
    for key in SCHEMA:
        node = doc
        for part in key.path.split("."):
            assert part in node, f"{key.path} missing from config.example.yaml"
            node = node[part]
    # Loading it gives exactly the defaults (seeds have none; the example shows one).
    assert cfg == Config(proxy=ProxySettings(seeds=cfg.proxy.seeds))


def test_docs_list_every_key_with_default_and_reloadability() -> None:
    text = (REPO / "docs" / "CONFIG.md").read_text()
    for key in SCHEMA:
        row = re.search(rf"^\| `{re.escape(key.path)}` \|(.*)$", text, re.M)
        assert row, f"{key.path} missing from docs/CONFIG.md"
        cells = [c.strip() for c in row.group(1).split(" | ")]
        assert cells[0].strip("`") == config.default_text(key), row.group(0)
        assert cells[1] == ("reload" if key.reload else "restart"), row.group(0)


def test_reload_plan_keeps_restart_only_keys() -> None:
    old = parse(["--listen", "127.0.0.1:1111", "--seed", "127.0.0.1:7000"])
    new_proxy = dataclasses.replace(old.proxy, listen_port=2222, seeds=[("127.0.0.1", 7001)],
                                    command_timeout_ms=99, backend_connections_per_node=3)
    new = Config(proxy=new_proxy, metrics_listen=("127.0.0.1", 9), log_level="debug")
    plan = plan_reload(old, new)
    assert plan.changed == ["seeds", "log_level", "backend.command_timeout"]
    assert plan.needs_restart == ["listen", "metrics.listen", "backend.connections_per_node"]
    assert plan.config.proxy.listen_port == 1111
    assert plan.config.proxy.backend_connections_per_node == 1
    assert plan.config.metrics_listen is None
    assert plan.config.proxy.seeds == [("127.0.0.1", 7001)]
    assert plan.config.proxy.command_timeout_ms == 99
    assert plan.config.log_level == "debug"
    assert plan_reload(old, old).changed == []


def test_describe_round_trips(tmp_path: Path) -> None:
    cfg = parse(["--listen", "127.0.0.1:1111", "--seed", "127.0.0.1:7000",
                 "--metrics", "[::1]:9"])
    # describe() prints "key: value" lines in the file's syntax: loading them back is identity.
    nested: dict = {}
    for line in config.describe(cfg).splitlines():
        path, _, value = line.partition(": ")
        *sections, name = path.split(".")
        node = nested
        for s in sections:
            node = node.setdefault(s, {})
        node[name] = yaml.safe_load(value)
    path = tmp_path / "round.yaml"
    path.write_text(yaml.safe_dump(nested))
    assert load(path) == cfg


def test_cli_exit_codes(tmp_path: Path) -> None:
    """The real command line: errors go to stderr with status 2; --check-config prints."""
    import subprocess
    import sys

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "slotgate.proxy", *args], capture_output=True,
                              text=True, timeout=30, stdin=subprocess.DEVNULL, cwd=REPO)

    bad = run("--listen", "nope", "--seed", "127.0.0.1:7000")
    assert bad.returncode == 2
    assert bad.stderr == 'config error: --listen: expected HOST:PORT like "127.0.0.1:7000", got "nope"\n'
    path = write(tmp_path, 'seeds: ["127.0.0.1:7000"]\nbackend:\n  command_timeout: 250ms\n')
    ok = run("--config", str(path), "--check-config")
    assert ok.returncode == 0, ok.stderr
    assert 'backend.command_timeout: "250ms"' in ok.stdout.splitlines()
    assert run("--config", str(REPO / "config.example.yaml"), "--check-config").returncode == 0
    # A valid configuration whose address is taken: status 1, one line, no traceback.
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = run("--listen", f"127.0.0.1:{taken.getsockname()[1]}", "--seed", "127.0.0.1:1")
    assert busy.returncode == 1
    assert busy.stderr.splitlines()[-1] == "slotgate-proxy: [Errno 98] Address already in use"
    assert "Traceback" not in busy.stderr


def test_credentials_and_cluster_emulation_keys(tmp_path: Path) -> None:
    path = tmp_path / "auth.yaml"
    path.write_text('seeds: ["127.0.0.1:7000"]\n'
                    "backend:\n  username: proxy\n  password: \"pass word\"\n"
                    "  node_auth:\n    \"127.0.0.1:7001\": {password: \"0123\"}\n"
                    "    \"[::1]:7002\": {username: other, password: x}\n"
                    "admin_commands: true\n"
                    "cluster_emulation:\n  enabled: true\n  announce: \"10.0.0.1:6379\"\n"
                    "  proxies: [\"10.0.0.1:6379\", \"10.0.0.2:6379\"]\n")
    cfg = load(path)
    p = cfg.proxy
    assert (p.backend_username, p.backend_password) == ("proxy", "pass word")
    assert p.backend_node_auth == {"127.0.0.1:7001": (None, "0123"), "::1:7002": ("other", "x")}
    assert p.admin_commands and p.cluster_emulation
    assert p.cluster_announce == ("10.0.0.1", 6379)
    assert p.cluster_proxies == [("10.0.0.1", 6379), ("10.0.0.2", 6379)]
    # --check-config never prints a password.
    shown = config.describe(cfg)
    assert "pass word" not in shown and "0123" not in shown
    assert 'backend.password: "(hidden)"' in shown
