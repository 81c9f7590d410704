"""Hypothesis strategies for every AMQP 1.0 type (Part 1 §1.6), recursive ones included.

Values are drawn as the Python objects the decoder returns, so that
``decode(encode(v))`` must give back ``v`` with every type intact (compare with
:func:`assert_same`, since ``ubyte(1) == 1``).

- NaN is left out (``nan != nan``); the round-trip tests cover it separately.
- ``float32`` values are drawn exactly representable in 32 bits.
- Described values use descriptors that no composite type of the spec
  registers, so that they decode back as :class:`Described`.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

from hypothesis import strategies as st

from amqp10.types import (
    Array,
    Described,
    byte,
    char,
    decimal32,
    decimal64,
    decimal128,
    float32,
    int32,
    long,
    short,
    symbol,
    timestamp,
    ubyte,
    uint,
    ulong,
    ushort,
)

# Tune for run time: sizes of compounds and the number of leaves in a tree.
MAX_SIZE = 6
MAX_LEAVES = 12

LONG_MIN = -(1 << 63)
LONG_MAX = (1 << 63) - 1

# Descriptor codes (domain 0x00000000) the spec registers for its composite and
# restricted types; a described value with one of them decodes as that type.
_RESERVED_RANGES = (
    (0x10, 0x18),
    (0x1D, 0x1D),
    (0x23, 0x2E),
    (0x30, 0x34),
    (0x40, 0x44),
    (0x70, 0x78),
)
RESERVED_CODES = frozenset(c for lo, hi in _RESERVED_RANGES for c in range(lo, hi + 1))


def _free_code(c: int) -> bool:
    return c not in RESERVED_CODES


# --- scalars --------------------------------------------------------------------

nulls = st.none()
booleans = st.booleans()
ubytes = st.integers(0, 0xFF).map(ubyte)
ushorts = st.integers(0, 0xFFFF).map(ushort)
uints = st.one_of(st.integers(0, 0x1FF), st.integers(0, 0xFFFFFFFF)).map(uint)
ulongs = st.one_of(st.integers(0, 0x1FF), st.integers(0, (1 << 64) - 1)).map(ulong)
bytes_ = st.integers(-0x80, 0x7F).map(byte)
shorts = st.integers(-0x8000, 0x7FFF).map(short)
int32s = st.one_of(st.integers(-0x100, 0x100), st.integers(-0x80000000, 0x7FFFFFFF)).map(int32)
longs = st.one_of(st.integers(-0x100, 0x100), st.integers(LONG_MIN, LONG_MAX))
float32s = st.floats(width=32, allow_nan=False).map(float32)
doubles = st.floats(allow_nan=False)  # includes inf, -inf and -0.0
decimal32s = st.integers(0, 0xFFFFFFFF).map(decimal32)
decimal64s = st.integers(0, (1 << 64) - 1).map(decimal64)
decimal128s = st.binary(min_size=16, max_size=16).map(decimal128)
# Unicode scalar values: every code point but the surrogates.
chars = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=["Cs"]).map(char)
timestamps = st.integers(LONG_MIN, LONG_MAX).map(timestamp)
uuids = st.uuids()
binaries = st.one_of(st.binary(max_size=20), st.binary(min_size=250, max_size=300))
strings = st.one_of(
    st.text(max_size=20),  # non-ASCII and astral code points included
    st.text(min_size=60, max_size=90),  # 255-byte boundary in UTF-8
    st.text(alphabet="ab", min_size=250, max_size=300),
)
_ascii = st.characters(min_codepoint=0, max_codepoint=0x7F)
symbols = st.one_of(
    st.text(_ascii, max_size=20),
    st.text(alphabet="xy", min_size=250, max_size=300),
).map(symbol)

# element type (as Array.element_type) -> strategy for its values
SCALAR_TYPES: dict[type, st.SearchStrategy[Any]] = {
    type(None): nulls,
    bool: booleans,
    ubyte: ubytes,
    ushort: ushorts,
    uint: uints,
    ulong: ulongs,
    byte: bytes_,
    short: shorts,
    int32: int32s,
    int: longs,
    float32: float32s,
    float: doubles,
    decimal32: decimal32s,
    decimal64: decimal64s,
    decimal128: decimal128s,
    char: chars,
    timestamp: timestamps,
    uuid.UUID: uuids,
    bytes: binaries,
    str: strings,
    symbol: symbols,
}

_SCALARS = st.one_of(*SCALAR_TYPES.values())


# Wrapping big strategies in @st.composite keeps their reprs short: Hypothesis
# builds reprs while validating recursive strategies and warns (an error under
# pytest) past 30 kB.
@st.composite
def _scalars(draw: st.DrawFn) -> Any:
    return draw(_SCALARS)


scalars = _scalars()
# Every scalar is hashable, so any of them can be a map key.
map_keys = scalars

# --- descriptors ----------------------------------------------------------------

ulong_descriptors = st.one_of(
    st.integers(0, 0xFF).filter(_free_code),
    st.integers(0x100, (1 << 64) - 1),
).map(ulong)
symbol_descriptors = (
    st.text(_ascii, max_size=30).filter(lambda s: not s.startswith("amqp:")).map(symbol)
)
descriptors = st.one_of(ulong_descriptors, symbol_descriptors)

# --- arrays ---------------------------------------------------------------------


def _uniform(element_type: type, values: st.SearchStrategy[Any]) -> st.SearchStrategy[Array]:
    return st.lists(values, max_size=MAX_SIZE).map(lambda xs: Array(element_type, xs))


@st.composite
def _zeros_or_small(draw: st.DrawFn) -> Array:
    """uint/ulong arrays whose elements all fit the zero-width or one-byte encodings."""
    tp = draw(st.sampled_from([uint, ulong]))
    hi = draw(st.sampled_from([0, 255]))
    return Array(tp, draw(st.lists(st.integers(0, hi).map(tp), max_size=MAX_SIZE)))


_SCALAR_ARRAYS = st.one_of(
    *(_uniform(tp, s) for tp, s in SCALAR_TYPES.items()),
    _zeros_or_small(),
    # more elements than fit an array8 count
    st.integers(256, 300).map(lambda n: Array(ubyte, [ubyte(i & 0xFF) for i in range(n)])),
)


@st.composite
def _scalar_arrays(draw: st.DrawFn) -> Array:
    return draw(_SCALAR_ARRAYS)


scalar_arrays = _scalar_arrays()


_maybe_descriptor = st.one_of(st.none(), descriptors)


def with_descriptor(array: Array, descriptor: Any) -> Array:
    """``array`` as an array of the described type ``descriptor`` (if not None)."""
    return Array(array.element_type, array.elements, descriptor)


@st.composite
def arrays_of(draw: st.DrawFn, children: st.SearchStrategy[Any], depth: int = 2) -> Array:
    """An array of any element type: scalars, lists and maps of ``children``, arrays
    of arrays (``depth`` levels deep), each maybe with a descriptor."""
    kind = draw(st.sampled_from(["scalar", "list", "map", "array"] if depth else ["scalar"]))
    if kind == "scalar":
        a = draw(scalar_arrays)
    elif kind == "list":
        a = Array(list, draw(st.lists(st.lists(children, max_size=3), max_size=4)))
    elif kind == "map":
        a = Array(dict, draw(st.lists(st.dictionaries(map_keys, children, max_size=3), max_size=4)))
    else:
        a = Array(Array, draw(st.lists(arrays_of(children, depth - 1), max_size=4)))
    return with_descriptor(a, draw(_maybe_descriptor))


# --- everything -----------------------------------------------------------------


def _compounds(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=MAX_SIZE),
        st.dictionaries(map_keys, children, max_size=MAX_SIZE),
        st.builds(Described, descriptors, children),
        arrays_of(children),
    )


values = st.recursive(scalars | scalar_arrays, _compounds, max_leaves=MAX_LEAVES)
"""Any AMQP value (decoded form): scalars, lists, maps, arrays, described values."""

# Lists whose encodings straddle the list8/list32 boundary (255 bytes of body).
big_lists = st.lists(st.binary(min_size=0, max_size=60), min_size=1, max_size=12)


# --- type-strict equality ---------------------------------------------------------


def _norm_type(tp: type) -> type:
    # ``long`` is the exact name for what a plain ``int`` already is on the wire;
    # decoding gives plain ints back.
    return int if tp is long else tp


def _float_bits(x: float) -> bytes:
    return struct.pack(">d", x)


def explain_difference(a: Any, b: Any, path: str = "value") -> str | None:
    """None if ``a`` and ``b`` are the same AMQP value (types included), else where not.

    Python's ``==`` is too loose here: ``ubyte(1) == 1 == True == 1.0`` and
    ``symbol('a') == 'a'``; and ``-0.0 == 0.0``. Floats compare bit for bit.
    """
    ta, tb = _norm_type(type(a)), _norm_type(type(b))
    if ta is not tb:
        return f"{path}: type {ta.__name__} != {tb.__name__} ({a!r} vs {b!r})"
    if isinstance(a, float):
        if _float_bits(a) != _float_bits(b):
            return f"{path}: {a!r} != {b!r}"
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: length {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            d = explain_difference(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    if isinstance(a, dict):
        if len(a) != len(b):
            return f"{path}: {len(a)} entries != {len(b)}"
        # encoding keeps the order, so the pairs must match one for one
        for i, ((ka, va), (kb, vb)) in enumerate(zip(a.items(), b.items())):
            d = explain_difference(ka, kb, f"{path}.key[{i}]") or explain_difference(
                va, vb, f"{path}[{ka!r}]"
            )
            if d:
                return d
        return None
    if isinstance(a, Described):
        return explain_difference(
            a.descriptor, b.descriptor, f"{path}.descriptor"
        ) or explain_difference(a.value, b.value, f"{path}.value")
    if isinstance(a, Array):
        if _norm_type(a.element_type) is not _norm_type(b.element_type):
            return f"{path}: array of {a.element_type.__name__} != {b.element_type.__name__}"
        return explain_difference(
            a.descriptor, b.descriptor, f"{path}.descriptor"
        ) or explain_difference(list(a.elements), list(b.elements), f"{path}.elements")
    if a != b:
        return f"{path}: {a!r} != {b!r}"
    return None


def assert_same(a: Any, b: Any) -> None:
    """Assert ``a`` and ``b`` are the same AMQP value, exact types included."""
    d = explain_difference(a, b)
    assert d is None, d
