"""YAML file + command-line flags -> validated ``Settings``.

Flow::

    --config FILE ──yaml (duplicate keys rejected)──▶ nested mapping ─┐
    --listen/--seed/--metrics/--log-level ─────────────────────────────┼─▶ SCHEMA ─▶ Settings
                                                       flags override ┘   (one row per key)

Every key the file may hold is one row of ``SCHEMA``: its dotted path, the ``Settings`` field
it fills, how its value is checked, and whether a running proxy can take a new value on SIGHUP.
Anything not in the table is an error that names the key; every bad value is an error that names
the key and says what is allowed. All errors of a file are reported together.

Durations have exactly one syntax: a string with a unit, ``"250ms"``, ``"2s"``, ``"1.5s"``,
``"1m"``. A bare number is rejected, because ``timeout: 5`` is ambiguous (seconds? ms?).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import logging
import math
import re
import signal
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio
import yaml

from slotgate.proxy.front import users
from slotgate.proxy.ops import tls
from slotgate.proxy.ops.settings import READ_POLICIES, ProxySettings

log = logging.getLogger("proxy.config")

DEFAULT_PROXY_PORT = 6379
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0}  # duration unit -> seconds
_DURATION_RE = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m)$")
_HOSTNAME_RE = re.compile(r"^[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?$")
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


class ConfigError(Exception):
    """Invalid configuration. ``problems`` holds one ``"key: what is wrong"`` per bad key."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(f"config error: {p}" for p in self.problems))


class _Bad(Exception):
    """Raised by a value checker; the caller prefixes the key."""


# -- value checkers: (raw YAML value) -> typed value, or raise _Bad(what is allowed) ----------

def _show(raw: object) -> str:
    if isinstance(raw, str):
        return f'"{raw}"'
    if raw is None:
        return "nothing (null)"
    if isinstance(raw, bool):
        return "true" if raw else "false"
    return repr(raw)


def _duration_s(raw: object) -> float:
    m = _DURATION_RE.match(raw) if isinstance(raw, str) else None
    if m is None:
        raise _Bad(f'expected a duration like "500ms" or "2s", got {_show(raw)}')
    return float(m.group(1)) * _UNIT_S[m.group(2)]


def duration_s(lo_s: float = 0.0, hi_s: float = math.inf, zero_ok: bool = False) -> Callable[[object], float]:
    """A duration in seconds, ``lo_s <= d <= hi_s``; ``zero_ok``: 0 also allowed (means off)."""

    def check(raw: object) -> float:
        d = _duration_s(raw)
        if (zero_ok and d == 0) or lo_s <= d <= hi_s:
            return d
        rng = f"between {_fmt_s(lo_s)} and {_fmt_s(hi_s)}" if hi_s != math.inf else f"at least {_fmt_s(lo_s)}"
        off = ' (or "0s" to turn it off)' if zero_ok else ""
        raise _Bad(f"expected a duration {rng}{off}, got {_show(raw)}")

    return check


def _fmt_s(s: float) -> str:
    return f'"{s * 1000:g}ms"' if s < 1 else f'"{s:g}s"'


def integer(lo: int, hi: int | None = None) -> Callable[[object], int]:
    def check(raw: object) -> int:
        if isinstance(raw, int) and not isinstance(raw, bool) and raw >= lo and (hi is None or raw <= hi):
            return raw
        rng = f"from {lo} to {hi}" if hi is not None else f"{lo} or more"
        raise _Bad(f"expected a whole number {rng}, got {_show(raw)}")

    return check


def boolean(raw: object) -> bool:
    if isinstance(raw, bool):
        return raw
    raise _Bad(f"expected true or false, got {_show(raw)}")


def choice(*allowed: str) -> Callable[[object], str]:
    def check(raw: object) -> str:
        if isinstance(raw, str) and raw.lower() in allowed:
            return raw.lower()
        raise _Bad(f"expected one of {', '.join(allowed)}, got {_show(raw)}")

    return check


def percentiles(raw: object) -> tuple[float, ...]:
    """A list of percentiles, each from 0 to 100 (Redis' latency-tracking-info-percentiles)."""
    if isinstance(raw, list) and all(isinstance(p, (int, float)) and not isinstance(p, bool)
                                     and 0 <= p <= 100 for p in raw):
        return tuple(float(p) for p in raw)
    raise _Bad(f"expected a list of numbers from 0 to 100, like [50, 99, 99.9], got {_show(raw)}")


def host_port(raw: object) -> tuple[str, int]:
    """``"HOST:PORT"`` (IPv6 as ``"[::1]:PORT"``) -> ``(host, port)``."""
    bad = _Bad(f'expected HOST:PORT like "127.0.0.1:7000", got {_show(raw)}')
    if not isinstance(raw, str):
        raise bad
    host, sep, port_s = raw.rpartition(":")
    if not sep or not port_s.isdigit():
        raise bad
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        if ":" not in host:
            raise bad
    elif not _HOSTNAME_RE.match(host):
        raise bad
    port = int(port_s)
    if not 1 <= port <= 65535:
        raise _Bad(f"port must be from 1 to 65535, got {_show(raw)}")
    return host, port


def optional(check: Callable[[object], Any]) -> Callable[[object], Any]:
    """``null`` (or an empty string) turns the feature off; anything else goes to ``check``."""

    def opt(raw: object) -> Any:
        return None if raw is None or raw == "" else check(raw)

    return opt


