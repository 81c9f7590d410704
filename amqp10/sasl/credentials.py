"""Stored SCRAM credentials and credential stores.

A server never keeps plain passwords: it keeps, per user and hash, the salt, iteration
count, StoredKey and ServerKey of RFC 5802. PLAIN is checked against the same records.

A user imported from RabbitMQ may instead have a :class:`PasswordHashCredential`
(RabbitMQ's ``rabbit_password_hashing_sha256``: a 4-byte salt and H(salt + password)).
Such a hash cannot answer a SCRAM exchange, so it serves PLAIN only; a store keeps it
under the mechanism name "PLAIN".
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar, Final, Protocol, TypeAlias

from .scram import SCRAM_HASHES, SaslPrepError, b64encode, saslprep, scram_hash

__all__ = [
    "DEFAULT_ITERATIONS",
    "DEFAULT_SALT_SIZE",
    "PASSWORD_HASH_ALGORITHMS",
    "Credential",
    "CredentialFormatError",
    "CredentialStore",
    "InMemoryCredentialStore",
    "PasswordHashCredential",
    "ScramCredential",
    "format_credential",
    "format_scram_credential",
    "make_decoy_credential",
    "make_password_hash",
    "make_scram_credential",
    "parse_credential",
    "parse_scram_credential",
    "verify_password",
]

DEFAULT_ITERATIONS = 4096
"""RFC 5802/7677's minimum; the default for new credentials."""

DEFAULT_SALT_SIZE = 16
"""Salt length in bytes for new credentials (RFC 7677's example uses 16)."""


class CredentialFormatError(ValueError):
    """A serialized credential (e.g. a users-file entry) that cannot be parsed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ScramCredential:
    """What a server stores for one user and one SCRAM hash (RFC 5802 §3)."""

    hash_name: str
    """The SCRAM hash, "SHA-1", "SHA-256" or "SHA-512"."""
    salt: bytes = field(repr=False)
    iterations: int
    stored_key: bytes = field(repr=False)
    """H(ClientKey): lets the server check a proof without being able to make one."""
    server_key: bytes = field(repr=False)
    """HMAC(SaltedPassword, "Server Key"): signs the server-final-message."""

    def __post_init__(self) -> None:
        if self.hash_name not in SCRAM_HASHES:
            raise ValueError(f"hash_name must be one of {', '.join(SCRAM_HASHES)}")
        digest_size = SCRAM_HASHES[self.hash_name].digest_size
        if not self.salt:
            raise ValueError("salt must not be empty")
        if self.iterations < 1:
            raise ValueError("iterations must be positive")
        if len(self.stored_key) != digest_size or len(self.server_key) != digest_size:
            raise ValueError(f"{self.hash_name} keys must be {digest_size} bytes long")

    @property
    def mechanism(self) -> str:
        """The SASL mechanism this credential serves, e.g. "SCRAM-SHA-256"."""
        return f"SCRAM-{self.hash_name}"


PASSWORD_HASH_ALGORITHMS: Final[dict[str, str]] = {
    "rabbit_password_hashing_sha256": "sha256",
    "rabbit_password_hashing_sha512": "sha512",
    "rabbit_password_hashing_md5": "md5",
}
"""RabbitMQ's password hashing modules, by the name its definitions use, and their hashlib hash."""

_PASSWORD_HASH_SALT_SIZE: Final = 4


@dataclass(frozen=True, slots=True, kw_only=True)
class PasswordHashCredential:
    """A RabbitMQ password hash: ``salt`` (4 bytes) and H(salt + UTF-8 password).

    What ``rabbitmqctl export_definitions`` writes as ``password_hash`` (base64 of salt
    followed by digest). Verifiable against a cleartext password (PLAIN), useless for
    SCRAM, which needs keys derived with PBKDF2.
    """

    algorithm: str
    """The RabbitMQ name, e.g. "rabbit_password_hashing_sha256"."""
    salt: bytes = field(repr=False)
    digest: bytes = field(repr=False)

    mechanism: ClassVar[str] = "PLAIN"
    """The only mechanism that can use it (and the key a store files it under)."""

    def __post_init__(self) -> None:
        hash_name = PASSWORD_HASH_ALGORITHMS.get(self.algorithm)
        if hash_name is None:
            known = ", ".join(PASSWORD_HASH_ALGORITHMS)
            raise ValueError(
                f"unknown hashing algorithm {self.algorithm[:60]!r} (expected {known})"
            )
        if len(self.salt) != _PASSWORD_HASH_SALT_SIZE:
            raise ValueError(f"salt must be {_PASSWORD_HASH_SALT_SIZE} bytes long")
        size = hashlib.new(hash_name).digest_size
        if len(self.digest) != size:
            raise ValueError(f"{self.algorithm} digest must be {size} bytes long")

    @classmethod
    def from_rabbit(cls, password_hash: str, algorithm: str) -> PasswordHashCredential:
        """Parse RabbitMQ's ``password_hash`` (base64 of salt + digest); raises ValueError."""
        try:
            raw = base64.b64decode(password_hash.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError):
            raise CredentialFormatError("password_hash is not valid base64") from None
        return cls(
            algorithm=algorithm,
            salt=raw[:_PASSWORD_HASH_SALT_SIZE],
            digest=raw[_PASSWORD_HASH_SALT_SIZE:],
        )

    def to_rabbit(self) -> str:
        """RabbitMQ's ``password_hash`` form: base64 of salt + digest."""
        return b64encode(self.salt + self.digest)

    def verify(self, password: str) -> bool:
        """Whether ``password`` is the one hashed; compares in constant time."""
        digest = _rabbit_digest(PASSWORD_HASH_ALGORITHMS[self.algorithm], self.salt, password)
        return hmac.compare_digest(digest, self.digest)


