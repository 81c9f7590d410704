"""Field tables and arrays: exact round trips, known encodings, malformed input."""

from __future__ import annotations

import struct
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from amqp10.amqp091.fields import (
    MAX_DEPTH,
    DecodeError,
    Float32,
    Int8,
    Int16,
    Int64,
    LongString,
    Timestamp,
    UInt8,
    UInt16,
    UInt32,
    decode_table,
    decode_value,
    encode_table,
    encode_value,
    get_shortstr,
    put_shortstr,
)

from .strategies import assert_same, tables, values


def enc(value: Any) -> bytes:
    buf = bytearray()
    encode_value(buf, value)
    return bytes(buf)


@given(tables)
def test_table_round_trip_is_exact(table: dict[str, Any]) -> None:
    buf = bytearray()
    encode_table(buf, table)
    decoded, end = decode_table(bytes(buf), 0)
    assert end == len(buf)
    assert_same(decoded, table)
    again = bytearray()
    encode_table(again, decoded)
    assert again == buf


@given(values)
def test_value_round_trip(value: Any) -> None:
    data = enc(value)
    decoded, end = decode_value(data, 0)
    assert end == len(data)
    assert_same(decoded, value)


@pytest.mark.parametrize(
    ("value", "wire"),
    [
        (True, b"t\x01"),
        (False, b"t\x00"),
        (Int8(-2), b"b\xfe"),
        (UInt8(200), b"B\xc8"),
        (Int16(-2), b"s\xff\xfe"),
        (UInt16(65535), b"u\xff\xff"),
        (5, b"I\x00\x00\x00\x05"),
        (-1, b"I\xff\xff\xff\xff"),
        (UInt32(2**32 - 1), b"i\xff\xff\xff\xff"),
        (2**40, b"l" + struct.pack(">q", 2**40)),
        (Int64(1), b"l" + struct.pack(">q", 1)),
        (Float32(1.5), b"f" + struct.pack(">f", 1.5)),
        (1.5, b"d" + struct.pack(">d", 1.5)),
        (Decimal("1.25"), b"D\x02\x00\x00\x00\x7d"),
        (Decimal("-3"), b"D\x00\xff\xff\xff\xfd"),
        (Decimal("5E+2"), b"D\x00\x00\x00\x01\xf4"),
        ("hé", b"S\x00\x00\x00\x03h\xc3\xa9"),
        (LongString(b"\xff"), b"S\x00\x00\x00\x01\xff"),
        (b"\x00\x01", b"x\x00\x00\x00\x02\x00\x01"),
        (Timestamp(7), b"T\x00\x00\x00\x00\x00\x00\x00\x07"),
        (datetime(1970, 1, 1, 0, 0, 7, tzinfo=UTC), b"T\x00\x00\x00\x00\x00\x00\x00\x07"),
        ([1, None], b"A\x00\x00\x00\x06I\x00\x00\x00\x01V"),
        ({"a": True}, b"F\x00\x00\x00\x04\x01at\x01"),
        (None, b"V"),
    ],
)
def test_errata_encodings(value: Any, wire: bytes) -> None:
    """RabbitMQ's errata type codes, byte for byte."""
    assert enc(value) == wire


def test_invalid_utf8_longstr_stays_bytes_and_valid_becomes_str() -> None:
    assert_same(decode_value(b"S\x00\x00\x00\x01\xff", 0)[0], LongString(b"\xff"))
    assert_same(decode_value(b"S\x00\x00\x00\x01a", 0)[0], "a")


def test_unsupported_and_out_of_range_values() -> None:
    with pytest.raises(TypeError):
        enc(object())
    with pytest.raises(ValueError):
        enc(Decimal("NaN"))
    with pytest.raises(ValueError):
        enc(Decimal(2**40))
    with pytest.raises(ValueError):
        put_shortstr(bytearray(), "x" * 256)
    with pytest.raises(struct.error):
        enc(Int8(200))


def test_nesting_is_limited_both_ways() -> None:
    deep: Any = 1
    for _ in range(MAX_DEPTH + 1):
        deep = {"k": deep}
    with pytest.raises(ValueError):
        encode_table(bytearray(), deep)
    wire = b"V"
    for _ in range(MAX_DEPTH + 1):
        wire = b"A" + struct.pack(">I", len(wire)) + wire
    with pytest.raises(DecodeError, match="deeply"):
        decode_value(wire, 0)


@pytest.mark.parametrize(
    "wire",
    [
        b"\x00\x00\x00\x05\x01aZ\x00\x00",  # unknown type code
        b"\x00\x00\x00\x09\x01aS\x00\x00\x00\x09x",  # long string past the end
        b"\x00\x00\x00\x03\x01at\x01",  # size too small for the contents
        b"\x00\x00\x00\x10",  # size past the end
        b"\x00\x00\x00\x04\x01\xffV",  # key not UTF-8
    ],
)
def test_malformed_tables(wire: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_table(wire, 0)


@given(st.binary(max_size=64))
def test_arbitrary_bytes_decode_or_raise_decode_errors(data: bytes) -> None:
    """Garbage never raises anything but the errors the engine maps to SYNTAX_ERROR."""
    try:
        decode_table(data, 0)
    except (DecodeError, IndexError, struct.error):
        pass


def test_shortstr_helpers() -> None:
    buf = bytearray()
    put_shortstr(buf, "héllo")
    assert get_shortstr(bytes(buf), 0) == ("héllo", len(buf))
    with pytest.raises(DecodeError):
        get_shortstr(b"\x05ab", 0)


def test_subclasses_and_naive_datetimes() -> None:
    import enum
    from collections import OrderedDict

    class Level(enum.IntEnum):
        HIGH = 9

    assert enc(Level.HIGH) == enc(9)
    assert enc(OrderedDict(a=1)) == enc({"a": 1})
    assert enc(datetime(1970, 1, 1, 0, 0, 7)) == b"T" + struct.pack(">Q", 7)  # naive: UTC
