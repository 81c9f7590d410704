"""The broker's users file: SCRAM credentials per user, never plain passwords.

The file is TOML::

    secret = "<hex>"          # keys decoy credentials for unknown users (stable across restarts)

    [users.alice]
    credentials = ["SCRAM-SHA-256$4096$<salt>$<stored key>$<server key>", ...]

``amqp10 users add FILE NAME`` writes entries (asking for the password).
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from ..sasl.credentials import (
    CredentialFormatError,
    InMemoryCredentialStore,
    format_scram_credential,
    make_scram_credential,
    parse_scram_credential,
)

__all__ = ["UsersFileError", "add_user", "load_users"]

HASHES = ("SHA-1", "SHA-256", "SHA-512")


class UsersFileError(Exception):
    """A problem with the users file, worded for a person (one line)."""


def _read(path: Path) -> dict[str, object]:
    try:
        return tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise UsersFileError(f"users file not found: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsersFileError(f"{path}: not valid TOML: {exc}") from None


def load_users(path: Path) -> InMemoryCredentialStore:
    """A credential store holding every user of the file."""
    data = _read(path)
    secret_hex = data.get("secret")
    secret = None
    if secret_hex is not None:
        if not isinstance(secret_hex, str):
            raise UsersFileError(f"{path}: secret must be a hex string")
        try:
            secret = bytes.fromhex(secret_hex)
        except ValueError:
            raise UsersFileError(f"{path}: secret must be a hex string") from None
    store = InMemoryCredentialStore(secret=secret)
    users = data.get("users", {})
    if not isinstance(users, dict):
        raise UsersFileError(f"{path}: [users] must be a table")
    for name, entry in users.items():
        creds = entry.get("credentials") if isinstance(entry, dict) else None
        if not isinstance(creds, list) or not creds:
            raise UsersFileError(f"{path}: users.{name}.credentials must be a non-empty list")
        for i, text in enumerate(creds):
            try:
                store.add_credential(name, parse_scram_credential(str(text)))
            except (CredentialFormatError, ValueError) as exc:
                raise UsersFileError(f"{path}: users.{name}.credentials[{i}]: {exc}") from None
    return store


def _toml_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def add_user(path: Path, username: str, password: str, *, iterations: int = 4096) -> None:
    """Add (or replace) ``username`` in the users file, creating the file if needed."""
    data = _read(path) if path.exists() else {}
    users = dict(data.get("users", {}))  # type: ignore[call-overload]
    users[username] = {
        "credentials": [
            format_scram_credential(make_scram_credential(password, h, iterations)) for h in HASHES
        ]
    }
    secret = data.get("secret") or os.urandom(32).hex()
    lines = [f"secret = {_toml_str(str(secret))}", ""]
    for name, entry in users.items():
        lines.append(f"[users.{_toml_str(name)}]")
        creds = ", ".join(_toml_str(c) for c in entry["credentials"])
        lines.append(f"credentials = [{creds}]")
        lines.append("")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("\n".join(lines))
    os.chmod(tmp, 0o600)
    tmp.replace(path)
