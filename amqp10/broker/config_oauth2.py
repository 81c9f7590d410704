"""The ``[oauth2]`` section of the broker configuration (RabbitMQ's
``rabbitmq_auth_backend_oauth2``: JWTs as passwords, scopes as permissions; the tokens
are checked by :mod:`amqp10.broker.oauth`); part of :mod:`amqp10.broker.config`, which
re-exports it.

With ``resource_server_id`` set, a SASL PLAIN login (1.0, 0-9-1, 0-10) whose password
is a JWT signed with one of ``signing_keys`` logs in as the token's user, with the
permissions its scopes give; other logins are checked against the users file as before.
"""

from __future__ import annotations

import base64
import binascii
import importlib.util

from pydantic import Field, field_validator, model_validator

from .config_model import StrictModel as _Model

__all__ = ["OAuth2Config"]


class OAuth2Config(_Model):
    """JWT logins: who signs the tokens, who they are for, and where their scopes are."""

    resource_server_id: str | None = Field(
        default=None,
        min_length=1,
        description="the audience the tokens must name (RabbitMQ's resource_server_id, e.g. 'rabbitmq'); "
        "unset: no token logins",
    )
    signing_keys: dict[str, str] = Field(
        default={},
        description="key id (the token's 'kid') -> key: a symmetric key in base64 (HS256), "
        "or a PEM public key (RS256, needs `pip install amqp10[oauth]`)",
    )
    default_key: str | None = Field(
        default=None, description="the key id used for tokens without 'kid' (one of signing_keys)"
    )
    preferred_username_claims: list[str] = Field(
        default=[],
        description="claims tried, in order, for the user name before 'sub' and 'client_id'",
    )
    scope_prefix: str | None = Field(
        default=None,
        description="what a scope starts with to count ('rabbitmq.read:*/*'); default: resource_server_id + '.'",
    )
    extra_scopes_source: str | None = Field(
        default=None, description="a claim with more scopes (a list, or a space-separated string)"
    )
    verify_aud: bool = Field(default=True, description="refuse tokens whose 'aud' does not name resource_server_id")

    @field_validator("signing_keys")
    @classmethod
    def _keys(cls, keys: dict[str, str]) -> dict[str, str]:
        for kid, text in keys.items():
            if text.lstrip().startswith("-----BEGIN"):
                if importlib.util.find_spec("cryptography") is None:
                    raise ValueError(f"key {kid!r} is a PEM public key: RS256 needs `pip install amqp10[oauth]`")
                continue
            try:
                if not base64.b64decode(text, validate=True):
                    raise ValueError
            except (binascii.Error, ValueError):
                raise ValueError(f"key {kid!r}: neither a PEM public key nor base64 of a symmetric key") from None
        return keys

    @model_validator(mode="after")
    def _consistent(self) -> OAuth2Config:
        if self.default_key is not None and self.default_key not in self.signing_keys:
            raise ValueError(f"default_key {self.default_key!r} is not one of signing_keys")
        if self.resource_server_id is not None and not self.signing_keys:
            raise ValueError("resource_server_id needs signing_keys (the keys tokens are signed with)")
        return self

    @property
    def enabled(self) -> bool:
        """Whether token logins are on."""
        return self.resource_server_id is not None

    @property
    def prefix(self) -> str:
        """What a scope starts with to count."""
        if self.scope_prefix is not None:
            return self.scope_prefix
        return f"{self.resource_server_id}."
