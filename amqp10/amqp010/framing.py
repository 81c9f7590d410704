"""0-10 frames and segments (0-10 §4.4.5-4.4.7, §3.5).

A frame is a 12-octet header (flags, segment type, frame size including the header,
track, channel) and a payload. A control is one segment on track 0; a command is a
command segment on track 1, followed (``message.transfer``) by a header segment of
structs and a body segment. A segment is spread over frames (first/last frame flags);
an assembly (first/last segment flags) over segments. Frames of different channels,
and of the two tracks of one channel, may be interleaved: :class:`Assembler` keeps one
assembly in progress per channel and track.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

from .codec import (
    DecodeError,
    Reader,
    decode_fields,
    decode_struct32,
    encode_fields,
    encode_structs,
)
from .model import Compound
from .spec import COMMANDS, CONTROLS, STRUCTS

__all__ = [
    "FIRST_FRAME",
    "FIRST_SEGMENT",
    "FRAME_HEADER",
    "LAST_FRAME",
    "LAST_SEGMENT",
    "SEGMENT_BODY",
    "SEGMENT_COMMAND",
    "SEGMENT_CONTROL",
    "SEGMENT_HEADER",
    "Assembler",
    "FramingError",
    "encode_op",
    "split_frames",
]

FRAME_HEADER: Final = struct.Struct(">BBHxBH4x")
"""flags, segment type, frame size (header included), track, channel."""
FIRST_SEGMENT: Final = 0x08
LAST_SEGMENT: Final = 0x04
FIRST_FRAME: Final = 0x02
LAST_FRAME: Final = 0x01
SEGMENT_CONTROL, SEGMENT_COMMAND, SEGMENT_HEADER, SEGMENT_BODY = 0, 1, 2, 3
TRACK_CONTROL, TRACK_COMMAND = 0, 1
_SESSION_HEADER: Final = STRUCTS["header"]
_U16 = struct.Struct(">H")
_U8 = struct.Struct(">B")


def split_frames(data: bytes) -> Iterator[bytes]:
    """``data`` (frames back to back) one whole frame at a time, by the sizes their
    headers say (an incomplete last one as it is; nothing checked)."""
    at = 0
    while at < len(data):
        size = int.from_bytes(data[at + 2 : at + 4], "big")
        end = at + max(size, FRAME_HEADER.size)
        yield data[at:end]
        at = end


class FramingError(Exception):
    """Frames that break 0-10's framing rules: the connection ends with ``framing-error``."""


def encode_op(buf: bytearray, channel: int, op: Compound, max_frame: int) -> int:
    """Append ``op`` (a control or a command, with its header and body) as frames of at
    most ``max_frame`` octets; return how many frames."""
    spec = op.spec
    payload = bytearray(_U16.pack(spec.code or 0))
    if spec.kind == "command":
        payload += b"\x01\x01" if op.sync else b"\x01\x00"  # session.header: size 1, the sync flag
        encode_fields(payload, spec, op.values)
        segments: list[tuple[int, bytes | bytearray]] = [(SEGMENT_COMMAND, payload)]
        if spec.segments:
            header: bytes | bytearray | None = op.raw_headers
            if header is None:
                header = bytearray()
                encode_structs(header, op.headers)
            segments += [(SEGMENT_HEADER, header), (SEGMENT_BODY, op.body)]
        track = TRACK_COMMAND
    else:
        encode_fields(payload, spec, op.values)
        segments = [(SEGMENT_CONTROL, payload)]
        track = TRACK_CONTROL
    step = max_frame - FRAME_HEADER.size
    frames = 0
    last = len(segments) - 1
    for i, (seg_type, data) in enumerate(segments):
        seg_flags = (FIRST_SEGMENT if i == 0 else 0) | (LAST_SEGMENT if i == last else 0)
        view = memoryview(data)
        pos = 0
        while True:
            chunk = view[pos : pos + step]
            flags = seg_flags | (FIRST_FRAME if pos == 0 else 0)
            pos += len(chunk)
            if pos >= len(data):
                flags |= LAST_FRAME
            buf += FRAME_HEADER.pack(
                flags, seg_type, len(chunk) + FRAME_HEADER.size, track, channel
            )
            buf += chunk
            frames += 1
            if flags & LAST_FRAME:
                break
    return frames


@dataclass(slots=True)
class _Track:
    """One channel's track: the segment being read, and the command it belongs to."""

    seg_type: int = -1
    parts: list[bytes] = field(default_factory=list)
    op: Compound | None = None
    body: list[bytes] = field(default_factory=list)
    has_header: bool = False


