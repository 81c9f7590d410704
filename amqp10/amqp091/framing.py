"""0-9-1 frames: method, content header, content body, heartbeat (spec §4.2.3).

A frame is ``type:octet channel:short size:long payload frame-end`` where
frame-end is 0xCE; ``frame-max`` bounds the whole frame (header and end octet
included), so a body frame carries at most ``frame_max - 8`` bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Final

from .base import Properties
from .methods import FRAME_BODY, FRAME_END, FRAME_HEADER, FRAME_HEARTBEAT, FRAME_METHOD

__all__ = [
    "CONTENT_HEADER",
    "FRAME_BODY",
    "FRAME_END",
    "FRAME_HEADER",
    "FRAME_HEARTBEAT",
    "FRAME_METHOD",
    "FRAME_OVERHEAD",
    "FRAME_PREFIX",
    "encode_content",
    "encode_heartbeat",
    "end_frame",
    "split_frames",
    "start_frame",
]

FRAME_PREFIX = struct.Struct(">BHI")
"""type, channel, payload size."""
CONTENT_HEADER: Final = struct.Struct(">HHQ")
"""class-id, weight (always 0), body-size; the property flags and list follow."""
FRAME_OVERHEAD: Final = 8
_END: Final = bytes((FRAME_END,))
_HEARTBEAT: Final = FRAME_PREFIX.pack(FRAME_HEARTBEAT, 0, 0) + _END
_PLACEHOLDER: Final = b"\x00" * 7
_pack_prefix_into = FRAME_PREFIX.pack_into
_pack_prefix: Final = FRAME_PREFIX.pack
_pack_header_frame: Final = struct.Struct(">BHIHHQ").pack  # a header frame's prefix and fixed fields
_HEADER_FIXED: Final = FRAME_OVERHEAD + CONTENT_HEADER.size  # a header frame but its properties


def start_frame(buf: bytearray) -> int:
    """Reserve a frame's 7-byte prefix; returns where it starts (see ``end_frame``)."""
    start = len(buf)
    buf += _PLACEHOLDER
    return start


def end_frame(buf: bytearray, start: int, frame_type: int, channel: int) -> int:
    """Fill in the prefix reserved at ``start``, append frame-end; return the frame's size."""
    size = len(buf) - start - 7
    _pack_prefix_into(buf, start, frame_type, channel, size)
    buf += _END
    return size + FRAME_OVERHEAD


def split_frames(data: bytes) -> Iterator[bytes]:
    """``data`` (frames back to back) one whole frame at a time, by the sizes their
    prefixes say (an incomplete last one as it is; nothing checked)."""
    at = 0
    while at < len(data):
        end = at + FRAME_OVERHEAD + int.from_bytes(data[at + 3 : at + 7], "big")
        yield data[at:end]
        at = end


def encode_heartbeat(buf: bytearray) -> None:
    """Append a heartbeat frame (channel 0, empty payload)."""
    buf += _HEARTBEAT


def encode_content(
    buf: bytearray,
    channel: int,
    class_id: int,
    properties: Properties | bytes,
    body: bytes | memoryview,
    frame_max: int,
) -> int:
    """Append a content header frame and the body frames, cut to ``frame_max`` (0: no
    limit); return how many frames that is.

    ``properties`` may be raw bytes (flags word and list, as received): a broker
    passes a publisher's properties on without decoding them.
    """
    size = len(body)
    if isinstance(properties, Properties):
        start = start_frame(buf)
        buf += CONTENT_HEADER.pack(class_id, 0, size)
        properties.encode(buf)
        end_frame(buf, start, FRAME_HEADER, channel)
        if frame_max and len(buf) - start > frame_max:
            del buf[start:]
            raise ValueError(f"content header larger than frame-max {frame_max}")
    else:  # raw properties (a broker passing them on): the frame in one piece
        if frame_max and _HEADER_FIXED + len(properties) > frame_max:
            raise ValueError(f"content header larger than frame-max {frame_max}")
        buf += _pack_header_frame(
            FRAME_HEADER, channel, CONTENT_HEADER.size + len(properties), class_id, 0, size
        )
        buf += properties
        buf += _END
    step = frame_max - FRAME_OVERHEAD if frame_max else max(size, 1)
    if 0 < size <= step:  # the usual: one body frame
        buf += _pack_prefix(FRAME_BODY, channel, size)
        buf += body
        buf += _END
        return 2
    view = memoryview(body)
    for pos in range(0, len(body), step):
        chunk = view[pos : pos + step]
        buf += _pack_prefix(FRAME_BODY, channel, len(chunk))
        buf += chunk
        buf += _END
    return 1 + -(-len(body) // step)
