"""Exact AMQP 1.0 primitive types (Part 1 §1.6) as small Python subclasses.

Plain Python values map to AMQP types the obvious way (``None``, ``bool``,
``int`` → long, ``float`` → double, ``str`` → string, ``bytes`` → binary,
``uuid.UUID`` → uuid, ``datetime`` → timestamp, ``list`` → list, ``dict`` → map).
Where a value must travel as another AMQP type, wrap it in one of the classes
here. Each integer class checks its range on construction, so a negative
``uint`` or an oversized ``ubyte`` is an error at the point it is made.
"""

from __future__ import annotations

import datetime as _dt
import struct as _struct
from collections.abc import Iterable, Sequence
from typing import Any, Self

__all__ = [
    "Array",
    "Described",
    "byte",
    "char",
    "decimal32",
    "decimal64",
    "decimal128",
    "float32",
    "int32",
    "long",
    "short",
    "symbol",
    "timestamp",
    "ubyte",
    "uint",
    "ulong",
    "ushort",
]


class _BoundedInt(int):
    """An ``int`` restricted to ``[_min, _max]``; arithmetic yields plain ints."""

    __slots__ = ()
    _min = 0
    _max = 0

    def __new__(cls, value: Any = 0) -> Self:
        v = int.__new__(cls, value)
        if not cls._min <= v <= cls._max:
            raise ValueError(f"{cls.__name__} out of range [{cls._min}, {cls._max}]: {int(v)}")
        return v

    def __repr__(self) -> str:
        return f"{type(self).__name__}({int(self)})"


class ubyte(_BoundedInt):
    """AMQP ubyte: 8-bit unsigned integer."""

    __slots__ = ()
    _max = 0xFF


class ushort(_BoundedInt):
    """AMQP ushort: 16-bit unsigned integer."""

    __slots__ = ()
    _max = 0xFFFF


class uint(_BoundedInt):
    """AMQP uint: 32-bit unsigned integer."""

    __slots__ = ()
    _max = 0xFFFFFFFF


class ulong(_BoundedInt):
    """AMQP ulong: 64-bit unsigned integer."""

    __slots__ = ()
    _max = 0xFFFFFFFFFFFFFFFF


class byte(_BoundedInt):
    """AMQP byte: 8-bit two's-complement integer."""

    __slots__ = ()
    _min = -0x80
    _max = 0x7F


class short(_BoundedInt):
    """AMQP short: 16-bit two's-complement integer."""

    __slots__ = ()
    _min = -0x8000
    _max = 0x7FFF


class int32(_BoundedInt):
    """AMQP int: 32-bit two's-complement integer."""

    __slots__ = ()
    _min = -0x80000000
    _max = 0x7FFFFFFF


class long(_BoundedInt):
    """AMQP long: 64-bit two's-complement integer (what a plain ``int`` encodes as)."""

    __slots__ = ()
    _min = -0x8000000000000000
    _max = 0x7FFFFFFFFFFFFFFF


