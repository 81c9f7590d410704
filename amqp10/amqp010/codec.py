"""The 0-10 type system (0-10 §4.3-4.4): primitive types, maps, lists and arrays with type
codes, and packed structs, controls and commands, read from the tables in :mod:`.spec`.

Python values: integers and floats as themselves, ``str8``/``str16`` as ``str``,
``vbin*`` and the ``bin*`` types as ``bytes``, ``uuid`` as :class:`uuid.UUID`,
``datetime`` as seconds since the epoch (an int), ``sequence-set`` as a tuple of
(lower, upper) ranges, ``map`` as a dict, ``list`` and ``array`` as lists, a struct as a
:class:`~.model.Compound`. In a map or list a Python value takes the type
:func:`type_of` gives it.

A struct's fields are preceded by ``pack`` octets of property flags (bit *i* of octet
*i // 8*: field *i* is present; a ``bit`` field is its flag and nothing more) and, for
a struct with a ``size``, by its size; a struct with a code has it after the size.
"""

from __future__ import annotations

import datetime as _dt
import struct
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from .model import Compound, CompoundSpec
from .spec import COMMANDS, CONTROLS, STRUCTS, TYPE_CODES, TYPES

__all__ = [
    "DecodeError",
    "Reader",
    "SequenceSet",
    "decode_compound",
    "decode_fields",
    "decode_struct32",
    "decode_value",
    "encode_compound",
    "encode_fields",
    "encode_struct32",
    "encode_value",
    "type_of",
]

SequenceSet = tuple[tuple[int, int], ...]
"""A ``sequence-set``: inclusive (lower, upper) ranges of serial numbers."""


class DecodeError(ValueError):
    """Bytes that are not what the spec says (too short, an unknown type code, ...)."""


_FIXED: Final[dict[str, struct.Struct]] = {
    "int8": struct.Struct(">b"),
    "uint8": struct.Struct(">B"),
    "int16": struct.Struct(">h"),
    "uint16": struct.Struct(">H"),
    "int32": struct.Struct(">i"),
    "uint32": struct.Struct(">I"),
    "sequence-no": struct.Struct(">I"),
    "float": struct.Struct(">f"),
    "int64": struct.Struct(">q"),
    "uint64": struct.Struct(">Q"),
    "double": struct.Struct(">d"),
    "datetime": struct.Struct(">Q"),
}
_U8, _U16, _U32 = _FIXED["uint8"], _FIXED["uint16"], _FIXED["uint32"]
_STRINGS: Final = {
    "str8": "utf-8",
    "str16": "utf-8",
    "str8-latin": "iso8859_15",
    "str16-latin": "iso8859_15",
    "str8-utf16": "utf-16-be",
    "str16-utf16": "utf-16-be",
}
_LENGTH: Final = {1: _U8, 2: _U16, 4: _U32}


class Reader:
    """Bytes read from the front, each read checked against what is left."""

    __slots__ = ("data", "end", "pos")

    def __init__(self, data: bytes, pos: int = 0, end: int | None = None) -> None:
        self.data = data
        self.pos = pos
        self.end = len(data) if end is None else end

    def take(self, n: int) -> bytes:
        pos = self.pos
        if n < 0 or pos + n > self.end:
            raise DecodeError(f"{n} octets wanted at offset {pos}, {self.end - pos} left")
        self.pos = pos + n
        return self.data[pos : pos + n]

    def unpack(self, s: struct.Struct) -> Any:
        pos = self.pos
        if pos + s.size > self.end:
            raise DecodeError(f"{s.size} octets wanted at offset {pos}, {self.end - pos} left")
        self.pos = pos + s.size
        return s.unpack_from(self.data, pos)[0]

    def window(self, n: int) -> Reader:
        """The next ``n`` octets as a reader of their own (skipped here)."""
        start = self.pos
        self.take(n)
        return Reader(self.data, start, start + n)

    @property
    def left(self) -> int:
        return self.end - self.pos


