"""0-9-1 field values: short/long strings and field tables and arrays.

Field tables use RabbitMQ's errata type codes (the ones every 0-9-1 client
speaks, not the 0-9-1 XML's grammar, which disagrees on ``s``, ``l`` and ``U``)::

    t bool     b int8      B uint8     s int16     u uint16    I int32
    i uint32   l int64     f float32   d float64   D decimal   S longstr
    A array    T timestamp F table     V void      x bytes

Decoding is exact: a value decodes to a Python type that encodes back to the
same type code (plain ``bool``, ``int`` for ``I``, ``float`` for ``d``,
``Decimal``, ``str`` for UTF-8 ``S``, ``bytes`` for ``x``, ``list``, ``dict``,
``None``, ``int`` for an ``l`` beyond 32 bits; the small ``int``/``float``/``bytes``
subclasses below for the rest),
so a broker can pass headers on unchanged. Plain ``int`` encodes as ``I`` when it
fits 32 bits, else ``l``; ``datetime`` as ``T``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any, Final, TypeAlias

from ..field_types import Float32, Int8, Int16, Int64, LongString, Timestamp, UInt8, UInt16, UInt32

__all__ = [
    "MAX_DEPTH",
    "DecodeError",
    "FieldTable",
    "Float32",
    "Int8",
    "Int16",
    "Int64",
    "LongString",
    "Timestamp",
    "UInt8",
    "UInt16",
    "UInt32",
    "decode_table",
    "decode_value",
    "encode_table",
    "encode_value",
    "get_longstr",
    "get_shortstr",
    "put_longstr",
    "put_shortstr",
]

FieldTable: TypeAlias = dict[str, Any]
MAX_DEPTH: Final = 32
"""Nesting limit for tables and arrays inside tables (checked before recursing)."""


class DecodeError(ValueError):
    """Malformed bytes: the connection answers with SYNTAX_ERROR (or FRAME_ERROR)."""


_B = struct.Struct(">B")
_H = struct.Struct(">H")
_I = struct.Struct(">I")
_CODED = {
    code: struct.Struct(">" + fmt)
    for code, fmt in {
        "b": "b", "B": "B", "s": "h", "u": "H", "I": "i", "i": "I",
        "l": "q", "f": "f", "d": "d", "T": "Q",
    }.items()
}  # fmt: skip
_pack_I = _I.pack
_unpack_I = _I.unpack_from


# -- strings ---------------------------------------------------------------------------


def put_shortstr(buf: bytearray, value: str) -> None:
    """Append a short string (length octet + UTF-8); longer than 255 bytes is a ValueError."""
    raw = value.encode()
    if len(raw) > 255:
        raise ValueError(f"short string longer than 255 bytes: {value[:40]!r}...")
    buf.append(len(raw))
    buf += raw


def get_shortstr(data: bytes, off: int) -> tuple[str, int]:
    """A short string at ``off`` and the offset after it."""
    end = off + 1 + data[off]
    if end > len(data):
        raise DecodeError("short string runs past the end of the frame")
    try:
        return data[off + 1 : end].decode(), end
    except UnicodeDecodeError as exc:
        raise DecodeError(f"short string is not UTF-8: {exc}") from None


def put_longstr(buf: bytearray, value: bytes | str) -> None:
    """Append a long string (32-bit length + bytes; ``str`` is UTF-8 encoded)."""
    raw = value.encode() if isinstance(value, str) else value
    buf += _pack_I(len(raw))
    buf += raw


def get_longstr(data: bytes, off: int) -> tuple[bytes, int]:
    """A long string's bytes at ``off`` and the offset after it."""
    (n,) = _unpack_I(data, off)
    end = off + 4 + n
    if end > len(data):
        raise DecodeError("long string runs past the end of the frame")
    return bytes(data[off + 4 : end]), end


# -- encoding ----------------------------------------------------------------------------

_Encoder = Callable[[bytearray, Any, int], None]


def _fixed(code: str) -> _Encoder:
    st = _CODED[code]
    tag = code.encode()

    def enc(buf: bytearray, value: Any, depth: int) -> None:
        buf += tag
        buf += st.pack(value)

    return enc


def _enc_bool(buf: bytearray, value: Any, depth: int) -> None:
    buf += b"t\x01" if value else b"t\x00"


