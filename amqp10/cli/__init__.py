"""The ``amqp10`` command: ``broker``, ``users``, and (as they land) ``send``/``receive``/``bench``.

Errors a person sees are one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import getpass
import logging
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["main"]


class _KeyValueFormatter(logging.Formatter):
    """Structured log lines: ``ts=... level=... logger=... msg="..."``."""

    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        msg = record.getMessage().replace('"', "'")
        line = f'ts={ts}.{int(record.msecs):03d}Z level={record.levelname.lower()} logger={record.name} msg="{msg}"'
        if record.exc_info:
            line += f' exc="{self.formatException(record.exc_info).splitlines()[-1]}"'
        return line


def _setup_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_KeyValueFormatter())
    root = logging.getLogger("amqp10")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False


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


def _cmd_broker(args: argparse.Namespace) -> int:
    import anyio

    from ..broker.config import ConfigError, load_config
    from ..broker.service import BrokerService

    overrides: dict[str, Any] = {}
    if args.host or args.port is not None:
        overrides["listeners"] = [
            {"host": args.host or "127.0.0.1", "port": 5672 if args.port is None else args.port}
        ]
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
    try:
        config = load_config(Path(args.config) if args.config else None, **overrides)
    except ConfigError as exc:
        print(f"amqp10 broker: {exc}", file=sys.stderr)
        return 2
    _setup_logging(config.log_level)
    _tune_gc()

    async def run() -> None:
        service = BrokerService(config)
        async with anyio.create_task_group() as tg:
            await tg.start(service.run)
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for sig in signals:
                    logging.getLogger("amqp10.broker").info(
                        "received %s: shutting down", signal.Signals(sig).name
                    )
                    tg.cancel_scope.cancel()
                    break

    try:
        anyio.run(run)
    except KeyboardInterrupt:  # pragma: no cover - a second Ctrl-C
        return 130
    except Exception as exc:
        print(f"amqp10 broker: {exc}", file=sys.stderr)
        return 1
    return 0


def _cmd_users_add(args: argparse.Namespace) -> int:
    from ..broker.users import UsersFileError, add_user

    password = args.password
    if password is None:
        password = getpass.getpass(f"password for {args.name}: ")
    try:
        add_user(Path(args.file), args.name, password, iterations=args.iterations)
    except (UsersFileError, ValueError) as exc:
        print(f"amqp10 users: {exc}", file=sys.stderr)
        return 2
    print(f"added {args.name} to {args.file}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="amqp10", description="A pure-Python AMQP 1.0 peer.")
    sub = p.add_subparsers(dest="command", required=True)

    b = sub.add_parser("broker", help="run the broker (queues, topics, durable store)")
    b.add_argument("--config", "-c", help="TOML configuration file")
    b.add_argument("--host", help="listen address (default 127.0.0.1)")
    b.add_argument("--port", type=int, help="listen port (default 5672)")
    b.add_argument("--data-dir", help="directory of the SQLite store (default ./data)")
    b.add_argument("--users-file", help="users file with SCRAM credentials (amqp10 users add)")
    b.add_argument("--no-anonymous", action="store_true", help="refuse SASL ANONYMOUS")
    b.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    b.set_defaults(func=_cmd_broker)

    u = sub.add_parser("users", help="manage the broker's users file")
    usub = u.add_subparsers(dest="users_command", required=True)
    ua = usub.add_parser("add", help="add or replace a user (asks for the password)")
    ua.add_argument("file")
    ua.add_argument("name")
    ua.add_argument("--password", help="the password (default: ask)")
    ua.add_argument("--iterations", type=int, default=4096)
    ua.set_defaults(func=_cmd_users_add)

    from .bench.harness import add_parser as _add_bench_parser

    _add_bench_parser(sub)

    from .sendrecv import add_parsers as _add_send_receive_parsers

    _add_send_receive_parsers(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result