def host_port_list(raw: object) -> tuple[tuple[str, int], ...]:
    if not isinstance(raw, list) or not raw:
        raise _Bad(f'expected a non-empty list of HOST:PORT like ["127.0.0.1:7000"], got {_show(raw)}')
    out = []
    for i, item in enumerate(raw):
        try:
            out.append(host_port(item))
        except _Bad as exc:
            raise _Bad(f"item {i}: {exc}") from None
    return tuple(out)


def text(what: str, spaces: bool = False) -> Callable[[object], str]:
    """A non-empty string (a YAML number must be quoted); ``spaces``: may hold whitespace."""

    def check(raw: object) -> str:
        if isinstance(raw, str) and raw and (spaces or not any(c.isspace() for c in raw)):
            return raw
        shape = "a string" if spaces else "a string without spaces"
        got = "a string with spaces" if isinstance(raw, str) and raw else _show(raw)
        raise _Bad(f'expected {what}: {shape} (quote digits: "1234"), got {got}')

    return check


PASSWORD = text("a password", spaces=True)
USERNAME = text("a username")


def node_auth(raw: object) -> dict[str, tuple[str | None, str]]:
    """``{"HOST:PORT": {username: U, password: P}}`` -> ``{"host:port": (U or None, P)}``."""
    if not isinstance(raw, dict):
        raise _Bad('expected a mapping like {"127.0.0.1:7000": {password: "..."}}, '
                   f"got {_show(raw)}")
    out: dict[str, tuple[str | None, str]] = {}
    for addr_raw, creds in raw.items():
        try:
            host, port = host_port(addr_raw)
        except _Bad as exc:
            raise _Bad(f"{addr_raw}: {exc}") from None
        if not isinstance(creds, dict) or "password" not in creds or set(creds) - {"username", "password"}:
            raise _Bad(f"{addr_raw}: expected {{password: ..., username: ...}} (username "
                       "optional), got keys " + ", ".join(map(str, creds or ())))
        try:
            user = None if creds.get("username") is None else USERNAME(creds["username"])
            out[f"{host}:{port}"] = (user, PASSWORD(creds["password"]))
        except _Bad as exc:
            raise _Bad(f"{addr_raw}: {exc}") from None
    return out


# -- the schema: one row per key ----------------------------------------------------------

@dataclass(frozen=True)
class Key:
    """One configuration key.

    ``path``: dotted YAML path. ``check``: raw YAML value -> typed value (raises ``_Bad``).
    ``fields``: the attributes it fills (on ``ProxySettings``, or ``Config``'s own
    ``metrics_listen``/``log_level``); ``convert``: typed value -> one value per field (e.g.
    seconds -> ms); ``show``: the fields' values -> YAML text (for --check-config, the example
    file and the docs; defaults are always the code's, never restated here). ``reload``: a
    running proxy takes a new value on SIGHUP (False: the change waits for a restart).
    """

    path: str
    check: Callable[[object], Any]
    fields: tuple[str, ...]
    reload: bool
    doc: str
    convert: Callable[[Any], tuple[Any, ...]] = lambda v: (v,)
    show: Callable[[tuple[Any, ...]], str] = lambda vs: str(vs[0])


def _addr(a: tuple[str, int]) -> str:
    return f"[{a[0]}]:{a[1]}" if ":" in a[0] else f"{a[0]}:{a[1]}"


def _to_ms(seconds: float) -> tuple[int]:
    return (round(seconds * 1000),)


def _show_ms(vs: tuple[Any, ...]) -> str:
    ms = vs[0]
    return f'"{ms // 1000}s"' if ms >= 1000 and ms % 1000 == 0 else f'"{ms}ms"'


def _pair(v: tuple[str, int]) -> tuple[str, int]:
    return v


def _show_pair(vs: tuple[Any, ...]) -> str:
    return f'"{_addr((vs[0], vs[1]))}"'


def _as_list(v: tuple[tuple[str, int], ...]) -> tuple[list[tuple[str, int]]]:
    return (list(v),)


def _show_list(vs: tuple[Any, ...]) -> str:
    return "[" + ", ".join(f'"{_addr(a)}"' for a in vs[0]) + "]"


def _show_optional(vs: tuple[Any, ...]) -> str:
    return "null" if vs[0] is None else f'"{_addr(vs[0])}"'


def _show_bool(vs: tuple[Any, ...]) -> str:
    return "true" if vs[0] else "false"


def _show_secret(vs: tuple[Any, ...]) -> str:
    return "null" if vs[0] is None else '"(hidden)"'


def _show_text(vs: tuple[Any, ...]) -> str:
    return "null" if vs[0] is None else f'"{vs[0]}"'


def _show_node_auth(vs: tuple[Any, ...]) -> str:
    return "{" + ", ".join(f'"{a}": {{password: "(hidden)"}}' for a in vs[0]) + "}"


def _ms_key(path: str, check: Callable[[object], float], field: str, reload: bool, doc: str) -> Key:
    return Key(path, check, (field,), reload, doc, _to_ms, _show_ms)


