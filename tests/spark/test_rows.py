"""Messages to rows and rows to messages, and option parsing: no Spark needed."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest

from amqp10.message import LazyMessage, Message
from amqp10.spark.batches import decode_whole
from amqp10.spark.options import OptionError, SourceOptions
from amqp10.spark.rows import (
    LEGACY_COLUMNS,
    body_bytes,
    body_values,
    choose_columns,
    column_types,
    message_from_row,
    message_offset,
    message_timestamp,
    open_message,
    row_from_message,
    row_from_payload,
    text,
    text_map,
)
from amqp10.types import encode, symbol, timestamp, ulong


def as_dict(message: Message) -> dict[str, object]:
    return dict(zip(LEGACY_COLUMNS, row_from_payload(message.encode())))


def test_string_body() -> None:
    m = Message(body="héllo", id="a1", subject="greeting", content_type="text/plain")
    m.message_annotations = {
        symbol("x-opt-offset"): 7,
        symbol("x-opt-timestamp"): timestamp(1_700_000_000_123),
    }
    m.application_properties = {"n": 3, "ok": True, "f": 1.5}
    m.durable = True
    m.priority = 7
    m.creation_time = 1_700_000_000.5
    row = as_dict(m)
    assert row["offset"] == 7
    assert row["body"] == encode("héllo")
    assert row["body_string"] == "héllo"
    assert row["body_map"] is None
    assert row["properties"] == {
        "message-id": "a1",
        "subject": "greeting",
        "content-type": "text/plain",
        "creation-time": "1700000000500",
    }
    assert row["application_properties"] == {"n": "3", "ok": "true", "f": "1.5"}
    assert row["message_annotations"] == {"x-opt-offset": "7", "x-opt-timestamp": "1700000000123"}
    assert row["durable"] is True
    assert row["priority"] == 7
    assert row["creation_time"] == dt.datetime(2023, 11, 14, 22, 13, 20, 500000, tzinfo=dt.UTC)


def test_data_sections_are_joined_and_decoded_when_utf8() -> None:
    row = as_dict(Message([b"ab", "ç".encode()], body_type="data"))
    assert row["body"] == b"ab\xc3\xa7"
    assert row["body_string"] == "abç"
    assert row["offset"] is None  # a queue message has no offset
    assert row["durable"] is False and row["priority"] == 4
    assert as_dict(Message([b"\xff\x00"], body_type="data"))["body_string"] is None


def test_binary_value_map_and_other_bodies() -> None:
    assert as_dict(Message(body=b"raw"))["body"] == b"raw"
    row = as_dict(Message(body={"k": 1, "u": uuid.UUID(int=1), "b": b"\x01"}))
    assert row["body_map"] == {"k": "1", "u": "00000000-0000-0000-0000-000000000001", "b": "01"}
    assert row["body_string"] is None
    assert row["body"] == encode({"k": 1, "u": uuid.UUID(int=1), "b": b"\x01"})
    row = as_dict(Message(body=[1, 2]))
    assert row["body"] == encode([1, 2]) and row["body_string"] is None
    row = as_dict(Message(body=None))
    assert row["body"] is None and row["body_string"] is None


def test_text_of_values() -> None:
    assert text(ulong(5)) == "5"
    assert text(False) == "false"
    assert text([1, "a"]) == '[1, "a"]'
    assert text(None) is None


def test_message_from_row_round_trip() -> None:
    row = {
        "body": b"\x00\x01",
        "properties": {
            "correlation-id": "c9",
            "content-type": "application/octet-stream",
            "to": "x",
        },
        "application_properties": {"tenant": "t1", "n": 5},
        "subject": "s",
        "durable": False,
        "priority": 9,
        "creation_time": dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
    }
    m = Message.decode(message_from_row(row, "q:1:0:17").encode())
    assert m.body == [b"\x00\x01"] and m.body_type == "data"
    assert m.id == "q:1:0:17"
    assert m.correlation_id == "c9" and m.content_type == "application/octet-stream" and m.to == "x"
    assert m.subject == "s"
    assert m.application_properties == {"tenant": "t1", "n": 5}
    assert m.durable is False and m.priority == 9
    assert m.creation_time == dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC).timestamp()
    back = dict(zip(LEGACY_COLUMNS, row_from_message(m)))
    assert back["body"] == b"\x00\x01" and back["properties"]["message-id"] == "q:1:0:17"


def test_message_from_row_string_body_and_own_message_id() -> None:
    m = message_from_row({"body": "text", "properties": {"message-id": "mine"}}, "generated")
    assert m.body == "text" and m.body_type == "value"
    assert m.id == "mine"
    assert m.durable is True  # the writer's default
    m = message_from_row({"body": None, "body_string": "fallback"}, None, durable=False)
    assert m.body == "fallback" and m.id is None and m.durable is False


def test_options() -> None:
    o = SourceOptions.parse(
        {
            "URL": "amqps://broker.example:5671",
            "Address": "events",
            "user": "ann",
            "password": "p@ss:word",
            "maxMessagesPerBatch": "500",
            "startingOffset": "42",
            "verify": "false",
        }
    )
    assert o.url == "amqps://ann:p%40ss%3Aword@broker.example:5671"
    assert o.safe_url == "amqps://ann@broker.example:5671"
    assert o.max_messages_per_batch == 500 and o.starting_offset == 42
    assert o.tls and o.verify is False
    assert o.connect_kwargs()["ssl"].check_hostname is False
    plain = SourceOptions.parse({"url": "127.0.0.1:5672", "address": "q"})
    assert plain.mode is None and plain.starting_offset is None and not plain.tls
    assert "ssl" not in plain.connect_kwargs()
    assert (
        SourceOptions.parse({"address": "s", "startingOffset": "earliest"}).starting_offset
        == "first"
    )
    kafka = SourceOptions.parse(
        {
            "address": "ev",
            "startingOffsets": '{"ev": {"0": 12}}',
            "endingOffsets": '{"ev": {"0": -1}}',
            "maxOffsetsPerTrigger": "7",
            "failOnDataLoss": "false",
            "columns": " offset , body ",
            "startingTimestamp": "1700000000000",
        }
    )
    assert (kafka.starting_offset, kafka.ending_offset, kafka.max_messages_per_batch) == (
        {0: 12},
        {0: None},
        7,
    )
    assert kafka.fail_on_data_loss is False and kafka.columns == ("offset", "body")
    assert kafka.starting_timestamp == 1_700_000_000_000
    assert SourceOptions.parse(
        {"address": "s", "startingOffsets": '{"s":{"0":-2,"1":-1,"2":5}}', "minPartitions": "4"}
    ).starting_offset == {0: "first", 1: "next", 2: 5}
    assert SourceOptions.parse({"address": "s", "endingOffset": "9"}).ending_offset == 9  # old name
    assert SourceOptions.parse({"address": "s"}).fail_on_data_loss is True  # Kafka's default
    assert (
        plain.queue_state_dir()
        != SourceOptions.parse({"url": "127.0.0.1:5672", "address": "r"}).queue_state_dir()
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "needs an address"),
        ({"address": "a", "mode": "topic"}, "'mode' must be stream or queue"),
        (
            {"address": "a", "startingOffset": "middle"},
            "earliest, latest, first, last, next, an offset",
        ),
        ({"address": "a", "maxMessagesPerBatch": "0"}, "must be positive"),
        ({"address": "a", "url": "http://x"}, "unsupported URL scheme"),
        ({"address": "a", "verify": "maybe"}, "true or false"),
        ({"address": "a", "startingOffsets": "{not json"}, 'must be {"a": {"0": N, ...}}'),
        ({"address": "a", "startingOffsets": '{"a":{"x":5}}'}, 'partitions are numbers from "0"'),
        ({"address": "a", "startingOffsets": '{"a":{"1":-3}}'}, "must not be negative"),
        ({"address": "a", "startingOffsets": '{"a":{}}'}, "names no partition"),
        ({"address": "a", "minPartitions": "0"}, "'minPartitions' must be positive"),
        ({"address": "a", "endingOffsets": '{"a":{"0":-2}}'}, "must not be negative"),
        ({"address": "a", "startingTimestamp": "-1"}, "must be at least 0"),
        ({"address": "a", "mapValues": "json"}, "string or variant"),
        ({"address": "a", "columns": "body,body"}, "names a column twice"),
        ({"address": "a", "failOnDataLoss": "perhaps"}, "true or false"),
    ],
)
def test_bad_options(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        SourceOptions.parse(options)


def test_column_choice_and_message_forms() -> None:
    offered = column_types()
    assert list(choose_columns(offered, ["offset", "body"])) == ["offset", "body"]
    with pytest.raises(ValueError, match="no column 'key' to read"):
        choose_columns(offered, ["key"])
    given = {"offset": "bigint", "properties": "map<string,string>"}
    assert choose_columns(offered, None, given)["properties"] == "MAP<STRING, STRING>"
    with pytest.raises(ValueError, match="column 'offset' must be bigint, not string"):
        choose_columns(offered, None, {"offset": "string"})
    assert "properties MAP<STRING, STRING>" in ", ".join(
        f"{n} {t}" for n, t in column_types(legacy=True).items()
    )
    assert column_types(variant_maps=True)["message_annotations"] == "MAP<STRING, VARIANT>"

    encoded = Message(body="x" * 2000, subject="s").encode()
    assert isinstance(open_message(encoded), LazyMessage)  # sections found, none decoded
    assert isinstance(open_message(encoded, whole=True), Message)
    assert not decode_whole(["offset", "timestamp", "body", "body_string", "durable"])
    assert decode_whole(["offset", "properties"])


@pytest.mark.parametrize(
    "message",
    [
        Message("text"),
        Message(b"\xff\x00 raw"),
        Message("x" * 300),  # a str32
        Message([b"one ", b"two"], body_type="data"),
        Message([b"\xff"], body_type="data"),
        Message({"k": 1, "t": True}),
        Message(None),
        Message(12345),
        Message([[1, "a"]], body_type="sequence"),
        Message([1.5, uuid.UUID(int=7)]),
    ],
    ids=repr,
)
def test_body_columns_of_the_scanner_equal_the_decoded_ones(message: Message) -> None:
    message.message_annotations = {"x-opt-offset": 42, "x-opt-timestamp": timestamp(1700)}
    data = message.encode()
    lazy, whole = open_message(data), open_message(data, whole=True)
    assert body_values(lazy) == body_values(whole)
    assert body_bytes(lazy) == body_bytes(whole) == body_values(whole)[0]
    assert message_offset(lazy) == message_offset(whole) == 42
    assert message_timestamp(lazy) == message_timestamp(whole) == 1700


def test_header_columns_of_arrow_batches() -> None:
    """``durable`` and ``priority`` read the header's defaults when it is absent, decoded or lazy."""
    import pyarrow as pa

    from amqp10.spark.batches import Chunk, build_batch

    with_header = Message("a", durable=True, priority=9).encode()
    without = Message("b").encode()
    messages = [
        Message.decode(with_header),
        LazyMessage(with_header),
        Message.decode(without),
        LazyMessage(without),
    ]
    schema = pa.schema([("durable", pa.bool_()), ("priority", pa.int32())])
    batch = build_batch(schema, Chunk("q", None, [None] * 4, messages))
    assert batch.column("durable").to_pylist() == [True, True, False, False]
    assert batch.column("priority").to_pylist() == [9, 9, 4, 4]


