"""Received messages to Arrow record batches, a column at a time (pyarrow, no pyspark).

A Python data source that yields ``pyarrow.RecordBatch`` es skips pyspark's
per-row conversion (a converter call per value). A chunk of messages comes in
one of two forms (:func:`reading`):

- a read of the default typed columns that needs most sections (the properties
  struct, the text maps) gets each message as a :data:`~.decode.Row`, made in one
  walk of its bytes (:func:`~.decode.message_row`); the rows are transposed by
  ``zip`` and each column handed to pyarrow as one list;
- any other read gets each message as a :class:`~amqp10.message.LazyMessage`,
  whose sections were found without decoding any (:mod:`amqp10.message.scan`), so
  that only what a selected column needs is decoded (``offset`` and ``timestamp``
  one annotation each, ``body`` a slice of the bytes), or, for the legacy and
  variant forms of the maps and properties, as a decoded :class:`~amqp10.message.Message`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Mapping, Sequence
from functools import partial
from typing import Any

import pyarrow as pa

from ..message import LazyMessage
from .decode import ROW_COLUMNS, message_row
from .rows import (
    AnyMessage,
    TextMap,
    body_bytes,
    body_values,
    message_offset,
    message_timestamp,
    open_message,
    properties_map,
    properties_values,
    text,
    text_pairs,
)

__all__ = [
    "SECTIONS_OF",
    "Chunk",
    "MapValue",
    "WHOLE_DECODE_COLUMNS",
    "build_batch",
    "decode_whole",
    "is_variant_map",
    "reading",
    "sections_of",
    "variant_map",
]

MapValue = Callable[[Mapping[Any, Any] | None], Any]
"""How a map section (or None) becomes the value of its column: :func:`~.rows.text_map` by default."""


class Chunk:
    """Messages received together: their offsets (None for queue messages), and each
    message opened as :func:`reading` says (a :data:`~.decode.Row`, or a message)."""

    __slots__ = ("_bodies", "address", "messages", "offsets", "partition")

    def __init__(
        self,
        address: str,
        partition: int | None,
        offsets: Sequence[int | None],
        messages: Sequence[Any],
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


def _struct_array(values: Sequence[tuple[Any, ...] | None], arrow_type: Any) -> Any:
    """The ``properties`` struct column from :func:`~.rows.properties_values` of each row.

    pyarrow converts a list of dicts to a struct array slowly; 13 lists of plain
    values (the rows transposed) and a null mask take about half the time.
    """
    width = arrow_type.num_fields
    empty = (None,) * width
    fields = list(zip(*[empty if v is None else v for v in values], strict=True)) or [()] * width
    children = [pa.array(col, type=f.type) for col, f in zip(fields, arrow_type, strict=True)]
    mask = pa.array([v is None for v in values], type=pa.bool_())
    return pa.StructArray.from_arrays(children, fields=list(arrow_type), mask=mask)


def _map_array(
    pairs: Sequence[tuple[Sequence[str], Sequence[str | None]] | None], arrow_type: Any
) -> Any:
    """A ``map<string,string>`` column from each row's text keys and values (None: a null map),
    handed to pyarrow as flat lists and offsets rather than a dict per row to convert."""
    offsets: list[int | None] = []
    keys: list[str] = []
    items: list[str | None] = []
    for row in pairs:
        if row is None:
            offsets.append(None)  # a null map: pyarrow takes its start from the next offset
            continue
        offsets.append(len(keys))
        keys += row[0]
        items += row[1]
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
            return _struct_array([properties_values(m.properties) for m in msgs], arrow_type)
        return [properties_map(m.properties) for m in msgs]
    if name in ("application_properties", "message_annotations"):
        if name == "application_properties":
            maps = [m.application_properties for m in msgs]
        else:
            maps = [m.message_annotations for m in msgs]
        if not is_variant_map(arrow_type):
            return _map_array([text_pairs(m) for m in maps], arrow_type)
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


_ROW_INDEX: dict[str, int] = {name: i for i, name in enumerate(ROW_COLUMNS)}


def _row_columns(schema: pa.Schema, chunk: Chunk) -> list[Any]:
    """The columns of a chunk of :data:`~.decode.Row` s: the rows transposed, a list per column."""
    n = len(chunk.messages)
    columns = list(zip(*chunk.messages, strict=True)) or [()] * len(ROW_COLUMNS)
    out: list[Any] = []
    for f in schema:
        name = f.name
        if name == "address":
            out.append([chunk.address] * n)
        elif name == "partition":
            out.append([chunk.partition] * n)
        elif name == "offset":  # the chunk's: a queue message's is null even if annotated
            out.append(chunk.offsets)
        elif name == "properties":
            out.append(_struct_array(columns[_ROW_INDEX[name]], f.type))
        elif name in ("application_properties", "message_annotations"):
            out.append(_map_array(columns[_ROW_INDEX[name]], f.type))
        else:
            out.append(columns[_ROW_INDEX[name]])
    return out


def build_batch(
    schema: pa.Schema, chunk: Chunk, variant: MapValue | None = None, *, rows: bool = False
) -> Any:
    """``chunk`` as a ``pyarrow.RecordBatch`` of ``schema`` (column names from :data:`SECTIONS_OF`).

    ``rows``: the chunk holds :data:`~.decode.Row` s (:func:`reading`), else
    messages. Map columns of variant values need ``variant`` (:func:`variant_map`);
    the others hold text.
    """
    if rows:
        values = _row_columns(schema, chunk)
    else:
        values = [_values(f.name, chunk, f.type, variant) for f in schema]
    arrays = [
        v if isinstance(v, pa.Array) else pa.array(v, type=f.type)
        for v, f in zip(values, schema, strict=True)
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _row_offset(row: tuple[Any, ...]) -> int | None:
    off: int | None = row[0]
    return off


def reading(
    schema: pa.Schema,
) -> tuple[bool, Callable[[bytes], Any], Callable[[Any], int | None]]:
    """How a read of ``schema`` opens each message: ``(rows, open, offset)``.

    ``rows``: as a :data:`~.decode.Row` (:func:`~.decode.message_row`), for a read
    that decodes whole (:func:`decode_whole`) into the typed form of every column;
    otherwise as :func:`~.rows.open_message` gives it. ``offset`` reads an opened
    message's stream offset.
    """
    names = schema.names
    typed = all(
        pa.types.is_struct(f.type) if f.name == "properties" else not is_variant_map(f.type)
        for f in schema
    )
    if not decode_whole(names):
        return False, open_message, message_offset
    if typed:
        return True, message_row, _row_offset
    return False, partial(open_message, whole=True), message_offset


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
