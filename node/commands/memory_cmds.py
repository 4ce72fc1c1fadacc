"""MEMORY USAGE STATS DOCTOR MALLOC-STATS PURGE HELP: the per-value accounting of
node/core/memory.py and the process figures, in Redis 7.0's reply shapes."""

from __future__ import annotations

import resource
import struct
from typing import TYPE_CHECKING

from slotgate.node.commands.clients import client_memory_bytes
from slotgate.node.commands.info import _rss_bytes
from slotgate.node.commands.registry import command
from slotgate.node.commands.util import parse_int
from slotgate.node.core import memory
from slotgate.node.core.errors import SYNTAX, CommandError
from slotgate.protocol.resp import (
    array_header,
    bulk,
    double,
    integer,
    map_header,
    simple,
    verbatim,
)

if TYPE_CHECKING:
    from slotgate.node.core.client import Client
    from slotgate.node.core.server import Server

HELP = [
    "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DOCTOR",
    "    Return memory problems reports.",
    "MALLOC-STATS",
    "    Return internal statistics report from the memory allocator.",
    "PURGE",
    "    Attempt to purge dirty pages for reclamation by the allocator.",
    "STATS",
    "    Return information about the memory usage of the server.",
    "USAGE <key> [SAMPLES <count>]",
    "    Return memory in bytes used by <key> and its value. Nested values are",
    "    sampled up to <count> times (default: 5, 0 means sample all).",
    "HELP",
    "    Prints this help.",
]

NO_MALLOC_STATS = b"Stats not supported for the current allocator"
DOCTOR_EMPTY = (
    "Hi Sam, this instance is empty or is using very little memory, my issues detector can't "
    "be used in these conditions. Please, leave for your mission on Earth and fill it with some "
    "data. The new Sam and I will be back to our programming as soon as I finished rebooting.\n")
DOCTOR_FINE = ("Hi Sam, I can't find any memory issue in your instance. I can only account for "
               "what occurs on this base.\n")
DOCTOR_EMPTY_BYTES = 5 * 1024 * 1024  # getMemoryDoctorReport's "empty" threshold
# getMemoryDoctorReport's findings that our accounting can tell (the fragmentation and RSS
# ones need allocator figures, which MEMORY STATS reports as ratios of 1)
DOCTOR_PEAK = (
    ' * Peak memory: In the past this instance used more than 150% the memory that is '
    'currently using. The allocator is normally not able to release memory after a peak, so '
    'you can expect to see a big fragmentation ratio, however this is actually harmless and '
    'is only due to the memory peak, and if the Redis instance Resident Set Size (RSS) is '
    'currently bigger than expected, the memory will be used as soon as you fill the Redis '
    'instance with more data. If the memory peak was only occasional and you want to try to '
    'reclaim memory, please try the MEMORY PURGE command, otherwise the only other option is '
    'to shutdown and restart the instance.\n\n')
DOCTOR_BIG_REPLICA_BUFFERS = (
    ' * Big replica buffers: The replica output buffers in this instance are greater than '
    '10MB for each replica (on average). This likely means that there is some replica '
    'instance that is struggling receiving data, either because it is too slow or because of '
    'networking issues. As a result, data piles on the master output buffers. Please try to '
    'identify what replica is not receiving data correctly and why. You can use the INFO '
    'output in order to check the replicas delays and the CLIENT LIST command to check the '
    'output buffers of each replica.\n\n')
DOCTOR_BIG_CLIENT_BUFFERS = (
    ' * Big client buffers: The clients output buffers in this instance are greater than '
    '200K per client (on average). This may result from different causes, like Pub/Sub '
    'clients subscribed to channels bot not receiving data fast enough, so that data piles '
    'on the Redis instance output buffer, or clients sending commands with large replies or '
    'very large sequences of commands in the same pipeline. Please use the CLIENT LIST '
    'command in order to investigate the issue if it causes problems in your instance, or to '
    'understand better why certain clients are using a big amount of memory.\n\n')