SCHEMA: tuple[Key, ...] = (
    Key("listen", host_port, ("listen_host", "listen_port"), False,
        "Address clients connect to.", _pair, _show_pair),
    Key("seeds", host_port_list, ("seeds",), True,
        "Cluster nodes to learn the topology from; one reachable seed is enough.", _as_list,
        _show_list),
    Key("log_level", choice(*LOG_LEVELS), ("log_level",), True,
        "One of debug, info, warning, error, critical."),
    Key("workers", integer(1, 64), ("workers",), False,
        "Proxy processes sharing the listen address (SO_REUSEPORT); 1: one process, no "
        "supervisor. More than 1 uses more cores; see docs/PROXY.md, Workers."),
    Key("metrics.listen", optional(host_port), ("metrics_listen",), False,
        'HTTP endpoint for /metrics and /healthz, e.g. "127.0.0.1:9716"; null: off.',
        show=_show_optional),
    Key("backend.connections_per_node", integer(1, 64), ("backend_connections_per_node",), False,
        "Pipelined connections the proxy keeps to each cluster node."),
    _ms_key("backend.connect_timeout", duration_s(0.001), "connect_timeout_ms", True,
            "Time allowed to open a connection to a node."),
    _ms_key("backend.command_timeout", duration_s(0.001), "command_timeout_ms", True,
            "A node connection whose oldest request waits longer than this is declared dead; "
            "its in-flight writes get the unknown-fate error. Blocking commands are exempt. "
            "A new value applies to node connections opened after the reload."),
    _ms_key("backend.reconnect_backoff_min", duration_s(0.001), "reconnect_backoff_min_ms", True,
            "First wait before reconnecting to a node; doubles up to the maximum."),
    _ms_key("backend.reconnect_backoff_max", duration_s(0.001), "reconnect_backoff_max_ms", True,
            "Longest wait between reconnection attempts."),
    Key("backend.username", optional(USERNAME), ("backend_username",), True,
        "ACL user the proxy logs in as on every node connection (AUTH user password); null: "
        "the default user. Needs backend.password.", show=_show_text),
    Key("backend.password", optional(PASSWORD), ("backend_password",), True,
        "Password for every node connection the proxy opens (data, topology, pub/sub, "
        "transactions, health checks); null: no AUTH. Applies to connections opened after a "
        "reload.", show=_show_secret),
    Key("backend.node_auth", node_auth, ("backend_node_auth",), True,
        'Credentials for single nodes, overriding the two above: {"HOST:PORT": {username: U, '
        "password: P}} (username optional).", show=_show_node_auth),
    Key("admin_commands", boolean, ("admin_commands",), True,
        "Let clients change the nodes' credentials and users (CONFIG SET requirepass/"
        "masterauth/masteruser, ACL SETUSER/DELUSER/LOAD); false: refused with -NOPERM. A "
        "requirepass set through the proxy becomes its backend.password until the next reload.",
        show=_show_bool),
    Key("cross_slot_transactions", choice("refuse", "per_shard"), ("cross_slot_transactions",),
        True, "A MULTI whose commands touch several slots. refuse: EXEC answers -CROSSSLOT "
        "naming this setting (Redis Cluster's rule); per_shard: one MULTI/EXEC per slot, "
        "watched shards first, replies in the client's order; atomic per slot only (docs/"
        "COMMANDS.md, Transactions across slots)."),
    Key("databases", integer(1, 65536), ("databases",), False,
        "Numbered databases: SELECT 0..N-1, keys of database d > 0 stored as {T}slotgate-db"
        "<d>:<key> in their own slot (docs/COMMANDS.md, Numbered databases); 1: database 0 "
        "only, SELECT of another answers Redis Cluster's error."),
    Key("cluster_emulation.enabled", boolean, ("cluster_emulation",), True,
        "Answer CLUSTER SLOTS/SHARDS/NODES/INFO/MYID as a cluster whose nodes are the proxies "
        "(all 16384 slots), so cluster-aware clients work through the proxy.", show=_show_bool),
    Key("cluster_emulation.announce", optional(host_port), ("cluster_announce",), True,
        "This proxy's address in those replies; null: the address the client connected to.",
        show=_show_optional),
    Key("cluster_emulation.proxies", optional(host_port_list), ("cluster_proxies",), True,
        "Every proxy to list, this one included (slots shared out evenly, so clients balance); "
        "null: this proxy alone.", convert=lambda v: (list(v or ()),),
        show=lambda vs: _show_list(vs) if vs[0] else "null"),
    Key("redirects.max", integer(1, 1000), ("max_redirects",), True,
        "MOVED/ASK redirects followed for one request before it fails."),
    _ms_key("retry.deadline", duration_s(0.001), "retry_deadline_ms", True,
            "How long one request may keep retrying (CLUSTERDOWN, TRYAGAIN, lost connections, "
            "unserved slots) before its error is returned; longer than a typical failover."),
    _ms_key("retry.backoff_min", duration_s(0.001), "retry_backoff_min_ms", True,
            "First wait between retries; doubles up to the maximum."),
    _ms_key("retry.backoff_max", duration_s(0.001), "retry_backoff_max_ms", True,
            "Longest wait between retries."),
    _ms_key("topology.refresh_interval", duration_s(0.01), "topology_refresh_interval_ms", True,
            "Periodic slot-map refresh."),
    _ms_key("topology.refresh_min_gap", duration_s(zero_ok=True), "topology_refresh_min_gap_ms",
            True, "MOVED storms and dying connections trigger at most one refresh per gap."),
    Key("clients.max_clients", integer(1), ("max_clients",), True,
        "Further connections get -ERR max number of clients reached and are closed."),
    Key("clients.max_pipeline_depth", integer(1), ("max_pipeline_depth",), True,
        "Replies a client may have outstanding before the proxy stops reading its socket. "
        "Client limits apply to connections accepted after a reload."),
    Key("clients.max_bulk_bytes", integer(1, 512 * 1024 * 1024), ("max_bulk_len",), True,
        "Largest bulk string a client may send, in bytes (as Redis: 512 MiB)."),
    Key("clients.max_inline_bytes", integer(1), ("max_inline_len",), True,
        "Longest inline (telnet-style) command line, in bytes."),
    Key("clients.max_multibulk_len", integer(1, 2**31 - 1), ("max_multibulk_len",), True,
        "Most arguments in one command."),
    Key("slowlog.log_slower_than_us", integer(-1), ("slowlog_log_slower_than_us",), True,
        "Redis' slowlog-log-slower-than for the proxy's own SLOWLOG: requests whose end-to-end "
        "time reaches this many microseconds are logged; -1: none, 0: every request. CONFIG "
        "SET through the proxy changes it until the next reload."),
    Key("slowlog.max_len", integer(0), ("slowlog_max_len",), True,
        "Redis' slowlog-max-len: entries the proxy's SLOWLOG keeps (the oldest dropped)."),
    Key("latency.monitor_threshold_ms", integer(0), ("latency_monitor_threshold_ms",), True,
        "Redis' latency-monitor-threshold for the proxy's own LATENCY: requests whose "
        "end-to-end time reaches this many milliseconds are latency events (LATENCY LATEST, "
        "HISTORY, DOCTOR, GRAPH); 0: off. CONFIG SET through the proxy changes it until the "
        "next reload."),
    Key("latency.tracking", boolean, ("latency_tracking",), True,
        "Redis' latency-tracking: per-command latency histograms of the proxy's requests "
        "(LATENCY HISTOGRAM, INFO latencystats).", show=_show_bool),
    Key("latency.tracking_info_percentiles", percentiles,
        ("latency_tracking_info_percentiles",), True,
        "Redis' latency-tracking-info-percentiles: the percentiles INFO latencystats shows.",
        show=lambda vs: "[" + ", ".join(f"{p:g}" for p in vs[0]) + "]"),
    Key("tracking.table_max_keys", integer(0), ("tracking_table_max_keys",), True,
        "Redis' tracking-table-max-keys for the proxy's own CLIENT TRACKING table: over this "
        "many keys, keys are dropped and their readers sent an invalidation; 0: no limit. "
        "CONFIG SET through the proxy changes it until the next reload."),
    _ms_key("shutdown.grace", duration_s(zero_ok=True), "shutdown_grace_ms", True,
            "On SIGTERM/SIGINT: how long in-flight requests may finish before connections "
            "close."),
)
# -- the auth section (proxy/front/users.py builds the users) ---------------------------------

