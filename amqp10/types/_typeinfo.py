"""What the composite declarations know about types (Part 1 §1.3-1.4).

Restricted types and their registry, :class:`Field`, the Python types a decoded
value may have for each primitive field type, which types provide an archetype,
and the composite classes by AMQP name. Both :mod:`.composite` (the classes) and
:mod:`._codegen` (the code generated for them) build on this module.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from .primitives import symbol, timestamp, ubyte, uint, ulong, ushort


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
ACCEPT: dict[str, tuple[type, ...]] = {
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
EXACT: dict[str, type] = {
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


def closed_choices(type_name: str) -> frozenset[Any] | None:
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


def provider_set(archetype: str) -> set[type]:
    """The live set of types providing ``archetype`` (grows as types are declared)."""
    found = _PROVIDERS.get(archetype)
    if found is None:
        found = _PROVIDERS[archetype] = set()
        for r in RESTRICTED.values():
            if r.provides is not None and archetype in _split(r.provides):
                found.update(ACCEPT.get(primitive_of(r.source), ()))
    return found


def _split(provides: str) -> list[str]:
    return [p.strip() for p in provides.split(",")]


def add_provider(cls: type, provides: str | None) -> None:
    if provides:
        for p in _split(provides):
            provider_set(p).add(cls)


COMPOSITES_BY_NAME: dict[str, type] = {}
# composite field types that may be declared after their users (resolved lazily)
PENDING_NAMES = frozenset({"error"})
