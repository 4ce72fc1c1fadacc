"""redis.conf directives: parsing (file + ``--directive value`` args), validation, CONFIG GET/SET.

Each directive is one row of ``DIRECTIVES``: kind, default, bounds/choices, whether CONFIG SET
may change it. Error texts are Redis 7.0's (start-up errors print the FATAL CONFIG FILE ERROR
block and stop; CONFIG SET answers ``ERR CONFIG SET failed (possibly related to argument
'x') - <why>``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from slotgate.node.core.config_table import EXTRA_ROWS, MULTI_ARG_KINDS, SET_REFUSED, SPECIAL_KINDS
from slotgate.node.core.glob import glob_match
from slotgate.protocol.acl_lines import check_user_line
from slotgate.protocol.commands import command_list
from slotgate.protocol.resp import split_args
from slotgate.protocol.sdsrepr import sds_repr

REDIS_VERSION = "7.0.15"
# ``loglevel``'s four levels as logging levels: Redis' verbose sits between debug and notice
LOG_VERBOSE = 15
LOG_LEVELS = {"debug": 10, "verbose": LOG_VERBOSE, "notice": 20, "warning": 30}


class ConfigError(Exception):
    """A bad directive or value; ``str(e)`` is Redis' reason text."""


@dataclass(frozen=True)
class Directive:
    name: str
    kind: str  # bool int memory enum string save bind oblimit
    default: Any
    lo: int = 0
    hi: int = 2**63 - 1
    choices: tuple[str, ...] = ()
    mutable: bool = True
    alias_of: str | None = None


_HIDDEN = frozenset({"key-load-delay", "rdb-key-save-delay",
                     "loading-process-events-interval-bytes"})


def _d(name: str, kind: str, default: Any, lo: int = 0, hi: int = 2**63 - 1,
       choices: tuple[str, ...] = (), mutable: bool = True) -> Directive:
    return Directive(name, kind, default, lo, hi, choices, mutable)