def _password(raw: object) -> str:
    if isinstance(raw, str):
        return raw
    raise _Bad(f"expected a password string, got {_show(raw)}")


def _user_lines(raw: object) -> tuple[str, ...]:
    if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
        raise _Bad(f'expected a list of ACL user lines like ["alice on >pw ~app:* +@read"], '
                   f"got {_show(raw)}")
    try:
        users.user_lines(raw)
    except ValueError as exc:
        raise _Bad(str(exc)) from None
    return tuple(raw)


def _aclfile(raw: object) -> str:
    if not isinstance(raw, str):
        raise _Bad(f"expected a file path, got {_show(raw)}")
    try:
        users.read_aclfile(raw)
    except ValueError as exc:
        raise _Bad(str(exc)) from None
    return raw


def _show_lines(vs: tuple[Any, ...]) -> str:
    hidden = [" ".join(">(hidden)" if w[:1] in "><" else w for w in line.split())
              for line in vs[0]]
    return "[" + ", ".join(f'"{line}"' for line in hidden) + "]"


def _show_path(vs: tuple[Any, ...]) -> str:
    return "null" if vs[0] is None else f'"{vs[0]}"'


AUTH_KEYS: tuple[Key, ...] = (
    Key("auth.requirepass", optional(_password), ("auth_requirepass",), True,
        "The default user's password (as Redis' requirepass); null: none, every client is "
        "logged in as the default user.", show=_show_secret),
    Key("auth.users", _user_lines, ("auth_users",), True,
        'Users as Redis 7.0 ACL rules, one string each: ["alice on >pw ~app:* +@read"]. A '
        '"default" entry redefines the default user. A removed user\'s connections are closed '
        "on reload; a changed user's take the new rules.", show=_show_lines),
    Key("auth.aclfile", optional(_aclfile), ("auth_aclfile",), True,
        "An ACL file (Redis' format: user lines), re-read on SIGHUP and ACL LOAD; not together "
        "with auth.users.", show=_show_path),
)
SCHEMA += AUTH_KEYS


# -- TLS: the tls section (clients) and backend.tls* (nodes); proxy/ops/tls.py --------------

def _protocols(raw: object) -> tuple[str, ...]:
    words = raw.split() if isinstance(raw, str) else raw
    names = ", ".join(tls.PROTOCOLS)
    if not isinstance(words, list) or not words or not all(isinstance(w, str) and w in tls.PROTOCOLS
                                                             for w in words):
        raise _Bad(f'expected protocol names from {names} (like "TLSv1.2 TLSv1.3"), '
                   f"got {_show(raw)}")
    order = list(tls.PROTOCOLS)
    picked = sorted({order.index(w) for w in words})
    if picked != list(range(picked[0], picked[-1] + 1)):
        raise _Bad(f"expected a range without gaps (from {names}), got {_show(raw)}")
    return tuple(order[i] for i in picked)


