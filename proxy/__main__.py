"""``slotgate-proxy`` / ``python -m slotgate.proxy``: one address for a whole Redis Cluster.

    slotgate-proxy --config proxy.yaml
    slotgate-proxy --listen 127.0.0.1:7777 --seed 127.0.0.1:7000 [--seed ...] [--metrics H:P]

Flags override the file (proxy/ops/config.py, docs/CONFIG.md). SIGTERM and SIGINT stop accepting,
let in-flight requests finish (``shutdown.grace``) and exit 0; a second signal stops at once.
SIGHUP re-reads the configuration and applies what can change without dropping clients.
With ``workers: N`` (N > 1) this process supervises N proxy processes on the same address
(proxy/ops/supervisor.py, docs/PROXY.md "Workers").
Exit status 2: the configuration is invalid (one ``config error:`` line per problem); 1: the
proxy could not start (e.g. its address is in use).
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable, Sequence

import trio

from slotgate import BUILD
from slotgate.proxy.front.server import Proxy
from slotgate.proxy.front.siblings import Siblings
from slotgate.proxy.ops.config import (
    Config,
    ConfigError,
    arg_parser,
    config_from_args,
    describe,
    reload_on_sighup,
    set_log_level,
)
from slotgate.proxy.ops.metrics import MetricsServer, PrometheusMetrics, check_health
from slotgate.proxy.ops.supervisor import Supervisor, WorkerStartError
from slotgate.proxy.ops.workers import Link, WorkerRole, announce_ready
from slotgate.proxy.routing import movelock


def _tune_gc() -> None:
    """The cycle collector, for a process that allocates a few short-lived objects per
    request: what start-up built (modules, the command table) is frozen out of every
    collection, and the youngest generation is collected every 20,000 allocations instead
    of 700 (most requests' objects are freed by reference counting long before: a
    collection mostly walked the requests in flight; bench/RESULTS.md has the figures)."""
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)


async def serve(config: Config, ns: argparse.Namespace, role: WorkerRole | None = None) -> None:
    metrics = PrometheusMetrics()
    if role is None:
        proxy = Proxy(config.proxy, metrics)
    else:
        proxy = Proxy(config.proxy, metrics, worker_index=role.index, worker_count=role.count)
    metrics.topology = proxy.topology

    def apply(new: Config) -> None:
        set_log_level(new.log_level)
        proxy.apply_settings(new.proxy)

    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        await _serve(proxy, metrics, config, ns, apply, signals, role)


async def _serve(proxy: Proxy, metrics: PrometheusMetrics, config: Config, ns: argparse.Namespace,
                 apply: Callable[[Config], None], signals: AsyncIterator[int],
                 role: WorkerRole | None = None) -> None:
    async with trio.open_nursery() as nursery:

        async def run_proxy(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            await proxy.run(task_status=task_status)
            nursery.cancel_scope.cancel()  # drained: stop the metrics endpoint and watchers

        async def stop_on_signal() -> None:
            async for _ in signals:
                proxy.shutdown()
                break
            async for _ in signals:
                proxy.stop_now()  # a second signal: stop without draining
                nursery.cancel_scope.cancel()
                return

        nursery.start_soon(stop_on_signal)
        await nursery.start(run_proxy)
        if role is not None:
            # A supervisor's worker: metrics on a loopback port of its own, for the supervisor.
            listeners = await nursery.start(MetricsServer(metrics, "127.0.0.1", 0).run)
            await nursery.start(reload_on_sighup, ns, config, apply)
            link = trio.SocketStream(trio.socket.fromfd(role.fd, socket.AF_UNIX, socket.SOCK_STREAM))
            os.close(role.fd)  # fromfd made its own copy
            await announce_ready(link, listeners[0].socket.getsockname()[1])
            siblings = proxy.siblings = Siblings(proxy, Link(link))

            async def stop_when_orphaned() -> None:
                await siblings.run()
                logging.getLogger("slotgate").warning("supervisor gone; stopping")
                proxy.shutdown()

            nursery.start_soon(stop_when_orphaned)
            return
        if config.metrics_listen is not None:
            await nursery.start(MetricsServer(metrics, *config.metrics_listen).run)
        await nursery.start(reload_on_sighup, ns, config, apply)
        print(f"slotgate-proxy listening on {proxy.listen_address}", flush=True)


async def supervise(config: Config, args: Sequence[str]) -> None:
    sup = Supervisor(config, args)
    async with trio.open_nursery() as nursery:
        await nursery.start(sup.run)
        print(f"slotgate-proxy listening on {sup.listen_address} ({config.workers} workers)",
              flush=True)


def _leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (possibly nested) exception groups."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    ns = arg_parser().parse_args(args)
    if ns.check_health:
        return check_health(ns.check_health)
    try:
        config = config_from_args(ns)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    if ns.check_config:
        print(describe(config))
        return 0
    role = WorkerRole.parse(ns.worker_role) if ns.worker_role else None
    if role is not None:
        movelock.share_across_processes()  # moves across slots: locks that hold across workers
    who = "" if role is None else f"worker-{role.index} "
    logging.basicConfig(level=config.log_level.upper(),
                        format=f"%(asctime)s %(levelname)s {who}%(name)s: %(message)s")
    if role is None:  # once per proxy, not once per worker
        logging.getLogger("slotgate").info("build: %s", BUILD.describe())
    status = 0
    _tune_gc()
    try:
        if role is None and config.workers > 1:
            trio.run(supervise, config, args)
        else:
            trio.run(serve, config, ns, role)
    except* WorkerStartError as group:
        for err in _leaves(group):
            print(f"slotgate-proxy: {err}", file=sys.stderr)
        status = 1
    except* OSError as group:  # e.g. a listen address in use: say so, no traceback
        for err in _leaves(group):
            logging.getLogger("slotgate").debug("fatal", exc_info=err)
            print(f"slotgate-proxy: {err}", file=sys.stderr)
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
