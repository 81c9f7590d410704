"""The 0-10 type system: every type round-trips; maps, lists and arrays with type codes;
packed structs; and what does not decode says so."""

from __future__ import annotations

import struct
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from amqp10.amqp010 import Compound
from amqp10.amqp010.codec import (
    DecodeError,
    Reader,
    decode_compound,
    decode_struct32,
    decode_value,
    encode_compound,
    encode_struct32,
    encode_value,
)
from amqp10.amqp010.spec import STRUCTS

from .peer import struct as mk


def roundtrip(tp: str, value: Any) -> Any:
    buf = bytearray()
    encode_value(buf, tp, value)
    r = Reader(bytes(buf))
    out = decode_value(r, tp)
    assert r.left == 0
    return out


INTS = {
    "int8": st.integers(-128, 127),
    "uint8": st.integers(0, 255),
    "int16": st.integers(-(1 << 15), (1 << 15) - 1),
    "uint16": st.integers(0, (1 << 16) - 1),
    "int32": st.integers(-(1 << 31), (1 << 31) - 1),
    "uint32": st.integers(0, (1 << 32) - 1),
    "sequence-no": st.integers(0, (1 << 32) - 1),
    "int64": st.integers(-(1 << 63), (1 << 63) - 1),
    "uint64": st.integers(0, (1 << 64) - 1),
    "datetime": st.integers(0, (1 << 64) - 1),
}


@pytest.mark.parametrize("tp", sorted(INTS))
@given(data=st.data())
def test_integers(tp: str, data: st.DataObject) -> None:
    v = data.draw(INTS[tp])
    assert roundtrip(tp, v) == v


@given(st.text(max_size=200))
def test_strings(s: str) -> None:
    for tp in ("str8", "str16", "str16-utf16"):
        if len(s.encode("utf-16-be" if "utf16" in tp else "utf-8")) < (
            256 if tp == "str8" else 65536
        ):
            assert roundtrip(tp, s) == s


@given(st.binary(max_size=300))
def test_vbins(b: bytes) -> None:
    assert roundtrip("vbin32", b) == b
    assert roundtrip("vbin16", b) == b
    if len(b) < 256:
        assert roundtrip("vbin8", b) == b


def test_fixed_opaque_types_and_others() -> None:
    assert roundtrip("bin128", bytes(range(16))) == bytes(range(16))
    assert roundtrip("dec32", b"\x01\x00\x00\x00\x05") == b"\x01\x00\x00\x00\x05"
    u = uuid.uuid4()
    assert roundtrip("uuid", u) == u
    assert roundtrip("boolean", True) is True and roundtrip("boolean", False) is False
    assert roundtrip("char-utf32", "€") == "€"
    assert roundtrip("double", 2.5) == 2.5
    assert roundtrip("sequence-set", ((1, 3), (7, 7))) == ((1, 3), (7, 7))
    assert roundtrip("byte-ranges", ((0, 10),)) == ((0, 10),)
    with pytest.raises(ValueError, match="fit"):
        encode_value(bytearray(), "vbin8", b"x" * 256)


scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(1 << 63), (1 << 64) - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.binary(max_size=20)
    | st.uuids()
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)


@given(st.dictionaries(st.text(max_size=20), values, max_size=6))
def test_maps_hold_any_value_with_its_type_code(m: dict[str, Any]) -> None:
    assert roundtrip("map", m) == m


@given(st.lists(values, max_size=6))
def test_lists(items: list[Any]) -> None:
    assert roundtrip("list", items) == items


@given(st.lists(st.text(max_size=10), max_size=6))
def test_arrays_of_one_type(items: list[str]) -> None:
    assert roundtrip("array", items) == items


def test_a_map_is_its_size_count_then_typed_entries() -> None:
    buf = bytearray()
    encode_value(buf, "map", {"k": 1})
    assert bytes(buf) == struct.pack(">II", 15, 1) + b"\x01k" + b"\x31" + struct.pack(">q", 1)


def test_an_unknown_type_code_is_a_decode_error() -> None:
    raw = struct.pack(">II", 7, 1) + b"\x01k" + b"\x0f"  # 0x0f: no such type
    with pytest.raises(DecodeError, match="unknown type code 0x0f"):
        decode_value(Reader(raw), "map")


@pytest.mark.parametrize("cut", [1, 3, 5, 9])
def test_truncated_input_is_a_decode_error(cut: int) -> None:
    buf = bytearray()
    encode_value(buf, "map", {"key": "value", "n": 7})
    with pytest.raises(DecodeError):
        decode_value(Reader(bytes(buf[:cut])), "map")


def test_an_array_claiming_more_items_than_octets_is_refused() -> None:
    raw = struct.pack(">I", 5) + b"\x85" + struct.pack(">I", 1 << 30)
    with pytest.raises(DecodeError, match="items"):
        decode_value(Reader(raw), "array")


def test_packed_struct_flags_and_size() -> None:
    dp = mk("delivery-properties", redelivered=True, priority=9, routing_key="rk")
    buf = bytearray()
    encode_struct32(buf, dp)
    # size, code 0x0401, flags: redelivered (bit 2), priority (3), routing-key (9); then the fields
    assert bytes(buf[4:6]) == b"\x04\x01"
    assert bytes(buf[6:8]) == bytes(((1 << 2) | (1 << 3), 1 << 1))
    assert bytes(buf[8:]) == b"\x09\x02rk"
    assert decode_struct32(Reader(bytes(buf))) == dp


@given(
    st.fixed_dictionaries(
        {},
        optional={
            "content_length": st.integers(0, (1 << 64) - 1),
            "message_id": st.uuids(),
            "correlation_id": st.binary(max_size=30),
            "content_type": st.text(max_size=20),
            "user_id": st.binary(max_size=10),
            "application_headers": st.dictionaries(st.text(max_size=8), scalars, max_size=4),
        },
    )
)
def test_message_properties_round_trip(values: dict[str, Any]) -> None:
    mp = Compound(STRUCTS["message-properties"], values)
    buf = bytearray()
    encode_compound(buf, STRUCTS["message-properties"], mp.values)
    assert decode_compound(Reader(bytes(buf)), STRUCTS["message-properties"]) == mp


def test_a_struct_field_inside_a_struct() -> None:
    mp = mk("message-properties", reply_to=mk("reply-to", exchange="x", routing_key="k"))
    buf = bytearray()
    encode_struct32(buf, mp)
    back = decode_struct32(Reader(bytes(buf)))
    assert back["reply_to"]["exchange"] == "x" and back["reply_to"]["routing_key"] == "k"


def test_flags_for_fields_a_struct_lacks_are_refused() -> None:
    raw = struct.pack(">IH", 4, 0x0402) + b"\xff\xff"  # fragment-properties has 3 fields
    with pytest.raises(DecodeError, match="property flags"):
        decode_struct32(Reader(raw))


def test_an_unknown_struct_code_is_refused() -> None:
    with pytest.raises(DecodeError, match="unknown struct code"):
        decode_struct32(Reader(struct.pack(">IH", 2, 0x7777)))