def _auth_clients(raw: object) -> str:
    """yes / optional / no; YAML reads a bare yes or no as a boolean."""
    if isinstance(raw, bool):
        raw = "yes" if raw else "no"
    return choice(*tls.AUTH_CLIENTS)(raw)


FILE = optional(text("a file path", spaces=True))


def _file_key(path: str, field: str, doc: str) -> Key:
    """A TLS file (PEM) key: a path or null, taken on SIGHUP."""
    return Key(path, FILE, (field,), True, doc, show=_show_path)


TLS_KEYS: tuple[Key, ...] = (
    Key("tls.port", optional(integer(0, 65535)), ("tls_port",), False,
        "A TLS listener on the listen host and this port, beside the plain one; null: none. "
        "Needs tls.cert_file and tls.key_file.",
        show=lambda vs: "null" if vs[0] is None else str(vs[0])),
    Key("tls.only", boolean, ("tls_only",), False,
        "true: no plain listener, clients connect with TLS only (tls.port; listen's host), as "
        "Redis with port 0 and tls-port.", show=_show_bool),
    _file_key("tls.cert_file", "tls_cert_file",
        "The proxy's certificate (PEM, chain after it). Re-read on every SIGHUP, changed or "
        "not: new handshakes use the new certificate, open connections keep theirs."),
    _file_key("tls.key_file", "tls_key_file",
        "The certificate's private key (PEM, not encrypted)."),
    _file_key("tls.ca_file", "tls_ca_file",
        "CA certificates that sign the clients' certificates (tls.auth_clients)."),
    Key("tls.auth_clients", _auth_clients, ("tls_auth_clients",), True,
        "As Redis' tls-auth-clients: yes: a client certificate signed by tls.ca_file is "
        "required; optional: checked when sent; no: not asked for.",
        show=lambda vs: f'"{vs[0]}"'),
    Key("tls.protocols", optional(_protocols), ("tls_protocols",), True,
        'TLS versions allowed, as Redis\' tls-protocols: "TLSv1.2 TLSv1.3"; null: '
        "OpenSSL's defaults.", convert=lambda v: (v or (),),
        show=lambda vs: f'"{" ".join(vs[0])}"' if vs[0] else "null"),
    Key("tls.ciphers", optional(text("an OpenSSL cipher list")), ("tls_ciphers",), True,
        "TLS 1.2 ciphers (OpenSSL syntax, as Redis' tls-ciphers); null: OpenSSL's defaults. "
        "TLS 1.3 suites are always OpenSSL's defaults.", show=_show_text),
)
BACKEND_TLS_KEYS: tuple[Key, ...] = (
    Key("backend.tls", boolean, ("backend_tls",), True,
        "Every node connection the proxy opens (data, topology, pub/sub, transactions, health "
        "checks) uses TLS (nodes with tls-port, tls-cluster yes). Applies to connections "
        "opened after a reload.", show=_show_bool),
    _file_key("backend.tls_ca_file", "backend_tls_ca_file",
        "CA certificates that sign the nodes' certificates; null: the system's."),
    _file_key("backend.tls_cert_file", "backend_tls_cert_file",
        "Client certificate the proxy presents to the nodes (their tls-auth-clients); null: "
        "none. Re-read on every SIGHUP."),
    _file_key("backend.tls_key_file", "backend_tls_key_file",
        "Its private key; null: in backend.tls_cert_file."),
    Key("backend.tls_verify", choice(*tls.VERIFY), ("backend_tls_verify",), True,
        "full: the node's certificate must chain to the CA and name the node "
        "(backend.tls_server_name, else the host of its address); ca: the chain only; none: "
        "not checked (tests only)."),
    Key("backend.tls_server_name", optional(text("a host name")), ("backend_tls_server_name",),
        True, "The name the nodes' certificates must hold (when they share one); null: each "
        "node's own host.", show=_show_text),
)
_AFTER = [k.path for k in SCHEMA].index("backend.node_auth") + 1  # (one backend section)
SCHEMA = SCHEMA[:_AFTER] + BACKEND_TLS_KEYS + SCHEMA[_AFTER:] + TLS_KEYS
# -- replica reads and durable writes (proxy/front/readwrite.py) ------------------------------
POLICY_KEYS: tuple[Key, ...] = (
    Key("reads.read_from", choice(*READ_POLICIES), ("read_from",), True,
        "Where read-only commands go: master, prefer-master (a replica when the master's "
        "checks fail), replica / prefer-replica (a healthy replica, else the master), nearest "
        "(lowest measured round trip). A reload applies to connected clients too."),
    _ms_key("reads.max_replica_lag", duration_s(0.001), "max_replica_lag_ms", True,
            "A replica further behind its master than this (seconds) serves no reads."),
    Key("reads.read_your_writes", boolean, ("read_your_writes",), True,
        "A client's reads go to a replica only once it has the client's own last write to "
        "that shard (docs/PROXY.md, Replica reads).", show=_show_bool),
    _ms_key("reads.check_interval", duration_s(0.01), "replica_check_interval_ms", True,
            "How often every node's ROLE is read (health, offsets, round trip)."),
    Key("writes.durable_writes", integer(0, 1000), ("durable_writes",), True,
        "N > 0: each write is answered once N replicas acknowledged it (WAIT N, batched); "
        "0: off."),
    _ms_key("writes.durable_timeout", duration_s(0.001), "durable_timeout_ms", True,
            "WAIT's timeout: a write not acknowledged by enough replicas within it gets an "
            "error naming how many did."),
)