def _rabbit_digest(hash_name: str, salt: bytes, password: str) -> bytes:
    """RabbitMQ's password hash: H(salt + UTF-8 password)."""
    return hashlib.new(hash_name, salt + password.encode("utf-8", "surrogatepass")).digest()


def make_password_hash(
    password: str, algorithm: str = "rabbit_password_hashing_sha256", salt: bytes | None = None
) -> PasswordHashCredential:
    """Hash ``password`` the way RabbitMQ does (for tests and tools that must produce one)."""
    hash_name = PASSWORD_HASH_ALGORITHMS.get(algorithm)
    if hash_name is None:
        raise ValueError(f"unknown hashing algorithm {algorithm[:60]!r}")
    if salt is None:
        salt = os.urandom(_PASSWORD_HASH_SALT_SIZE)
    digest = _rabbit_digest(hash_name, salt, password)
    return PasswordHashCredential(algorithm=algorithm, salt=salt, digest=digest)


Credential: TypeAlias = ScramCredential | PasswordHashCredential
"""Anything a store may hold for a user."""


def make_scram_credential(
    password: str,
    hash_name: str,
    iterations: int = DEFAULT_ITERATIONS,
    salt: bytes | None = None,
) -> ScramCredential:
    """Derive the stored credential for `password` (SASLprepped as a stored string).

    `hash_name` is "SHA-256" or "SCRAM-SHA-256" style; a random salt is drawn if none is
    given. Raises `SaslPrepError` (a ValueError) for a password SASLprep refuses.
    """
    h = scram_hash(hash_name)
    if iterations < 1:
        raise ValueError("iterations must be positive")
    if salt is None:
        salt = os.urandom(DEFAULT_SALT_SIZE)
    salted = h.salted_password(saslprep(password, allow_unassigned=False), salt, iterations)
    return ScramCredential(
        hash_name=h.name,
        salt=salt,
        iterations=iterations,
        stored_key=h.digest(h.client_key(salted)),
        server_key=h.server_key(salted),
    )


def verify_password(credential: Credential, password: str) -> bool:
    """Check a cleartext password (from PLAIN) against a stored credential.

    For SCRAM, costs one PBKDF2 run at the credential's iteration count; compares in
    constant time.
    """
    if isinstance(credential, PasswordHashCredential):
        return credential.verify(password)
    h = scram_hash(credential.hash_name)
    try:
        prepared = saslprep(password)
    except SaslPrepError:
        return False
    salted = h.salted_password(prepared, credential.salt, credential.iterations)
    return hmac.compare_digest(h.digest(h.client_key(salted)), credential.stored_key)


def make_decoy_credential(
    secret: bytes, username: str, hash_name: str, iterations: int = DEFAULT_ITERATIONS
) -> ScramCredential:
    """A deterministic, unusable credential for a user that does not exist.

    SCRAM reveals the salt before the proof, so answering an unknown user at once, or with
    a fresh random salt each time, would tell an attacker which names exist. The decoy's
    salt depends only on `secret` and the name, so it is stable across attempts; its keys
    are keyed hashes no password can produce.
    """
    h = scram_hash(hash_name)
    label = b"\x00".join((h.name.encode(), username.encode("utf-8", "surrogatepass")))
    salt = hmac.digest(secret, b"amqp10 scram decoy salt\x00" + label, "sha256")
    return ScramCredential(
        hash_name=h.name,
        salt=salt[:DEFAULT_SALT_SIZE],
        iterations=iterations,
        stored_key=h.hmac(secret, b"amqp10 scram decoy stored key\x00" + label),
        server_key=h.hmac(secret, b"amqp10 scram decoy server key\x00" + label),
    )


# --------------------------------------------------------------------------- text form

_FIELDS = 5


def format_scram_credential(credential: ScramCredential) -> str:
    """Serialize as `SCRAM-SHA-256$<iterations>$<b64 salt>$<b64 StoredKey>$<b64 ServerKey>`."""
    return "$".join(
        (
            credential.mechanism,
            str(credential.iterations),
            b64encode(credential.salt),
            b64encode(credential.stored_key),
            b64encode(credential.server_key),
        )
    )


def _field_b64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise CredentialFormatError(f"bad SCRAM credential: {what} is not valid base64") from None


