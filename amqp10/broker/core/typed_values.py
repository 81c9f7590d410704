"""Argument values as JSON holds them, their types kept: what the store writes of the
arguments a queue or stream was declared with, and what the workers carry of a value AMQP
1.0 has no type for (:func:`carried`: the control link, workers/metadata.py, and a
``queue.declare`` put to a queue's owner, workers/remote.py), so that a re-declaration is
compared with the values declared, after a restart and on every worker alike.

Arguments are 0-9-1 field-table values (or 1.0 map values, or JSON from the HTTP API):
``str``, ``int``, ``float``, ``bool``, ``None`` and arrays are themselves; every other
value is a map of one entry that names its type::

    {"decimal": "1.50"}   {"timestamp": "2024-05-01T12:00:00+00:00"}   {"bytes": "<base64>"}
    {"int": "<digits>"} (beyond 64 bits)   {"table": {"name": value, ...}}
    {"field": ["Int8", 3]}   {"field": ["Float32", 2.5]}   {"field": ["LongString", {"bytes": ...}]}

so a map in the typed form is always such a tag. A 0-9-1 field type (:mod:`amqp10.field_types`:
``Int8``, ``Int16``, ``Int64``, ``UInt8``, ``UInt16``, ``UInt32``, ``Timestamp``, ``Float32``,
``LongString``) is a ``field`` tag, its name and its value as its base type: it is not its base
type's value to RabbitMQ inside a table or an array (``[Int8(3)]`` is not ``[3]``), and a
re-declaration is compared with it so after a restart and on every worker. A value of another
type is kept as its text (``{"text": ...}``).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

from ... import field_types
from ...types import Described, symbol

__all__ = ["TYPED", "carried", "restored", "typed", "untyped"]

_LONG = 1 << 63

_FIELD_TYPES: dict[str, type] = {name: getattr(field_types, name) for name in field_types.__all__}
"""The 0-9-1 field types a ``field`` tag names, by name."""


def _field_type(value: Any) -> type | None:
    """``value``'s 0-9-1 field type, if it has one of them (exactly: not a subclass of it)."""
    t = type(value)
    return t if _FIELD_TYPES.get(t.__name__) is t else None


def typed(value: Any) -> Any:
    """``value`` in the typed form (see the module's text)."""
    field_type = _field_type(value)
    if field_type is not None:
        return {"field": [field_type.__name__, typed(field_type.__mro__[1](value))]}
    if value is None or isinstance(value, (bool, str, float)):
        return value
    if isinstance(value, int):
        return int(value) if -_LONG <= value < _LONG else {"int": str(value)}
    if isinstance(value, Decimal):
        return {"decimal": str(value)}
    if isinstance(value, datetime):
        return {"timestamp": value.isoformat()}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"bytes": base64.b64encode(value).decode()}
    if isinstance(value, Mapping):
        return {"table": {str(k): typed(v) for k, v in value.items()}}
    if isinstance(value, (list, tuple)):
        return [typed(v) for v in value]
    return {"text": str(value)}


def untyped(data: Any) -> Any:
    """The value :func:`typed` gave ``data`` for; ValueError for a map that is no tag of it."""
    if isinstance(data, list):
        return [untyped(v) for v in data]
    if not isinstance(data, dict):
        return data
    if len(data) != 1:
        raise ValueError(f"not a typed value: {data!r}")
    ((tag, payload),) = data.items()
    try:
        return _tagged(tag, payload)
    except (TypeError, AttributeError, LookupError, ArithmeticError, ValueError) as exc:
        raise ValueError(f"not a typed value: {data!r} ({exc})") from None


def _tagged(tag: str, payload: Any) -> Any:
    """The value the tag ``tag`` of ``payload`` stands for (a malformed one raises what its
    type's constructor raises: a decimal's InvalidOperation is an ArithmeticError)."""
    if tag == "table":
        return {k: untyped(v) for k, v in payload.items()}
    if tag == "decimal":
        return Decimal(payload)
    if tag == "timestamp":
        return datetime.fromisoformat(payload)
    if tag == "bytes":
        return base64.b64decode(payload, validate=True)
    if tag == "int":
        return int(payload)
    if tag == "text":
        return str(payload)
    if tag == "field":
        name, value = payload
        base = untyped(value)
        field_type = _FIELD_TYPES[name]
        if not isinstance(base, field_type.__mro__[1]) or isinstance(base, bool):
            raise ValueError(f"a {name} of {base!r}")
        return field_type(base)
    raise ValueError(f"no such tag as {tag!r}")


TYPED = symbol("amqp10:typed")
"""The descriptor of a value the workers carry in its typed form (as the store keeps
arguments): one without an AMQP 1.0 type that gives it back as it was (a 0-9-1 decimal or
timestamp, an integer beyond 64 bits, a 0-9-1 field type: its ``Int8`` is not an ``int``
inside a table or an array, to a re-declaration)."""


def carried(value: Any) -> Any:
    """``value`` in the AMQP types the workers' links carry, what AMQP 1.0 would not give
    back as it was described as :data:`TYPED` (:func:`restored` gives it back): a 0-9-1
    field type too (an ``Int8`` would come back an ``int``)."""
    if _field_type(value) is not None:
        return Described(TYPED, typed(value))
    if value is None or isinstance(value, (bool, float, str, bytes)):
        return value
    if isinstance(value, int) and -_LONG <= value < _LONG:
        return value
    if isinstance(value, Mapping):
        return {str(k): carried(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [carried(v) for v in value]
    return Described(TYPED, typed(value))


def restored(value: Any) -> Any:
    """What :func:`carried` gave ``value`` (as decoded) for; ValueError for a malformed one."""
    if isinstance(value, Described) and value.descriptor == TYPED:
        return untyped(value.value)
    if isinstance(value, dict):
        return {k: restored(v) for k, v in value.items()}
    if isinstance(value, list):
        return [restored(v) for v in value]
    return value
