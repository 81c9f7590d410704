"""Declarations of composite and restricted described types (Part 1 §1.4).

A composite type is declared once, as a class with a ``FIELDS`` tuple that
mirrors the spec's ``<field>`` elements (names, types, mandatory, defaults,
multiple). From that declaration the class gets ``__slots__``, a keyword-only
constructor, and an encoder and decoder generated once at import time, so that
the per-frame path runs straight-line code rather than a loop over metadata.
:func:`generated_source` shows that code for a class.

On encode, trailing absent fields are left out of the list, a field equal to its
default travels as null, and a missing mandatory field is an :class:`EncodeError`.
On decode, defaults are filled in, each field's type is checked (a value of another
type, or outside a closed set of choices, is a :class:`DecodeError` naming the
field) and ``multiple`` fields always come back as lists.

Each composite has two decoders: one from the list the codec decoded (used for
symbolic descriptors and unusual encodings), and one straight from the bytes,
which parses the common encodings of each field inline and hands anything else
back to the codec (:data:`RAW_DECODERS`; the codec uses it where it offers
``register_described_raw``).
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Callable
from typing import Any, ClassVar
from uuid import UUID

from . import codec
from .codec import TYPED_ENCODERS, Encoder, register_described, register_encoder
from .errors import DecodeError, EncodeError
from .primitives import (
    Array,
    Described,
    symbol,
    timestamp,
    ubyte,
    uint,
    ulong,
    ushort,
)

__all__ = [
    "RAW_DECODERS",
    "RESTRICTED",
    "Composite",
    "DescribedType",
    "Field",
    "Restricted",
    "composite_types",
    "described_types",
    "generated_source",
    "restricted",
]


class Restricted:
    """A restricted type (§1.3): a name, the type it restricts, and its choices."""

    __slots__ = ("choices", "name", "provides", "source")

    def __init__(
        self,
        name: str,
        source: str,
        choices: dict[str, Any] | None = None,
        provides: str | None = None,
    ) -> None:
        self.name = name
        self.source = source
        self.choices = choices or {}
        self.provides = provides


RESTRICTED: dict[str, Restricted] = {}


def restricted(
    name: str, source: str, choices: dict[str, Any] | None = None, provides: str | None = None
) -> Restricted:
    """Declare a restricted type (no descriptor) by name."""
    r = Restricted(name, source, choices, provides)
    RESTRICTED[name] = r
    return r


# Maps whose str keys travel as symbols.
_SYMBOL_KEYED = frozenset({"fields", "annotations", "filter-set", "node-properties"})


def primitive_of(type_name: str) -> str:
    """The primitive (or composite) type a declared field type finally stands for."""
    seen = 0
    while type_name in RESTRICTED and seen < 16:
        if type_name in _SYMBOL_KEYED:
            return "symbol-keyed-map"
        type_name = RESTRICTED[type_name].source
        seen += 1
    return type_name


class Field:
    """One field of a composite type, as the spec's ``<field>`` element declares it."""

    __slots__ = ("attr", "default", "mandatory", "multiple", "name", "requires", "type")

    def __init__(
        self,
        name: str,
        type: str,
        *,
        mandatory: bool = False,
        default: Any = None,
        multiple: bool = False,
        requires: str | None = None,
    ) -> None:
        self.name = name
        self.attr = name.replace("-", "_")
        self.type = type
        self.mandatory = mandatory
        self.default = default
        self.multiple = multiple
        self.requires = requires

    def __repr__(self) -> str:
        return f"Field({self.name!r}, {self.type!r})"


# Python types a decoded value may have for each primitive field type. Narrower
# unsigned encodings are accepted for wider unsigned fields (lenient on input).
_ACCEPT: dict[str, tuple[type, ...]] = {
    "boolean": (bool,),
    "ubyte": (ubyte,),
    "ushort": (ubyte, ushort),
    "uint": (ubyte, ushort, uint),
    "ulong": (ubyte, ushort, uint, ulong),
    "string": (str, symbol),
    "symbol": (symbol,),
    "binary": (bytes,),
    "timestamp": (timestamp,),
    "uuid": (UUID,),
    "map": (dict,),
    "symbol-keyed-map": (dict,),
    "list": (list,),
}
# The one type the decoder produces for each primitive: the generated decoder's
# fast path is a single ``type(x) is T`` test; anything else goes to a checker.
_EXACT: dict[str, type] = {
    "boolean": bool,
    "ubyte": ubyte,
    "ushort": ushort,
    "uint": uint,
    "ulong": ulong,
    "string": str,
    "symbol": symbol,
    "binary": bytes,
    "timestamp": timestamp,
    "uuid": UUID,
    "map": dict,
    "symbol-keyed-map": dict,
    "list": list,
}


