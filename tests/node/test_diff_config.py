"""Every directive of redis-server 7.0.15: CONFIG GET '*' after start-up and after a CONFIG SET
of several directives, CONFIG SET's validation errors, and CONFIG REWRITE's round trip."""

from __future__ import annotations

from pathlib import Path

import pytest

from slotgate.node.core import config as C
from slotgate.node.core.config_table import NO_EFFECT
from tests.node.diff import Case, Pair, check_cases
from tests.support import RawClient, node_and_redis

# Values that differ by nature between two processes started side by side: each listens on
# its own port and works in its own directory.
NECESSARILY_DIFFERENT = {"port", "dir"}

# A CONFIG SET of several directives at once (one of each kind of value).
SET_MANY = [
    "hz", "20", "active-defrag-ignore-bytes", "1gb", "tls-auth-clients", "optional",
    "oom-score-adj-values", "-10 20 300", "latency-tracking-info-percentiles", "50 99.5 0.123456789",
    "proc-title-template", "{title} {port} {{x}}", "crash-log-enabled", "no",
    "propagation-error-behavior", "panic-on-replicas", "tls-session-cache-size", "100",
    "lfu-log-factor", "3", "tracking-table-max-keys", "10", "bind-source-addr", "1.2.3.4",
    "slave-priority", "7", "latency-monitor-threshold", "5", "maxmemory-clients", "1mb",
]


def _all(client) -> dict[str, str]:  # type: ignore[no-untyped-def]
    raw = client.config_get("*")
    return {str(k): v.decode() if isinstance(v, bytes) else str(v) for k, v in raw.items()}


def _mismatches(ours: dict[str, str], real: dict[str, str]) -> list[str]:
    out = [f"only in redis: {k}" for k in sorted(set(real) - set(ours))]
    out += [f"only in ours: {k}" for k in sorted(set(ours) - set(real))]
    out += [f"{k}: ours {ours[k]!r} redis {real[k]!r}" for k in sorted(set(ours) & set(real))
            if k not in NECESSARILY_DIFFERENT and ours[k] != real[k]]
    return out


def test_config_get_every_directive_then_set_several(tmp_path: Path) -> None:
    with node_and_redis(tmp_path) as procs:
        ours, real = procs["ours"].client(), procs["real"].client()
        assert _mismatches(_all(ours), _all(real)) == []
        assert len(_all(real)) >= 190
        for side in (ours, real):
            assert side.execute_command("CONFIG", "SET", *SET_MANY) == b"OK"
        after = _all(ours)
        assert _mismatches(after, _all(real)) == []
        assert after["hz"] == "20" and after["latency-tracking-info-percentiles"] == "50 99.5 0.123457"


CASES = [
    Case("config set validation", [
        "CONFIG SET activedefrag yes", "CONFIG SET activedefrag maybe",
        "CONFIG SET active-defrag-cycle-min 0", "CONFIG SET active-defrag-cycle-min abc",
        "CONFIG SET active-defrag-ignore-bytes 0", "CONFIG SET active-defrag-max-scan-fields 0",
        "CONFIG SET latency-tracking-info-percentiles 101",
        "CONFIG SET latency-tracking-info-percentiles abc",
        "CONFIG SET latency-tracking-info-percentiles ' 5'",
        "CONFIG SET latency-tracking-info-percentiles '50 99'",
        "CONFIG SET latency-tracking-info-percentiles 1e1",
        "CONFIG GET latency-tracking-info-percentiles",
        "CONFIG SET latency-tracking-info-percentiles ''",
        "CONFIG GET latency-tracking-info-percentiles",
        "CONFIG SET oom-score-adj bogus", "CONFIG SET oom-score-adj-values '1 2'",
        "CONFIG SET oom-score-adj-values '1 2 3000'", "CONFIG SET oom-score-adj-values 'a b c'",
        "CONFIG SET proc-title-template '{title}'", "CONFIG SET proc-title-template '{title'",
        "CONFIG SET proc-title-template 'x{TITLE}'", "CONFIG SET proc-title-template '  '",
        "CONFIG SET proc-title-template 'a}b'", "CONFIG GET proc-title-template",
        "CONFIG SET propagation-error-behavior x", "CONFIG SET sanitize-dump-payload x",
        "CONFIG SET syslog-ident x", "CONFIG SET socket-mark-id 1", "CONFIG SET server_cpulist 1",
        "CONFIG SET tls-auth-clients x", "CONFIG SET tls-session-cache-size -1",
        "CONFIG SET tracking-table-max-keys -1", "CONFIG SET lfu-log-factor -1",
        "CONFIG SET maxmemory-eviction-tenacity 101", "CONFIG SET maxmemory 1zb",
        "CONFIG SET maxmemory -1", "CONFIG SET loglevel x", "CONFIG SET appendonly x",
        "CONFIG SET hz 1 2", "CONFIG SET hz 1000", "CONFIG GET hz", "CONFIG SET hz 0",
        "CONFIG GET hz", "CONFIG SET hz 10",
        "CONFIG SET latency-monitor-threshold -1", "CONFIG SET slowlog-log-slower-than -2",
        # several at once are atomic: the bad third leaves the first two unchanged
        "CONFIG SET active-defrag-ignore-bytes 1kb hz 5 active-defrag-cycle-min 100",
        ("CONFIG GET active-defrag-*", "pairs"), "CONFIG GET hz",
        ("CONFIG GET tls-*", "pairs"), ("CONFIG GET *cpulist", "pairs"),
        "CONFIG SET maxmemory-clients 5%", "CONFIG GET maxmemory-clients",
        "CONFIG SET maxmemory-clients 101%", "CONFIG SET maxmemory-clients -5%",
        "CONFIG SET maxmemory-clients 1.5%", "CONFIG SET maxmemory-clients x%",
        "CONFIG SET maxmemory-clients 0%", "CONFIG GET maxmemory-clients",
        "CONFIG SET maxmemory-clients 1gb", "CONFIG GET maxmemory-clients",
        "CONFIG SET maxmemory-clients 0", "CONFIG SET unixsocketperm 700",
        "CONFIG GET unixsocketperm",
        # client-output-buffer-limit sets the classes it names and keeps the others
        "CONFIG SET client-output-buffer-limit 'pubsub 1mb 2mb 3'",
        "CONFIG SET client-output-buffer-limit 'normal 1mb 0 0'",
        "CONFIG GET client-output-buffer-limit",
        "CONFIG SET client-output-buffer-limit ''", "CONFIG GET client-output-buffer-limit",
        "CONFIG SET client-output-buffer-limit 'replica 1 2 3 normal 5 6 7'",
        "CONFIG GET client-output-buffer-limit",
        "CONFIG SET client-output-buffer-limit 'normal 0 0 0 slave 268435456 67108864 60 "
        "pubsub 33554432 8388608 60'", "CONFIG GET client-output-buffer-limit",
    ]),
]