def test_properties_struct_column_equals_the_per_message_structs() -> None:
    """The column is built a field at a time; each row is the message's struct as a dict."""
    import pyarrow as pa

    from amqp10.spark.batches import Chunk, build_batch
    from amqp10.spark.rows import PROPERTY_FIELDS, properties_values

    from .test_decode import PROPERTIES_STRUCT

    built = [
        Message("a", id=uuid.UUID(int=5), subject="s", user_id=b"u", group_sequence=7),
        Message("b"),  # no properties section: a null struct
        Message("c", creation_time=dt.datetime(2026, 1, 2, tzinfo=dt.UTC), to="q", reply_to="r"),
    ]
    messages = [Message.decode(m.encode()) for m in built]
    struct = PROPERTIES_STRUCT
    schema = pa.schema([("properties", struct)])
    column = build_batch(schema, Chunk("q", None, [None] * 3, messages)).column("properties")
    def struct_of(m: Message) -> dict[str, object] | None:  # the per-message reference
        values = properties_values(m.properties)
        return None if values is None else dict(zip(PROPERTY_FIELDS, values, strict=True))

    expected = pa.array([struct_of(m) for m in messages], type=struct)
    assert column.equals(expected)
    assert column.to_pylist()[1] is None
    assert column.to_pylist()[0]["group_sequence"] == 7