def _closed_choices(type_name: str) -> frozenset[Any] | None:
    """The values a restricted type allows, if its choices are all there is.

    A type that provides an archetype (error conditions, distribution modes) is open
    to extension, and a boolean's two choices need no check.
    """
    r = RESTRICTED.get(type_name)
    if r is None or not r.choices or r.provides is not None or r.source == "boolean":
        return None
    return frozenset(r.choices.values())


# archetype (a ``provides`` value) -> the Python types of the values that provide it
_PROVIDERS: dict[str, set[type]] = {}


def _provider_set(archetype: str) -> set[type]:
    """The live set of types providing ``archetype`` (grows as types are declared)."""
    found = _PROVIDERS.get(archetype)
    if found is None:
        found = _PROVIDERS[archetype] = set()
        for r in RESTRICTED.values():
            if r.provides is not None and archetype in _split(r.provides):
                found.update(_ACCEPT.get(primitive_of(r.source), ()))
    return found


def _split(provides: str) -> list[str]:
    return [p.strip() for p in provides.split(",")]


def _add_provider(cls: type, provides: str | None) -> None:
    if provides:
        for p in _split(provides):
            _provider_set(p).add(cls)


# --- conversions done by the generated ``__init__`` -----------------------------------


def _to_symbol(v: Any) -> Any:
    """A ``str`` as a ``symbol``; anything else is left for the encoder to reject."""
    return symbol(v) if isinstance(v, str) and not isinstance(v, symbol) else v


def _to_bool(v: Any) -> Any:
    """A 0/1 ``int`` (such as :class:`~amqp10.types.Role`) as a ``bool``."""
    return bool(v) if type(v) is not bool and isinstance(v, int) and v in (0, 1) else v


def _multiple_init(prim: str) -> Callable[[Any], Any]:
    """Normalise a ``multiple`` field's value: a single value or a sequence -> a list."""
    elem = _to_symbol if prim == "symbol" else None

    def convert(v: Any) -> Any:
        if isinstance(v, (str, bytes)) or not isinstance(v, (list, tuple, Array)):
            v = [v]
        return [elem(x) for x in v] if elem is not None else list(v)

    return convert


# --- encoding ---------------------------------------------------------------------------

_BI = struct.Struct(">BI").pack
_BQ = struct.Struct(">BQ").pack
_BB = struct.Struct(">BB").pack
_BH = struct.Struct(">BH").pack
_BII = struct.Struct(">BII").pack
# uint / ulong values 0..255 in their smallest encodings, ready to append
_UINT8 = [b"\x43"] + [bytes((0x52, i)) for i in range(1, 256)]
_ULONG8 = [b"\x44"] + [bytes((0x53, i)) for i in range(1, 256)]

_ARRAY_ELEMENT: dict[str, type] = {"symbol": symbol, "string": str, "uint": uint}


def _typed_encoder(f: Field) -> Encoder:
    prim = primitive_of(f.type)
    enc = TYPED_ENCODERS.get(prim)
    if enc is None:  # a composite type such as ``error``: encoded as itself
        enc = TYPED_ENCODERS["*"]
    if not f.multiple:
        return enc
    elem_type = _ARRAY_ELEMENT.get(prim)
    check: tuple[type, ...]
    if prim in ("symbol", "string"):
        check = (str,)  # a str element of a symbol field travels as a symbol
    elif prim in ("ubyte", "ushort", "uint", "ulong"):
        check = (int,)
    else:
        check = _ACCEPT.get(prim, (object,))

    def enc_multiple(buf: bytearray, v: Any) -> None:
        if isinstance(v, (str, bytes)) or not isinstance(v, (list, tuple, Array)):
            v = [v]
        for x in v:
            if not isinstance(x, check) or (isinstance(x, bool) and bool not in check):
                raise EncodeError(f"{f.name} holds {f.type} values, not {type(x).__name__}")
        if elem_type is None:
            codec._encode_value(buf, list(v))
        else:
            codec._encode_value(buf, Array(elem_type, [elem_type(x) for x in v]))

    return enc_multiple


