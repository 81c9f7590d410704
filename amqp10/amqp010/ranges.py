"""Sets of command ids as 0-10's ``sequence-set`` holds them: sorted, merged, inclusive ranges."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from .codec import SequenceSet

__all__ = ["RangeSet"]


class RangeSet:
    """Command ids, kept as merged inclusive ranges (ids are taken as plain integers: a
    session that wraps its 32-bit ids around is not served)."""

    __slots__ = ("ranges",)

    def __init__(self, ranges: Iterable[tuple[int, int]] = ()) -> None:
        self.ranges: list[list[int]] = []
        for lo, hi in ranges:
            self.add_range(lo, hi)

    def add(self, n: int) -> None:
        r = self.ranges
        if r and r[-1][1] + 1 == n:  # the usual: the next id in order
            r[-1][1] = n
            return
        self.add_range(n, n)

    def add_range(self, lo: int, hi: int) -> None:
        if hi < lo:
            lo, hi = hi, lo
        merged: list[list[int]] = []
        placed = False
        for a, b in self.ranges:
            if b + 1 < lo:
                merged.append([a, b])
            elif hi + 1 < a:
                if not placed:
                    merged.append([lo, hi])
                    placed = True
                merged.append([a, b])
            else:
                lo, hi = min(a, lo), max(b, hi)
        if not placed:
            merged.append([lo, hi])
        merged.sort()
        self.ranges = merged

    def remove_range(self, lo: int, hi: int) -> None:
        out: list[list[int]] = []
        for a, b in self.ranges:
            if b < lo or a > hi:
                out.append([a, b])
                continue
            if a < lo:
                out.append([a, lo - 1])
            if b > hi:
                out.append([hi + 1, b])
        self.ranges = out

    def __contains__(self, n: object) -> bool:
        return isinstance(n, int) and any(a <= n <= b for a, b in self.ranges)

    def ids(self) -> Iterator[int]:
        for a, b in self.ranges:
            yield from range(a, b + 1)

    def __bool__(self) -> bool:
        return bool(self.ranges)

    def sequence_set(self) -> SequenceSet:
        return tuple((a, b) for a, b in self.ranges)
