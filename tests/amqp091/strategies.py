"""Hypothesis strategies for field values, tables and every method's arguments."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import hypothesis.strategies as st

from amqp10.amqp091.base import Method
from amqp10.amqp091.fields import (
    Float32,
    Int8,
    Int16,
    Int64,
    LongString,
    Timestamp,
    UInt8,
    UInt16,
    UInt32,
)

keys = st.text(max_size=20).filter(lambda s: len(s.encode()) <= 255)
shortstr = st.text(max_size=40).filter(lambda s: len(s.encode()) <= 255)
decimals = st.builds(
    lambda raw, scale: Decimal(raw).scaleb(-scale),
    st.integers(-(2**31) + 1, 2**31 - 1),
    st.integers(0, 12),
)
invalid_utf8 = st.binary(max_size=20).map(lambda b: LongString(b"\xff" + b))

# what pika's codec carries both ways unchanged (it normalizes decimals)
pika_scalars = st.one_of(
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    shortstr,
    st.binary(max_size=30),
    decimals.map(lambda d: d.normalize()).filter(lambda d: int(d.as_tuple().exponent) <= 0),
    st.none(),
)
scalars = st.one_of(
    pika_scalars,
    decimals,
    st.integers(-128, 127).map(Int8),
    st.integers(0, 255).map(UInt8),
    st.integers(-(2**15), 2**15 - 1).map(Int16),
    st.integers(0, 2**16 - 1).map(UInt16),
    st.integers(0, 2**32 - 1).map(UInt32),
    st.integers(-(2**31), 2**31 - 1).map(Int64),
    st.integers(0, 2**64 - 1).map(Timestamp),
    st.floats(allow_nan=False),
    st.floats(width=32, allow_nan=False).map(Float32),
    invalid_utf8,
)


def _nest(leaves: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)
        ),
        max_leaves=12,
    )


values = _nest(scalars)
tables = st.dictionaries(keys, values, max_size=6)
pika_tables = st.dictionaries(keys, _nest(pika_scalars), max_size=6)

_FIELD = {
    "octet": st.integers(0, 255),
    "short": st.integers(0, 2**16 - 1),
    "long": st.integers(0, 2**32 - 1),
    "longlong": st.integers(0, 2**64 - 1),
    "timestamp": st.integers(0, 2**64 - 1),
    "bit": st.booleans(),
    "shortstr": shortstr,
    "longstr": st.binary(max_size=60),
}


def methods_of(
    cls: type[Method], table: st.SearchStrategy[Any] = tables
) -> st.SearchStrategy[Method]:
    """Instances of ``cls`` with arbitrary valid arguments."""
    return st.builds(cls, **{a: (table if t == "table" else _FIELD[t]) for a, t in cls.FIELDS})


def assert_same(a: Any, b: Any) -> None:
    """Equal values of the same types, recursively (``Int8(1)`` is not ``1`` here)."""
    assert type(a) is type(b), (a, b)
    if isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    else:
        assert a == b, (a, b)