_LL = 2**63 - 1
_UINT = 2**32 - 1
_TABLE = [
    # network / clients
    _d("port", "int", 6379, 0, 65535),
    _d("bind", "bind", "* -::*"),
    _d("protected-mode", "bool", True),
    _d("tcp-backlog", "int", 511, 0, 2**31 - 1, mutable=False),
    _d("tcp-keepalive", "int", 300, 0, 2**31 - 1),
    _d("timeout", "int", 0, 0, 2**31 - 1),
    _d("maxclients", "int", 10000, 1, _UINT),
    _d("client-query-buffer-limit", "memory", 1 << 30, 1024 * 1024, _LL),
    _d("proto-max-bulk-len", "memory", 512 * 1024 * 1024, 1024 * 1024, _LL),
    _d("client-output-buffer-limit", "oblimit",
       "normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60"),
    _d("requirepass", "string", ""),
    _d("aclfile", "string", "", mutable=False),
    _d("acllog-max-len", "int", 128, 0, _LL),
    _d("acl-pubsub-default", "enum", "resetchannels", choices=("allchannels", "resetchannels")),
    _d("masterauth", "string", ""),
    _d("masteruser", "string", ""),
    _d("unixsocket", "string", "", mutable=False),
    _d("unixsocketperm", "octal", 0, 0, 0o777, mutable=False),
    _d("tls-port", "int", 0, 0, 65535),
    # general
    _d("daemonize", "bool", False, mutable=False),
    _d("supervised", "enum", "no", choices=("upstart", "systemd", "auto", "no"), mutable=False),
    _d("pidfile", "string", "", mutable=False),
    _d("loglevel", "enum", "notice", choices=("debug", "verbose", "notice", "warning")),
    _d("logfile", "string", "", mutable=False),
    _d("syslog-enabled", "bool", False, mutable=False),
    _d("databases", "int", 16, 1, 2**31 - 1, mutable=False),
    _d("always-show-logo", "bool", False, mutable=False),
    _d("set-proc-title", "bool", True, mutable=False),
    _d("tracking-table-max-keys", "int", 1000000, 0, 2**63 - 1),
    _d("hz", "int", 10, 0, 2**31 - 1),
    _d("dynamic-hz", "bool", True),
    _d("enable-debug-command", "enum", "no", choices=("no", "yes", "local"), mutable=False),
    _d("enable-protected-configs", "enum", "no", choices=("no", "yes", "local"), mutable=False),
    _d("enable-module-command", "enum", "no", choices=("no", "yes", "local"), mutable=False),
    _d("notify-keyspace-events", "string", ""),
    _d("slowlog-log-slower-than", "int", 10000, -1, _LL),
    _d("slowlog-max-len", "int", 128, 0, _LL),
    _d("latency-monitor-threshold", "int", 0, 0, _LL),
    _d("latency-tracking", "bool", True),
    _d("busy-reply-threshold", "int", 5000, 0, _LL),
    _d("shutdown-timeout", "int", 10, 0, 2**31 - 1),
    _d("shutdown-on-sigint", "string", "default"),
    _d("shutdown-on-sigterm", "string", "default"),
    _d("active-expire-effort", "int", 1, 1, 10),
    _d("activerehashing", "bool", True),
    _d("lazyfree-lazy-eviction", "bool", False),
    _d("lazyfree-lazy-expire", "bool", False),
    _d("lazyfree-lazy-server-del", "bool", False),
    _d("lazyfree-lazy-user-del", "bool", False),
    _d("lazyfree-lazy-user-flush", "bool", False),
    _d("io-threads", "int", 1, 1, 128, mutable=False),
    _d("io-threads-do-reads", "bool", False, mutable=False),
    # memory
    _d("maxmemory", "memory", 0, 0, _LL),
    _d("maxmemory-policy", "enum", "noeviction", choices=(
        "volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl", "allkeys-lru",
        "allkeys-lfu", "allkeys-random", "noeviction")),
    _d("maxmemory-samples", "int", 5, 1, 64),
    _d("maxmemory-clients", "mempct", 0, 0, _LL),  # < 0: -percent of maxmemory
    _d("hash-max-listpack-entries", "int", 512, 0, _LL),
    _d("hash-max-listpack-value", "memory", 64, 0, _LL),
    _d("list-max-listpack-size", "int", -2, -2**31, 2**31 - 1),
    _d("list-compress-depth", "int", 0, 0, 2**31 - 1),
    _d("set-max-intset-entries", "int", 512, 0, _LL),
    _d("zset-max-listpack-entries", "int", 128, 0, _LL),
    _d("zset-max-listpack-value", "memory", 64, 0, _LL),
    _d("hll-sparse-max-bytes", "memory", 3000, 0, _LL),
    _d("stream-node-max-bytes", "memory", 4096, 0, _LL),
    _d("stream-node-max-entries", "int", 100, 0, _LL),
    # persistence
    _d("dir", "dir", "."),
    _d("dbfilename", "string", "dump.rdb"),
    _d("save", "save", "3600 1 300 100 60 10000"),
    _d("stop-writes-on-bgsave-error", "bool", True),
    _d("rdbcompression", "bool", True),
    _d("rdbchecksum", "bool", True),
    _d("appendonly", "bool", False),
    _d("appendfilename", "string", "appendonly.aof", mutable=False),
    _d("appenddirname", "string", "appendonlydir", mutable=False),
    _d("appendfsync", "enum", "everysec", choices=("everysec", "always", "no")),
    _d("no-appendfsync-on-rewrite", "bool", False),
    _d("auto-aof-rewrite-percentage", "int", 100, 0, 2**31 - 1),
    _d("auto-aof-rewrite-min-size", "memory", 64 * 1024 * 1024, 0, _LL),
    _d("aof-load-truncated", "bool", True),
    _d("aof-use-rdb-preamble", "bool", True),
    _d("aof-timestamp-enabled", "bool", False),
    # replication
    _d("replicaof", "string", "", mutable=False),
    _d("repl-backlog-size", "memory", 1024 * 1024, 1, _LL),
    _d("repl-backlog-ttl", "int", 3600, 0, 2**31 - 1),
    _d("repl-timeout", "int", 60, 1, 2**31 - 1),
    _d("repl-ping-replica-period", "int", 10, 1, 2**31 - 1),
    _d("repl-diskless-sync", "bool", True),
    _d("repl-diskless-sync-delay", "int", 5, 0, 2**31 - 1),
    _d("repl-diskless-load", "enum", "disabled", choices=("disabled", "on-empty-db", "swapdb")),
    _d("repl-disable-tcp-nodelay", "bool", False),
    # loading and saving, slowed for tests (microseconds per key; Redis' hidden configs)
    _d("key-load-delay", "int", 0, -2**31, 2**31 - 1),
    _d("rdb-key-save-delay", "int", 0, -2**31, 2**31 - 1),
    _d("loading-process-events-interval-bytes", "int", 2 * 1024 * 1024, 1024, 2**31 - 1),
    _d("replica-read-only", "bool", True),
    _d("replica-serve-stale-data", "bool", True),
    _d("replica-priority", "int", 100, 0, 2**31 - 1),
    _d("replica-announce-ip", "string", ""),
    _d("replica-announce-port", "int", 0, 0, 65535),
    _d("replica-announced", "bool", True),
    _d("replica-lazy-flush", "bool", False),
    _d("replica-ignore-maxmemory", "bool", True),
    _d("min-replicas-to-write", "int", 0, 0, 2**31 - 1),
    _d("min-replicas-max-lag", "int", 10, 0, 2**31 - 1),
    # cluster
    _d("cluster-enabled", "bool", False, mutable=False),
    _d("cluster-config-file", "string", "nodes.conf", mutable=False),
    _d("cluster-node-timeout", "int", 15000, 0, _LL),
    _d("cluster-port", "int", 0, 0, 65535, mutable=False),
    _d("cluster-announce-ip", "string", ""),
    _d("cluster-announce-port", "int", 0, 0, 65535),
    _d("cluster-announce-bus-port", "int", 0, 0, 65535),
    _d("cluster-announce-tls-port", "int", 0, 0, 65535),
    _d("cluster-announce-hostname", "string", ""),
    _d("cluster-replica-validity-factor", "int", 10, 0, 2**31 - 1),
    _d("cluster-require-full-coverage", "bool", True),
    _d("cluster-allow-reads-when-down", "bool", False),
    _d("cluster-allow-pubsubshard-when-down", "bool", True),
    _d("cluster-replica-no-failover", "bool", False),
    _d("cluster-migration-barrier", "int", 1, 0, 2**31 - 1),
    _d("cluster-allow-replica-migration", "bool", True),
    _d("cluster-preferred-endpoint-type", "enum", "ip", choices=("ip", "hostname", "unknown-endpoint")),
    _d("cluster-link-sendbuf-limit", "memory", 0, 0, _LL),
]
_DEFINED_HERE = {d.name for d in _TABLE}
_TABLE += [Directive(*row) for row in EXTRA_ROWS if row[0] not in _DEFINED_HERE]

