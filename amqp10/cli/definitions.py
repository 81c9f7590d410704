"""``amqp10 definitions``: RabbitMQ definitions files (``rabbitmqctl export_definitions``).

``check FILE`` reads a file and says what an import would do: every unknown field
(with its JSON path), what is read but not applied, what would be skipped and why,
and how many of each kind would be imported.

``import FILE --url URL`` and ``export FILE --url URL`` talk to a running broker
through its ``$management`` node (``import-definitions``, ``export-definitions``;
the URL's user needs the ``administrator`` tag): everything, the broker's topology
(vhosts, exchanges, queues, bindings, policies) and its users file. Offline,
``import FILE --users-file USERS`` takes only the users (with their RabbitMQ
password hashes) and permissions into a users file, and ``export FILE --users-file
USERS`` writes them out in the same format.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ._common import fail
from .admin import Client, Refused, print_import_outcome
from .sendrecv import URL_HELP

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
    i = dsub.add_parser(
        "import", help="import a definitions file into a running broker (or a users file)"
    )
    i.add_argument("file", help="the definitions file (JSON, as RabbitMQ exports it)")
    where = i.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help=f"the running broker: {URL_HELP}")
    where.add_argument(
        "--users-file", help="offline: merge only users and permissions into this users file"
    )
    i.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the broker")
    i.set_defaults(func=cmd_import)
    e = dsub.add_parser(
        "export", help="export a running broker's definitions (or a users file's) as JSON"
    )
    e.add_argument("file", help="where to write the JSON ('-': standard output)")
    where = e.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help=f"the running broker: {URL_HELP}")
    where.add_argument(
        "--users-file", help="offline: export only users and permissions from this users file"
    )
    e.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the broker")
    e.set_defaults(func=cmd_export)
    return d


def _management(args: argparse.Namespace, operation: str, body: str | None) -> Any:
    """Ask the broker at ``args.url``; the reply's body, or None (reported) on failure."""
    import amqp10.sync
    from amqp10 import errors

    try:
        with amqp10.sync.connect(args.url, timeout=args.timeout) as conn:
            reply, _ = Client(conn, "$management", args.timeout).call(operation, body=body)
    except Refused as exc:
        fail("definitions", f"{operation} refused ({exc.status}): {exc.reason}")
        return None
    except (errors.AMQPError, OSError, ValueError) as exc:
        fail("definitions", f"{args.url}: {exc}")
        return None
    return reply


def _import_live(args: argparse.Namespace) -> int:
    try:
        text = Path(args.file).read_text()
    except OSError as exc:
        fail("definitions", str(exc))
        return 2
    outcome = _management(args, "import-definitions", text)
    if not isinstance(outcome, dict):
        return 2
    return print_import_outcome(outcome, args.url)


def _prepare(args: argparse.Namespace, *, users_must_exist: bool) -> Any:
    """Read both files and run the import in memory; None (reported) if one is unreadable."""
    from ..broker.config import BrokerConfig
    from ..broker.core import Broker, ModelError
    from ..broker.definitions import DefinitionsError, import_definitions, load_definitions
    from ..broker.topology import BrokerTopology
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
    # A fresh broker core in memory (no store) holding only what the file declares: it
    # refuses what a running broker would refuse; a binding to a queue that exists only
    # on a running broker is reported as skipped.
    report = import_definitions(defs, users, BrokerTopology(Broker(BrokerConfig())), refused=(ModelError,))
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
    """Run ``amqp10 definitions import``; exit code 0 imported, 1 some entries skipped
    (``--url``) or nothing written because a user or permission entry is bad
    (``--users-file``), 2 a file or the broker cannot be read or written."""
    from ..broker.definitions import ImportReport
    from ..broker.users import UsersFileError, write_users_file

    if args.url is not None:
        return _import_live(args)
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
    """Run ``amqp10 definitions export``; exit code 0 written, 2 a file or the broker
    cannot be read or written."""
    from ..broker.definitions import InMemoryTopology, dump_definitions, export_definitions
    from ..broker.users import UsersFileError, read_users_file

    try:
        if args.url is not None:
            text = _management(args, "export-definitions", None)
            if not isinstance(text, str):
                return 2
        else:
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