# Per user and per listener: the same three keys, each overriding only what it names.
_POLICY_CHECKS: dict[str, Callable[[object], Any]] = {
    "read_from": choice(*READ_POLICIES), "read_your_writes": boolean,
    "durable_writes": integer(0, 1000)}


def policy(raw: object) -> dict[str, Any]:
    """``{read_from: replica, read_your_writes: true, durable_writes: 1}`` (any of them)."""
    if not isinstance(raw, dict) or not raw:
        raise _Bad("expected a mapping of some of " + ", ".join(_POLICY_CHECKS)
                   + f", got {_show(raw)}")
    out: dict[str, Any] = {}
    for name, value in raw.items():
        check = _POLICY_CHECKS.get(name) if isinstance(name, str) else None
        if check is None:
            raise _Bad(f"{name}: unknown; expected one of {', '.join(_POLICY_CHECKS)}")
        try:
            out[name] = check(value)
        except _Bad as exc:
            raise _Bad(f"{name}: {exc}") from None
    return out


def user_policies(raw: object) -> dict[str, dict[str, Any]]:
    """``{alice: {read_from: replica}, bob: {durable_writes: 1}}``."""
    if not isinstance(raw, dict):
        raise _Bad(f"expected a mapping of user names to policies, got {_show(raw)}")
    out: dict[str, dict[str, Any]] = {}
    for user, p in raw.items():
        try:
            out[USERNAME(user)] = policy(p)
        except _Bad as exc:
            raise _Bad(f"{user}: {exc}") from None
    return out


def _show_policy(p: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k}: {str(v).lower()}" for k, v in p.items()) + "}"


POLICY_KEYS += (
    Key("policies.users", user_policies, ("policy_users",), True,
        "Per user of the auth section: {alice: {read_from: replica, read_your_writes: true, "
        "durable_writes: 1}}; each names only what differs from reads.* / writes.* (and "
        "policies.tls_listener). Taken at login (AUTH, HELLO AUTH) and, on reload, by "
        "connected clients.", show=lambda vs: "{" + ", ".join(
            f"{u}: {_show_policy(p)}" for u, p in vs[0].items()) + "}"),
    Key("policies.tls_listener", optional(policy), ("policy_tls",), True,
        "The TLS listener's clients (tls.port): {read_from: ..., read_your_writes: ..., "
        "durable_writes: ...}, overriding reads.* / writes.*; a user's policy overrides it; "
        "null: none.", convert=lambda v: (v or {},),
        show=lambda vs: _show_policy(vs[0]) if vs[0] else "null"),
)
SCHEMA += POLICY_KEYS

KEYS: dict[str, Key] = {k.path: k for k in SCHEMA}
SECTIONS = frozenset(k.path.rpartition(".")[0] for k in SCHEMA if "." in k.path)
# Pairs whose values must be ordered: (lower key, upper key).
ORDERED = (
    ("backend.reconnect_backoff_min", "backend.reconnect_backoff_max"),
    ("retry.backoff_min", "retry.backoff_max"),
)
# (key, key it needs): setting the first without the second is an error.
REQUIRES = (("backend.username", "backend.password"), ("tls.port", "tls.cert_file"),
            ("tls.port", "tls.key_file"), ("backend.tls_key_file", "backend.tls_cert_file"))
# Fields that live on Config itself rather than on ProxySettings.
CONFIG_FIELDS = frozenset({"metrics_listen", "log_level", "workers"})


@dataclass(frozen=True)
class Config:
    """Everything the proxy process runs with: the core's settings plus process-level knobs."""

    proxy: ProxySettings
    metrics_listen: tuple[str, int] | None = None
    log_level: str = "info"
    workers: int = 1

    def value(self, field: str) -> Any:
        return getattr(self if field in CONFIG_FIELDS else self.proxy, field)


# -- YAML reading -------------------------------------------------------------------------

class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (PyYAML keeps the last)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[object, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)  # type: ignore[no-untyped-call]
        line = key_node.start_mark.line + 1
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} given twice (lines {seen[key]} and {line})",
                key_node.start_mark)
        seen[key] = line
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


# What PyYAML's constructors raise besides YAMLError, and a nesting too deep to build.
_YAML_VALUE_ERRORS = (ValueError, IndexError, TypeError, OverflowError, RecursionError)


