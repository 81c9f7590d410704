"""``amqp10 definitions``: RabbitMQ definitions files (``rabbitmqctl export_definitions``).

``check FILE`` reads a file and says what an import would do: every unknown field
(with its JSON path), what is read but not applied, what would be skipped and why,
and how many of each kind would be imported. ``import FILE --users-file USERS``
takes the users (with their RabbitMQ password hashes) and permissions into the users
file; ``export FILE --users-file USERS`` writes them out in the same format.
Virtual hosts, exchanges, queues, bindings and policies go to and come from a
running broker, which these commands do not reach yet: ``import`` lists what it
leaves out, ``export`` writes only the virtual hosts that permissions name.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ._common import fail

__all__ = ["add_parser"]

_USERS_PART = ("$.users[", "$.permissions[")
"""JSON paths of the entries that go to the users file."""


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``definitions`` and its verbs on the ``amqp10`` command's subparsers."""
    d: argparse.ArgumentParser = sub.add_parser(
        "definitions", help="RabbitMQ definitions files (JSON)"
    )
    dsub = d.add_subparsers(dest="definitions_command", required=True)
    c = dsub.add_parser("check", help="parse a definitions file and say what would be imported")
    c.add_argument("file", help="the definitions file (JSON, as RabbitMQ exports it)")
    c.add_argument("--users-file", help="the users file an import would merge into")
    c.set_defaults(func=cmd_check)
    i = dsub.add_parser("import", help="import a definitions file's users and permissions")
    i.add_argument("file", help="the definitions file (JSON, as RabbitMQ exports it)")
    i.add_argument("--users-file", required=True, help="the users file to merge them into")
    i.set_defaults(func=cmd_import)
    e = dsub.add_parser("export", help="export the users file as a definitions file")
    e.add_argument("file", help="where to write the JSON ('-': standard output)")
    e.add_argument(
        "--users-file", required=True, help="the users file to export users and permissions from"
    )
    e.set_defaults(func=cmd_export)
    return d


def _prepare(args: argparse.Namespace, *, users_must_exist: bool) -> Any:
    """Read both files and run the import in memory; None (reported) if one is unreadable."""
    from ..broker.definitions import (
        DefinitionsError,
        InMemoryTopology,
        import_definitions,
        load_definitions,
    )
    from ..broker.users import UsersFile, UsersFileError, read_users_file

    try:
        defs, warnings = load_definitions(Path(args.file))
        path = Path(args.users_file) if args.users_file else None
        if path is None or (not users_must_exist and not path.exists()):
            users = UsersFile()
        else:
            users = read_users_file(path)
    except (DefinitionsError, UsersFileError) as exc:
        fail("definitions", str(exc))
        return None
    replaced = [u.name for u in defs.users if u.name in users.users]
    # The topology is a stand-in holding only what the file declares: a binding to a
    # queue that exists only on a running broker is reported as skipped.
    report = import_definitions(defs, users, InMemoryTopology())
    for w in warnings:
        print(f"warning: {w}")
    for e in report.errors:
        print(f"would skip: {e}")
    for name in replaced:
        print(f"would replace user {name!r} of {args.users_file}")
    return users, report


def cmd_check(args: argparse.Namespace) -> int:
    """Run ``amqp10 definitions check``; exit code 0 all importable, 1 some entries would
    be skipped, 2 the file (or the users file) cannot be read."""
    prepared = _prepare(args, users_must_exist=True)
    if prepared is None:
        return 2
    _, report = prepared
    print(f"would import: {report.summary()}")
    return 1 if report.errors else 0


def cmd_import(args: argparse.Namespace) -> int:
    """Run ``amqp10 definitions import``; exit code 0 written, 1 nothing written because
    a user or permission entry is bad, 2 a file cannot be read or written."""
    from ..broker.definitions import ImportReport
    from ..broker.users import UsersFileError, write_users_file

    prepared = _prepare(args, users_must_exist=False)
    if prepared is None:
        return 2
    users, report = prepared
    assert isinstance(report, ImportReport)
    if any(e.startswith(_USERS_PART) for e in report.errors):
        fail("definitions", f"nothing written to {args.users_file}: fix the entries above")
        return 1
    try:
        write_users_file(Path(args.users_file), users)
    except (OSError, UsersFileError) as exc:
        fail("definitions", str(exc))
        return 2
    done = ImportReport({k: report.counts.get(k, 0) for k in ("user", "permission")})
    left = ImportReport({k: n for k, n in report.counts.items() if k not in done.counts})
    print(f"imported into {args.users_file}: {done.summary()}")
    if left.counts:
        print(f"not imported (they need a running broker): {left.summary()}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """Run ``amqp10 definitions export``; exit code 0 written, 2 a file cannot be read
    or written."""
    from ..broker.definitions import InMemoryTopology, dump_definitions, export_definitions
    from ..broker.users import UsersFileError, read_users_file

    try:
        text = dump_definitions(
            export_definitions(read_users_file(Path(args.users_file)), InMemoryTopology())
        )
        if args.file == "-":
            sys.stdout.write(text)
        else:
            Path(args.file).write_text(text)
    except (OSError, UsersFileError) as exc:
        fail("definitions", str(exc))
        return 2
    return 0