_int32 = _CODED["I"].pack
_int64 = _CODED["l"].pack


def _enc_int(buf: bytearray, value: Any, depth: int) -> None:
    if -0x80000000 <= value <= 0x7FFFFFFF:
        buf += b"I"
        buf += _int32(value)
    else:
        buf += b"l"
        buf += _int64(value)


def _enc_decimal(buf: bytearray, value: Any, depth: int) -> None:
    sign, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int):
        raise ValueError(f"decimal field value must be finite: {value}")
    raw = int("".join(map(str, digits)) or "0")
    if exponent > 0:
        raw *= 10**exponent
        exponent = 0
    if not (-exponent <= 255 and raw <= 0x7FFFFFFF):
        raise ValueError(f"decimal field value out of range (scale 0-255, 32-bit): {value}")
    buf += b"D"
    buf.append(-exponent)
    buf += _int32(-raw if sign else raw)


def _enc_str(buf: bytearray, value: Any, depth: int) -> None:
    raw = value.encode()
    buf += b"S"
    buf += _pack_I(len(raw))
    buf += raw


def _enc_longstring(buf: bytearray, value: Any, depth: int) -> None:
    buf += b"S"
    buf += _pack_I(len(value))
    buf += value


def _enc_bytes(buf: bytearray, value: Any, depth: int) -> None:
    buf += b"x"
    buf += _pack_I(len(value))
    buf += value


def _enc_datetime(buf: bytearray, value: Any, depth: int) -> None:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    buf += b"T"
    buf += _CODED["T"].pack(int(value.timestamp()))


def _enc_table(buf: bytearray, value: Any, depth: int) -> None:
    buf += b"F"
    encode_table(buf, value, depth + 1)


def _enc_array(buf: bytearray, value: Any, depth: int) -> None:
    if depth >= MAX_DEPTH:
        raise ValueError("field array nested too deeply")
    buf += b"A"
    start = len(buf)
    buf += b"\0\0\0\0"
    for item in value:
        _encoder_for(type(item))(buf, item, depth + 1)
    _I.pack_into(buf, start, len(buf) - start - 4)


def _enc_void(buf: bytearray, value: Any, depth: int) -> None:
    buf += b"V"


_ENCODERS: dict[type, _Encoder] = {
    bool: _enc_bool,
    int: _enc_int,
    Int8: _fixed("b"),
    UInt8: _fixed("B"),
    Int16: _fixed("s"),
    UInt16: _fixed("u"),
    UInt32: _fixed("i"),
    Int64: _fixed("l"),
    Timestamp: _fixed("T"),
    float: _fixed("d"),
    Float32: _fixed("f"),
    Decimal: _enc_decimal,
    str: _enc_str,
    LongString: _enc_longstring,
    bytes: _enc_bytes,
    bytearray: _enc_bytes,
    memoryview: _enc_bytes,
    datetime: _enc_datetime,
    dict: _enc_table,
    list: _enc_array,
    tuple: _enc_array,
    type(None): _enc_void,
}


def _encoder_for(tp: type) -> _Encoder:
    enc = _ENCODERS.get(tp)
    if enc is None:
        for base in tp.__mro__[1:]:  # subclasses (an IntEnum, an OrderedDict) use their base's
            enc = _ENCODERS.get(base)
            if enc is not None:
                _ENCODERS[tp] = enc
                return enc
        raise TypeError(f"no AMQP 0-9-1 field type for {tp.__name__}")
    return enc


def encode_value(buf: bytearray, value: Any, depth: int = 0) -> None:
    """Append one field value (type code + value)."""
    _encoder_for(type(value))(buf, value, depth)


def encode_table(buf: bytearray, table: FieldTable | None, depth: int = 0) -> None:
    """Append a field table (32-bit size + name/value pairs); None is the empty table."""
    if depth >= MAX_DEPTH:
        raise ValueError("field table nested too deeply")
    if not table:
        buf += b"\0\0\0\0"
        return
    start = len(buf)
    buf += b"\0\0\0\0"
    for key, value in table.items():
        put_shortstr(buf, key)
        _encoder_for(type(value))(buf, value, depth)
    _I.pack_into(buf, start, len(buf) - start - 4)


# -- decoding ----------------------------------------------------------------------------

_Decoder = Callable[[bytes, int, int], tuple[Any, int]]