_ALIASES = {
    "slaveof": "replicaof", "slave-read-only": "replica-read-only",
    "slave-serve-stale-data": "replica-serve-stale-data", "slave-priority": "replica-priority",
    "slave-announce-ip": "replica-announce-ip", "slave-announce-port": "replica-announce-port",
    "slave-lazy-flush": "replica-lazy-flush", "slave-ignore-maxmemory": "replica-ignore-maxmemory",
    "repl-ping-slave-period": "repl-ping-replica-period", "min-slaves-to-write": "min-replicas-to-write",
    "min-slaves-max-lag": "min-replicas-max-lag",
    "cluster-slave-validity-factor": "cluster-replica-validity-factor",
    "cluster-slave-no-failover": "cluster-replica-no-failover",
    "hash-max-ziplist-entries": "hash-max-listpack-entries",
    "hash-max-ziplist-value": "hash-max-listpack-value",
    "list-max-ziplist-size": "list-max-listpack-size",
    "zset-max-ziplist-entries": "zset-max-listpack-entries",
    "zset-max-ziplist-value": "zset-max-listpack-value",
    "lua-time-limit": "busy-reply-threshold",
}

DIRECTIVES: dict[str, Directive] = {d.name: d for d in _TABLE}

_MEM_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1024, "m": 1000**2, "mb": 1024**2,
              "g": 1000**3, "gb": 1024**3}
_MEM_RE = re.compile(r"^(-?\d+)([a-z]*)$")


def parse_memory(text: str) -> int:
    m = _MEM_RE.match(text.lower())
    if not m or m.group(2) not in _MEM_UNITS:
        raise ConfigError("argument must be a memory value")
    return int(m.group(1)) * _MEM_UNITS[m.group(2)]


