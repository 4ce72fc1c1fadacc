"""LATENCY: the latency monitor's events and the per-command histograms
(node/core/latency.py)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from slotgate.node.commands.registry import Command, command
from slotgate.node.core.errors import CommandError
from slotgate.node.core.latency import cdf, fold_counts
from slotgate.protocol.resp import array_header, bulk, integer, map_header, simple, verbatim

if TYPE_CHECKING:
    from slotgate.node.core.client import Client


@command("latency|latest")
def latency_latest(c: Client, argv: list[bytes]) -> bytes:
    events = c.server.latency.events
    parts = [array_header(len(events))]
    for name, series in events.items():
        t, ms = series.latest()
        parts.append(b"*4\r\n" + bulk(name) + integer(t) + integer(ms) + integer(series.max_ms))
    return b"".join(parts)


@command("latency|history")
def latency_history(c: Client, argv: list[bytes]) -> bytes:
    series = c.server.latency.events.get(argv[2].decode("utf-8", "replace"))
    samples = series.ordered() if series is not None else []
    return array_header(len(samples)) + b"".join(
        b"*2\r\n" + integer(t) + integer(ms) for t, ms in samples)


@command("latency|reset")
def latency_reset(c: Client, argv: list[bytes]) -> bytes:
    return integer(c.server.latency.reset([a.decode("utf-8", "replace") for a in argv[2:]]))


@command("latency|graph")
def latency_graph(c: Client, argv: list[bytes]) -> bytes:
    event = argv[2].decode("utf-8", "replace")
    text = c.server.latency.graph(event, int(time.time()))
    if text is None:
        raise CommandError(f"ERR No samples available for event '{event}'")
    return verbatim(text, "txt", c.resp)


@command("latency|doctor")
def latency_doctor(c: Client, argv: list[bytes]) -> bytes:
    srv = c.server
    text = srv.latency.doctor(srv.latency_threshold_ms,
                              int(srv.config.get("slowlog-log-slower-than")),
                              int(srv.config.get("hz")), int(time.time()))
    return verbatim(text, "txt", c.resp)


def _cdf_reply(cmd: Command, resp: int) -> bytes | None:
    buckets = fold_counts(cmd.lat_small, cmd.lat_big)
    if not buckets:
        return None
    levels = cdf(buckets)
    return (bulk(cmd.full_name) + map_header(2, resp) + bulk("calls")
            + integer(sum(buckets.values())) + bulk("histogram_usec")
            + map_header(len(levels), resp)
            + b"".join(integer(us) + integer(n) for us, n in levels))


def _with_subcommands(cmd: Command) -> list[Command]:
    return [cmd, *(cmd.subcommands or {}).values()]


def _lookup(c: Client, name: bytes) -> Command | None:
    """A command by name, ``container|sub`` for a subcommand (any case)."""
    head, _, sub = name.lower().partition(b"|")
    cmd = c.server.table.get(head)
    if cmd is None or not sub:
        return cmd
    return (cmd.subcommands or {}).get(sub)


@command("latency|histogram")
def latency_histogram(c: Client, argv: list[bytes]) -> bytes:
    if len(argv) > 2:
        chosen = [cmd for name in argv[2:] if (cmd := _lookup(c, name)) is not None]
    else:
        chosen = list({id(cmd): cmd for cmd in c.server.table.values()}.values())
    entries = [e for cmd in chosen for sub in _with_subcommands(cmd)
               if (e := _cdf_reply(sub, c.resp)) is not None]
    return map_header(len(entries), c.resp) + b"".join(entries)


_HELP = [
    "LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DOCTOR", "    Return a human readable latency analysis report.",
    "GRAPH <event>", "    Return an ASCII latency graph for the <event> class.",
    "HISTORY <event>", "    Return time-latency samples for the <event> class.",
    "LATEST", "    Return the latest latency samples for all events.",
    "RESET [<event> ...]", "    Reset latency data of one or more <event> classes.",
    "    (default: reset all data for all event classes)",
    "HISTOGRAM [COMMAND ...]",
    "    Return a cumulative distribution of latencies in the format of a histogram for the "
    "specified command names.",
    "    If no commands are specified then all histograms are replied.",
    "HELP", "    Prints this help.",
]


@command("latency|help")
def latency_help(c: Client, argv: list[bytes]) -> bytes:
    return array_header(len(_HELP)) + b"".join(simple(ln) for ln in _HELP)