def _encode_lines(i: int, f: Field, prim: str, ns: dict[str, Any], ind: str) -> list[str]:
    """Code appending the encoding of the present (non-null, non-default) value ``a{i}``."""
    a = f"a{i}"
    if f.multiple:
        ns[f"_E{i}"] = _typed_encoder(f)
        return [f"{ind}_E{i}(buf, {a})"]
    if prim == "boolean":
        return [f"{ind}buf.append(0x41 if {a} else 0x42)"]
    if prim == "uint":
        return [
            f"{ind}if 0 <= {a} < 256:",
            f"{ind}    buf += _UINT8[{a}]",
            f"{ind}else:",
            f"{ind}    buf += _BI(0x70, {a})",
        ]
    if prim == "ulong":
        return [
            f"{ind}if 0 <= {a} < 256:",
            f"{ind}    buf += _ULONG8[{a}]",
            f"{ind}else:",
            f"{ind}    buf += _BQ(0x80, {a})",
        ]
    if prim == "ubyte":
        return [f"{ind}buf += _BB(0x50, {a})"]
    if prim == "ushort":
        return [f"{ind}buf += _BH(0x60, {a})"]
    if prim == "binary":
        ns[f"_E{i}"] = _typed_encoder(f)
        return [
            f"{ind}if type({a}) is bytes and len({a}) < 256:",
            f"{ind}    buf.append(0xA0)",
            f"{ind}    buf.append(len({a}))",
            f"{ind}    buf += {a}",
            f"{ind}else:",
            f"{ind}    _E{i}(buf, {a})",
        ]
    ns[f"_E{i}"] = _typed_encoder(f)
    return [f"{ind}_E{i}(buf, {a})"]


def _build_encoder(cls: type[Composite], ns: dict[str, Any]) -> list[str]:
    """Source of ``_encode(buf, self)``: descriptor, list header, the fields up to the last
    one present (an absent field, or one equal to its default, travels as null)."""
    fields = cls.FIELDS
    name = cls.AMQP_NAME
    code = cls.DESCRIPTOR_CODE
    desc = bytes((0x00, 0x53, code)) if code <= 0xFF else b"\x00\x80" + code.to_bytes(8, "big")
    n = len(fields)
    ns["_LIST0"] = desc + b"\x45"
    ns["_PFX"] = desc + b"\xc0\x00\x00"  # list8 header, size and count patched at the end
    d = len(desc)
    src = ["def _encode(buf, self):"]
    if n == 0:
        return [*src, "    buf += _LIST0"]
    mand = [i for i, f in enumerate(fields) if f.mandatory]
    n_min = mand[-1] + 1 if mand else 0  # every mandatory field is written (or reported)
    src += [f"    a{i} = self.{f.attr}" for i, f in enumerate(fields)]

    def is_false_default(f: Field) -> bool:
        return primitive_of(f.type) == "boolean" and f.default is False and not f.multiple

    def present(i: int) -> str:
        f = fields[i]
        if f.default is None:
            return f"a{i} is not None"
        if is_false_default(f):
            return f"a{i}"
        ns[f"_D{i}"] = f.default
        return f"(a{i} is not None and a{i} != _D{i})"

    # how many fields to write: up to the last present one, and every mandatory one
    if n > n_min:
        for k, i in enumerate(reversed(range(n_min, n))):
            src.append(f"    {'if' if k == 0 else 'elif'} {present(i)}:")
            src.append(f"        n = {i + 1}")
        src.append("    else:")
        if n_min == 0:
            src.append("        buf += _LIST0")
            src.append("        return")
        else:
            src.append(f"        n = {n_min}")
    else:
        src.append(f"    n = {n}")
    src.append("    start = len(buf)")
    src.append("    buf += _PFX")
    ind = "    "
    for i, f in enumerate(fields):
        if i >= n_min and i > 0:
            src.append(f"{ind}if n > {i}:")
            ind += "    "
        prim = primitive_of(f.type)
        if f.mandatory:
            src.append(f"{ind}if a{i} is None:")
            src.append(f"{ind}    raise EncodeError('{name}: {f.name} is mandatory')")
            src.append(f"{ind}else:")
            src += _encode_lines(i, f, prim, ns, ind + "    ")
        elif is_false_default(f):
            src.append(f"{ind}buf.append(0x41 if a{i} else 0x40)")
        else:
            absent = f"a{i} is None" if f.default is None else f"a{i} is None or a{i} == _D{i}"
            if f.default is not None:
                ns[f"_D{i}"] = f.default
            src.append(f"{ind}if {absent}:")
            src.append(f"{ind}    buf.append(0x40)")
            src.append(f"{ind}else:")
            src += _encode_lines(i, f, prim, ns, ind + "    ")
    src.append(f"    size = len(buf) - start - {d + 2}")
    src.append("    if size < 256:")
    src.append(f"        buf[start + {d + 1}] = size")
    src.append(f"        buf[start + {d + 2}] = n")
    src.append("    else:")
    src.append(f"        buf[start + {d}:start + {d + 3}] = _BII(0xD0, size + 3, n)")
    return src


