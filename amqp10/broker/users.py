"""The broker's users file: credentials, tags and permissions per user; never plain passwords.

The file is TOML::

    secret = "<hex>"          # keys decoy credentials for unknown users (stable across restarts)

    [users.alice]
    credentials = ["SCRAM-SHA-256$4096$<salt>$<stored key>$<server key>", ...]
    tags = ["administrator"]

    [users.alice.permissions."/"]           # per virtual host: RabbitMQ's three patterns
    configure = ".*"
    write = ".*"
    read = ".*"

``credentials`` holds SCRAM credentials (salted PBKDF2, RFC 5802), or, for a user
imported from a RabbitMQ definitions file, RabbitMQ's password hash
(``rabbit_password_hashing_sha256$<base64>``, usable by PLAIN only); an empty list is
a user who cannot log in with a password (EXTERNAL only). ``tags`` are
:data:`~amqp10.broker.permissions.KNOWN_TAGS`. ``permissions`` maps a virtual host
to its ``configure`` / ``write`` / ``read`` patterns (see
:mod:`amqp10.broker.permissions`); a user may use only the virtual hosts listed.

Files written before permissions existed have neither ``tags`` nor ``permissions``:
a user entry **without** a ``permissions`` key has full permissions (``.*``) on the
virtual host ``/`` only, as RabbitMQ's default user has, which is what every user could
do before. An entry with ``permissions = {}`` has no access at all. This module always
writes the key, so the file says what it means once it has been rewritten.

``amqp10 users ...`` edits the file through :func:`update_users_file`, which
rewrites it atomically (temporary file, then rename), keeping the ``secret`` and
every hash.
"""

from __future__ import annotations

import json
import os
import tempfile
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from ..sasl.credentials import (
    Credential,
    CredentialFormatError,
    InMemoryCredentialStore,
    format_credential,
    make_scram_credential,
    parse_credential,
)
from .config import one_line_error
from .permissions import (
    DEFAULT_VHOST,
    FULL_ACCESS,
    PermissionChecker,
    VhostPermissions,
    check_pattern,
    check_tags,
)

if TYPE_CHECKING:
    from .config import SaslConfig

__all__ = [
    "HASHES",
    "User",
    "UsersFile",
    "UsersFileError",
    "add_user",
    "load_access",
    "load_users",
    "read_users_file",
    "scram_credentials",
    "update_users_file",
    "write_users_file",
]

HASHES = ("SHA-1", "SHA-256", "SHA-512")
"""The SCRAM hashes a new password is stored for (one credential each)."""


class UsersFileError(Exception):
    """A problem with the users file, worded for a person (one line)."""


# --------------------------------------------------------------------------- model


@dataclass(slots=True)
class User:
    """One user: credentials, tags, and permissions per virtual host."""

    credentials: list[Credential] = field(default_factory=list)
    tags: tuple[str, ...] = ()
    permissions: dict[str, VhostPermissions] = field(default_factory=dict)


@dataclass(slots=True)
class UsersFile:
    """The whole file: the decoy ``secret`` (hex) and the users, by name."""

    secret: str | None = None
    users: dict[str, User] = field(default_factory=dict)

    def credential_store(self) -> InMemoryCredentialStore:
        """A credential store holding every user's credentials."""
        # No (or an empty) secret: random decoys, stable only until the next load.
        store = InMemoryCredentialStore(secret=bytes.fromhex(self.secret) if self.secret else None)
        for name, user in self.users.items():
            for credential in user.credentials:
                store.add_credential(name, credential)
        return store

    def permission_table(self) -> dict[str, dict[str, VhostPermissions]]:
        """``{user: {vhost: VhostPermissions}}``, what a :class:`PermissionChecker` takes."""
        return {name: dict(user.permissions) for name, user in self.users.items()}

    def permission_checker(self, *, anonymous_user: str | None = None) -> PermissionChecker:
        """A checker over this file's permissions (see :class:`PermissionChecker`)."""
        tags = {name: user.tags for name, user in self.users.items()}
        return PermissionChecker(self.permission_table(), tags=tags, anonymous_user=anonymous_user)

    def user(self, name: str) -> User:
        """The user called ``name``; raises :class:`UsersFileError` if there is none."""
        try:
            return self.users[name]
        except KeyError:
            raise UsersFileError(f"no user {name!r}") from None


# --------------------------------------------------------------------------- reading


class _Permissions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    configure: str
    write: str
    read: str

    @field_validator("configure", "write", "read")
    @classmethod
    def _regex(cls, v: str) -> str:
        return check_pattern(v)