def test_text_map_columns_equal_the_per_message_maps() -> None:
    import pyarrow as pa

    from amqp10.spark.batches import Chunk, build_batch

    maps = [{"a": 1, "b": None}, None, {}, {ulong(1): "x", "1": "y"}, None]
    messages = [Message("m", application_properties=m) for m in maps]
    messages[3] = Message("m", message_annotations={symbol("k"): 2})
    mtype = pa.map_(pa.string(), pa.string())
    schema = pa.schema([("application_properties", mtype), ("message_annotations", mtype)])
    batch = build_batch(schema, Chunk("q", None, [None] * 5, messages))
    for name in schema.names:
        expected = [text_map(getattr(m, name)) for m in messages]
        got = batch.column(name).to_pylist()
        assert [None if g is None else dict(g) for g in got] == expected, name


def test_text_of_maps_with_keys_json_cannot_sort_or_hold() -> None:
    assert text({"": None, 0: 1}) == '{"": null, "0": 1}'  # str and int keys: not sortable
    assert text({b"\x01": [uuid.UUID(int=1)], None: 2}) == (
        '{"01": ["00000000-0000-0000-0000-000000000001"], "null": 2}'
    )
    assert text({"b": 1, "a": ulong(2)}) == '{"a": 2, "b": 1}'  # as before: sorted keys