DOCTOR_MANY_SCRIPTS = (
    ' * Many scripts: There seem to be many cached scripts in this instance (more than '
    '1000). This may be because scripts are generated and `EVAL`ed, instead of being '
    'parameterized (with KEYS and ARGV), `SCRIPT LOAD`ed and `EVALSHA`ed. Unless `SCRIPT '
    "FLUSH` is called periodically, the scripts' caches may end up consuming most of your "
    'memory.\n\n')
DOCTOR_ISSUES = "Sam, I detected a few issues in this Redis instance memory implants:\n\n"
DOCTOR_END = "I'm here to keep you safe, Sam. I want to help you.\n"
DOCTOR_PEAK_RATIO = 1.5  # peak over current, beyond which the peak is reported
DOCTOR_CLIENT_BYTES = 200 * 1024  # per normal client, on average
DOCTOR_REPLICA_BYTES = 10 * 1024 * 1024  # per replica, on average
DOCTOR_SCRIPTS = 1000  # cached scripts


STARTUP_RSS_BYTES = _rss_bytes()  # read when the command modules load, before any data


def _f32(x: float) -> float:
    """Redis keeps MEMORY STATS' ratios in C floats: the same rounding, printed as %.17g."""
    return float(struct.unpack("f", struct.pack("f", x))[0])


# -- USAGE ------------------------------------------------------------------------------------
@command("memory|usage")
def memory_usage(c: Client, argv: list[bytes]) -> bytes:
    samples = memory.DEFAULT_SAMPLES
    i = 3
    while i < len(argv):
        if argv[i].lower() == b"samples" and i + 1 < len(argv):
            samples = parse_int(argv[i + 1])
            if samples < 0:
                raise CommandError(SYNTAX)
            i += 2
        else:
            raise CommandError(SYNTAX)
    key = argv[2]
    v = c.db.lookup(key)
    if v is None:
        return c.null_bulk
    srv = c.server
    return integer(memory.usage(key, v, c.db.encoding(key, v), samples,
                                int(srv.config.get("list-max-listpack-size")),
                                srv.cluster_enabled))