# --- decoding -----------------------------------------------------------------------------


def _check_lines(cls: type[Composite], ns: dict[str, Any]) -> list[str]:
    """Code that checks the locals ``a0``, ``a1``, ... and fills in defaults.

    The common case costs one ``type(x) is T`` test per present field; a checker
    function runs only for a value of another type (to accept it leniently, or to
    raise :class:`DecodeError` naming the field).
    """
    name = cls.AMQP_NAME
    src: list[str] = []
    for i, f in enumerate(cls.FIELDS):
        a = f"a{i}"
        prim = primitive_of(f.type)
        if f.mandatory:
            src.append(f"    if {a} is None:")
            src.append(f"        raise DecodeError('{name}: mandatory field {f.name} is missing')")
        elif f.default is not None:
            ns[f"_D{i}"] = f.default
            src.append(f"    if {a} is None:")
            src.append(f"        {a} = _D{i}")
        else:
            src.append(f"    if {a} is None:")
            src.append("        pass")
        checks_from = len(src)
        if f.multiple:
            ns[f"_M{i}"] = _multiple_checker(name, f, prim)
            if prim in _EXACT:
                ns[f"_P{i}"] = _EXACT[prim]
                src.append(f"    elif type({a}) is _P{i}:")
                src.append(f"        {a} = [{a}]")
            src.append("    else:")
            src.append(f"        {a} = _M{i}({a})")
        elif prim in _EXACT:
            ns[f"_P{i}"] = _EXACT[prim]
            ns[f"_C{i}"] = _single_checker(name, f, prim)
            choices = _closed_choices(f.type)
            if choices is None:
                src.append(f"    elif type({a}) is not _P{i}:")
            else:
                ns[f"_V{i}"] = choices
                src.append(f"    elif type({a}) is not _P{i} or {a} not in _V{i}:")
            src.append(f"        {a} = _C{i}({a})")
        elif prim in _COMPOSITES_BY_NAME or prim in _PENDING_NAMES:
            ns[f"_C{i}"] = _composite_checker(name, f, prim)
            known = _COMPOSITES_BY_NAME.get(prim)
            if known is not None:
                ns[f"_P{i}"] = known
                src.append(f"    elif type({a}) is not _P{i}:")
            else:
                src.append("    else:")
            src.append(f"        {a} = _C{i}({a})")
        elif prim == "*" and f.requires is not None:
            ns[f"_R{i}"] = providers = _provider_set(f.requires)
            ns[f"_C{i}"] = _requires_checker(name, f, providers)
            src.append(f"    elif type({a}) not in _R{i}:")
            src.append(f"        {a} = _C{i}({a})")
        if len(src) == checks_from and src[-1] == "        pass":
            del src[-2:]  # nothing to check, nothing to fill in
    src.append("    self = _new(_cls)")
    src += [f"    self.{f.attr} = a{i}" for i, f in enumerate(cls.FIELDS)]
    return src


