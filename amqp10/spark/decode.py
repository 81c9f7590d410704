"""Encoded messages to the values of a row of the default schema, in one walk of their bytes.

A read of the default, typed columns (the ``properties`` struct, the annotation
maps as text) needs nearly every section of every message. :func:`message_row`
walks a message's bytes once and returns a :data:`Row`, a plain tuple of what
each column holds, without building a :class:`~amqp10.message.Message`, a
:class:`~amqp10.types.Properties` or a dict per row; :func:`.batches.build_batch`
then turns a chunk of rows into Arrow columns (transposed in C by ``zip``).

The walk reads the encodings common senders use (Part 1 §1.6: null, the
small and fixed-width numbers, str8/sym8/vbin8 and their 32-bit forms, uuid,
timestamp, list8 and map8) and stops at anything else: a list32 or map32, a
described value, a delivery-annotations or footer section, an array, keys other
than strings and symbols, repeated keys, a value of a type a properties field
does not allow. Such a message, and any it finds malformed, is decoded whole
(:meth:`Message.decode <amqp10.message.Message.decode>`, which reports what is
wrong) and its row made by :func:`row_of_message` from the per-message
conversions of :mod:`.rows`, which define what every column holds; the walk
gives the same values (``tests/spark/test_decode.py`` checks it on random
messages).
"""

from __future__ import annotations

import struct
import uuid
from typing import Any, Final, TypeAlias

from ..message import Message
from ..types import DecodeError, Properties, decode_at
from .rows import (
    COLUMNS,
    AnyMessage,
    body_values,
    message_offset,
    message_timestamp,
    properties_values,
    text,
    text_pairs,
)

__all__ = ["Row", "message_row", "row_of_message"]

Row: TypeAlias = tuple[Any, ...]
"""The default schema's values of one message, but ``address`` and ``partition``, in this order:

``offset``, ``timestamp`` (µs), ``body``, ``body_string``, ``body_map``,
``properties`` (:func:`~.rows.properties_values`, or None), ``application_properties``
and ``message_annotations`` (each ``(keys, values)`` as text, or None), ``durable``,
``priority``, ``creation_time`` (µs)."""

ROW_COLUMNS: Final = tuple(c for c in COLUMNS if c not in ("address", "partition"))
"""The columns of a :data:`Row`, in order."""

_Q: Final = struct.Struct(">Q").unpack_from
_q: Final = struct.Struct(">q").unpack_from
_I: Final = struct.Struct(">I").unpack_from
_i: Final = struct.Struct(">i").unpack_from
_UUID: Final = uuid.UUID
_OFFSET: Final = "x-opt-offset"
_TIMESTAMP: Final = "x-opt-timestamp"
_CREATION: Final = 9  # creation-time's index in the properties list
_NO_PROPERTIES: Final = (None,) * len(Properties.FIELDS)


class _Other(Exception):
    """An encoding the walk does not read: the message is decoded whole instead."""


def _us(ms: int | None) -> int | None:
    return None if ms is None else ms * 1000


def row_of_message(m: AnyMessage) -> Row:
    """The :data:`Row` of a decoded message: the definition :func:`message_row` follows."""
    props = m.properties
    body, body_string, body_map = body_values(m)
    return (
        message_offset(m),
        _us(message_timestamp(m)),
        body,
        body_string,
        body_map,
        properties_values(props),
        text_pairs(m.application_properties),
        text_pairs(m.message_annotations),
        m.durable,
        m.priority,
        None if props is None or props.creation_time is None else int(props.creation_time) * 1000,
    )


def message_row(data: bytes) -> Row:
    """The :data:`Row` of the encoded message ``data``; raises ``DecodeError`` if it is malformed."""
    try:
        return _walk(data)
    except (_Other, IndexError, struct.error, UnicodeDecodeError, DecodeError, ValueError):
        return row_of_message(Message.decode(data))


# -- the walk ------------------------------------------------------------------------------
def _value_text(data: bytes, p: int) -> tuple[str | None, int | None, int]:
    """A map value at ``p``: its text (:func:`~.rows.text`), its value if an integer, its end."""
    c = data[p]
    if c == 0x40:
        return None, None, p + 1
    if c == 0xA1 or c == 0xA3:
        e = p + 2 + data[p + 1]
        if e > len(data):
            raise _Other
        return str(data[p + 2 : e], "utf-8" if c == 0xA1 else "ascii"), None, e
    if c == 0x55 or c == 0x54:  # smalllong, smallint
        v = data[p + 1]
        v = v - 256 if v > 127 else v
    elif c == 0x81 or c == 0x83:  # long, timestamp
        v = _q(data, p + 1)[0]
        return str(v), v, p + 9
    elif c == 0x52 or c == 0x53 or c == 0x50:  # smalluint, smallulong, ubyte
        v = data[p + 1]
    elif c == 0x43 or c == 0x44:
        return "0", 0, p + 1
    elif c == 0x80:
        v = _Q(data, p + 1)[0]
        return str(v), v, p + 9
    elif c == 0x70:
        v = _I(data, p + 1)[0]
        return str(v), v, p + 5
    elif c == 0x71:
        v = _i(data, p + 1)[0]
        return str(v), v, p + 5
    else:  # anything else: decoded by the codec, as text() writes it
        value, e = decode_at(data, p)
        return text(value), (int(value) if isinstance(value, int) else None), e
    return str(v), v, p + 2


