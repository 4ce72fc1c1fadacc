"""``slotgate-proxy`` / ``python -m proxy``: one address for a whole Redis Cluster.

    slotgate-proxy --config proxy.yaml
    slotgate-proxy --listen 127.0.0.1:7777 --seed 127.0.0.1:7000 [--seed ...] [--metrics H:P]

Flags override the file (proxy/config.py, docs/CONFIG.md). SIGTERM and SIGINT stop accepting,
let in-flight requests finish (``shutdown.grace``) and exit 0; a second signal stops at once.
SIGHUP re-reads the configuration and applies what can change without dropping clients.
Exit status 2: the configuration is invalid (one ``config error:`` line per problem); 1: the
proxy could not start (e.g. its address is in use).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import AsyncIterator, Callable, Sequence

import trio

from proxy.config import (
    Config,
    ConfigError,
    arg_parser,
    config_from_args,
    describe,
    reload_on_sighup,
    set_log_level,
)
from proxy.metrics import MetricsServer, PrometheusMetrics, check_health
from proxy.server import Proxy


async def serve(config: Config, ns: argparse.Namespace) -> None:
    metrics = PrometheusMetrics()
    proxy = Proxy(config.proxy, metrics)
    metrics.topology = proxy.topology

    def apply(new: Config) -> None:
        set_log_level(new.log_level)
        proxy.apply_settings(new.proxy)

    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        await _serve(proxy, metrics, config, ns, apply, signals)


async def _serve(proxy: Proxy, metrics: PrometheusMetrics, config: Config, ns: argparse.Namespace,
                 apply: Callable[[Config], None], signals: AsyncIterator[int]) -> None:
    async with trio.open_nursery() as nursery:

        async def run_proxy(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            await proxy.run(task_status=task_status)
            nursery.cancel_scope.cancel()  # drained: stop the metrics endpoint and watchers

        async def stop_on_signal() -> None:
            async for _ in signals:
                proxy.shutdown()
                break
            async for _ in signals:
                nursery.cancel_scope.cancel()  # a second signal: stop without draining
                return

        nursery.start_soon(stop_on_signal)
        await nursery.start(run_proxy)
        if config.metrics_listen is not None:
            await nursery.start(MetricsServer(metrics, *config.metrics_listen).run)
        await nursery.start(reload_on_sighup, ns, config, apply)
        print(f"slotgate-proxy listening on {proxy.listen_address}", flush=True)


def _leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (possibly nested) exception groups."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]


def main(argv: Sequence[str] | None = None) -> int:
    ns = arg_parser().parse_args(argv)
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
    logging.basicConfig(level=config.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    status = 0
    try:
        trio.run(serve, config, ns)
    except* OSError as group:  # e.g. a listen address in use: say so, no traceback
        for err in _leaves(group):
            logging.getLogger("slotgate").debug("fatal", exc_info=err)
            print(f"slotgate-proxy: {err}", file=sys.stderr)
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