class _UserEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    credentials: list[str]
    tags: tuple[str, ...] = ()
    permissions: dict[str, _Permissions] | None = None

    @field_validator("tags", mode="before")
    @classmethod
    def _tags(cls, v: object) -> tuple[str, ...]:
        return check_tags(v)


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    secret: str | None = None
    users: dict[str, _UserEntry] = {}

    @field_validator("secret")
    @classmethod
    def _hex(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                bytes.fromhex(v)
            except ValueError:
                raise ValueError("secret must be a hex string") from None
        return v


def read_users_file(path: Path) -> UsersFile:
    """Read and validate the users file; raises :class:`UsersFileError` (one line)."""
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise UsersFileError(f"users file not found: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsersFileError(f"{path}: not valid TOML: {exc}") from None
    try:
        parsed = _File.model_validate(data)
    except ValidationError as exc:
        raise UsersFileError(f"{path}: {one_line_error(exc)}") from None
    result = UsersFile(secret=parsed.secret)
    for name, entry in parsed.users.items():
        credentials: list[Credential] = []
        for i, text in enumerate(entry.credentials):
            try:
                credentials.append(parse_credential(text))
            except (CredentialFormatError, ValueError) as exc:
                raise UsersFileError(f"{path}: users.{name}.credentials[{i}]: {exc}") from None
        if entry.permissions is None:
            permissions = {DEFAULT_VHOST: FULL_ACCESS}  # a file from before permissions
        else:
            permissions = {
                vhost: VhostPermissions(p.configure, p.write, p.read)
                for vhost, p in entry.permissions.items()
            }
        result.users[name] = User(credentials, entry.tags, permissions)
    return result


def load_users(path: Path) -> InMemoryCredentialStore:
    """A credential store holding every user of the file."""
    users = read_users_file(path)
    try:
        return users.credential_store()
    except ValueError as exc:  # a name SASLprep refuses
        raise UsersFileError(f"{path}: {exc}") from None


def load_access(sasl: SaslConfig) -> tuple[InMemoryCredentialStore | None, PermissionChecker]:
    """The credential store and permission checker the ``[sasl]`` configuration asks for.

    Without a users file: no store, and a checker that allows everything (only
    ANONYMOUS and EXTERNAL connections exist then, and they could always do
    everything). With one: its users, and its permissions; anonymous connections get
    ``anonymous_user``'s permissions, or full access to ``/`` if it is not set.
    """
    if sasl.users_file is None:
        return None, PermissionChecker.allow_all()
    path = Path(sasl.users_file)
    users = read_users_file(path)
    if sasl.anonymous_user is not None and sasl.anonymous_user not in users.users:
        raise UsersFileError(
            f"{path}: anonymous_user {sasl.anonymous_user!r} is not one of its users"
        )
    try:
        store = users.credential_store()
    except ValueError as exc:
        raise UsersFileError(f"{path}: {exc}") from None
    return store, users.permission_checker(anonymous_user=sasl.anonymous_user)


# --------------------------------------------------------------------------- writing


def _toml_str(s: str) -> str:
    # A JSON string is a TOML basic string (same escapes, \uXXXX for controls), except
    # that TOML wants DEL escaped too.
    return json.dumps(s, ensure_ascii=False).replace("\x7f", "\\u007f")


def _toml_list(items: Iterable[str]) -> str:
    return "[" + ", ".join(_toml_str(i) for i in items) + "]"


def _render(users: UsersFile) -> str:
    lines = [f"secret = {_toml_str(users.secret or '')}", ""]
    for name, user in users.users.items():
        key = f"users.{_toml_str(name)}"
        lines.append(f"[{key}]")
        lines.append(f"credentials = {_toml_list(format_credential(c) for c in user.credentials)}")
        lines.append(f"tags = {_toml_list(user.tags)}")
        if not user.permissions:
            lines.append("permissions = {}  # no access to any virtual host")
        lines.append("")
        for vhost, perms in user.permissions.items():
            lines.append(f"[{key}.permissions.{_toml_str(vhost)}]")
            lines.extend(
                f"{a} = {_toml_str(perms.pattern(a))}" for a in ("configure", "write", "read")
            )
            lines.append("")
    return "\n".join(lines)


def write_users_file(path: Path, users: UsersFile) -> None:
    """Write the file atomically (a temporary file in the same directory, then a rename),
    readable by its owner only; a missing or empty ``secret`` is drawn at random."""
    if not users.secret:
        users.secret = os.urandom(32).hex()
    text = _render(users)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def update_users_file(
    path: Path, change: Callable[[UsersFile], Any], *, create: bool = False
) -> None:
    """Read the file (or start an empty one if ``create`` and it does not exist), apply
    ``change`` to it, and write it back atomically."""
    users = UsersFile() if create and not path.exists() else read_users_file(path)
    change(users)
    write_users_file(path, users)


def scram_credentials(password: str, *, iterations: int = 4096) -> list[Credential]:
    """SCRAM credentials for ``password``, one per hash of :data:`HASHES`."""
    return [make_scram_credential(password, h, iterations) for h in HASHES]


def add_user(
    path: Path,
    username: str,
    password: str,
    *,
    iterations: int = 4096,
    tags: Iterable[str] | None = None,
    permissions: dict[str, VhostPermissions] | None = None,
) -> bool:
    """Add ``username`` (creating the file if needed), or change its password; True if new.

    An existing user keeps its tags and permissions unless new ones are given. A new
    user gets ``permissions`` if given, else full permissions on ``/`` (what a user
    could do before permissions existed; ``{}`` gives none, as RabbitMQ's
    ``add_user`` does).
    """
    if not username:
        raise ValueError("the user name must not be empty")
    credentials = scram_credentials(password, iterations=iterations)
    new = False

    def change(users: UsersFile) -> None:
        nonlocal new
        user = users.users.get(username)
        if user is None:
            new = True
            default = {DEFAULT_VHOST: FULL_ACCESS} if permissions is None else permissions
            user = users.users[username] = User(permissions=dict(default))
        elif permissions is not None:
            user.permissions = dict(permissions)
        user.credentials = credentials
        if tags is not None:
            user.tags = check_tags(list(tags))

    update_users_file(path, change, create=True)
    return new