class timestamp(_BoundedInt):
    """AMQP timestamp: milliseconds since the Unix epoch, 64-bit signed."""

    __slots__ = ()
    _min = -0x8000000000000000
    _max = 0x7FFFFFFFFFFFFFFF

    @classmethod
    def from_datetime(cls, value: _dt.datetime) -> timestamp:
        """The timestamp of an aware (or UTC-naive) datetime, truncated to milliseconds."""
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.UTC)
        delta = value - _EPOCH
        return cls((delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000)

    def to_datetime(self) -> _dt.datetime:
        """This timestamp as an aware UTC datetime."""
        return _EPOCH + _dt.timedelta(milliseconds=int(self))


_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_F32 = _struct.Struct(">f")


class decimal32(_BoundedInt):
    """AMQP decimal32, held as its raw 32 IEEE 754 bits (as Proton does)."""

    __slots__ = ()
    _max = 0xFFFFFFFF


class decimal64(_BoundedInt):
    """AMQP decimal64, held as its raw 64 IEEE 754 bits (as Proton does)."""

    __slots__ = ()
    _max = 0xFFFFFFFFFFFFFFFF


class decimal128(bytes):
    """AMQP decimal128, held as its raw 16 bytes (as Proton does)."""

    __slots__ = ()

    def __new__(cls, value: bytes = b"\x00" * 16) -> decimal128:
        v = bytes.__new__(cls, value)
        if len(v) != 16:
            raise ValueError(f"decimal128 needs exactly 16 bytes, got {len(v)}")
        return v

    def __repr__(self) -> str:
        return f"decimal128({bytes(self)!r})"


class float32(float):
    """AMQP float: 32-bit IEEE 754.

    The value is rounded to single precision when made, so a ``float32`` holds
    exactly what travels (and ``decode(encode(x)) == x``); a finite value too
    large for 32 bits is a ``ValueError``.
    """

    __slots__ = ()

    def __new__(cls, value: Any = 0.0) -> float32:
        try:
            single = _F32.unpack(_F32.pack(float(value)))[0]
        except OverflowError:
            raise ValueError(f"float32 out of range: {value!r}") from None
        return float.__new__(cls, single)

    def __repr__(self) -> str:
        return f"float32({float(self)!r})"


class char(str):
    """AMQP char: a single Unicode code point (encoded as UTF-32)."""

    __slots__ = ()

    def __new__(cls, value: str) -> char:
        v = str.__new__(cls, value)
        if len(v) != 1:
            raise ValueError(f"char needs exactly one code point, got {len(v)}")
        if 0xD800 <= ord(v) <= 0xDFFF:
            raise ValueError(f"char must be a Unicode scalar value, not surrogate {ord(v):#x}")
        return v

    def __repr__(self) -> str:
        return f"char({str(self)!r})"


class symbol(str):
    """AMQP symbol: an ASCII string used for names, keys and conditions."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"symbol({str(self)!r})"


class Described:
    """A described value (§1.2): a descriptor (ulong code or symbol) and a value."""

    __slots__ = ("descriptor", "value")

    def __init__(self, descriptor: Any, value: Any) -> None:
        self.descriptor = descriptor
        self.value = value

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Described):
            return NotImplemented
        return bool(self.descriptor == other.descriptor and self.value == other.value)

    def __hash__(self) -> int:
        return hash((Described, self.descriptor))

    def __repr__(self) -> str:
        return f"Described({self.descriptor!r}, {self.value!r})"


class Array:
    """An AMQP array (§1.6.23): a sequence of values that all share one type.

    ``element_type`` is the Python class naming the AMQP element type: one of the
    exact types above, or ``bool``, ``int`` (long), ``float`` (double), ``str``
    (string), ``bytes`` (binary), ``uuid.UUID``, ``list``, ``dict``, ``Array``
    (arrays of arrays) or ``type(None)``. With a ``descriptor``, every element is
    the described value's underlying value (an array of described types).
    """

    __slots__ = ("descriptor", "element_type", "elements")

    def __init__(
        self, element_type: type, elements: Iterable[Any] = (), descriptor: Any = None
    ) -> None:
        # ``long`` is what a plain ``int`` already travels as, and decodes as ``int``
        self.element_type = int if element_type is long else element_type
        self.elements: Sequence[Any] = list(elements)
        self.descriptor = descriptor

    def __len__(self) -> int:
        return len(self.elements)

    def __iter__(self) -> Any:
        return iter(self.elements)

    def __getitem__(self, index: int) -> Any:
        return self.elements[index]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Array):
            return NotImplemented
        return (
            self.element_type is other.element_type
            and self.descriptor == other.descriptor
            and list(self.elements) == list(other.elements)
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        d = f", descriptor={self.descriptor!r}" if self.descriptor is not None else ""
        return f"Array({self.element_type.__name__}, {list(self.elements)!r}{d})"
