"""Part 5 SASL frame bodies (security.xml)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from . import definitions as _definitions  # noqa: F401  (restricted types first)
from .composite import Composite, Field
from .primitives import symbol

__all__ = ["SASL_FRAMES", "SaslChallenge", "SaslInit", "SaslMechanisms", "SaslOutcome", "SaslResponse"]


class SaslMechanisms(Composite):
    """``sasl-mechanisms``: the mechanisms the server supports."""

    AMQP_NAME = "sasl-mechanisms"
    DESCRIPTOR_NAME = "amqp:sasl-mechanisms:list"
    DESCRIPTOR_CODE = 0x40
    PROVIDES = "sasl-frame"
    FIELDS = (Field("sasl-server-mechanisms", "symbol", mandatory=True, multiple=True),)
    __slots__ = ("sasl_server_mechanisms",)
    sasl_server_mechanisms: list[symbol]

    if TYPE_CHECKING:

        def __init__(
            self,
            *,
            sasl_server_mechanisms: str | Sequence[str],
        ) -> None: ...


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
    mechanism: symbol
    initial_response: bytes | None
    hostname: str | None

    if TYPE_CHECKING:

        def __init__(
            self,
            *,
            mechanism: str,
            initial_response: bytes | None = None,
            hostname: str | None = None,
        ) -> None: ...


class SaslChallenge(Composite):
    """``sasl-challenge``: security mechanism challenge."""

    AMQP_NAME = "sasl-challenge"
    DESCRIPTOR_NAME = "amqp:sasl-challenge:list"
    DESCRIPTOR_CODE = 0x42
    PROVIDES = "sasl-frame"
    FIELDS = (Field("challenge", "binary", mandatory=True),)
    __slots__ = ("challenge",)
    challenge: bytes

    if TYPE_CHECKING:

        def __init__(
            self,
            *,
            challenge: bytes,
        ) -> None: ...


class SaslResponse(Composite):
    """``sasl-response``: security mechanism response."""

    AMQP_NAME = "sasl-response"
    DESCRIPTOR_NAME = "amqp:sasl-response:list"
    DESCRIPTOR_CODE = 0x43
    PROVIDES = "sasl-frame"
    FIELDS = (Field("response", "binary", mandatory=True),)
    __slots__ = ("response",)
    response: bytes

    if TYPE_CHECKING:

        def __init__(
            self,
            *,
            response: bytes,
        ) -> None: ...


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
    code: int
    additional_data: bytes | None

    if TYPE_CHECKING:

        def __init__(
            self,
            *,
            code: int,
            additional_data: bytes | None = None,
        ) -> None: ...


SASL_FRAMES: tuple[type[Composite], ...] = (
    SaslMechanisms, SaslInit, SaslChallenge, SaslResponse, SaslOutcome,
)
