"""``slotgate-proxy`` / ``python -m proxy``: one address for a whole Redis Cluster.

    slotgate-proxy --listen 127.0.0.1:7777 --seed 127.0.0.1:7000 [--seed ...]

SIGTERM and SIGINT stop accepting, let in-flight requests finish (``--shutdown-grace-ms``)
and exit 0.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Sequence

import trio

from proxy.server import Proxy
from proxy.settings import ProxySettings, parse_address


def parse_args(argv: Sequence[str] | None = None) -> ProxySettings:
    """Command line -> ``ProxySettings`` (the one place arguments are parsed)."""
    p = argparse.ArgumentParser(prog="slotgate-proxy", description=__doc__.splitlines()[0])
    d = ProxySettings()
    p.add_argument("--listen", default=f"{d.listen_host}:{d.listen_port}",
                   help="host:port to accept clients on (default %(default)s)")
    p.add_argument("--seed", action="append", default=[], required=True,
                   help="host:port of a cluster node; repeat for more (any reachable subset works)")
    for name in ("backend_connections_per_node", "connect_timeout_ms", "command_timeout_ms",
                 "retry_deadline_ms", "max_redirects", "topology_refresh_interval_ms",
                 "max_clients", "max_pipeline_depth", "shutdown_grace_ms"):
        p.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(d, name))
    p.add_argument("--log-level", default="WARNING")
    ns = p.parse_args(argv)
    try:
        host, port = parse_address(ns.listen)
        seeds = [parse_address(s) for s in ns.seed]
    except ValueError as exc:
        p.error(str(exc))
    settings = ProxySettings(listen_host=host, listen_port=port, seeds=seeds)
    for name in ("backend_connections_per_node", "connect_timeout_ms", "command_timeout_ms",
                 "retry_deadline_ms", "max_redirects", "topology_refresh_interval_ms",
                 "max_clients", "max_pipeline_depth", "shutdown_grace_ms"):
        setattr(settings, name, getattr(ns, name))
    try:
        settings.validate()
    except ValueError as exc:
        p.error(str(exc))
    logging.basicConfig(level=ns.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return settings


async def serve(settings: ProxySettings) -> None:
    proxy = Proxy(settings)
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(proxy.run)
            print(f"slotgate-proxy listening on {proxy.listen_address}", flush=True)
            async for _ in signals:
                proxy.shutdown()
                break


def main(argv: Sequence[str] | None = None) -> int:
    settings = parse_args(argv)
    trio.run(serve, settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