def _dec_fixed(st: struct.Struct, wrap: Callable[[Any], Any]) -> _Decoder:
    size = st.size
    unpack = st.unpack_from

    def dec(data: bytes, off: int, depth: int) -> tuple[Any, int]:
        return wrap(unpack(data, off)[0]), off + size

    return dec


def _dec_bool(data: bytes, off: int, depth: int) -> tuple[Any, int]:
    return data[off] != 0, off + 1


def _dec_decimal(data: bytes, off: int, depth: int) -> tuple[Any, int]:
    scale = data[off]
    (raw,) = _CODED["I"].unpack_from(data, off + 1)
    try:
        return Decimal(raw).scaleb(-scale), off + 5
    except InvalidOperation:  # pragma: no cover - 10 digits and scale <= 255 always fit
        raise DecodeError("decimal out of range") from None


def _dec_longstr(data: bytes, off: int, depth: int) -> tuple[Any, int]:
    raw, off = get_longstr(data, off)
    try:
        return raw.decode(), off
    except UnicodeDecodeError:
        return LongString(raw), off


def _dec_bytes(data: bytes, off: int, depth: int) -> tuple[Any, int]:
    return get_longstr(data, off)


def _dec_array(data: bytes, off: int, depth: int) -> tuple[Any, int]:
    if depth >= MAX_DEPTH:
        raise DecodeError("field array nested too deeply")
    (n,) = _unpack_I(data, off)
    off += 4
    end = off + n
    if end > len(data):
        raise DecodeError("field array runs past the end of the frame")
    out = []
    while off < end:
        value, off = decode_value(data, off, depth + 1)
        out.append(value)
    if off != end:
        raise DecodeError("field array size does not match its contents")
    return out, off


def _dec_table(data: bytes, off: int, depth: int) -> tuple[Any, int]:
    return decode_table(data, off, depth + 1)


def _dec_void(data: bytes, off: int, depth: int) -> tuple[Any, int]:
    return None, off


def _same(value: Any) -> Any:
    return value


def _wrap_int64(value: Any) -> Any:
    # a plain int outside 32 bits encodes as ``l`` anyway; inside, keep the ``l``
    # (``Any``, not ``int``: mypyc would turn the ``Int64`` back into a plain ``int``)
    return Int64(value) if -0x80000000 <= value <= 0x7FFFFFFF else value


_DECODERS: dict[int, _Decoder] = {
    ord("t"): _dec_bool,
    ord("b"): _dec_fixed(_CODED["b"], Int8),
    ord("B"): _dec_fixed(_CODED["B"], UInt8),
    ord("s"): _dec_fixed(_CODED["s"], Int16),
    ord("u"): _dec_fixed(_CODED["u"], UInt16),
    ord("I"): _dec_fixed(_CODED["I"], _same),
    ord("i"): _dec_fixed(_CODED["i"], UInt32),
    ord("l"): _dec_fixed(_CODED["l"], _wrap_int64),
    ord("f"): _dec_fixed(_CODED["f"], Float32),
    ord("d"): _dec_fixed(_CODED["d"], _same),
    ord("T"): _dec_fixed(_CODED["T"], Timestamp),
    ord("D"): _dec_decimal,
    ord("S"): _dec_longstr,
    ord("x"): _dec_bytes,
    ord("A"): _dec_array,
    ord("F"): _dec_table,
    ord("V"): _dec_void,
}


def decode_value(data: bytes, off: int, depth: int = 0) -> tuple[Any, int]:
    """One field value (type code + value) at ``off`` and the offset after it."""
    dec = _DECODERS.get(data[off])
    if dec is None:
        raise DecodeError(f"unknown field type {chr(data[off])!r}")
    return dec(data, off + 1, depth)


def decode_table(data: bytes, off: int, depth: int = 0) -> tuple[FieldTable, int]:
    """A field table at ``off`` and the offset after it."""
    if depth >= MAX_DEPTH:
        raise DecodeError("field table nested too deeply")
    (n,) = _unpack_I(data, off)
    off += 4
    end = off + n
    if end > len(data):
        raise DecodeError("field table runs past the end of the frame")
    table: FieldTable = {}
    while off < end:
        key, off = get_shortstr(data, off)
        table[key], off = decode_value(data, off, depth)
    if off != end:
        raise DecodeError("field table size does not match its contents")
    return table, off
