"""RFC-1982 serial number arithmetic on 32-bit sequence numbers (Part 2 §2.8.9).

Transfer-ids, delivery-ids and delivery-counts wrap at 2**32; comparing them
with ``<`` would break at the wrap, so every comparison goes through here.
"""

from __future__ import annotations

from typing import Final

MASK: Final = 0xFFFFFFFF
_HALF: Final = 0x80000000


def add(a: int, n: int) -> int:
    """``a + n`` modulo 2**32."""
    return (a + n) & MASK


def diff(a: int, b: int) -> int:
    """The signed distance ``a - b`` (in ``[-2**31, 2**31)``)."""
    d = (a - b) & MASK
    return d - 0x100000000 if d >= _HALF else d


def lt(a: int, b: int) -> bool:
    """``a`` precedes ``b`` in serial order."""
    return a != b and ((b - a) & MASK) < _HALF


def le(a: int, b: int) -> bool:
    """``a`` precedes or equals ``b`` in serial order."""
    return a == b or ((b - a) & MASK) < _HALF


def in_range(x: int, first: int, last: int) -> bool:
    """``first <= x <= last`` in serial order (an inclusive, possibly wrapping range)."""
    return ((x - first) & MASK) <= ((last - first) & MASK)
