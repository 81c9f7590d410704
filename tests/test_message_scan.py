"""The section scanner (amqp10.message.scan): what it finds equals what Message.decode decodes."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amqp10.message import LazyMessage, Message
from amqp10.message.scan import (
    BODY,
    HEADER,
    MISSING,
    PROPERTIES,
    data_bytes,
    map_lookup,
    scan,
)
from amqp10.types import (
    DecodeError,
    Described,
    MessageAnnotations,
    Properties,
    decode,
    decode_at,
    encode,
    symbol,
    ulong,
)

from .test_message import canon, messages, values

_NAMES = ("header", "delivery_annotations", "message_annotations", "properties")
_MAPS = ("delivery_annotations", "message_annotations", "application_properties", "footer")


@given(messages())
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_the_scanned_sections_equal_the_decoded_ones(m: Message) -> None:
    data = m.encode()
    whole = Message.decode(data)
    spans, body_type = scan(data)
    assert body_type == whole.body_type
    # each span holds exactly its section: decoding there gives the decoded message's
    for index, attr in enumerate((*_NAMES, "application_properties", "body", "footer")):
        span = spans[index]
        expected = getattr(whole, attr)
        if attr == "body":
            if span is None:
                assert expected is None
                continue
            start, _value, end = span
            assert canon(Message.decode(data[start:end]).body) == canon(expected)
            continue
        if expected is None:
            assert span is None, attr
            continue
        assert span is not None, attr
        start, value_start, end = span
        section, stop = decode_at(data, start)
        assert stop == end
        got = section if index in (HEADER, PROPERTIES) else decode_at(data, value_start)[0]
        assert canon(got) == canon(expected), attr
    # the sections tile the message, in order
    present = [s for s in spans if s is not None]
    assert [s[0] for s in present][0:1] == ([0] if present else [])
    assert all(a[2] == b[0] for a, b in itertools.pairwise(present))
    assert (present[-1][2] if present else 0) == len(data)
    if body_type == "data":
        assert spans[BODY] is not None
        assert data_bytes(data, spans[BODY]) == b"".join(whole.body)


@given(messages())
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_one_map_entry_equals_the_decoded_map(m: Message) -> None:
    data = m.encode()
    whole = Message.decode(data)
    spans, _ = scan(data)
    for index, attr in ((1, "delivery_annotations"), (2, "message_annotations")):
        decoded = getattr(whole, attr)
        span = spans[index]
        if decoded is None:
            continue
        assert span is not None
        for key, value in decoded.items():
            if isinstance(key, str):
                assert canon(map_lookup(data, span[1], key)) == canon(value)
        assert map_lookup(data, span[1], "no such key \u00e9") is MISSING
    lazy = LazyMessage(data)
    for key in whole.message_annotations or {}:
        if isinstance(key, str):
            assert canon(lazy.annotation(key)) == canon(whole.message_annotations[key])
    assert lazy.annotation("absent") is None


@given(st.dictionaries(st.text(max_size=300), values, max_size=4), st.text(max_size=300))
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_map_lookup_of_string_keys_small_and_wide(d: dict[str, Any], other: str) -> None:
    # string (str8 and str32) keys, and map8 or map32 as the size asks
    data = encode(d)
    for key, value in d.items():
        assert canon(map_lookup(data, 0, key)) == canon(value)
    if other not in d:
        assert map_lookup(data, 0, other) is MISSING


def test_map_lookup_finds_symbol_keys_and_skips_others() -> None:
    ma = MessageAnnotations({ulong(7): [1, 2], symbol("x-opt-offset"): 99, symbol("k" * 300): "w"})
    data = encode(ma)
    spans, _ = scan(data + encode(Described(ulong(0x77), "body")))
    assert spans[2] is not None
    pos = spans[2][1]
    assert map_lookup(data, pos, "x-opt-offset") == 99
    assert map_lookup(data, pos, "k" * 300) == "w"
    assert map_lookup(data, pos, "x-opt-timestamp") is MISSING
    with pytest.raises(DecodeError, match="expected a map"):
        map_lookup(encode([1]), 0, "k")
    with pytest.raises(DecodeError, match=r"truncated|malformed"):
        map_lookup(encode({"a": "b", "c": "d"})[:-3], 0, "c")


def test_lazy_body_forms_without_decoding() -> None:
    data = Message([b"ab", b"", b"cd"], body_type="data").encode()
    assert LazyMessage(data).data() == b"abcd"
    assert LazyMessage(data).value_encoding() is None
    value = LazyMessage(Message({"k": 1}).encode())
    encoded = value.value_encoding()
    assert encoded is not None and decode(encoded) == {"k": 1}
    assert value.data() is None
    assert LazyMessage(Message(properties=Properties()).encode()).data() is None


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (encode(Described(ulong(0x77), "v"))[:-1], "truncated"),
        (encode(Described(ulong(0x77), "v")) + b"\x00", "truncated"),
        (encode(5), "described message section"),
        (encode(Described(ulong(0x75), "text")), "binary"),
        (encode(Described(ulong(0x77), 1)) * 2, "more than one amqp-value"),
    ],
)
def test_bad_framing_is_a_decode_error(data: bytes, match: str) -> None:
    with pytest.raises(DecodeError, match=match):
        scan(data)