# -- primitive types -------------------------------------------------------------------------
def type_of(value: Any) -> str:
    """The type a Python value takes in a map, list or array."""
    if value is None:
        return "void"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "int64" if -(1 << 63) <= value < (1 << 63) else "uint64"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "str16"
    if isinstance(value, bytes | bytearray | memoryview):
        return "vbin32"
    if isinstance(value, Mapping):
        return "map"
    if isinstance(value, list | tuple):
        return "list"
    if isinstance(value, uuid.UUID):
        return "uuid"
    if isinstance(value, _dt.datetime):
        return "datetime"
    if isinstance(value, Compound):
        return "struct32"
    raise TypeError(f"no 0-10 type for {type(value).__name__} {value!r}")


def encode_value(buf: bytearray, tp: str, value: Any) -> None:
    """Append ``value`` as type ``tp`` (a primitive type or a struct's name)."""
    fixed = _FIXED.get(tp)
    if fixed is not None:
        if tp == "datetime" and isinstance(value, _dt.datetime):
            value = int(value.timestamp())
        buf += fixed.pack(value)
        return
    enc = _ENCODERS.get(tp)
    if enc is not None:
        enc(buf, value)
        return
    spec = STRUCTS.get(tp)
    if spec is not None:
        encode_compound(buf, spec, value.values if isinstance(value, Compound) else value)
        return
    t = TYPES.get(tp)
    if t is None:
        raise TypeError(f"unknown 0-10 type {tp!r}")
    if t.fixed is not None:  # the opaque binN / decN types
        raw = bytes(value)
        if len(raw) != t.fixed:
            raise ValueError(f"{tp} is {t.fixed} octets, not {len(raw)}")
        buf += raw
        return
    assert t.variable is not None
    _put_vbin(buf, t.variable, _to_bytes(tp, value))


def decode_value(r: Reader, tp: str) -> Any:
    """Read a value of type ``tp`` (a primitive type or a struct's name)."""
    read = _READERS.get(tp)
    return read(r) if read is not None else _reader(tp)(r)


def _reader(tp: str) -> Callable[[Reader], Any]:
    """A function that reads a value of type ``tp`` (see :func:`decode_value`)."""
    fixed = _FIXED.get(tp)
    if fixed is not None:
        return _fixed_reader(fixed)
    dec = _DECODERS.get(tp)
    if dec is not None:
        return dec
    spec = STRUCTS.get(tp)
    if spec is not None:
        return lambda r: decode_compound(r, spec)
    t = TYPES.get(tp)
    if t is None:
        raise DecodeError(f"unknown 0-10 type {tp!r}")
    if t.fixed is not None:
        width = t.fixed
        return lambda r: r.take(width)
    assert t.variable is not None
    return _variable_reader(tp, _LENGTH[t.variable], _STRINGS.get(tp))


def _short(r: Reader, pos: int, n: int) -> DecodeError:
    return DecodeError(f"{n} octets wanted at offset {pos}, {r.end - pos} left")


def _fixed_reader(s: struct.Struct) -> Callable[[Reader], Any]:
    size, unpack_from = s.size, s.unpack_from

    def read(r: Reader) -> Any:  # (Reader.unpack, inline)
        pos = r.pos
        if pos + size > r.end:
            raise _short(r, pos, size)
        r.pos = pos + size
        return unpack_from(r.data, pos)[0]

    return read


def _variable_reader(
    tp: str, length: struct.Struct, encoding: str | None
) -> Callable[[Reader], Any]:
    """A ``vbin``/``str`` type's reader: a length, then that many octets (text in ``encoding``)."""
    size, unpack_from = length.size, length.unpack_from

    def read(r: Reader) -> Any:
        pos, end, data = r.pos, r.end, r.data
        if pos + size > end:
            raise _short(r, pos, size)
        n = unpack_from(data, pos)[0]
        pos += size
        if pos + n > end:
            raise _short(r, pos, n)
        r.pos = pos + n
        raw = data[pos : pos + n]
        if encoding is None:
            return raw
        try:
            return raw.decode(encoding)
        except UnicodeDecodeError as exc:
            raise DecodeError(f"{tp} is not {encoding}: {exc}") from None

    return read


def _to_bytes(tp: str, value: Any) -> bytes:
    encoding = _STRINGS.get(tp)
    if encoding is not None and isinstance(value, str):
        return value.encode(encoding)
    return bytes(value)