# -- STATS ------------------------------------------------------------------------------------
def _stats(s: Server) -> list[tuple[str, object]]:
    """getMemoryOverheadData's fields in MEMORY STATS' order (db.N: (main, expires, slots))."""
    rss = _rss_bytes()
    peak = max(rss, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    startup = min(STARTUP_RSS_BYTES, rss)
    repl = s.replication
    backlog = len(repl.backlog.buf) if repl is not None else 0
    links = s.cluster.engine.links_memory() if s.cluster else 0
    scripts = s.scripting.cache_bytes() if s.scripting is not None else 0
    fn_bytes = s.functions.memory_bytes() if s.functions is not None else 0
    replicas = sum(client_memory_bytes(c) for c in s.clients.values() if c.is_replica)
    normal = sum(client_memory_bytes(c) for c in s.clients.values() if not c.is_replica)
    fields: list[tuple[str, object]] = [
        ("peak.allocated", peak), ("total.allocated", rss), ("startup.allocated", startup),
        ("replication.backlog", backlog), ("clients.slaves", replicas), ("clients.normal", normal),
        ("cluster.links", links), ("aof.buffer", 0), ("lua.caches", scripts),
        ("functions.caches", fn_bytes)]
    overhead = startup + backlog + links + scripts + fn_bytes + replicas + normal
    n_keys = 0
    for db in s.ks.dbs:
        n = len(db.data)
        if not n:
            continue
        n_keys += n
        main = memory.dict_overhead(n) + n * memory.ROBJ
        expires = memory.dict_overhead(len(db.expires))
        slots = n * memory.CLUSTER_ENTRY_METADATA if s.cluster_enabled else 0
        overhead += main + expires + slots
        fields.append((f"db.{db.index}", (main, expires, slots)))
    net = max(rss - startup, 0)
    dataset = max(rss - overhead, 0)
    fields += [
        ("overhead.total", overhead), ("keys.count", n_keys),
        ("keys.bytes-per-key", net // n_keys if n_keys else 0), ("dataset.bytes", dataset),
        ("dataset.percentage", _f32(dataset * 100.0 / net if net else 0.0)),
        ("peak.percentage", _f32(rss * 100.0 / peak)),
        # our process has no allocator statistics: RSS stands for every allocator figure
        ("allocator.allocated", rss), ("allocator.active", rss), ("allocator.resident", rss),
        ("allocator-fragmentation.ratio", 1.0), ("allocator-fragmentation.bytes", 0),
        ("allocator-rss.ratio", 1.0), ("allocator-rss.bytes", 0),
        ("rss-overhead.ratio", 1.0), ("rss-overhead.bytes", 0),
        ("fragmentation", 1.0), ("fragmentation.bytes", 0)]
    return fields


def _value(v: object, resp: int) -> bytes:
    if isinstance(v, float):
        return double(v, resp)
    if isinstance(v, tuple):
        main, expires, slots = v
        return (map_header(3, resp) + bulk("overhead.hashtable.main") + integer(main)
                + bulk("overhead.hashtable.expires") + integer(expires)
                + bulk("overhead.hashtable.slot-to-keys") + integer(slots))
    assert isinstance(v, int)
    return integer(v)


@command("memory|stats")
def memory_stats(c: Client, argv: list[bytes]) -> bytes:
    fields = _stats(c.server)
    return map_header(len(fields), c.resp) + b"".join(
        bulk(name) + _value(v, c.resp) for name, v in fields)


# -- the rest ---------------------------------------------------------------------------------
@command("memory|doctor")
def memory_doctor(c: Client, argv: list[bytes]) -> bytes:
    return verbatim(doctor_report(c.server), "txt", c.resp)


def doctor_report(srv: Server) -> str:
    """getMemoryDoctorReport on our figures. Redis calls an instance "empty" below 5 MB
    allocated; ours measures what the data would take (the accounting of MEMORY USAGE), as the
    interpreter alone is bigger. The peak is the accounted data's (Evictor.peak_bytes), the
    client and replica buffers what CLIENT LIST's tot-mem counts, the scripts EVAL's cache."""
    fill = int(srv.config.get("list-max-listpack-size"))
    total = 0
    for db in srv.ks.dbs:
        for key, v in db.data.items():
            total += memory.usage(key, v, db.encoding(key, v), memory.DEFAULT_SAMPLES, fill,
                                  srv.cluster_enabled)
            if total >= DOCTOR_EMPTY_BYTES:
                break
        if total >= DOCTOR_EMPTY_BYTES:
            break
    else:
        return DOCTOR_EMPTY
    ev = srv.evictor
    used = ev.used_bytes(fresh=not ev.maxmemory_bytes)
    replicas = [x for x in srv.clients.values() if x.is_replica]
    normal = [x for x in srv.clients.values() if not x.is_replica]
    findings = []
    if ev.peak_bytes > DOCTOR_PEAK_RATIO * max(used, 1):
        findings.append(DOCTOR_PEAK)
    if normal and sum(map(client_memory_bytes, normal)) // len(normal) > DOCTOR_CLIENT_BYTES:
        findings.append(DOCTOR_BIG_CLIENT_BUFFERS)
    if replicas and sum(map(client_memory_bytes, replicas)) // len(replicas) > DOCTOR_REPLICA_BYTES:
        findings.append(DOCTOR_BIG_REPLICA_BUFFERS)
    if srv.scripting is not None and len(srv.scripting.scripts) > DOCTOR_SCRIPTS:
        findings.append(DOCTOR_MANY_SCRIPTS)
    if not findings:
        return DOCTOR_FINE
    return DOCTOR_ISSUES + "".join(findings) + DOCTOR_END


@command("memory|malloc-stats")
def memory_malloc_stats(c: Client, argv: list[bytes]) -> bytes:
    return bulk(NO_MALLOC_STATS)


@command("memory|purge")
def memory_purge(c: Client, argv: list[bytes]) -> bytes:
    return simple("OK")


@command("memory|help")
def memory_help(c: Client, argv: list[bytes]) -> bytes:
    return array_header(len(HELP)) + b"".join(simple(ln) for ln in HELP)
