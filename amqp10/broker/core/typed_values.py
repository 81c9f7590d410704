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

:func:`as_json` is the other way JSON holds them: as RabbitMQ's definitions export writes
them (``rabbit_misc:amqp_table/1``), their types lost; :func:`json_keeps` says whether that
form gives a value back as it was.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from ... import field_types
from ...types import Described, symbol

__all__ = ["TYPED", "as_json", "carried", "json_keeps", "restored", "typed", "untyped"]

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


def as_json(value: Any) -> Any:
    """``value`` as RabbitMQ 3.10's definitions export writes an argument's (``rabbit_misc:
    amqp_table/1``, ``amqp_value/2``): a table an object, an array a list, every integer type
    (a timestamp too: its seconds) a number, a float a number, a string or byte array its
    text if it is UTF-8, else ``Not UTF-8, base64 is: `` and its base64 (``utf8_safe/1``);
    a decimal a number (its value: RabbitMQ prints ``Scale.Unscaled``, 1.50 as 2.15, a slip
    not copied); anything else (a 1.0 uuid, a float JSON cannot hold) its text. Never raises."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else str(value)
    if isinstance(value, Decimal):
        number = float(value)
        return number if value.is_finite() and math.isfinite(number) else str(value)
    if isinstance(value, datetime):  # (a naive one is UTC, as a 0-9-1 timestamp is)
        return math.floor((value if value.tzinfo is not None else value.replace(tzinfo=UTC)).timestamp())
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _utf8_safe(bytes(value))
    if isinstance(value, Mapping):
        return {str(k): as_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [as_json(v) for v in value]
    return str(value)


def _utf8_safe(raw: bytes) -> str:
    """RabbitMQ's ``rabbit_misc:utf8_safe/1``: the text, or its base64 in MIME's lines of 76."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        encoded = base64.b64encode(raw).decode()
        # (split_lines/1: a newline after each whole line of 76, the last one too)
        lines = "".join(encoded[i : i + 76] + "\n" for i in range(0, len(encoded) - 75, 76))
        return "Not UTF-8, base64 is: " + lines + encoded[len(encoded) - len(encoded) % 76 :]


def json_keeps(value: Any) -> bool:
    """Whether :func:`as_json`'s form of ``value``, read back, is ``value`` with its types: a
    plain ``str``, ``int`` (no 0-9-1 field type), finite ``float``, ``bool`` or None, or
    tables (with ``str`` keys) and lists of them."""
    if value is None or type(value) in (bool, str, int):
        return True
    if type(value) is float:
        return math.isfinite(value)
    if type(value) is dict:
        return all(type(k) is str and json_keeps(v) for k, v in value.items())
    if type(value) is list:
        return all(json_keeps(v) for v in value)
    return False


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
