"""Messages to Spark rows and back, without pyspark: what the data source reads and writes.

Two read schemas. :data:`SCHEMA` (the default) is typed, in the shape of Spark's
Kafka source::

    address string              the node read
    partition int               the stream partition (0 unless partitioned); null for a queue
    offset long                 x-opt-offset of a stream message; null for queues
    timestamp timestamp         x-opt-timestamp: when the broker stored the message
    body binary                 data sections (joined) and binary values as they are;
                                any other body as its AMQP encoding
    body_string string          a string body, or a binary one that is valid UTF-8
    body_map map<string,string> a map body (keys and values as strings)
    properties struct<...>      the properties section, one typed field per spec field
                                (message_id, user_id, to, subject, ..., reply_to_group_id)
    application_properties      map<string,string> (or map<string,variant>: ``mapValues``)
    message_annotations         map<string,string> (or map<string,variant>)
    durable boolean, priority int, creation_time timestamp

:data:`LEGACY_SCHEMA` is the first version's (``legacySchema``): no address,
partition or timestamp, and ``properties`` a ``map<string,string>`` keyed by
spec name (``message-id``, ...).

Values go into ``map<string,string>`` columns as text: numbers and timestamps in
decimal (timestamps in milliseconds since the epoch), UUIDs canonical, booleans
``true``/``false``, binary as lowercase hex, lists and maps as JSON. The same
text form is used for the ``properties`` fields that may hold any of several
AMQP types (message_id, correlation_id, to, reply_to).
"""

from __future__ import annotations

import datetime as _dt
import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias, TypeVar

from ..message import LazyMessage, Message
from ..types import Properties, decode, encode, symbol, timestamp

__all__ = [
    "COLUMNS",
    "COLUMN_TYPES",
    "LEGACY_COLUMNS",
    "LEGACY_SCHEMA",
    "OFFSET_ANNOTATION",
    "PROPERTY_FIELDS",
    "SCHEMA",
    "TIMESTAMP_ANNOTATION",
    "WRITE_COLUMNS",
    "AnyMessage",
    "ReadRow",
    "TextMap",
    "body_bytes",
    "body_values",
    "choose_columns",
    "column_types",
    "message_from_row",
    "message_offset",
    "message_timestamp",
    "open_message",
    "properties_map",
    "properties_values",
    "row_from_message",
    "row_from_payload",
    "text",
    "text_map",
    "text_pairs",
]

PROPERTY_FIELDS = tuple(f.attr for f in Properties.FIELDS)
"""The fields of the ``properties`` struct column, in the spec's order (Python spellings)."""

_PROPERTY_TYPES = {
    "message_id": "STRING",
    "user_id": "BINARY",
    "to": "STRING",
    "subject": "STRING",
    "reply_to": "STRING",
    "correlation_id": "STRING",
    "content_type": "STRING",
    "content_encoding": "STRING",
    "absolute_expiry_time": "TIMESTAMP",
    "creation_time": "TIMESTAMP",
    "group_id": "STRING",
    "group_sequence": "BIGINT",
    "reply_to_group_id": "STRING",
}
assert tuple(_PROPERTY_TYPES) == PROPERTY_FIELDS

_PROPERTIES_STRUCT = (
    "STRUCT<" + ", ".join(f"`{name}`: {t}" for name, t in _PROPERTY_TYPES.items()) + ">"
)
_TEXT_MAP = "MAP<STRING, STRING>"
_VARIANT_MAP = "MAP<STRING, VARIANT>"

COLUMN_TYPES: dict[str, str] = {
    "address": "STRING",
    "partition": "INT",
    "offset": "BIGINT",
    "timestamp": "TIMESTAMP",
    "body": "BINARY",
    "body_string": "STRING",
    "body_map": _TEXT_MAP,
    "properties": _PROPERTIES_STRUCT,
    "application_properties": _TEXT_MAP,
    "message_annotations": _TEXT_MAP,
    "durable": "BOOLEAN",
    "priority": "INT",
    "creation_time": "TIMESTAMP",
}
"""Every column of the default schema and its Spark type (DDL)."""

COLUMNS = tuple(COLUMN_TYPES)
"""The columns of :data:`SCHEMA`, in order."""

SCHEMA = ", ".join(f"{name} {t}" for name, t in COLUMN_TYPES.items())
"""The default read schema as Spark DDL: typed, Kafka-like."""

LEGACY_COLUMNS = (
    "offset",
    "body",
    "body_string",
    "body_map",
    "properties",
    "application_properties",
    "message_annotations",
    "durable",
    "priority",
    "creation_time",
)
"""The columns of :data:`LEGACY_SCHEMA`, in order."""

_LEGACY_TYPES = {**COLUMN_TYPES, "properties": _TEXT_MAP}

