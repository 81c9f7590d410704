"""A transfer's header segment as bytes: the assembler keeps it beside the decoded structs,
a transfer sent with ``raw_headers`` goes out as it is, and the broker stores and delivers
it without decoding and encoding it again (only delivery-properties, where it changes)."""

from __future__ import annotations

import uuid

import pytest

from amqp10.amqp010 import Compound, op
from amqp10.amqp010.codec import DecodeError, encode_structs
from amqp10.amqp010.framing import (
    FIRST_FRAME,
    FIRST_SEGMENT,
    FRAME_HEADER,
    LAST_FRAME,
    LAST_SEGMENT,
    SEGMENT_COMMAND,
    Assembler,
    encode_op,
)
from amqp10.broker.amqp010.message import from_transfer, pack, split, unpack, with_struct

from .peer import struct as mk


def transfer(sync: bool = False) -> Compound:
    t = op("message.transfer", destination="", accept_mode=0, acquire_mode=0)
    t.sync = sync
    t.headers = [
        mk("delivery-properties", routing_key="q", priority=6),
        mk(
            "message-properties",
            message_id=uuid.UUID(int=7),
            application_headers={"qpid.subject": "s", "n": 7, "m": {"deep": [1, "two"]}},
        ),
    ]
    t.body = b"body"
    return t


def encoded(headers: list[Compound]) -> bytes:
    buf = bytearray()
    encode_structs(buf, headers)
    return bytes(buf)


def assembled(t: Compound) -> Compound:
    buf = bytearray()
    encode_op(buf, 1, t, 0xFFFF)
    ((_, got),) = Assembler().feed(bytes(buf))
    return got


def test_the_assembler_keeps_the_header_segment_beside_the_decoded_structs() -> None:
    for sync in (False, True):
        t = transfer(sync)
        got = assembled(t)
        assert got == t and got.sync is sync
        assert got.raw_headers == encoded(t.headers)


def test_a_transfer_with_raw_headers_is_sent_as_they_are() -> None:
    t = transfer()
    plain, raw = bytearray(), bytearray()
    encode_op(plain, 1, t, 0xFFFF)
    again = transfer()
    again.raw_headers = encoded(t.headers)
    again.headers = []
    encode_op(raw, 1, again, 0xFFFF)
    assert raw == plain


def test_with_struct_replaces_one_struct_and_keeps_the_others_as_they_are() -> None:
    t = transfer()
    raw = encoded(t.headers)
    dp = mk("delivery-properties", routing_key="q", exchange="amq.direct")
    assert with_struct(raw, dp) == encoded([dp, t.headers[1]])
    only_mp = encoded(t.headers[1:])
    assert with_struct(only_mp, dp) == encoded([dp, t.headers[1]])  # (first if absent)


def test_a_stored_transfer_is_the_same_as_when_its_structs_were_encoded_again() -> None:
    got = assembled(transfer())
    msg = from_transfer(got, "amq.direct", 1000.0)
    dp = got.header("delivery-properties")
    assert dp is not None and dp["exchange"] == "amq.direct"
    assert msg.data == pack(got.headers, got.body)
    raw, body = split(msg.data)
    assert (raw, body) == (encoded(got.headers), b"body")
    assert unpack(msg.data) == (got.headers, b"body")


def command(payload: bytes) -> Compound:
    """``payload`` as one command segment in one frame, assembled."""
    flags = FIRST_SEGMENT | LAST_SEGMENT | FIRST_FRAME | LAST_FRAME
    frame = FRAME_HEADER.pack(flags, SEGMENT_COMMAND, FRAME_HEADER.size + len(payload), 1, 1)
    ((_, got),) = Assembler().feed(frame + payload)
    return got


def test_a_command_segments_session_header_read_fast_or_in_full() -> None:
    """Size 1 with the sync flag or none is read directly; anything else as a struct, as
    before (flags it does not have, no flags: a decode error)."""
    code = op("execution.sync").spec.code
    assert code is not None
    head = code.to_bytes(2, "big")
    assert command(head + b"\x01\x01" + b"\x00\x00").sync is True
    assert command(head + b"\x01\x00" + b"\x00\x00").sync is False
    assert command(head + b"\x02\x01\x00" + b"\x00\x00").sync is True  # (a longer header)
    for bad in (b"\x01\x02", b"\x00"):
        with pytest.raises(DecodeError):
            command(head + bad + b"\x00\x00")
