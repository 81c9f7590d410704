"""``amqp10 definitions``: RabbitMQ definitions files (``rabbitmqctl export_definitions``).

``check FILE`` reads a file and says what an import would do: every unknown field
(with its JSON path), what is read but not applied, what would be skipped and why,
and how many of each kind would be imported. Importing into, and exporting from, a
running broker come with the broker core's virtual hosts and exchanges.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ._common import fail

__all__ = ["add_parser"]


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``definitions`` and its verbs on the ``amqp10`` command's subparsers."""
    d: argparse.ArgumentParser = sub.add_parser(
        "definitions", help="RabbitMQ definitions files (JSON)"
    )
    dsub = d.add_subparsers(dest="definitions_command", required=True)
    c = dsub.add_parser("check", help="parse a definitions file and say what would be imported")
    c.add_argument("file")
    c.add_argument("--users-file", help="the users file an import would merge into")
    c.set_defaults(func=cmd_check)
    return d


def cmd_check(args: argparse.Namespace) -> int:
    """Run ``amqp10 definitions check``; exit code 0 all importable, 1 some entries would
    be skipped, 2 the file (or the users file) cannot be read."""
    from ..broker.definitions import (
        DefinitionsError,
        InMemoryTopology,
        import_definitions,
        load_definitions,
    )
    from ..broker.users import UsersFile, UsersFileError, read_users_file

    try:
        defs, warnings = load_definitions(Path(args.file))
        users = read_users_file(Path(args.users_file)) if args.users_file else UsersFile()
    except (DefinitionsError, UsersFileError) as exc:
        fail("definitions", str(exc))
        return 2
    replaced = [u.name for u in defs.users if u.name in users.users]
    # The fake topology holds only what the file declares: a binding to a queue that
    # exists only on the running broker would be reported as skipped here.
    report = import_definitions(defs, users, InMemoryTopology())
    for w in warnings:
        print(f"warning: {w}")
    for e in report.errors:
        print(f"would skip: {e}")
    for name in replaced:
        print(f"would replace user {name!r} of {args.users_file}")
    print(f"would import: {report.summary()}")
    return 1 if report.errors else 0