@pytest.mark.parametrize("proto", [2, 3])
def test_config_set_errors(diff_pair: Pair, proto: int) -> None:
    assert check_cases(diff_pair, CASES, proto) == []


def test_rewrite_lines_load_back(tmp_path: Path) -> None:
    """What CONFIG REWRITE writes for every changed directive reads back to the same values."""
    cfg = C.load([])
    for i in range(0, len(SET_MANY), 2):
        cfg.config_set(SET_MANY[i], SET_MANY[i + 1])
    conf = tmp_path / "node.conf"
    conf.write_text("\n".join(cfg.rewrite_lines()) + "\n")
    assert "oom-score-adj-values" in conf.read_text()
    assert dict(C.load([str(conf)]).config_get(b"*")) == dict(cfg.config_get(b"*"))


def test_no_effect_directives_documented() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "COMPATIBILITY.md").read_text()
    missing = [name for name in NO_EFFECT if f"`{name}`" not in doc]
    assert missing == []


def test_logfile_opened_in_dir(tmp_path: Path) -> None:
    """``logfile`` names a file in ``dir`` whichever comes first; CONFIG GET dir is absolute."""
    import sys

    from tests.support import ManagedProcess, free_port

    port = free_port()
    work = tmp_path / "x"
    argv = [sys.executable, "-m", "slotgate.node", "--logfile", "log.txt", "--port", str(port),
            "--bind", "127.0.0.1", "--save", "", "--dir", str(work)]
    proc = ManagedProcess(argv, port, tmp_path, "stdout.log").start()
    try:
        assert (work / "log.txt").exists() and not (tmp_path / "log.txt").exists()
        assert proc.client().config_get("dir")["dir"] == str(work)
    finally:
        proc.stop()


@pytest.mark.parametrize("line, reason", [
    ("unixsocketperm 7777", "argument must be between 0 and 777 inclusive"),
    ("unixsocketperm 779", "argument couldn't be parsed as an octal number"),
    ("maxmemory-clients 101%", "percentage argument must be less or equal to 100"),
])
def test_start_up_errors_as_redis(line: str, reason: str) -> None:
    name, value = line.split()
    with pytest.raises(C.ConfigError) as e:
        C.load([f"--{name}", value])
    assert str(e.value).strip().splitlines()[-1] == reason


def test_stock_redis_conf_values() -> None:
    cfg = C.load(["--unixsocketperm", "700", "--maxmemory-clients", "5%"])
    got = dict(cfg.config_get(b"*"))
    assert got["unixsocketperm"] == "700" and got["maxmemory-clients"] == "5%"


def test_rename_command(tmp_path: Path) -> None:
    extra = ["--rename-command", "config", "cfg", "--rename-command", "flushall", ""]
    with node_and_redis(tmp_path, extra) as procs:
        replies = []
        for side in ("ours", "real"):
            with RawClient(procs[side].port) as c:
                replies.append([c.call(*args) for args in (
                    ("CFG", "GET", "maxclients"), ("cfg", "get", "maxclients"),
                    ("CONFIG", "GET", "maxclients"), ("FLUSHALL",), ("SET", "a", "1"),
                    ("GET", "a"))])
        assert replies[0] == replies[1]
        assert replies[0][0].startswith(b"*2") and replies[0][2].startswith(b"-ERR unknown")


@pytest.mark.parametrize("words, reason", [
    (["nosuch", "x"], "No such command in rename-command"),
    (["get", "set"], "Target command name already exists"),
    (["get", "a", "--rename-command", "get", "b"], "No such command in rename-command"),
])
def test_rename_command_errors(words: list[str], reason: str) -> None:
    with pytest.raises(C.ConfigError) as e:
        C.load(["--rename-command", *words])
    assert str(e.value).strip().splitlines()[-1] == reason
    assert C.load(["--rename-command", "get", "GET"]).renamed_commands == [(b"get", b"get")]
