"""Hold the type declarations to the spec's machine-readable XML (the source of truth).

Every ``*.bare.xml`` of the AMQP 1.0 specification is parsed; each type, field,
descriptor, restricted type, choice, ``<definition>`` and error condition must be
declared exactly as the XML says, and nothing may be declared that the XML lacks.
"""

from __future__ import annotations

import enum
import uuid
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import amqp10.types  # noqa: F401  (declares every type)
from amqp10.types import codec, definitions
from amqp10.types.composite import (
    RESTRICTED,
    Composite,
    DescribedType,
    composite_types,
    described_types,
)
from amqp10.types.errors import DecodeError, ErrorCondition
from amqp10.types.primitives import (
    Array,
    byte,
    char,
    decimal32,
    decimal64,
    decimal128,
    float32,
    int32,
    short,
    symbol,
    timestamp,
    ubyte,
    uint,
    ulong,
    ushort,
)

SPEC_DIR = (Path(__file__).resolve().parents[2] / ".." / "shared" / "spec" / "amqp-1.0").resolve()
NS = "{http://www.amqp.org/schema/amqp.xsd}"
# XML files whose composite and described types live in the module of the same name
TYPE_MODULES = {"transport", "messaging", "security", "transactions"}


# --- the XML, parsed -----------------------------------------------------------------


@dataclass
class XField:
    name: str
    type: str
    mandatory: bool
    default: str | None
    multiple: bool
    requires: str | None


@dataclass
class XType:
    file: str
    name: str
    cls: str
    source: str | None
    provides: str | None
    descriptor_name: str | None = None
    descriptor_code: int | None = None
    fields: list[XField] = field(default_factory=list)
    choices: list[tuple[str, str]] = field(default_factory=list)
    encodings: list[int] = field(default_factory=list)


def _bool_attr(el: ET.Element, name: str) -> bool:
    v = el.get(name, "false")
    assert v in ("true", "false"), f"{name}={v!r}"
    return v == "true"


def _descriptor_code(text: str) -> int:
    hi, _, lo = text.partition(":")
    return (int(hi, 16) << 32) | int(lo, 16)


def _parse() -> tuple[dict[str, XType], dict[str, tuple[str, str]]]:
    files = sorted(SPEC_DIR.glob("*.bare.xml"))
    assert files, f"no spec XML found in {SPEC_DIR}"
    types: dict[str, XType] = {}
    defs: dict[str, tuple[str, str]] = {}
    for path in files:
        fname = path.name.removesuffix(".bare.xml")
        root = ET.parse(path).getroot()
        for el in root.iter(f"{NS}type"):
            name = el.attrib["name"]
            assert name not in types, f"type {name} declared twice in the XML"
            t = XType(fname, name, el.attrib["class"], el.get("source"), el.get("provides"))
            desc = el.find(f"{NS}descriptor")
            if desc is not None:
                t.descriptor_name = desc.attrib["name"]
                t.descriptor_code = _descriptor_code(desc.attrib["code"])
            for f in el.findall(f"{NS}field"):
                t.fields.append(
                    XField(
                        f.attrib["name"],
                        f.attrib["type"],
                        _bool_attr(f, "mandatory"),
                        f.get("default"),
                        _bool_attr(f, "multiple"),
                        f.get("requires"),
                    )
                )
            t.choices = [(c.attrib["name"], c.attrib["value"]) for c in el.findall(f"{NS}choice")]
            t.encodings = [int(e.attrib["code"], 16) for e in el.findall(f"{NS}encoding")]
            types[name] = t
        for d in root.iter(f"{NS}definition"):
            defs[d.attrib["name"]] = (fname, d.attrib["value"])
    return types, defs


XTYPES, XDEFS = _parse()
COMPOSITES = [t for t in XTYPES.values() if t.cls == "composite"]
DESCRIBED_RESTRICTED = [
    t for t in XTYPES.values() if t.cls == "restricted" and t.descriptor_name is not None
]
PLAIN_RESTRICTED = [t for t in XTYPES.values() if t.cls == "restricted" and t.descriptor_name is None]
PRIMITIVES = [t for t in XTYPES.values() if t.cls == "primitive"]


def _primitive(type_name: str) -> str:
    """The primitive type a (restricted) type name finally stands for, per the XML."""
    seen = set()
    while type_name in XTYPES and XTYPES[type_name].cls == "restricted":
        assert type_name not in seen, f"restricted-type cycle at {type_name}"
        seen.add(type_name)
        type_name = XTYPES[type_name].source or "*"
    return type_name


