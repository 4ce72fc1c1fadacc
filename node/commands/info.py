"""INFO [section ...] with Redis 7.0's section and field names (redis-cli, redis_exporter).

Other modules add or replace a section with ``server.info_sections["replication"] = fn``
where ``fn(server) -> list[tuple[str, object]]``.
"""

from __future__ import annotations

import os
import platform
import resource
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from slotgate.node.commands.pubsub import hub as pubsub_hub
from slotgate.node.commands.registry import command
from slotgate.node.core.config import REDIS_VERSION
from slotgate.node.core.config_table import format_percentile, parse_percentiles
from slotgate.node.core.latency import fold_counts, percentile_us
from slotgate.protocol.resp import verbatim

if TYPE_CHECKING:
    from slotgate.node.core.client import Client
    from slotgate.node.core.server import Server

Fields = list[tuple[str, Any]]


def _human(n: int) -> str:
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return f"{n}B"


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _server(s: Server) -> Fields:
    now = time.time()
    uptime = s.uptime_s()
    return [
        ("redis_version", REDIS_VERSION), ("redis_git_sha1", "00000000"), ("redis_git_dirty", 0),
        ("redis_build_id", "0"), ("redis_mode", "cluster" if s.cluster_enabled else "standalone"),
        ("os", f"{platform.system()} {platform.release()} {platform.machine()}"),
        ("arch_bits", 64), ("monotonic_clock", "POSIX clock_gettime"),
        ("multiplexing_api", "epoll"), ("atomicvar_api", "c11-builtin"),
        ("gcc_version", "0.0.0"), ("process_id", os.getpid()), ("process_supervised", "no"),
        ("run_id", s.run_id), ("tcp_port", s.port), ("server_time_usec", int(now * 1e6)),
        ("uptime_in_seconds", uptime), ("uptime_in_days", uptime // 86400),
        ("hz", s.config.get("hz")), ("configured_hz", s.config.get("hz")),
        ("lru_clock", int(now) & 0xFFFFFF), ("executable", sys.argv[0]),
        ("config_file", s.config.config_file or ""), ("io_threads_active", 0),
    ]


def _clients(s: Server) -> Fields:
    return [
        ("connected_clients", len(s.clients)), ("cluster_connections", 0),
        ("maxclients", s.config.get("maxclients")), ("client_recent_max_input_buffer", 0),
        ("client_recent_max_output_buffer", 0), ("blocked_clients", s.blocked_clients),
        ("tracking_clients", s.tracker.clients), ("clients_in_timeout_table", s.blocked_clients),
    ]


def _memory(s: Server) -> Fields:
    rss = _rss_bytes()
    maxmem = int(s.config.get("maxmemory"))
    peak = max(rss, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    eng = s.scripting  # the Lua interpreter and the script cache (node/scripting)
    lua = eng.memory_bytes() if eng is not None else 0
    n_scripts = len(eng.scripts) if eng is not None else 0
    scripts = eng.cache_bytes() if eng is not None else 0
    fns = s.functions  # FUNCTION libraries, in an interpreter of their own
    lua_fn = fns.engine.memory_bytes() if fns is not None else 0
    n_functions = len(fns.functions) if fns is not None else 0
    n_libraries = len(fns.libraries) if fns is not None else 0
    fn_bytes = fns.memory_bytes() if fns is not None else 0
    # the accounted keyspace (node/core/evict.py); under maxmemory, as the check before this
    # command sampled it and evicted to it
    used = s.evictor.used_bytes(fresh=not s.evictor.maxmemory_bytes)
    return [
        ("used_memory", used), ("used_memory_human", _human(used)),
        ("used_memory_rss", rss), ("used_memory_rss_human", _human(rss)),
        ("used_memory_peak", peak), ("used_memory_peak_human", _human(peak)),
        ("used_memory_peak_perc", f"{100.0 * rss / max(peak, 1):.2f}%"),
        ("used_memory_overhead", 0), ("used_memory_startup", 0), ("used_memory_dataset", used),
        ("used_memory_dataset_perc", "100.00%"), ("allocator_allocated", rss),
        ("allocator_active", rss), ("allocator_resident", rss),
        ("total_system_memory", total), ("total_system_memory_human", _human(total)),
        ("used_memory_lua", lua), ("used_memory_vm_eval", lua),
        ("used_memory_lua_human", _human(lua)), ("used_memory_scripts_eval", scripts),
        ("number_of_cached_scripts", n_scripts), ("number_of_functions", n_functions),
        ("number_of_libraries", n_libraries), ("used_memory_vm_functions", lua_fn),
        ("used_memory_vm_total", lua + lua_fn),
        ("used_memory_vm_total_human", _human(lua + lua_fn)), ("used_memory_functions", fn_bytes),
        ("used_memory_scripts", scripts + fn_bytes),
        ("used_memory_scripts_human", _human(scripts + fn_bytes)),
        ("maxmemory", maxmem), ("maxmemory_human", _human(maxmem)),
        ("maxmemory_policy", s.config.get("maxmemory-policy")),
        ("allocator_frag_ratio", "1.00"), ("allocator_frag_bytes", 0),
        ("allocator_rss_ratio", "1.00"), ("allocator_rss_bytes", 0),
        ("rss_overhead_ratio", "1.00"), ("rss_overhead_bytes", 0),
        ("mem_fragmentation_ratio", "1.00"), ("mem_fragmentation_bytes", 0),
        ("mem_not_counted_for_evict", 0), ("mem_replication_backlog", 0),
        ("mem_total_replication_buffers", 0), ("mem_clients_slaves", 0),
        ("mem_clients_normal", 0), ("mem_cluster_links", s.cluster.engine.links_memory() if s.cluster else 0), ("mem_aof_buffer", 0),
        ("mem_allocator", "libc"), ("active_defrag_running", 0), ("lazyfree_pending_objects", 0),
        ("lazyfreed_objects", 0),
    ]


def _persistence(s: Server) -> Fields:
    return [
        ("loading", 0), ("async_loading", 0), ("current_cow_peak", 0), ("current_cow_size", 0),
        ("current_cow_size_age", 0), ("current_fork_perc", "0.00"), ("current_save_keys_processed", 0),
        ("current_save_keys_total", 0), ("rdb_changes_since_last_save", s.ks.dirty),
        ("rdb_bgsave_in_progress", 0), ("rdb_last_save_time", s.last_save_time),
        ("rdb_last_bgsave_status", "ok"), ("rdb_last_bgsave_time_sec", -1),
        ("rdb_current_bgsave_time_sec", -1), ("rdb_saves", 0), ("rdb_last_cow_size", 0),
        ("rdb_last_load_keys_expired", 0), ("rdb_last_load_keys_loaded", 0),
        ("aof_enabled", 1 if s.config.get("appendonly") else 0), ("aof_rewrite_in_progress", 0),
        ("aof_rewrite_scheduled", 0), ("aof_last_rewrite_time_sec", -1),
        ("aof_current_rewrite_time_sec", -1), ("aof_last_bgrewrite_status", "ok"),
        ("aof_rewrites", 0), ("aof_rewrites_consecutive_failures", 0),
        ("aof_last_write_status", "ok"), ("aof_last_cow_size", 0),
        ("module_fork_in_progress", 0), ("module_fork_last_cow_size", 0),
    ]


def _stats(s: Server) -> Fields:
    subs = pubsub_hub(s)  # channels, patterns and shard channels with a subscriber
    return [
        ("total_connections_received", s.stat_numconnections),
        ("total_commands_processed", s.stat_numcommands),
        ("instantaneous_ops_per_sec", s.ops_per_sec),
        ("total_net_input_bytes", s.stat_net_input_bytes),
        ("total_net_output_bytes", s.stat_net_output_bytes),
        ("total_net_repl_input_bytes", 0), ("total_net_repl_output_bytes", 0),
        ("instantaneous_input_kbps", "0.00"), ("instantaneous_output_kbps", "0.00"),
        ("instantaneous_input_repl_kbps", "0.00"), ("instantaneous_output_repl_kbps", "0.00"),
        ("rejected_connections", s.stat_rejected_conn), ("sync_full", 0), ("sync_partial_ok", 0),
        ("sync_partial_err", 0), ("expired_keys", s.ks.expired_keys),
        ("expired_stale_perc", "0.00"), ("expired_time_cap_reached_count", 0),
        ("expire_cycle_cpu_milliseconds", 0), ("evicted_keys", s.evictor.evicted_keys), ("evicted_clients", 0),
        ("total_eviction_exceeded_time", 0), ("current_eviction_exceeded_time", 0),
        ("keyspace_hits", s.ks.keyspace_hits), ("keyspace_misses", s.ks.keyspace_misses),
        ("pubsub_channels", len(subs.channels)), ("pubsub_patterns", len(subs.patterns)),
        ("pubsubshard_channels", len(subs.shard)),
        ("latest_fork_usec", 0), ("total_forks", 0), ("migrate_cached_sockets", 0),
        ("slave_expires_tracked_keys", 0), ("active_defrag_hits", 0), ("active_defrag_misses", 0),
        ("active_defrag_key_hits", 0), ("active_defrag_key_misses", 0),
        ("total_active_defrag_time", 0), ("current_active_defrag_time", 0),
        ("tracking_total_keys", len(s.tracker.table)), ("tracking_total_items", s.tracker.items),
        ("tracking_total_prefixes", len(s.tracker.prefixes)),
        ("unexpected_error_replies", 0), ("total_error_replies", s.total_error_replies),
        ("dump_payload_sanitizations", 0), ("total_reads_processed", s.stat_numcommands),
        ("total_writes_processed", s.stat_numcommands), ("io_threaded_reads_processed", 0),
        ("io_threaded_writes_processed", 0), ("reply_buffer_shrinks", 0),
        ("reply_buffer_expands", 0),
    ]


def _replication(s: Server) -> Fields:
    return [
        ("role", "master"), ("connected_slaves", 0), ("master_failover_state", "no-failover"),
        ("master_replid", s.run_id), ("master_replid2", "0" * 40), ("master_repl_offset", 0),
        ("second_repl_offset", -1), ("repl_backlog_active", 0),
        ("repl_backlog_size", s.config.get("repl-backlog-size")),
        ("repl_backlog_first_byte_offset", 0), ("repl_backlog_histlen", 0),
    ]


def _cpu(s: Server) -> Fields:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    return [
        ("used_cpu_sys", f"{ru.ru_stime:.6f}"), ("used_cpu_user", f"{ru.ru_utime:.6f}"),
        ("used_cpu_sys_children", f"{ch.ru_stime:.6f}"),
        ("used_cpu_user_children", f"{ch.ru_utime:.6f}"),
        ("used_cpu_sys_main_thread", f"{ru.ru_stime:.6f}"),
        ("used_cpu_user_main_thread", f"{ru.ru_utime:.6f}"),
    ]


def _modules(s: Server) -> Fields:
    return []


def _errorstats(s: Server) -> Fields:
    return [(f"errorstat_{k}", f"count={v}") for k, v in sorted(s.error_counts.items())]  # (a rax: sorted)


def _cluster(s: Server) -> Fields:
    return [("cluster_enabled", 1 if s.cluster_enabled else 0)]


def _keyspace(s: Server) -> Fields:
    out: Fields = []
    for db in s.ks.dbs:
        if db.data:
            out.append((f"db{db.index}", f"keys={len(db.data)},expires={len(db.expires)},avg_ttl=0"))
    return out


def _commandstats(s: Server) -> Fields:
    out: Fields = []
    seen: set[int] = set()
    for cmd in s.table.values():
        if id(cmd) in seen:
            continue
        seen.add(id(cmd))
        for sub in [cmd, *(cmd.subcommands or {}).values()]:
            if sub.calls or sub.rejected_calls or sub.failed_calls:
                per = sub.usec / sub.calls if sub.calls else 0.0
                out.append((f"cmdstat_{sub.full_name}",
                            f"calls={sub.calls},usec={sub.usec},usec_per_call={per:.2f},"
                            f"rejected_calls={sub.rejected_calls},failed_calls={sub.failed_calls}"))
    return out


def _latencystats(s: Server) -> Fields:
    """latency_percentiles_usec_<command>: the latency-tracking-info-percentiles of each
    command's histogram (none while latency-tracking is off)."""
    if not s.latency_tracking:
        return []
    pcts = parse_percentiles(str(s.config.get("latency-tracking-info-percentiles")))
    out: Fields = []
    for cmd in {id(x): x for x in s.table.values()}.values():
        for sub in [cmd, *(cmd.subcommands or {}).values()]:
            buckets = fold_counts(sub.lat_small, sub.lat_big)
            if buckets:
                out.append((f"latency_percentiles_usec_{sub.full_name}", ",".join(
                    f"p{format_percentile(p)}={percentile_us(buckets, p):.3f}" for p in pcts)))
    return out


SECTIONS: dict[str, Callable[[Server], Fields]] = {
    "server": _server, "clients": _clients, "memory": _memory, "persistence": _persistence,
    "stats": _stats, "replication": _replication, "cpu": _cpu, "modules": _modules,
    "errorstats": _errorstats, "cluster": _cluster, "keyspace": _keyspace,
    "commandstats": _commandstats, "latencystats": _latencystats,
}
ORDER = ["server", "clients", "memory", "persistence", "stats", "replication", "cpu",
         "modules", "commandstats", "errorstats", "latencystats", "cluster", "keyspace"]
DEFAULT = [x for x in ORDER if x not in ("commandstats", "latencystats")]
TITLES = {"cpu": "CPU"}


def render(s: Server, names: list[str]) -> str:
    chosen: list[str] = []
    for n in names or ["default"]:
        n = n.lower()
        group = {"default": DEFAULT, "all": ORDER, "everything": ORDER}.get(n, [n])
        for g in group:
            if g not in chosen:
                chosen.append(g)
    order = ORDER + [x for x in s.info_sections if x not in ORDER]
    chosen.sort(key=lambda x: order.index(x) if x in order else len(order))
    blocks = []
    for name in chosen:
        fn = s.info_sections.get(name) or SECTIONS.get(name)
        if fn is None:
            continue
        title = TITLES.get(name, name.capitalize())
        lines = [f"# {title}"] + [f"{k}:{v}" for k, v in fn(s)]
        blocks.append("\r\n".join(lines) + "\r\n")
    return "\r\n".join(blocks)


@command("info")
def info(c: Client, argv: list[bytes]) -> bytes:
    text = render(c.server, [a.decode("utf-8", "replace") for a in argv[1:]])
    return verbatim(text, "txt", c.resp)
