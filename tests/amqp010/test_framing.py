"""Frames and segments: commands and messages of any size over frames, interleaved between
channels, assembled back; frames out of order are framing errors."""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from amqp10.amqp010 import Compound, op
from amqp10.amqp010.framing import (
    FIRST_FRAME,
    FIRST_SEGMENT,
    FRAME_HEADER,
    LAST_FRAME,
    LAST_SEGMENT,
    Assembler,
    FramingError,
    encode_op,
)

from .peer import struct as mk


def transfer(body: bytes, key: str = "k") -> Compound:
    t = op("message.transfer", destination="amq.direct", accept_mode=0, acquire_mode=0)
    t.sync = True
    t.headers = [
        mk("delivery-properties", routing_key=key),
        mk("message-properties", content_type="text/plain"),
    ]
    t.body = body
    return t


def frames(data: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(data):
        size = struct.unpack_from(">H", data, pos + 2)[0]
        out.append(data[pos : pos + size])
        pos += size
    return out


@given(st.binary(max_size=20_000), st.integers(4096, 9000), st.integers(1, 5000))
def test_a_message_over_frames_fed_in_any_pieces(body: bytes, max_frame: int, piece: int) -> None:
    buf = bytearray()
    n = encode_op(buf, 3, transfer(body), max_frame)
    assert n == len(frames(bytes(buf))) and all(len(f) <= max_frame for f in frames(bytes(buf)))
    a = Assembler(max_frame)
    got = []
    for i in range(0, len(buf), piece):
        got += a.feed(bytes(buf[i : i + piece]))
    assert got == [(3, transfer(body))]


def test_the_frame_header_layout() -> None:
    buf = bytearray()
    encode_op(buf, 7, op("session.attach", name=b"s"), 0xFFFF)
    flags, seg_type, size, track, channel = FRAME_HEADER.unpack_from(buf)
    assert (flags, seg_type, size, track, channel) == (
        FIRST_SEGMENT | LAST_SEGMENT | FIRST_FRAME | LAST_FRAME,
        0,
        len(buf),
        0,
        7,
    )
    assert bytes(buf[12:14]) == b"\x02\x01"  # session.attach


def test_channels_interleaved_frame_by_frame() -> None:
    a_buf, b_buf = bytearray(), bytearray()
    encode_op(a_buf, 1, transfer(b"a" * 10_000, "a"), 4096)
    encode_op(b_buf, 2, transfer(b"b" * 9_000, "b"), 4096)
    fa, fb = frames(bytes(a_buf)), frames(bytes(b_buf))
    mixed: list[bytes] = []
    rng = random.Random(7)
    while fa or fb:
        src = fa if fa and (not fb or rng.random() < 0.5) else fb
        mixed.append(src.pop(0))
    got = Assembler(4096).feed(b"".join(mixed))
    assert sorted((ch, item.body[:1]) for ch, item in got) == [(1, b"a"), (2, b"b")]
    assert {ch: len(item.body) for ch, item in got} == {1: 10_000, 2: 9_000}


def test_a_control_between_a_commands_frames_on_the_same_channel() -> None:
    buf = bytearray()
    encode_op(buf, 1, transfer(b"x" * 6000), 4096)
    ctl = bytearray()
    encode_op(ctl, 1, op("session.flush", completed=True), 4096)
    fs = frames(bytes(buf))
    got = Assembler(4096).feed(fs[0] + bytes(ctl) + b"".join(fs[1:]))
    assert [item.name for _, item in got] == ["session.flush", "message.transfer"]


def frame(flags: int, seg_type: int, payload: bytes, track: int = 1, channel: int = 0) -> bytes:
    return FRAME_HEADER.pack(flags, seg_type, 12 + len(payload), track, channel) + payload


WHOLE = FIRST_FRAME | LAST_FRAME


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (frame(0x80 | WHOLE, 0, b"\x01\x0a\x00\x00", 0), "version or reserved"),
        (frame(WHOLE | FIRST_SEGMENT | LAST_SEGMENT, 4, b""), "segment type 4"),
        (frame(WHOLE | FIRST_SEGMENT | LAST_SEGMENT, 0, b"\x01\x0a\x00\x00", track=3), "track 3"),
        (frame(LAST_FRAME | FIRST_SEGMENT | LAST_SEGMENT, 1, b""), "without first-frame"),
        (frame(WHOLE | LAST_SEGMENT, 2, b""), "header segment without its command"),
        (frame(WHOLE | LAST_SEGMENT, 3, b"body"), "body segment without its command"),
        (
            frame(WHOLE | FIRST_SEGMENT | LAST_SEGMENT, 0, b"\x01\x0a\x00\x00", track=1),
            "segment type 0 on track 1",
        ),
        (FRAME_HEADER.pack(WHOLE, 0, 8, 0, 0), "a frame of 8 octets"),
    ],
)
def test_frames_out_of_order_are_framing_errors(data: bytes, error: str) -> None:
    with pytest.raises(FramingError, match=error):
        Assembler().feed(data)


def test_a_command_with_more_segments_than_it_has_is_refused() -> None:
    buf = bytearray()
    encode_op(buf, 0, op("queue.declare", queue="q"), 4096)
    raw = bytearray(buf)
    raw[0] &= ~LAST_SEGMENT  # queue.declare claims a header follows
    with pytest.raises(FramingError, match="no header or body"):
        Assembler().feed(bytes(raw))


def test_a_new_segment_before_the_last_ended() -> None:
    buf = bytearray()
    encode_op(buf, 0, transfer(b"x" * 6000), 4096)
    fs = frames(bytes(buf))  # command, header, then body frames
    with pytest.raises(FramingError, match="in the middle of an assembly"):
        Assembler(4096).feed(b"".join(fs[:2]) + fs[0])


def test_an_oversized_frame_is_refused() -> None:
    with pytest.raises(FramingError, match="at most 4096"):
        Assembler(4096).feed(FRAME_HEADER.pack(WHOLE, 0, 5000, 0, 0))
