"""``slotgate-node [config-file] [--directive value ...]``: run one node in the foreground.

Logs like redis-server (``<pid>:M <date> <level> <message>``), including a start line with
`` PID: <pid>`` and ``Ready to accept connections``. Exit status 1 on a config error or when
the port cannot be bound ("Failed listening on port ..."). SIGTERM/SIGINT shut down cleanly.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from typing import TYPE_CHECKING

import trio

from slotgate import BUILD
from slotgate.node.core.config import LOG_LEVELS, LOG_VERBOSE, REDIS_VERSION, ConfigError, load

if TYPE_CHECKING:
    from slotgate.node.core.server import Server

_MARKS = {logging.DEBUG: ".", LOG_VERBOSE: "-", logging.INFO: "*", logging.WARNING: "#",
          logging.ERROR: "#", logging.CRITICAL: "#"}


class _RedisStyle(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        t = time.localtime(record.created)
        ms = int(record.msecs)
        stamp = time.strftime("%d %b %Y %H:%M:%S", t) + f".{ms:03d}"
        text = f"{os.getpid()}:M {stamp} {_MARKS.get(record.levelno, '*')} {record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def _setup_logging(level: str, logfile: str) -> None:
    handler: logging.Handler
    handler = logging.FileHandler(logfile) if logfile else logging.StreamHandler(sys.stdout)
    handler.setFormatter(_RedisStyle())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(LOG_LEVELS.get(level, logging.INFO))


async def _serve(server: Server) -> None:
    log = logging.getLogger("node")
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:

            async def watch_signals() -> None:
                async for sig in signals:
                    name = "SIGTERM" if sig == signal.SIGTERM else "SIGINT"
                    log.warning("Received %s scheduling shutdown...", name)
                    log.info("User requested shutdown...")
                    server.request_shutdown()
                    nursery.cancel_scope.cancel()
                    return

            nursery.start_soon(watch_signals)
            await server.run()
            nursery.cancel_scope.cancel()
    log.warning("Redis is now ready to exit, bye bye...")


def _first_leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in ("-v", "--version"):
        print(f"slotgate-node (Redis {REDIS_VERSION} compatible)")
        return 0
    try:
        cfg = load(args)
    except ConfigError as e:
        print(str(e), file=sys.stderr)
        return 1
    workdir = str(cfg.get("dir"))
    try:
        os.makedirs(workdir, exist_ok=True)
        os.chdir(workdir)
    except OSError as e:
        print(f"Can't chdir to '{workdir}': {e.strerror}", file=sys.stderr)
        return 1
    cfg.values["dir"] = os.getcwd()  # CONFIG GET dir shows the working directory, as Redis
    # the log file is opened in ``dir``, wherever the two directives stand (Redis opens it
    # relative to the working directory that ``dir`` set)
    _setup_logging(str(cfg.get("loglevel")), str(cfg.get("logfile")))
    log = logging.getLogger("node")
    # Imported here: --version and a config error answer without loading the node.
    from slotgate.node.core.server import Server
    from slotgate.node.persistence.manager import PersistenceError

    server = Server(cfg)
    mode = "cluster" if server.cluster_enabled else "standalone"
    log.info("oO0OoO0OoO0Oo slotgate node is starting oO0OoO0OoO0Oo")
    log.info("slotgate node (Redis %s compatible), bits=64, pid=%d, just started",
             REDIS_VERSION, os.getpid())
    log.info("Running mode=%s, port=%d. PID: %d", mode, server.port, os.getpid())
    log.info("Build: %s", BUILD.describe())
    failed: list[OSError] = []
    load_failed = False
    try:
        trio.run(_serve, server)
    except* OSError as group:
        failed.extend(e for e in group.exceptions if isinstance(e, OSError))
    except* PersistenceError as group:  # the start-up load failed (after listening, as Redis)
        log.warning("%s", _first_leaf(group))
        log.warning("Unrecoverable error loading the data set, aborting now.")
        load_failed = True
    except* KeyboardInterrupt:
        pass
    if load_failed:
        return 1
    if failed:
        first = failed[0]
        log.warning("Failed listening on port %d (tcp), aborting. (%s)", server.port,
                    first.strerror or first)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