def _put_vbin(buf: bytearray, width: int, raw: bytes) -> None:
    if len(raw) >= 1 << (8 * width):
        raise ValueError(f"{len(raw)} octets do not fit a {8 * width}-bit length")
    buf += _LENGTH[width].pack(len(raw))
    buf += raw


def _reserve32(buf: bytearray) -> int:
    start = len(buf)
    buf += b"\x00\x00\x00\x00"
    return start


def _fill32(buf: bytearray, start: int) -> None:
    _U32.pack_into(buf, start, len(buf) - start - 4)


def _encode_boolean(buf: bytearray, v: Any) -> None:
    buf.append(1 if v else 0)


def _encode_char(buf: bytearray, v: Any) -> None:
    buf += v.encode("iso8859_15") if isinstance(v, str) else bytes(v)[:1]


def _encode_utf32(buf: bytearray, v: Any) -> None:
    buf += _U32.pack(ord(v))


def _encode_uuid(buf: bytearray, v: Any) -> None:
    buf += v.bytes if isinstance(v, uuid.UUID) else bytes(v)


def _encode_void(buf: bytearray, v: Any) -> None:
    pass


def _encode_sequence_set(buf: bytearray, v: Any) -> None:
    ranges = list(v)
    buf += _U16.pack(8 * len(ranges))
    for lower, upper in ranges:
        buf += _U32.pack(lower & 0xFFFFFFFF)
        buf += _U32.pack(upper & 0xFFFFFFFF)


def _encode_byte_ranges(buf: bytearray, v: Any) -> None:
    ranges = list(v)
    buf += _U16.pack(16 * len(ranges))
    for lower, upper in ranges:
        buf += _FIXED["uint64"].pack(lower)
        buf += _FIXED["uint64"].pack(upper)


def _encode_map(buf: bytearray, v: Any) -> None:
    start = _reserve32(buf)
    if v is not None:
        buf += _U32.pack(len(v))
        for key, value in v.items():
            _put_vbin(buf, 1, str(key).encode())
            _encode_tagged(buf, value)
    _fill32(buf, start)


def _encode_tagged(buf: bytearray, value: Any) -> None:
    tp = type_of(value)
    code = TYPES[tp].code
    assert code is not None
    buf.append(code)
    encode_value(buf, tp, value)


def _encode_list(buf: bytearray, v: Any) -> None:
    start = _reserve32(buf)
    if v is not None:
        buf += _U32.pack(len(v))
        for value in v:
            _encode_tagged(buf, value)
    _fill32(buf, start)


def _encode_array(buf: bytearray, v: Any) -> None:
    start = _reserve32(buf)
    if v is not None:
        items = list(v)
        tp = type_of(items[0]) if items else "void"
        code = TYPES[tp].code
        assert code is not None
        buf.append(code)
        buf += _U32.pack(len(items))
        for value in items:
            encode_value(buf, tp, value)
    _fill32(buf, start)


def _decode_boolean(r: Reader) -> bool:
    return r.take(1) != b"\x00"


def _decode_char(r: Reader) -> str:
    return r.take(1).decode("iso8859_15")


def _decode_utf32(r: Reader) -> str:
    n = r.unpack(_U32)
    if n > 0x10FFFF:
        raise DecodeError(f"char-utf32 {n:#x} is not a code point")
    return chr(n)


def _decode_uuid(r: Reader) -> uuid.UUID:
    return uuid.UUID(bytes=r.take(16))


def _decode_void(r: Reader) -> None:
    return None


def _decode_bit(r: Reader) -> bool:
    return True


