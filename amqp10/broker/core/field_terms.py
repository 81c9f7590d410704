"""0-9-1 field values as RabbitMQ parses them from a field table (``rabbit_binary_parser``):
the name of each value's field type and its Erlang term. The field type is the one
:mod:`amqp10.amqp091.fields` encodes each Python value as, worked out here from the
value's type (the core reaches no protocol engine); a value with no field type (a 1.0
uuid, say) is the long string of its text. The one home of this reading: a re-declaration's
comparison (:mod:`.equivalence`) and the checks at declaration (:mod:`.arguments`)."""

from __future__ import annotations

import struct
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Final

from ... import field_types as ft

__all__ = ["field_type_name", "parsed"]

_FIXED: Final[dict[type, tuple[str, int, int]]] = {
    ft.Int8: ("byte", -(1 << 7), 1 << 7),
    ft.UInt8: ("unsignedbyte", 0, 1 << 8),
    ft.Int16: ("short", -(1 << 15), 1 << 15),
    ft.UInt16: ("unsignedshort", 0, 1 << 16),
    ft.UInt32: ("unsignedint", 0, 1 << 32),
    ft.Int64: ("long", -(1 << 63), 1 << 63),
    ft.Timestamp: ("timestamp", 0, 1 << 64),
}
"""The 0-9-1 integer field types: RabbitMQ's name of each, and the range it encodes."""

_FLOAT32: Final = struct.Struct(">f")
_MAX_DEPTH: Final = 32
"""As :data:`amqp10.amqp091.fields.MAX_DEPTH`: a value nested deeper has no field type."""


class _NoFieldType(Exception):
    """A value (or a part of one) that no 0-9-1 field type encodes."""


def parsed(value: Any) -> tuple[str, Any]:
    """``value`` as RabbitMQ parses it from a field table: the name of its field type and its
    Erlang term (a binary as ``bytes``, an atom as ``str``, a tuple or list as one); a value
    with no field type as the long string of its text."""
    try:
        return _term(value, 0)
    except _NoFieldType:
        return "longstr", str(value).encode()


def _term(value: Any, depth: int) -> tuple[str, Any]:
    """(The field type's name, the term) as :func:`parsed`, or :class:`_NoFieldType`; in the
    order :func:`amqp10.amqp091.fields.encode_value` picks an encoder (a subclass as its base)."""
    if value is None:
        return "void", "undefined"
    if isinstance(value, bool):
        return "bool", "true" if value else "false"
    for cls in type(value).__mro__:
        fixed = _FIXED.get(cls)
        if fixed is not None:
            type_name, low, high = fixed
            if not low <= value < high:
                raise _NoFieldType
            return type_name, int(value)
        if cls is ft.Float32:
            try:
                return "float", float(_FLOAT32.unpack(_FLOAT32.pack(value))[0])
            except (OverflowError, struct.error):
                raise _NoFieldType from None
        if cls is ft.LongString:
            return "longstr", bytes(value)
    if isinstance(value, int):
        if -(1 << 31) <= value < 1 << 31:
            return "signedint", int(value)
        if -(1 << 63) <= value < 1 << 63:
            return "long", int(value)
        raise _NoFieldType
    if isinstance(value, float):
        return "double", float(value)
    if isinstance(value, Decimal):
        return "decimal", _decimal(value)
    if isinstance(value, str):
        return "longstr", value.encode()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "binary", bytes(value)
    if isinstance(value, datetime):
        when = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        seconds = int(when.timestamp())
        if not 0 <= seconds < 1 << 64:
            raise _NoFieldType
        return "timestamp", seconds
    if isinstance(value, (dict, list, tuple)) and depth >= _MAX_DEPTH:
        raise _NoFieldType
    if isinstance(value, dict):
        rows: list[tuple[bytes, str, Any]] = []
        for k, v in value.items():
            if not isinstance(k, str) or len(k.encode()) > 255:
                raise _NoFieldType
            row_type, row_term = _term(v, depth + 1)
            rows.append((k.encode(), row_type, row_term))
        return "table", rows
    if isinstance(value, (list, tuple)):
        return "array", [_term(v, depth + 1) for v in value]
    raise _NoFieldType


def _decimal(value: Decimal) -> tuple[int, int]:
    """A decimal's term ``{Scale, Digits}``, its digits read back as unsigned 32 bits (as
    RabbitMQ parses them)."""
    sign, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int):
        raise _NoFieldType
    raw = int("".join(map(str, digits)) or "0")
    scale = -exponent
    if scale < 0:
        raw *= 10**exponent
        scale = 0
    if scale > 255 or raw > 0x7FFFFFFF:
        raise _NoFieldType
    return scale, (-raw if sign else raw) & 0xFFFFFFFF


def field_type_name(value: Any) -> str:
    """RabbitMQ's name of the field type of ``value`` (``longstr``, ``long``, ``decimal``,
    ``array``...; a value with no field type: ``longstr``)."""
    return parsed(value)[0]