def read_yaml(path: Path) -> tuple[dict[str, object], list[str]]:
    """The file's keys flattened to dotted paths -> raw values, and the unknown-key problems.

    Raises ConfigError when the file cannot be read or is not YAML.
    """
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read: {exc.strerror or exc}"]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError([f"{path}: not UTF-8 text (byte {exc.start})"]) from None
    try:
        doc = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except _YAML_VALUE_ERRORS as exc:  # a tagged value PyYAML cannot build ("!!float" alone)
        raise ConfigError([f"{path}: invalid YAML: {type(exc).__name__}: {exc}"]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([f"{path}: invalid YAML{where}: {what}"]) from None
    if doc is None:
        return {}, []
    if not isinstance(doc, dict):
        raise ConfigError([f"{path}: expected a mapping of keys at the top level, got {_show(doc)}"])
    flat: dict[str, object] = {}
    problems: list[str] = []
    _flatten(doc, "", flat, problems)
    return flat, problems


def _flatten(doc: Mapping[object, object], prefix: str, out: dict[str, object], problems: list[str]) -> None:
    for raw_key, value in doc.items():
        path = f"{prefix}{raw_key}"
        if not isinstance(raw_key, str):
            problems.append(f"{path}: keys must be strings")
        elif path in KEYS:
            out[path] = value
        elif path in SECTIONS:
            if isinstance(value, dict):
                _flatten(value, path + ".", out, problems)
            elif value is not None:  # an empty section ("backend:") is fine
                problems.append(f"{path}: expected a section of keys, got {_show(value)}")
        else:
            problems.append(f"{path}: unknown key{_suggest(path)}")


def _suggest(path: str) -> str:
    near = difflib.get_close_matches(path, [*KEYS, *SECTIONS], n=1, cutoff=0.6)
    return f' (did you mean "{near[0]}"?)' if near else ""


# -- building a Config ----------------------------------------------------------------------

def build(
    raw: Mapping[str, object],
    names: Mapping[str, str] | None = None,
    problems: list[str] | None = None,
) -> Config:
    """Validate dotted-path -> raw values and build a Config; unset keys keep the defaults.

    ``names`` maps a path to the name shown in errors (a flag like ``--listen`` when the value
    came from the command line). ``problems`` already found (unknown keys) are reported along
    with the values' problems. Raises ConfigError listing every problem.
    """
    names = names or {}
    problems = list(problems or [])
    typed: dict[str, Any] = {}
    for path, value in raw.items():
        key = KEYS.get(path)
        if key is None:
            problems.append(f"{names.get(path, path)}: unknown key{_suggest(path)}")
            continue
        try:
            typed[path] = key.check(value)
        except _Bad as exc:
            problems.append(f"{names.get(path, path)}: {exc}")
    if "seeds" not in raw:
        problems.append("seeds: at least one seed node is required (in the file or with --seed)")
    for path, needed in REQUIRES:
        if typed.get(path) is not None and typed.get(needed) is None:
            problems.append(f"{names.get(path, path)}: needs {needed} too")
    if problems:
        raise ConfigError(problems)

    proxy_fields: dict[str, Any] = {}
    own: dict[str, Any] = {}
    for path, value in typed.items():
        key = KEYS[path]
        for f, v in zip(key.fields, key.convert(value), strict=True):
            (own if f in CONFIG_FIELDS else proxy_fields)[f] = v
    settings = ProxySettings(**proxy_fields)
    # Cross-field ordering in the defaults' units (a file may set only one side of a pair).
    for lo, hi in ORDERED:
        lo_f, hi_f = KEYS[lo].fields[0], KEYS[hi].fields[0]
        if getattr(settings, lo_f) > getattr(settings, hi_f):
            problems.append(f"{names.get(lo, lo)}: must not be larger than {names.get(hi, hi)} "
                            f"({getattr(settings, lo_f)}ms > {getattr(settings, hi_f)}ms)")
    try:
        settings.validate()
    except ValueError as exc:  # the core's own checks; ours should have caught everything
        problems.append(str(exc))
    problems += tls.problems(settings)  # the files: readable, a certificate and its key
    if settings.tls_port == 0 and own.get("workers", 1) > 1:
        problems.append("tls.port: 0 (any free port) cannot be shared by workers; give a port")
    if problems:
        raise ConfigError(problems)
    return Config(proxy=settings, **own)


def load(path: Path | None, overrides: Mapping[str, object] = {}, names: Mapping[str, str] = {}) -> Config:  # noqa: B006 - read-only
    """The file (if any) with ``overrides`` (dotted path -> raw value) on top. Raises ConfigError."""
    raw, problems = read_yaml(path) if path is not None else ({}, [])
    raw.update(overrides)
    return build(raw, names, problems)


# -- command line ---------------------------------------------------------------------------

# Flag -> the key it overrides (flags win over the file).
FLAG_KEYS = {"listen": "listen", "seed": "seeds", "metrics": "metrics.listen", "log_level": "log_level",
             "workers": "workers"}


def _whole_or_text(text: str) -> int | str:
    """``--workers``: digits become a number; anything else stays text for the key's check to
    report (so a bad flag gets the same message as a bad file value)."""
    return int(text) if text.isdigit() else text


def arg_parser(prog: str = "slotgate-proxy") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="slotgate proxy: one plain Redis endpoint in front of a Redis Cluster.",
        epilog="Flags override the file. SIGHUP re-reads the file (and these flags) and applies "
               "what can change without dropping clients. Keys: docs/CONFIG.md.",
    )
    p.add_argument("--config", metavar="FILE", type=Path, help="YAML configuration file")
    p.add_argument("--listen", metavar="HOST:PORT", help="address clients connect to")
    p.add_argument("--seed", metavar="HOST:PORT", action="append",
                   help="a cluster node to learn the topology from (repeatable)")
    p.add_argument("--metrics", metavar="HOST:PORT",
                   help="serve /metrics and /healthz on this address")
    p.add_argument("--log-level", dest="log_level", metavar="LEVEL",
                   help="one of " + ", ".join(LOG_LEVELS))
    p.add_argument("--workers", metavar="N", type=_whole_or_text,
                   help="proxy processes sharing the listen address (1 to 64; default 1)")
    # Internal: set by the supervisor on the processes it starts ("INDEX/COUNT/FD").
    p.add_argument("--worker", dest="worker_role", help=argparse.SUPPRESS)
    p.add_argument("--check-config", action="store_true",
                   help="validate the configuration, print it and exit (0: valid, 2: invalid)")
    p.add_argument("--check-health", metavar="URL",
                   help="probe a running proxy's /healthz (exit 0 when healthy, 1 otherwise) and "
                        "exit; for container health checks")
    return p


