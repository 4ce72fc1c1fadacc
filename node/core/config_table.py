"""The redis.conf directives of Redis 7.0 that the node accepts and keeps but that do not change
what it does (TLS, active defrag, CPU affinity, OOM score, syslog, fsync tuning, ...), plus the
value checks of the directives whose values are not a plain int/memory/enum/bool/string.

Rows are ``(name, kind, default, lo, hi, choices, mutable)`` as ``config.Directive`` takes them;
``config.py`` appends every row whose name it does not already define, so a directive defined
there with a real effect wins over the row here. docs/COMPATIBILITY.md lists ``NO_EFFECT``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

_LL = 2**63 - 1
_INT = 2**31 - 1
_UINT = 2**32 - 1

Row = tuple[str, str, Any, int, int, tuple[str, ...], bool]


def _r(name: str, kind: str, default: Any, lo: int = 0, hi: int = _LL,
       choices: tuple[str, ...] = (), mutable: bool = True) -> Row:
    return (name, kind, default, lo, hi, choices, mutable)


_YN = ("no", "yes")

EXTRA_ROWS: list[Row] = [
    # active defragmentation (the node has no allocator to defragment)
    _r("activedefrag", "bool", False),
    _r("active-defrag-cycle-min", "int", 1, 1, 99),
    _r("active-defrag-cycle-max", "int", 25, 1, 99),
    _r("active-defrag-ignore-bytes", "memory", 100 * 1024 * 1024, 1, _LL),
    _r("active-defrag-max-scan-fields", "int", 1000, 1, _LL),
    _r("active-defrag-threshold-lower", "int", 10, 0, 1000),
    _r("active-defrag-threshold-upper", "int", 100, 0, 1000),
    _r("jemalloc-bg-thread", "bool", True),
    # process and OS
    _r("server_cpulist", "string", "", mutable=False),
    _r("bio_cpulist", "string", "", mutable=False),
    _r("aof_rewrite_cpulist", "string", "", mutable=False),
    _r("bgsave_cpulist", "string", "", mutable=False),
    _r("oom-score-adj", "enum", "no", choices=("no", "yes", "relative", "absolute")),
    _r("oom-score-adj-values", "oomvalues", "0 200 800"),
    _r("disable-thp", "bool", True, mutable=False),
    _r("crash-log-enabled", "bool", True),
    _r("crash-memcheck-enabled", "bool", True),
    _r("ignore-warnings", "string", ""),
    _r("proc-title-template", "proctitle", "{title} {listen-addr} {server-mode}"),
    _r("socket-mark-id", "int", 0, 0, _UINT, mutable=False),
    _r("bind-source-addr", "string", ""),
    _r("syslog-ident", "string", "redis", mutable=False),
    _r("syslog-facility", "enum", "local0", choices=(
        "user", "local0", "local1", "local2", "local3", "local4", "local5", "local6", "local7"),
       mutable=False),
    # persistence and replication tuning
    _r("aof-rewrite-incremental-fsync", "bool", True),
    _r("rdb-save-incremental-fsync", "bool", True),
    _r("aof-disable-auto-gc", "bool", False),
    _r("rdb-del-sync-files", "bool", False),
    _r("repl-diskless-sync-max-replicas", "int", 0, 0, _INT),
    _r("replica-ignore-disk-write-errors", "bool", False),
    _r("propagation-error-behavior", "enum", "ignore",
       choices=("ignore", "panic", "panic-on-replicas")),
    _r("sanitize-dump-payload", "enum", "no", choices=("no", "yes", "clients")),
    # TLS (the node speaks plain TCP only)
    *(_r("tls-" + name, "string", "") for name in (
        "cert-file", "key-file", "key-file-pass", "client-cert-file", "client-key-file",
        "client-key-file-pass", "dh-params-file", "ca-cert-file", "ca-cert-dir", "protocols",
        "ciphers", "ciphersuites")),
    _r("tls-auth-clients", "enum", "yes", choices=("no", "yes", "optional")),
    _r("tls-cluster", "bool", False),
    _r("tls-replication", "bool", False),
    _r("tls-prefer-server-ciphers", "bool", False),
    _r("tls-session-caching", "bool", True),
    _r("tls-session-cache-size", "int", 20480, 0, _INT),
    _r("tls-session-cache-timeout", "int", 300, 0, _INT),
    # latency tracking (INFO latencystats)
    _r("latency-tracking-info-percentiles", "percentiles", "50 99 99.9"),
    # memory policy and client tracking knobs (defined in config.py where they take effect)
    _r("lfu-log-factor", "int", 10, 0, _INT),
    _r("lfu-decay-time", "int", 1, 0, _INT),
    _r("maxmemory-eviction-tenacity", "int", 10, 0, 100),
    _r("tracking-table-max-keys", "int", 1000000, 0, _LL),
]

# Directives accepted and reported that change nothing on the node (docs/COMPATIBILITY.md).
NO_EFFECT: tuple[str, ...] = tuple(
    r[0] for r in EXTRA_ROWS
    if r[0] not in ("latency-tracking-info-percentiles", "lfu-log-factor", "lfu-decay-time",
                    "maxmemory-eviction-tenacity", "tracking-table-max-keys"))

# CONFIG SET values refused although well formed: (directive, value) -> reason (Redis' text
# for a server built without jemalloc's defragmentation support, as the node is).
SET_REFUSED: dict[tuple[str, Any], str] = {
    ("activedefrag", True): (
        "Active defragmentation cannot be enabled: it requires a Redis server compiled with a "
        "modified Jemalloc like the one shipped by default with the Redis source distribution"),
}

# Kinds whose value spans several words in a config file line (joined by spaces).
MULTI_ARG_KINDS = frozenset({"save", "bind", "oblimit", "oomvalues", "percentiles"})

_PERCENTILE_RE = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_BAD_PERCENTILES = "Invalid latency-tracking-info-percentiles parameters"
_PERCENTILE_RANGE = "latency-tracking-info-percentiles parameters should sit between [0.0,100.0]"


def format_percentile(p: float) -> str:
    """A percentile as Redis prints it: ``%f`` without trailing zeros."""
    return f"{p:f}".rstrip("0").rstrip(".")


def _percentiles(text: str) -> str:
    if text == "":
        return ""
    out = []
    for word in text.split(" "):
        if not _PERCENTILE_RE.fullmatch(word):
            raise ValueError(_BAD_PERCENTILES)
        p = float(word)
        if not 0.0 <= p <= 100.0:
            raise ValueError(_PERCENTILE_RANGE)
        out.append(format_percentile(p))
    return " ".join(out)


def parse_percentiles(text: str) -> list[float]:
    return [float(w) for w in text.split()]


def _oomvalues(text: str) -> str:
    words = text.split()
    if len(words) != 3:
        raise ValueError("wrong number of arguments")
    out = []
    for w in words:
        if not re.fullmatch(r"-?\d+", w) or not -2000 <= int(w) <= 2000:
            raise ValueError("Invalid oom-score-adj-values, elements must be between -2000 and 2000.")
        out.append(str(int(w)))
    return " ".join(out)


# proc-title-template variables and what they expand to when the template is checked (Redis
# expands it with an empty title and refuses a template that expands to nothing).
_TITLE_VARS = {"title": "", "listen-addr": "*:0", "server-mode": "", "port": "0",
               "tls-port": "0", "unixsocket": "", "config-file": "x"}
_BAD_TEMPLATE = "template format is invalid or contains unknown variables"


def _proctitle(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "{" and text.startswith("{{", i):
            out.append("{")
            i += 2
        elif ch == "}" and text.startswith("}}", i):
            out.append("}")
            i += 2
        elif ch == "{":
            end = text.find("}", i + 1)
            if end < 0 or text[i + 1:end] not in _TITLE_VARS:
                raise ValueError(_BAD_TEMPLATE)
            out.append(_TITLE_VARS[text[i + 1:end]])
            i = end + 1
        else:
            out.append(ch)
            i += 1
    if not "".join(out).strip(" "):
        raise ValueError(_BAD_TEMPLATE)
    return text


# kind -> check: the text (words joined by spaces) -> the value kept; ValueError(reason)
SPECIAL_KINDS: dict[str, Callable[[str], str]] = {
    "percentiles": _percentiles,
    "oomvalues": _oomvalues,
    "proctitle": _proctitle,
}
