"""AMQP frames (Part 2 §2.3) and protocol headers (§2.2).

A frame is an 8-byte header (size, data offset, type, channel), an ignored
extended header, then a body: for AMQP frames, a performative and, for
transfers, the payload that follows it.
"""

from __future__ import annotations

import struct
from typing import Any, Final

from ..types import Accepted, Released, codec

__all__ = [
    "AMQP_HEADER",
    "FRAME_AMQP",
    "FRAME_SASL",
    "HEADER_SIZE",
    "MIN_MAX_FRAME_SIZE",
    "SASL_HEADER",
    "TLS_HEADER",
    "FIELDLESS_OUTCOMES",
    "encode_disposition_frame",
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
_encode_into = codec.encode_into


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
    _encode_into(buf, performative)
    if payload:
        buf += payload
    size = len(buf) - start
    FRAME_HEADER.pack_into(buf, start, size, 2, frame_type, channel)
    return size


_UINT_SMALL: Final = [b"\x43"] + [bytes((0x52, i)) for i in range(1, 256)]
_PACK_UINT: Final = struct.Struct(">BI").pack
_TRANSFER_PFX: Final = b"\x00\x53\x14\xc0"
_BOOLEAN: Final = (b"\x42", b"\x41")  # false, true: a boolean field (a transfer's settled, a disposition's role)
_pack_header_into: Final = FRAME_HEADER.pack_into
_pack_header = FRAME_HEADER.pack


def encode_transfer_frame(
    buf: bytearray,
    channel: int,
    handle: int,
    delivery_id: int,
    delivery_tag: bytes,
    message_format: int,
    settled: bool,
    payload: bytes | memoryview,
) -> int:
    """Append the first (and only) frame of a delivery; return its size.

    The same bytes as ``encode_frame(buf, channel, Transfer(handle=..., delivery_id=...,
    delivery_tag=..., message_format=..., settled=..., more=False), payload)``, without
    building the performative: the per-message path of every sender. The tag is at
    most 32 bytes (§2.8.7), so the field list always fits a list8.
    """
    fields = (
        (_UINT_SMALL[handle] if handle < 256 else _PACK_UINT(0x70, handle))
        + (_UINT_SMALL[delivery_id] if delivery_id < 256 else _PACK_UINT(0x70, delivery_id))
        + bytes((0xA0, len(delivery_tag)))
        + delivery_tag
        + (_UINT_SMALL[message_format] if message_format < 256 else _PACK_UINT(0x70, message_format))
        + _BOOLEAN[settled]
    )
    start = len(buf)
    buf += _PLACEHOLDER
    buf += _TRANSFER_PFX
    buf.append(len(fields) + 1)
    buf.append(5)
    buf += fields
    if payload:
        buf += payload
    size = len(buf) - start
    _pack_header_into(buf, start, size, 2, FRAME_AMQP, channel)
    return size


_DISPOSITION_PFX = b"\x00\x53\x15\xc0"
_NULL = b"\x40"
_SETTLED_OR_NULL = (_NULL, b"\x41")  # (a disposition's settled defaults to false: null)

FIELDLESS_OUTCOMES: Final[dict[type, bytes]] = {
    Accepted: codec.encode(Accepted()),
    Released: codec.encode(Released()),
}
"""The outcomes without fields, by type, and their one encoding each."""


def encode_disposition_frame(
    buf: bytearray,
    channel: int,
    role: int,
    first: int,
    last: int | None,
    settled: bool,
    state: Any,
) -> int:
    """Append a disposition frame whose ``state`` is one of :data:`FIELDLESS_OUTCOMES`;
    return its size.

    The same bytes as ``encode_frame(buf, channel, Disposition(role=..., first=...,
    last=..., settled=..., state=...))``, without building the performative: the
    disposition that settles a lone delivery (or a range of them) with accepted or
    released, one per read of a message-by-message peer.
    """
    fields = (
        _BOOLEAN[role]  # (sender false, receiver true)
        + (_UINT_SMALL[first] if first < 256 else _PACK_UINT(0x70, first))
        + (_NULL if last is None else _UINT_SMALL[last] if last < 256 else _PACK_UINT(0x70, last))
        + _SETTLED_OR_NULL[settled]
        + FIELDLESS_OUTCOMES[type(state)]
    )
    size = len(fields) + 14  # (the frame's header, the descriptor, the list8's size and count)
    buf += _pack_header(size, 2, FRAME_AMQP, channel)
    buf += _DISPOSITION_PFX
    buf += bytes((len(fields) + 1, 5))
    buf += fields
    return size


def encode_empty_frame(buf: bytearray) -> None:
    """Append an empty frame (a heartbeat, §2.4.5)."""
    buf += _EMPTY_FRAME


def parse_protocol_header(data: bytes) -> tuple[int, int, int, int] | None:
    """``(protocol id, major, minor, revision)`` of an 8-byte header, or None if not AMQP."""
    if len(data) != 8 or data[:4] != b"AMQP":
        return None
    return data[4], data[5], data[6], data[7]
