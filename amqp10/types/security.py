"""Part 5 SASL frame bodies (security.xml)."""

from __future__ import annotations

from . import definitions as _definitions  # noqa: F401  (restricted types first)
from .composite import Composite, Field

__all__ = ["SASL_FRAMES", "SaslChallenge", "SaslInit", "SaslMechanisms", "SaslOutcome", "SaslResponse"]


class SaslMechanisms(Composite):
    """``sasl-mechanisms``: the mechanisms the server supports."""

    AMQP_NAME = "sasl-mechanisms"
    DESCRIPTOR_NAME = "amqp:sasl-mechanisms:list"
    DESCRIPTOR_CODE = 0x40
    PROVIDES = "sasl-frame"
    FIELDS = (Field("sasl-server-mechanisms", "symbol", mandatory=True, multiple=True),)
    __slots__ = ("sasl_server_mechanisms",)


class SaslInit(Composite):
    """``sasl-init``: the client's chosen mechanism and initial response."""

    AMQP_NAME = "sasl-init"
    DESCRIPTOR_NAME = "amqp:sasl-init:list"
    DESCRIPTOR_CODE = 0x41
    PROVIDES = "sasl-frame"
    FIELDS = (
        Field("mechanism", "symbol", mandatory=True),
        Field("initial-response", "binary"),
        Field("hostname", "string"),
    )
    __slots__ = tuple(f.attr for f in FIELDS)


class SaslChallenge(Composite):
    """``sasl-challenge``: security mechanism challenge."""

    AMQP_NAME = "sasl-challenge"
    DESCRIPTOR_NAME = "amqp:sasl-challenge:list"
    DESCRIPTOR_CODE = 0x42
    PROVIDES = "sasl-frame"
    FIELDS = (Field("challenge", "binary", mandatory=True),)
    __slots__ = ("challenge",)


class SaslResponse(Composite):
    """``sasl-response``: security mechanism response."""

    AMQP_NAME = "sasl-response"
    DESCRIPTOR_NAME = "amqp:sasl-response:list"
    DESCRIPTOR_CODE = 0x43
    PROVIDES = "sasl-frame"
    FIELDS = (Field("response", "binary", mandatory=True),)
    __slots__ = ("response",)


class SaslOutcome(Composite):
    """``sasl-outcome``: the result of the authentication."""

    AMQP_NAME = "sasl-outcome"
    DESCRIPTOR_NAME = "amqp:sasl-outcome:list"
    DESCRIPTOR_CODE = 0x44
    PROVIDES = "sasl-frame"
    FIELDS = (
        Field("code", "sasl-code", mandatory=True),
        Field("additional-data", "binary"),
    )
    __slots__ = tuple(f.attr for f in FIELDS)


SASL_FRAMES: tuple[type[Composite], ...] = (
    SaslMechanisms, SaslInit, SaslChallenge, SaslResponse, SaslOutcome,
)
