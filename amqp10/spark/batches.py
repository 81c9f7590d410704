"""Received messages to Arrow record batches, a column at a time (pyarrow, no pyspark).

A Python data source that yields ``pyarrow.RecordBatch`` es skips pyspark's
per-row conversion (a converter call per value). Each column is built with
one loop over a chunk of messages, and only what a selected column needs is
decoded: each message is a :class:`~amqp10.message.LazyMessage`, whose sections
were found without decoding any (:mod:`amqp10.message.scan`). ``offset`` and
``timestamp`` read one annotation each, ``body`` slices the bytes, and a map or
the properties decode their own section only.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from ..message import LazyMessage
from .rows import (
    PROPERTY_VALUE,
    AnyMessage,
    TextMap,
    body_bytes,
    body_values,
    message_timestamp,
    properties_map,
    text,
    text_map,
)

__all__ = [
    "SECTIONS_OF",
    "Chunk",
    "MapValue",
    "WHOLE_DECODE_COLUMNS",
    "build_batch",
    "decode_whole",
    "is_variant_map",
    "sections_of",
    "variant_map",
]

MapValue = Callable[[Mapping[Any, Any] | None], Any]
"""How a map section (or None) becomes the value of its column: :func:`~.rows.text_map` by default."""


class Chunk:
    """Messages received together: their offsets (None for queue messages) and bytes."""

    __slots__ = ("_bodies", "address", "messages", "offsets", "partition")

    def __init__(
        self,
        address: str,
        partition: int | None,
        offsets: Sequence[int | None],
        messages: Sequence[AnyMessage],
    ) -> None:
        self.address = address
        self.partition = partition
        self.offsets = offsets
        self.messages = messages
        self._bodies: list[tuple[bytes | None, str | None, TextMap | None]] | None = None

    def __len__(self) -> int:
        return len(self.messages)

    def bodies(self) -> list[tuple[bytes | None, str | None, TextMap | None]]:
        """``(body, body_string, body_map)`` of each message, decoded once for all three columns."""
        if self._bodies is None:
            self._bodies = [body_values(m) for m in self.messages]
        return self._bodies


def _timestamp(m: AnyMessage) -> int | None:
    ts = message_timestamp(m)
    return None if ts is None else ts * 1000  # ms -> Arrow's microseconds


def _creation_time(m: AnyMessage) -> int | None:
    p = m.properties
    ct = None if p is None else p.creation_time
    return None if ct is None else int(ct) * 1000


def _properties_struct(msgs: Sequence[AnyMessage], arrow_type: Any) -> Any:
    """The ``properties`` struct column as an Arrow array, built a field at a time.

    pyarrow converts a list of dicts to a struct array slowly; 13 lists of plain
    values and a null mask take about half the time (:func:`~.rows.properties_struct`
    is the same per message).
    """
    props = [m.properties for m in msgs]
    children = []
    for field in arrow_type:
        convert = PROPERTY_VALUE[field.name]
        name = field.name
        values = [
            None if p is None or (v := getattr(p, name)) is None else convert(v) for p in props
        ]
        children.append(pa.array(values, type=field.type))
    mask = pa.array([p is None for p in props], type=pa.bool_())
    return pa.StructArray.from_arrays(children, fields=list(arrow_type), mask=mask)


def _text_map_array(maps: Sequence[Mapping[Any, Any] | None], arrow_type: Any) -> Any:
    """A ``map<string,string>`` column as an Arrow array, from flat keys and values.

    Each row is :func:`~.rows.text_map` of its map, handed to pyarrow as flat
    lists (a null offset for a null map) rather than a dict per row to convert.
    """
    offsets: list[int | None] = []
    keys: list[str] = []
    items: list[str | None] = []
    for m in maps:
        row = text_map(m)
        if row is None:
            offsets.append(None)  # a null map: pyarrow takes its start from the next offset
            continue
        offsets.append(len(keys))
        keys += row
        items += row.values()
    offsets.append(len(keys))
    return pa.MapArray.from_arrays(
        pa.array(offsets, type=pa.int32()),
        pa.array(keys, type=pa.string()),
        pa.array(items, type=pa.string()),
        type=arrow_type,
    )


def is_variant_map(arrow_type: Any) -> bool:
    """Whether an Arrow type is a ``map<string, variant>`` (a variant is a struct in Arrow)."""
    return bool(pa.types.is_map(arrow_type) and pa.types.is_struct(arrow_type.item_type))


def _values(name: str, chunk: Chunk, arrow_type: Any, variant: MapValue | None) -> Any:
    """The Python values of column ``name`` for ``chunk`` (Arrow-ready: times in µs)."""
    msgs = chunk.messages
    if name == "address":
        return [chunk.address] * len(msgs)
    if name == "partition":
        return [chunk.partition] * len(msgs)
    if name == "offset":
        return list(chunk.offsets)
    if name == "timestamp":
        return [_timestamp(m) for m in msgs]
    if name == "body":
        if msgs and type(msgs[0]) is LazyMessage:  # a slice of the bytes, mostly
            return [body_bytes(m) for m in msgs]
        return [b[0] for b in chunk.bodies()]  # decoded messages: share with body_string
    if name == "body_string":
        return [b[1] for b in chunk.bodies()]
    if name == "body_map":
        return [b[2] for b in chunk.bodies()]
    if name == "properties":
        if pa.types.is_struct(arrow_type):
            return _properties_struct(msgs, arrow_type)
        return [properties_map(m.properties) for m in msgs]
    if name in ("application_properties", "message_annotations"):
        if name == "application_properties":
            maps = [m.application_properties for m in msgs]
        else:
            maps = [m.message_annotations for m in msgs]
        if not is_variant_map(arrow_type):
            return _text_map_array(maps, arrow_type)
        assert variant is not None, "a variant map column needs variant_map()"
        return [variant(m) for m in maps]
    if name == "durable":
        return [m.durable for m in msgs]
    if name == "priority":
        return [m.priority for m in msgs]
    if name == "creation_time":
        return [_creation_time(m) for m in msgs]
    raise KeyError(name)


SECTIONS_OF: dict[str, frozenset[str]] = {
    "address": frozenset(),
    "partition": frozenset(),
    "offset": frozenset({"message-annotations"}),
    "timestamp": frozenset({"message-annotations"}),
    "body": frozenset({"body"}),
    "body_string": frozenset({"body"}),
    "body_map": frozenset({"body"}),
    "properties": frozenset({"properties"}),
    "application_properties": frozenset({"application-properties"}),
    "message_annotations": frozenset({"message-annotations"}),
    "durable": frozenset({"header"}),
    "priority": frozenset({"header"}),
    "creation_time": frozenset({"properties"}),
}
"""The message sections each column is made from: what a read of that column decodes."""


WHOLE_DECODE_COLUMNS = frozenset(
    {"properties", "creation_time", "application_properties", "message_annotations"}
)
"""Columns that make a read decode each message in one pass (:func:`~.rows.open_message`).

