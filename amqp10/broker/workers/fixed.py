"""Fixed-width little-endian numbers in bytes, for the internal link's records (:mod:`.link`).

``librt.strings`` (mypyc's runtime library, which comes with mypy) when it is installed:
in the compiled build (setup.py's ``COMPILED``) each read or write below is native code
that mypyc emits inline, with no call through the interpreter, no tuple and no boxed
number, where a ``struct`` call costs all three. Without it (a pure install: mypy is a
development tool), the same functions on ``struct`` and ``bytearray``, with the same
results (tests/broker/workers/test_fixed.py holds them to each other), and the same
errors for a read past the end (:class:`IndexError`) or a number out of range
(:class:`ValueError`).

This module itself stays interpreted (it is not in ``COMPILED``): a compiled module that
imports these names calls librt's natively (mypy reads the ``TYPE_CHECKING`` branch).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

__all__ = [
    "FALLBACK",
    "BytesWriter",
    "read_f64_le",
    "read_i32_le",
    "read_i64_le",
    "write_f64_le",
    "write_i32_le",
    "write_i64_le",
]


class _BytesWriter(bytearray):
    """librt's ``BytesWriter`` on a ``bytearray``: ``append`` (a byte), ``write`` (bytes),
    ``getvalue`` (what was written, as bytes)."""

    __slots__ = ()

    def write(self, b: bytes | bytearray, /) -> None:
        self += b

    def getvalue(self) -> bytes:
        return bytes(self)


def _writer(fmt: str) -> Any:
    pack = struct.Struct(fmt).pack

    def write(b: bytearray, n: int, /) -> None:
        try:
            b += pack(n)
        except struct.error as exc:
            raise ValueError(str(exc)) from None

    return write


def _reader(fmt: str) -> Any:
    s = struct.Struct(fmt)
    unpack_from, size = s.unpack_from, s.size

    def read(b: bytes, index: int, /) -> Any:
        if index < 0:
            raise ValueError("index must be non-negative")
        if index + size > len(b):
            raise IndexError(f"index {index} out of range for bytes of length {len(b)}")
        return unpack_from(b, index)[0]

    return read


FALLBACK: dict[str, Any] = {
    "BytesWriter": _BytesWriter,
    "write_i32_le": _writer("<i"),
    "write_i64_le": _writer("<q"),
    "write_f64_le": _writer("<d"),
    "read_i32_le": _reader("<i"),
    "read_i64_le": _reader("<q"),
    "read_f64_le": _reader("<d"),
}
"""The ``struct`` versions by name, whichever is in use (the tests hold them to librt's)."""

if TYPE_CHECKING:
    from librt.strings import BytesWriter as BytesWriter
    from librt.strings import read_f64_le as read_f64_le
    from librt.strings import read_i32_le as read_i32_le
    from librt.strings import read_i64_le as read_i64_le
    from librt.strings import write_f64_le as write_f64_le
    from librt.strings import write_i32_le as write_i32_le
    from librt.strings import write_i64_le as write_i64_le
else:
    try:
        from librt.strings import (
            BytesWriter,
            read_f64_le,
            read_i32_le,
            read_i64_le,
            write_f64_le,
            write_i32_le,
            write_i64_le,
        )
    except ImportError:  # a pure install, without mypy's runtime library
        globals().update(FALLBACK)
