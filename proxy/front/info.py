"""INFO through the proxy: one server's INFO, built from the proxy's own facts and the
masters' replies.

    INFO [section ...] ─▶ every master (same arguments) ─▶ merge(...) ─▶ one reply

Each section of the masters' replies (Redis 7.0.15's sections, fields and order) becomes:

- ``Server``: the first master's, with the proxy's own process_id, run_id, tcp_port,
  server_time_usec, uptime, executable and config_file, and ``redis_mode:standalone``.
- ``Clients``, ``CPU``, ``Commandstats``, ``Errorstats``: the proxy's own (its clients, its
  process(es), the commands and error replies it served).
- ``Stats``: connections, commands, ops/sec, rejected connections and error replies are the
  proxy's own; every other integer counter is summed over the masters (keyspace hits and
  misses, expired and evicted keys, pub/sub channels ...); other values are the first master's.
- ``Memory``: integer fields summed over the masters, ``*_human`` recomputed from the sum,
  other values (ratios, percentages, policy names) the first master's.
- ``Persistence``: a status is ``ok`` only if every master's is; ``loading``, ``*_in_progress``,
  ``*_scheduled``, ``aof_enabled`` and ``*_time_sec``: the largest; ``rdb_last_save_time``: the
  oldest; other integers summed; other values the first master's.
- ``Keyspace``: keys and expires summed per database, avg_ttl weighted by keys.
- ``Cluster``: ``cluster_enabled:0`` (the proxy is one plain server to its clients).
- ``Latencystats``: the proxy's own (its requests' percentiles, proxy/front/latency.py).
- any other section (Replication, Modules): the first master's.

Then the proxy's own ``# Proxy`` section (for no argument, ``default``, ``all``,
``everything`` or ``proxy``). With workers, every value of the proxy's own (``Own``: client
counts, stats, commandstats, errorstats, latencystats, CPU; server identity) is the whole
proxy's, asked of the other workers before the masters (front/siblings.py) and ``combined``;
only ``# Proxy`` stays this worker's.
"""

from __future__ import annotations

import os
import re
import resource
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from slotgate.proxy.front.routes import RouteSession as Session
    from slotgate.proxy.front.server import Proxy

_KEYSPACE_LINE = re.compile(rb"^db(\d+):keys=(\d+),expires=(\d+),avg_ttl=(\d+)$")
_INTEGER = re.compile(rb"^-?\d+$")
_PROXY_SECTIONS = {b"all", b"everything", b"default", b"proxy"}
# INFO stats fields that are the proxy's own (everything else there is the masters').
_STATS_OWN = ("total_connections_received", "total_commands_processed",
              "instantaneous_ops_per_sec", "rejected_connections", "total_error_replies",
              "unexpected_error_replies")
_PERSISTENCE_MAX = re.compile(rb"^(loading|async_loading|aof_enabled|.*_in_progress|"
                              rb".*_scheduled|.*_time_sec)$")

Fields = list[tuple[bytes, bytes]]
# Session id -> the Keyspace section of its INFO in progress, one line per numbered database
# (front/db_info.py); without an entry the masters' lines are combined.
KEYSPACE_LINES: dict[int, Fields] = {}


def _text(raw: bytes) -> bytes:
    body = raw[raw.index(b"\r\n") + 2 : -2]
    return body[4:] if raw[:1] == b"=" else body  # verbatim: drop "txt:"


def _sections(text: bytes) -> dict[bytes, Fields]:
    """Section title -> its (field, value) lines, in order."""
    out: dict[bytes, Fields] = {}
    current: Fields | None = None
    for line in text.split(b"\r\n"):
        if line.startswith(b"# "):
            current = out.setdefault(line[2:], [])
        elif line and current is not None:
            key, _, value = line.partition(b":")
            current.append((key, value))
    return out


