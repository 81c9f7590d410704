"""Running totals of what the broker holds, kept as it changes so that reading them is O(1).

Queues and streams add to a :class:`Usage` as messages come and go (enqueue,
dequeue, expiry, purge, delete): checking the memory limit on every publisher
credit grant then costs the same with one queue as with 100,000. The
:class:`~amqp10.broker.core.broker.Broker` holds one (``broker.stats``) for
metrics and alarms to read.
"""

from __future__ import annotations

from bisect import bisect_left

__all__ = ["DETACHED", "Histogram", "Usage"]


class Usage:
    """Bytes of messages held: queued (not handed to a consumer), of which paged out (the
    bodies in the store only: core/paging.py), and on disk (persistent messages written to
    the store and not yet deleted from it)."""

    __slots__ = ("disk_bytes", "memory_bytes", "paged_bytes")

    def __init__(self) -> None:
        self.memory_bytes = 0
        """Bytes of every queued message, paged out or not (what queue byte limits count)."""
        self.disk_bytes = 0
        self.paged_bytes = 0

    @property
    def resident_bytes(self) -> int:
        """Bytes of queued messages whose bodies are in memory."""
        return self.memory_bytes - self.paged_bytes

    def as_dict(self) -> dict[str, int]:
        return {"memory_bytes": self.memory_bytes, "disk_bytes": self.disk_bytes, "paged_bytes": self.paged_bytes}


DETACHED = Usage()
"""Where a node that belongs to no broker (or no longer does) counts: read by nobody."""


class Histogram:
    """Observations counted into fixed buckets (upper bounds, inclusive) with their sum:
    what a Prometheus histogram reports, kept as plain numbers (read when scraped)."""

    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        """Per bucket, not cumulative; the last one is above every bound."""
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.count += 1
        self.sum += value