def _build_decoder(cls: type[Composite], ns: dict[str, Any]) -> list[str]:
    """Source of ``_decode(v)``: the described list ``v`` -> an instance of ``cls``."""
    name = cls.AMQP_NAME
    n = len(cls.FIELDS)
    src = [
        "def _decode(v):",
        "    if type(v) is not list:",
        f"        raise DecodeError('{name}: expected a list, got ' + type(v).__name__)",
    ]
    if n == 0:
        return [*src, "    return _new(_cls)"]
    ns["_PAD"] = [[None] * (n - k) for k in range(n)]
    src += [
        "    n = len(v)",
        f"    if n < {n}:",
        "        v = v + _PAD[n]",
        f"    elif n > {n}:",  # fields of a later version of the spec: ignored
        f"        v = v[:{n}]",
        f"    {', '.join(f'a{i}' for i in range(n))}{',' if n == 1 else ''} = v",
        *_check_lines(cls, ns),
        "    return self",
    ]
    return src


# Inline parsing of the common encodings of a field's type; any other constructor
# goes through the codec's table (which also raises for invalid ones).
_RAW_PARSE: dict[str, list[tuple[int, list[str]]]] = {
    "uint": [
        (0x52, ["{a} = _UINTS[data[p + 1]]", "p += 2"]),
        (0x43, ["{a} = _UINT0", "p += 1"]),
        (0x70, ["{a} = _int_new(_uint, _unpack_I(data, p + 1)[0])", "p += 5"]),
    ],
    "ulong": [
        (0x53, ["{a} = _int_new(_ulong, data[p + 1])", "p += 2"]),
        (0x44, ["{a} = _ULONG0", "p += 1"]),
        (0x80, ["{a} = _int_new(_ulong, _unpack_Q(data, p + 1)[0])", "p += 9"]),
    ],
    "ubyte": [(0x50, ["{a} = _UBYTES[data[p + 1]]", "p += 2"])],
    "boolean": [(0x41, ["{a} = True", "p += 1"]), (0x42, ["{a} = False", "p += 1"])],
    "binary": [(0xA0, ["q = p + 2", "p = q + data[p + 1]", "{a} = bytes(data[q:p])"])],
}


def _build_raw_decoder(cls: type[Composite], ns: dict[str, Any]) -> list[str]:
    """Source of ``_decode_raw(data, pos, depth, lim) -> (value, end)``.

    It decodes the described list straight from the bytes (``pos`` is its
    constructor; ``depth`` is the depth the codec would decode the list at), without
    building the intermediate list: common encodings are parsed inline, and anything
    else (a list32, an invalid or unusual encoding, a header that breaks a limit) is
    handed to the codec, so that errors and limits stay the codec's own.
    """
    fields = cls.FIELDS
    n = len(fields)
    src = [
        "def _decode_raw(data, pos, depth, lim):",
        "    if data[pos] == 0x45:",  # list0: every field absent
        f"        return {'_new(_cls)' if n == 0 else '_decode([])'}, pos + 1",
        "    if data[pos] != 0xC0:",
        "        v, end = _DECODERS[data[pos]](data, pos + 1, depth, lim)",
        "        return _decode(v), end",
        "    size = data[pos + 1]",
        "    count = data[pos + 2]",
        "    end = pos + 2 + size",
        "    if count >= size or end > len(data) or count > lim.max_elements or depth >= lim.max_depth:",
        "        v, end = _DECODERS[0xC0](data, pos + 1, depth, lim)  # let the codec say why",
        "        return _decode(v), end",
        "    p = pos + 3",
        "    d = depth + 1",
    ]
    if n == 0:
        src += [
            "    for _ in range(count):",
            "        _, p = _DECODERS[data[p]](data, p + 1, d, lim)",
        ]
    else:
        src.append(f"    {' = '.join(f'a{i}' for i in range(n))} = None")
        ind = "    "
        for i, f in enumerate(fields):
            a = f"a{i}"
            src.append(f"{ind}if count > {i}:")
            ind += "    "
            src.append(f"{ind}c = data[p]")
            src.append(f"{ind}if c == 0x40:")
            src.append(f"{ind}    p += 1")
            parse = [] if f.multiple else _RAW_PARSE.get(primitive_of(f.type), [])
            for code, stmts in parse:
                src.append(f"{ind}elif c == {code:#04x}:")
                src += [f"{ind}    {st.format(a=a)}" for st in stmts]
            src.append(f"{ind}else:")
            src.append(f"{ind}    {a}, p = _DECODERS[c](data, p + 1, d, lim)")
        src.append(f"{ind}if count > {n}:")  # fields of a later version of the spec: ignored
        src.append(f"{ind}    for _ in range(count - {n}):")
        src.append(f"{ind}        _, p = _DECODERS[data[p]](data, p + 1, d, lim)")
    src += [
        "    if p != end:",
        "        raise DecodeError(f'list elements take {p - end:+d} bytes more than its size')",
    ]
    if n == 0:
        return [*src, "    return _new(_cls), end"]
    return [*src, *_check_lines(cls, ns), "    return self, end"]