LEGACY_SCHEMA = ", ".join(f"{name} {_LEGACY_TYPES[name]}" for name in LEGACY_COLUMNS)
"""The first version's read schema (option ``legacySchema``): ``properties`` as text by spec name."""

_MAP_COLUMNS = ("application_properties", "message_annotations")


def _simple(ddl: str) -> str:
    """A DDL type as pyspark's ``DataType.simpleString()`` spells it."""
    return ddl.lower().replace(" ", "").replace("`", "")


def column_types(*, legacy: bool = False, variant_maps: bool = False) -> dict[str, str]:
    """The columns a read offers and their DDL types, by the schema options."""
    if legacy:
        return {name: _LEGACY_TYPES[name] for name in LEGACY_COLUMNS}
    types = dict(COLUMN_TYPES)
    if variant_maps:
        for name in _MAP_COLUMNS:
            types[name] = _VARIANT_MAP
    return types


def choose_columns(
    offered: Mapping[str, str],
    names: Sequence[str] | None,
    given: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The columns to read, with their DDL types: ``names`` (all when None) of ``offered``.

    ``given`` is a schema the user gave (name -> ``simpleString()``): its
    names choose the columns, and ``properties`` and the two annotation maps
    may take either of their forms (struct or text map; text or variant values).
    Raises :class:`ValueError` naming what is wrong.
    """
    if given is not None:
        alternatives = {
            "properties": (_PROPERTIES_STRUCT, _TEXT_MAP),
            **{name: (_TEXT_MAP, _VARIANT_MAP) for name in _MAP_COLUMNS},
        }
        out: dict[str, str] = {}
        for name, simple in given.items():
            forms = alternatives.get(name) or (
                (COLUMN_TYPES[name],) if name in COLUMN_TYPES else ()
            )
            if not forms:
                raise ValueError(f"no column {name!r}; the columns are {', '.join(COLUMNS)}")
            match = [t for t in forms if _simple(t) == simple]
            if not match:
                raise ValueError(
                    f"column {name!r} must be {' or '.join(_simple(t) for t in forms)}, not {simple}"
                )
            out[name] = match[0]
        return out
    if names is None:
        return dict(offered)
    unknown = [n for n in names if n not in offered]
    if unknown:
        raise ValueError(f"no column {unknown[0]!r} to read; the columns are {', '.join(offered)}")
    return {n: offered[n] for n in names}


TextMap: TypeAlias = dict[str, str | None]
"""A ``map<string,string>`` column's value."""

AnyMessage: TypeAlias = Message | LazyMessage
"""A decoded message, or one kept as bytes whose sections decode when first read."""

ReadRow: TypeAlias = tuple[
    int | None,  # offset
    bytes | None,  # body
    str | None,  # body_string
    TextMap | None,  # body_map
    TextMap | None,  # properties
    TextMap | None,  # application_properties
    TextMap | None,  # message_annotations
    bool,  # durable
    int,  # priority
    _dt.datetime | None,  # creation_time
]
"""A row of :data:`LEGACY_SCHEMA`, in :data:`LEGACY_COLUMNS` order."""

_K = TypeVar("_K")

OFFSET_ANNOTATION = symbol("x-opt-offset")
TIMESTAMP_ANNOTATION = symbol("x-opt-timestamp")
_PROPERTY_NAMES = tuple((f.attr, f.name) for f in Properties.FIELDS)
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_TEXT_FIELDS = frozenset({"message_id", "correlation_id", "to", "reply_to"})
_TIME_FIELDS = frozenset({"absolute_expiry_time", "creation_time"})


def text(value: object) -> str | None:
    """A value as it appears in a ``map<string,string>`` column."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(int(value))  # timestamp, ulong, ... are int subclasses: plain decimal
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, _dt.datetime):
        return value.isoformat()
    try:
        return json.dumps(value, default=_json_default, sort_keys=True)
    except TypeError:  # map keys JSON cannot hold or sort (bytes, a uuid; int and str mixed)
        return json.dumps(_text_keys(value), default=_json_default, sort_keys=True)


def _text_keys(value: object) -> object:
    """``value`` with every map key in it as its :func:`text` (``"null"`` for None), for JSON."""
    if isinstance(value, dict):
        return {("null" if (t := text(k)) is None else t): _text_keys(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_text_keys(v) for v in value]
    return value


def _json_default(value: object) -> str:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    return str(value)


def text_map(m: Mapping[_K, object] | None) -> TextMap | None:
    """A map section (or map body) as a ``map<string,string>`` value."""
    if m is None:
        return None
    return {str(k): text(v) for k, v in m.items()}


def text_pairs(m: Mapping[_K, object] | None) -> tuple[list[str], list[str | None]] | None:
    """:func:`text_map` of a map as its keys and its values (two lists), or None."""
    t = text_map(m)
    return None if t is None else (list(t), list(t.values()))


def open_message(payload: bytes, *, whole: bool = False) -> AnyMessage:
    """A received message, ready for its columns to be read.

    By default a :class:`LazyMessage`: its sections found, none decoded, so each
    column decodes only what it needs (:mod:`amqp10.message.scan`): the offset and
    timestamp one annotation each, ``body`` no more than a slice of the bytes. With
    ``whole`` (columns that need most sections anyway) a :class:`Message` decoded in
    one pass, which then costs less than decoding the sections one by one.
    """
    return Message.decode(payload) if whole else LazyMessage(payload)


def message_offset(message: AnyMessage) -> int | None:
    """The stream offset the broker annotated the message with, if any."""
    if type(message) is LazyMessage:
        off = message.annotation(OFFSET_ANNOTATION)
    else:
        ma = message.message_annotations
        off = ma.get(OFFSET_ANNOTATION) if ma else None
    return int(off) if isinstance(off, int) else None


def message_timestamp(message: AnyMessage) -> int | None:
    """When the broker stored the message (``x-opt-timestamp``, ms since the epoch), if it says."""
    if type(message) is LazyMessage:
        ts = message.annotation(TIMESTAMP_ANNOTATION)
    else:
        ma = message.message_annotations
        ts = ma.get(TIMESTAMP_ANNOTATION) if ma else None
    return int(ts) if isinstance(ts, int) else None


def body_bytes(message: AnyMessage) -> bytes | None:
    """The ``body`` column of a message alone: :func:`body_values` ``[0]``, decoding no
    more than it needs (nothing, for data and most amqp-value bodies of a :class:`LazyMessage`)."""
    if type(message) is LazyMessage:
        if message.body_type == "data":
            return message.data()
        encoded = message.value_encoding()
        if encoded is not None and encoded[0] not in (0x40, 0xA0, 0xB0, 0xC1, 0xD1):
            return bytes(encoded)
    return body_values(message)[0]


def body_values(message: AnyMessage) -> tuple[bytes | None, str | None, TextMap | None]:
    """The ``body``, ``body_string`` and ``body_map`` columns of a message.

    ``body`` is the data sections joined, a binary value's bytes, or any other
    value's AMQP encoding (as it was sent, when the message is a :class:`LazyMessage`).
    """
    raw: bytes | None
    if type(message) is LazyMessage:
        if message.body_type == "data":
            raw = message.data()
            assert raw is not None
            return raw, _utf8(raw), None
        encoded = message.value_encoding()
        if encoded is not None:
            c = encoded[0]
            if c in (0xA1, 0xB1):  # a string
                return bytes(encoded), str(decode(encoded)), None
            if c in (0xA0, 0xB0):  # binary
                raw = bytes(decode(encoded))
                return raw, _utf8(raw), None
            if c not in (0x40, 0xC1, 0xD1):  # not null, not a map: nothing else to decode
                return bytes(encoded), None, None
    body = message.body
    kind = message.body_type
    if kind == "data":
        raw = b"".join(bytes(chunk) for chunk in body)
    elif isinstance(body, (bytes, bytearray, memoryview)):
        raw = bytes(body)
    elif kind in ("value", None) and body is None:
        return None, None, None
    else:
        raw = encode(body)
    if isinstance(body, str):
        return raw, body, None
    if isinstance(body, dict):
        return raw, None, text_map(body)
    if kind == "data" or isinstance(body, (bytes, bytearray, memoryview)):
        assert raw is not None
        return raw, _utf8(raw), None
    return raw, None, None


def _utf8(raw: bytes) -> str | None:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def properties_map(props: Properties | None) -> TextMap | None:
    """The properties section as the legacy ``map<string,string>`` value, by spec name."""
    if props is None:
        return None
    out: TextMap = {}
    for attr, name in _PROPERTY_NAMES:
        v = getattr(props, attr)
        if v is not None:
            out[name] = text(v)
    return out


def _micros(ms: int) -> int:
    return int(ms) * 1000


_STRUCT_FIELDS: tuple[tuple[str, Any], ...] = tuple(
    (
        attr,
        text
        if attr in _TEXT_FIELDS
        else _micros
        if attr in _TIME_FIELDS
        else bytes
        if attr == "user_id"
        else int
        if attr == "group_sequence"
        else str,
    )
    for attr in PROPERTY_FIELDS
)
"""Each ``properties`` struct field and how its AMQP value becomes the Arrow value."""


def properties_values(props: Properties | None) -> tuple[object, ...] | None:
    """The ``properties`` struct's field values, in :data:`PROPERTY_FIELDS` order, for Arrow.

    Timestamps are microseconds since the epoch (Arrow's ``timestamp[us]``);
    fields that may hold any of several AMQP types are in their text form.
    """
    if props is None:
        return None
    return tuple(
        None if (v := getattr(props, attr)) is None else convert(v)
        for attr, convert in _STRUCT_FIELDS
    )


def creation_time(props: Properties | None) -> _dt.datetime | None:
    """``properties.creation-time`` as an aware datetime."""
    ct = None if props is None else props.creation_time
    return None if ct is None else _EPOCH + _dt.timedelta(milliseconds=int(ct))


def row_from_message(message: AnyMessage, *, with_offset: bool = True) -> ReadRow:
    """The :data:`LEGACY_SCHEMA` row (a tuple in :data:`LEGACY_COLUMNS` order) for a message."""
    body, body_string, body_map = body_values(message)
    props = message.properties
    return (
        message_offset(message) if with_offset else None,
        body,
        body_string,
        body_map,
        properties_map(props),
        text_map(message.application_properties),
        text_map(message.message_annotations),
        message.durable,
        message.priority,
        creation_time(props),
    )


def row_from_payload(payload: bytes, *, with_offset: bool = True) -> ReadRow:
    """The :data:`LEGACY_SCHEMA` row for the bytes of an encoded message."""
    return row_from_message(LazyMessage(payload), with_offset=with_offset)


# -- writing ---------------------------------------------------------------------------
_SETTABLE = {
    "message-id": "id",
    "user-id": "user_id",
    "to": "to",
    "subject": "subject",
    "reply-to": "reply_to",
    "correlation-id": "correlation_id",
    "content-type": "content_type",
    "content-encoding": "content_encoding",
    "group-id": "group_id",
    "reply-to-group-id": "reply_to_group_id",
}
"""``properties`` map keys the writer sets, and the :class:`Message` accessor each goes to."""

WRITE_COLUMNS = frozenset(
    {
        "body",
        "body_string",
        "properties",
        "application_properties",
        "message_annotations",
        "subject",
        "durable",
        "priority",
        "creation_time",
    }
)
"""Columns the writer uses; any others are ignored."""


def _amqp_value(value: object) -> object:
    """A Spark row value as an AMQP value (application properties, annotations)."""
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.UTC)
        return timestamp.from_datetime(value)
    if isinstance(value, _dt.date):
        return value.isoformat()
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def _pairs(value: object) -> list[tuple[Any, Any]]:
    """A map column's (or a struct's) entries: Arrow gives maps as lists of pairs, Rows as dicts."""
    if not value:
        return []
    if isinstance(value, Mapping):
        return list(value.items())
    if hasattr(value, "asDict"):  # a pyspark Row: a struct column
        return list(value.asDict().items())
    assert isinstance(value, list)
    return [(k, v) for k, v in value]


def message_from_row(
    row: Mapping[str, Any],  # column -> value as pyspark gives it: typed by the DataFrame
    message_id: str | None,
    *,
    durable: bool = True,
) -> Message:
    """The message a row becomes when written.

    ``body``: binary → one data section, string → an amqp-value string (a null
    ``body`` falls back to ``body_string``). ``properties`` keys use the spec's
    names (``message-id``, ``correlation-id``, ``content-type``, ...); a
    ``message-id`` there wins over ``message_id`` (the writer's deterministic id).
    """
    body = row.get("body")
    if body is None:
        body = row.get("body_string")
    if isinstance(body, (bytes, bytearray, memoryview)):
        m = Message([bytes(body)], body_type="data")
    else:
        m = Message(body)
    if message_id is not None:
        m.id = message_id
    for key, value in _pairs(row.get("properties")):
        attr = _SETTABLE.get(key) or _SETTABLE.get(key.replace("_", "-"))
        if attr is None or value is None:
            continue
        if attr == "user_id" and isinstance(value, str):
            value = value.encode()
        setattr(m, attr, value)
    if row.get("subject") is not None:
        m.subject = row["subject"]
    creation = row.get("creation_time")
    if isinstance(creation, _dt.datetime):
        m.creation_time = creation if creation.tzinfo else creation.replace(tzinfo=_dt.UTC)
    ap = _pairs(row.get("application_properties"))
    if ap:
        m.application_properties = {str(k): _amqp_value(v) for k, v in ap}
    ma = _pairs(row.get("message_annotations"))
    if ma:
        m.message_annotations = {symbol(str(k)): _amqp_value(v) for k, v in ma}
    d = row.get("durable")
    m.durable = durable if d is None else bool(d)
    prio = row.get("priority")
    if prio is not None:
        m.priority = max(0, min(int(prio), 255))
    return m
