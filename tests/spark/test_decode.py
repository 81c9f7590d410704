"""The one-walk row decoder (amqp10.spark.decode): its rows and batches equal the decoded messages'."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amqp10.message import Message
from amqp10.spark.batches import Chunk, build_batch, reading
from amqp10.spark.decode import _Other, _walk, message_row, row_of_message
from amqp10.spark.rows import PROPERTY_FIELDS
from amqp10.types import DecodeError, symbol, timestamp, ubyte, uint, ulong

from ..test_message import (
    annotation_maps,
    application_properties,
    bodies,
    headers,
    optional,
    properties,
    values,
)

PROPERTIES_STRUCT = pa.struct(
    [
        (name, pa.timestamp("us", tz="UTC") if name.endswith("time") else t)
        for name, t in zip(
            PROPERTY_FIELDS,
            [pa.string(), pa.binary(), *[pa.string()] * 6, pa.timestamp("us"),
             pa.timestamp("us"), pa.string(), pa.int64(), pa.string()],
            strict=True,
        )
    ]
)  # fmt: skip
_TEXT_MAP = pa.map_(pa.string(), pa.string())
SCHEMA = pa.schema(
    [
        ("address", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("body", pa.binary()),
        ("body_string", pa.string()),
        ("body_map", _TEXT_MAP),
        ("properties", PROPERTIES_STRUCT),
        ("application_properties", _TEXT_MAP),
        ("message_annotations", _TEXT_MAP),
        ("durable", pa.bool_()),
        ("priority", pa.int32()),
        ("creation_time", pa.timestamp("us", tz="UTC")),
    ]
)
"""The default schema as pyspark's to_arrow_schema gives it (tests/spark/test_read.py reads it through Spark)."""


def plain(v: Any) -> Any:
    """A type-exact form: a symbol's text equals the str's, ``1`` does not equal ``True``."""
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, tuple(plain(x) for x in v))
    if isinstance(v, dict):
        return ("dict", tuple((plain(k), plain(x)) for k, x in v.items()))
    if isinstance(v, str):
        return ("str", str(v))
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, int):
        return ("int", int(v))
    if isinstance(v, (bytes, bytearray, memoryview)):
        return ("bytes", bytes(v))
    return (type(v).__name__, v)


@st.composite
def stream_messages(draw: st.DrawFn) -> Message:
    """Messages as a stream delivers them (x-opt-offset and x-opt-timestamp, mostly), any sections."""
    body_type, body = draw(
        st.one_of(
            bodies,
            st.tuples(st.just("value"), st.text(max_size=300)),
            st.tuples(st.just("data"), st.lists(st.binary(max_size=300), min_size=1, max_size=1)),
        )
    )
    annotations = draw(optional(annotation_maps))
    if draw(st.booleans()):
        annotations = {
            symbol("x-opt-offset"): draw(st.one_of(st.integers(0, 2**40), values)),
            symbol("x-opt-timestamp"): draw(
                st.one_of(st.integers(0, 2**42).map(timestamp), values)
            ),
            **(annotations or {}),
        }
    return Message(
        body,
        body_type=body_type,
        header=draw(optional(headers)),
        delivery_annotations=draw(st.one_of(st.none(), st.none(), annotation_maps)),
        message_annotations=annotations,
        properties=draw(optional(properties)),
        application_properties=draw(optional(application_properties)),
        footer=draw(st.one_of(st.none(), st.none(), annotation_maps)),
    )


@given(stream_messages())
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_the_walk_gives_the_decoded_message_row(m: Message) -> None:
    data = m.encode()
    assert plain(message_row(data)) == plain(row_of_message(Message.decode(data)))


@given(st.lists(stream_messages(), min_size=1, max_size=6))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_batch_of_rows_equals_the_batch_of_decoded_messages(ms: list[Message]) -> None:
    """Every column of the default schema, built from rows, equals the one built from messages."""
    payloads = [m.encode() for m in ms]
    offsets = list(range(len(ms)))
    rows, open_item, _offset_of = reading(SCHEMA)
    assert rows and open_item is message_row
    decoded = [Message.decode(p) for p in payloads]
    try:
        expected = build_batch(SCHEMA, Chunk("s", 1, offsets, decoded))
    except (OverflowError, pa.ArrowException) as exc:  # a timestamp past Arrow's range
        with pytest.raises(type(exc)):
            build_batch(
                SCHEMA, Chunk("s", 1, offsets, [message_row(p) for p in payloads]), rows=True
            )
        return
    got = build_batch(SCHEMA, Chunk("s", 1, offsets, [message_row(p) for p in payloads]), rows=True)
    assert got.equals(expected), (got.to_pylist(), expected.to_pylist())


@given(stream_messages(), st.data())
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_damaged_message_fails_as_decoding_it_whole_does(m: Message, data: st.DataObject) -> None:
    """A byte changed or the bytes cut short: the same row, or the same DecodeError."""
    encoded = bytearray(m.encode())
    if data.draw(st.booleans()) and encoded:
        at = data.draw(st.integers(0, len(encoded) - 1))
        encoded[at] = data.draw(st.integers(0, 255))
    else:
        encoded = encoded[: data.draw(st.integers(0, len(encoded)))]
    damaged = bytes(encoded)
    try:
        expected = plain(row_of_message(Message.decode(damaged)))
    except DecodeError as exc:
        with pytest.raises(DecodeError) as info:
            message_row(damaged)
        assert str(info.value) == str(exc)
        return
    assert plain(message_row(damaged)) == expected


@pytest.mark.parametrize(
    "message",
    [
        Message("event 1 " + "x" * 70, id="e-1", subject="bench", durable=True),
        Message(b"\xff binary", id=ulong(7), correlation_id=uuid.UUID(int=3), user_id=b"u"),
        Message([b"one data section"], body_type="data", content_type="application/json"),
        Message("x" * 300, to="q", reply_to="r", group_id="g", group_sequence=uint(9)),
        Message(
            "t",
            creation_time=dt.datetime(2026, 1, 2, tzinfo=dt.UTC),
            application_properties={"n": 3, "s": "v", "f": 1.5, "b": True, "u": ulong(2**63)},
            priority=ubyte(9),
        ),
        Message("no sections but the body"),
    ],
    ids=repr,
)
def test_common_messages_take_the_walk(message: Message) -> None:
    """What common senders and the broker send is read by the walk, not decoded whole."""
    message.message_annotations = {
        symbol("x-opt-offset"): 12,
        symbol("x-opt-timestamp"): timestamp(1_764_000_000_000),
        symbol("x-opt-partition-key"): "k",
    }
    data = message.encode()
    row = _walk(data)
    assert plain(row) == plain(row_of_message(Message.decode(data)))
    assert row[0] == 12 and row[1] == 1_764_000_000_000_000


def test_rarer_encodings_are_decoded_whole() -> None:
    for m in (
        Message([[1, 2]], body_type="sequence"),
        Message([b"a", b"b"], body_type="data"),
        Message("f", footer={symbol("k"): 1}),
        Message("k", application_properties=None, message_annotations={ulong(5): "x"}),
    ):
        data = m.encode()
        with pytest.raises(_Other):
            _walk(data)
        assert plain(message_row(data)) == plain(row_of_message(Message.decode(data)))