def _convert(prim: str, text: str) -> Any:
    """An XML attribute value as the Python value of the primitive type ``prim``."""
    if prim == "boolean":
        assert text in ("true", "false"), text
        return text == "true"
    if prim in ("ubyte", "ushort", "uint", "ulong", "byte", "short", "int", "long"):
        return int(text, 0)
    if prim in ("symbol", "string"):
        return text
    raise AssertionError(f"no conversion for a {prim} value {text!r}")


def _choice_values(t: XType) -> dict[str, Any]:
    prim = _primitive(t.name)
    return {name: _convert(prim, value) for name, value in t.choices}


def _xml_default(f: XField) -> Any:
    if f.default is None:
        return None
    t = XTYPES.get(f.type)
    if t is not None and t.choices:
        values = _choice_values(t)
        if f.default in values:  # a default may name a choice ("mixed", "none")
            return values[f.default]
    return _convert(_primitive(f.type), f.default)


def _same(a: Any, b: Any) -> bool:
    """Equal, and a bool only ever equals a bool (``0 == False`` is not good enough)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if a is None or b is None:
        return a is b
    return bool(a == b)


def _ids(types: list[XType]) -> list[str]:
    return [f"{t.file}:{t.name}" for t in types]


PY_DESCRIBED = {c.AMQP_NAME: c for c in described_types()}


def test_spec_xml_found() -> None:
    names = {p.name for p in SPEC_DIR.glob("*.bare.xml")}
    assert {f"{m}.bare.xml" for m in TYPE_MODULES | {"types"}} <= names
    assert COMPOSITES and PLAIN_RESTRICTED and DESCRIBED_RESTRICTED and PRIMITIVES and XDEFS


# --- composite types -------------------------------------------------------------------


@pytest.mark.parametrize("xt", COMPOSITES, ids=_ids(COMPOSITES))
def test_composite_matches_xml(xt: XType) -> None:
    cls = PY_DESCRIBED.get(xt.name)
    assert cls is not None, f"composite {xt.name} is not declared"
    assert issubclass(cls, Composite), f"{xt.name} must be a Composite"
    assert cls.__module__ == f"amqp10.types.{xt.file}", f"{xt.name} belongs in {xt.file}.py"
    assert cls.SOURCE == xt.source == "list"
    assert xt.provides == cls.PROVIDES, f"{xt.name}: provides"
    assert xt.descriptor_name == cls.DESCRIPTOR_NAME, f"{xt.name}: descriptor name"
    assert xt.descriptor_code == cls.DESCRIPTOR_CODE, f"{xt.name}: descriptor code"
    declared = [f.name for f in cls.FIELDS]
    expected = [f.name for f in xt.fields]
    assert declared == expected, f"{xt.name}: fields (names or order)"
    for pf, xf in zip(cls.FIELDS, xt.fields, strict=True):
        where = f"{xt.name}.{xf.name}"
        assert pf.attr == xf.name.replace("-", "_"), f"{where}: attribute name"
        assert pf.type == xf.type, f"{where}: type {pf.type!r}, XML says {xf.type!r}"
        assert pf.mandatory is xf.mandatory, f"{where}: mandatory"
        assert pf.multiple is xf.multiple, f"{where}: multiple"
        assert pf.requires == xf.requires, f"{where}: requires"
        expected_default = _xml_default(xf)
        assert _same(pf.default, expected_default), (
            f"{where}: default {pf.default!r}, XML says {xf.default!r} ({expected_default!r})"
        )
    assert set(cls.__slots__) == {f.attr for f in cls.FIELDS}, f"{xt.name}: __slots__"


@pytest.mark.parametrize("xt", COMPOSITES, ids=_ids(COMPOSITES))
def test_composite_field_types_resolve(xt: XType) -> None:
    """Every field type (and what it requires) names a type the XML knows, or ``*``."""
    for xf in xt.fields:
        assert xf.type == "*" or xf.type in XTYPES, f"{xt.name}.{xf.name}: {xf.type}"


# --- restricted types ----------------------------------------------------------------------


@pytest.mark.parametrize("xt", DESCRIBED_RESTRICTED, ids=_ids(DESCRIBED_RESTRICTED))
def test_described_restricted_matches_xml(xt: XType) -> None:
    cls = PY_DESCRIBED.get(xt.name)
    assert cls is not None, f"restricted type {xt.name} (with a descriptor) is not declared"
    assert issubclass(cls, DescribedType), f"{xt.name} must be a DescribedType"
    assert cls.__module__ == f"amqp10.types.{xt.file}", f"{xt.name} belongs in {xt.file}.py"
    assert xt.source == cls.SOURCE, f"{xt.name}: source"
    assert xt.provides == cls.PROVIDES, f"{xt.name}: provides"
    assert xt.descriptor_name == cls.DESCRIPTOR_NAME, f"{xt.name}: descriptor name"
    assert xt.descriptor_code == cls.DESCRIPTOR_CODE, f"{xt.name}: descriptor code"
    assert xt.name not in RESTRICTED, f"{xt.name} has a descriptor: a class, not restricted()"
    assert not xt.choices


@pytest.mark.parametrize("xt", PLAIN_RESTRICTED, ids=_ids(PLAIN_RESTRICTED))
def test_restricted_matches_xml(xt: XType) -> None:
    r = RESTRICTED.get(xt.name)
    assert r is not None, f"restricted type {xt.name} is not declared"
    assert r.name == xt.name
    assert r.source == xt.source, f"{xt.name}: source {r.source!r}, XML says {xt.source!r}"
    assert r.provides == xt.provides, f"{xt.name}: provides {r.provides!r}, XML says {xt.provides!r}"
    expected = _choice_values(xt)
    assert list(r.choices) == list(expected), f"{xt.name}: choice names (or order)"
    for name, value in expected.items():
        assert _same(r.choices[name], value), (
            f"{xt.name}: choice {name} = {r.choices[name]!r}, XML says {value!r}"
        )
    assert xt.name not in PY_DESCRIBED, f"{xt.name} has no descriptor in the XML"


# enum class in definitions.py -> the restricted type whose choices it names
ENUMS: dict[str, type[enum.Enum]] = {
    "role": definitions.Role,
    "sender-settle-mode": definitions.SenderSettleMode,
    "receiver-settle-mode": definitions.ReceiverSettleMode,
    "terminus-durability": definitions.TerminusDurability,
    "terminus-expiry-policy": definitions.ExpiryPolicy,
    "std-dist-mode": definitions.StdDistMode,
    "sasl-code": definitions.SaslCode,
    "txn-capability": definitions.TxnCapability,
}


@pytest.mark.parametrize("name", sorted(ENUMS))
def test_enum_matches_choices(name: str) -> None:
    xt = XTYPES[name]
    members = {m.name.lower().replace("_", "-"): m.value for m in ENUMS[name]}
    expected = _choice_values(xt)
    assert list(members) == list(expected), f"{name}: member names"
    for k, v in expected.items():
        assert members[k] == v, f"{name}.{k}: {members[k]!r}, XML says {v!r}"


def test_every_closed_choice_set_has_an_enum() -> None:
    """Restricted types with choices (other than error conditions) each have an enum."""
    with_choices = {
        t.name for t in PLAIN_RESTRICTED if t.choices and t.provides != "error-condition"
    }
    assert with_choices == set(ENUMS)
    public = {
        v for k, v in vars(definitions).items()
        if isinstance(v, type) and issubclass(v, enum.Enum) and not k.startswith("_")
    }
    assert public == set(ENUMS.values()), "an enum in definitions.py that the XML lacks"


def test_error_conditions_match_xml() -> None:
    expected = {
        value
        for t in PLAIN_RESTRICTED
        if t.provides == "error-condition"
        for _, value in t.choices
    }
    declared = {str.__str__(m) for m in ErrorCondition}
    assert expected - declared == set(), "error conditions missing from ErrorCondition"
    assert declared - expected == set(), "ErrorCondition members the XML does not define"
    assert len(declared) == len(ErrorCondition)


# --- definitions ------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(XDEFS))
def test_definition_constant(name: str) -> None:
    _, value = XDEFS[name]
    attr = name.replace("-", "_")
    assert hasattr(definitions, attr), f"<definition name={name!r}> has no constant {attr}"
    got = getattr(definitions, attr)
    assert type(got) is int and got == int(value, 0), f"{attr} = {got!r}, XML says {value}"


def test_no_extra_definitions() -> None:
    constants = {
        k for k, v in vars(definitions).items() if k.isupper() and type(v) is int
    }
    assert constants == {n.replace("-", "_") for n in XDEFS}


# --- nothing the XML lacks ------------------------------------------------------------------


def test_no_described_class_without_xml() -> None:
    extra = [
        c.__name__
        for c in described_types()
        if c.AMQP_NAME not in XTYPES or XTYPES[c.AMQP_NAME].descriptor_name is None
    ]
    assert extra == [], "described classes the XML does not define"
    names = [c.AMQP_NAME for c in described_types()]
    assert len(names) == len(set(names)), "a type declared twice"
    codes = [c.DESCRIPTOR_CODE for c in described_types()]
    assert len(codes) == len(set(codes)), "a descriptor code used twice"
    assert {c.AMQP_NAME for c in composite_types()} == {t.name for t in COMPOSITES}
    assert {c.AMQP_NAME for c in described_types()} == {
        t.name for t in COMPOSITES + DESCRIBED_RESTRICTED
    }


def test_no_restricted_without_xml() -> None:
    assert set(RESTRICTED) - {t.name for t in PLAIN_RESTRICTED} == set()


def test_descriptors_registered_for_decoding() -> None:
    for c in described_types():
        assert codec._DESCRIBED_BY_CODE.get(c.DESCRIPTOR_CODE) is not None, c.__name__
        assert codec._DESCRIBED_BY_NAME.get(c.DESCRIPTOR_NAME) is not None, c.__name__
    assert set(codec._DESCRIBED_BY_CODE) == {c.DESCRIPTOR_CODE for c in described_types()}
    assert set(codec._DESCRIBED_BY_NAME) == {c.DESCRIPTOR_NAME for c in described_types()}


# --- primitive types -----------------------------------------------------------------------

# Values of each primitive type, chosen so that together they use every encoding.
PRIMITIVE_SAMPLES: dict[str, list[Any]] = {
    "null": [None],
    "boolean": [True, False, Array(bool, [True, False])],
    "ubyte": [ubyte(0), ubyte(255)],
    "ushort": [ushort(0), ushort(65535)],
    "uint": [uint(0), uint(7), uint(0x12345678)],
    "ulong": [ulong(0), ulong(7), ulong(1 << 63)],
    "byte": [byte(-128), byte(127)],
    "short": [short(-32768), short(32767)],
    "int": [int32(-5), int32(1 << 30)],
    "long": [-5, 1 << 40],
    "float": [float32(1.5)],
    "double": [1.25],
    "decimal32": [decimal32(0x22500000)],
    "decimal64": [decimal64(0x2238000000000000)],
    "decimal128": [decimal128(b"\x22\x08" + b"\x00" * 14)],
    "char": [char("x"), char("\U0001f600")],
    "timestamp": [timestamp(1_700_000_000_000)],
    "uuid": [uuid.UUID(int=0x0123456789ABCDEF)],
    "binary": [b"", b"\x00" * 300],
    "string": ["", "é" * 200],
    "symbol": [symbol("a"), symbol("s" * 300)],
    "list": [[], [1, "two"], list(range(300))],
    "map": [{}, {"k": 1}, {i: i for i in range(200)}],
    "array": [Array(uint, [uint(1), uint(2)]), Array(ulong, [ulong(0)] * 300)],
}


def _is_placeholder(code: int) -> bool:
    """The constructor decodes nothing: its slot answers "unknown constructor" (a real one
    decodes what follows or finds it truncated)."""
    try:
        codec.decode_at(bytes([code]) + bytes(20))
    except DecodeError as e:
        return "unknown constructor" in str(e)
    return False


@pytest.mark.parametrize("xt", PRIMITIVES, ids=_ids(PRIMITIVES))
def test_primitive_has_decoders(xt: XType) -> None:
    assert xt.encodings, f"{xt.name}: no encodings in the XML"
    for code in xt.encodings:
        assert not _is_placeholder(code), f"{xt.name}: constructor {code:#04x} is not decoded"


@pytest.mark.parametrize("xt", PRIMITIVES, ids=_ids(PRIMITIVES))
def test_primitive_has_encoder(xt: XType) -> None:
    assert xt.name in PRIMITIVE_SAMPLES, f"primitive {xt.name} has no sample (a new type?)"
    seen: set[int] = set()
    for value in PRIMITIVE_SAMPLES[xt.name]:
        data = codec.encode(value)
        # an encoding used only inside arrays (boolean 0x56) is checked as the element
        # constructor of an array8 (0xe0, size, count, constructor)
        ctor = data[3] if isinstance(value, Array) and xt.name != "array" else data[0]
        assert ctor in xt.encodings, f"{xt.name}: {value!r} encoded with {ctor:#04x}"
        seen.add(ctor)
        back = codec.decode(data)
        assert back == value and type(back) is type(value), f"{xt.name}: {value!r} -> {back!r}"
    assert seen == set(xt.encodings), f"{xt.name}: encodings never produced: {set(xt.encodings) - seen}"


def test_no_constructor_outside_types_xml() -> None:
    codes = {c for t in PRIMITIVES for c in t.encodings} | {0x00}  # 0x00: described
    live = {c for c in range(256) if not _is_placeholder(c)}
    assert live == codes


def test_primitive_type_names_cover_typed_encoders() -> None:
    """The field-typed encoders know exactly the XML's primitive names (plus helpers)."""
    names = {t.name for t in PRIMITIVES}
    helpers = {"*", "symbol-keyed-map"}
    assert set(codec.TYPED_ENCODERS) - helpers <= names
    assert names - set(codec.TYPED_ENCODERS) <= {"array"}  # arrays: via ``multiple`` fields
