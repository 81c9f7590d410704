"""``amqp10 broker``: run the broker until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from ._common import KeyValueFormatter, Subparsers, fail, first_error, log_to_stderr

if TYPE_CHECKING:
    from ..broker.config import BrokerConfig
    from ..broker.workers.supervisor import Sockets

__all__ = ["add_parser", "cmd_broker"]


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    """Register ``broker`` on the ``amqp10`` command's subparsers."""
    b = sub.add_parser("broker", help="run the broker (queues, topics, durable store)")
    b.add_argument("--config", "-c", help="TOML configuration file")
    b.add_argument("--host", help="listen address (default 127.0.0.1)")
    b.add_argument("--port", type=int, help="listen port (default 5672)")
    b.add_argument(
        "--http-port",
        type=int,
        help="port of the HTTP listener: AMQP over WebSockets, /healthz, /readyz (default 8672)",
    )
    b.add_argument("--no-http", action="store_true", help="no HTTP listener")
    b.add_argument("--data-dir", help="directory of the SQLite store (default ./data)")
    b.add_argument("--users-file", help="users file with SCRAM credentials (amqp10 users add)")
    b.add_argument("--no-anonymous", action="store_true", help="refuse SASL ANONYMOUS")
    b.add_argument(
        "--log-level",
        choices=["debug", "info", "warning", "error"],
        help="least severe log lines written to stderr (default info)",
    )
    b.add_argument(
        "--workers",
        help="broker processes behind the same ports, a number or 'auto' (one per core; default 1)",
    )
    b.set_defaults(func=cmd_broker)
    return b


def _tune_gc() -> None:
    """Garbage collection for a process that holds many long-lived objects.

    Queued messages and deliveries survive many young collections; with the
    default thresholds the collector re-walks them all the time (about 6% of the
    broker's CPU under load, bench/RESULTS.md). Collect the young generation
    less often, and move what start-up built out of the collector's way.
    """
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


def cmd_broker(args: argparse.Namespace) -> int:
    """Run ``amqp10 broker`` until a signal; the exit code: 0 stopped, 1 failed, 2 a bad config."""
    from ..broker.config import ConfigError, load_config

    overrides: dict[str, object] = {}
    if args.host or args.port is not None:
        overrides["listeners"] = [
            {"host": args.host or "127.0.0.1", "port": 5672 if args.port is None else args.port}
        ]
    if args.no_http or args.http_port is not None:
        http: dict[str, object] = {"enabled": not args.no_http}
        if args.http_port is not None:
            http["port"] = args.http_port
        overrides["http"] = http
    if args.data_dir:
        overrides["store"] = {"path": str(Path(args.data_dir) / "amqp10.sqlite3")}
    if args.users_file:
        overrides["sasl"] = {
            "users_file": args.users_file,
            "allow_anonymous": not args.no_anonymous,
        }
    elif args.no_anonymous:
        overrides["sasl"] = {"allow_anonymous": False}
    if args.log_level:
        overrides["log_level"] = args.log_level
    if args.workers:
        overrides["workers"] = args.workers
    try:
        config = load_config(Path(args.config) if args.config else None, **overrides)
    except ConfigError as exc:
        fail("broker", str(exc))
        return 2
    count = config.worker_count()
    log_to_stderr(KeyValueFormatter(), config.log_level.upper())
    _tune_gc()
    if count == 1:
        return _serve(config)
    from ..broker.workers.supervisor import Supervisor

    try:
        return Supervisor(config, count, _serve_as_worker).run()
    except Exception as exc:  # e.g. a port in use: one line
        fail("broker", str(first_error(exc)))
        return 1


def _serve_as_worker(index: int, config: BrokerConfig, sockets: Sockets) -> int:
    """A worker process of the supervisor: its log lines say which."""
    log_to_stderr(KeyValueFormatter(worker=index), config.log_level.upper())
    return _serve(config, worker=index, sockets=sockets)


def _serve(config: BrokerConfig, *, worker: int | None = None, sockets: Sockets | None = None) -> int:
    """Run a broker service until SIGINT or SIGTERM; the exit code."""
    import anyio

    from ..broker.service import BrokerService, serve_until_signalled

    service = BrokerService(config, worker=worker, sockets=sockets)
    try:
        anyio.run(serve_until_signalled, service)
    except KeyboardInterrupt:  # pragma: no cover - a second Ctrl-C
        return 130
    except Exception as exc:  # e.g. a port in use: one line, not the task group's wrapper
        fail("broker" if worker is None else f"broker (worker {worker})", str(first_error(exc)))
        return 1
    return 0
