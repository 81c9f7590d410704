"""OAuth 2 tokens (JWT) as credentials, with RabbitMQ's conventions
(``rabbitmq_auth_backend_oauth2``); protocol-neutral.

A client logs in with SASL PLAIN, any user name, and a JWT as the password. The
:class:`TokenValidator` checks the token: its signature against the ``[oauth2]``
signing keys (HS256 with a symmetric key; RS256 with a PEM public key when the optional
``cryptography`` package is installed: ``pip install amqp10[oauth]``), its ``exp`` and
``nbf``, and that its ``aud`` names the resource server id. What the token allows is
a :class:`TokenGrant`: the user name (the first of the preferred user name claims, then
``sub``, then ``client_id``; ``unknown`` without any, as RabbitMQ), the scopes, and the
expiry (a token must have one: ``exp``).

Scopes are RabbitMQ's, after the prefix (by default the resource server id and a dot)
is taken off: ``read:<vhost>/<name>``, ``write:<vhost>/<name>[/<routing key>]``,
``configure:<vhost>/<name>`` and ``tag:<tag>``. The patterns are globs where ``*`` is
any text, percent-decoded (``%2F`` is the vhost ``/``), matched against the whole
name. A scope of any kind for a virtual host gives access to it; resource checks need a
scope of the action. (A write scope's routing key part, for topic permissions, is
accepted and not checked.) ``read``/``write``/``configure`` mean what the users file's
patterns mean (:mod:`.permissions`).

A connection whose token expires is closed by its front end unless the token was renewed
first (1.0: ``PUT /auth/tokens`` on ``/management``; 0-9-1: ``connection.update-secret``);
:meth:`TokenValidator.renew` checks a new token is valid and for the same user.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import unquote

from .config_oauth2 import OAuth2Config
from .permissions import DEFAULT_EXCHANGE_NAME, Action, ResourceKind

__all__ = [
    "GUEST",
    "UNKNOWN_USER",
    "InvalidToken", "TokenGrant", "TokenLogin", "TokenValidator", "looks_like_jwt", "rsa_available"]

log = logging.getLogger("amqp10.broker.oauth")

_USERNAME_CLAIMS: Final = ("sub", "client_id")
"""Tried after the configured preferred user name claims (as RabbitMQ does)."""

GUEST: Final = "guest"
"""RabbitMQ's default user: what a 1.0 ``guest``/``guest`` login is called where tokens
turned PLAIN on (see :class:`TokenLogin`), and the loopback guest of the HTTP front
ends (:mod:`.http_login`), shown by that name."""

UNKNOWN_USER: Final = "unknown"
"""The user of a token without any user name claim (RabbitMQ's name for it)."""

_CACHE_SIZE: Final = 1024


class InvalidToken(ValueError):
    """A token that does not log in (or renew); ``str()`` says why, in one line."""


def rsa_available() -> bool:
    """Whether RS256 tokens can be checked (the optional ``cryptography`` package is installed)."""
    try:
        import cryptography  # noqa: F401
    except ImportError:
        return False
    return True


def looks_like_jwt(text: str) -> bool:
    """Whether ``text`` has a JWT's shape (three dot-separated base64url parts)."""
    return text.count(".") == 2 and len(text) > 10


def _b64url(part: str, what: str) -> bytes:
    try:
        return base64.b64decode(part + "=" * (-len(part) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        raise InvalidToken(f"the token's {what} is not base64url") from None


def _json(part: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(_b64url(part, what))
    except (UnicodeDecodeError, ValueError):
        raise InvalidToken(f"the token's {what} is not JSON") from None
    if not isinstance(value, dict):
        raise InvalidToken(f"the token's {what} is not a JSON object")
    return value


def _glob(pattern: str) -> re.Pattern[str]:
    """A scope's pattern (``*`` any text, percent-encoded) as a whole-name regular expression."""
    return re.compile(".*".join(re.escape(unquote(p)) for p in pattern.split("*")))


@dataclass(frozen=True, slots=True)
class _Scope:
    """One resource scope: an action on names matching a pattern in vhosts matching one."""

    action: str
    vhost: re.Pattern[str]
    name: re.Pattern[str]

    @classmethod
    def parse(cls, scope: str) -> _Scope | None:
        action, colon, resource = scope.partition(":")
        if not colon or action not in ("read", "write", "configure"):
            return None
        parts = resource.split("/")
        if len(parts) not in (2, 3):  # vhost/name, or vhost/name/routing-key (topic permissions)
            return None
        return cls(action, _glob(parts[0]), _glob(parts[1]))


@dataclass(slots=True)
class TokenGrant:
    """What a valid token lets its connection do: who, what (scopes), until when."""

    user: str
    scopes: tuple[str, ...]
    """The token's scopes that count, without the prefix (``read:*/*``)."""
    expires_at: float | None
    """Its ``exp`` (seconds since the epoch); None: it does not expire (not a validated token's)."""
    tags: frozenset[str] = field(init=False, default=frozenset())
    """The ``tag:`` scopes' tags (``administrator``, ...)."""
    _resources: tuple[_Scope, ...] = field(init=False, default=(), repr=False)
    _cache: dict[tuple[str, str, str], bool] = field(init=False, default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.tags = frozenset(s[len("tag:") :] for s in self.scopes if s.startswith("tag:"))
        self._resources = tuple(r for r in map(_Scope.parse, self.scopes) if r is not None)

    def expired(self, now: float) -> bool:
        """Whether the token has run out at ``now``."""
        return self.expires_at is not None and now >= self.expires_at

    def allows_vhost(self, vhost: str) -> bool:
        """Whether some scope names ``vhost`` (any action gives access to the virtual host)."""
        return any(r.vhost.fullmatch(vhost) for r in self._resources)

    def allows(self, vhost: str, action: Action, name: str) -> bool:
        """Whether a scope of ``action`` matches ``name`` in ``vhost``."""
        key = (vhost, action, name)
        answer = self._cache.get(key)
        if answer is None:
            answer = any(
                r.action == action and r.vhost.fullmatch(vhost) is not None and r.name.fullmatch(name) is not None
                for r in self._resources
            )
            if len(self._cache) >= _CACHE_SIZE:
                self._cache.clear()
            self._cache[key] = answer
        return answer

    def vhost_denial(self, vhost: str) -> str | None:
        """None if the token gives access to ``vhost``; else why not."""
        if self.allows_vhost(vhost):
            return None
        return f"access to vhost {vhost!r} refused for user {self.user!r}: no scope of its token names it"

    def denial(self, vhost: str, action: Action, kind: ResourceKind, name: str) -> str | None:
        """None if the token's scopes allow ``action`` on the resource; else why not (logged)."""
        shown = name if name or kind == "queue" else DEFAULT_EXCHANGE_NAME
        if self.allows(vhost, action, shown):
            return None
        message = (
            f"{action} access to {kind} {shown!r} in vhost {vhost!r} refused for user {self.user!r}:"
            " no scope of its token allows it"
        )
        log.warning("permission denied: %s", message)
        return message


class TokenValidator:
    """Checks JWTs against the ``[oauth2]`` configuration; ``now`` is the clock for expiry."""

    def __init__(self, config: OAuth2Config, now: Callable[[], float] = time.time) -> None:
        if not config.enabled:
            raise ValueError("[oauth2] resource_server_id is not set: no token logins")
        self.config = config
        self.now = now
        self._keys: dict[str, tuple[str, Any]] = {kid: self._load_key(kid, text) for kid, text in config.signing_keys.items()}

    @staticmethod
    def _load_key(kid: str, text: str) -> tuple[str, Any]:
        if not text.lstrip().startswith("-----BEGIN"):
            return "HS256", base64.b64decode(text)
        if not rsa_available():
            raise ValueError(f"[oauth2] key {kid!r} is a PEM public key: RS256 needs `pip install amqp10[oauth]`")
        from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey
        from cryptography.hazmat.primitives.serialization import load_pem_public_key

        try:
            key = load_pem_public_key(text.encode())
        except ValueError as exc:
            raise ValueError(f"[oauth2] key {kid!r} is not a PEM public key: {exc}") from None
        if not isinstance(key, RSAPublicKey):
            raise ValueError(f"[oauth2] key {kid!r} is not an RSA public key (RS256)")
        return "RS256", key

    def validate(self, token: str) -> TokenGrant:
        """The grant ``token`` gives; raises :class:`InvalidToken` (why) if it gives none."""
        parts = token.strip().split(".")
        if len(parts) != 3:
            raise InvalidToken("not a JWT (three dot-separated parts)")
        header = _json(parts[0], "header")
        claims = _json(parts[1], "payload")
        self._check_signature(header, f"{parts[0]}.{parts[1]}".encode(), _b64url(parts[2], "signature"))
        return self._grant(claims)

    def renew(self, current: TokenGrant, token: str) -> TokenGrant:
        """The grant a new ``token`` gives a connection that logged in with ``current``:
        raises :class:`InvalidToken` for a bad token, or one for another user."""
        grant = self.validate(token)
        if grant.user != current.user:
            raise InvalidToken(f"the new token is for user {grant.user!r}, not {current.user!r}")
        return grant

    def _check_signature(self, header: dict[str, Any], signed: bytes, signature: bytes) -> None:
        kid = header.get("kid", self.config.default_key)
        if kid is None:
            raise InvalidToken("the token names no key ('kid') and no default_key is configured")
        entry = self._keys.get(kid) if isinstance(kid, str) else None
        if entry is None:
            raise InvalidToken(f"the token's key {kid!r} is not a configured signing key")
        alg, key = entry
        if header.get("alg") != alg:
            raise InvalidToken(f"the token's algorithm {header.get('alg')!r} is not {alg} (its key's)")
        if alg == "HS256":
            if not hmac.compare_digest(hmac.new(key, signed, hashlib.sha256).digest(), signature):
                raise InvalidToken("the token's signature does not check out")
            return
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        try:
            key.verify(signature, signed, padding.PKCS1v15(), hashes.SHA256())
        except InvalidSignature:
            raise InvalidToken("the token's signature does not check out") from None

    def _grant(self, claims: dict[str, Any]) -> TokenGrant:
        now = self.now()
        exp = _number(claims, "exp")
        if exp is None:  # as RabbitMQ (its default): a token lives for a time
            raise InvalidToken("the token has no 'exp' claim")
        if now >= exp:
            raise InvalidToken("the token has expired")
        nbf = _number(claims, "nbf")
        if nbf is not None and now < nbf:
            raise InvalidToken("the token is not valid yet ('nbf')")
        cfg = self.config
        if cfg.verify_aud:
            aud = claims.get("aud")
            audiences = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
            if cfg.resource_server_id not in audiences:
                raise InvalidToken(f"the token's audience {aud!r} does not name {cfg.resource_server_id!r}")
        user = next(
            (v for c in (*cfg.preferred_username_claims, *_USERNAME_CLAIMS) if isinstance(v := claims.get(c), str) and v),
            UNKNOWN_USER,
        )
        prefix = cfg.prefix
        scopes = [*_names(claims.get("scope")), *(_names(claims.get(cfg.extra_scopes_source)) if cfg.extra_scopes_source else ())]
        kept = tuple(dict.fromkeys(s[len(prefix) :] for s in scopes if s.startswith(prefix)))
        return TokenGrant(user, kept, exp)


def _number(claims: dict[str, Any], name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidToken(f"the token's {name!r} is not a number")
    return float(value)


def _names(value: object) -> Iterable[str]:
    """Scopes from a claim: a space-separated string or a list of strings."""
    if isinstance(value, str):
        return value.split()
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return ()


class TokenLogin:
    """One connection's token login: SASL PLAIN's ``password_check`` (a JWT as the
    password, any user name), with the grant it gave once it did.

    ``guest``: the broker has no users file and allows anonymous connections, so PLAIN is
    offered for tokens alone; ``guest``/``guest`` (RabbitMQ's default user, what its
    clients send by habit, and what 0-9-1 takes as the anonymous user there) then logs
    in as ``guest``, who may do what an anonymous connection may, rather than being
    refused because tokens turned PLAIN on."""

    def __init__(self, validator: TokenValidator, *, guest: bool = False) -> None:
        self.validator = validator
        self.guest = guest
        self.grant: TokenGrant | None = None
        """What the token allows (None: no token logged in)."""

    def __call__(self, username: str, password: str) -> str | None:
        """The token's user, if ``password`` is a valid token (or ``guest``, see the
        class); else None (check the users file)."""
        if not looks_like_jwt(password):
            return GUEST if self.guest and username == password == GUEST else None
        try:
            self.grant = self.validator.validate(password)
        except InvalidToken as exc:
            log.info("token login as %r refused: %s", username, exc)
            return None
        return self.grant.user
