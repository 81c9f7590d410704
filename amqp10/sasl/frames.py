"""SASL frames on the wire (Part 2 §2.3, Part 5 §5.3.1): protocol headers, frame bodies.

A SASL frame is an ordinary frame header with type 0x01 (its channel bytes are ignored)
followed by exactly one SASL performative and nothing else. The parser checks the frame
header before waiting for the body, so an absurd size fails at once instead of making us
buffer it.
"""

from __future__ import annotations

import enum
from typing import Final, TypeAlias

from ..transport.framing import (
    AMQP_HEADER,
    FRAME_HEADER,
    FRAME_SASL,
    HEADER_SIZE,
    SASL_HEADER,
    TLS_HEADER,
    encode_frame,
)
from ..types import (
    DecodeError,
    Limits,
    SaslChallenge,
    SaslInit,
    SaslMechanisms,
    SaslOutcome,
    SaslResponse,
    decode_at,
)

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "HeaderKind",
    "SaslFrame",
    "SaslFrameError",
    "classify_header",
    "encode_sasl_frame",
    "parse_sasl_frame",
]

SaslFrame: TypeAlias = SaslMechanisms | SaslInit | SaslChallenge | SaslResponse | SaslOutcome
"""A decoded SASL frame body."""

_SASL_FRAME_TYPES: Final = (SaslMechanisms, SaslInit, SaslChallenge, SaslResponse, SaslOutcome)

DEFAULT_MAX_FRAME_SIZE: Final = 65536
"""Largest SASL frame accepted by default. Senders should keep to 512 bytes
(MIN-MAX-FRAME-SIZE), but tokens of some mechanisms are larger, so receivers are lenient."""

# A SASL body is one small list: nothing legitimate nests deeper or holds more items.
_LIMITS: Final = Limits(max_depth=4, max_elements=1024)


class SaslFrameError(ValueError):
    """Bytes that are not an acceptable SASL frame; the message says why."""


class HeaderKind(enum.Enum):
    """What an 8-byte protocol header asks for."""

    SASL = "sasl"
    AMQP = "amqp"
    TLS = "tls"
    OTHER = "other"


_KNOWN_HEADERS: Final = {
    SASL_HEADER: HeaderKind.SASL,
    AMQP_HEADER: HeaderKind.AMQP,
    TLS_HEADER: HeaderKind.TLS,
}


def classify_header(data: bytes) -> HeaderKind | None:
    """Classify the start of a stream; None while `data` could still become a known header."""
    head = data[:8]
    if len(head) < 8 and any(h.startswith(head) for h in _KNOWN_HEADERS):
        return None
    return _KNOWN_HEADERS.get(head, HeaderKind.OTHER)


def encode_sasl_frame(buf: bytearray, body: SaslFrame) -> None:
    """Append one SASL frame carrying `body` to `buf` (channel 0)."""
    encode_frame(buf, 0, body, frame_type=FRAME_SASL)


def parse_sasl_frame(
    buf: bytes | bytearray, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
) -> tuple[SaslFrame, int] | None:
    """Decode the SASL frame at the start of `buf`: the body and the frame's size.

    Returns None while the frame is incomplete; raises `SaslFrameError` as soon as the
    bytes cannot be an acceptable SASL frame (checked before the body arrives where it can).
    """
    if len(buf) < HEADER_SIZE:
        return None
    size, doff, ftype, _channel = FRAME_HEADER.unpack_from(buf, 0)
    if ftype != FRAME_SASL:
        raise SaslFrameError(f"frame of type {ftype:#04x} during SASL (expected {FRAME_SASL:#04x})")
    if size > max_frame_size:
        raise SaslFrameError(f"SASL frame of {size} bytes exceeds the {max_frame_size}-byte limit")
    body_at = doff * 4
    if doff < 2 or body_at > size:
        raise SaslFrameError(f"invalid frame header (size {size}, doff {doff})")
    if body_at == size:
        raise SaslFrameError("empty frame during SASL (SASL frames always carry a body)")
    if len(buf) < size:
        return None
    try:
        # a copy of the frame alone (they are small), so the body cannot read past it
        body, end = decode_at(bytes(buf[:size]), body_at, _LIMITS)
    except DecodeError as exc:
        raise SaslFrameError(f"malformed SASL frame body: {exc}") from None
    if end != size:
        raise SaslFrameError(f"SASL frame body is followed by {size - end} stray bytes")
    if not isinstance(body, _SASL_FRAME_TYPES):
        raise SaslFrameError(f"not a SASL performative: {_describe(body)}")
    return body, size


def _describe(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