def _single_checker(owner: str, f: Field, prim: str) -> Callable[[Any], Any]:
    accept = _ACCEPT[prim]
    choices = _closed_choices(f.type)

    def check(x: Any) -> Any:
        if type(x) not in accept:
            if prim == "symbol" and type(x) is str:
                x = symbol(x)  # lenient: a string where a symbol belongs
            else:
                raise DecodeError(
                    f"{owner}: field {f.name} must be {f.type}, got {type(x).__name__}"
                )
        if choices is not None and x not in choices:
            raise DecodeError(f"{owner}: field {f.name} has no {f.type} choice {x!r}")
        return x

    return check


def _composite_checker(owner: str, f: Field, prim: str) -> Callable[[Any], Any]:
    def check(x: Any) -> Any:
        cls = _COMPOSITES_BY_NAME.get(prim)
        if cls is not None and type(x) is not cls:
            raise DecodeError(f"{owner}: field {f.name} must be {f.type}, got {type(x).__name__}")
        return x

    return check


def _requires_checker(owner: str, f: Field, providers: set[type]) -> Callable[[Any], Any]:
    def check(x: Any) -> Any:
        # a described value of a type we do not know may be an extension that provides
        # the archetype; with no known providers at all, anything goes
        if type(x) is Described or not providers:
            return x
        raise DecodeError(
            f"{owner}: field {f.name} must be a {f.requires}, got {type(x).__name__}"
        )

    return check


def _multiple_checker(owner: str, f: Field, prim: str) -> Callable[[Any], Any]:
    accept = _ACCEPT.get(prim)
    exact = _EXACT.get(prim)

    def check(x: Any) -> Any:
        if type(x) is Array:
            if x.element_type is exact and x.descriptor is None:
                return list(x.elements)  # every element already has the exact type
            items = list(x.elements)
        else:
            items = [x]
        if accept is not None:
            for i, e in enumerate(items):
                if type(e) not in accept:
                    if prim == "symbol" and type(e) is str:
                        items[i] = symbol(e)
                    else:
                        raise DecodeError(
                            f"{owner}: field {f.name} must hold {f.type} values, "
                            f"got {type(e).__name__}"
                        )
        return items

    return check


# --- the base class -----------------------------------------------------------------------