def _human(n: int) -> bytes:
    """Redis' bytesToHuman."""
    for unit, size in ((b"P", 1 << 50), (b"T", 1 << 40), (b"G", 1 << 30), (b"M", 1 << 20),
                       (b"K", 1 << 10)):
        if n >= size:
            return b"%.2f%s" % (n / size, unit)
    return b"%dB" % n


def _combine(parts: list[Fields], rule: Callable[[bytes, list[bytes]], bytes]) -> Fields:
    """The first master's fields, each value ``rule(field, values of every master)``."""
    by_master = [dict(p) for p in parts]
    return [(key, rule(key, [m[key] for m in by_master if key in m])) for key, _ in parts[0]]


def _sum_integers(key: bytes, values: list[bytes]) -> bytes:
    if all(_INTEGER.match(v) for v in values):
        return b"%d" % sum(int(v) for v in values)
    return values[0]


def _memory(parts: list[Fields]) -> Fields:
    fields = _combine(parts, _sum_integers)
    values = dict(fields)
    return [(k, _human(int(values[k[:-6]])) if k.endswith(b"_human") and
             _INTEGER.match(values.get(k[:-6], b"x")) else v) for k, v in fields]


def _persistence_rule(key: bytes, values: list[bytes]) -> bytes:
    if key.endswith(b"_status"):
        return next((v for v in values if v != b"ok"), values[0])
    if not all(_INTEGER.match(v) for v in values):
        return values[0]
    numbers = [int(v) for v in values]
    if key == b"rdb_last_save_time":
        return b"%d" % min(numbers)
    if _PERSISTENCE_MAX.match(key):
        return b"%d" % max(numbers)
    return b"%d" % sum(numbers)


def _stats(s: Session, own: Own, parts: list[Fields]) -> Fields:
    connections, commands, ops, rejected_connections = own.stats
    values = {
        b"total_connections_received": connections,
        b"total_commands_processed": commands,
        b"instantaneous_ops_per_sec": ops,
        b"rejected_connections": rejected_connections,
        b"total_error_replies": sum(own.errors.values()),
        b"unexpected_error_replies": 0,
        **own.tracking,
    }
    return [(k, b"%d" % values[k] if k in values else v)
            for k, v in _combine(parts, _sum_integers)]


