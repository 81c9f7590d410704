"""Messages to Spark rows and back, without pyspark: what the data source reads and writes.

The read schema (:data:`SCHEMA`)::

    offset long                 x-opt-offset of a stream message; null for queues
    body binary                 data sections (joined) and binary values as they are;
                                any other body as its AMQP encoding
    body_string string          a string body, or a binary one that is valid UTF-8
    body_map map<string,string> a map body (keys and values as strings)
    properties map<...>         the properties section by spec name (message-id, subject, ...)
    application_properties      as strings
    message_annotations         as strings (x-opt-offset, x-opt-timestamp in ms, ...)
    durable boolean, priority int, creation_time timestamp

Values go into ``map<string,string>`` columns as text: numbers and timestamps in
decimal (timestamps in milliseconds since the epoch), UUIDs canonical, booleans
``true``/``false``, binary as lowercase hex, lists and maps as JSON.
"""

from __future__ import annotations

import datetime as _dt
import json
import uuid
from collections.abc import Mapping
from typing import Any, TypeAlias, TypeVar

from ..message import Message
from ..types import Properties, encode, symbol, timestamp

__all__ = [
    "COLUMNS",
    "SCHEMA",
    "OFFSET_ANNOTATION",
    "ReadRow",
    "TextMap",
    "message_from_row",
    "WRITE_COLUMNS",
    "message_offset",
    "row_from_message",
    "row_from_payload",
    "text",
]

SCHEMA = (
    "offset BIGINT, body BINARY, body_string STRING, body_map MAP<STRING, STRING>, "
    "properties MAP<STRING, STRING>, application_properties MAP<STRING, STRING>, "
    "message_annotations MAP<STRING, STRING>, durable BOOLEAN, priority INT, "
    "creation_time TIMESTAMP"
)
"""The read schema as Spark DDL."""

COLUMNS = (
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

TextMap: TypeAlias = dict[str, str | None]
"""A ``map<string,string>`` column's value."""

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
"""A row of :data:`SCHEMA`, in :data:`COLUMNS` order."""

_K = TypeVar("_K")

OFFSET_ANNOTATION = symbol("x-opt-offset")
_PROPERTY_FIELDS = tuple((f.attr, f.name) for f in Properties.FIELDS)
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


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
    return json.dumps(value, default=_json_default, sort_keys=True)


def _json_default(value: object) -> str:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    return str(value)


def _text_map(m: Mapping[_K, object] | None) -> TextMap | None:
    if m is None:
        return None
    return {str(k): text(v) for k, v in m.items()}


def message_offset(message: Message) -> int | None:
    """The stream offset the broker annotated the message with, if any."""
    ma = message.message_annotations
    if not ma:
        return None
    off = ma.get(OFFSET_ANNOTATION)
    return int(off) if isinstance(off, int) else None


def _body_columns(
    message: Message,
) -> tuple[bytes | None, str | None, TextMap | None]:
    body = message.body
    kind = message.body_type
    raw: bytes | None
    if kind == "data":
        raw = b"".join(bytes(chunk) for chunk in body)
    elif isinstance(body, (bytes, bytearray, memoryview)):
        raw = bytes(body)
    elif kind == "value" and body is None:
        return None, None, None
    else:
        raw = encode(body)
    if isinstance(body, str):
        return raw, body, None
    if isinstance(body, dict):
        return raw, None, _text_map(body)
    if kind == "data" or isinstance(body, (bytes, bytearray, memoryview)):
        assert raw is not None
        try:
            return raw, raw.decode("utf-8"), None
        except UnicodeDecodeError:
            return raw, None, None
    return raw, None, None


def row_from_message(message: Message, *, with_offset: bool = True) -> ReadRow:
    """The row (a tuple in :data:`COLUMNS` order) for a received message."""
    body, body_string, body_map = _body_columns(message)
    props = message.properties
    pmap: TextMap | None = None
    creation: _dt.datetime | None = None
    if props is not None:
        pmap = {}
        for attr, name in _PROPERTY_FIELDS:
            v = getattr(props, attr)
            if v is not None:
                pmap[name] = text(v)
        ct = props.creation_time
        if ct is not None:
            creation = _EPOCH + _dt.timedelta(milliseconds=int(ct))
    h = message.header
    return (
        message_offset(message) if with_offset else None,
        body,
        body_string,
        body_map,
        pmap,
        _text_map(message.application_properties),
        _text_map(message.message_annotations),
        bool(h is not None and h.durable),
        4 if h is None or h.priority is None else int(h.priority),
        creation,
    )


def row_from_payload(payload: bytes, *, with_offset: bool = True) -> ReadRow:
    """The row for the bytes of an encoded message."""
    return row_from_message(Message.decode(payload), with_offset=with_offset)


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
    for key, value in (row.get("properties") or {}).items():
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
    ap = row.get("application_properties")
    if ap:
        m.application_properties = {str(k): _amqp_value(v) for k, v in ap.items()}
    ma = row.get("message_annotations")
    if ma:
        m.message_annotations = {symbol(str(k)): _amqp_value(v) for k, v in ma.items()}
    d = row.get("durable")
    m.durable = durable if d is None else bool(d)
    prio = row.get("priority")
    if prio is not None:
        m.priority = max(0, min(int(prio), 255))
    return m