Each decodes a section whole, and with them a read needs most sections anyway: for
a 100-byte message all columns took 13 µs a row decoded whole, 17 µs section by
section; ``offset,body`` 8.5 µs whole, 2.5 µs by the scanner."""


def decode_whole(columns: Sequence[str]) -> bool:
    """Whether a read of ``columns`` decodes each message whole (:data:`WHOLE_DECODE_COLUMNS`)."""
    return not WHOLE_DECODE_COLUMNS.isdisjoint(columns)


def sections_of(columns: Sequence[str]) -> frozenset[str]:
    """The sections a read of ``columns`` decodes."""
    return frozenset().union(*(SECTIONS_OF[c] for c in columns))


def build_batch(schema: pa.Schema, chunk: Chunk, variant: MapValue | None = None) -> Any:
    """``chunk`` as a ``pyarrow.RecordBatch`` of ``schema`` (column names from :data:`SECTIONS_OF`).

    Map columns of variant values need ``variant`` (:func:`variant_map`); the
    others hold text.
    """
    arrays = []
    for f in schema:
        values = _values(f.name, chunk, f.type, variant)
        arrays.append(values if isinstance(values, pa.Array) else pa.array(values, type=f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _json_value(value: object) -> object:
    """An AMQP value as the JSON value its variant is built from (what JSON cannot hold as text)."""
    if value is None or isinstance(value, (bool, str, float)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    return text(value)


def variant_map() -> MapValue:
    """A :data:`MapValue` giving ``map<string, variant>`` values (Arrow: value and metadata).

    Numbers, booleans, strings, lists and maps keep their type; timestamps,
    UUIDs and binary become their text form (see :func:`~.rows.text`). Built
    with pyspark's own variant encoder, and remembered per distinct value.
    """
    from pyspark.sql.variant_utils import VariantBuilder

    cache: dict[tuple[type, object], dict[str, bytes]] = {}

    def variant(value: object) -> dict[str, bytes]:
        key = (type(value), value if isinstance(value, Hashable) else repr(value))
        v = cache.get(key)
        if v is None:
            data, metadata = VariantBuilder().build(json.dumps(_json_value(value)))
            v = {"value": data, "metadata": metadata}
            if len(cache) < 10_000:
                cache[key] = v
        return v

    def convert(m: Mapping[Any, Any] | None) -> Any:
        return None if m is None else [(str(k), variant(v)) for k, v in m.items()]

    return convert