def _server(s: Session, own: Own, fields: Fields) -> Fields:
    now = time.time()
    port = s.proxy.listen_address.rpartition(":")[2]
    values = {
        b"redis_mode": b"cluster" if s.settings.cluster_emulation else b"standalone",
        b"process_id": b"%d" % own.pid,
        b"run_id": own.run_id,
        b"tcp_port": port.encode(),
        b"server_time_usec": b"%d" % int(now * 1_000_000),
        b"uptime_in_seconds": b"%d" % own.uptime_s,
        b"uptime_in_days": b"%d" % (own.uptime_s // 86400),
        b"executable": sys.executable.encode(),
        b"config_file": b"",
    }
    return [(k, values.get(k, v)) for k, v in fields]


# INFO clients' counts (summed over every worker, as every other value of ``Own``).
SUMMED_COUNTS = ("connected_clients", "blocked_clients", "tracking_clients")


@dataclass
class Own:
    """The proxy's own facts INFO reports: one process's, or with workers every worker's
    (``combined``: counters summed; ``index``, ``pid``, ``run_id``, ``uptime_s`` the first
    worker's). With workers it travels as one bulk string per worker (``encode``)."""

    index: int  # worker index (0 without workers)
    pid: int
    uptime_s: int
    run_id: bytes
    counts: list[int]  # SUMMED_COUNTS
    stats: list[int]  # connections received, commands processed, ops/sec, rejected connections
    commands: dict[bytes, list[int]]  # name -> calls, usec, rejected calls, failed calls
    errors: dict[bytes, int]  # error code -> replies
    tracking: dict[bytes, int]  # INFO stats' tracking_total_* fields
    latency: dict[str, list[int]]  # command name -> requests per latency level
    cpu: list[float]  # seconds, in ``_CPU_FIELDS`` order

    def encode(self) -> bytes:
        lines = [b"%d %d %d %s %s" % (self.index, self.pid, self.uptime_s, self.run_id,
                                      b" ".join(b"%d" % n for n in self.counts + self.stats))]
        lines += [b"c %s %s" % (name, b" ".join(b"%d" % n for n in numbers))
                  for name, numbers in self.commands.items()]
        lines += [b"e %s %d" % (code, n) for code, n in self.errors.items()]
        lines += [b"t %s %d" % (field, n) for field, n in self.tracking.items()]
        lines += [b"l %s %s" % (name.encode(), b",".join(b"%d" % n for n in counts))
                  for name, counts in self.latency.items()]
        lines.append(b"u " + b" ".join(b"%.6f" % x for x in self.cpu))
        return b"\n".join(lines)


def decode(raw: bytes) -> Own | None:
    """Another worker's ``Own.encode``; None if it is not one (bad lines are skipped)."""
    lines = raw.split(b"\n")
    head = lines[0].split()
    if len(head) != 4 + len(SUMMED_COUNTS) + 4 or not all(_INTEGER.match(w) for w in
                                                           head[:3] + head[4:]):
        return None
    numbers = [int(w) for w in head[4:]]
    own = Own(int(head[0]), int(head[1]), int(head[2]), head[3], numbers[:3], numbers[3:],
              {}, {}, {}, {}, [0.0] * len(_CPU_FIELDS))
    for line in lines[1:]:
        words = line.split(b" ")
        if words[0] == b"u" and len(words) == 1 + len(_CPU_FIELDS):
            try:
                own.cpu = [float(w) for w in words[1:]]
            except ValueError:
                continue
        elif words[0] == b"l" and len(words) == 3:
            counts = words[2].split(b",")
            if all(c.isdigit() for c in counts):
                own.latency[words[1].decode("utf-8", "replace")] = [int(c) for c in counts]
        elif not all(_INTEGER.match(w) for w in words[2:]):
            continue
        elif words[0] == b"c" and len(words) == 6:
            own.commands[words[1]] = [int(w) for w in words[2:]]
        elif words[0] == b"e" and len(words) == 3:
            own.errors[words[1]] = int(words[2])
        elif words[0] == b"t" and len(words) == 3:
            own.tracking[words[1]] = int(words[2])
    return own


def own_facts(proxy: Proxy) -> Own:
    """This process's ``Own``."""
    sessions = proxy.sessions
    held = proxy.pause.held
    stats = proxy.stats
    commands = proxy.metrics.commands_total - sum(stats.rejected.values())
    return Own(
        proxy.worker_index or 0, os.getpid(), stats.uptime_s(), stats.run_id.encode(),
        [len(sessions), sum(1 for c in sessions if c.tx.blocked is not None or c in held),
         sum(1 for c in sessions if c.tracking is not None)],
        [stats.connections_received, commands, stats.ops_per_sec(commands),
         stats.rejected_connections],
        _command_numbers(proxy), dict(stats.error_replies), proxy.tracker.info_fields(),
        dict(proxy.latency.with_data(stats.rejected)), _cpu_seconds())


def asked_counts(proxy: Proxy, args: list[bytes]) -> list[bytes]:
    """Another worker's INFO: this worker's ``Own``, encoded."""
    return [own_facts(proxy).encode()]


def combined(mine: Own, peers: Sequence[Own]) -> Own:
    """Every worker's facts as one server's: counters summed, per command and per error
    too; the server's identity (pid, run_id, uptime) the lowest-indexed worker's."""
    every = sorted([mine, *peers], key=lambda o: o.index)
    first = every[0]
    out = Own(first.index, first.pid, first.uptime_s, first.run_id,
              [sum(col) for col in zip(*(o.counts for o in every), strict=True)],
              [sum(col) for col in zip(*(o.stats for o in every), strict=True)], {}, {}, {}, {},
              [sum(col) for col in zip(*(o.cpu for o in every), strict=True)])
    for o in every:
        for name, numbers in o.commands.items():
            _add(out.commands, name, numbers)
        for cmd, counts in o.latency.items():
            _add(out.latency, cmd, counts)
        for table, into in ((o.errors, out.errors), (o.tracking, out.tracking)):
            for key, n in table.items():
                into[key] = into.get(key, 0) + n
    return out


def _add(table: dict[Any, list[int]], key: Any, numbers: list[int]) -> None:
    have = table.get(key)
    if have is None:
        table[key] = list(numbers)
    elif len(have) == len(numbers):
        table[key] = [a + b for a, b in zip(have, numbers, strict=True)]


def _clients(s: Session, own: Own) -> Fields:
    connected, blocked, tracking = own.counts
    return [
        (b"connected_clients", b"%d" % connected),
        (b"cluster_connections", b"0"),
        (b"maxclients", b"%d" % s.settings.max_clients),
        (b"client_recent_max_input_buffer", b"0"),
        (b"client_recent_max_output_buffer", b"0"),
        (b"blocked_clients", b"%d" % blocked),
        (b"tracking_clients", b"%d" % tracking),
        (b"clients_in_timeout_table", b"0"),
    ]


_CPU_FIELDS = (b"used_cpu_sys", b"used_cpu_user", b"used_cpu_sys_children",
               b"used_cpu_user_children", b"used_cpu_sys_main_thread", b"used_cpu_user_main_thread")


def _cpu_seconds() -> list[float]:
    me = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    thread = resource.getrusage(resource.RUSAGE_THREAD)
    return [me.ru_stime, me.ru_utime, children.ru_stime, children.ru_utime, thread.ru_stime,
            thread.ru_utime]


def _cpu(own: Own) -> Fields:
    return [(k, b"%.6f" % v) for k, v in zip(_CPU_FIELDS, own.cpu, strict=True)]


def _command_numbers(proxy: Proxy) -> dict[bytes, list[int]]:
    """Per command: calls that ran (ok or failed), their usec, calls rejected before running,
    failed calls; unknown commands have no entry, as in Redis."""
    proxy.metrics.tally.settle()
    counts: dict[tuple[str, str], int] = getattr(proxy.metrics, "command_counts", {})
    seconds: dict[tuple[str, str], float] = getattr(proxy.metrics, "command_seconds", {})
    rejected = proxy.stats.rejected
    calls: dict[str, list[float]] = {}
    for (name, result), n in counts.items():
        if n and name != "other":
            entry = calls.setdefault(name, [0, 0, 0.0])
            entry[0] += n
            entry[2] += seconds.get((name, result), 0.0)
            if result != "ok":
                entry[1] += n
    out = {}
    for name, (total, errors_n, took_s) in calls.items():
        refused = rejected.get(name, 0)
        out[name.encode()] = [int(total) - refused, int(took_s * 1_000_000), refused,
                              int(errors_n) - refused]
    return out


def _commandstats(own: Own) -> Fields:
    return [(b"cmdstat_" + name,
             b"calls=%d,usec=%d,usec_per_call=%.2f,rejected_calls=%d,failed_calls=%d"
             % (ran, usec, usec / ran if ran else 0.0, refused, failed))
            for name, (ran, usec, refused, failed) in own.commands.items()]


def _errorstats(own: Own) -> Fields:
    return [(b"errorstat_" + code, b"count=%d" % n) for code, n in sorted(own.errors.items())]


def _keyspace(parts: list[Fields]) -> Fields:
    totals: dict[int, list[int]] = {}
    for fields in parts:
        for key, value in fields:
            m = _KEYSPACE_LINE.match(key + b":" + value)
            if m:
                t = totals.setdefault(int(m[1]), [0, 0, 0, 0])
                keys, expires, avg_ttl = int(m[2]), int(m[3]), int(m[4])
                t[0] += keys
                t[1] += expires
                t[2] += avg_ttl * keys
                t[3] += keys if avg_ttl else 0
    return [(b"db%d" % db, b"keys=%d,expires=%d,avg_ttl=%d" % (
        keys, expires, ttl_sum // ttl_keys if ttl_keys else 0))
        for db, (keys, expires, ttl_sum, ttl_keys) in sorted(totals.items())]


def _section(s: Session, title: bytes, parts: list[Fields], own: Own) -> Fields:
    if title == b"Server":
        return _server(s, own, parts[0])
    if title == b"Clients":
        return _clients(s, own)
    if title == b"Memory":
        return _memory(parts)
    if title == b"Persistence":
        return _combine(parts, _persistence_rule)
    if title == b"Stats":
        return _stats(s, own, parts)
    if title == b"CPU":
        return _cpu(own)
    if title == b"Commandstats":
        return _commandstats(own)
    if title == b"Errorstats":
        return _errorstats(own)
    if title == b"Latencystats":
        return s.proxy.latency.info_lines(s.proxy.stats.rejected, list(own.latency.items()))
    if title == b"Cluster":
        return [(b"cluster_enabled", b"1" if s.settings.cluster_emulation else b"0")]
    if title == b"Keyspace":
        lines = KEYSPACE_LINES.pop(s.id, None)
        return _keyspace(parts) if lines is None else lines
    return parts[0]


def merge(s: Session, argv: Sequence[bytes], replies: Sequence[bytes]) -> bytes:
    """The INFO reply of the proxy from the masters' INFO replies (see the module)."""
    siblings = s.proxy.siblings
    peers = None if siblings is None else siblings.counts.pop(s.id, None)
    own = own_facts(s.proxy) if peers is None else combined(own_facts(s.proxy), peers)
    for r in replies:
        if r[:1] == b"-":
            KEYSPACE_LINES.pop(s.id, None)
            return r
    masters = [_sections(_text(r)) for r in replies]
    blocks = []
    for title in masters[0]:
        parts = [m.get(title, []) for m in masters]
        fields = _section(s, title, parts, own)
        blocks.append(b"# " + title + b"\r\n" + b"".join(k + b":" + v + b"\r\n" for k, v in fields))
    sections = {a.lower() for a in argv[1:]}
    if not sections or sections & _PROXY_SECTIONS:
        blocks.append(proxy_section(s))
    text = b"\r\n".join(blocks)
    if s.proto == 3:
        return b"=%d\r\ntxt:%s\r\n" % (len(text) + 4, text)
    return b"$%d\r\n%s\r\n" % (len(text), text)


def proxy_section(s: Session) -> bytes:
    m = s.metrics
    topo = s.router.topology
    lines = [
        "# Proxy",
        f"proxy_listen:{s.proxy.listen_address}",
        f"process_id:{os.getpid()}",
        f"worker_index:{s.proxy.worker_index or 0}",
        f"workers:{s.proxy.worker_count}",
        f"proxy_connected_clients:{m.clients_connected}",
        f"proxy_commands_processed:{m.commands_total}",
        f"cluster_masters:{len(topo.slot_map.masters)}",
        f"cluster_slots_covered:{topo.slot_map.covered()}",
        f"topology_version:{topo.version}",
        f"redirects_moved:{m.total('redirect', 'MOVED')}",
        f"redirects_ask:{m.total('redirect', 'ASK')}",
        f"redirects_tryagain:{m.total('redirect', 'TRYAGAIN')}",
        f"redirects_clusterdown:{m.total('redirect', 'CLUSTERDOWN')}",
        f"unknown_fate_writes:{m.total('unknown_fate_write')}",
    ]
    return ("\r\n".join(lines) + "\r\n").encode()

