"""Cross-checks against Apache Qpid Proton's codec (``proton.Data``).

Our bytes decode in Proton to the same value, and Proton's bytes decode here to
the same value, for every type the strategies generate: described values,
arrays of described values and arrays of arrays included.
"""

from __future__ import annotations

import uuid
from typing import Any

import proton
import pytest
from hypothesis import given, settings
from proton import UNDESCRIBED, Data

from amqp10.types import (
    Array,
    Described,
    byte,
    char,
    decimal32,
    decimal64,
    decimal128,
    decode,
    encode,
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

from .strategies import assert_same, values

# Properties that mostly re-check the main round trip: half the examples.
secondary = settings(max_examples=max(25, settings.default.max_examples // 2))

pytestmark = pytest.mark.proton

# our exact types <-> Proton's
_TO_PROTON: dict[type, type] = {
    ubyte: proton.ubyte,
    ushort: proton.ushort,
    uint: proton.uint,
    ulong: proton.ulong,
    byte: proton.byte,
    short: proton.short,
    int32: proton.int32,
    float32: proton.float32,
    decimal32: proton.decimal32,
    decimal64: proton.decimal64,
    char: proton.char,
    timestamp: proton.timestamp,
    symbol: proton.symbol,
}
_FROM_PROTON: dict[type, type] = {p: ours for ours, p in _TO_PROTON.items()}

# Array.element_type <-> Proton's array type codes
_ARRAY_CODES: dict[type, int] = {
    type(None): Data.NULL,
    bool: Data.BOOL,
    ubyte: Data.UBYTE,
    ushort: Data.USHORT,
    uint: Data.UINT,
    ulong: Data.ULONG,
    byte: Data.BYTE,
    short: Data.SHORT,
    int32: Data.INT,
    int: Data.LONG,
    float32: Data.FLOAT,
    float: Data.DOUBLE,
    decimal32: Data.DECIMAL32,
    decimal64: Data.DECIMAL64,
    decimal128: Data.DECIMAL128,
    char: Data.CHAR,
    timestamp: Data.TIMESTAMP,
    uuid.UUID: Data.UUID,
    bytes: Data.BINARY,
    str: Data.STRING,
    symbol: Data.SYMBOL,
    list: Data.LIST,
    dict: Data.MAP,
    Array: Data.ARRAY,
}
_ARRAY_TYPES = {code: tp for tp, code in _ARRAY_CODES.items()}


def to_proton(v: Any) -> Any:
    """Our value as the Python objects Proton's ``put_object`` encodes as the same AMQP value."""
    tp = type(v)
    if tp in _TO_PROTON:
        return _TO_PROTON[tp](v)
    if tp is decimal128:
        return proton.decimal128(bytes(v))
    if tp is list:
        return [to_proton(x) for x in v]
    if tp is dict:
        return {to_proton(k): to_proton(x) for k, x in v.items()}
    if tp is Described:
        return proton.Described(to_proton(v.descriptor), to_proton(v.value))
    if tp is Array:
        desc = UNDESCRIBED if v.descriptor is None else to_proton(v.descriptor)
        return proton.Array(desc, _ARRAY_CODES[v.element_type], *(to_proton(e) for e in v))
    assert tp in (type(None), bool, int, float, str, bytes, uuid.UUID), tp
    return v


def from_proton(v: Any) -> Any:
    """A value from Proton's ``get_object`` as ours."""
    tp = type(v)
    if tp in _FROM_PROTON:
        return _FROM_PROTON[tp](v)
    if tp is proton.decimal128:
        return decimal128(bytes(v))
    if tp is list:
        return [from_proton(x) for x in v]
    if tp is dict:
        return {from_proton(k): from_proton(x) for k, x in v.items()}
    if tp is proton.Described:
        return Described(from_proton(v.descriptor), from_proton(v.value))
    if tp is proton.Array:
        desc = None if v.descriptor is UNDESCRIBED else from_proton(v.descriptor)
        return Array(_ARRAY_TYPES[v.type], [from_proton(e) for e in v.elements], desc)
    assert tp in (type(None), bool, int, float, str, bytes, uuid.UUID), tp
    return v


def _get(d: Data) -> Any:
    """The current node of ``d`` as Proton's Python objects, like ``get_object``.

    Walks compounds itself because Proton 0.40's ``get_object`` returns binary as a
    writable ``memoryview``, which cannot be a dict key: any map with a binary key
    fails in ``get_dict`` with "cannot hash writable memoryview object".
    """
    t = d.type()
    if t == Data.BINARY:
        return bytes(d.get_binary())
    if t == Data.LIST:
        d.get_list()
        return _children(d)
    if t == Data.MAP:
        d.get_map()
        items = _children(d)
        return dict(zip(items[::2], items[1::2]))
    if t == Data.DESCRIBED:
        descriptor, value = _children(d)
        return proton.Described(descriptor, value)
    if t == Data.ARRAY:
        _, described, element_type = d.get_array()
        items = _children(d)
        descriptor = items.pop(0) if described else UNDESCRIBED
        return proton.Array(descriptor, element_type, *items)
    return d.get_object()


def _children(d: Data) -> list[Any]:
    d.enter()
    out = []
    while d.next() is not None:
        out.append(_get(d))
    d.exit()
    return out


def proton_decode(data: bytes) -> Any:
    d = Data()
    assert d.decode(data) == len(data)
    d.rewind()
    assert d.next() is not None
    v = _get(d)
    assert d.next() is None
    return v


def proton_encode(v: Any) -> bytes:
    d = Data()
    d.put_object(v)
    data: bytes = d.encode()
    return data


def avoid_proton_nested_described_bug(v: Any) -> Any:
    """``v`` with every described value whose value is itself described wrapped in a list.

    Proton 0.40's decoder mis-nests whatever follows such a value in the same
    compound (see :func:`test_proton_nested_described_bug`), and for arrays it
    reports element type 0; our encoding is not at fault, so the generated values
    step around it.
    """
    tp = type(v)
    if tp is list:
        return [avoid_proton_nested_described_bug(x) for x in v]
    if tp is dict:
        return {k: avoid_proton_nested_described_bug(x) for k, x in v.items()}
    if tp is Described:
        inner = avoid_proton_nested_described_bug(v.value)
        return Described(v.descriptor, [inner] if type(inner) is Described else inner)
    if tp is Array:
        elems = [avoid_proton_nested_described_bug(e) for e in v.elements]
        return Array(v.element_type, elems, v.descriptor)
    return v


proton_values = values.map(avoid_proton_nested_described_bug)


# --- generated values, both ways ---------------------------------------------------------


@given(proton_values)
def test_proton_decodes_our_bytes(v: Any) -> None:
    assert_same(from_proton(proton_decode(encode(v))), v)


@given(proton_values)
def test_we_decode_protons_bytes(v: Any) -> None:
    assert_same(decode(proton_encode(to_proton(v))), v)


NESTED_DESCRIBED = [Described(ulong(1), Described(ulong(2), None)), None]


def test_we_decode_nested_described_followed_by_a_sibling() -> None:
    data = proton_encode([to_proton(NESTED_DESCRIBED)])
    assert (
        data.hex(" ")
        == "d0 00 00 00 15 00 00 00 01 d0 00 00 00 0c 00 00 00 02 00 53 01 00 53 02 40 40"
    )
    assert_same(decode(data), [NESTED_DESCRIBED])
    assert_same(decode(encode([NESTED_DESCRIBED])), [NESTED_DESCRIBED])


@pytest.mark.xfail(
    strict=True,
    reason="Proton 0.40 mis-nests the sibling after a described value whose value is "
    "described (its own encoding too); drop avoid_proton_nested_described_bug once fixed",
)
def test_proton_nested_described_bug() -> None:
    data = proton_encode([to_proton(NESTED_DESCRIBED)])
    assert_same(from_proton(proton_decode(data)), [NESTED_DESCRIBED])


@secondary
@given(values)
def test_converters_round_trip(v: Any) -> None:
    assert_same(from_proton(to_proton(v)), v)


# --- what Proton accepts and emits -------------------------------------------------------

ZERO_WIDTH_ARRAYS = [
    ("e0 02 03 43", proton.Array(UNDESCRIBED, Data.UINT, *[proton.uint(0)] * 3)),
    ("e0 02 03 44", proton.Array(UNDESCRIBED, Data.ULONG, *[proton.ulong(0)] * 3)),
    ("e0 02 03 40", proton.Array(UNDESCRIBED, Data.NULL, None, None, None)),
    ("e0 02 02 41", proton.Array(UNDESCRIBED, Data.BOOL, True, True)),
    ("e0 02 02 42", proton.Array(UNDESCRIBED, Data.BOOL, False, False)),
    ("e0 02 02 45", proton.Array(UNDESCRIBED, Data.LIST, [], [])),
    ("e0 05 02 00 53 07 43", proton.Array(proton.ulong(7), Data.UINT, *[proton.uint(0)] * 2)),
]


@pytest.mark.parametrize(
    ("hex_", "expected"), ZERO_WIDTH_ARRAYS, ids=[x for x, _ in ZERO_WIDTH_ARRAYS]
)
def test_proton_accepts_zero_width_array_elements(hex_: str, expected: Any) -> None:
    """Proton 0.40 decodes arrays whose element constructor has no payload, so our
    encoder may use uint0/ulong0/true/false/list0 for uniform arrays."""
    data = bytes.fromhex(hex_.replace(" ", ""))
    got = proton_decode(data)
    assert got == expected
    assert_same(from_proton(got), decode(data))
    assert encode(from_proton(got)) == data  # and it is what we emit


def test_proton_emits_32_bit_compounds() -> None:
    """Proton writes list32/map32/array32 whatever the size; we read them all."""
    cases: list[tuple[Any, str]] = [
        ([1, 2, 3], "d0 0000000a 00000003 5501 5502 5503"),
        ({1: 2}, "d1 00000008 00000002 5501 5502"),
        ([], "45"),
        ({}, "d1 00000004 00000000"),
        (
            proton.Array(UNDESCRIBED, Data.UINT, proton.uint(0), proton.uint(0)),
            "f0 0000000d 00000002 70 00000000 00000000",
        ),
        (
            proton.Array(UNDESCRIBED, Data.BOOL, True, True),
            "f0 00000007 00000002 56 01 01",
        ),
    ]
    for v, hex_ in cases:
        data = proton_encode(v)
        assert data.hex(" ") == bytes.fromhex(hex_.replace(" ", "")).hex(" ")
        assert_same(decode(data), from_proton(v))


def test_proton_arrays_of_arrays_and_of_described() -> None:
    inner = [
        proton.Array(UNDESCRIBED, Data.INT, proton.int32(1), proton.int32(2)),
        proton.Array(UNDESCRIBED, Data.STRING, "x"),
        proton.Array(proton.symbol("d"), Data.LONG, 5),
    ]
    outer = proton.Array(proton.ulong(0x1234), Data.ARRAY, *inner)
    ours = Array(
        Array,
        [
            Array(int32, [int32(1), int32(2)]),
            Array(str, ["x"]),
            Array(int, [5], descriptor=symbol("d")),
        ],
        descriptor=ulong(0x1234),
    )
    assert_same(decode(proton_encode(outer)), ours)
    assert_same(from_proton(proton_decode(encode(ours))), ours)