def _parse_int(text: str) -> int:
    if not re.fullmatch(r"-?\d+", text):
        raise ConfigError("argument couldn't be parsed into an integer")
    return int(text)


def _check_range(d: Directive, n: int) -> int:
    if not d.lo <= n <= d.hi:
        raise ConfigError(f"argument must be between {d.lo} and {d.hi} inclusive")
    return n


def parse_value(d: Directive, args: Sequence[str]) -> Any:
    """Validate and convert ``args`` (already split) for directive ``d``."""
    text = " ".join(args)
    kind = d.kind
    if kind in SPECIAL_KINDS:
        try:
            return SPECIAL_KINDS[kind](text)
        except ValueError as e:
            raise ConfigError(str(e)) from None
    if kind == "bool":
        low = text.lower()
        if low not in ("yes", "no"):
            raise ConfigError("argument must be 'yes' or 'no'")
        return low == "yes"
    if kind == "int":
        return _check_range(d, _parse_int(text))
    if kind == "mempct":  # a memory value, or a percentage of maxmemory kept as -percent
        if re.fullmatch(r"\d+%", text):
            if int(text[:-1]) > 100:
                raise ConfigError("percentage argument must be less or equal to 100")
            return -int(text[:-1])
        try:
            return parse_value(Directive(d.name, "memory", 0, d.lo, d.hi), args)
        except ConfigError as e:
            if str(e) != "argument must be a memory value":
                raise
            raise ConfigError("argument must be a memory or percent value") from None
    if kind == "octal":
        if not re.fullmatch(r"[0-7]+", text):
            raise ConfigError("argument couldn't be parsed as an octal number")
        if int(text, 8) > d.hi:
            raise ConfigError(f"argument must be between {d.lo:o} and {d.hi:o} inclusive")
        return int(text, 8)
    if kind == "memory":
        if text.startswith("-"):  # memtoull: a memory value is never negative
            raise ConfigError("argument must be a memory value")
        n = parse_memory(text) if not re.fullmatch(r"\d+", text) else int(text)
        return _check_range(d, n)
    if kind == "enum":
        low = text.lower()
        if low not in d.choices:
            raise ConfigError(
                "argument(s) must be one of the following: " + ", ".join(d.choices))
        return low
    if kind == "save":
        parts = text.split()
        if len(parts) % 2:
            raise ConfigError("Invalid save parameters")
        for p in parts:
            if not p.isdigit():
                raise ConfigError("Invalid save parameters")
        return " ".join(parts)
    if kind == "bind":
        addrs = text.split()
        if not addrs or len(addrs) > 16:
            raise ConfigError("Too many bind addresses specified.")
        return " ".join(addrs)
    if kind == "oblimit":
        parts = text.split()
        if len(parts) % 4:
            raise ConfigError("Wrong number of arguments in buffer limit configuration.")
        for i in range(0, len(parts), 4):
            if parts[i].lower() not in ("normal", "slave", "replica", "pubsub"):
                raise ConfigError("Invalid client class specified in buffer limit configuration.")
            try:
                parse_memory(parts[i + 1])
                parse_memory(parts[i + 2])
            except ConfigError:
                raise ConfigError("Error in hard, soft or soft_seconds setting in buffer limit "
                                  "configuration.") from None
            if not parts[i + 3].isdigit():
                raise ConfigError("Error in hard, soft or soft_seconds setting in buffer limit "
                                  "configuration.")
        return text
    if kind == "dir":
        return text
    return text  # string


def format_value(d: Directive, value: Any) -> str:
    """The value as CONFIG GET shows it."""
    if d.kind == "bool":
        return "yes" if value else "no"
    if d.kind == "oblimit":
        return _normalize_oblimit(str(value))
    if d.kind == "octal":
        return f"{value:o}"
    if d.kind == "mempct" and value < 0:
        return f"{-value}%"
    if d.kind == "dir":  # the process works in ``dir``: Redis shows the absolute path
        return os.getcwd()
    return str(value)


