"""AMQP frames (Part 2 §2.3) and protocol headers (§2.2).

A frame is an 8-byte header (size, data offset, type, channel), an ignored
extended header, then a body: for AMQP frames, a performative and, for
transfers, the payload that follows it.
"""

from __future__ import annotations

import struct
from typing import Any, Final

from ..types import codec

__all__ = [
    "AMQP_HEADER",
    "FRAME_AMQP",
    "FRAME_SASL",
    "HEADER_SIZE",
    "MIN_MAX_FRAME_SIZE",
    "SASL_HEADER",
    "TLS_HEADER",
    "encode_empty_frame",
    "encode_frame",
    "parse_protocol_header",
]

AMQP_HEADER: Final = b"AMQP\x00\x01\x00\x00"
TLS_HEADER: Final = b"AMQP\x02\x01\x00\x00"
SASL_HEADER: Final = b"AMQP\x03\x01\x00\x00"
PROTOCOL_HEADER_SIZE: Final = 8
HEADER_SIZE: Final = 8
MIN_MAX_FRAME_SIZE: Final = 512
FRAME_AMQP: Final = 0x00
FRAME_SASL: Final = 0x01

FRAME_HEADER = struct.Struct(">IBBH")
_EMPTY_FRAME: Final = FRAME_HEADER.pack(8, 2, FRAME_AMQP, 0)
_PLACEHOLDER: Final = b"\x00" * 8
_encode_value = codec._encode_value


def encode_frame(
    buf: bytearray,
    channel: int,
    performative: Any,
    payload: bytes | memoryview | None = None,
    frame_type: int = FRAME_AMQP,
) -> int:
    """Append one frame to ``buf``; return its size in bytes."""
    start = len(buf)
    buf += _PLACEHOLDER
    _encode_value(buf, performative)
    if payload:
        buf += payload
    size = len(buf) - start
    FRAME_HEADER.pack_into(buf, start, size, 2, frame_type, channel)
    return size


def encode_empty_frame(buf: bytearray) -> None:
    """Append an empty frame (a heartbeat, §2.4.5)."""
    buf += _EMPTY_FRAME


def parse_protocol_header(data: bytes) -> tuple[int, int, int, int] | None:
    """``(protocol id, major, minor, revision)`` of an 8-byte header, or None if not AMQP."""
    if len(data) != 8 or data[:4] != b"AMQP":
        return None
    return data[4], data[5], data[6], data[7]
