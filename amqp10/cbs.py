"""Claims-based security's messages (the AMQP CBS draft) and Service Bus SAS tokens.

One home for what both ends of ``$cbs`` must agree on, the client that puts tokens
(:mod:`amqp10.client.claims`) and the broker that checks them
(:mod:`amqp10.broker.amqp1.servicebus`):

- a ``put-token`` request: application properties ``operation`` = ``put-token``,
  ``type`` (:data:`SAS_TOKEN` or :data:`JWT`), ``name`` (the audience: the resource
  URI the token is for) and ``expiration`` (a timestamp); the body (an amqp-value
  string) is the token. Its reply carries ``status-code`` (202 accepted; 400, 401,
  ...) and ``status-description``.
- a Service Bus SAS token: ``SharedAccessSignature sr=URI&sig=SIG&se=EXPIRY&skn=KEYNAME``
  (form-encoded), SIG the base64 HMAC-SHA256, keyed with the shared-access key's
  text, of the URL-encoded URI, a newline and the expiry (seconds since the epoch).

Pure functions: no I/O, no clock (times are passed in).
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, quote_plus, urlencode

from .management.oasis import reply_status
from .message import Message
from .types import timestamp

__all__ = [
    "ACCEPTED",
    "CBS_ADDRESS",
    "JWT",
    "PUT_TOKEN",
    "SAS_PREFIX",
    "SAS_TOKEN",
    "CbsError",
    "PutToken",
    "SasToken",
    "make_sas_token",
    "parse_put_token",
    "parse_put_token_reply",
    "parse_sas_token",
    "put_token_reply",
    "put_token_request",
    "sas_signature",
    "sas_signature_matches",
]

CBS_ADDRESS = "$cbs"
PUT_TOKEN = "put-token"
SAS_TOKEN = "servicebus.windows.net:sastoken"
JWT = "jwt"
SAS_PREFIX = "SharedAccessSignature "
ACCEPTED = 202
TOKEN_TYPES = (SAS_TOKEN, JWT)


class CbsError(Exception):
    """A put-token that cannot be honoured; ``status`` is its reply's status-code."""

    def __init__(self, status: int, description: str) -> None:
        super().__init__(description)
        self.status = status
        self.description = description


# -- SAS tokens ------------------------------------------------------------------------------
def sas_signature(key: str, audience: str, expiry: int) -> str:
    """The base64 HMAC-SHA256 (keyed with ``key``'s text) of the URL-encoded audience,
    a newline and the expiry."""
    signed = f"{quote_plus(audience)}\n{expiry}".encode()
    return base64.b64encode(hmac.new(key.encode(), signed, hashlib.sha256).digest()).decode()


def make_sas_token(audience: str, key_name: str, key: str, expiry: int) -> str:
    """A SAS token for ``audience`` signed with the key ``key_name`` = ``key``, valid until
    ``expiry`` (seconds since the epoch)."""
    fields = {
        "sr": audience,
        "sig": sas_signature(key, audience, expiry),
        "se": str(expiry),
        "skn": key_name,
    }
    return SAS_PREFIX + urlencode(fields)


@dataclass(frozen=True)
class SasToken:
    """A SAS token's fields (``sr``, ``sig``, ``se``, ``skn``), decoded."""

    audience: str
    signature: str
    expiry: int
    key_name: str


def parse_sas_token(token: str) -> SasToken:
    """The fields of a SAS token; :class:`CbsError` (401) says what is wrong with a bad one."""
    if not token.startswith(SAS_PREFIX):
        raise CbsError(401, f"a SAS token starts with {SAS_PREFIX!r}")
    fields = {
        k: v[0] for k, v in parse_qs(token[len(SAS_PREFIX) :], keep_blank_values=True).items()
    }
    missing = [f for f in ("sr", "sig", "se", "skn") if f not in fields]
    if missing:
        raise CbsError(401, f"the SAS token lacks {', '.join(missing)}")
    try:
        expiry = int(fields["se"])
    except ValueError:
        raise CbsError(401, "the SAS token's expiry (se) is not a number") from None
    return SasToken(fields["sr"], fields["sig"], expiry, fields["skn"])


def sas_signature_matches(token: SasToken, key: str) -> bool:
    """Whether ``token`` was signed with ``key`` (compared in constant time)."""
    return hmac.compare_digest(sas_signature(key, token.audience, token.expiry), token.signature)


# -- put-token --------------------------------------------------------------------------------
@dataclass(frozen=True)
class PutToken:
    """A put-token request: ``token`` of ``token_type`` for ``audience``."""

    token_type: str
    audience: str
    token: str
    expires: float | None = None
    """Seconds since the epoch (the ``expiration`` property), if the request says."""


def put_token_request(put: PutToken) -> Message:
    """The request message (the caller sets its message-id and reply-to)."""
    props: dict[str, Any] = {"operation": PUT_TOKEN, "type": put.token_type, "name": put.audience}
    if put.expires is not None:
        props["expiration"] = timestamp(round(put.expires * 1000))
    return Message(body=put.token, application_properties=props)


def parse_put_token(props: Mapping[str, Any], body: Any) -> PutToken:
    """A request's put-token; :class:`CbsError` (400) for another operation or a malformed one."""
    if props.get("operation") != PUT_TOKEN:
        raise CbsError(
            400, f"unsupported $cbs operation {props.get('operation')!r}; supported: {PUT_TOKEN}"
        )
    audience = props.get("name")
    if not isinstance(audience, str) or not audience:
        raise CbsError(400, "put-token needs the audience as the 'name' application property")
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if not isinstance(body, str):
        raise CbsError(400, "put-token's body is the token, a string")
    token_type = props.get("type")
    if token_type not in TOKEN_TYPES:
        raise CbsError(
            400, f"unsupported token type {token_type!r}; supported: {', '.join(TOKEN_TYPES)}"
        )
    expiration = props.get("expiration")
    expires: float | None = None
    if isinstance(expiration, timestamp):  # (the draft's type: milliseconds)
        expires = expiration / 1000
    elif isinstance(expiration, datetime.datetime):
        expires = expiration.timestamp()
    elif isinstance(expiration, (int, float)) and not isinstance(expiration, bool):
        expires = float(expiration)  # (azure-servicebus sends seconds)
    return PutToken(str(token_type), audience, body, expires)


def put_token_reply(status: int, description: str) -> dict[str, Any]:
    """A put-token reply's application properties."""
    return {"status-code": status, "status-description": description}


def parse_put_token_reply(props: Mapping[str, Any] | None) -> tuple[int, str]:
    """A reply's ``(status-code, status-description)``; a reply without a status is a 500.

    (Service Bus's management replies spell them ``statusCode``/``statusDescription``;
    both are read, as :func:`amqp10.management.oasis.reply_status` reads them.)"""
    props = props or {}
    status = reply_status(props)
    if status is None:
        return 500, f"the $cbs reply has no status-code ({dict(props)!r})"
    return status