def _normalize_oblimit(text: str) -> str:
    classes = {"normal": ["0", "0", "0"], "slave": ["268435456", "67108864", "60"],
               "pubsub": ["33554432", "8388608", "60"]}
    parts = text.split()
    for i in range(0, len(parts), 4):
        name = parts[i].lower()
        name = "slave" if name == "replica" else name
        classes[name] = [str(parse_memory(parts[i + 1])), str(parse_memory(parts[i + 2])),
                         parts[i + 3]]
    return " ".join(f"{k} {' '.join(v)}" for k, v in classes.items())


def oblimit_class(text: str, name: str) -> tuple[int, int, int]:
    """(hard bytes, soft bytes, soft seconds) of class ``name`` in a client-output-buffer-limit
    value (the class's default when the value does not name it); 0 = no limit."""
    parts = _normalize_oblimit(text).split()
    i = parts.index(name)
    return parse_memory(parts[i + 1]), parse_memory(parts[i + 2]), int(parts[i + 3])


def canonical(name: str) -> str | None:
    low = name.lower()
    low = _ALIASES.get(low, low)
    return low if low in DIRECTIVES else None


class Config:
    """Typed settings. Attribute access by python name (``cfg.cluster_enabled``) or ``get()``."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {d.name: d.default for d in _TABLE}
        self.values["save"] = ""  # set by the parser below when no save line is given
        self._saw_save = False
        self.config_file: str | None = None
        self.acl_users: list[list[bytes]] = []  # ``user`` lines: name, rules (node/commands/acl.py)
        # ``rename-command old new`` lines, in order (new b"": the command is removed)
        self.renamed_commands: list[tuple[bytes, bytes]] = []

    def __getattr__(self, attr: str) -> Any:
        try:
            return self.__dict__["values"][attr.replace("_", "-")]
        except KeyError:
            raise AttributeError(attr) from None

    def get(self, name: str) -> Any:
        return self.values[name]

    def apply(self, name: str, args: Sequence[str]) -> None:
        """Set ``name`` from its argument words; raises ConfigError with Redis' reason."""
        key = canonical(name)
        if key is None:
            raise ConfigError("Bad directive or wrong number of arguments")
        d = DIRECTIVES[key]
        if key == "replicaof" and len(args) == 2:  # "replicaof <host> <port>"
            args = [" ".join(args)]
        if d.kind not in MULTI_ARG_KINDS and len(args) != 1:
            raise ConfigError("wrong number of arguments")
        self.values[key] = self._merged(d, parse_value(d, args))

    def _merged(self, d: Directive, value: Any) -> Any:
        """client-output-buffer-limit sets the classes it names and keeps the others."""
        if d.kind != "oblimit":
            return value
        return _normalize_oblimit(f"{self.values.get(d.name, '')} {value}")

    def config_get(self, pat: bytes) -> list[tuple[str, str]]:
        """Directives and aliases whose name matches the glob ``pat`` (nocase, as Redis: the
        pattern is not lowered first, which matters for ranges such as ``[Z-a]``). A name
        without ``[*?`` is looked up directly and answered under the name as given."""
        if not any(ch in pat for ch in b"[*?"):
            try:
                name = pat.decode("ascii")
            except UnicodeDecodeError:
                return []
            key = canonical(name)
            return [] if key is None else [(name, format_value(DIRECTIVES[key], self.values[key]))]
        out = []
        for d in _TABLE:
            if d.name in _HIDDEN:  # Redis' HIDDEN_CONFIG: answered by exact name only
                continue
            if glob_match(pat, d.name.encode(), nocase=True):
                out.append((d.name, format_value(d, self.values[d.name])))
        for alias, target in _ALIASES.items():
            if glob_match(pat, alias.encode(), nocase=True):
                d = DIRECTIVES[target]
                out.append((alias, format_value(d, self.values[target])))
        return out

    def config_set(self, name: str, value: str) -> None:
        key = canonical(name)
        if key is None:
            raise KeyError(name)
        d = DIRECTIVES[key]
        if not d.mutable:
            raise ConfigError("can't set immutable config")
        args = [value] if d.kind not in ("save", "bind", "oblimit") else value.split()
        if d.kind in ("save", "bind", "oblimit"):
            self.values[key] = self._merged(d, parse_value(d, args) if args else "")
        else:
            self.values[key] = parse_value(d, [value])
        refused = SET_REFUSED.get((key, self.values[key]))
        if refused is not None:
            raise ConfigError(refused)
        if key == "hz":  # kept within 1..500, as Redis does
            self.values[key] = max(1, min(500, self.values[key]))

    def rewrite_lines(self, force_all: bool = False) -> list[str]:
        """Non-default settings (every setting with ``force_all``) as redis.conf lines (for
        CONFIG REWRITE and DEBUG CONFIG-REWRITE-FORCE-ALL)."""
        lines = []
        for d in _TABLE:
            v = self.values[d.name]
            if force_all or v != d.default:
                lines.append(f"{d.name} {_quote(format_value(d, v))}")
        return lines