class Assembler:
    """Frames in, whole controls and commands out (``(channel, op)``), interleaved
    channels and tracks kept apart; :class:`FramingError` for frames out of order,
    :class:`~.codec.DecodeError` for a segment that does not decode."""

    def __init__(self, max_frame: int = 0xFFFF) -> None:
        self.max_frame = max_frame
        self._buf = bytearray()
        self._tracks: dict[tuple[int, int], _Track] = {}

    def feed(self, data: bytes) -> list[tuple[int, Compound]]:
        buf = self._buf
        buf += data
        out: list[tuple[int, Compound]] = []
        pos = 0
        hsize = FRAME_HEADER.size
        try:
            while len(buf) - pos >= hsize:
                flags, seg_type, size, track, channel = FRAME_HEADER.unpack_from(buf, pos)
                if flags & 0xF0:
                    raise FramingError(f"frame flags {flags:#04x}: version or reserved bits set")
                if size < hsize or size > self.max_frame:
                    raise FramingError(
                        f"a frame of {size} octets (at least {hsize}, at most {self.max_frame})"
                    )
                if len(buf) - pos < size:
                    break
                payload = bytes(buf[pos + hsize : pos + size])
                pos += size
                op = self._frame(flags, seg_type, track & 0x0F, channel, payload)
                if op is not None:
                    out.append((channel, op))
        finally:
            del buf[:pos]
        return out

    def _frame(
        self, flags: int, seg_type: int, track: int, channel: int, payload: bytes
    ) -> Compound | None:
        if seg_type > SEGMENT_BODY:
            raise FramingError(f"segment type {seg_type} (0-3: control, command, header, body)")
        if track > TRACK_COMMAND:
            raise FramingError(f"track {track} (0: control, 1: command)")
        t = self._tracks.get((channel, track))
        if t is None:
            t = self._tracks[(channel, track)] = _Track()
        if t.seg_type < 0:
            if not flags & FIRST_FRAME:
                raise FramingError(
                    f"channel {channel}: a segment's frame without first-frame and none begun"
                )
            t.seg_type = seg_type
        elif flags & FIRST_FRAME or seg_type != t.seg_type:
            raise FramingError(
                f"channel {channel}: a new segment before segment type {t.seg_type} ended"
            )
        if not flags & LAST_FRAME:
            t.parts.append(payload)
            return None
        if t.parts:
            t.parts.append(payload)
            data = b"".join(t.parts)
            t.parts.clear()
        else:  # (a segment in one frame: the usual)
            data = payload
        t.seg_type = -1
        return self._segment(t, flags, seg_type, track, channel, data)

    def _segment(
        self, t: _Track, flags: int, seg_type: int, track: int, channel: int, data: bytes
    ) -> Compound | None:
        first, last = flags & FIRST_SEGMENT, flags & LAST_SEGMENT
        if seg_type in (SEGMENT_CONTROL, SEGMENT_COMMAND):
            if not first or t.op is not None:
                raise FramingError(
                    f"channel {channel}: a {'control' if seg_type == 0 else 'command'} segment in the middle of an assembly"
                )
            if seg_type != (SEGMENT_CONTROL if track == TRACK_CONTROL else SEGMENT_COMMAND):
                raise FramingError(f"channel {channel}: segment type {seg_type} on track {track}")
            op = _decode_op(seg_type, data)
            if last:
                return op
            if not op.spec.segments:
                raise FramingError(f"channel {channel}: {op.name} has no header or body segments")
            t.op = op
            return None
        pending = t.op
        if first or pending is None:
            raise FramingError(
                f"channel {channel}: a {'header' if seg_type == 2 else 'body'} segment without its command"
            )
        if seg_type == SEGMENT_HEADER:
            if t.has_header or t.body:
                raise FramingError(
                    f"channel {channel}: a second header segment, or one after the body"
                )
            t.has_header = True
            pending.raw_headers = data
            r = Reader(data)
            while r.left:
                pending.headers.append(decode_struct32(r))
        else:
            t.body.append(data)
        if not last:
            return None
        pending.body = b"".join(t.body)
        t.op = None
        t.body.clear()
        t.has_header = False
        return pending


def _decode_op(seg_type: int, data: bytes) -> Compound:
    r = Reader(data)
    code = r.unpack(_U16)
    table = CONTROLS if seg_type == SEGMENT_CONTROL else COMMANDS
    spec = table.get(code)
    if spec is None:
        kind = "control" if seg_type == SEGMENT_CONTROL else "command"
        raise DecodeError(f"unknown {kind} code {code:#06x}")
    sync = False
    if seg_type == SEGMENT_COMMAND:
        header = r.window(r.unpack(_U8))
        if (
            header.left == 1 and data[header.pos] & 0xFE == 0
        ):  # (the usual one: size 1, sync or not)
            sync = data[header.pos] == 1
        else:
            sync = bool(decode_fields(header, _SESSION_HEADER).get("sync"))
    op = Compound(spec, decode_fields(r, spec))
    op.sync = sync
    return op