def _text_map(
    data: bytes, p: int, ints: bool
) -> tuple[list[str], list[str | None], list[int | None] | None, int]:
    """The map8 at ``p`` as text keys and values (and the integer values, with ``ints``), and its end."""
    if data[p] != 0xC1:
        raise _Other
    end = p + 2 + data[p + 1]
    count = data[p + 2]
    if count & 1 or count >= data[p + 1] or end > len(data):
        raise _Other
    p += 3
    keys: list[str] = []
    values: list[str | None] = []
    numbers: list[int | None] | None = [] if ints else None
    for _ in range(count >> 1):
        c = data[p]
        if c != 0xA3 and c != 0xA1:
            raise _Other
        e = p + 2 + data[p + 1]
        keys.append(str(data[p + 2 : e], "ascii" if c == 0xA3 else "utf-8"))
        t, v, p = _value_text(data, e)
        values.append(t)
        if numbers is not None:
            numbers.append(v)
    if p != end or (count > 2 and len(set(keys)) != len(keys)):  # repeated keys: as a dict does
        raise _Other
    return keys, values, numbers, end


# what each properties field takes (Part 3 §3.2.4): a message-id, binary, an address
# (a string), a string, a symbol (or, leniently, a string), a timestamp, a sequence-no
_ID, _BIN, _STR, _SYM, _TIME, _SEQ = range(6)
_PROPERTY_KINDS: Final = (
    _ID,
    _BIN,
    _STR,
    _STR,
    _STR,
    _ID,
    _SYM,
    _SYM,
    _TIME,
    _TIME,
    _STR,
    _SEQ,
    _STR,
)


def _property(kind: int, data: bytes, p: int) -> tuple[Any, int]:
    """A present properties field at ``p`` (not null, not a str8), as its struct value."""
    c = data[p]
    if c == 0xB1 and kind != _BIN and kind != _TIME and kind != _SEQ:  # str32
        e = p + 5 + _I(data, p + 1)[0]
        if e > len(data):
            raise _Other
        return str(data[p + 5 : e], "utf-8"), e
    if kind == _SYM and (c == 0xA3 or c == 0xB3):
        first = p + 2 if c == 0xA3 else p + 5
        e = first + (data[p + 1] if c == 0xA3 else _I(data, p + 1)[0])
        if e > len(data):
            raise _Other
        return str(data[first:e], "ascii"), e
    if kind in (_BIN, _ID) and c in (0xA0, 0xB0):
        first = p + 2 if c == 0xA0 else p + 5
        e = first + (data[p + 1] if c == 0xA0 else _I(data, p + 1)[0])
        if e > len(data):
            raise _Other
        raw = data[first:e]
        return (raw if kind == _BIN else raw.hex()), e
    if kind == _TIME and c == 0x83:
        return _q(data, p + 1)[0] * 1000, p + 9
    if kind == _ID:
        if c == 0x53:
            return str(data[p + 1]), p + 2
        if c == 0x80:
            return str(_Q(data, p + 1)[0]), p + 9
        if c == 0x44:
            return "0", p + 1
        if c == 0x98:
            if p + 17 > len(data):
                raise _Other
            return str(_UUID(bytes=data[p + 1 : p + 17])), p + 17
    if kind == _SEQ:
        if c == 0x52:
            return data[p + 1], p + 2
        if c == 0x43:
            return 0, p + 1
        if c == 0x70:
            return _I(data, p + 1)[0], p + 5
    raise _Other


def _list8(data: bytes, p: int, most: int) -> tuple[int, int, int]:
    """A list of at most ``most`` fields at ``p``: (count, first field, end); a list0 gives
    end -1 and the offset past it."""
    c = data[p]
    if c == 0x45:
        return 0, p + 1, -1
    if c != 0xC0:
        raise _Other
    end = p + 2 + data[p + 1]
    count = data[p + 2]
    if count > most or count >= data[p + 1] or end > len(data):
        raise _Other
    return count, p + 3, end