def _quote(text: str) -> str:
    if text and re.fullmatch(r"[A-Za-z0-9_./:*@-]+( [A-Za-z0-9_./:*@-]+)*", text) and " " not in text:
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def fatal_message(line_no: int, line: str, reason: str) -> str:
    return (
        f"\n*** FATAL CONFIG FILE ERROR (Redis {REDIS_VERSION}) ***\n"
        f"Reading the configuration file, at line {line_no}\n"
        f">>> '{line}'\n{reason}\n"
    )


def _check_rename(done: list[tuple[bytes, bytes]], old: bytes, new: bytes) -> None:
    """Redis' checks of a ``rename-command`` line against the command table so far."""
    names = {n.lower() for n in command_list()}
    for a, b in done:
        names.discard(a)
        if b:
            names.add(b)
    if old.lower() not in names:
        raise ConfigError("No such command in rename-command")
    if new and new.lower() in names - {old.lower()}:
        raise ConfigError("Target command name already exists")


def load(argv: Sequence[str]) -> Config:
    """Build a Config from ``slotgate-node [config-file] [--directive value ...]``.

    Like redis-server, the options are appended to the file's text as lines
    (``\nname "arg" "arg"``) and everything is parsed as one config; an error raises
    ``ConfigError`` whose text is Redis' FATAL CONFIG FILE ERROR block.
    """

    cfg = Config()
    args = list(argv)
    content = ""
    if args and not args[0].startswith("--"):
        path = args.pop(0)
        cfg.config_file = os.path.abspath(path)
        try:
            with open(path, encoding="utf-8", errors="surrogateescape") as f:
                content = f.read()
        except OSError as e:
            raise ConfigError(f"Fatal error, can't open config file '{path}': {e.strerror}") from None
    options = ""
    for a in args:
        if a.startswith("--") and len(a) > 2:
            if options:
                options += "\n"
            options += a[2:] + " "
        else:
            options += sds_repr(a.encode("utf-8", "surrogateescape")) + " "
    text = content + "\n" + options if options else content
    saw_save = False
    cfg.values["save"] = DIRECTIVES["save"].default
    for idx, raw_line in enumerate(text.split("\n"), start=1):
        line = raw_line.strip(" \t\r\n")
        if not line or line.startswith("#"):
            continue
        words_b = split_args(line.encode("utf-8", "surrogateescape"))
        if words_b is None:
            raise ConfigError(fatal_message(idx, line, "Unbalanced quotes in configuration line"))
        if not words_b:
            continue
        words = [w.decode("utf-8", "surrogateescape") for w in words_b]
        name, vals = words[0], words[1:]
        try:
            if name.lower() == "user" and vals:
                try:
                    cfg.acl_users.append(check_user_line(
                        words_b[1:], [u[0] for u in cfg.acl_users]))
                except ValueError as e:
                    raise ConfigError(str(e)) from None
                continue
            if name.lower() == "rename-command" and len(vals) == 2:
                _check_rename(cfg.renamed_commands, words_b[1], words_b[2])
                cfg.renamed_commands.append((words_b[1].lower(), words_b[2].lower()))
                continue
            if name.lower() == "include":
                raise ConfigError("include is not supported")
            if name.lower() == "save":
                if vals == [""] or not vals:
                    cfg.values["save"] = ""
                else:
                    value = parse_value(DIRECTIVES["save"], vals)
                    prev = cfg.values["save"] if saw_save else ""
                    cfg.values["save"] = (prev + " " + value).strip()
                saw_save = True
                continue
            cfg.apply(name, vals)
        except ConfigError as e:
            raise ConfigError(fatal_message(idx, line, str(e))) from None
    return cfg