class Composite:
    """Base of every composite type; subclasses declare ``FIELDS`` and a descriptor."""

    __slots__ = ()
    AMQP_NAME: ClassVar[str] = ""
    DESCRIPTOR_NAME: ClassVar[str] = ""
    DESCRIPTOR_CODE: ClassVar[int] = -1
    SOURCE: ClassVar[str] = "list"
    PROVIDES: ClassVar[str | None] = None
    FIELDS: ClassVar[tuple[Field, ...]] = ()
    _values: ClassVar[Callable[[Any], tuple[Any, ...]]]
    _decode_list: ClassVar[Callable[[Any], Any]]
    _decode_raw: ClassVar[Callable[[Any, int, int, Any], tuple[Any, int]]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "FIELDS" not in cls.__dict__ or cls.DESCRIPTOR_CODE < 0:
            return
        attrs = tuple(f.attr for f in cls.FIELDS)
        # a function, not the attrgetter itself, so that it binds as a method
        if len(attrs) > 1:
            getter = operator.attrgetter(*attrs)

            def values(o: Any) -> tuple[Any, ...]:
                return getter(o)

        elif attrs:
            getter = operator.attrgetter(attrs[0])

            def values(o: Any) -> tuple[Any, ...]:
                return (getter(o),)

        else:

            def values(o: Any) -> tuple[Any, ...]:
                return ()

        cls._values = values
        _build(cls)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash((type(self), self._values()))

    def __repr__(self) -> str:
        parts = [
            f"{f.attr}={v!r}"
            for f, v in zip(self.FIELDS, self._values(), strict=True)
            if v is not None and (v != f.default or f.mandatory)
        ]
        return f"{type(self).__name__}({', '.join(parts)})"

    def encode(self) -> bytes:
        """This value's AMQP encoding (a described list)."""
        return codec.encode(self)


def _build_init(cls: type[Composite], ns: dict[str, Any]) -> list[str]:
    """Source of the keyword-only ``__init__`` (mandatory fields have no default).

    ``None`` for a field with a default means the default, as on the wire; symbols
    given as ``str``, roles given as :class:`~amqp10.types.Role` and single values of
    ``multiple`` fields are normalised, so that a value compares equal to its decoding.
    """
    params, body = [], []
    for i, f in enumerate(cls.FIELDS):
        ns[f"_D{i}"] = f.default
        x = f.attr
        params.append(x if f.mandatory else f"{x}=_D{i}")
        prim = primitive_of(f.type)
        # (condition, statement) pairs of one if/elif chain, run on the argument
        fix: list[tuple[str, str]] = []
        if f.default is not None:
            fix.append((f"{x} is None", f"{x} = _D{i}"))
        not_none = "" if fix else f"{x} is not None and "
        if f.multiple:
            ns[f"_I{i}"] = _multiple_init(prim)
            fix.append((f"{x} is not None", f"{x} = _I{i}({x})"))
        elif prim == "symbol":
            fix.append((f"{not_none}type({x}) is not _symbol", f"{x} = _to_symbol({x})"))
        elif prim == "boolean":
            fix.append(
                (f"{not_none}{x} is not True and {x} is not False", f"{x} = _to_bool({x})")
            )
        for k, (cond, stmt) in enumerate(fix):
            body.append(f"    {'elif' if k else 'if'} {cond}:")
            body.append(f"        {stmt}")
        body.append(f"    self.{x} = {x}")
    if not params:
        return ["def __init__(self):", "    pass"]
    return [f"def __init__(self, *, {', '.join(params)}):", *body]


def _build(cls: type[Composite]) -> None:
    """Generate ``__init__``, the encoder and the decoder of a composite class."""
    ns: dict[str, Any] = {
        "DecodeError": DecodeError,
        "EncodeError": EncodeError,
        "_new": object.__new__,
        "_cls": cls,
        "_symbol": symbol,
        "_to_symbol": _to_symbol,
        "_to_bool": _to_bool,
        "_BI": _BI,
        "_BQ": _BQ,
        "_BB": _BB,
        "_BH": _BH,
        "_BII": _BII,
        "_UINT8": _UINT8,
        "_ULONG8": _ULONG8,
        "_DECODERS": codec._DECODERS,
        "_UINTS": _UINTS,
        "_UBYTES": _UBYTES,
        "_UINT0": _UINTS[0],
        "_ULONG0": ulong(0),
        "_int_new": int.__new__,
        "_uint": uint,
        "_ulong": ulong,
        "_unpack_I": struct.Struct(">I").unpack_from,
        "_unpack_Q": struct.Struct(">Q").unpack_from,
    }
    init_ns = dict(ns)
    exec("\n".join(_build_init(cls, init_ns)), init_ns)
    enc_ns = dict(ns)
    exec("\n".join(_build_encoder(cls, enc_ns)), enc_ns)
    dec_ns = dict(ns)
    exec("\n".join(_build_decoder(cls, dec_ns)), dec_ns)
    exec("\n".join(_build_raw_decoder(cls, dec_ns)), dec_ns)
    init = init_ns["__init__"]
    init.__qualname__ = f"{cls.__name__}.__init__"
    setattr(cls, "__init__", init)  # noqa: B010 - mypy sees the declared signature instead
    register_encoder(cls, enc_ns["_encode"])
    register_described(cls.DESCRIPTOR_CODE, cls.DESCRIPTOR_NAME, dec_ns["_decode"])
    cls._decode_list = staticmethod(dec_ns["_decode"])
    cls._decode_raw = staticmethod(dec_ns["_decode_raw"])
    RAW_DECODERS[cls.DESCRIPTOR_CODE] = dec_ns["_decode_raw"]
    if _register_raw is not None:
        _register_raw(cls.DESCRIPTOR_CODE, dec_ns["_decode_raw"])
    _COMPOSITES_BY_NAME[cls.AMQP_NAME] = cls
    _ALL_DESCRIBED.append(cls)
    _add_provider(cls, cls.PROVIDES)


def generated_source(cls: type[Composite]) -> str:
    """The generated ``__init__``, encoder and decoder of ``cls`` (for debugging)."""
    ns: dict[str, Any] = {}
    builders = (_build_init, _build_encoder, _build_decoder, _build_raw_decoder)
    return "\n\n".join("\n".join(build(cls, ns)) for build in builders)


# Decoders of composites straight from the bytes, by descriptor code (see
# ``_build_raw_decoder``); the codec uses them if it offers ``register_described_raw``.
RAW_DECODERS: dict[int, Callable[[Any, int, int, Any], tuple[Any, int]]] = {}
_register_raw: Callable[..., None] | None = getattr(codec, "register_described_raw", None)
_UINTS = [uint(i) for i in range(256)]
_UBYTES = [ubyte(i) for i in range(256)]

_COMPOSITES_BY_NAME: dict[str, type] = {}
# composite field types that may be declared after their users (resolved lazily)
_PENDING_NAMES = frozenset({"error"})
_ALL_DESCRIBED: list[type] = []


class DescribedType:
    """Base of restricted types that carry a descriptor (message sections).

    The single attribute ``value`` holds the restricted value (a ``bytes`` for
    ``data``, a ``dict`` for the annotation maps, anything for ``amqp-value``).
    """

    __slots__ = ("value",)
    AMQP_NAME: ClassVar[str] = ""
    DESCRIPTOR_NAME: ClassVar[str] = ""
    DESCRIPTOR_CODE: ClassVar[int] = -1
    SOURCE: ClassVar[str] = "*"
    PROVIDES: ClassVar[str | None] = None

    def __init__(self, value: Any) -> None:
        self.value = value

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.DESCRIPTOR_CODE < 0:
            return
        prim = primitive_of(cls.SOURCE)
        enc_value = TYPED_ENCODERS.get(prim, TYPED_ENCODERS["*"])
        desc = bytes((0x00, 0x53, cls.DESCRIPTOR_CODE))
        accept = _ACCEPT.get(prim)
        new = object.__new__
        name = cls.AMQP_NAME

        def _encode(buf: bytearray, self: Any) -> None:
            buf += desc
            enc_value(buf, self.value)

        def _decode(v: Any) -> Any:
            if accept is not None and type(v) not in accept:
                raise DecodeError(f"{name}: expected {cls.SOURCE}, got {type(v).__name__}")
            self = new(cls)
            self.value = v
            return self

        register_encoder(cls, _encode)
        register_described(cls.DESCRIPTOR_CODE, cls.DESCRIPTOR_NAME, _decode)
        _ALL_DESCRIBED.append(cls)
        _add_provider(cls, cls.PROVIDES)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return bool(self.value == other.value)

    def __hash__(self) -> int:
        return hash((type(self), repr(self.value)))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.value!r})"


def composite_types() -> list[type]:
    """Every declared composite class, in declaration order."""
    return [c for c in _ALL_DESCRIBED if issubclass(c, Composite)]


def described_types() -> list[type]:
    """Every declared class with a descriptor (composites and described restricted types)."""
    return list(_ALL_DESCRIBED)


# A described value whose descriptor we do not know stays a ``Described``.
__all__ += ["Described"]