def parse_scram_credential(text: str) -> ScramCredential:
    """Parse the output of `format_scram_credential`; raises `CredentialFormatError`.

    Error messages name the bad field but never echo key material.
    """
    parts = text.strip().split("$")
    if len(parts) != _FIELDS:
        raise CredentialFormatError(
            f"bad SCRAM credential: expected {_FIELDS} '$'-separated fields, got {len(parts)}"
        )
    mechanism, count, salt_b64, stored_b64, server_b64 = parts
    if not mechanism.startswith("SCRAM-") or mechanism[len("SCRAM-") :] not in SCRAM_HASHES:
        known = ", ".join(f"SCRAM-{name}" for name in SCRAM_HASHES)
        raise CredentialFormatError(
            f"bad SCRAM credential: unknown mechanism {mechanism[:40]!r} (expected {known})"
        )
    if not (count.isascii() and count.isdigit()) or len(count) > 10 or int(count) < 1:
        raise CredentialFormatError(
            f"bad SCRAM credential: iteration count {count[:20]!r} is not a positive integer"
        )
    salt = _field_b64(salt_b64, "salt")
    stored_key = _field_b64(stored_b64, "StoredKey")
    server_key = _field_b64(server_b64, "ServerKey")
    try:
        return ScramCredential(
            hash_name=mechanism[len("SCRAM-") :],
            salt=salt,
            iterations=int(count),
            stored_key=stored_key,
            server_key=server_key,
        )
    except ValueError as exc:
        raise CredentialFormatError(f"bad SCRAM credential: {exc}") from None


def format_credential(credential: Credential) -> str:
    """The users-file form of any credential: SCRAM as `format_scram_credential`, a
    RabbitMQ hash as ``rabbit_password_hashing_sha256$<base64 salt + digest>``."""
    if isinstance(credential, PasswordHashCredential):
        return f"{credential.algorithm}${credential.to_rabbit()}"
    return format_scram_credential(credential)


def parse_credential(text: str) -> Credential:
    """Parse the output of `format_credential`; raises `CredentialFormatError`."""
    algorithm, sep, rest = text.strip().partition("$")
    if sep and algorithm in PASSWORD_HASH_ALGORITHMS:
        try:
            return PasswordHashCredential.from_rabbit(rest, algorithm)
        except ValueError as exc:
            raise CredentialFormatError(f"bad {algorithm} credential: {exc}") from None
    return parse_scram_credential(text)


# --------------------------------------------------------------------------- stores


class CredentialStore(Protocol):
    """Where server mechanisms find users. Names are SASLprepped before lookup."""

    def lookup(self, username: str, mechanism: str) -> Credential | None:
        """The credential for `username` and a mechanism, or None.

        `mechanism` is a SCRAM mechanism ("SCRAM-SHA-256"), answered with a
        `ScramCredential`, or "PLAIN", answered with a `PasswordHashCredential` (a
        password hash that only PLAIN can check), if the user has one.
        """
        ...

    def decoy(self, username: str, mechanism: str) -> ScramCredential:
        """A stable, unusable credential for a name that `lookup` does not know.

        It should look like a real one (same salt size and usual iteration count);
        `make_decoy_credential` does this given a secret.
        """
        ...


class InMemoryCredentialStore:
    """A dict-backed `CredentialStore`, for tests, embedding and small brokers."""

    def __init__(
        self, *, secret: bytes | None = None, default_iterations: int = DEFAULT_ITERATIONS
    ) -> None:
        """`secret` keys the decoys for unknown users (random if not given).

        Give a persisted secret to keep decoys stable across restarts.
        """
        if default_iterations < 1:
            raise ValueError("default_iterations must be positive")
        self._secret = os.urandom(32) if secret is None else secret
        self.default_iterations = default_iterations
        self._users: dict[str, dict[str, Credential]] = {}

    def add_user(
        self,
        username: str,
        password: str,
        hash_names: Iterable[str] = ("SHA-1", "SHA-256", "SHA-512"),
        iterations: int | None = None,
    ) -> None:
        """Store credentials for `username`, one per hash; replaces earlier ones for them.

        `iterations` defaults to the store's `default_iterations`.
        """
        count = self.default_iterations if iterations is None else iterations
        for hash_name in hash_names:
            self.add_credential(username, make_scram_credential(password, hash_name, count))

    def add_credential(self, username: str, credential: Credential) -> None:
        """Store one pre-computed credential (e.g. parsed from a users file)."""
        name = saslprep(username, allow_unassigned=False)
        if not name:
            raise ValueError("username must not be empty")
        self._users.setdefault(name, {})[credential.mechanism] = credential

    def remove_user(self, username: str) -> None:
        """Forget every credential of `username`; no error if it is unknown."""
        self._users.pop(saslprep(username), None)

    def lookup(self, username: str, mechanism: str) -> Credential | None:
        """See `CredentialStore.lookup`."""
        return self._users.get(username, {}).get(mechanism)

    def decoy(self, username: str, mechanism: str) -> ScramCredential:
        """See `CredentialStore.decoy`."""
        return make_decoy_credential(self._secret, username, mechanism, self.default_iterations)
