"""``amqp10 users``: manage the broker's users file (credentials, tags, permissions).

The verbs follow ``rabbitmqctl``'s (``add_user``, ``delete_user``, ``list_users``,
``set_user_tags``, ``set_permissions``, ``clear_permissions``, ``list_permissions``),
each taking the users file first. Every change rewrites the file atomically and
keeps its ``secret`` and every other user's hashes.
"""

from __future__ import annotations

import argparse
import getpass
from collections.abc import Callable
from pathlib import Path

from ._common import Subparsers, fail

__all__ = ["add_parser"]


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    """Register ``users`` and its verbs on the ``amqp10`` command's subparsers."""
    u: argparse.ArgumentParser = sub.add_parser("users", help="manage the broker's users file")
    usub = u.add_subparsers(dest="users_command", required=True)

    def verb(
        name: str, help: str, func: Callable[[argparse.Namespace], str]
    ) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = usub.add_parser(name, help=help)
        p.add_argument("file", help="the users file (TOML)")
        p.set_defaults(func=lambda args: _run(func, args))
        return p

    ua = verb("add", "add a user, or change a user's password (asks for it)", _add)
    ua.add_argument("name", help="the user name")
    ua.add_argument("--password", help="the password (default: ask)")
    ua.add_argument(
        "--iterations", type=int, default=4096, help="SCRAM hash iterations (default %(default)s)"
    )
    ua.add_argument("--tags", help="comma-separated tags for the user")
    ua.add_argument(
        "--no-permissions",
        action="store_true",
        help="give a new user no permissions (default: full permissions on vhost '/')",
    )

    verb("delete", "delete a user", _delete).add_argument("name", help="the user name")
    verb("list", "list the users and their tags", _list)

    st = verb("set-tags", "set a user's tags (none: clear them)", _set_tags)
    st.add_argument("name", help="the user name")
    st.add_argument(
        "tags",
        nargs="*",
        metavar="TAG",
        help="the tags (administrator, management, monitoring, policymaker)",
    )

    sp = verb("set-permissions", "set a user's permissions on a virtual host", _set_permissions)
    sp.add_argument("--vhost", default="/", help="the virtual host (default %(default)s)")
    sp.add_argument("name", help="the user name")
    sp.add_argument("configure", help="regular expression over names the user may declare/delete")
    sp.add_argument("write", help="regular expression over names the user may publish to")
    sp.add_argument("read", help="regular expression over names the user may consume/bind from")

    cp = verb(
        "clear-permissions", "take a user's access to a virtual host away", _clear_permissions
    )
    cp.add_argument("--vhost", default="/", help="the virtual host (default %(default)s)")
    cp.add_argument("name", help="the user name")

    lp = verb(
        "list-permissions", "list the users' permissions on a virtual host", _list_permissions
    )
    lp.add_argument("--vhost", default="/", help="the virtual host (default %(default)s)")
    return u


def _run(func: Callable[[argparse.Namespace], str], args: argparse.Namespace) -> int:
    """Run a verb; the exit code: 0 done, 2 refused (with one line on stderr)."""
    from ..broker.users import UsersFileError

    try:
        out = func(args)
    except (UsersFileError, ValueError) as exc:
        fail("users", str(exc))
        return 2
    if out:
        print(out)
    return 0


def _add(args: argparse.Namespace) -> str:
    from ..broker.users import add_user

    password = args.password
    if password is None:
        password = getpass.getpass(f"password for {args.name}: ")
    new = add_user(
        Path(args.file),
        args.name,
        password,
        iterations=args.iterations,
        tags=None if args.tags is None else args.tags.split(","),
        permissions={} if args.no_permissions else None,
    )
    if not new:
        return f"changed the password of {args.name} in {args.file}"
    access = "no permissions" if args.no_permissions else "full permissions on vhost '/'"
    return f"added {args.name} to {args.file} ({access})"


def _delete(args: argparse.Namespace) -> str:
    from ..broker.users import UsersFile, update_users_file

    def change(users: UsersFile) -> None:
        users.user(args.name)
        del users.users[args.name]

    update_users_file(Path(args.file), change)
    return f"deleted {args.name} from {args.file}"


def _list(args: argparse.Namespace) -> str:
    from ..broker.users import read_users_file

    users = read_users_file(Path(args.file))
    return "\n".join(f"{name}\t[{', '.join(u.tags)}]" for name, u in users.users.items())


def _set_tags(args: argparse.Namespace) -> str:
    from ..broker.permissions import check_tags
    from ..broker.users import UsersFile, update_users_file

    tags = check_tags(args.tags)

    def change(users: UsersFile) -> None:
        users.user(args.name).tags = tags

    update_users_file(Path(args.file), change)
    return f"tags of {args.name}: [{', '.join(tags)}]"


def _set_permissions(args: argparse.Namespace) -> str:
    from ..broker.permissions import VhostPermissions
    from ..broker.users import UsersFile, update_users_file

    perms = VhostPermissions(args.configure, args.write, args.read)

    def change(users: UsersFile) -> None:
        users.user(args.name).permissions[args.vhost] = perms

    update_users_file(Path(args.file), change)
    return f"set permissions of {args.name} on vhost {args.vhost!r}"


def _clear_permissions(args: argparse.Namespace) -> str:
    from ..broker.users import UsersFile, UsersFileError, update_users_file

    def change(users: UsersFile) -> None:
        if users.user(args.name).permissions.pop(args.vhost, None) is None:
            raise UsersFileError(f"{args.name} has no permissions on vhost {args.vhost!r}")

    update_users_file(Path(args.file), change)
    return f"cleared permissions of {args.name} on vhost {args.vhost!r}"


def _list_permissions(args: argparse.Namespace) -> str:
    from ..broker.users import read_users_file

    users = read_users_file(Path(args.file))
    rows = ["user\tconfigure\twrite\tread"]
    for name, user in users.users.items():
        p = user.permissions.get(args.vhost)
        if p is not None:
            rows.append(f"{name}\t{p.configure}\t{p.write}\t{p.read}")
    return "\n".join(rows)
