"""Declarations of composite and restricted described types (Part 1 §1.4).

A composite type is declared once, as a class with a ``FIELDS`` tuple that
mirrors the spec's ``<field>`` elements (names, types, mandatory, defaults,
multiple). From that declaration the class gets ``__slots__``, a keyword-only
constructor, and an encoder and decoder generated once at import time, so that
the per-frame path runs straight-line code rather than a loop over metadata.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any, ClassVar

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
    "Composite",
    "DescribedType",
    "Field",
    "RESTRICTED",
    "Restricted",
    "composite_types",
    "described_types",
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
    "map": (dict,),
    "symbol-keyed-map": (dict,),
    "list": (list,),
}


def _typed_encoder(f: Field) -> Encoder:
    prim = primitive_of(f.type)
    enc = TYPED_ENCODERS.get(prim)
    if enc is None:  # a composite type such as ``error``: encoded as itself
        enc = TYPED_ENCODERS["*"]
    if not f.multiple:
        return enc
    elem_type = _ARRAY_ELEMENT.get(prim)

    def enc_multiple(buf: bytearray, v: Any) -> None:
        if isinstance(v, (str, bytes)) or not isinstance(v, (list, tuple, Array)):
            v = [v]
        if elem_type is None:
            codec._encode_value(buf, list(v))
        else:
            codec._encode_value(buf, Array(elem_type, [elem_type(x) for x in v]))

    return enc_multiple


_ARRAY_ELEMENT: dict[str, type] = {"symbol": symbol, "string": str, "uint": uint}


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

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "FIELDS" not in cls.__dict__ or cls.DESCRIPTOR_CODE < 0:
            return
        attrs = tuple(f.attr for f in cls.FIELDS)
        if attrs:
            getter = operator.attrgetter(*attrs)
            if len(attrs) == 1:
                cls._values = lambda o: (getter(o),)  # type: ignore[assignment,misc]
            else:
                cls._values = lambda o: getter(o)  # type: ignore[assignment,misc]
        else:
            cls._values = lambda o: ()  # type: ignore[assignment,misc]
        _build(cls)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._values() == other._values()  # type: ignore[attr-defined]

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


def _build(cls: type[Composite]) -> None:
    """Generate ``__init__``, the encoder and the decoder of a composite class."""
    fields = cls.FIELDS
    name = cls.AMQP_NAME
    code = cls.DESCRIPTOR_CODE
    ns: dict[str, Any] = {
        "DecodeError": DecodeError,
        "EncodeError": EncodeError,
        "_new": object.__new__,
        "_cls": cls,
        "_finish": codec._finish_compound,
        "_HDR": b"\xd0" + b"\x00" * 8,
        "_DESC": bytes((0x00, 0x53, code)) if code <= 0xFF else b"\x00\x80" + code.to_bytes(8, "big"),
    }
    # --- __init__ -------------------------------------------------------------
    params, body = [], []
    for i, f in enumerate(fields):
        ns[f"_D{i}"] = f.default
        if f.mandatory:
            params.append(f.attr)
        else:
            params.append(f"{f.attr}=_D{i}")
        if f.multiple:
            body.append(f"    self.{f.attr} = None if {f.attr} is None else list({f.attr})")
        else:
            body.append(f"    self.{f.attr} = {f.attr}")
    sig = ("*, " + ", ".join(params)) if params else ""
    src = [f"def __init__(self{', ' if sig else ''}{sig}):"] + (body or ["    pass"])
    # --- encoder ----------------------------------------------------------------
    n = len(fields)
    enc = ["def _encode(buf, self):", "    buf += _DESC"]
    if n == 0:
        enc.append("    buf.append(0x45)")
    else:
        for i, f in enumerate(fields):
            enc.append(f"    a{i} = self.{f.attr}")
            ns[f"_E{i}"] = _typed_encoder(f)

        def absent(i: int) -> str:
            f = fields[i]
            if f.default is None:
                return f"a{i} is None"
            return f"(a{i} is None or a{i} == _D{i})"

        # how many fields to write: up to the last one that is present
        enc.append("    n = 0")
        for i in reversed(range(n)):
            kw = "if" if i == n - 1 else "elif"
            enc.append(f"    {kw} not {absent(i)}: n = {i + 1}")
        enc.append("    if n == 0:")
        mand = [i for i, f in enumerate(fields) if f.mandatory]
        if mand:
            enc.append(f"        raise EncodeError('{name}: {fields[mand[0]].name} is mandatory')")
        else:
            enc.append("        buf.append(0x45)")
            enc.append("        return")
        enc.append("    start = len(buf)")
        enc.append("    buf += _HDR")
        for i, f in enumerate(fields):
            ind = "    " if i == 0 else "        "
            if i > 0:
                enc.append(f"    if n > {i}:")
            enc.append(f"{ind}if {absent(i)}:")
            if f.mandatory:
                enc.append(f"{ind}    raise EncodeError('{name}: {f.name} is mandatory')")
            else:
                enc.append(f"{ind}    buf.append(0x40)")
            enc.append(f"{ind}else:")
            enc.append(f"{ind}    _E{i}(buf, a{i})")
        enc.append("    _finish(buf, start, n, 0xC0)")
    # --- decoder ----------------------------------------------------------------
    dec = [
        "def _decode(v):",
        "    if type(v) is not list:",
        f"        raise DecodeError('{name}: expected a list, got ' + type(v).__name__)",
        "    n = len(v)",
        "    self = _new(_cls)",
    ]
    for i, f in enumerate(fields):
        prim = primitive_of(f.type)
        dec.append(f"    x = v[{i}] if n > {i} else None")
        dec.append("    if x is None:")
        if f.mandatory:
            dec.append(f"        raise DecodeError('{name}: mandatory field {f.name} is missing')")
        else:
            dec.append(f"        x = _D{i}")
        if f.multiple:
            ns[f"_M{i}"] = _multiple_checker(name, f, prim)
            dec.append("    else:")
            dec.append(f"        x = _M{i}(x)")
        elif prim in _ACCEPT:
            ns[f"_T{i}"] = frozenset(_ACCEPT[prim])
            ns[f"_C{i}"] = _single_checker(name, f, prim)
            dec.append(f"    elif type(x) not in _T{i}:")
            dec.append(f"        x = _C{i}(x)")
        elif prim in _COMPOSITES_BY_NAME or prim in _PENDING_NAMES:
            ns[f"_C{i}"] = _composite_checker(name, f, prim)
            dec.append("    else:")
            dec.append(f"        x = _C{i}(x)")
        dec.append(f"    self.{f.attr} = x")
    dec.append("    return self")
    exec("\n".join(src), ns)  # noqa: S102 - generated from the declarations above
    exec("\n".join(enc), ns)  # noqa: S102
    exec("\n".join(dec), ns)  # noqa: S102
    cls.__init__ = ns["__init__"]  # type: ignore[misc]
    cls.__init__.__qualname__ = f"{cls.__name__}.__init__"
    register_encoder(cls, ns["_encode"])
    register_described(code, cls.DESCRIPTOR_NAME, ns["_decode"])
    cls._decode_list = staticmethod(ns["_decode"])  # type: ignore[attr-defined]
    _COMPOSITES_BY_NAME[cls.AMQP_NAME] = cls
    _ALL_DESCRIBED.append(cls)


_COMPOSITES_BY_NAME: dict[str, type] = {}
# composite field types that may be declared after their users (resolved lazily)
_PENDING_NAMES = frozenset({"error"})
_ALL_DESCRIBED: list[type] = []


def _single_checker(owner: str, f: Field, prim: str) -> Callable[[Any], Any]:
    def check(x: Any) -> Any:
        if prim == "symbol" and type(x) is str:
            return symbol(x)  # lenient: a string where a symbol belongs
        raise DecodeError(f"{owner}: field {f.name} must be {f.type}, got {type(x).__name__}")

    return check


def _composite_checker(owner: str, f: Field, prim: str) -> Callable[[Any], Any]:
    def check(x: Any) -> Any:
        cls = _COMPOSITES_BY_NAME.get(prim)
        if cls is not None and type(x) is not cls:
            raise DecodeError(f"{owner}: field {f.name} must be {f.type}, got {type(x).__name__}")
        return x

    return check


def _multiple_checker(owner: str, f: Field, prim: str) -> Callable[[Any], Any]:
    accept = _ACCEPT.get(prim)

    def check(x: Any) -> Any:
        items = list(x.elements) if type(x) is Array else [x]
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

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return bool(self.value == other.value)  # type: ignore[attr-defined]

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