def _properties(data: bytes, p: int) -> tuple[tuple[Any, ...], int]:
    """The properties list at ``p`` as :func:`~.rows.properties_values` gives it, and its end."""
    count, p, end = _list8(data, p, 13)
    if end < 0:
        return _NO_PROPERTIES, p
    out: list[Any] = [None] * 13
    kinds = _PROPERTY_KINDS
    for i in range(count):
        c = data[p]
        if c == 0x40:
            p += 1
        elif c == 0xA1 and kinds[i] <= _SYM and kinds[i] != _BIN:  # str8: an id, address, string
            e = p + 2 + data[p + 1]
            if e > len(data):
                raise _Other
            out[i] = str(data[p + 2 : e], "utf-8")
            p = e
        else:
            out[i], p = _property(kinds[i], data, p)
    if p != end:
        raise _Other
    return tuple(out), end


def _boolean(data: bytes, p: int) -> tuple[bool | None, int]:
    c = data[p]
    if c == 0x40:
        return None, p + 1
    if c == 0x41 or c == 0x42:
        return c == 0x41, p + 1
    if c == 0x56 and data[p + 1] <= 1:
        return data[p + 1] == 1, p + 2
    raise _Other


def _uint(data: bytes, p: int) -> int:
    """The end of a null or uint at ``p``."""
    c = data[p]
    if c == 0x40 or c == 0x43:
        return p + 1
    if c == 0x52:
        return p + 2
    if c == 0x70:
        return p + 5
    raise _Other


def _header(data: bytes, p: int) -> tuple[bool, int, int]:
    """The header list at ``p``: durable, priority, and its end."""
    count, p, end = _list8(data, p, 5)
    if end < 0:
        return False, 4, p
    durable: bool | None = None
    priority = 4
    if count > 0:
        durable, p = _boolean(data, p)
    if count > 1:
        c = data[p]
        if c == 0x50:
            priority = data[p + 1]
            p += 2
        elif c == 0x40:
            p += 1
        else:
            raise _Other
    if count > 2:
        p = _uint(data, p)  # ttl
    if count > 3:
        p = _boolean(data, p)[1]  # first-acquirer
    if count > 4:
        p = _uint(data, p)  # delivery-count
    if p != end:
        raise _Other
    return bool(durable), priority, end


# each section's descriptor as common senders write it (0x00, smallulong, its code)
_HEADER: Final = b"\x00\x53\x70"
_ANNOTATIONS: Final = b"\x00\x53\x72"
_PROPERTIES: Final = b"\x00\x53\x73"
_APPLICATION: Final = b"\x00\x53\x74"
_DATA: Final = b"\x00\x53\x75"
_VALUE: Final = b"\x00\x53\x77"


def _walk(data: bytes) -> Row:
    """:func:`message_row` for the encodings it reads (raises :class:`_Other` for the rest)."""
    pos = 0
    durable, priority = False, 4
    if data.startswith(_HEADER):
        durable, priority, pos = _header(data, 3)
    offset = stamp = None
    ma = None
    if data.startswith(_ANNOTATIONS, pos):
        keys, values, numbers, pos = _text_map(data, pos + 3, True)
        ma = (keys, values)
        assert numbers is not None
        if _OFFSET in keys:
            offset = numbers[keys.index(_OFFSET)]
        if _TIMESTAMP in keys and (ms := numbers[keys.index(_TIMESTAMP)]) is not None:
            stamp = ms * 1000
    props = None
    created = None
    if data.startswith(_PROPERTIES, pos):
        props, pos = _properties(data, pos + 3)
        created = props[_CREATION]
    ap = None
    if data.startswith(_APPLICATION, pos):
        keys, values, _, pos = _text_map(data, pos + 3, False)
        ap = (keys, values)
    code = 0x77 if data.startswith(_VALUE, pos) else 0x75 if data.startswith(_DATA, pos) else 0
    p = pos + 3
    c = data[p] if code else -1
    if c == 0xA1 or c == 0xA0:
        first = p + 2
        end = first + data[p + 1]
    elif c == 0xB1 or c == 0xB0:
        first = p + 5
        end = first + _I(data, p + 1)[0]
    else:  # no body, a body of another kind, or a section out of its place
        raise _Other
    if end != len(data):  # more sections (data sections, a footer): decoded whole
        raise _Other
    raw = data[first:end]
    if c == 0xA1 or c == 0xB1:
        if code != 0x77:
            raise _Other
        body, body_string = data[pos + 3 : end], str(raw, "utf-8")
    else:
        body = raw
        try:
            body_string = raw.decode("utf-8")
        except UnicodeDecodeError:
            body_string = None
    return (offset, stamp, body, body_string, None, props, ap, ma, durable, priority, created)
