"""The 0-9-1 field-table scalar types: ``int``/``float``/``bytes`` subclasses that keep a
value's type code.

They live apart from ``amqp091.fields`` (which re-exports them) so that the compiled build can
compile ``fields`` (setup.py): mypyc does not compile a class that derives from ``int``,
``float`` or ``bytes``, and this module stays interpreted. ``fields.__all__`` lists them. They
import nothing, below the engines and the broker alike, so that the broker's core gives a
stored argument back with its field type (``broker.core.typed_values``) without reaching the
0-9-1 engine.
"""

from __future__ import annotations

__all__ = [
    "Int8",
    "UInt8",
    "Int16",
    "UInt16",
    "UInt32",
    "Int64",
    "Timestamp",
    "Float32",
    "LongString",
]


class Int8(int):
    """A field-table ``b`` (signed 8-bit)."""

    __slots__ = ()


class UInt8(int):
    """A field-table ``B`` (unsigned 8-bit)."""

    __slots__ = ()


class Int16(int):
    """A field-table ``s`` (signed 16-bit, RabbitMQ's errata)."""

    __slots__ = ()


class UInt16(int):
    """A field-table ``u`` (unsigned 16-bit)."""

    __slots__ = ()


class UInt32(int):
    """A field-table ``i`` (unsigned 32-bit)."""

    __slots__ = ()


class Int64(int):
    """A field-table ``l`` (signed 64-bit)."""

    __slots__ = ()


class Timestamp(int):
    """A field-table ``T``: seconds since the epoch (unsigned 64-bit)."""

    __slots__ = ()


class Float32(float):
    """A field-table ``f`` (IEEE single precision)."""

    __slots__ = ()


class LongString(bytes):
    """A field-table ``S`` that is not valid UTF-8 (valid ones decode to ``str``)."""

    __slots__ = ()