def _decode_sequence_set(r: Reader) -> SequenceSet:
    size = r.unpack(_U16)
    if size % 8:
        raise DecodeError(f"a sequence-set of {size} octets is not whole ranges")
    w = r.window(size)
    return tuple((w.unpack(_U32), w.unpack(_U32)) for _ in range(size // 8))


def _decode_byte_ranges(r: Reader) -> tuple[tuple[int, int], ...]:
    size = r.unpack(_U16)
    if size % 16:
        raise DecodeError(f"byte-ranges of {size} octets are not whole ranges")
    w = r.window(size)
    u64 = _FIXED["uint64"]
    return tuple((w.unpack(u64), w.unpack(u64)) for _ in range(size // 16))


def _decode_tagged(r: Reader) -> Any:
    pos = r.pos
    if pos >= r.end:
        raise _short(r, pos, 1)
    code = r.data[pos]
    r.pos = pos + 1
    read = _TAGGED.get(code)
    if read is None:
        raise DecodeError(f"unknown type code {code:#04x}")
    return read(r)


def _counted(r: Reader) -> tuple[Reader, int]:
    w = r.window(r.unpack(_U32))
    if not w.left:
        return w, 0
    count = w.unpack(_U32)
    if count > w.left:  # every item is at least one octet (its type code or its key)
        raise DecodeError(f"{count} items in {w.left} octets")
    return w, count


def _decode_map(r: Reader) -> dict[str, Any]:
    w, count = _counted(r)
    out: dict[str, Any] = {}
    for _ in range(count):
        key = w.take(w.unpack(_U8))
        try:
            name = key.decode()
        except UnicodeDecodeError as exc:
            raise DecodeError(f"a map key is not UTF-8: {exc}") from None
        out[name] = _decode_tagged(w)
    return out


def _decode_list(r: Reader) -> list[Any]:
    w, count = _counted(r)
    return [_decode_tagged(w) for _ in range(count)]


def _decode_array(r: Reader) -> list[Any]:
    w = r.window(r.unpack(_U32))
    if not w.left:
        return []
    code = w.unpack(_U8)
    t = TYPE_CODES.get(code)
    if t is None:
        raise DecodeError(f"unknown type code {code:#04x} in an array")
    count = w.unpack(_U32)
    if t.fixed == 0:  # void or bit: no octets per item, so bound the count apart
        if count > 1 << 16:
            raise DecodeError(f"an array of {count} empty items")
        return [decode_value(w, t.name) for _ in range(count)]
    if count > w.left:
        raise DecodeError(f"{count} items in {w.left} octets")
    return [decode_value(w, t.name) for _ in range(count)]


_ENCODERS: Final[dict[str, Callable[[bytearray, Any], None]]] = {
    "boolean": _encode_boolean,
    "char": _encode_char,
    "char-utf32": _encode_utf32,
    "uuid": _encode_uuid,
    "void": _encode_void,
    "bit": _encode_void,
    "sequence-set": _encode_sequence_set,
    "byte-ranges": _encode_byte_ranges,
    "map": _encode_map,
    "list": _encode_list,
    "array": _encode_array,
    "struct32": lambda buf, v: encode_struct32(buf, v),
}
_DECODERS: Final[dict[str, Callable[[Reader], Any]]] = {
    "boolean": _decode_boolean,
    "char": _decode_char,
    "char-utf32": _decode_utf32,
    "uuid": _decode_uuid,
    "void": _decode_void,
    "bit": _decode_bit,
    "sequence-set": _decode_sequence_set,
    "byte-ranges": _decode_byte_ranges,
    "map": _decode_map,
    "list": _decode_list,
    "array": _decode_array,
    "struct32": lambda r: decode_struct32(r),
}


# -- structs, controls, commands -------------------------------------------------------------
def encode_fields(buf: bytearray, spec: CompoundSpec, values: Mapping[str, Any]) -> None:
    """Append the property flags and the present fields of ``values``."""
    flags = 0
    present = []
    for i, f in enumerate(spec.fields):
        v = values.get(f.name)
        if v is None or (f.type == "bit" and not v):
            continue
        flags |= 1 << i
        if f.type != "bit":
            present.append((f.type, v))
    buf += flags.to_bytes(spec.pack, "little")
    for tp, v in present:
        encode_value(buf, tp, v)


def decode_fields(r: Reader, spec: CompoundSpec) -> dict[str, Any]:
    """Read property flags and the fields they say are present."""
    flags = int.from_bytes(r.take(spec.pack), "little")
    made = _FIELDS.get(spec.name)
    readers = made[1] if made is not None and made[0] is spec else _field_readers(spec)
    if flags >> len(spec.fields):
        raise DecodeError(f"{spec.name}: property flags {flags:#x} name fields it does not have")
    out: dict[str, Any] = {}
    for mask, name, read in readers:
        if flags & mask:
            out[name] = True if read is None else read(r)
            flags ^= mask
            if not flags:
                break
    return out


_FieldReaders = tuple[tuple[int, str, Callable[[Reader], Any] | None], ...]


def _field_readers(spec: CompoundSpec) -> _FieldReaders:
    """(flag, name, reader) of each field: a ``bit`` field has no reader (its flag is its
    value); a type the spec does not have fails as the field is read, as before."""

    def reader(tp: str) -> Callable[[Reader], Any]:
        known = _READERS.get(tp)
        return known if known is not None else lambda r: decode_value(r, tp)

    return tuple(
        (1 << i, f.name, None if f.type == "bit" else reader(f.type))
        for i, f in enumerate(spec.fields)
    )


def encode_compound(buf: bytearray, spec: CompoundSpec, values: Mapping[str, Any]) -> None:
    """Append a struct (its size, code, flags and fields), or a control's or command's
    code, flags and fields."""
    if spec.size:
        start = len(buf)
        buf += bytes(spec.size)
    if spec.code is not None:
        buf += _U16.pack(spec.code)
    encode_fields(buf, spec, values)
    if spec.size:
        n = len(buf) - start - spec.size
        if n >= 1 << (8 * spec.size):
            raise ValueError(f"{spec.name} of {n} octets does not fit its size")
        buf[start : start + spec.size] = n.to_bytes(spec.size, "big")


def decode_compound(r: Reader, spec: CompoundSpec) -> Compound:
    """Read a struct as :func:`encode_compound` writes it (a size bounds what it reads;
    octets past its known fields are skipped, as a newer version may add some)."""
    if spec.size:
        r = r.window(int.from_bytes(r.take(spec.size), "big"))
    if spec.code is not None:
        code = r.unpack(_U16)
        if code != spec.code:
            raise DecodeError(f"{spec.name} has code {spec.code:#06x}, not {code:#06x}")
    return Compound(spec, decode_fields(r, spec))


_STRUCT_CODES: Final[dict[int, CompoundSpec]] = {
    s.code: s for s in STRUCTS.values() if s.code is not None
}


def encode_struct32(buf: bytearray, value: Compound) -> None:
    """Append a struct with a code as a ``struct32`` (a header segment's entries)."""
    spec = value.spec
    if spec.code is None:
        raise ValueError(f"{spec.name} has no code: it cannot be a struct32")
    start = _reserve32(buf)
    buf += _U16.pack(spec.code)
    encode_fields(buf, spec, value.values)
    _fill32(buf, start)


def decode_struct32(r: Reader) -> Compound:
    w = r.window(r.unpack(_U32))
    pos = w.pos
    if pos + 2 > w.end:
        raise _short(w, pos, 2)
    code = int.from_bytes(w.data[pos : pos + 2], "big")
    w.pos = pos + 2
    spec = _STRUCT_CODES.get(code)
    if spec is None:
        raise DecodeError(f"unknown struct code {code:#06x}")
    return Compound(spec, decode_fields(w, spec))


def encode_structs(buf: bytearray, structs: Sequence[Compound]) -> None:
    """A header segment: its structs, each as a ``struct32``."""
    for s in structs:
        encode_struct32(buf, s)


# -- the decoding tables, made once from the spec's -------------------------------------------
_READERS: Final[dict[str, Callable[[Reader], Any]]] = {
    tp: _reader(tp) for tp in (*_FIXED, *_DECODERS, *STRUCTS, *TYPES)
}
"""Each type's reader (:func:`_reader`): decoding a field is one call."""
_TAGGED: Final[dict[int, Callable[[Reader], Any]]] = {
    code: _READERS[t.name] for code, t in TYPE_CODES.items()
}
"""The reader of each type code (a map's, list's or array's items)."""
_FIELDS: Final[dict[str, tuple[CompoundSpec, _FieldReaders]]] = {
    spec.name: (spec, _field_readers(spec))
    for spec in (*STRUCTS.values(), *CONTROLS.values(), *COMMANDS.values())
}
"""Each struct's, control's and command's field readers, by name (the spec kept beside
them: another spec of that name, made elsewhere, has its readers made as it is read)."""
