"""Consumer timeouts (RabbitMQ's ``consumer_timeout``): a consumer that holds a delivery
unsettled for longer than its queue's :attr:`~.QueuePolicy.consumer_timeout` loses its
channel (0-9-1) or link (1.0), and what it held goes back to the queue.

The time a delivery was made is not recorded per message: a front end asks
:meth:`UnsettledClock.overdue` once a second (its connection's tick) with what its
consumer holds unsettled, only where a queue has a timeout. The clock notes when it
first saw each delivery there, so a delivery times out no earlier than the timeout
after it was made and at most one check later. Nothing is added per message; a check
walks the unsettled deliveries of a consumer (1.0: only of a queue with a timeout) or
of a channel (0-9-1: only while it holds some).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import TypeVar

__all__ = ["UnsettledClock", "timeout_text"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class UnsettledClock:
    """When each unsettled delivery of one consumer (or channel) was first seen by a check."""

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        self._seen: dict[Hashable, float] = {}

    def overdue(self, unsettled: Mapping[K, V], timeout_of: Callable[[V], float | None], now: float) -> tuple[K, float] | None:
        """The first delivery of ``unsettled`` (in the order it was delivered) held longer
        than its timeout (``timeout_of`` its entry, seconds; None: none), with that timeout;
        None if no delivery is overdue. Deliveries no longer unsettled are forgotten."""
        seen = self._seen
        kept: dict[Hashable, float] = {}
        late: tuple[K, float] | None = None
        for key, entry in unsettled.items():
            timeout = timeout_of(entry)
            if timeout is None:
                continue
            first = kept[key] = seen.get(key, now)
            if late is None and now - first >= timeout:
                late = (key, timeout)
        self._seen = kept
        return late


def timeout_text(channel: int, timeout: float) -> str:
    """RabbitMQ's words for a 0-9-1 channel closed by a consumer timeout (PRECONDITION_FAILED)."""
    return (
        f"delivery acknowledgement on channel {channel} timed out. Timeout value used: {round(timeout * 1000)} ms. "
        "This timeout value can be configured, see consumers doc guide to learn more"
    )
