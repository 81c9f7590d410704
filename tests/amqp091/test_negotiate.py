"""The protocol header dispatch helper."""

from __future__ import annotations

import pytest

from amqp10.amqp091.dialects import AMQP_0_8, AMQP_0_9, AMQP_0_9_1
from amqp10.amqp091.negotiate import Protocol, Unsupported, identify_header


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (b"AMQP\x00\x00\x09\x01", Protocol.AMQP_0_9_1),
        (b"AMQP\x01\x01\x09\x01", Protocol.AMQP_0_9_1),
        (b"AMQP\x01\x01\x00\x09", Protocol.AMQP_0_9),
        (b"AMQP\x01\x01\x08\x00", Protocol.AMQP_0_8),
        (b"AMQP\x00\x01\x00\x00", Protocol.AMQP_1_0),
        (b"AMQP\x03\x01\x00\x00", Protocol.AMQP_1_0_SASL),
        (b"AMQP\x02\x01\x00\x00", Protocol.AMQP_1_0_TLS),
    ],
)
def test_supported_headers(header: bytes, expected: Protocol) -> None:
    assert identify_header(header) is expected


def test_dialects_of_protocols() -> None:
    assert Protocol.AMQP_0_9_1.dialect is AMQP_0_9_1
    assert Protocol.AMQP_0_9.dialect is AMQP_0_9
    assert Protocol.AMQP_0_8.dialect is AMQP_0_8
    assert Protocol.AMQP_1_0.dialect is None


@pytest.mark.parametrize(
    ("header", "reply"),
    [
        (b"AMQP\x01\x01\x00\x0a", b"AMQP\x00\x00\x09\x01"),  # 0-10
        (b"AMQP\x00\x00\x09\x00", b"AMQP\x00\x00\x09\x01"),  # 0-9-0
        (b"GET / HT", b"AMQP\x00\x00\x09\x01"),
        (b"AMQP\x00\x01\x00\x01", b"AMQP\x00\x01\x00\x00"),  # 1.0 family, other revision
        (b"AMQP\x03\x01\x01\x00", b"AMQP\x03\x01\x00\x00"),
        (b"AMQP\x02\x01\x00\x05", b"AMQP\x02\x01\x00\x00"),
    ],
)
def test_unsupported_headers_get_the_preferred_version(header: bytes, reply: bytes) -> None:
    assert identify_header(header) == Unsupported(reply=reply)


def test_header_length_is_checked() -> None:
    with pytest.raises(ValueError):
        identify_header(b"AMQP")
