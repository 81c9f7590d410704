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
from collections.abc import Callable
from typing import Any, ClassVar

from . import codec
from ._codegen import compile_composite, generated_source
from ._typeinfo import (
    ACCEPT,
    COMPOSITES_BY_NAME,
    RESTRICTED,
    Field,
    Restricted,
    add_provider,
    primitive_of,
    restricted,
)
from .codec import TYPED_ENCODERS, register_described, register_encoder
from .errors import DecodeError
from .primitives import Described

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
    "primitive_of",
    "restricted",
]


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
        _install(cls)

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


def _install(cls: type[Composite]) -> None:
    """Give a composite class its generated ``__init__`` and codecs, and register it."""
    init, encode, decode, decode_raw = compile_composite(cls)
    setattr(cls, "__init__", init)  # noqa: B010 - mypy sees the declared signature instead
    register_encoder(cls, encode)
    register_described(cls.DESCRIPTOR_CODE, cls.DESCRIPTOR_NAME, decode)
    cls._decode_list = staticmethod(decode)
    cls._decode_raw = staticmethod(decode_raw)
    RAW_DECODERS[cls.DESCRIPTOR_CODE] = decode_raw
    if _register_raw is not None:
        _register_raw(cls.DESCRIPTOR_CODE, decode_raw)
    COMPOSITES_BY_NAME[cls.AMQP_NAME] = cls
    _ALL_DESCRIBED.append(cls)
    add_provider(cls, cls.PROVIDES)


# Decoders of composites straight from the bytes, by descriptor code (see
# ``_codegen._build_raw_decoder``); the codec uses them if it offers ``register_described_raw``.
RAW_DECODERS: dict[int, Callable[[Any, int, int, Any], tuple[Any, int]]] = {}
_register_raw: Callable[..., None] | None = getattr(codec, "register_described_raw", None)

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
        accept = ACCEPT.get(prim)
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
        add_provider(cls, cls.PROVIDES)

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
