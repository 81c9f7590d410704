"""The core's naming of an argument's value (core/equivalence.py) is the 0-9-1 encoder's: each
value gets the field type :func:`amqp10.amqp091.fields.encode_value` writes it as, and the
term RabbitMQ parses from those bytes. The core reaches no protocol engine, so it works the
type out from the value; this holds the two to one behaviour."""

from __future__ import annotations

import struct
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from enum import IntEnum
from typing import Any

import pytest

from amqp10.amqp091 import fields as f
from amqp10.broker.core.equivalence import parsed
from amqp10.types import symbol, ubyte

_NAMES = {
    "t": "bool", "b": "byte", "B": "unsignedbyte", "s": "short", "u": "unsignedshort", "I": "signedint",
    "i": "unsignedint", "l": "long", "f": "float", "d": "double", "D": "decimal", "S": "longstr",
    "T": "timestamp", "F": "table", "A": "array", "V": "void", "x": "binary",
}  # fmt: skip
"""RabbitMQ's name of each field type (``rabbit_binary_parser``)."""


class _Colour(IntEnum):
    RED = 1


def _from_wire(data: bytes) -> tuple[str, Any]:
    """The field type and term RabbitMQ parses from one encoded value (what ``parsed`` must give)."""
    code = chr(data[0])
    value, _ = f.decode_value(data, 0)
    if code in "Sx":
        return _NAMES[code], bytes(value.encode() if isinstance(value, str) else value)
    if code == "t":
        return "bool", "true" if value else "false"
    if code == "V":
        return "void", "undefined"
    if code == "D":
        return "decimal", (data[1], struct.unpack_from(">I", data, 2)[0])
    if code == "T":
        return "timestamp", struct.unpack_from(">Q", data, 1)[0]
    if code == "F":
        return "table", [(k.encode(), *_wire_term(v)) for k, v in value.items()]
    if code == "A":
        return "array", [_wire_term(v) for v in value]
    return _NAMES[code], float(value) if code in "fd" else int(value)


def _wire_term(value: Any) -> tuple[str, Any]:
    buf = bytearray()
    f.encode_value(buf, value)
    return _from_wire(bytes(buf))


@pytest.mark.parametrize(
    "value",
    [
        True, False, None, 0, -1, 5, (1 << 31) - 1, 1 << 31, -(1 << 31) - 1, (1 << 63) - 1,
        f.Int8(-3), f.UInt8(200), f.Int16(-300), f.UInt16(60000), f.UInt32(1 << 31), f.Int64(5), f.Timestamp(7),
        2.5, f.Float32(2.1), Decimal("1.5"), Decimal("-1.5"), Decimal("1E+2"), Decimal("3.0"),
        "text", "ünï", symbol("sym"), f.LongString(b"\xff"), b"raw", bytearray(b"ba"), memoryview(b"mv"),
        datetime(2024, 5, 1, 12, 0, tzinfo=UTC), datetime(2024, 5, 1, 12, 0),
        [1, "a", [f.Int8(1)], {"k": 2.5}], (1, 2), {"n": f.Int64(3), "t": {"deep": [None, True]}},
        _Colour.RED, ubyte(7),
    ],
)  # fmt: skip
def test_a_value_is_named_as_the_0_9_1_encoder_writes_it(value: Any) -> None:
    assert parsed(value) == _wire_term(value)


@pytest.mark.parametrize(
    "value",
    [1 << 64, f.Int8(300), f.UInt8(-1), Decimal("NaN"), Decimal("1e-300"), Decimal(1 << 40), uuid.UUID(int=1), {1: "a"}, [1 << 70]],
)
def test_a_value_without_a_field_type_is_the_long_string_of_its_text(value: Any) -> None:
    with pytest.raises((TypeError, ValueError, OverflowError, AttributeError, struct.error)):
        f.encode_value(bytearray(), value)
    assert parsed(value) == ("longstr", str(value).encode())