def config_from_args(ns: argparse.Namespace) -> Config:
    """File named by ``--config`` plus the flags given. Raises ConfigError."""
    overrides: dict[str, object] = {}
    names: dict[str, str] = {}
    for attr, path in FLAG_KEYS.items():
        value = getattr(ns, attr, None)
        if value is not None:
            overrides[path] = value
            names[path] = "--" + attr.replace("_", "-")
    return load(ns.config, overrides, names)


def describe(config: Config) -> str:
    """The effective configuration as ``key: value`` lines in the file's syntax."""
    return "\n".join(f"{k.path}: {k.show(tuple(config.value(f) for f in k.fields))}" for k in SCHEMA)


EXAMPLE_HEADER = """\
# slotgate proxy configuration: every key, set to its default.
#
#   slotgate-proxy --config config.example.yaml
#   slotgate-proxy --config config.example.yaml --check-config   # validate, print, exit
#
# Durations are strings with a unit: "250ms", "2s", "1.5s", "1m" (a bare number is an error).
# Sizes are whole numbers of bytes. Unknown keys are errors. Flags (--listen, --seed,
# --metrics, --log-level, --workers) override this file. On SIGHUP the proxy re-reads the file
# and applies every key marked [reload] without dropping clients; keys marked [restart] keep
# their running value until the proxy restarts (a warning says so). Reference: docs/CONFIG.md.
# (Generated by proxy.config.example_yaml().)
"""
EXAMPLE_SEEDS = ("127.0.0.1", 7000)


def example_yaml() -> str:
    """config.example.yaml: every key with its doc and the code's default."""
    defaults = Config(proxy=ProxySettings(seeds=[EXAMPLE_SEEDS]))
    out = [EXAMPLE_HEADER.rstrip("\n")]
    section = None
    for key in SCHEMA:
        sec, _, name = key.path.rpartition(".")
        if sec != section:
            out.append("")
            if sec:
                out.append(f"{sec}:")
            section = sec
        indent = "  " if sec else ""
        tag = "[reload]" if key.reload else "[restart]"
        doc = key.doc + (" Required: no default." if key.path == "seeds" else "")
        out += [f"{indent}# {line}" for line in textwrap.wrap(f"{tag} {doc}", 96 - len(indent))]
        out.append(f"{indent}{name}: {key.show(tuple(defaults.value(f) for f in key.fields))}")
    return "\n".join(out) + "\n"


def default_text(key: Key) -> str:
    """The key's default in the file's syntax (``required`` for seeds)."""
    if key.path == "seeds":
        return "required"
    defaults = Config(proxy=ProxySettings())
    return key.show(tuple(defaults.value(f) for f in key.fields))


# -- reload -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class ReloadPlan:
    config: Config  # what to run with now: new values, except restart-only keys keep the old
    changed: list[str]  # keys whose new value takes effect now
    needs_restart: list[str]  # keys that changed but only take effect after a restart


def plan_reload(old: Config, new: Config) -> ReloadPlan:
    changed, needs_restart = [], []
    proxy_keep: dict[str, Any] = {}
    own_keep: dict[str, Any] = {}
    for key in SCHEMA:
        if all(old.value(f) == new.value(f) for f in key.fields):
            continue
        if key.reload:
            changed.append(key.path)
            continue
        needs_restart.append(key.path)
        for f in key.fields:
            (own_keep if f in CONFIG_FIELDS else proxy_keep)[f] = old.value(f)
    proxy = dataclasses.replace(new.proxy, **proxy_keep)
    return ReloadPlan(dataclasses.replace(new, proxy=proxy, **own_keep), changed, needs_restart)


def set_log_level(level: str) -> None:
    logging.getLogger().setLevel(level.upper())


async def reload_on_sighup(
    ns: argparse.Namespace,
    current: Config,
    apply: Callable[[Config], None],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """On every SIGHUP: re-read the file and flags, and ``apply`` what may change live.

    A configuration with errors is refused as a whole and the running one stays; the errors
    are logged. Keys that need a restart keep their running value, with a warning. Runs until
    cancelled.
    """
    with trio.open_signal_receiver(signal.SIGHUP) as signals:
        task_status.started()
        async for _ in signals:
            try:
                new = config_from_args(ns)
            except ConfigError as exc:
                log.error("reload refused; still running the previous configuration:\n%s", exc)
                continue
            plan = plan_reload(current, new)
            for path in plan.needs_restart:
                log.warning("reload: %s changed; it takes effect after a restart", path)
            apply(plan.config)
            current = plan.config
            log.info("reload: applied %s", ", ".join(plan.changed) if plan.changed else "no changes")
