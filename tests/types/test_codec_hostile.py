"""Hostile input: the decoder returns a value or raises DecodeError, nothing else.

Truncations, unknown constructors, lying sizes and counts, nesting bombs,
invalid text, and random bytes. Allocation is bounded before it happens.
"""

from __future__ import annotations

import struct
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amqp10.types import (
    DecodeError,
    ErrorCondition,
    Limits,
    decode,
    decode_at,
    encode,
)
from amqp10.types.codec import MAX_DEPTH

from .strategies import values

# Properties that mostly re-check the main round trip: half the examples.
secondary = settings(max_examples=max(25, settings.default.max_examples // 2))

# Constructors the spec assigns (types.bare.xml) plus 0x00, the described-type marker.
ASSIGNED = frozenset(
    (0x00, 0x40, 0x56, 0x41, 0x42, 0x50, 0x60, 0x70, 0x52, 0x43, 0x80, 0x53, 0x44,
     0x51, 0x61, 0x71, 0x54, 0x81, 0x55, 0x72, 0x82, 0x74, 0x84, 0x94, 0x73, 0x83,
     0x98, 0xA0, 0xB0, 0xA1, 0xB1, 0xA3, 0xB3, 0x45, 0xC0, 0xD0, 0xC1, 0xD1,
     0xE0, 0xF0)
)  # fmt: skip
UNASSIGNED = [c for c in range(256) if c not in ASSIGNED]


def h(s: str) -> bytes:
    return bytes.fromhex(s.replace(" ", ""))


def decode_or_error(data: Any, limits: Limits | None = None) -> DecodeError | None:
    """Decode ``data``; return the DecodeError if it raised one. Anything else fails."""
    try:
        if limits is None:
            decode(data)
        else:
            decode(data, limits)
    except DecodeError as exc:
        assert exc.condition is ErrorCondition.DECODE_ERROR
        assert exc.condition == "amqp:decode-error"
        assert str(exc)
        return exc
    return None


def must_fail(data: bytes, match: str | None = None, limits: Limits | None = None) -> DecodeError:
    exc = decode_or_error(data, limits)
    assert exc is not None, f"{data.hex(' ')} decoded"
    if match is not None:
        assert match in str(exc), str(exc)
    return exc


def cut_points(n: int) -> range | list[int]:
    if n <= 400:
        return range(n)
    step = n // 200
    return sorted(set(range(0, 40)) | set(range(0, n, step)) | set(range(n - 40, n)))


# --- truncation -------------------------------------------------------------------


@given(values)
def test_every_truncation_is_a_decode_error(v: Any) -> None:
    data = encode(v)
    for cut in cut_points(len(data)):
        must_fail(data[:cut])
    # and through a memoryview that ends early (what a frame buffer hands over)
    mv = memoryview(data)
    for cut in cut_points(len(data))[:50]:
        assert decode_or_error(mv[:cut]) is not None


@secondary
@given(values, st.binary(min_size=1, max_size=8))
def test_truncated_decode_at_offset(v: Any, prefix: bytes) -> None:
    data = prefix + encode(v)
    for cut in cut_points(len(data) - len(prefix)):
        with pytest.raises(DecodeError):
            decode_at(data[: len(prefix) + cut], len(prefix))


def test_decode_at_past_the_end() -> None:
    with pytest.raises(DecodeError):
        decode_at(b"\x40", 1)
    with pytest.raises(DecodeError):
        decode(b"")


# --- constructors -----------------------------------------------------------------


@pytest.mark.parametrize("code", UNASSIGNED, ids=[f"{c:#04x}" for c in UNASSIGNED])
def test_unknown_constructor(code: int) -> None:
    for tail in (b"", b"\x00" * 20, b"\xff" * 20):
        must_fail(bytes([code]) + tail, f"{code:#04x}")
    # also inside a list, a map and as an array element constructor
    must_fail(bytes([0xC0, 0x02, 0x01, code]), f"{code:#04x}")
    must_fail(bytes([0xC1, 0x03, 0x02, 0x40, code]), f"{code:#04x}")
    must_fail(bytes([0xE0, 0x02, 0x00, code]), f"{code:#04x}")


def test_described_marker_is_no_array_element_constructor() -> None:
    must_fail(h("e0 05 01 00 53 01 00"))


# --- lying sizes and counts ---------------------------------------------------------


def peak_alloc(fn: Callable[[], Any]) -> int:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


LYING = [
    ("list32 of 2**32-1 bytes", "d0 ffffffff 00000001 40"),
    ("list32 of 2**32-1 elements", "d0 00000005 ffffffff 40"),
    ("list8 of 255 elements in 1 byte", "c0 02 ff 40"),
    ("map32 of 2**32-1 bytes", "d1 ffffffff 00000002 40 40"),
    ("map32 of 2**32-2 elements", "d1 00000006 fffffffe 40 40"),
    ("array32 of 2**32-1 bytes", "f0 ffffffff 00000001 40"),
    ("array32 of 2**32-1 nulls", "f0 00000005 ffffffff 40"),
    ("array32 of 2**32-1 uint0", "f0 00000005 ffffffff 43"),
    ("array32 of 2**32-1 ulong0", "f0 00000005 ffffffff 44"),
    ("array32 of 2**32-1 true", "f0 00000005 ffffffff 41"),
    ("array32 of 2**32-1 list0", "f0 00000005 ffffffff 45"),
    ("described array32 of 2**32-1 nulls", "f0 00000008 ffffffff 00 53 01 40"),
    ("array32 of 2**32-1 uint", "f0 00000009 ffffffff 70 00000001"),
    ("array32 of 2**32-1 strings", "f0 00000006 ffffffff a1 00"),
    ("array32 of 2**32-1 lists", "f0 00000007 ffffffff c0 01 00"),
    ("array32 of 2**32-1 arrays", "f0 00000008 ffffffff e0 02 00 40"),
    ("vbin32 of 2**32-1 bytes", "b0 ffffffff 00"),
    ("str32 of 2**32-1 bytes", "b1 ffffffff 61"),
    ("sym32 of 2**32-1 bytes", "b3 ffffffff 61"),
    ("vbin8 of 255 bytes", "a0 ff 00"),
]


@pytest.mark.parametrize(("what", "hex_"), LYING, ids=[w for w, _ in LYING])
def test_lying_size_or_count_fails_before_allocating(what: str, hex_: str) -> None:
    data = h(hex_)
    peak = peak_alloc(lambda: must_fail(data))
    assert peak < 64 * 1024, f"{what}: peak {peak} bytes"


def test_zero_width_elements_have_a_per_call_budget() -> None:
    """A few bytes per array must not buy millions of elements, even over many arrays."""
    one = h("f0 00000005 000186a0 40")  # 100_000 nulls in 10 bytes
    assert len(decode(one)) == 100_000
    body = one * 20  # 2_000_000 nulls in 200 bytes
    data = b"\xd0" + struct.pack(">II", len(body) + 4, 20) + body
    peak = peak_alloc(lambda: must_fail(data, "zero-width"))
    assert peak < 16 * 1024 * 1024
    # the budget is max_elements, and it is per call
    limits = Limits(max_elements=2_000_000)
    assert len(decode(data, limits)) == 20
    assert len(decode(data, limits)) == 20
    must_fail(h("e0 02 0b 40"), "limit", Limits(max_elements=10))
    assert len(decode(h("e0 02 0a 40"), Limits(max_elements=10))) == 10


def test_zero_width_array_with_bytes_left_over() -> None:
    must_fail(h("e0 03 02 40 40"))


# --- nesting ----------------------------------------------------------------------


def nested_lists(depth: int) -> bytes:
    data = b"\x45"
    for _ in range(depth):
        data = b"\xd0" + struct.pack(">II", len(data) + 4, 1) + data
    return data


def nested_arrays(depth: int) -> bytes:
    data = h("f0 00000005 00000000 40")  # empty array32 of nulls
    for _ in range(depth):
        # array32 of one array: element constructor f0, then the inner array minus its f0
        body = b"\xf0" + data[1:]
        data = b"\xf0" + struct.pack(">II", len(body) + 4, 1) + body
    return data


def nested_described(depth: int) -> bytes:
    return b"\x00\x53\xff" * depth + b"\x40"


def nested_maps(depth: int) -> bytes:
    data = h("c1 01 00")
    for _ in range(depth):
        data = b"\xd1" + struct.pack(">II", len(data) + 5, 2) + b"\x40" + data
    return data


@pytest.mark.parametrize("build", [nested_lists, nested_arrays, nested_described, nested_maps])
def test_nesting_limit(build: Callable[[int], bytes]) -> None:
    assert decode(build(10), Limits(max_depth=11)) is not None
    must_fail(build(10), "nesting", Limits(max_depth=5))
    must_fail(build(100), "nesting")  # default limit 64
    # far past the interpreter's recursion limit: still a DecodeError
    must_fail(build(5000), limits=Limits(max_depth=100_000))


@pytest.mark.parametrize("depth", [2, 3, 10])
def test_nesting_limit_is_exact(depth: int) -> None:
    data = nested_lists(depth)  # ``depth`` lists around a list0
    assert decode(data, Limits(max_depth=depth)) is not None
    must_fail(data, "nesting", Limits(max_depth=depth - 1))


def test_array_descriptor_counts_toward_depth() -> None:
    # array whose descriptor is a deeply nested list
    desc = nested_lists(70)
    body = b"\x00" + desc + b"\x40"
    data = b"\xf0" + struct.pack(">II", len(body) + 4, 1) + body
    must_fail(data, "nesting")


# --- element limits -----------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [[None] * 11, {i: None for i in range(6)}, list(range(11))],
    ids=["list", "map", "list-of-ints"],
)
def test_max_elements(value: Any) -> None:
    data = encode(value)
    must_fail(data, "limit", Limits(max_elements=10))
    assert decode(data, Limits(max_elements=12)) == value


def test_max_elements_for_arrays() -> None:
    from amqp10.types import Array, uint

    data = encode(Array(uint, [uint(i) for i in range(11)]))
    must_fail(data, "limit", Limits(max_elements=10))
    assert len(decode(data, Limits(max_elements=11))) == 11


def test_limits_must_be_sane() -> None:
    with pytest.raises(ValueError):
        Limits(max_depth=0)
    with pytest.raises(ValueError):
        Limits(max_elements=-1)


# --- invalid content ----------------------------------------------------------------

INVALID = [
    ("invalid UTF-8", "a1 02 c3 28", "UTF-8"),
    ("UTF-8 surrogate", "a1 03 ed a0 80", "UTF-8"),
    ("overlong UTF-8", "a1 02 c0 80", "UTF-8"),
    ("invalid UTF-8 in str32", "b1 00000001 ff", "UTF-8"),
    ("non-ASCII symbol", "a3 01 80", "ASCII"),
    ("non-ASCII sym32", "b3 00000002 c3a9", "ASCII"),
    ("boolean 0x02", "56 02", "boolean"),
    ("boolean 0xff", "56 ff", "boolean"),
    ("char surrogate", "73 0000d800", "char"),
    ("char beyond U+10FFFF", "73 00110000", "char"),
    ("char 0xffffffff", "73 ffffffff", "char"),
    ("odd map count", "c1 02 01 40", "odd"),
    ("odd map32 count", "d1 00000007 00000003 40 40 40", "odd"),
    ("list element overruns the list", "c0 02 01 a1 05 68656c6c6f", None),
    ("list elements underrun the list", "c0 04 01 40 40 40", None),
    ("list count short of its elements", "c0 03 01 40 40", None),
    ("list8 size 0", "c0 00 00", "size"),
    ("list32 size under 4", "d0 00000003 00000000", "size"),
    ("map elements underrun the map", "c1 04 02 40 40 40", None),
    ("array elements overrun", "e0 03 02 52 01", None),
    ("array elements underrun", "e0 05 01 52 01 02 03", None),
    ("array8 size 0", "e0 00 00", None),
    ("array without a constructor", "e0 01 00", "constructor"),
    ("array32 size under 4", "f0 00000003 00000000", None),
    ("described descriptor", "00 00 53 01 40 40", "described"),
    ("described descriptor in array", "e0 08 01 00 00 53 01 40 40 40", "described"),
    ("invalid UTF-8 in array", "e0 05 01 a1 02 c3 28", "UTF-8"),
    ("boolean 0x02 in array", "e0 03 01 56 02", "boolean"),
    ("char surrogate in array", "e0 06 01 73 0000dfff", "char"),
    ("unhashable map key", "c1 03 02 45 40", "key"),
    ("array map key", "c1 06 02 e0 02 00 40 40", "key"),
    ("composite with a bad field", "00 53 10 c0 03 01 55 01", None),
    ("trailing bytes", "40 40", "trailing"),
]


@pytest.mark.parametrize(("what", "hex_", "match"), INVALID, ids=[w for w, _, _ in INVALID])
def test_invalid_content(what: str, hex_: str, match: str | None) -> None:
    must_fail(h(hex_), match)


def test_described_key_with_list_value_is_hashable() -> None:
    # hashing a Described looks at its descriptor only, so this is a valid key
    got = decode(h("c1 06 02 00 53 09 45 40"))
    assert len(got) == 1


# --- fuzz ---------------------------------------------------------------------------


@given(st.binary(max_size=64))
def test_random_bytes(data: bytes) -> None:
    decode_or_error(data)


@given(st.binary(max_size=48), st.sampled_from(sorted(ASSIGNED)))
def test_random_bytes_after_a_valid_constructor(tail: bytes, code: int) -> None:
    decode_or_error(bytes([code]) + tail)
    decode_or_error(bytes([code]) + tail, Limits(max_depth=3, max_elements=8))


@secondary
@given(values, st.data())
def test_mutated_encodings(v: Any, data: st.DataObject) -> None:
    enc = bytearray(encode(v))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(enc) - 1))
        enc[i] = data.draw(st.integers(0, 255))
    decode_or_error(bytes(enc))
    decode_or_error(memoryview(enc))


@given(st.binary(max_size=64), st.integers(0, 70))
def test_decode_at_any_offset(data: bytes, offset: int) -> None:
    try:
        _, end = decode_at(data, offset)
    except DecodeError as exc:
        assert exc.condition == "amqp:decode-error"
    else:
        assert offset < end <= len(data)


def test_nesting_limit_is_capped() -> None:
    # a limit past MAX_DEPTH is MAX_DEPTH: 50,000 nested values fail with a DecodeError
    # (never a crash of the compiled build, whose native calls the recursion limit misses)
    assert Limits(max_depth=10**6).max_depth == MAX_DEPTH
    must_fail(nested_described(50_000), limits=Limits(max_depth=10**6))
