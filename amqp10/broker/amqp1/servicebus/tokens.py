"""Claims-based security's tokens: Service Bus SAS tokens and HS256 JWTs, checked.

A token names a scope (a resource URI, ``sb://host/entity``) and grants rights
(``Listen``, ``Send``, ``Manage``) on it until it expires:

- ``servicebus.windows.net:sastoken``: ``SharedAccessSignature sr=URI&sig=SIG&se=EXPIRY&skn=KEYNAME``,
  SIG the base64 HMAC-SHA256, keyed with the shared-access key's text, of the
  URL-encoded URI, a newline and the expiry (seconds since the epoch). The key named
  ``skn`` in the broker's ``[servicebus]`` config gives the rights.
  azure-servicebus puts these with the type ``jwt``: a token that starts with
  ``SharedAccessSignature`` is checked as one whatever its type says.
- ``jwt``: a compact JWS signed with HS256 against ``[servicebus] jwt_secret``; its
  ``exp`` is the expiry, its ``aud`` (else the put-token's name) the scope, its
  ``rights`` claim (a list) the rights (``Listen`` and ``Send`` without one).
  RS256/ES256 keys, key sets (JWKS) and issuers are not checked: a JWT of another
  algorithm is refused.

Nothing here does I/O or reads a clock: ``now`` is passed in.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from ....cbs import CbsError, parse_sas_token, sas_signature_matches

__all__ = ["RIGHTS", "Grant", "check_jwt", "check_sas", "scope_covers"]

RIGHTS = ("Listen", "Send", "Manage")


@dataclass(frozen=True)
class Grant:
    """What a valid token grants: ``rights`` on ``scope`` until ``expires`` (epoch seconds)."""

    scope: str
    rights: frozenset[str]
    expires: float


def check_sas(token: str, keys: Mapping[str, tuple[str, frozenset[str]]], now: float) -> Grant:
    """The grant of a SAS token; ``keys`` maps a key name to (key, rights)."""
    sas = parse_sas_token(token)
    entry = keys.get(sas.key_name)
    if entry is None:
        raise CbsError(401, f"no shared access key named {sas.key_name!r}")
    key, rights = entry
    if not sas_signature_matches(sas, key):
        raise CbsError(401, "the SAS token's signature does not match the key")
    if sas.expiry <= now:
        raise CbsError(401, "the SAS token has expired")
    return Grant(sas.audience, rights, float(sas.expiry))


def _b64(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def check_jwt(token: str, secret: str | None, audience: str, now: float) -> Grant:
    """The grant of an HS256 JWT checked against ``secret``."""
    if secret is None:
        raise CbsError(401, "this broker takes no JWTs (no [servicebus] jwt_secret)")
    parts = token.split(".")
    if len(parts) != 3:
        raise CbsError(401, "a JWT has three dot-separated parts")
    try:
        header = json.loads(_b64(parts[0]))
        claims = json.loads(_b64(parts[1]))
        sig = _b64(parts[2])
    except (ValueError, UnicodeDecodeError):
        raise CbsError(401, "the JWT is not base64url-encoded JSON") from None
    if not isinstance(header, dict) or header.get("alg") != "HS256" or not isinstance(claims, dict):
        raise CbsError(401, "only HS256 JWTs are supported")
    expected = hmac.new(secret.encode(), f"{parts[0]}.{parts[1]}".encode(), hashlib.sha256).digest()
    if not hmac.compare_digest(expected, sig):
        raise CbsError(401, "the JWT's signature does not match the key")
    exp = claims.get("exp")
    if not isinstance(exp, (int, float)) or isinstance(exp, bool) or exp <= now:
        raise CbsError(401, "the JWT has expired (or has no exp)")
    aud = claims.get("aud", audience)
    rights = claims.get("rights", ["Listen", "Send"])
    if not isinstance(aud, str) or not isinstance(rights, list) or not all(r in RIGHTS for r in rights):
        raise CbsError(401, f"the JWT's aud must be a string and rights a list of {', '.join(RIGHTS)}")
    return Grant(aud, frozenset(rights), float(exp))


def _path(uri: str) -> list[str]:
    split = urlsplit(uri if "//" in uri else "//" + uri)
    return [p for p in split.path.lower().split("/") if p]


def scope_covers(scope: str, entity: str) -> bool:
    """Whether a token for ``scope`` (a URI) covers the entity path ``entity``: the scope's
    path is a prefix of it, segment by segment, ignoring case (the host is not compared)."""
    want = _path(scope)
    have = [p for p in entity.lower().split("/") if p]
    return have[: len(want)] == want
