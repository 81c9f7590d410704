"""The ``amqp10`` command: ``broker``, ``users``, ``definitions``, ``admin``, ``bench``, ``send``, ``receive``.

One module per command, each registering its subcommand with ``add_parser``:
:mod:`~amqp10.cli.broker`, :mod:`~amqp10.cli.users`, :mod:`~amqp10.cli.definitions`,
:mod:`~amqp10.cli.admin`,
:mod:`~amqp10.cli.bench` (its harness is a library of its own),
:mod:`~amqp10.cli.sendrecv`. Errors a person sees are one line on stderr,
never a traceback.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from . import admin, broker, definitions, sendrecv, users
from .bench import command as bench

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The ``amqp10`` command's parser, every subcommand included."""
    p = argparse.ArgumentParser(prog="amqp10", description="A pure-Python AMQP 1.0 peer.")
    sub = p.add_subparsers(dest="command", required=True)
    broker.add_parser(sub)
    users.add_parser(sub)
    definitions.add_parser(sub)
    admin.add_parser(sub)
    bench.add_parser(sub)
    sendrecv.add_parsers(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``amqp10`` command with ``argv`` (default: ``sys.argv[1:]``); the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result
