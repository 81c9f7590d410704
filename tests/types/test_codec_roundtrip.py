"""Round trips, smallest encodings, every wire encoding of the spec, and range errors."""

from __future__ import annotations

import datetime as dt
import math
import struct
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amqp10.types import (
    Accepted,
    Array,
    DecodeError,
    Described,
    EncodeError,
    byte,
    char,
    decimal32,
    decimal64,
    decimal128,
    decode,
    decode_at,
    encode,
    encode_into,
    float32,
    int32,
    long,
    short,
    symbol,
    timestamp,
    ubyte,
    uint,
    ulong,
    ushort,
)

from .strategies import assert_same, big_lists, values

# Properties that mostly re-check the main round trip: half the examples.
secondary = settings(max_examples=max(25, settings.default.max_examples // 2))

SPEC_TYPES = Path("/work/shared/spec/amqp-1.0/types.bare.xml")
_NS = {"amqp": "http://www.amqp.org/schema/amqp.xsd"}


def h(s: str) -> bytes:
    return bytes.fromhex(s.replace(" ", ""))


_EXACT = {ubyte, ushort, uint, ulong, byte, short, int32, char, symbol, timestamp, float32}


def arr(tp: type, xs: list[Any], descriptor: Any = None) -> Array:
    """An Array whose elements are made the exact type (as the decoder returns them)."""
    return Array(tp, [tp(x) for x in xs] if tp in _EXACT else xs, descriptor)


# --- round trips ---------------------------------------------------------------


@given(values)
def test_round_trip(v: Any) -> None:
    data = encode(v)
    assert_same(decode(data), v)
    assert_same(decode(bytearray(data)), v)
    assert_same(decode(memoryview(data)), v)


@secondary
@given(values, st.binary(max_size=10), st.binary(max_size=10))
def test_decode_at_offset_with_trailing_data(v: Any, prefix: bytes, suffix: bytes) -> None:
    data = encode(v)
    buf = prefix + data + suffix
    got, end = decode_at(buf, len(prefix))
    assert_same(got, v)
    assert end == len(prefix) + len(data)
    got, end = decode_at(memoryview(buf), len(prefix))
    assert_same(got, v)
    assert end == len(prefix) + len(data)


@secondary
@given(st.lists(values, min_size=1, max_size=4), st.binary(max_size=8))
def test_encode_into_appends(vs: list[Any], prefix: bytes) -> None:
    buf = bytearray(prefix)
    for v in vs:
        encode_into(buf, v)
    assert buf == prefix + b"".join(encode(v) for v in vs)
    pos = len(prefix)
    for v in vs:
        got, pos = decode_at(buf, pos)
        assert_same(got, v)
    assert pos == len(buf)


@secondary
@given(values, st.binary(min_size=1, max_size=4))
def test_decode_rejects_trailing_bytes(v: Any, suffix: bytes) -> None:
    with pytest.raises(DecodeError, match="trailing"):
        decode(encode(v) + suffix)


@pytest.mark.parametrize(
    "nan", [math.nan, -math.nan, struct.unpack(">d", h("7ff0000000000001"))[0]]
)
def test_nan_double_keeps_its_bits(nan: float) -> None:
    got = decode(encode(nan))
    assert type(got) is float and math.isnan(got)
    assert struct.pack(">d", got) == struct.pack(">d", nan)


def test_nan_float32() -> None:
    got = decode(encode(float32(math.nan)))
    assert type(got) is float32 and math.isnan(got)


def test_long_decodes_as_plain_int() -> None:
    got = decode(encode(long(5)))
    assert type(got) is int and got == 5
    assert decode(encode(Array(long, [long(1), long(2)]))) == Array(int, [1, 2])


def test_datetime_encodes_as_timestamp() -> None:
    when = dt.datetime(2024, 2, 29, 12, 30, 1, 123456, tzinfo=dt.UTC)
    got = decode(encode(when))
    assert type(got) is timestamp
    assert got == 1709209801123
    assert got.to_datetime() == when.replace(microsecond=123000)
    # naive datetimes are taken as UTC
    assert decode(encode(when.replace(tzinfo=None))) == got
    assert decode(encode(Array(timestamp, [when]))) == Array(timestamp, [got])


def test_known_descriptor_decodes_as_its_class() -> None:
    assert type(decode(h("00 53 24 45"))) is Accepted
    assert type(decode(encode(Described(symbol("amqp:accepted:list"), [])))) is Accepted


def test_tuple_bytearray_memoryview_encode_as_list_and_binary() -> None:
    assert encode((1, "a")) == encode([1, "a"])
    assert encode(bytearray(b"ab")) == encode(b"ab")
    assert encode(memoryview(b"ab")) == encode(b"ab")


def test_memoryview_of_wide_items_encodes_its_bytes() -> None:
    mv = memoryview(struct.pack(">2I", 1, 2)).cast("I")
    assert decode(encode(mv)) == struct.pack(">2I", 1, 2)


# --- smallest encodings -----------------------------------------------------------

LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1

SMALLEST: list[tuple[Any, str]] = [
    (None, "40"),
    (True, "41"),
    (False, "42"),
    (ubyte(0), "50 00"),
    (ubyte(255), "50 ff"),
    (ushort(0), "60 0000"),
    (ushort(65535), "60 ffff"),
    (uint(0), "43"),
    (uint(1), "52 01"),
    (uint(255), "52 ff"),
    (uint(256), "70 00000100"),
    (uint(2**32 - 1), "70 ffffffff"),
    (ulong(0), "44"),
    (ulong(255), "53 ff"),
    (ulong(256), "80 0000000000000100"),
    (ulong(2**64 - 1), "80 ffffffffffffffff"),
    (byte(-128), "51 80"),
    (byte(127), "51 7f"),
    (short(-32768), "61 8000"),
    (int32(0), "54 00"),
    (int32(-128), "54 80"),
    (int32(127), "54 7f"),
    (int32(128), "71 00000080"),
    (int32(-129), "71 ffffff7f"),
    (int32(-(2**31)), "71 80000000"),
    (0, "55 00"),
    (-128, "55 80"),
    (127, "55 7f"),
    (128, "81 0000000000000080"),
    (-129, "81 ffffffffffffff7f"),
    (LONG_MAX, "81 7fffffffffffffff"),
    (LONG_MIN, "81 8000000000000000"),
    (long(-1), "55 ff"),
    (float32(1.5), "72 3fc00000"),
    (float32(-math.inf), "72 ff800000"),
    (1.5, "82 3ff8000000000000"),
    (-0.0, "82 8000000000000000"),
    (math.inf, "82 7ff0000000000000"),
    (decimal32(0x22500001), "74 22500001"),
    (decimal64(1), "84 0000000000000001"),
    (decimal128(bytes(range(16))), "94 000102030405060708090a0b0c0d0e0f"),
    (char("a"), "73 00000061"),
    (char("\U0001f600"), "73 0001f600"),
    (timestamp(-1), "83 ffffffffffffffff"),
    (uuid.UUID(int=1), "98 00000000000000000000000000000001"),
    (b"", "a0 00"),
    (b"\x01\x02", "a0 02 0102"),
    ("", "a1 00"),
    ("é", "a1 02 c3a9"),
    (symbol(""), "a3 00"),
    (symbol("ab"), "a3 02 6162"),
    ([], "45"),
    ([None], "c0 02 01 40"),
    ([True, uint(0)], "c0 03 02 41 43"),
    ({}, "c1 01 00"),
    ({None: None}, "c1 03 02 40 40"),
    (Described(ulong(5), None), "00 53 05 40"),
    (Described(ulong(0x100), None), "00 80 0000000000000100 40"),
    (Described(symbol("x"), True), "00 a3 01 78 41"),
    (Described(ulong(5), Described(ulong(6), [])), "00 53 05 00 53 06 45"),
    # arrays: the element constructor fits every element; zero-width where possible
    (arr(uint, []), "e0 02 00 52"),
    (arr(uint, [0, 0, 0]), "e0 02 03 43"),
    (arr(uint, [1, 0]), "e0 04 02 52 01 00"),
    (arr(uint, [256, 0]), "e0 0a 02 70 00000100 00000000"),
    (arr(ulong, [0]), "e0 02 01 44"),
    (arr(ulong, [255]), "e0 03 01 53 ff"),
    (arr(ulong, [256]), "e0 0a 01 80 0000000000000100"),
    (Array(bool, [True, False]), "e0 04 02 56 01 00"),
    (Array(bool, [True, True]), "e0 02 02 41"),
    (Array(bool, [False]), "e0 02 01 42"),
    (Array(bool, []), "e0 02 00 56"),
    (Array(list, [[], []]), "e0 02 02 45"),
    (Array(type(None), [None, None]), "e0 02 02 40"),
    (Array(int, [1, -1]), "e0 04 02 55 01 ff"),
    (Array(int, [1, 128]), "e0 12 02 81 0000000000000001 0000000000000080"),
    (arr(int32, [-128]), "e0 03 01 54 80"),
    (arr(int32, [-129]), "e0 06 01 71 ffffff7f"),
    (arr(ubyte, [1]), "e0 03 01 50 01"),
    (Array(str, ["a", ""]), "e0 05 02 a1 01 61 00"),
    (arr(symbol, [symbol("a")]), "e0 04 01 a3 01 61"),
    (Array(bytes, [b"a"]), "e0 04 01 a0 01 61"),
    (arr(char, ["a"]), "e0 06 01 73 00000061"),
    (Array(list, [[1], []]), "e0 08 02 c0 03 01 55 01 01 00"),
    (Array(dict, [{1: None}]), "e0 07 01 c1 04 02 55 01 40"),
    (Array(Array, [Array(int, [1])]), "e0 06 01 e0 03 01 55 01"),
    (Array(Array, [Array(int, [1]), Array(str, ["a"])]), "e0 0b 02 e0 03 01 55 01 04 01 a1 01 61"),
    (arr(int, [1], symbol("x")), "e0 07 01 00 a3 01 78 55 01"),
    (arr(uint, [0], descriptor=ulong(9)), "e0 05 01 00 53 09 43"),
]


@pytest.mark.parametrize(("value", "hex_"), SMALLEST, ids=[repr(v)[:40] for v, _ in SMALLEST])
def test_smallest_encoding(value: Any, hex_: str) -> None:
    assert encode(value).hex(" ") == h(hex_).hex(" ")
    assert_same(decode(h(hex_)), value if type(value) is not long else int(value))


@pytest.mark.parametrize(("n", "code"), [(0, 0xA0), (255, 0xA0), (256, 0xB0), (70000, 0xB0)])
def test_variable_width_boundaries(n: int, code: int) -> None:
    for value, c in ((b"x" * n, code), ("x" * n, code + 1), (symbol("x" * n), code + 3)):
        data = encode(value)
        assert data[0] == c
        assert len(data) == 1 + (1 if c & 0xF0 == 0xA0 else 4) + n
        assert_same(decode(data), value)


def test_string_boundary_counts_utf8_bytes() -> None:
    assert encode("é" * 127 + "x")[0] == 0xA1  # 255 bytes
    assert encode("é" * 128)[0] == 0xB1  # 256 bytes


def _list8_fits(body: int, count: int) -> bool:
    return body + 1 <= 255 and count <= 255


@given(big_lists)
def test_list8_or_list32(items: list[bytes]) -> None:
    data = encode(items)
    body = sum(len(encode(x)) for x in items)
    if _list8_fits(body, len(items)):
        assert data[:3] == bytes((0xC0, body + 1, len(items)))
    else:
        assert data[:9] == b"\xd0" + struct.pack(">II", body + 4, len(items))
    assert decode(data) == items


@given(big_lists)
def test_map8_or_map32(items: list[bytes]) -> None:
    m = {i: x for i, x in enumerate(items)}
    data = encode(m)
    body = sum(len(encode(k)) + len(encode(x)) for k, x in m.items())
    if _list8_fits(body, 2 * len(m)):
        assert data[:3] == bytes((0xC1, body + 1, 2 * len(m)))
    else:
        assert data[:9] == b"\xd1" + struct.pack(">II", body + 4, 2 * len(m))
    assert decode(data) == m


@pytest.mark.parametrize(("n_body", "code"), [(253, 0xC0), (254, 0xC0), (255, 0xD0), (256, 0xD0)])
def test_list_boundary_exact(n_body: int, code: int) -> None:
    # one binary element: 2 header bytes (a0 len) + payload = n_body
    v = [b"x" * (n_body - 2)]
    data = encode(v)
    assert data[0] == code
    assert decode(data) == v


def test_list_with_more_than_255_elements_is_list32() -> None:
    v = [None] * 256
    assert encode(v)[:9] == h("d0 00000104 00000100")
    assert decode(encode(v)) == v


@pytest.mark.parametrize(
    ("array", "code"),
    [
        (arr(ubyte, [ubyte(1)] * 252), 0xE0),  # size 1 + 1 + 252 = 254
        (arr(ubyte, [ubyte(1)] * 253), 0xE0),  # size 255
        (arr(ubyte, [ubyte(1)] * 254), 0xF0),  # size 256
        (Array(type(None), [None] * 255), 0xE0),
        (Array(type(None), [None] * 256), 0xF0),  # count over 255
        (Array(str, ["x" * 251]), 0xE0),  # 1 + 1 + 1 + 251 = 254
        (Array(str, ["x" * 255]), 0xF0),
        (Array(str, ["x" * 256]), 0xF0),
    ],
)
def test_array8_or_array32(array: Array, code: int) -> None:
    data = encode(array)
    assert data[0] == code
    assert_same(decode(data), array)


def test_array_of_long_strings_uses_str32_elements() -> None:
    data = encode(Array(str, ["a", "x" * 256]))
    assert data[9] == 0xB1
    assert_same(decode(data), Array(str, ["a", "x" * 256]))


# --- every encoding of the spec decodes, smallest or not ---------------------------

# (constructor code, hand-built bytes, expected value)
WIRE_CASES: list[tuple[int, str, Any]] = [
    (0x40, "40", None),
    (0x56, "56 01", True),
    (0x56, "56 00", False),
    (0x41, "41", True),
    (0x42, "42", False),
    (0x50, "50 ff", ubyte(255)),
    (0x60, "60 0102", ushort(258)),
    (0x70, "70 00000001", uint(1)),  # not smallest
    (0x70, "70 00000000", uint(0)),  # not smallest
    (0x52, "52 00", uint(0)),  # not smallest
    (0x52, "52 ff", uint(255)),
    (0x43, "43", uint(0)),
    (0x80, "80 0000000000000001", ulong(1)),  # not smallest
    (0x80, "80 0000000000000000", ulong(0)),  # not smallest
    (0x53, "53 00", ulong(0)),  # not smallest
    (0x44, "44", ulong(0)),
    (0x51, "51 ff", byte(-1)),
    (0x61, "61 ff80", short(-128)),
    (0x71, "71 00000005", int32(5)),  # not smallest
    (0x71, "71 7fffffff", int32(2**31 - 1)),
    (0x54, "54 ff", int32(-1)),
    (0x81, "81 0000000000000005", 5),  # not smallest
    (0x81, "81 8000000000000000", LONG_MIN),
    (0x55, "55 80", -128),
    (0x72, "72 3fc00000", float32(1.5)),
    (0x72, "72 7f800000", float32(math.inf)),
    (0x82, "82 3ff8000000000000", 1.5),
    (0x82, "82 fff0000000000000", -math.inf),
    (0x74, "74 22500001", decimal32(0x22500001)),
    (0x84, "84 2234000000000001", decimal64(0x2234000000000001)),
    (0x94, "94 " + "00" * 15 + "01", decimal128(bytes(15) + b"\x01")),
    (0x73, "73 0001f600", char("\U0001f600")),
    (0x73, "73 0010ffff", char("\U0010ffff")),
    (0x83, "83 0000018dacbbbaa3", timestamp(1708000000675)),
    (0x98, "98 " + "ab" * 16, uuid.UUID("ab" * 16)),
    (0xA0, "a0 00", b""),
    (0xB0, "b0 00000003 616263", b"abc"),  # not smallest
    (0xB0, "b0 00000000", b""),
    (0xA1, "a1 02 c3a9", "é"),
    (0xA1, "a1 04 f09f9880", "\U0001f600"),
    (0xB1, "b1 00000001 61", "a"),  # not smallest
    (0xA3, "a3 01 61", symbol("a")),
    (0xB3, "b3 00000001 61", symbol("a")),  # not smallest
    (0x45, "45", []),
    (0xC0, "c0 01 00", []),  # not smallest
    (0xC0, "c0 03 02 43 41", [uint(0), True]),
    (0xD0, "d0 00000004 00000000", []),  # not smallest
    (0xD0, "d0 00000007 00000002 52 01 40", [uint(1), None]),
    (0xC1, "c1 01 00", {}),
    (0xC1, "c1 05 02 a3 01 6b 45", {symbol("k"): []}),
    (0xD1, "d1 00000004 00000000", {}),  # not smallest
    (0xD1, "d1 00000009 00000002 a1 01 6b 56 01", {"k": True}),
    (0xE0, "e0 02 03 43", arr(uint, [0, 0, 0])),
    (0xE0, "e0 02 02 40", Array(type(None), [None, None])),
    (0xE0, "e0 02 02 41", Array(bool, [True, True])),
    (0xE0, "e0 02 02 42", Array(bool, [False, False])),
    (0xE0, "e0 02 02 45", Array(list, [[], []])),
    (0xE0, "e0 05 00 00 a3 00 a1", arr(str, [], symbol(""))),
    (0xE0, "e0 0a 02 70 00000001 00000002", arr(uint, [1, 2])),  # not smallest
    (0xF0, "f0 00000005 00000000 52", arr(uint, [])),  # not smallest
    (0xF0, "f0 0000000d 00000002 71 00000005 00000006", arr(int32, [5, 6])),
    (0xF0, "f0 0000000e 00000002 b1 00000001 61 00000000", Array(str, ["a", ""])),
    (0xF0, "f0 0000000e 00000002 b3 00000001 61 00000000", arr(symbol, ["a", ""])),
    (0xF0, "f0 0000000e 00000002 b0 00000001 61 00000000", Array(bytes, [b"a", b""])),
    (
        0xF0,
        "f0 00000017 00000002 d0 00000006 00000001 5501 00000004 00000000",
        Array(list, [[1], []]),
    ),
    (
        0xF0,
        "f0 00000019 00000002 d1 00000008 00000002 5501 5502 00000004 00000000",
        Array(dict, [{1: 2}, {}]),
    ),
    (
        0xF0,
        "f0 00000023 00000002 f0 0000000d 00000002 71 00000001 00000002"
        " 00000009 00000001 71 00000003",
        Array(Array, [arr(int32, [1, 2]), arr(int32, [3])]),
    ),
    (
        0xF0,
        "f0 00000013 00000002 00 a3 01 78 b1 00000001 61 00000001 62",
        arr(str, ["a", "b"], symbol("x")),
    ),
    (0x00, "00 53 05 40", Described(ulong(5), None)),
    (0x00, "00 80 0000000000000005 40", Described(ulong(5), None)),  # not smallest
    (0x00, "00 44 41", Described(ulong(0), True)),
    (0x00, "00 b3 00000001 78 40", Described(symbol("x"), None)),  # not smallest
    (0x00, "00 a3 12 616d71703a61636365707465643a6c697374 45", Accepted()),
]


def _spec_encodings() -> list[tuple[str, int]]:
    root = ET.parse(SPEC_TYPES).getroot()
    out = []
    for tp in root.iterfind(".//amqp:type", _NS):
        for enc in tp.iterfind("amqp:encoding", _NS):
            out.append((tp.get("name", ""), int(enc.get("code", ""), 16)))
    return out


SPEC_ENCODINGS = _spec_encodings()


def test_every_spec_encoding_has_a_decode_case() -> None:
    assert len(SPEC_ENCODINGS) == 39
    covered = {code for code, _, _ in WIRE_CASES}
    missing = [(n, hex(c)) for n, c in SPEC_ENCODINGS if c not in covered]
    assert not missing


@pytest.mark.parametrize(
    ("code", "hex_", "expected"), WIRE_CASES, ids=[f"{c:#04x}-{x[:24]}" for c, x, _ in WIRE_CASES]
)
def test_wire_encoding_decodes(code: int, hex_: str, expected: Any) -> None:
    data = h(hex_)
    assert data[0] == code
    got = decode(data)
    if isinstance(expected, Accepted):
        assert type(got) is Accepted
    else:
        assert_same(got, expected)
    # re-encoding gives the smallest form, which decodes to the same value
    assert_same(decode(encode(got)), got)
    assert len(encode(got)) <= len(data)


@pytest.mark.parametrize(
    ("name", "code"), SPEC_ENCODINGS, ids=[f"{n}-{c:#04x}" for n, c in SPEC_ENCODINGS]
)
def test_spec_encoding_width_matches_decoder(name: str, code: int) -> None:
    """Fixed-width encodings consume exactly their width (checked with trailing data)."""
    root = ET.parse(SPEC_TYPES).getroot()
    enc = root.find(f".//amqp:encoding[@code='{code:#04x}']", _NS)
    assert enc is not None
    if enc.get("category") != "fixed":
        return
    width = int(enc.get("width", "0"))
    body = {0x56: b"\x01", 0x73: b"\x00\x00\x00\x61"}.get(code, b"\x00" * width)
    _, end = decode_at(bytes([code]) + body + b"\xff" * 20)
    assert end == 1 + width


# --- range and type errors ---------------------------------------------------------


@pytest.mark.parametrize("n", [LONG_MAX + 1, LONG_MIN - 1, 2**64, -(2**100)])
def test_int_outside_long_is_an_encode_error(n: int) -> None:
    with pytest.raises(EncodeError, match="long"):
        encode(n)
    with pytest.raises(EncodeError):
        encode([1, n])
    with pytest.raises(EncodeError):
        encode(Array(int, [n]))


@pytest.mark.parametrize(
    ("cls", "bad"),
    [
        (ubyte, -1),
        (ubyte, 256),
        (ushort, -1),
        (ushort, 65536),
        (uint, -1),
        (uint, 2**32),
        (ulong, -1),
        (ulong, 2**64),
        (byte, -129),
        (byte, 128),
        (short, 2**15),
        (int32, 2**31),
        (int32, -(2**31) - 1),
        (long, 2**63),
        (timestamp, -(2**63) - 1),
        (decimal32, -1),
        (decimal64, 2**64),
    ],
)
def test_exact_int_types_check_their_range(cls: type, bad: int) -> None:
    with pytest.raises(ValueError, match=cls.__name__):
        cls(bad)


def test_float32_overflow_is_an_error() -> None:
    with pytest.raises(ValueError, match="float32"):
        encode(float32(1e300))
    with pytest.raises(ValueError, match="float32"):
        encode(Array(float32, [float32(1e39)]))


def test_float32_holds_the_value_it_travels_as() -> None:
    # rounded to single precision when made, so that what you hold is what is sent
    assert float32(0.1) == struct.unpack(">f", struct.pack(">f", 0.1))[0]
    assert_same(decode(encode(float32(0.1))), float32(0.1))
    assert math.isinf(float32(math.inf))


@pytest.mark.parametrize("s", ["\ud800", "a\udfffb", "\udbff"])
def test_lone_surrogate_string_is_an_encode_error(s: str) -> None:
    with pytest.raises(EncodeError, match="surrogate"):
        encode(s)
    with pytest.raises(EncodeError):
        encode(Array(str, [s]))


@pytest.mark.parametrize("s", ["é", "\u2603", "a\x80"])
def test_non_ascii_symbol_is_an_encode_error(s: str) -> None:
    with pytest.raises(EncodeError, match=r"(?i)ascii"):
        encode(symbol(s))
    with pytest.raises(EncodeError):
        encode(Array(symbol, [symbol(s)]))


@pytest.mark.parametrize("s", ["\ud800", "\udfff", "", "ab"])
def test_char_must_be_one_scalar_value(s: str) -> None:
    with pytest.raises(ValueError, match="char"):
        char(s)


@pytest.mark.parametrize(
    "value",
    [
        Array(uint, [-1]),
        Array(ubyte, [256]),
        Array(ushort, [-1]),
        Array(bytes, [5]),
        Array(bytes, ["text"]),
        Array(str, [b"bytes"]),
        Array(char, ["ab"]),
        Array(decimal128, [b"short"]),
        Array(type(None), [0]),
        Array(Array, [[1]]),
        Array(list, [1]),
        Array(object, []),
        object(),
        {1: object()},
        Described(Described(ulong(1), None), None),
        Array(int, [1], descriptor=Described(ulong(1), None)),
    ],
    ids=repr,
)
def test_unencodable_values(value: Any) -> None:
    with pytest.raises(EncodeError):
        encode(value)


def test_self_containing_list_is_an_encode_error() -> None:
    v: list[Any] = []
    v.append(v)
    with pytest.raises(EncodeError):
        encode(v)


def test_encode_error_condition() -> None:
    with pytest.raises(EncodeError) as info:
        encode(object())
    assert info.value.condition == "amqp:invalid-field"


@pytest.mark.parametrize(
    "bad", [object(), [1, 2**64], "\ud800", [b"x" * 300, symbol("é")]], ids=repr
)
def test_encode_into_leaves_the_buffer_alone_on_error(bad: Any) -> None:
    buf = bytearray(b"keep")
    with pytest.raises(EncodeError):
        encode_into(buf, bad)
    assert buf == b"keep"
