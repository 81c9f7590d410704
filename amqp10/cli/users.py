"""``amqp10 users``: manage the broker's users file (SCRAM credentials)."""

from __future__ import annotations

import argparse
import getpass
from pathlib import Path

from ._common import Subparsers, fail

__all__ = ["add_parser", "cmd_users_add"]


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    """Register ``users`` (and its ``add``) on the ``amqp10`` command's subparsers."""
    u = sub.add_parser("users", help="manage the broker's users file")
    usub = u.add_subparsers(dest="users_command", required=True)
    ua = usub.add_parser("add", help="add or replace a user (asks for the password)")
    ua.add_argument("file", help="the users file (TOML; created if missing)")
    ua.add_argument("name", help="the user name")
    ua.add_argument("--password", help="the password (default: ask)")
    ua.add_argument(
        "--iterations", type=int, default=4096, help="SCRAM hash iterations (default %(default)s)"
    )
    ua.set_defaults(func=cmd_users_add)
    return u


def cmd_users_add(args: argparse.Namespace) -> int:
    """Run ``amqp10 users add``; the exit code: 0 added, 2 refused."""
    from ..broker.users import UsersFileError, add_user

    password = args.password
    if password is None:
        password = getpass.getpass(f"password for {args.name}: ")
    try:
        add_user(Path(args.file), args.name, password, iterations=args.iterations)
    except (UsersFileError, ValueError) as exc:
        fail("users", str(exc))
        return 2
    print(f"added {args.name} to {args.file}")
    return 0
